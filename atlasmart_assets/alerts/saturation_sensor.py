"""Saturation while it happens (seed 004): every tick, over the instance's run records, each current-lane run queued
or running while a backfill ran (or ended since the previous tick) is held to the objective (ATLASMART_SLO_QUEUE_WAIT_S,
ATLASMART_SLO_DURATION_S), counting the time so far of a run still queued or running. A breach is recorded against the
backfill in `audit.saturation_incidents` (through Warehouse.writer(); one row per backfill, run and objective, so it
is recorded once however many ticks see it) and then alerted once, from the ledger, as a reply in the backfill's
thread broadcast to the channel.

Cursor: `since`, the time of the previous evaluation (a run that ended before it was judged then), and `after_seq`,
the last incident alerted. A tick that cannot record (warehouse held) raises, keeps both and is retried."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Callable, Mapping

import dagster as dg

from atlasmart_assets import slo
from atlasmart_assets.alerts import common
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.common import SLACK_KEY, window_keys
from atlasmart_assets.alerts.delivery import Outbox
from atlasmart_assets.alerts.slack import NO_TOKEN_REASON, AtlasSlack
from atlasmart_assets.contract import BACKFILL_TAG
from atlasmart_assets.resources import WAREHOUSE_KEY, Warehouse
from atlasmart_assets.warehouse import incidents
from atlasmart_assets.warehouse.incidents import Incident

NAME = "atlasmart_saturation_incidents"
LOOKBACK_RUNS = 500
# On the first tick, current runs that ended up to this long ago are still judged.
FIRST_HORIZON_S = 3600.0
# An incident not alerted within this long (Slack off, or down for a day) is not alerted any more: it stays recorded.
ALERT_MAX_AGE_S = 24 * 3600.0
GROWTH = 1.25
TICK_LOCK_TIMEOUT_S = 10.0


def lane_limits(instance: dg.DagsterInstance) -> tuple[int | None, int | None]:
    """The backfill lane's run limit (`dagster/backfill` in dagster.yaml's tag_concurrency_limits) and
    max_concurrent_runs, as the instance's run queue has them; None when not set or not readable."""
    try:
        queue = instance.get_concurrency_config().run_queue_config
    except Exception:  # noqa: BLE001 - a run coordinator without a queue config: the figures are just unknown
        return None, None
    backfill = None
    for entry in queue.tag_concurrency_limits or []:
        item: Mapping[str, Any] = entry if isinstance(entry, Mapping) else vars(entry)
        if item.get("key") == BACKFILL_TAG and item.get("value") in (None, {}, ""):
            backfill = int(item["limit"])
    return backfill, queue.max_concurrent_runs


def _utc(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).replace(tzinfo=None)


def detect(context: dg.SensorEvaluationContext, wh: Warehouse, now: float, since: float) -> list[Incident]:
    """Record the breaches not yet recorded; returns the incidents recorded by this call."""
    records = context.instance.get_run_records(limit=LOOKBACK_RUNS)
    samples = [slo.sample_of(r) for r in records]
    found = slo.saturation(samples, slo.objective_of(wh), now, since)
    if not found:
        return []
    with wh.reader(timeout_s=TICK_LOCK_TIMEOUT_S) as con:
        seen = incidents.known(con, [s.backfill_id for s in found])
    tags = {r.dagster_run.run_id: r.dagster_run.tags for r in records}
    limit, max_runs = lane_limits(context.instance)
    running = [s for s in samples if s.started is not None and s.ended is None]
    drafts = []
    grown = [((s.backfill_id, b.run_id, b.metric), b) for s in found for b in s.breaches
             if _grown(seen.get((s.backfill_id, b.run_id, b.metric)), b.observed_s, b.status)]
    for s in found:
        new = tuple(b for b in s.breaches if (s.backfill_id, b.run_id, b.metric) not in seen)
        if not new:
            continue
        window = fmt.short_window(k for r in s.backfill_runs for k in window_keys(tags.get(r.run_id, {})))
        drafts.append(Incident(0, "", s.backfill_id, window, _utc(now), tuple(r.run_id for r in s.backfill_runs),
                               sum(r.lane == "backfill" for r in running), limit, len(running), max_runs, new))
    if not drafts and not grown:
        return []
    with wh.writer(timeout_s=TICK_LOCK_TIMEOUT_S) as con:
        for key, b in grown:
            incidents.grow(con, key, b.observed_s, b.status)
        recorded = [incidents.record(con, d) for d in drafts]
    return [r for r in recorded if r is not None]


