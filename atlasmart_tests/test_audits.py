"""Each audit passes on good data and fails on a crafted candidate; a failed audit publishes nothing."""

import json

import pytest

from atlasmart_assets import audits, warehouse
from atlasmart_assets.assets.common import Step
from atlasmart_assets.assets.fact_mart import CANDIDATE_UNIQUE, CONTROLS_MATCH_RAW, ROW_DELTA, correct
from atlasmart_assets.checks.published import published_fact_unique, published_mart_matches_fact
from atlasmart_assets.lab import run_chain
from atlasmart_assets.window import RunInfo, Window
from atlasmart_tests import state

DAY = "2026-09-19"


def test_row_delta_verdicts() -> None:
    first = audits.row_delta("c", ("a",), {"d": 10}, {}, 0.2)
    same = audits.row_delta("c", ("a",), {"d": 10}, {"d": 10}, 0.2)
    grew = audits.row_delta("c", ("a",), {"d": 11}, {"d": 10}, 0.2)
    doubled = audits.row_delta("c", ("a",), {"d": 20}, {"d": 10}, 0.2)
    shrunk = audits.row_delta("c", ("a",), {"d": 7}, {"d": 10}, 0.2)
    assert first.passed and same.passed
    assert not grew.passed and grew.severity == audits.WARN and not grew.blocks
    assert doubled.blocks and "doubled" in doubled.description
    assert shrunk.blocks and "shrank" in shrunk.description


CRAFTS = {
    "duplicated_line": ("insert into staged select * from staged limit 1", CANDIDATE_UNIQUE),
    "doubled_partition": ("insert into staged select * replace (line_id || '-copy' as line_id) from staged", ROW_DELTA),
    "shrunk_partition": ("delete from staged where line_id in (select line_id from staged order by line_id limit 6)",
                         ROW_DELTA),
    "control_mismatch": ("update staged set quantity = quantity + 1 where line_id = (select min(line_id) from staged)",
                         CONTROLS_MATCH_RAW),
}


@pytest.mark.parametrize("craft", sorted(CRAFTS))
def test_crafted_candidate_fails_its_audit_and_publishes_nothing(env, published, craft) -> None:
    published(("2026-09-18", "2026-09-20"))
    before = state.snapshot(env)
    window, run_id = Window.of(DAY), f"crafted-{craft}"
    scratch = warehouse.scratch_path(env, run_id)
    env.scratch_dir.mkdir(parents=True, exist_ok=True)
    warehouse.copy_out(env, scratch, "staged.order_lines", window, "staged")
    con = warehouse.open_scratch(env, run_id)
    con.execute(CRAFTS[craft][0])
    con.close()

    results, publication, _ = correct(Step(env, window, RunInfo(run_id, "bf-crafted")))

    failed = {a.check for a in results if a.blocks}
    assert CRAFTS[craft][1] in failed, results
    assert publication is None
    assert state.snapshot(env) == before


def test_good_candidate_passes_every_audit(env, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    run_id = "good"
    scratch = warehouse.scratch_path(env, run_id)
    warehouse.copy_out(env, scratch, "staged.order_lines", Window.of(DAY), "staged")
    results, publication, _ = correct(Step(env, Window.of(DAY), RunInfo(run_id)))
    assert all(a.passed for a in results), results
    assert publication is not None and publication.changed == []


def _check(result, name):
    [evaluation] = [e for e in result.get_asset_check_evaluations() if e.check_name == name]
    return evaluation


def test_old_shape_file_fails_required_fields(env, instance, published) -> None:
    published(("2026-09-18", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    doc = json.loads(path.read_text())
    doc["manifest"]["schema_version"] = 1
    for line in doc["lines"]:
        line["cost"] = line.pop("unit_cost")  # the old payload named it differently
    path.write_text(json.dumps(doc))
    result = run_chain(instance, DAY)
    assert not result.success
    evaluation = _check(result, "raw_order_lines_required_fields_present")
    assert not evaluation.passed and "lack unit_cost" in evaluation.description
    assert state.snapshot(env) == before


def test_mutated_raw_fails_loudly(env, instance, published) -> None:
    published((DAY, None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    path.write_text(path.read_text().replace('"records"', ' "records"'))  # same data, different bytes
    result = run_chain(instance, DAY)
    assert not result.success
    evaluation = _check(result, "raw_order_lines_sha256_unchanged")
    assert not evaluation.passed and "never rewritten in place" in evaluation.description
    assert state.snapshot(env) == before


def test_published_checks_catch_another_writer(env, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    window = Window.of("2026-09-18", "2026-09-20")
    assert published_fact_unique(env, window).passed and published_mart_matches_fact(env, window).passed
    with warehouse.connect(env) as con:
        con.execute("insert into fact.fct_order_lines select * from fact.fct_order_lines "
                    "where partition_date = '2026-09-19' limit 1")
        con.execute("update mart.revenue_daily set gmv = gmv + 1 where partition_date = '2026-09-20'")
    dup, drift = published_fact_unique(env, window), published_mart_matches_fact(env, window)
    assert dup.blocks and dup.figures["duplicate_line_ids"]["2026-09-19"] == 1
    assert drift.blocks and "2026-09-20" in drift.figures["mismatches"]
