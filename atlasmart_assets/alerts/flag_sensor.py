"""One Slack message per set of correction flags left behind: days still flagged `correction_in_progress` longer than
ATLASMART_FLAG_ALERT_AFTER_S (30 min) after their run set them, while that run has ended (crashed, cancelled,
failed) or is unknown to this Dagster instance. The clearing sensor (`atlasmart_clear_correction_flags`) should have
removed them within a tick: this is the alarm for when it did not (stopped, or its ticks failing).

Cursor: `alerted`, per holding run the days already alerted, kept only while the run still holds flags, so each
flag is alerted once. A flag of a backfill's run is a reply in the backfill's thread, broadcast to the channel."""

from __future__ import annotations

from collections import defaultdict

import dagster as dg

from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.common import SLACK_KEY, skip_unless_configured
from atlasmart_assets.alerts.delivery import Outbox
from atlasmart_assets.alerts.slack import AtlasSlack
from atlasmart_assets.contract import REVENUE_DAILY
from atlasmart_assets.resources import WAREHOUSE_KEY, Warehouse
from atlasmart_assets.warehouse import flags

NAME = "atlasmart_stale_correction_flags_to_slack"
READERS_VIEW = "mart.revenue_daily_v"
TICK_LOCK_TIMEOUT_S = 10.0


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, wh: Warehouse,
             sensor: str = NAME) -> dg.SkipReason:
    box = Outbox(context, slack, sensor)
    if box.stopped:
        return box.finish("no flag alert sent", len(box.state.get("parts", {})))
    if not wh.settings.warehouse_path.exists():
        return box.finish("no warehouse yet", 0)
    bound = wh.settings.flag_alert_after_s
    with wh.reader(timeout_s=TICK_LOCK_TIMEOUT_S) as con:
        held = flags.aged(con)
    by_run: dict[str, list[flags.Flag]] = defaultdict(list)
    for f in held:
        by_run[f.run_id].append(f)
    alerted: dict[str, list[str]] = {r: d for r, d in box.state.get("alerted", {}).items() if r in by_run}
    box.state["alerted"] = alerted
    pending = []
    for run_id, rows in sorted(by_run.items()):
        old = [f for f in rows if f.age_s >= bound and f.day not in alerted.get(run_id, [])]
        if not old:
            continue
        run = context.instance.get_run_by_id(run_id)
        if run is not None and not run.is_finished:
            continue
        pending.append((run_id, old, run.status.value if run is not None else None))
    for run_id, old, status in pending:
        first = min(old, key=lambda f: f.since)
        days = sorted(f.day for f in old)
        stale = fmt.StaleFlag(run_id, first.backfill_id, first.reason, days,
                              f"{first.since:%Y-%m-%d %H:%M:%S} UTC", max(f.age_s for f in old), status, bound)
        thread = box.thread_of(first.backfill_id) if first.backfill_id else None

        def commit(_ts: str, run_id: str = run_id, days: list[str] = days) -> None:
            alerted[run_id] = sorted(set(alerted.get(run_id, [])) | set(days))

        messages = fmt.stale_flags(stale, READERS_VIEW, "/".join(REVENUE_DAILY), slack.links)
        if not box.send(f"flags:{run_id}:{days[0]}:{days[-1]}", messages, commit, thread,
                        broadcast=thread is not None):
            context.log.warning(f"stale flag alert for run {run_id} not delivered, retried next tick: {box.why_stopped}")
            break
    return box.finish(f"delivered {box.delivered} stale-flag alert(s); {len(held)} day(s) flagged by {len(by_run)} "
                      f"run(s), {len(pending)} of them left behind for over {bound:g} s and not yet alerted",
                      len(pending) - box.delivered)


def build(name: str = NAME, interval_s: int = 60) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY, WAREHOUSE_KEY},
               description="Alerts once per correction flag still set ATLASMART_FLAG_ALERT_AFTER_S after its run "
                           "ended (or is unknown): the clearing sensor did not clear it.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        slack: AtlasSlack = getattr(context.resources, SLACK_KEY)
        return skip_unless_configured(slack) or evaluate(context, slack, getattr(context.resources, WAREHOUSE_KEY),
                                                         sensor=name)

    return _sensor
