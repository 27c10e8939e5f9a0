"""What a run writes to the event log stays small and per partition; long steps log progress; a backfill takes
every core only while the current lane is idle."""

import json

import dagster as dg

from atlasmart_assets import capacity
from atlasmart_assets.contract import CURRENT_LANE_TAGS
from atlasmart_assets.lab import run_chain
from atlasmart_assets.progress import Progress

HISTORY = ("2026-09-01", "2026-09-19")


def test_each_partition_carries_its_own_figures_and_no_event_is_large(env, instance) -> None:
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-meta"})
    assert result.success
    records = instance.fetch_materializations(dg.AssetKey(["fact", "fct_order_lines"]), limit=100).records
    by_day = {r.partition_key: r.asset_materialization.metadata for r in records}
    assert len(by_day) == 19
    rows = {d: m["dagster/row_count"].value for d, m in by_day.items()}
    manifests = {d: json.loads((env.raw_dir / f"partition={d}.json").read_text())["manifest"]["controls"]["lines"]
                 for d in rows}
    assert rows == manifests, "each day's own row count, not the run's total"
    # The run's own figures are written once per asset, on the newest day's event, not copied into every day's.
    for key in (["raw", "order_lines"], ["staged", "order_lines"], ["fact", "fct_order_lines"], ["mart", "revenue_daily"]):
        events = instance.fetch_materializations(dg.AssetKey(key), limit=100).records
        carrying = sorted(r.partition_key for r in events if "window" in r.asset_materialization.metadata
                          and r.run_id == result.run_id)
        assert carrying == [HISTORY[1]], (key, carrying)
        newest = next(r for r in events if r.partition_key == HISTORY[1]).asset_materialization.metadata
        assert newest["window"].value == f"{HISTORY[0]}..{HISTORY[1]}" and "lock_hold_max_s" in newest
    sizes = [len(e.to_json()) if hasattr(e, "to_json") else len(str(e)) for e in instance.all_logs(result.run_id)]
    assert max(sizes) < 64 * 1024, max(sizes)
    logs = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    assert any("[4/4] publish" in m and "so far" in m for m in logs), "the correction logs its phases"


def test_progress_estimates_what_remains() -> None:
    lines: list[str] = []
    progress = Progress(lines.append, "job", (("a", 1.0), ("b", 3.0)))
    progress.done("a", "10 rows")
    progress.done("b", "done it")
    assert lines[0].startswith("job [1/2] a: 10 rows;") and "to go" in lines[0]
    assert lines[1].startswith("job [2/2] b: done it;") and lines[1].endswith("done")


def test_a_backfill_yields_cores_while_the_current_lane_is_busy(instance) -> None:
    assert capacity.backfill_threads(instance, 1) is None, "idle current lane: every core"
    run = instance.create_run_for_job(dg.GraphDefinition("noop").to_job(), tags=CURRENT_LANE_TAGS)
    assert run.status == dg.DagsterRunStatus.NOT_STARTED
    assert capacity.current_lane_active(instance), "a current-lane run not yet finished"
    assert capacity.backfill_threads(instance, 1) == 1
