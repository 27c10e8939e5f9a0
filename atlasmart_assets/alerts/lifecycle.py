"""Backfill lifecycle notices, each sent once per backfill: started, then published (linking the change notice the
publish wrote to <data>/notices/<backfill_id>.md, see notices.py) or failed; and one notice per rollback run
(linking <data>/notices/<publication_id>.md).

"Started" opens a thread: its `ts` is kept in the cursor and in the key-value store (for the check and run
sensors, which post a backfill's failures as replies there); the outcome and a rollback of the backfill are
replies in it, broadcast to the channel when something failed or was undone.

Cursor: {"backfills": {backfill_id: {"ts": <ts of started>, "done": bool}}, "rollbacks": [run ids noticed]} plus
what delivery.Outbox keeps; a notice is recorded only after Slack accepted it, and "done" is never sent before
"started"."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import dagster as dg

from atlasmart_assets import attempts, notices
from atlasmart_assets import rollback as rollback_mod
from atlasmart_assets.alerts import common
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.common import SLACK_KEY, skip_unless_configured, window_keys
from atlasmart_assets.alerts.delivery import THREAD_KEY, Outbox
from atlasmart_assets.alerts.slack import AtlasSlack
from atlasmart_assets.contract import BACKFILL_TAG, REASON_TAG, USER_TAGS
from atlasmart_assets.resources import WAREHOUSE_KEY, Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.warehouse import ledger

NAME = "atlasmart_backfill_lifecycle_to_slack"
# What readers query and what the day links open (the ledger records fact and mart publications together).
READERS_VIEW = "mart.revenue_daily_v"
PUBLISHED_ASSET = "mart/revenue_daily"
KEEP_ROLLBACKS = 500
LEDGER_LOCK_TIMEOUT_S = 20.0
FAILED_BACKFILL = {"FAILED", "COMPLETED_FAILED", "CANCELED"}
ENDED_BACKFILL = FAILED_BACKFILL | {"COMPLETED", "COMPLETED_SUCCESS"}
LEDGER_COLUMNS = ("partition_date, publication_id, kind, rows_before, rows_after, controls_before, controls_after, "
                  "sha256_before, sha256_after, changed, restored_from")


def _reader(wh: Warehouse):  # noqa: ANN202 - a context manager of a read-only connection
    # A sensor tick has a deadline; a run holding the warehouse lock longer just delays the notice a tick.
    return wh.reader(timeout_s=min(wh.settings.lock_timeout_s, LEDGER_LOCK_TIMEOUT_S))


def _change(row: Sequence[Any]) -> fmt.PartitionChange:
    return fmt.PartitionChange(
        partition=row[0].isoformat(), publication_id=row[1], kind=row[2], rows_before=row[3], rows_after=row[4],
        controls_before=json.loads(row[5]) if row[5] else None, controls_after=json.loads(row[6]),
        sha256_before=row[7], sha256_after=row[8], changed=bool(row[9]), restored_from=row[10],
        repaired=bool(row[11]))


def ledger_changes(wh: Warehouse, column: str, value: str, kind: str) -> list[fmt.PartitionChange]:
    """What one backfill (column='backfill_id') or one run (column='run_id') did to each partition: a day it
    published twice (a retried or re-executed run) once, before its first publication → after its last, as the
    notice shows it."""
    assert column in ("backfill_id", "run_id")
    with _reader(wh) as con:
        columns = f"{LEDGER_COLUMNS}, {ledger.repaired_column(con)}"
        rows = con.execute(f"select {columns} from audit.publications where {column} = $v and kind = $kind "
                           "order by partition_date, seq", {"v": value, "kind": kind}).fetchall()
    first: dict[str, fmt.PartitionChange] = {}
    last: dict[str, fmt.PartitionChange] = {}
    repaired: set[str] = set()
    for r in rows:
        change = _change(r)
        first.setdefault(change.partition, change)
        last[change.partition] = change
        if change.repaired:
            repaired.add(change.partition)
    return [c if first[day] is c else
            dataclasses.replace(c, rows_before=first[day].rows_before, controls_before=first[day].controls_before,
                                sha256_before=first[day].sha256_before,
                                changed=first[day].sha256_before != c.sha256_after, repaired=day in repaired)
            for day, c in last.items()]


def neighbours(wh: Warehouse, changes: Sequence[fmt.PartitionChange], backfill_id: str) -> list[fmt.Neighbour]:
    """The partitions either side of the corrected window, as published now."""
    if not changes:
        return []
    days = sorted(dt.date.fromisoformat(c.partition) for c in changes)
    around = [days[0] - dt.timedelta(days=1), days[-1] + dt.timedelta(days=1)]
    with _reader(wh) as con:
        rows = con.execute("select partition_date, publication_id, sha256_after, backfill_id "
                           "from audit.current_publications where partition_date in ($a, $b)",
                           {"a": around[0], "b": around[1]}).fetchall()
    found = {r[0]: r for r in rows}
    return [fmt.Neighbour(d.isoformat(), found[d][1] if d in found else None, found[d][2] if d in found else None,
                          d not in found or found[d][3] != backfill_id) for d in around]


def undone_backfills(wh: Warehouse, changes: Sequence[fmt.PartitionChange]) -> list[str]:
    """Which backfills published the versions a rollback replaced."""
    if not changes:
        return []
    with _reader(wh) as con:
        rows = con.execute("select distinct p.backfill_id from audit.publications r join audit.publications p "
                           "on p.publication_id = r.prev_publication_id and p.partition_date = r.partition_date "
                           "where r.publication_id = $pub and p.backfill_id is not null",
                           {"pub": changes[0].publication_id}).fetchall()
    return sorted(r[0] for r in rows)


def notice_file(wh: Warehouse, identifier: str, publication_id: str, info: fmt.Backfill | None = None,
                run: RunInfo | None = None) -> Path | None:
    """The change notice the publish wrote (`notices.py`); written here only if it is missing (a run killed between
    the swap and the notice), from the same ledger rows and formatter, with who asked and the operator's tags from
    `info` (a backfill's) or `run` (a rollback's)."""
    path = notices.notice_path(wh.settings, identifier)
    if path.exists():
        return path
    tags = info.tags if info else dict(run.tags) if run else None
    requested_by = info.requested_by if info else run.requested_by if run else None
    with _reader(wh) as con:
        return notices.write_for(con, wh.settings, publication_id, info.backfill_id if info else None,
                                 tags=tags, requested_by=requested_by)


def _asset_backfill_keys(record: Any, asset_graph: Any) -> list[str]:
    """The partitions an asset backfill targets: Dagster stores no partition_names for it, only the target
    subset of its asset backfill data (serialized in records written by older versions)."""
    try:
        data = record.asset_backfill_data or record.get_asset_backfill_data(asset_graph)
        subsets = data.target_subset.partitions_subsets_by_asset_key.values()
        return sorted({k for subset in subsets for k in subset.get_partition_keys()})
    except Exception:  # noqa: BLE001 - definitions changed since the backfill: fall back to the runs' tags
        return []


def _window(runs: Sequence[dg.DagsterRun], record: Any, asset_graph: Any) -> list[str]:
    """The backfill's whole window: its record first (known at launch, before any run), then its runs' tags."""
    if record is not None and record.is_asset_backfill:
        keys = _asset_backfill_keys(record, asset_graph)
        if keys:
            return keys
    if record is not None and record.partition_names:
        return sorted(record.partition_names)
    return sorted({k for r in runs for k in window_keys(r.tags)})


def _job_assets(repo: dg.RepositoryDefinition, job_name: str) -> set[dg.AssetKey]:
    try:
        return set(repo.get_job(job_name).asset_layer.executable_asset_keys)
    except Exception:  # noqa: BLE001 - a job removed since the run names no assets
        return set()


def _describe(backfill_id: str, runs: Sequence[dg.DagsterRun], record: Any,
              repo: dg.RepositoryDefinition) -> fmt.Backfill:
    tags: dict[str, str] = dict(record.tags) if record is not None else {}
    for run in reversed(runs):
        tags = {**run.tags, **tags}
    window = fmt.window_label(_window(runs, record, repo.asset_graph))
    keys = {k for r in runs for k in (r.asset_selection or ())}
    if not keys and record is not None and record.asset_selection:
        keys = set(record.asset_selection)
    if not keys:
        keys = {k for name in {r.job_name for r in runs} for k in _job_assets(repo, name)}
    assets = sorted(k.to_user_string() for k in keys)
    extra = fmt.visible_tags(tags, hidden=(REASON_TAG, *USER_TAGS))
    return fmt.Backfill(backfill_id, window or "(window unknown)", assets, tags.get(REASON_TAG), _user(tags), extra,
                        [r.run_id for r in reversed(runs)])


def _user(tags: Mapping[str, str]) -> str | None:
    """Who asked, from a run's or a backfill's tags, as the notice names them (RunInfo: contract.USER_TAGS in order,
    "user" being the tag Dagster's UI puts on what a signed-in user launches)."""
    return RunInfo.from_tags("", tags).requested_by


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


@dataclasses.dataclass(frozen=True)
class Notice:
    """One lifecycle event to post: its messages, where (a thread or the channel), and what to record."""

    key: str
    messages: list[fmt.Message]
    commit: Callable[[str], Mapping[str, str] | None]
    thread_ts: str | None = None
    broadcast: bool = False


def _entry(value: Any) -> dict[str, Any]:
    # Cursors written before threading held "started" / "done" per backfill (no thread to reply in).
    if isinstance(value, dict):
        return value
    return {"ts": None, "done": value == "done"}


def _created(instance: dg.DagsterInstance, run_id: str) -> float:
    record = instance.get_run_record_by_id(run_id)
    return record.create_timestamp.timestamp() if record is not None else 0.0


def _ended_before(instance: dg.DagsterInstance, runs: Sequence[dg.DagsterRun], record: Any, since: float) -> bool:
    """A backfill that was over before the sensor's first tick (`since`): history, not news."""
    if not since or _outcome(runs, record) is None:
        return False
    created = record.backfill_timestamp if record is not None else min(_created(instance, r.run_id) for r in runs)
    return created < since


def _notices(context: dg.SensorEvaluationContext, slack: AtlasSlack, state: dict[str, Any],
             since: float = 0.0) -> Iterator[Notice]:
    """Yields the notices in the order they must be delivered; a backfill's "started" always first, and its
    outcome computed only after "started" was taken (so the outcome can reply in its thread)."""
    seen: dict[str, Any] = state.setdefault("backfills", {})
    links = slack.links
    wh: Warehouse = getattr(context.resources, WAREHOUSE_KEY)
    for backfill_id in _backfill_ids(context.instance):
        if backfill_id in seen:
            seen[backfill_id] = _entry(seen[backfill_id])
        if seen.get(backfill_id, {}).get("done"):
            continue
        runs = list(context.instance.get_runs(filters=dg.RunsFilter(tags={BACKFILL_TAG: backfill_id})))
        record = context.instance.get_backfill(backfill_id)
        if not runs and record is None:
            continue
        if backfill_id not in seen and _ended_before(context.instance, runs, record, since):
            seen[backfill_id] = {"ts": None, "done": True}  # history from before the sensor's first tick
            continue
        info = _describe(backfill_id, runs, record, context.repository_def)
        if backfill_id not in seen:
            def started(ts: str, b: str = backfill_id) -> Mapping[str, str]:
                seen[b] = {"ts": ts, "done": False}
                return {THREAD_KEY.format(backfill_id=b): ts}

            yield Notice(f"started:{backfill_id}", fmt.backfill_started(info, links, READERS_VIEW), started)
        outcome = _outcome(runs, record)
        if outcome is None:
            continue
        if outcome == "published":
            changes = ledger_changes(wh, "backfill_id", backfill_id, "publish")
            around = neighbours(wh, changes, backfill_id)
            path = notice_file(wh, backfill_id, changes[-1].publication_id, info) if changes else None
            where = slack.notice_location(path) if path else ""
            messages = fmt.backfill_published(info, changes, around, where, PUBLISHED_ASSET, links)
        else:
            messages = fmt.backfill_failed(info, outcome, links,
                                           ledger_changes(wh, "backfill_id", backfill_id, "publish"))

        def done(_ts: str, b: str = backfill_id) -> None:
            seen[b]["done"] = True

        yield Notice(f"done:{backfill_id}", messages, done, seen[backfill_id].get("ts"),
                     broadcast=outcome != "published")
    noticed: list[str] = state.setdefault("rollbacks", [])
    # The rollback publications announced: two re-executions of one failed rollback find the one it committed.
    told: list[str] = state.setdefault("rollback_publications", [])
    telling: set[str] = set()
    rollbacks = context.instance.get_runs(
        filters=dg.RunsFilter(job_name=rollback_mod.JOB_NAME, statuses=[dg.DagsterRunStatus.SUCCESS]), limit=100)
    for run in reversed(list(rollbacks)):
        if run.run_id in noticed:
            continue
        if _created(context.instance, run.run_id) < since:
            noticed.append(run.run_id)
            continue
        changes = ledger_changes(wh, "run_id", run.run_id, "rollback")
        # A re-executed rollback whose earlier attempt committed (then failed) published nothing of its own: it
        # announces that attempt's rollback, which no one announced (a failed run is not).
        for attempt in [] if changes else attempts.earlier(context.instance, run, rollback_mod.asked):
            changes = ledger_changes(wh, "run_id", attempt, "rollback")
            if changes:
                break
        pub_id = changes[0].publication_id if changes else None
        if pub_id is not None and (pub_id in told or pub_id in telling):
            noticed.append(run.run_id)
            continue
        if pub_id is not None:
            telling.add(pub_id)
        reason = run.run_config.get("ops", {}).get("rollback_range", {}).get("config", {}).get("reason")
        undone = undone_backfills(wh, changes)
        thread = next((ts for b in undone if (ts := _entry(seen.get(b, {})).get("ts"))), None)
        path = notice_file(wh, pub_id, pub_id, run=RunInfo.from_tags(run.run_id, run.tags)) if pub_id is not None \
            else None

        def announced(_ts: str, r: str = run.run_id, p: str | None = pub_id) -> None:
            noticed.append(r)
            if p is not None:
                told.append(p)

        yield Notice(f"rollback:{run.run_id}", fmt.rolled_back(run.run_id, reason, changes, undone, PUBLISHED_ASSET,
                                                              links, slack.notice_location(path) if path else "",
                                                              _user(run.tags)),
                     announced, thread, broadcast=True)


def evaluate(context: dg.SensorEvaluationContext, slack: AtlasSlack, batch: int | None = None,
             sensor: str = NAME) -> dg.SkipReason:
    """One tick: deliver up to `batch` lifecycle notices in order; stop at the first Slack refusal."""
    box = Outbox(context, slack, sensor, opens_threads=True)
    if box.stopped:
        return box.finish("no lifecycle notice sent", len(box.state.get("parts", {})))
    state = box.state
    batch = batch or common.BATCH
    for notice in _notices(context, slack, state, box.since):
        if box.delivered >= batch:
            break
        if not box.send(notice.key, notice.messages, notice.commit, notice.thread_ts, notice.broadcast):
            context.log.warning(f"lifecycle notice not delivered, retried next tick: {box.why_stopped}")
            break
    state["rollbacks"] = state.get("rollbacks", [])[-KEEP_ROLLBACKS:]
    state["rollback_publications"] = state.get("rollback_publications", [])[-KEEP_ROLLBACKS:]
    return box.finish(f"delivered {box.delivered} lifecycle notice(s)", 1 if box.stopped else 0)


def build(name: str = NAME, interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=name, minimum_interval_seconds=interval_s, default_status=dg.DefaultSensorStatus.RUNNING,
               required_resource_keys={SLACK_KEY, WAREHOUSE_KEY},
               description="Backfill started / published (change notice) / failed, and rollbacks, to Slack.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        slack: AtlasSlack = getattr(context.resources, SLACK_KEY)
        return skip_unless_configured(slack) or evaluate(context, slack, sensor=name)

    return _sensor
