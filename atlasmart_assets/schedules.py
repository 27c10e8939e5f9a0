"""The current lane's triggers: the daily schedule (the newest closed day at ATLASMART_SCHEDULE_HOUR, 02:00 UTC by
default) and the catch-up sensor, which materializes the newest day as soon as its raw evidence is there and Dagster
shows it missing — so a fresh deployment (`make dev` on a fresh clone) publishes the newest day within a minute or
two, without anyone clicking."""

from __future__ import annotations

import os

import dagster as dg

from atlasmart_assets import partitions, raw_files, settings
from atlasmart_assets.contract import CURRENT_LANE_TAGS, LANDING_BATCHES, PARTITION_TAG, PRIORITY_TAG, REVENUE_DAILY
from atlasmart_assets.assets.raw import observed_versions
from atlasmart_assets.jobs import daily_job, observe_landing_job
from atlasmart_assets.resources import WAREHOUSE_KEY, Warehouse

CATCH_UP = "atlasmart_newest_partition_catch_up"
TRIGGER_TAG = "atlasmart/trigger"
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED]

SCHEDULE_HOUR = settings.load().schedule_hour

daily_schedule = dg.build_schedule_from_partitioned_job(
    daily_job,
    name="atlasmart_daily_schedule",
    hour_of_day=SCHEDULE_HOUR,
    tags=CURRENT_LANE_TAGS,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description=f"The newest closed day at {SCHEDULE_HOUR:02d}:00 UTC (ATLASMART_SCHEDULE_HOUR), in the current lane "
                "(tag atlasmart/lane=current, priority 10).",
)


def raw_landed(wh: Warehouse, day: str) -> bool:
    """The day's first landing batch (`partition=D.json`) or a batch directory (`partition=D/`) is there."""
    raw = wh.settings.raw_dir
    return (raw / f"partition={day}.json").exists() or (raw / f"partition={day}").is_dir()


def is_materialized(instance: dg.DagsterInstance, day: str) -> bool:
    """Dagster holds a materialization of the published mart for the day (what the UI shows as not Missing)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(list(REVENUE_DAILY)), asset_partitions=[day]), limit=1)
    return bool(records.records)


CATCH_UP_ENV = "ATLASMART_CATCH_UP"


def catch_up(context: dg.SensorEvaluationContext, warehouse: Warehouse) -> dg.RunRequest | dg.SkipReason:
    """One tick: request the newest day in the current lane if it is missing, its evidence has landed, no run of it
    is in flight, and this sensor has not tried it yet (a failed try is left to the schedule or the operator)."""
    day = partitions.newest_partition()
    if not warehouse.settings.catch_up:
        return dg.SkipReason(f"catch-up is off ({CATCH_UP_ENV}={os.environ[CATCH_UP_ENV]!r}): the daily schedule "
                             "alone loads the newest day")
    if is_materialized(context.instance, day):
        return dg.SkipReason(f"the newest partition {day} is materialized")
    if not raw_landed(warehouse, day):
        return dg.SkipReason(f"the newest partition {day} is missing, and its raw evidence has not landed yet "
                             f"({warehouse.settings.raw_dir}/partition={day}.json)")
    busy = context.instance.get_runs(dg.RunsFilter(tags={PARTITION_TAG: day}, statuses=IN_FLIGHT), limit=1)
    if busy:
        return dg.SkipReason(f"run {busy[0].run_id} of {day} is in flight")
    waiting = _observe_first(context.instance, warehouse, day)
    if waiting is not None:
        return waiting
    tried = context.instance.get_runs(dg.RunsFilter(tags={"dagster/sensor_name": CATCH_UP, PARTITION_TAG: day}),
                                      limit=1)
    if tried:
        return dg.SkipReason(f"catch-up run {tried[0].run_id} of {day} ended {tried[0].status.value}; not retried "
                             f"here: the daily schedule retries at {SCHEDULE_HOUR:02d}:00 UTC, or materialize the day "
                             "from the UI")
    return dg.RunRequest(partition_key=day, run_key=f"catch-up-{day}", job_name=daily_job.name,
                         tags={**CURRENT_LANE_TAGS, TRIGGER_TAG: "catch_up"})


def _observe_first(instance: dg.DagsterInstance, wh: Warehouse, day: str) -> dg.RunRequest | dg.SkipReason | None:
    """Before the day's load, the observation of its landing batches (and of every other day's not observed yet):
    a day loaded before its first observation has no earlier version to compare a late batch's with, so the UI
    never shows it 'upstream changed' (found by a review: on a fresh deployment the catch-up ran before the
    observation schedule's first tick). None when the day's batch set on disk is observed, or its observation run
    ended without observing it (the load does not wait on it: the schedule observes again)."""
    version = raw_files.batch_set_version(wh.settings.raw_dir, day)
    if version is None or observed_versions(instance, dg.AssetKey(list(LANDING_BATCHES)), {day}).get(day) == version:
        return None
    # Any observation in flight (ours, or the schedule's) observes the day: wait for it rather than run a second.
    observing = instance.get_runs(dg.RunsFilter(job_name=observe_landing_job.name, statuses=IN_FLIGHT), limit=1)
    if observing:
        return dg.SkipReason(f"observing the landing batches of {day} first (run {observing[0].run_id}), so a later "
                             "batch shows its partitions 'upstream changed'")
    run_key = f"observe-before-catch-up-{day}-{version}"
    if not instance.get_runs(dg.RunsFilter(tags={"dagster/run_key": run_key}), limit=1):
        # Today's load waits on it: dequeued as the current lane is, before backfill runs (not in the lane's slots).
        return dg.RunRequest(run_key=run_key, job_name=observe_landing_job.name,
                             tags={TRIGGER_TAG: "catch_up", PRIORITY_TAG: CURRENT_LANE_TAGS[PRIORITY_TAG]})
    return None


@dg.sensor(name=CATCH_UP, jobs=[daily_job, observe_landing_job],
           minimum_interval_seconds=settings.load().sensor_interval_s,
           default_status=dg.DefaultSensorStatus.RUNNING,
           required_resource_keys={WAREHOUSE_KEY},
           description="Materializes the newest closed day in the current lane (atlasmart/lane=current, priority 10) "
                       "as soon as it is missing and its raw evidence has landed; each tick says why it waits.")
def newest_partition_catch_up(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    return catch_up(context, getattr(context.resources, WAREHOUSE_KEY))
