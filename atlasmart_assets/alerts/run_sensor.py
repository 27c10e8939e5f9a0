"""One Slack message per failed run of this code location (a blocking check, a crash, a refused backfill).

Written over the run-failure events rather than with dg.run_failure_sensor because that one moves its cursor
past a run even when the alert raised; here the cursor (the storage id of the last alerted failure event)
moves only after Slack accepted the message."""

from __future__ import annotations

import dagster as dg

from atlasmart_assets.alerts import common
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.common import SLACK_KEY, dump_cursor, load_cursor, partitions_of, skip_unless_configured
from atlasmart_assets.alerts.slack import AtlasSlack, SlackPostError
from atlasmart_assets.window import BACKFILL_TAG, REASON_TAG

MAX_ERRORS = 3


def _errors(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    events = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    out = []
    for e in events[:MAX_ERRORS]:
        err = getattr(e.dagster_event.event_specific_data, "error", None) if e.dagster_event else None
        out.append(f"{e.step_key}: {err.message.strip() if err else e.message}")
    if not out:
        out = [e.message for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)][:1]
    return out


def _failure(run: dg.DagsterRun, instance: dg.DagsterInstance, slack: AtlasSlack) -> fmt.RunFailure:
    return fmt.RunFailure(job=run.job_name, run_id=run.run_id, run_url=slack.run_url(run.run_id),
                          partitions=partitions_of(run.tags), backfill_id=run.tags.get(BACKFILL_TAG),
                          reason=run.tags.get(REASON_TAG), errors=_errors(instance, run.run_id))


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, batch: int | None = None) -> dg.SkipReason:
    """One tick: alert up to `batch` run failures after the cursor, oldest first."""
    batch = common.BATCH if batch is None else batch
    state = load_cursor(context.cursor)
    after: int | None = state.get("after_storage_id")
    jobs = set(context.repository_def.job_names)
    events = context.instance.fetch_run_status_changes(
        dg.RunStatusChangeRecordsFilter(event_type=dg.DagsterEventType.RUN_FAILURE, after_storage_id=after),
        limit=batch, ascending=True).records
    delivered, error = 0, None
    for event in events:
        run = context.instance.get_run_by_id(event.run_id)
        if run is not None and run.job_name in jobs:
            try:
                slack.post(fmt.run_failure(_failure(run, context.instance, slack)))
            except SlackPostError as exc:
                error = str(exc)
                context.log.warning(f"run failure alert for {run.run_id} not delivered, retried next tick: {error}")
                break
            delivered += 1
        state["after_storage_id"] = event.storage_id
    context.update_cursor(dump_cursor(state))
    if error:
        return dg.SkipReason(f"delivered {delivered} run failure alert(s); Slack refused the next ({error})")
    return dg.SkipReason(f"delivered {delivered} run failure alert(s)")


def build(name: str = "atlasmart_run_failures_to_slack", interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY},
               description="Posts one Slack message per failed run of this code location.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        slack: AtlasSlack = getattr(context.resources, SLACK_KEY)
        return skip_unless_configured(slack) or evaluate(context, slack)

    return _sensor
