"""One Slack message per failed run of this code location (a blocking check, a crash, a refused backfill).

Written over the run-failure events rather than with dg.run_failure_sensor because that one moves its cursor
past a run even when the alert raised; here the cursor (the storage id of the last alerted failure event)
moves only after Slack accepted the message. A failed run of a backfill is a reply in the backfill's thread,
so the queue waits (up to THREAD_WAIT_S) for the lifecycle sensor to open that thread."""

from __future__ import annotations

from typing import Any

import dagster as dg
from dagster._core.definitions.dependency import NodeHandle  # internal: the one way from a step key to its node

from atlasmart_assets import rollback as rollback_mod
from atlasmart_assets.alerts import common
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.common import SLACK_KEY, STATE_KEY, skip_unless_configured, window_keys
from atlasmart_assets.alerts.delivery import Outbox
from atlasmart_assets.alerts.slack import AtlasSlack
from atlasmart_assets.contract import BACKFILL_TAG, REASON_TAG

NAME = "atlasmart_run_failures_to_slack"
MAX_ERRORS = 3
FAILURE_PREFIX = "dagster._core.definitions.events.Failure: "


def _step_assets(job: dg.JobDefinition | None, step_key: str) -> list[str]:
    """The assets a step computes, from the job's asset layer (a step key is its node's name)."""
    if job is None:
        return []
    try:
        node = NodeHandle.from_string(step_key.split("[")[0])
        return sorted(k.to_user_string() for k in job.asset_layer.get_assets_def_for_node(node).keys)
    except Exception:  # noqa: BLE001 - an unknown step (renamed since the run) just names no assets
        return []


def _with_root_cause(err: Any) -> str:
    """Dagster wraps an exception raised in a step ("Error occurred while executing op …"); the cause it wraps
    is what an operator needs, so the deepest cause is named too."""
    message = err.message.strip()
    root, depth = err, 0
    while getattr(root, "cause", None) is not None and depth < 10:
        root, depth = root.cause, depth + 1
    if root is not err and root.message.strip() not in message:
        message = f"{message}\nCaused by: {root.message.strip()}"
    return message


def _errors(instance: dg.DagsterInstance, run_id: str, job: dg.JobDefinition | None) -> list[fmt.StepError]:
    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    out = []
    for e in events[:MAX_ERRORS]:
        err = getattr(e.dagster_event.event_specific_data, "error", None) if e.dagster_event else None
        step = e.step_key or ""
        message = _with_root_cause(err) if err else (e.message or "")
        out.append(fmt.StepError(step, _step_assets(job, step), message.removeprefix(FAILURE_PREFIX)))
    if not out:
        out = [fmt.StepError("run", [], e.message)
               for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)][:1]
    return out


def _failing_days(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The days the run's failed ERROR checks single out (their partition, else their figures). A WARN failure
    (e.g. rows changed, which every real correction does) did not fail the run, and a check judging the whole
    instance (freshness: it carries a `state`) is not about this run's days."""
    days: set[str] = set()
    for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        ev: Any = e.dagster_event.event_specific_data if e.dagster_event else None
        if ev is None or ev.passed or ev.severity == dg.AssetCheckSeverity.WARN or STATE_KEY in ev.metadata:
            continue
        if getattr(ev, "partition", None):
            days.add(ev.partition)
            continue
        figures = ev.metadata.get("figures")
        days |= set(fmt.failing_partitions(getattr(figures, "value", figures)))
    return sorted(days)


def _job(context: dg.SensorEvaluationContext, name: str) -> dg.JobDefinition | None:
    try:
        return context.repository_def.get_job(name)
    except Exception:  # noqa: BLE001 - a job removed since the run
        return None


def _failure(run: dg.DagsterRun, context: dg.SensorEvaluationContext) -> fmt.RunFailure:
    job = _job(context, run.job_name)
    keys = run.asset_selection or (job.asset_layer.executable_asset_keys if job is not None else set())
    assets = sorted(k.to_user_string() for k in keys)
    days, reason = window_keys(run.tags), run.tags.get(REASON_TAG)
    if run.job_name == rollback_mod.JOB_NAME:
        # A rollback asks in its config, not its tags: what it was asked to restore is what the channel must see.
        asked = rollback_mod.asked(run)
        days = list(asked[0]) if asked else days
        assets = [dg.AssetKey(list(k)).to_user_string() for k in rollback_mod.RESTORED_ASSETS]
        asked_reason = rollback_mod.config_of(run).get("reason")
        reason = reason or (asked_reason if isinstance(asked_reason, str) else None)
    return fmt.RunFailure(
        job=None if run.job_name.startswith("__") else run.job_name, assets=assets, run_id=run.run_id,
        window=fmt.short_window(days), failing=_failing_days(context.instance, run.run_id),
        backfill_id=run.tags.get(BACKFILL_TAG), reason=reason,
        errors=_errors(context.instance, run.run_id, job))


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, batch: int | None = None,
             sensor: str = NAME) -> dg.SkipReason:
    """One tick: alert up to `batch` run failures after the cursor, oldest first."""
    box = Outbox(context, slack, sensor)
    if box.stopped:
        return box.finish("no run failure alert sent", len(box.state.get("parts", {})))
    state = box.state
    jobs = set(context.repository_def.job_names)
    events = context.instance.fetch_run_status_changes(
        dg.RunStatusChangeRecordsFilter(event_type=dg.DagsterEventType.RUN_FAILURE,
                                        after_storage_id=state.get("after_storage_id")),
        limit=batch or common.BATCH, ascending=True).records
    waiting = ""
    done = 0
    for event in events:
        run = context.instance.get_run_by_id(event.run_id)
        if run is not None and run.job_name in jobs and event.timestamp >= box.since:
            failure = _failure(run, context)
            thread, wait = box.reply_target(failure.backfill_id, event.timestamp)
            if wait:
                waiting = f"; waiting for backfill {failure.backfill_id}'s started message before alerting"
                break

            def commit(_ts: str, storage_id: int = event.storage_id) -> None:
                state["after_storage_id"] = storage_id

            if not box.send(f"run:{event.storage_id}", fmt.run_failure(failure, slack.links), commit, thread):
                context.log.warning(f"run failure alert for {run.run_id} not delivered, retried next tick: "
                                    f"{box.why_stopped}")
                break
        else:
            state["after_storage_id"] = event.storage_id
        done += 1
    return box.finish(f"delivered {box.delivered} run failure alert(s){waiting}", len(events) - done)


def build(name: str = NAME, interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY},
               description="Posts one Slack message per failed run of this code location.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        slack: AtlasSlack = getattr(context.resources, SLACK_KEY)
        return skip_unless_configured(slack) or evaluate(context, slack, sensor=name)

    return _sensor
