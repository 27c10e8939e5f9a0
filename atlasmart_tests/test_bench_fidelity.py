"""What the scale bench's figures rely on (bench/run.py, bench/worker.py): a failed backfill fails the bench, each
bench starts from an empty instance in a work dir of its own parameters, the floor runs at the runs' memory limit,
every warehouse hold is in the lock figures, an unmeasured target says so, and the peak memory is the whole process
tree's (a review's cases, 2026-12-07; each failed on the code before)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import duckdb
import pytest

from atlasmart_assets.capacity import current_lane_active
from atlasmart_assets.contract import CURRENT_LANE_TAGS
from atlasmart_assets.generate import write_synthetic
from atlasmart_assets.lab import run_chain
from atlasmart_assets.settings import Settings
from bench import run as bench_run
from bench import worker as bench_worker


def _bench(root: Path, days: int = 3, lines: int = 10) -> bench_run.Bench:
    return bench_run.Bench(argparse.Namespace(days=days, lines=lines, customers=5, slice=2, start="2025-09-22",
                                              root=str(root), memory_limit=None, current_delay=0.0,
                                              current_pause=0.0))


def test_a_backfill_that_failed_beside_todays_load_fails_the_bench(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`Bench.beside` checks today's runs (`check(during_all, ...)`) but never the backfills it ran them beside: a
    re-publish or first load that failed (a lock timeout, a refusal) still yields the "today's load beside the
    backfill" p95, measured beside a run that did not do the work, and the bench passes."""
    b = _bench(tmp_path)
    b.work.mkdir(parents=True)

    def fake_spawn(cmd: list[str], env: dict[str, str], log_name: str) -> tuple[Any, Any]:
        ok = "--backfill" not in cmd  # today's runs succeed; the backfill beside them fails
        run = {"began": 1.0, "ended": 2.0, "wall_s": 1.0, "success": ok, "lock": {"lock_wait_max_s": 0.0}}
        Path(cmd[cmd.index("--out") + 1]).write_text(json.dumps(
            {"runs": [run], "total_s": 1.0, "median_s": 1.0, "max_s": 1.0, "all_success": ok}))
        return object(), io.StringIO()

    monkeypatch.setattr(bench_run, "spawn", fake_spawn)
    monkeypatch.setattr(bench_run, "reap", lambda proc, fh: (0, 100.0))
    with pytest.raises(RuntimeError):
        b.beside({}, "year-concurrent", "current-during-backfill")


def test_a_fresh_data_dir_comes_with_a_dagster_instance_without_an_earlier_benchs_runs(tmp_path: Path) -> None:
    """`Bench.fresh` empties the data dir but keeps `<name>-home`, the Dagster instance (runs, event log index) of
    every earlier bench under the same --root. A current-lane run an interrupted bench left STARTED there makes
    every later bench's backfill give way before each hold (up to ATLASMART_BACKFILL_GIVE_WAY_S, 60 s, each) and
    pause its scratch work: the year's figures then measure the waits."""
    b = _bench(tmp_path)
    _, env = b.fresh("year")
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        instance.add_run(dg.DagsterRun(job_name="atlasmart_daily", run_id="interrupted-current-run",
                                       tags=dict(CURRENT_LANE_TAGS), status=dg.DagsterRunStatus.STARTED))
        assert current_lane_active(instance)
    _, env = b.fresh("year")  # the next bench run, same --root
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        assert not current_lane_active(instance), "the earlier bench's run holds the new bench's backfills up"


def test_benches_of_different_parameters_do_not_share_their_work_dirs(tmp_path: Path) -> None:
    """Raw evidence is keyed by its parameters (`raw-<start>-d<days>-l<lines>-c<customers>`), the run data is not:
    every bench under one --root (the default /tmp/atlasmart-bench) uses `<root>/work/year`, `work/year-home`, and
    `fresh` rmtree's them, so a scaled-down bench started while another session's 365-day bench runs deletes that
    bench's warehouse and instance under it."""
    assert _bench(tmp_path, days=365, lines=20_000).work != _bench(tmp_path, days=8, lines=2_000).work