def _grown(recorded: tuple[float, str] | None, observed_s: float, status: str) -> bool:
    """Worth a write: the run's status moved (its last figure is final once it ends), or its figure grew by
    GROWTH since recorded (a run waiting an hour is rewritten a few times, not every tick)."""
    return recorded is not None and (status != recorded[1] or observed_s >= recorded[0] * GROWTH)


def message(inc: Incident, links: fmt.Links) -> list[fmt.Message]:
    return fmt.saturation_incident(fmt.Saturation(
        inc.incident_id, inc.backfill_id, inc.backfill_window, f"{inc.detected_at:%Y-%m-%d %H:%M:%S} UTC",
        [fmt.SaturationBreach(b.run_id, b.metric, b.observed_s, b.objective_s, b.status) for b in inc.breaches],
        inc.backfill_run_ids, inc.backfill_runs_in_progress, inc.backfill_lane_limit, inc.runs_in_progress,
        inc.max_concurrent_runs), links)


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, wh: Warehouse,
             clock: Callable[[], float] = time.time, sensor: str = NAME) -> dg.SkipReason:
    """One tick: record new breaches, then alert up to BATCH unalerted incidents, oldest first."""
    box = Outbox(context, slack, sensor)
    state = box.state
    now = clock()
    recorded = detect(context, wh, now, float(state.get("since", now - FIRST_HORIZON_S)))
    state["since"] = now
    summary = f"recorded {len(recorded)} saturation incident(s)"
    if recorded:
        summary += " (" + ", ".join(f"{i.incident_id} against backfill {i.backfill_id}" for i in recorded) + ")"
    if not slack.configured:
        if recorded:
            state["after_seq"] = max(int(state.get("after_seq", 0)), *(i.incident_seq for i in recorded))
        return box.finish(f"{summary}; not alerted: {NO_TOKEN_REASON}", 0)
    if box.stopped:
        return box.finish(f"{summary}; no alert sent", len(state.get("parts", {})))
    with wh.reader(timeout_s=TICK_LOCK_TIMEOUT_S) as con:
        pending = incidents.after(con, int(state.get("after_seq", 0)))
    waiting = ""
    stale = 0
    for inc in pending[:common.BATCH]:
        detected = inc.detected_at.replace(tzinfo=dt.timezone.utc).timestamp()
        if now - detected > ALERT_MAX_AGE_S:
            state["after_seq"] = inc.incident_seq
            stale += 1
            continue
        thread, wait = box.reply_target(inc.backfill_id, detected)
        if wait:
            waiting = f"; waiting for backfill {inc.backfill_id}'s started message before alerting"
            break

        def commit(_ts: str, seq: int = inc.incident_seq) -> None:
            state["after_seq"] = seq

        if not box.send(f"saturation:{inc.incident_id}", message(inc, slack.links), commit, thread,
                        broadcast=thread is not None):
            context.log.warning(f"saturation alert {inc.incident_id} not delivered, retried next tick: {box.why_stopped}")
            break
    left = len(pending) - box.delivered - stale
    old = f"; {stale} older than {ALERT_MAX_AGE_S / 3600:g} h left unalerted" if stale else ""
    return box.finish(f"{summary}; delivered {box.delivered} saturation alert(s){old}{waiting}", left)


def build(name: str = NAME, interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY, WAREHOUSE_KEY},
               description="While a backfill runs, holds current-lane runs to the SLO objective (queue wait, "
                           "duration); a breach is recorded against the backfill (audit.saturation_incidents) and "
                           "alerted once in its thread.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        return evaluate(context, getattr(context.resources, SLACK_KEY), getattr(context.resources, WAREHOUSE_KEY),
                        sensor=name)

    return _sensor
