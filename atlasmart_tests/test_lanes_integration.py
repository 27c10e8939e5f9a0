"""Issue 4 evidence from a real deployment: lanes hold, the current lane keeps running and publishing correctly
while a 30-day backfill runs, and a backfill reaching the newest partition is refused and changes nothing.

Grain: one deployment (dagster-webserver + dagster-daemon, the repo's dagster.yaml) for the whole scenario.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from pathlib import Path
from typing import Iterator, Sequence

import dagster as dg
import pytest

from atlasmart_assets import slo
from atlasmart_assets.contract import CONTROL_NAMES
from atlasmart_assets.contract import CURRENT_LANE_TAGS
from atlasmart_tests.deployment import (
    FINISHED,
    Deployment,
    LockWatcher,
    deployment,
    generate_raw,
    max_concurrent,
    run_pids,
    runs,
    wait_backfill_runs,
    wait_catch_up,
    wait_runs_finished,
)

pytestmark = pytest.mark.integration

START = dt.date(2026, 8, 1)
DAYS = 40  # 2026-08-01 .. 2026-09-09
AS_OF = START + dt.timedelta(days=DAYS)  # newest partition: 2026-09-09
LINES, CUSTOMERS = 6000, 2000
CHAIN = [["raw", "order_lines"], ["staged", "order_lines"], ["fact", "fct_order_lines"], ["mart", "revenue_daily"]]
JOB = "atlasmart_daily"


def day(k: int) -> str:
    return (START + dt.timedelta(days=k)).isoformat()


def days(first: int, last: int) -> list[str]:
    return [day(k) for k in range(first, last + 1)]


BACKFILL_30 = days(0, 29)       # 2026-08-01 .. 2026-08-30
BACKFILL_NEXT = days(30, 30)    # 2026-08-31: queued behind the first backfill
BASELINE = days(31, 34)         # current lane alone
DURING = days(36, 39)           # current lane while the 30-day backfill runs, up to the newest day
FENCED = days(37, 39)           # reaches the newest partition 2026-09-09


@pytest.fixture(scope="module")
def lanes_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("lanes")
    raw = root / "raw"
    generate_raw(raw, START.isoformat(), DAYS, LINES, CUSTOMERS)
    return {"ATLASMART_RAW_DIR": str(raw), "ATLASMART_DATA_DIR": str(root / "data"),
            "ATLASMART_START_DATE": START.isoformat(), "ATLASMART_AS_OF": AS_OF.isoformat()}


@pytest.fixture(scope="module")
def dep(lanes_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with deployment(tmp_path_factory.mktemp("deployment"), lanes_env) as d:
        yield d


def launch_current(dep: Deployment, partitions: Sequence[str]) -> list[str]:
    return [dep.launch_run(JOB, {**CURRENT_LANE_TAGS, "dagster/partition": p}) for p in partitions]


def published_hashes(data_dir: Path) -> dict[str, str]:
    published = data_dir / "published"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(published.glob("*.json"))}


def raw_controls(raw_dir: Path, partition: str) -> list[float]:
    """The raw file's manifest controls, in the published order."""
    controls = json.loads((raw_dir / f"partition={partition}.json").read_text())["manifest"]["controls"]
    return [controls[name] for name in CONTROL_NAMES]


def failure_text(instance: dg.DagsterInstance, run_id: str) -> str:
    texts = []
    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
        data = entry.dagster_event.event_specific_data
        texts += [entry.dagster_event.message or "", data.error.message if data.error else "",
                  data.user_failure_data.description if data.user_failure_data else ""]
    return "\n".join(t for t in texts if t)


def lock_holds(instance: dg.DagsterInstance, run_id: str) -> list[float]:
    return [float(e.asset_materialization.metadata["publish_lock_hold_s"].value)
            for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
            if e.asset_materialization and "publish_lock_hold_s" in e.asset_materialization.metadata]