def test_the_read_floor_honours_the_bench_memory_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """README: "`--memory-limit` sets ATLASMART_DUCKDB_MEMORY_LIMIT for every run and floor". The read floor opens
    `duckdb.connect()` with no config: it runs at DuckDB's default (80 % of RAM) whatever the limit the runs it is
    the baseline of are held to."""
    raw = tmp_path / "raw"
    write_synthetic(raw, dt.date(2025, 9, 22), 2, 200, 10)
    monkeypatch.setenv("ATLASMART_DUCKDB_MEMORY_LIMIT", "256MB")
    seen: list[str] = []
    real = duckdb.connect

    def spy(*args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        con = real(*args, **kwargs)
        seen.append(con.execute("select current_setting('memory_limit')").fetchone()[0])
        return con

    monkeypatch.setattr(duckdb, "connect", spy)
    got = bench_worker._floor(argparse.Namespace(raw_dir=str(raw), start="2025-09-22", end="2025-09-23",
                                                 out=str(tmp_path / "f.json")))
    assert got["matches_manifests"]
    assert seen[0].startswith("244"), f"the floor's connection ran with memory_limit {seen[0]}, not 256MB"


@contextlib.contextmanager
def _holds_not_in_figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    """Every hold of the warehouse file through `Warehouse.reader/writer` that records into no LockStats."""
    from atlasmart_assets import resources

    unseen: list[float] = []
    real = resources.open_file

    @contextlib.contextmanager
    def spy(path: Path, **kwargs: Any) -> Iterator[duckdb.DuckDBPyConnection]:
        with real(path, **kwargs) as con:
            acquired = time.monotonic()
            try:
                yield con
            finally:
                if kwargs.get("stats") is None:
                    unseen.append(time.monotonic() - acquired)

    monkeypatch.setattr(resources, "open_file", spy)
    yield unseen


def test_every_warehouse_hold_of_a_backfill_is_in_the_lock_figures_the_bench_reports(
        env: Settings, instance: dg.DagsterInstance, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench's "longest warehouse-lock hold" and "total held" come from the steps' LockStats
    (`_lock_figures`). The published checks step reads the warehouse a chunk at a time through `wh.reader()` with
    no stats (checks/published.py `_read_by_chunk`; `published_lines` too), and its results are check events, which
    `_lock_figures` does not read: its holds, which keep today's load's writer out as any other, are in no figure."""
    assert run_chain(instance, "2026-09-01", "2026-09-20", {"dagster/backfill": "review"}).success  # published
    with _holds_not_in_figures(monkeypatch) as unseen:
        result = run_chain(instance, "2026-09-01", "2026-09-20", {"dagster/backfill": "review-2"})
    assert result.success
    figures = bench_worker._lock_figures(instance, result.run_id)
    assert not unseen, (f"{len(unseen)} hold(s) of the warehouse, {sum(unseen):.3f} s in all (longest "
                        f"{max(unseen):.3f} s), are not in the bench's figures {figures}")


def test_the_table_says_when_no_run_of_todays_load_ran_beside_a_backfill(tmp_path: Path) -> None:
    """With no run of today's load overlapping a backfill (a short backfill, a slow import), the report drops the
    row of the p95 target altogether (`if not during or not during["n"]: continue`) and the bench passes: the
    table then reads as if that target had not been part of the run, rather than saying it went unmeasured."""
    b = _bench(tmp_path)
    b.args.beside_republishes, b.args.beside_first_loads = 1, 1
    one = {"total_s": 1.0, "peak_rss_mib": 1.0, "phases": {}, "lock": {}, "event_log": None}
    nobody = {"runs": [], "n": 0, "median_s": None, "max_s": None, "p95_s": None, "lock_wait_max_s": None}
    b.results["year"] = {"first_load": one, "republish": one, "current_idle": {
        "median_s": 1.0, "runs": 2, "median_before_s": 1.0, "median_after_s": 1.0, "peak_rss_mib": 1.0},
        "current_during_backfill": nobody, "current_during_first_load": nobody}
    rows = bench_run.report(b)
    assert any("during" in row[0] and "no run" in " ".join(row) for row in rows), [r[0] for r in rows]



def test_the_peak_memory_of_a_measured_run_is_that_of_its_process_tree(tmp_path: Path) -> None:
    """A parent and its forked child each holding 200 MiB of their own at once, as a backfill's step and its scratch
    child may: the tree's peak is about 400 MiB, its largest process about 200 (all the bench reported before)."""
    import sys

    release = tmp_path / "release"
    child = ("import os, pathlib, sys, time\npid = os.fork()\nblock = bytes([1 if pid else 2]) * (200 << 20)\n"
             "while not pathlib.Path(sys.argv[1]).exists():\n    time.sleep(0.05)\n"
             "os.waitpid(pid, 0) if pid else os._exit(0)\n")
    proc, fh = bench_run.spawn([sys.executable, "-c", child, str(release)], dict(os.environ), "tree-peak")
    try:
        # Held until the sampler has seen the whole tree: no sleep racing it.
        deadline = time.monotonic() + 120
        while (proc.tree_peak.peak_mib or 0) < 380 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        release.touch()
        code, largest = bench_run.reap(proc, fh)
    # `largest` (ru_maxrss) is not asserted: a child starts on its parent's memory until it execs, and keeps that
    # high-water mark (this test's xdist worker: 300+ MiB), which is why the tree's figure is measured apart.
    assert code == 0, largest
    assert bench_run.tree_peak(proc) >= 380, bench_run.tree_peak(proc)
