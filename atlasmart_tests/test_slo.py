"""The SLO report's pure computation: lanes, overlap with backfills, percentiles, freshness."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from atlasmart_assets import slo
from atlasmart_assets.slo import RunSample


def _run(run_id: str, lane: str, created: float, started: float | None, ended: float | None,
         status: str = "SUCCESS") -> RunSample:
    return RunSample(run_id, lane, created, started, ended, status)


def test_lane_of_puts_backfill_runs_in_the_backfill_lane_even_with_a_lane_tag() -> None:
    assert slo.lane_of({"dagster/backfill": "b1", "atlasmart/lane": "current"}) == "backfill"
    assert slo.lane_of({"atlasmart/lane": "current", "dagster/priority": "10"}) == "current"
    assert slo.lane_of({"dagster/partition": "2026-09-21"}) == "other"


def test_percentile_interpolates_and_handles_empty() -> None:
    assert slo.percentile([], 50) is None
    assert slo.percentile([4.0], 95) == 4.0
    assert slo.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert slo.percentile([10.0, 0.0, 20.0], 100) == 20.0
    assert slo.percentile(list(map(float, range(101))), 95) == pytest.approx(95.0)


def test_backfill_overlap_counts_queue_time_and_running_backfills() -> None:
    backfill = _run("b", "backfill", 0, 10, 20)
    running = _run("b2", "backfill", 0, 50, None)
    assert slo.backfill_overlaps(_run("q", "current", 5, 21, 25), [backfill], now=100)  # queued while it ran
    assert not slo.backfill_overlaps(_run("a", "current", 20, 21, 25), [backfill], now=100)  # after it ended
    assert not slo.backfill_overlaps(_run("a", "current", 0, 1, 9), [backfill], now=100)  # before it started
    assert slo.backfill_overlaps(_run("r", "current", 60, 61, None), [running], now=100)
    assert not slo.backfill_overlaps(_run("r", "current", 0, 1, 9), [_run("n", "backfill", 0, None, None)], now=100)


def test_current_lane_report_splits_by_backfill_and_ignores_other_lanes() -> None:
    samples = [
        _run("bf", "backfill", 100, 110, 200),
        _run("c1", "current", 0, 1, 11),           # alone: wait 1, duration 10
        _run("c2", "current", 20, 23, 43),         # alone: wait 3, duration 20
        _run("c3", "current", 120, 125, 165),      # during: wait 5, duration 40
        _run("c4", "current", 130, 139, 219, "FAILURE"),  # during: wait 9, duration 80
        _run("c5", "current", 300, None, None, "QUEUED"),  # alone, not started yet
        _run("o1", "other", 120, 121, 500),
    ]
    report = slo.current_lane_report(samples, now=400)
    alone, during = report["without_backfill"], report["with_backfill"]
    assert (alone["runs"], alone["succeeded"], alone["failed"]) == (3, 2, 0)
    assert alone["queue_wait_p50_s"] == 2.0 and alone["duration_p50_s"] == 15.0
    assert (during["runs"], during["succeeded"], during["failed"]) == (2, 1, 1)
    assert during["queue_wait_p50_s"] == 7.0 and during["queue_wait_p95_s"] == pytest.approx(8.8)
    assert during["duration_p50_s"] == 60.0 and during["duration_p95_s"] == pytest.approx(78.0)


def test_freshness_is_seconds_since_the_latest_publication() -> None:
    now = dt.datetime(2026, 9, 22, 3, 0, 0)
    assert slo.freshness_s(dt.datetime(2026, 9, 22, 2, 0, 30), now) == 3570.0
    assert slo.freshness_s(None, now) is None


def test_markdown_names_both_splits_and_the_freshness() -> None:
    report = slo.current_lane_report([_run("c1", "current", 0, 1, 11)], now=20)
    text = slo.markdown(report, "2026-09-21", 12.0)
    assert "| with_backfill | 0 |" in text and "| without_backfill | 1 | 1 | 0 | 1.0 |" in text
    assert "Newest partition 2026-09-21: published 12 s ago" in text
    assert "never published" in slo.markdown(report, "2026-09-21", None)


def test_sample_of_reads_a_real_run_record(tmp_path) -> None:  # noqa: ANN001 - pytest fixture
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        run = instance.create_run_for_job(dg.GraphDefinition("g").to_job("j"),
                                          tags={"atlasmart/lane": "current", "dagster/priority": "10"})
        record = instance.get_run_records(dg.RunsFilter(run_ids=[run.run_id]))[0]
        sample = slo.sample_of(record)
    assert sample.lane == "current" and sample.started is None and sample.queue_wait_s is None
    assert abs(sample.created - dt.datetime.now(dt.timezone.utc).timestamp()) < 60
