"""The plan predicts what the backfill then publishes, writes nothing, and readers see the correction flag."""

import datetime as dt
import re
import time

import duckdb
import pytest

from atlasmart_assets import extracts, generate, lab, plan
from atlasmart_assets.assets.graph import asset_graph
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_tests import crash_worker, state


@pytest.mark.parametrize("published_as", [
    "select *, 1 as legacy_flag from fact.fct_order_lines_as_published",  # a column the candidate lacks
    # finer than the candidate's decimal(18, 2): a difference of 0.004 is a change
    "select * replace (cast(unit_price as decimal(18, 4)) + case when line_id = '2026-09-18-L000001' then 0.004 "
    "else 0 end as unit_price) from fact.fct_order_lines_as_published",
], ids=["extra-column", "finer-type"])
def test_a_plan_compares_with_the_published_fact_as_its_schema_has_it(env, published, published_as) -> None:
    """A plan reads the warehouse without migrating it: its published fact may have another schema's columns. The
    comparison takes them as they are, a chunk of days per hold."""
    published(("2026-09-17", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    with duckdb.connect(str(env.warehouse_path)) as con:
        con.execute("alter view fact.fct_order_lines rename to fct_order_lines_as_published")
        con.execute(f"create view fact.fct_order_lines as {published_as}")
    p = plan.make(Warehouse(), asset_graph(), "2026-09-17", "2026-09-20", ["fact/fct_order_lines"])
    changed = {d: i.sample_line_ids for d, i in p.impact.items() if i.lines_changed}
    expected = {"2026-09-20": ["2026-09-20-L0007"]}
    if "0.004" in published_as:
        expected["2026-09-18"] = ["2026-09-18-L000001"]
    assert changed == expected


def test_plan_predicts_the_publication_and_writes_nothing(env, instance, published) -> None:
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
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
    mart_of = {m.partition: m for m in marts}
    for day, predicted in p.impact.items():
        assert facts[day].metadata["dagster/row_count"].value == predicted.rows_after, "per-partition row count"
        assert mart_of[day].metadata["sha256"].value == predicted.sha256_after, "the extract's, on the mart's event"
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
        generate.write_raw(env.raw_dir, day, generate.synthetic_lines(day, 1_000, 40))
    assert run_chain(instance, "2026-09-01", "2026-09-08").success
    # The backfill loads raw, then its correction flags the window and waits at the gate `window_flagged`: the
    # flag is read while the correction is certainly in progress, and again once it has published.
    gates = tmp_path / "gates"
    gates.mkdir()
    for step in ("raw__order_lines", "correction"):
        (gates / f"{step}.open").touch()
    worker = crash_worker.start("2026-09-01", "2026-09-08", {"ATLASMART_GATE_DIR": str(gates)})
    deadline = time.monotonic() + 300
    while not list(gates.glob("*.window_flagged.arrived")):
        assert worker.is_alive(), f"the backfill ended (status {worker.exitcode}) before flagging its window"
        assert time.monotonic() < deadline, "the backfill never flagged its window"
        time.sleep(0.05)
    flagged = _flags(env)
    (gates / "window_flagged.open").touch()
    worker.join(timeout=300)
    assert worker.exitcode == 0
    assert {d.isoformat() for d, _ in flagged} == {f"2026-09-0{k}" for k in range(1, 9)}
    assert {b for _, b in flagged} == {"bf-crash"}
    assert _flags(env) == []

    # A failing backfill clears its flag too (the run ends without publishing).
    (env.raw_dir / "partition=2026-09-03.json").write_text("{")
    result = run_chain(instance, "2026-09-02", "2026-09-04", {"dagster/backfill": "bf-fails"})
    assert not result.success and _flags(env) == []


def test_plan_job_shows_the_plan_in_the_ui(env, instance, published) -> None:
    from atlasmart_assets.definitions import defs

    published(("2026-09-19", "2026-09-20"))
    before = state.snapshot(env)
    result = defs.resolve_job_def("plan_job").execute_in_process(
        instance=instance, run_config={"ops": {"plan_backfill": {"config": {"start": "2026-09-19", "end": "2026-09-21"}}}})
    assert result.success and state.snapshot(env) == before
    [obs] = [e.asset_observation_data.asset_observation for e in result.all_events
             if e.event_type_value == "ASSET_OBSERVATION"]
    assert obs.metadata["refused_by_fence"].value == ["2026-09-21"]
    assert "data:image/png;base64," in obs.metadata["backfill_plan"].value
    # A plan builds what the backfill would: a long one says each phase with its counts, time and estimate.
    lines = [e.user_message for e in instance.all_logs(result.run_id) if " so far, " in (e.user_message or "")]
    said = [re.search(r"^plan 2026-09-19\.\.2026-09-21 \[(\d)/5\] (\w+): (.*); [0-9.]+ s so far, (.*)$", line)
            for line in lines]
    assert all(said) and [(m[1], m[2]) for m in said] == [
        ("1", "parse"), ("2", "build"), ("3", "compare"), ("4", "stale"), ("5", "events"), ("5", "events")], lines
    assert "2 batch file(s) of 2 day(s)" in said[0][3] and "candidates for 2 day(s)" in said[1][3], "fenced out: 09-21"
    assert "day(s) would change" in said[2][3]
    assert all(re.fullmatch(r"about \d+ s to go", m[4]) for m in said[:4]) and said[-1][4] == "done", lines


def _long_plan(n_days: int) -> "plan.Plan":
    days = [(dt.date(2021, 9, 22) + dt.timedelta(days=k)).isoformat() for k in range(n_days)]
    impact = {d: plan.DayImpact(d, 20_000 + k, 20_000 + k + k % 3, [20_000 + k, 9_000, 60_000, 6e6 + k, 3e6, 3e6 + k],
                                [20_000 + k + k % 3, 9_000, 60_000, 6e6 + 2 * k, 3e6, 3e6 + 2 * k], "a" * 64,
                                "b" * 64 if k % 3 else "a" * 64, k % 3, 0, k % 5, [f"L-{d}-{j:06d}" for j in range(5)])
              for k, d in enumerate(days)}
    stale = {d: ["new batch B-" + d + "-02"] for d in days}
    return plan.Plan(f"{days[0]}..{days[-1]}", days, [], None, ["raw/order_lines", "staged/order_lines"],
                     {"2021-09-21": "c" * 64}, {"2026-09-21": "d" * 64}, impact, stale)


@pytest.mark.parametrize("n_days", [365, 5 * 365])
def test_a_long_plan_fits_one_event_and_reads_whole(n_days: int) -> None:
    """A plan's observation is one event: a year's or five years' (a table row, an impact entry and a chart point per
    day, every day stale) stays under 64 KiB. The table shows whole rows and says how many it leaves out, the days
    the backfill leaves unchanged are always named, the figures say what they left out."""
    import dagster as dg

    p = _long_plan(n_days)
    meta = plan.observation_metadata(p)
    size = len(dg.serialize_value(dg.AssetObservation(asset_key=["fact", "fct_order_lines"], metadata=meta)))
    assert size < 64 * 1024, size
    text = meta["backfill_plan"].value
    assert "data:image/png;base64," in text, "the chart is drawn (weekly), not dropped"
    table = [line for line in text.splitlines() if line.startswith("| 20")]
    assert table and all(line.endswith(" |") and line.count("|") == 7 for line in table), "whole rows only"
    assert f"| … | {n_days - len(table)} more day(s), every one in `atlasmart plan --json` |" in text
    assert "2021-09-21 `cccccccccccc`" in text and "2026-09-21 `dddddddddddd`" in text, "the guard line stays"
    changing = [d for k, d in enumerate(p.impact) if k % 3]
    assert meta["partitions_changing_count"] == len(changing)
    assert meta["partitions_changing"] == changing[:plan.PLAN_DAYS_LISTED]
    assert "entries_omitted" in meta["plan"].value, "the figures say what they left out"
    assert plan.markdown(p).count("\n| 20") == n_days, "the command prints every row"


def test_the_plan_commands_chart_has_a_point_per_day() -> None:
    """The command's --png file is the whole chart, a point per day, never the event's weekly one fitted to 18 KiB."""
    p = _long_plan(365)
    whole = plan.png(p)
    assert whole is not None and whole.startswith(b"\x89PNG") and len(whole) > plan.PLAN_CHART_MAX_BYTES
    fitted = plan.png(p, plan.PLAN_CHART_MAX_BYTES)
    assert fitted is not None and len(fitted) <= plan.PLAN_CHART_MAX_BYTES


def test_the_plan_command_writes_its_chart(env, published, tmp_path, capsys) -> None:
    from atlasmart_assets import cli

    published(("2026-09-19", "2026-09-20"))
    out = tmp_path / "plan.png"
    assert cli.main(["plan", "--from", "2026-09-19", "--to", "2026-09-20", "--png", str(out)]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert "Backfill plan 2026-09-19..2026-09-20" in capsys.readouterr().out


def test_a_plan_with_an_override_too_long_to_record_says_the_backfill_is_refused(env, published) -> None:
    """The plan uses the run's decisions: an override past REASON_MAX_CHARS refuses the whole backfill, as it would
    refuse the run (a review found the plan put every day in scope)."""
    from atlasmart_assets.contract import REASON_MAX_CHARS
    published(("2026-09-18", "2026-09-20"), ("2026-09-21", None))
    p = plan.make(Warehouse(), asset_graph(), "2026-09-20", "2026-09-21", ["raw/order_lines"],
                  fence_override="x" * (REASON_MAX_CHARS + 1), with_impact=False)
    assert p.in_scope == [] and p.refused == ["2026-09-20", "2026-09-21"] and "past the 1,000" in (p.refusal or "")
    assert ":no_entry: refused: 2026-09-20, 2026-09-21" in plan.markdown(p)
    fenced = plan.make(Warehouse(), asset_graph(), "2026-09-20", "2026-09-21", ["raw/order_lines"], with_impact=False)
    assert ":no_entry: refused by the fence: 2026-09-21" in plan.markdown(fenced)
