"""A green first run: on a fresh deployment the newest day is published by the current lane without anyone clicking.

Grain: the catch-up sensor's decision per tick (in process), then a real deployment (webserver + daemon, the repo's
dagster.yaml, a copy of the shipped raw) in which the test launches nothing and waits for the newest extract."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest

from atlasmart_assets.contract import CONTROL_NAMES, CURRENT_LANE_TAGS
from atlasmart_assets.definitions import defs
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.schedules import CATCH_UP
from atlasmart_tests.deployment import WORKER_C, deployment, runs

REPO_RAW = Path(__file__).resolve().parent.parent / "raw"
NEWEST = "2026-09-21"


def _tick(instance: dg.DagsterInstance) -> dg.SensorExecutionData:
    ctx = dg.build_sensor_context(instance=instance, definitions=defs, resources={"warehouse": Warehouse()})
    return defs.get_sensor_def(CATCH_UP).evaluate_tick(ctx)


def _observe(instance: dg.DagsterInstance) -> None:
    assert defs.resolve_job_def("observe_landing_batches").execute_in_process(instance=instance).success


def test_catch_up_observes_the_landing_batches_before_it_loads_the_newest_day(env, instance) -> None:
    """A day loaded before its first observation never shows 'upstream changed' in the UI (it has no earlier
    version to compare a late batch's with): the catch-up first requests the observation job, then the day (a
    review found the catch-up ran before the observation schedule's first tick on every fresh deployment)."""
    from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
    from dagster._core.loader import LoadingContextForTest

    from atlasmart_assets import generate
    [observe] = _tick(instance).run_requests
    assert observe.job_name == "observe_landing_batches" and observe.partition_key is None
    _observe(instance)
    [load] = _tick(instance).run_requests
    assert load.job_name == "atlasmart_daily" and load.partition_key == NEWEST
    assert run_chain(instance, NEWEST, tags=dict(CURRENT_LANE_TAGS)).success
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(NEWEST), f"B-{NEWEST}-02")
    _observe(instance)
    resolver = CachingStaleStatusResolver(instance, defs.resolve_asset_graph(), LoadingContextForTest(instance))
    assert resolver.get_status(dg.AssetKey(["raw", "order_lines"]), NEWEST) == StaleStatus.STALE


def test_catch_up_requests_the_newest_day_in_the_current_lane_once(env, instance) -> None:
    _observe(instance)
    [request] = _tick(instance).run_requests
    assert request.partition_key == NEWEST and request.run_key == f"catch-up-{NEWEST}"
    assert {k: request.tags[k] for k in CURRENT_LANE_TAGS} == CURRENT_LANE_TAGS
    assert request.job_name in (None, "atlasmart_daily")

    assert run_chain(instance, NEWEST, tags=dict(CURRENT_LANE_TAGS)).success
    tick = _tick(instance)
    assert not tick.run_requests and f"the newest partition {NEWEST} is materialized" in tick.skip_message


def test_catch_up_waits_for_raw_evidence_and_says_so(env, instance) -> None:
    (env.raw_dir / f"partition={NEWEST}.json").unlink()
    tick = _tick(instance)
    assert not tick.run_requests
    assert f"{NEWEST} is missing, and its raw evidence has not landed yet" in tick.skip_message


def test_catch_up_does_not_retry_its_own_failed_run(env, instance) -> None:
    (env.raw_dir / f"partition={NEWEST}.json").write_text("{not json")
    _observe(instance)
    result = run_chain(instance, NEWEST, tags={**CURRENT_LANE_TAGS, "dagster/sensor_name": CATCH_UP})
    assert not result.success
    tick = _tick(instance)
    assert not tick.run_requests and "ended FAILURE; not retried here" in tick.skip_message


@pytest.mark.integration
@WORKER_C
def test_a_fresh_deployment_publishes_the_newest_day_without_a_launch(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    shutil.copytree(REPO_RAW, raw)
    data = tmp_path / "data"
    env = {"ATLASMART_RAW_DIR": str(raw), "ATLASMART_DATA_DIR": str(data), "ATLASMART_AS_OF": "2026-09-22",
           "ATLASMART_START_DATE": "2026-09-01"}
    extract = data / "published" / f"partition={NEWEST}.json"
    t0 = time.monotonic()
    with deployment(tmp_path / "deployment", env) as dep:
        dep.wait_for(f"the newest day {NEWEST} published", extract.exists, timeout_s=180, poll_s=1)
        with dep.instance() as instance:
            def done() -> list[dg.RunRecord] | None:
                records = runs(instance)
                return records if records and all(r.dagster_run.is_finished for r in records) else None
            records = dep.wait_for("the catch-up run to end", done, timeout_s=60)
            mart = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(["mart", "revenue_daily"]), asset_partitions=[NEWEST]),
                limit=1).records
    elapsed = time.monotonic() - t0
    # Other sensors may launch runs of their own jobs (the freshness check): the daily job ran exactly once.
    [run] = [r.dagster_run for r in records if r.dagster_run.job_name == "atlasmart_daily"]
    assert run.is_success, dep.log_tail()
    assert run.tags.get("dagster/sensor_name") == CATCH_UP, "launched by the catch-up sensor, not by the test"
    assert run.tags["dagster/partition"] == NEWEST and "dagster/backfill" not in run.tags
    assert {k: run.tags[k] for k in CURRENT_LANE_TAGS} == CURRENT_LANE_TAGS
    assert mart and mart[0].run_id == run.run_id
    manifest = json.loads((raw / f"partition={NEWEST}.json").read_text())["manifest"]["controls"]
    assert json.loads(extract.read_text())["controls"] == pytest.approx([manifest[c] for c in CONTROL_NAMES])
    assert (data / "notices").is_dir() and list((data / "notices").glob("pub-*.md")), "its notice, without Slack"
    print(f"\n[first run] newest day {NEWEST} published {elapsed:.0f}s after the deployment started")


def test_the_catch_up_s_observation_waits_for_one_in_flight_and_is_dequeued_before_backfill_runs(env, instance) -> None:
    """An observation already in flight (the schedule's) is waited for, not doubled (each would write a year of
    observations on a fresh deployment); the one the catch-up launches carries the current lane's priority, since
    today's load waits on it (a review found it behind backfill runs in a full queue)."""
    import uuid

    from atlasmart_assets.contract import PRIORITY_TAG
    [observe] = _tick(instance).run_requests
    assert observe.tags[PRIORITY_TAG] == CURRENT_LANE_TAGS[PRIORITY_TAG] and "atlasmart/lane" not in observe.tags
    instance.add_run(dg.DagsterRun(job_name="observe_landing_batches", run_id=str(uuid.uuid4()),
                                   tags={"dagster/schedule_name": "atlasmart_observe_landing_batches"},
                                   status=dg.DagsterRunStatus.STARTED))
    tick = _tick(instance)
    assert not tick.run_requests and "observing the landing batches of 2026-09-21 first" in tick.skip_message
