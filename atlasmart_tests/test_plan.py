"""The plan predicts what the backfill then publishes, writes nothing, and readers see the correction flag."""

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from atlasmart_assets import extracts, generate, lab, plan
from atlasmart_assets.assets.graph import asset_graph
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_tests import state

REPO = Path(__file__).resolve().parent.parent


def test_plan_predicts_the_publication_and_writes_nothing(env, instance) -> None:
    assert run_chain(instance, "2026-09-17", "2026-09-20").success and run_chain(instance, "2026-09-21").success
    lab.publish_legacy_incident(Warehouse())
    before = state.snapshot(env)
    raw_before = state.table_rows(env, "raw.order_lines")

    p = plan.make(Warehouse(), asset_graph(), "2026-09-18", "2026-09-21", ["fact/fct_order_lines"])

    assert state.snapshot(env) == before and state.table_rows(env, "raw.order_lines") == raw_before
    assert p.in_scope == ["2026-09-18", "2026-09-19", "2026-09-20"] and p.refused == ["2026-09-21"]
    assert p.assets == ["fact/fct_order_lines", "mart/revenue_daily"]
    assert p.neighbours == {"2026-09-17": before_sha(env, "2026-09-17")}
    assert p.protected == {"2026-09-21": before_sha(env, "2026-09-21")}
    assert [d for d, i in p.impact.items() if i.changed] == ["2026-09-20"]
    assert p.impact["2026-09-20"].lines_changed == 1 and p.impact["2026-09-20"].sample_line_ids == ["2026-09-20-L0007"]
    assert p.impact["2026-09-20"].controls_now[4] == 435 and p.impact["2026-09-20"].controls_after[4] == 425
    assert plan.png(p).startswith(b"\x89PNG")

    result = run_chain(instance, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-planned"})
    assert result.success
    marts = [m for m in result.asset_materializations_for_node("correction") if m.asset_key.path[0] == "mart"]
    charts = [m for m in marts if "change_chart" in m.metadata]
    assert len(marts) == 3 and len(charts) == 1, "the run-wide chart is attached once, not to every partition"
    assert charts[0].metadata["change_chart"].value.startswith("![rows, gmv and cost before/after](data:image/png;base64,")
    facts = {m.partition: m for m in result.asset_materializations_for_node("correction") if m.asset_key.path[0] == "fact"}
    for day, predicted in p.impact.items():
        assert facts[day].metadata["dagster/row_count"].value == predicted.rows_after, "per-partition row count"
        assert facts[day].metadata["sha256"].value == predicted.sha256_after
    for day, predicted in p.impact.items():
        published = extracts.read(env, day)
        assert published["controls"] == predicted.controls_after and published["sha256"] == predicted.sha256_after
        assert len(state.table_rows(env, "fact.fct_order_lines", f"partition_date = '{day}'")) == predicted.rows_after
    assert state.files(env.published_dir)["partition=2026-09-21.json"] == before["extracts"]["partition=2026-09-21.json"]


def before_sha(cfg, day: str) -> str:
    return extracts.read(cfg, day)["sha256"]


def _flags(cfg) -> list[tuple]:
    return state.table_rows(cfg, "(select partition_date, correction_backfill_id from mart.revenue_daily_v "
                                 "where correction_in_progress)")


def test_reader_sees_the_flag_during_a_backfill_and_not_after(env, instance, tmp_path) -> None:
    for k in range(8):
        day = dt.date(2026, 9, 1) + dt.timedelta(days=k)
        generate.write_raw(env.raw_dir, day, generate.synthetic_lines(day, 4_000, 40))
    assert run_chain(instance, "2026-09-01", "2026-09-08").success
    out, stop = tmp_path / "flags.json", tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(env.warehouse_path), str(out), str(stop)], cwd=REPO)
    worker = subprocess.Popen([sys.executable, "-m", "atlasmart_tests.crash_worker", "2026-09-01", "2026-09-08"],
                              cwd=REPO, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert worker.wait(timeout=180) == 0
    time.sleep(0.5)
    stop.touch()
    assert reader.wait(timeout=30) == 0
    seen = json.loads(out.read_text())
    assert any(s and s[0][1] == "bf-crash" for s in seen), "the reader never saw the correction flag"
    assert _flags(env) == []

    # A failing backfill clears its flag too (the run ends without publishing).
    (env.raw_dir / "partition=2026-09-03.json").write_text("{")
    result = run_chain(instance, "2026-09-02", "2026-09-04", {"dagster/backfill": "bf-fails"})
    assert not result.success and _flags(env) == []


READER = """
import json, sys, time, duckdb
path, out, stop = sys.argv[1:4]
seen = []
while not __import__('os').path.exists(stop):
    try:
        with duckdb.connect(path, read_only=True) as con:
            seen.append(con.execute("select distinct partition_date::varchar, correction_backfill_id "
                                    "from mart.revenue_daily_v where correction_in_progress order by 1").fetchall())
    except duckdb.Error:
        pass
    time.sleep(0.01)
open(out, 'w').write(json.dumps(seen))
"""


def test_plan_job_shows_the_plan_in_the_ui(env, instance) -> None:
    from atlasmart_assets.definitions import defs

    assert run_chain(instance, "2026-09-19", "2026-09-20").success
    before = state.snapshot(env)
    result = defs.resolve_job_def("plan_job").execute_in_process(
        instance=instance, run_config={"ops": {"plan_backfill": {"config": {"start": "2026-09-19", "end": "2026-09-21"}}}})
    assert result.success and state.snapshot(env) == before
    [obs] = [e.asset_observation_data.asset_observation for e in result.all_events
             if e.event_type_value == "ASSET_OBSERVATION"]
    assert obs.metadata["refused_by_fence"].value == ["2026-09-21"]
    assert "data:image/png;base64," in obs.metadata["backfill_plan"].value