def test_lanes_hold_and_the_fence_refuses_from_a_real_deployment(dep: Deployment, lanes_env: dict[str, str]) -> None:
    t0 = time.monotonic()
    data_dir, raw_dir = Path(lanes_env["ATLASMART_DATA_DIR"]), Path(lanes_env["ATLASMART_RAW_DIR"])
    reason = {"atlasmart/reason": "issue-4 evidence: recompute August"}

    # A fresh deployment first publishes its newest day by itself (the catch-up sensor): let it end, so the
    # measurements below start from a quiet queue.
    caught_up = wait_catch_up(dep, day(DAYS - 1))
    wait_runs_finished(dep, [caught_up], timeout_s=90)
    baseline = launch_current(dep, BASELINE)
    wait_runs_finished(dep, baseline, timeout_s=90)

    with LockWatcher(data_dir / "warehouse.duckdb") as watcher:
        first = dep.launch_backfill(CHAIN, BACKFILL_30, reason, title="30 days")
        second = dep.launch_backfill(CHAIN, BACKFILL_NEXT, reason, title="queued behind")
        wait_backfill_runs(dep, first, {"STARTED"}, timeout_s=60)
        during = launch_current(dep, DURING)
        current = wait_runs_finished(dep, baseline + during, timeout_s=120)
        first_runs = wait_backfill_runs(dep, first, FINISHED, timeout_s=120)
        second_runs = wait_backfill_runs(dep, second, FINISHED, timeout_s=90)

    with dep.instance() as instance:
        every = runs(instance)
        backfill_records = [r for r in every if "dagster/backfill" in r.dagster_run.tags]
        current_records = [r for r in every if r.dagster_run.tags.get("atlasmart/lane") == "current"]
        publish_holds = sorted({h for r in first_runs for h in lock_holds(instance, r.dagster_run.run_id)})
        backfill_pids = run_pids(instance, first_runs[0].dagster_run.run_id)
    backfill_holds = [h.seconds for h in watcher.holds if h.pid in backfill_pids]
    backfill_s = first_runs[0].end_time - first_runs[0].start_time

    # Lanes: one backfill run at a time, two current runs at a time; with single_run each backfill is one run.
    assert len(first_runs) == 1 and len(second_runs) == 1
    assert max_concurrent(backfill_records) == 1
    a, b = first_runs[0], second_runs[0]
    assert a.end_time <= b.start_time or b.end_time <= a.start_time, "the two backfill runs overlapped"
    assert max_concurrent(current_records) == 2, "current lane not limited to 2 (or never reached 2)"
    assert all(r.dagster_run.status.value == "SUCCESS" for r in current), [
        (r.dagster_run.tags["dagster/partition"], r.dagster_run.status.value) for r in current]
    assert [r.dagster_run.status.value for r in first_runs + second_runs] == ["SUCCESS", "SUCCESS"]
    assert publish_holds, "the correction recorded no publish_lock_hold_s"
    # The backfill's heavy work runs in scratch: the warehouse lock is held in short bursts, not for the run.
    assert backfill_holds, f"no lock hold seen for backfill pids {backfill_pids}"
    assert max(backfill_holds) < 0.25 * backfill_s and sum(backfill_holds) < 0.5 * backfill_s, backfill_holds

    # Published data: every published day carries its raw manifest's controls.
    published = sorted(p.name for p in (data_dir / "published").glob("partition=*.json"))
    expected = BACKFILL_30 + BACKFILL_NEXT + BASELINE + DURING
    assert published == sorted(f"partition={p}.json" for p in expected)
    for p in expected:
        doc = json.loads((data_dir / "published" / f"partition={p}.json").read_text())
        assert doc["controls"] == pytest.approx(raw_controls(raw_dir, p)), p

    # Evidence the current lane kept up: wall time with and without a backfill, from the run records.
    samples = [slo.sample_of(r) for r in every]
    report = slo.current_lane_report(samples, now=time.time())
    alone, beside = report["without_backfill"], report["with_backfill"]
    assert alone["runs"] == len(BASELINE) + 1 and beside["runs"] == len(DURING)  # + the catch-up run
    ratio = beside["duration_p50_s"] / alone["duration_p50_s"]
    turnaround = {k: slo.percentile([s.ended - s.created for s in samples if s.lane == "current"
                                     and slo.backfill_overlaps(s, [b for b in samples if b.lane == "backfill"],
                                                               time.time()) == (k == "with")], 50)
                  for k in ("with", "without")}
    print(f"\n[lanes] 30-day backfill run: {backfill_s:.1f}s; warehouse lock held by it {len(backfill_holds)} times, "
          f"longest {max(backfill_holds):.3f}s, total {sum(backfill_holds):.3f}s (/proc/locks, 10 ms poll); "
          f"correction publish_lock_hold_s = {publish_holds}")
    print(f"[lanes] current runs without backfill: {alone}")
    print(f"[lanes] current runs with backfill:    {beside}")
    print(f"[lanes] ratio with/without: run duration p50 {ratio:.2f}, enqueue-to-end p50 "
          f"{turnaround['with'] / turnaround['without']:.2f} ({turnaround['with']:.1f}s / {turnaround['without']:.1f}s)")

    # The fence: a backfill reaching the newest partition fails before writing; published files unchanged.
    before = published_hashes(data_dir)
    fenced = dep.launch_backfill(CHAIN, FENCED, reason, title="reaches the newest day")
    fenced_runs = wait_backfill_runs(dep, fenced, FINISHED, timeout_s=90)
    after = published_hashes(data_dir)
    with dep.instance() as instance:
        message = failure_text(instance, fenced_runs[0].dagster_run.run_id)
    assert [r.dagster_run.status.value for r in fenced_runs] == ["FAILURE"]
    assert "Refused" in message and FENCED[-1] in message and "atlasmart/fence_override=<reason>" in message, message
    assert before == after and len(before) == len(expected)
    assert not list((data_dir / "scratch").glob(f"{fenced_runs[0].dagster_run.run_id}*"))
    # The operator's SLO report, run as a job in the same deployment.
    report_run = dep.launch_run("slo_report", {})
    [record] = wait_runs_finished(dep, [report_run], timeout_s=60)
    assert record.dagster_run.status.value == "SUCCESS"
    with dep.instance() as instance:
        [observed] = [e.asset_observation.metadata for e in instance.all_logs(
            report_run, of_type=dg.DagsterEventType.ASSET_OBSERVATION) if e.asset_observation]
    assert observed["slo_current_with_backfill"].value["runs"] == len(DURING)
    assert observed["slo_newest_partition"].value == FENCED[-1]
    assert 0 < observed["slo_newest_partition_freshness_s"].value < 600
    print(f"[lanes] slo_report job:\n{observed['slo_report'].value}")
    print(f"[lanes] fence refused {FENCED[0]}..{FENCED[-1]}; scenario took {time.monotonic() - t0:.0f}s")
