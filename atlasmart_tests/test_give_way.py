"""How a backfill shares the machine and the warehouse with today's load, beyond the run metadata's tests: a
backfill given the lane tag, the plan's scratch work, the collection of abandoned rows, a lock held past its
timeout (a review's cases, 2026-12-07; each failed on a53dd2a)."""

import os

import dagster as dg
import pytest

from atlasmart_assets import capacity, pausable
from atlasmart_assets.contract import BACKFILL_TAG, CURRENT_LANE_TAGS
from atlasmart_assets.lab import run_chain

HISTORY = ("2026-09-01", "2026-09-10")


def _newest_figures(instance: dg.DagsterInstance, key: list[str], run_id: str) -> dict:
    [record] = [r for r in instance.fetch_materializations(dg.AssetKey(key), limit=100).records
                if r.partition_key == HISTORY[1] and r.run_id == run_id]
    return record.asset_materialization.metadata


def test_a_backfill_carrying_the_lane_tag_does_not_give_way_to_itself(env, instance, monkeypatch) -> None:
    """A backfill launched with atlasmart/lane=current among its tags (the UI lets an operator add any tag): with no
    other run in the instance, nothing is today's load. Its own STARTED run record matches the current-lane filter,
    so it pauses its scratch work and waits before every hold of its long writes, each up to
    ATLASMART_BACKFILL_GIVE_WAY_S (a minute by default), for itself."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "5")
    monkeypatch.setenv("ATLASMART_BACKFILL_GIVE_WAY_S", "1")
    result = run_chain(instance, *HISTORY, {**CURRENT_LANE_TAGS, BACKFILL_TAG: "bf-self-tagged"})
    assert result.success
    figures = {key[0]: _newest_figures(instance, key, result.run_id)
               for key in (["raw", "order_lines"], ["fact", "fct_order_lines"])}
    waited = {k: f["gave_way_total_s"].value for k, f in figures.items()}
    # Asking the run storage takes milliseconds; a wait for itself took the bound (1 s) before each of 2-4 holds.
    assert all(w < 0.5 for w in waited.values()), f"waited for today's load, which was itself: {waited}"
    if pausable.AVAILABLE:
        paused = {k: f["scratch_paused_s"].value for k, f in figures.items()}
        assert all(p < 0.5 for p in paused.values()), f"paused its scratch work for itself: {paused}"


@pytest.mark.skipif(not capacity.LOWERS, reason="per-thread niceness is Linux's")
def test_a_years_plan_builds_beside_todays_load_as_a_backfill_would(env, instance, published, monkeypatch,
                                                                     tmp_path) -> None:
    """The README's backfill how-to says to preview a backfill first (`atlasmart plan` or the plan_job): the plan
    parses and builds every day of the window exactly as the backfill would (a year's: 7.3 M records, the bench's
    `[2/5] build` line). That scratch work is a backfill's in size, but it runs at the caller's priority, on every
    core, never paused, whatever today's load is doing: plan.make takes no Dagster instance, so it cannot see a
    current-lane run, and its run carries neither lane's tag."""
    from atlasmart_assets import raw_files
    from atlasmart_assets.definitions import defs
    from atlasmart_tests.current_runs import running_current_run

    published(("2026-09-19", "2026-09-20"))
    monkeypatch.setenv("ATLASMART_BACKFILL_GIVE_WAY_S", "0.5")
    seen = tmp_path / "parsed-at"
    load_window = raw_files.load_window

    def recording(*args, **kwargs):
        seen.write_text(str(os.getpriority(os.PRIO_PROCESS, 0)))
        return load_window(*args, **kwargs)

    monkeypatch.setattr(raw_files, "load_window", recording)
    running_current_run(instance)  # today's load, running
    result = defs.resolve_job_def("plan_job").execute_in_process(
        instance=instance, run_config={"ops": {"plan_backfill": {"config": {"start": "2026-09-01",
                                                                            "end": "2026-09-20"}}}})
    assert result.success
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    assert int(seen.read_text()) > caller, (
        f"the plan parsed 20 days at niceness {seen.read_text()} (the caller's: {caller}) beside today's load")


def test_a_backfill_collecting_abandoned_rows_gives_way_to_todays_load(env, instance, published,
                                                                       monkeypatch) -> None:
    """A backfill drops the rows a crashed run wrote ahead (a year's: ~7 M lines per layer) a chunk of days per hold,
    at its correction's start. Those holds are a long write like any other, but they neither wait while a current-
    lane run is queued or running nor can be given up: they run back to back on every core beside today's load
    (publish._drop takes no give_way; collect_abandoned is called without one). Here: abandoned rows over three
    one-day chunks, today's load running throughout, a backfill of one day (whose own write is one short hold)."""
    from atlasmart_assets.resources import Warehouse
    from atlasmart_tests import state
    from atlasmart_tests.current_runs import running_current_run

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")
    published(("2026-09-18", "2026-09-20"))
    with Warehouse().writer() as con:  # a backfill killed between its rows written ahead and its commit
        con.execute("insert into audit.pending_versions (publication_id, run_id, window_start, window_end) "
                    "values ('pub-killed', 'r-killed', '2026-09-18', '2026-09-20')")
        con.execute("insert into versions.staged_order_lines select * replace ('pub-killed' as publication_id, "
                    "-2 as version) from versions.staged_order_lines")
    monkeypatch.setenv("ATLASMART_BACKFILL_GIVE_WAY_S", "0.5")
    running_current_run(instance)  # today's load, running (and never ending: each wait lasts its bound)
    result = run_chain(instance, "2026-09-05", None, {BACKFILL_TAG: "bf-collects"})
    assert result.success
    assert state.table_rows(env, "audit.pending_versions") == [], "the abandoned rows were collected"
    [record] = [r for r in instance.fetch_materializations(dg.AssetKey(["fact", "fct_order_lines"]), limit=10).records
                if r.run_id == result.run_id]
    waited = record.asset_materialization.metadata["gave_way_total_s"].value
    assert waited >= 3 * 0.5, f"three drop holds beside today's load, {waited} s given way"


def test_a_lock_timeout_fails_the_step_naming_its_window_and_the_wait(env, instance, published,
                                                                      monkeypatch) -> None:
    """Another process (an analyst's DuckDB client, README Known limits) holds the warehouse past
    ATLASMART_LOCK_TIMEOUT_S. The step fails with DuckDB's own text, `IO Error: Could not set lock on file ...
    Conflicting lock is held in ... (PID n)`: it names neither the partitions the run was publishing nor that it
    waited the timeout (it reads as if AtlasMart did not wait at all), nor the setting to raise."""
    import subprocess
    import sys

    from atlasmart_tests import state

    published(("2026-09-18", "2026-09-20"))  # a warehouse for the other process to hold
    monkeypatch.setenv("ATLASMART_LOCK_TIMEOUT_S", "1")
    holder = subprocess.Popen([sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                               "print('held', flush=True); time.sleep(300)", str(env.warehouse_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = run_chain(instance, "2026-09-01", "2026-09-10", {BACKFILL_TAG: "bf-locked-out"})
    finally:
        holder.kill()
        holder.wait()
    assert not result.success
    failure = " | ".join(state.failure_causes(result))  # the step's error and every cause under it
    assert "Could not set lock" in failure, failure
    assert "2026-09-01..2026-09-10" in failure and "ATLASMART_LOCK_TIMEOUT_S" in failure, failure
