"""The bench's rule for which of today's runs ran beside a backfill (bench/run.py), on made-up timestamps."""

from __future__ import annotations

import datetime as dt
from typing import Any

from bench.run import beside_figures, pooled


def run(began: float, ended: float, wall: float | None = None) -> dict[str, Any]:
    return {"began": began, "ended": ended, "wall_s": wall if wall is not None else ended - began,
            "lock": {"lock_wait_max_s": 0.01}}


def test_only_runs_overlapping_a_backfill_count() -> None:
    spans = [(100.0, 130.0), (131.0, 160.0)]
    before = run(90.0, 99.5)  # the backfill's process was still importing
    across_start = run(98.0, 101.0)
    inside = run(110.0, 112.0)
    in_gap = run(129.5, 131.5)  # ends after the second begins
    after = run(160.5, 163.0)
    figures = beside_figures([before, across_start, inside, in_gap, after], spans)
    assert figures["runs"] == [across_start, inside, in_gap]
    assert figures["n"] == 3
    assert figures["max_s"] == 3.0


def test_a_run_wholly_in_the_gap_between_two_backfills_is_idle() -> None:
    figures = beside_figures([run(130.2, 130.8)], [(100.0, 130.0), (131.0, 160.0)])
    assert figures["n"] == 0
    assert figures["median_s"] is None and figures["p95_s"] is None


def test_p95_of_few_runs_lies_above_the_slowest() -> None:
    walls = [2.0, 2.1, 2.2, 2.6]
    runs = [run(100.0 + 10 * k, 100.0 + 10 * k + w, w) for k, w in enumerate(walls)]
    figures = beside_figures(runs, [(100.0, 200.0)])
    assert figures["p95_s"] > max(walls)
    assert figures["median_s"] == 2.15


def test_runs_beside_several_first_loads_are_taken_together() -> None:
    first = beside_figures([run(100.0, 102.0), run(110.0, 113.0)], [(99.0, 140.0)])
    second = beside_figures([run(500.0, 502.5), run(600.0, 601.0)], [(499.0, 540.0)])  # the last ran idle
    together = pooled([{**first, "backfill_wall_s": 41.0, "peak_rss_mib": 900.0},
                       {**second, "backfill_wall_s": 42.0, "peak_rss_mib": 950.0}])
    assert together["n"] == 3 and together["n_each"] == [2, 1]
    assert together["max_s"] == 3.0 and together["median_s"] == 2.5
    assert together["peak_rss_mib"] == 950.0 and together["backfill_wall_s"] == [41.0, 42.0]
    assert together["p95_s"] == beside_figures(first["runs"] + second["runs"], [(0.0, 1e9)])["p95_s"]


def test_the_bench_refuses_to_pool_no_runs_and_passes_a_memory_limit_to_every_run(tmp_path, monkeypatch) -> None:
    """`--beside-first-loads 0` failed after the year's first load, re-publishes and re-derive (an IndexError in
    the pooling), and a window whose newest day has not closed yet after its first load (Dagster has no partition
    for it): both are refused before anything runs. `--memory-limit` reaches each run's environment, whatever
    ATLASMART_ variables the caller's has (the bench clears them)."""
    import argparse

    import pytest

    from bench import run as bench_run

    with pytest.raises(SystemExit):
        bench_run.main(["--beside-first-loads", "0", "--root", str(tmp_path)])
    today = dt.datetime.now(dt.timezone.utc).date()
    with pytest.raises(SystemExit):  # its newest day is today, not closed yet
        bench_run.main(["--start", (today - dt.timedelta(days=10)).isoformat(), "--days", "10",
                        "--root", str(tmp_path)])
    assert not list(tmp_path.iterdir())
    newest = today - dt.timedelta(days=1)  # yesterday's is taken: the bench goes on to generate its raw files
    monkeypatch.setattr(bench_run.Bench, "generate", lambda self: (_ for _ in ()).throw(RuntimeError("generating")))
    with pytest.raises(RuntimeError, match="generating"):
        bench_run.main(["--start", (newest - dt.timedelta(days=10)).isoformat(), "--days", "10", "--only", "floor",
                        "--root", str(tmp_path)])
    monkeypatch.setenv("ATLASMART_DUCKDB_MEMORY_LIMIT", "3GB")
    for limit, expected in (("512MB", "512MB"), (None, None)):
        bench = bench_run.Bench(argparse.Namespace(days=3, lines=10, customers=5, slice=2, start="2025-09-22",
                                                   root=str(tmp_path), memory_limit=limit))
        env = bench.env(tmp_path / "data", tmp_path / "home")
        assert env.get("ATLASMART_DUCKDB_MEMORY_LIMIT") == expected
