"""One Slack message per failed asset-check execution (WARN or ERROR, blocking or not), each sent once.

Cursor, per check: `low`, the record id up to which every execution is settled (passed, alerted, or planned
in a run that ended without a result), and `sent`, the ids above `low` already alerted. A planned row can turn
FAILED after younger rows were seen (runs overlap), so the cursor never moves past an unsettled row."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import dagster as dg

from atlasmart_assets.alerts import common
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.check_records import CheckRecord, records_after
from atlasmart_assets.alerts.common import SLACK_KEY, dump_cursor, load_cursor, partitions_of, skip_unless_configured
from atlasmart_assets.alerts.slack import AtlasSlack, SlackPostError


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


def _settled(rec: CheckRecord, sent: set[int], runs: _Runs) -> bool:
    if rec.failed:
        return rec.id in sent
    if rec.planned:
        return runs.finished(rec.run_id)
    return True


def _failure(group: list[CheckRecord], runs: _Runs, slack: AtlasSlack) -> fmt.CheckFailure:
    first = group[0]
    run = runs.get(first.run_id)
    own = sorted({r.partition for r in group if r.partition})
    partitions = ", ".join(own) if own else partitions_of(run.tags if run else {})
    figures: Any = first.metadata.get("figures")
    if len(group) > 1:
        figures = {r.partition or str(r.id): r.metadata.get("figures") for r in group}
    return fmt.CheckFailure(
        asset=first.key.asset_key.to_user_string(), check=first.key.name, severity=first.severity or "ERROR",
        blocking=bool(first.blocking), partitions=partitions, description=first.description or "",
        figures=figures, run_id=first.run_id, run_url=slack.run_url(first.run_id))


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, batch: int | None = None) -> dg.SkipReason:
    """One tick: alert up to `batch` unsent failures, oldest first, and persist what was delivered."""
    batch = common.BATCH if batch is None else batch
    state: dict[str, Any] = load_cursor(context.cursor).get("checks", {})
    runs = _Runs(context.instance)
    keys = sorted(context.repository_def.asset_graph.asset_check_keys, key=lambda k: k.to_user_string())
    records: dict[str, list[CheckRecord]] = {}
    pending: dict[tuple[str, str], list[CheckRecord]] = defaultdict(list)
    for key in keys:
        name = key.to_user_string()
        entry = state.setdefault(name, {"low": 0, "sent": []})
        records[name] = records_after(context.instance, key, entry["low"])
        for rec in records[name]:
            if rec.failed and rec.id not in entry["sent"]:
                pending[(name, rec.run_id)].append(rec)
    groups = sorted(pending.items(), key=lambda item: item[1][0].id)[:batch]
    delivered, error = 0, None
    for (name, _), group in groups:
        try:
            slack.post(fmt.check_failure(_failure(group, runs, slack)))
        except SlackPostError as exc:
            error = str(exc)
            context.log.warning(f"check alert for {name} not delivered, retried next tick: {error}")
            break
        state[name]["sent"] = sorted(set(state[name]["sent"]) | {r.id for r in group})
        delivered += 1
    for name, recs in records.items():
        entry = state[name]
        sent = set(entry["sent"])
        for rec in recs:
            if not _settled(rec, sent, runs):
                break
            entry["low"] = rec.id
        entry["sent"] = sorted(i for i in sent if i > entry["low"])
    context.update_cursor(dump_cursor({"checks": state}))
    left = sum(1 for _ in pending) - delivered
    if error:
        return dg.SkipReason(f"delivered {delivered} check alert(s); Slack refused the next ({error}); "
                             f"{left} pending, retried next tick")
    return dg.SkipReason(f"delivered {delivered} check alert(s); {left} pending")


def build(name: str = "atlasmart_check_failures_to_slack", interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY},
               description="Posts one Slack message per failed asset-check execution (WARN and ERROR).")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        slack: AtlasSlack = getattr(context.resources, SLACK_KEY)
        return skip_unless_configured(slack) or evaluate(context, slack)

    return _sensor
