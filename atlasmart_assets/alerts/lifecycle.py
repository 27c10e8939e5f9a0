"""Backfill lifecycle notices, each sent once per backfill: started, then published (with the change notice,
also written to <data>/notices/<backfill_id>.md) or failed; and one notice per rollback run.

Cursor: {"backfills": {backfill_id: "started" | "done"}, "rollbacks": [run ids noticed]}; a notice is recorded
only after Slack accepted it, and "done" is never sent before "started"."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any, Sequence

import dagster as dg

from atlasmart_assets import settings, warehouse
from atlasmart_assets.alerts import common
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.common import SLACK_KEY, dump_cursor, load_cursor, partitions_of, skip_unless_configured
from atlasmart_assets.alerts.slack import AtlasSlack, SlackPostError
from atlasmart_assets.window import BACKFILL_TAG, REASON_TAG

ROLLBACK_JOB = "rollback_job"
KEEP_ROLLBACKS = 500
LEDGER_LOCK_TIMEOUT_S = 20.0
USER_TAGS = ("user", "dagster/user", "atlasmart/requested_by", "requested_by")
FAILED_BACKFILL = {"FAILED", "COMPLETED_FAILED", "CANCELED"}
ENDED_BACKFILL = FAILED_BACKFILL | {"COMPLETED", "COMPLETED_SUCCESS"}
LEDGER_COLUMNS = ("partition_date, publication_id, kind, rows_before, rows_after, controls_before, controls_after, "
                  "sha256_before, sha256_after, changed, restored_from")


def _cfg() -> settings.Settings:
    cfg = settings.load()
    # A sensor tick has a deadline; a run holding the warehouse lock longer just delays the notice a tick.
    return dataclasses.replace(cfg, lock_timeout_s=min(cfg.lock_timeout_s, LEDGER_LOCK_TIMEOUT_S))


def _change(row: Sequence[Any]) -> fmt.PartitionChange:
    return fmt.PartitionChange(
        partition=row[0].isoformat(), publication_id=row[1], kind=row[2], rows_before=row[3], rows_after=row[4],
        controls_before=json.loads(row[5]) if row[5] else None, controls_after=json.loads(row[6]),
        sha256_before=row[7], sha256_after=row[8], changed=bool(row[9]), restored_from=row[10])


def ledger_changes(column: str, value: str, kind: str) -> list[fmt.PartitionChange]:
    """Ledger rows of one backfill (column='backfill_id') or one run (column='run_id'), per partition."""
    assert column in ("backfill_id", "run_id")
    with warehouse.connect(_cfg()) as con:
        rows = con.execute(f"select {LEDGER_COLUMNS} from audit.publications where {column} = $v and kind = $kind "
                           "order by partition_date, seq", {"v": value, "kind": kind}).fetchall()
    return [_change(r) for r in rows]


def neighbours(changes: Sequence[fmt.PartitionChange], backfill_id: str) -> list[fmt.Neighbour]:
    """The partitions either side of the corrected window, as published now."""
    if not changes:
        return []
    days = sorted(dt.date.fromisoformat(c.partition) for c in changes)
    around = [days[0] - dt.timedelta(days=1), days[-1] + dt.timedelta(days=1)]
    with warehouse.connect(_cfg()) as con:
        rows = con.execute("select partition_date, publication_id, sha256_after, backfill_id "
                           "from audit.current_publications where partition_date in ($a, $b)",
                           {"a": around[0], "b": around[1]}).fetchall()
    found = {r[0]: r for r in rows}
    return [fmt.Neighbour(d.isoformat(), found[d][1] if d in found else None, found[d][2] if d in found else None,
                          d not in found or found[d][3] != backfill_id) for d in around]


def undone_backfills(changes: Sequence[fmt.PartitionChange]) -> list[str]:
    """Which backfills published the versions a rollback replaced."""
    if not changes:
        return []
    with warehouse.connect(_cfg()) as con:
        rows = con.execute("select distinct p.backfill_id from audit.publications r join audit.publications p "
                           "on p.publication_id = r.prev_publication_id and p.partition_date = r.partition_date "
                           "where r.publication_id = $pub and p.backfill_id is not null",
                           {"pub": changes[0].publication_id}).fetchall()
    return sorted(r[0] for r in rows)


def write_notice(backfill_id: str, text: str) -> Path:
    path = settings.load().notices_dir / f"{backfill_id}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def _describe(backfill_id: str, runs: Sequence[dg.DagsterRun], record: Any, slack: AtlasSlack) -> fmt.Backfill:
    tags: dict[str, str] = dict(record.tags) if record is not None else {}
    for run in reversed(runs):
        tags = {**run.tags, **tags}
    window = ", ".join(sorted({p for p in (partitions_of(r.tags) for r in runs) if p}))
    if not window and record is not None and record.partition_names:
        names = sorted(record.partition_names)
        window = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
    assets = sorted({k.to_user_string() for r in runs for k in (r.asset_selection or ())})
    if not assets and record is not None and record.asset_selection:
        assets = sorted(k.to_user_string() for k in record.asset_selection)
    user = next((tags[t] for t in USER_TAGS if tags.get(t)), None)
    extra = {k: v for k, v in tags.items() if not k.startswith("dagster/") and k not in (REASON_TAG, *USER_TAGS)}
    return fmt.Backfill(backfill_id, window or "(window unknown)", assets, tags.get(REASON_TAG), user, extra,
                        [slack.run_url(r.run_id) for r in runs])


def _outcome(runs: Sequence[dg.DagsterRun], record: Any) -> str | None:
    """None while the backfill runs; else 'published' or the failed status."""
    if any(not r.is_finished for r in runs):
        return None
    if record is not None:
        status = record.status.value
        if status not in ENDED_BACKFILL:
            return None
        if status in FAILED_BACKFILL:
            return status
    if not runs:
        return None
    last = runs[0]  # get_runs lists newest first
    return "published" if last.status == dg.DagsterRunStatus.SUCCESS else last.status.value


def _backfill_ids(instance: dg.DagsterInstance) -> list[str]:
    ids = {b.backfill_id for b in instance.get_backfills(limit=100)}
    for _key, values in instance.get_run_tags(tag_keys=[BACKFILL_TAG]):
        ids |= set(values)
    return sorted(ids)


def _notices(context: dg.SensorEvaluationContext, slack: AtlasSlack, state: dict[str, Any]):  # noqa: ANN202
    """Yields (message, commit) pairs in the order they must be delivered."""
    seen: dict[str, str] = state.setdefault("backfills", {})
    for backfill_id in _backfill_ids(context.instance):
        if seen.get(backfill_id) == "done":
            continue
        runs = list(context.instance.get_runs(filters=dg.RunsFilter(tags={BACKFILL_TAG: backfill_id})))
        record = context.instance.get_backfill(backfill_id)
        if not runs and record is None:
            continue
        info = _describe(backfill_id, runs, record, slack)
        if backfill_id not in seen:
            yield fmt.backfill_started(info), (lambda b=backfill_id: seen.__setitem__(b, "started"))
        outcome = _outcome(runs, record)
        if outcome is None:
            continue
        if outcome == "published":
            changes = ledger_changes("backfill_id", backfill_id, "publish")
            around = neighbours(changes, backfill_id)
            path = write_notice(backfill_id, fmt.change_notice_markdown(info, changes, around)) if changes else None
            text = fmt.backfill_published(info, changes, around, str(path) if path else "")
        else:
            text = fmt.backfill_failed(info, outcome)
        yield text, (lambda b=backfill_id: seen.__setitem__(b, "done"))
    noticed: list[str] = state.setdefault("rollbacks", [])
    rollbacks = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=ROLLBACK_JOB, statuses=[dg.DagsterRunStatus.SUCCESS]), limit=100)
    for run in reversed(list(rollbacks)):
        if run.run_id in noticed:
            continue
        changes = ledger_changes("run_id", run.run_id, "rollback")
        reason = run.run_config.get("ops", {}).get("rollback_range", {}).get("config", {}).get("reason")
        text = fmt.rolled_back(run.run_id, slack.run_url(run.run_id), reason, changes, undone_backfills(changes))
        yield text, (lambda r=run.run_id: noticed.append(r))


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, batch: int | None = None) -> dg.SkipReason:
    """One tick: deliver up to `batch` lifecycle notices in order; stop at the first Slack refusal."""
    batch = common.BATCH if batch is None else batch
    state = load_cursor(context.cursor)
    delivered, error = 0, None
    for text, commit in _notices(context, slack, state):
        if delivered >= batch:
            break
        try:
            slack.post(text)
        except SlackPostError as exc:
            error = str(exc)
            context.log.warning(f"lifecycle notice not delivered, retried next tick: {error}")
            break
        commit()
        delivered += 1
    state["rollbacks"] = state.get("rollbacks", [])[-KEEP_ROLLBACKS:]
    context.update_cursor(dump_cursor(state))
    if error:
        return dg.SkipReason(f"delivered {delivered} lifecycle notice(s); Slack refused the next ({error})")
    return dg.SkipReason(f"delivered {delivered} lifecycle notice(s)")


def build(name: str = "atlasmart_backfill_lifecycle_to_slack", interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY},
               description="Backfill started / published (change notice) / failed, and rollbacks, to Slack.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        slack: AtlasSlack = getattr(context.resources, SLACK_KEY)
        return skip_unless_configured(slack) or evaluate(context, slack)

    return _sensor
