"""One Slack message per failed asset-check execution (WARN or ERROR, blocking or not), each sent once.

Cursor, per check: `low`, the record id up to which every execution is settled (passed, alerted, or planned
in a run that ended without a result), and `sent`, the ids above `low` already alerted. A planned row can turn
FAILED after younger rows were seen (runs overlap), so the cursor never moves past an unsettled row.

A failure in a backfill's run is a reply in the backfill's thread (opened by the lifecycle sensor's "started"
message); it waits up to delivery.THREAD_WAIT_S for that thread, then goes to the channel.

A check whose result carries a `state` (the freshness check: "<due day>:missing") judges the deployment, not the
run it executed in: Dagster also runs it inside every materialization of its asset, backfills included. Its
failures are alerted once per state, in the channel, wherever they were evaluated; a repeat of an alerted state is
settled without a message (the last STATES_KEPT states are remembered per check)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import dagster as dg

from atlasmart_assets.alerts import common
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.check_records import CheckRecord, records_after
from atlasmart_assets.alerts.common import SLACK_KEY, STATE_KEY, skip_unless_configured, window_keys
from atlasmart_assets.alerts.delivery import Outbox
from atlasmart_assets.alerts.slack import AtlasSlack
from atlasmart_assets.contract import BACKFILL_TAG

NAME = "atlasmart_check_failures_to_slack"
STATES_KEPT = 50


class _Runs:
    """Run lookups of one tick, cached."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self._instance = instance
        self._runs: dict[str, dg.DagsterRun | None] = {}

    def get(self, run_id: str) -> dg.DagsterRun | None:
        if run_id not in self._runs:
            self._runs[run_id] = self._instance.get_run_by_id(run_id)
        return self._runs[run_id]

    def finished(self, run_id: str) -> bool:
        run = self.get(run_id)
        return run is None or run.is_finished


def _settled(rec: CheckRecord, sent: set[int], runs: _Runs, since: float) -> bool:
    if rec.failed:
        return rec.id in sent or rec.created < since
    if rec.planned:
        return runs.finished(rec.run_id)
    return True


def _failure(group: list[CheckRecord], runs: _Runs) -> fmt.CheckFailure:
    """One message's worth: a check's failed records of one run. The failing days are the records' own
    partitions, else those the figures single out, else (none named) the run's whole window."""
    first = group[0]
    run = runs.get(first.run_id)
    tags = run.tags if run else {}
    own = sorted({r.partition for r in group if r.partition})
    figures: Any = first.metadata.get("figures")
    if len(group) > 1:
        figures = {r.partition or str(r.id): r.metadata.get("figures") for r in group}
    failing = own or sorted({d for r in group for d in fmt.failing_partitions(r.metadata.get("figures"))})
    return fmt.CheckFailure(
        asset=first.key.asset_key.to_user_string(), check=first.key.name, severity=first.severity or "ERROR",
        blocking=bool(first.blocking), failing=failing, window=fmt.short_window(window_keys(tags)) or ", ".join(own),
        description=first.description or "", figures=figures, run_id=first.run_id,
        backfill_id=tags.get(BACKFILL_TAG))


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, batch: int | None = None,
             sensor: str = NAME) -> dg.SkipReason:
    """One tick: alert up to `batch` unsent failures, oldest first, and persist what was delivered. A failure in
    a backfill's run is a reply in the backfill's thread, so it waits (up to THREAD_WAIT_S) for that thread."""
    batch = batch or common.BATCH
    box = Outbox(context, slack, sensor)
    if box.stopped:
        return box.finish("no check alert sent", len(box.state.get("parts", {})))
    state: dict[str, Any] = box.state.setdefault("checks", {})
    runs = _Runs(context.instance)
    keys = sorted(context.repository_def.asset_graph.asset_check_keys, key=lambda k: k.to_user_string())
    records: dict[str, list[CheckRecord]] = {}
    pending: dict[tuple[str, str], list[CheckRecord]] = defaultdict(list)
    for key in keys:
        name = key.to_user_string()
        entry = state.setdefault(name, {"low": 0, "sent": []})
        records[name] = records_after(context.instance, key, entry["low"])
        for rec in records[name]:
            if rec.failed and rec.id not in entry["sent"] and rec.created >= box.since:
                pending[(name, rec.run_id)].append(rec)
    groups = sorted(pending.items(), key=lambda item: item[1][0].id)
    waiting = repeated = 0
    for (name, run_id), group in groups:
        if box.delivered >= batch:
            break
        judged = str(group[0].metadata.get(STATE_KEY) or "")

        def commit(_ts: str | None, name: str = name, group: list[CheckRecord] = group, judged: str = judged) -> None:
            state[name]["sent"] = sorted(set(state[name]["sent"]) | {r.id for r in group})
            if judged:
                states = [s for s in state[name].get("states", []) if s != judged]
                state[name]["states"] = [*states, judged][-STATES_KEPT:]

        if judged and judged in state[name].get("states", []):
            commit(None)
            repeated += 1
            continue
        failure = _failure(group, runs)
        thread, wait = (None, False) if judged else box.reply_target(failure.backfill_id, group[0].created)
        if wait:
            waiting += 1
            continue

        if not box.send(f"check:{name}:{run_id}", fmt.check_failure(failure, slack.links), commit, thread):
            context.log.warning(f"check alert for {name} not delivered, retried next tick: {box.why_stopped}")
            break
    for name, recs in records.items():
        entry = state[name]
        sent = set(entry["sent"])
        for rec in recs:
            if not _settled(rec, sent, runs, box.since):
                break
            entry["low"] = rec.id
        entry["sent"] = sorted(i for i in sent if i > entry["low"])
    left = len(pending) - box.delivered - repeated
    wait = f" ({waiting} waiting for their backfill's started message)" if waiting else ""
    again = f"; {repeated} repeat(s) of an alerted state not sent again" if repeated else ""
    return box.finish(f"delivered {box.delivered} check alert(s){again}; {left} pending{wait}", left)


def build(name: str = NAME, interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY},
               description="Posts one Slack message per failed asset-check execution (WARN and ERROR).")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        slack: AtlasSlack = getattr(context.resources, SLACK_KEY)
        return skip_unless_configured(slack) or evaluate(context, slack, sensor=name)

    return _sensor
