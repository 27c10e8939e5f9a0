"""Undo corrections: restore an earlier publication of each partition in one commit, recorded as a rollback.

Without a target, each partition steps back one version from the content it shows now (a rollback's content is
the version it restored), so repeated rollbacks walk back through history rather than toggling."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

from atlasmart_assets import deletions, failpoints, partitions, reference, sql
from atlasmart_assets.alerts.format import window_label
from atlasmart_assets.contract import (
    CODE_VERSION,
    FCT_ORDER_LINES,
    FENCE_OVERRIDE_TAG,
    REASON_MAX_CHARS,
    REVENUE_DAILY,
    STAGED_ORDER_LINES,
    shown_id,
)
from atlasmart_assets.progress import Progress
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import FenceRefusal, RunInfo, TagRefusal, fence_refusal, tag_refusal
from atlasmart_assets.warehouse.connection import GiveWay, LockStats
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.ledger import Publication
from atlasmart_assets.warehouse.publish import PublishConflict, publish, restore_candidates
from atlasmart_assets.window import Window


class _Target(NamedTuple):
    """One day's row of rollback_targets.sql."""

    current: str  # the publication current now
    shown: str  # the version it shows (a rollback's: the one it restored)
    shown_found: bool  # whether the ledger holds that version of the day
    prev: str | None  # the version before the one shown
    to_found: bool  # whether the publication named by the rollback published the day


def targets(wh: Warehouse, window: Window, to_publication: str | None) -> dict[str, str]:
    """Which publication each partition of the window is restored to."""
    return _targets(wh, window, to_publication)[0]


def _targets(wh: Warehouse, window: Window, to_publication: str | None,
             stats: LockStats | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Which publication each partition of the window is restored to, and the current one it was chosen from."""
    with wh.reader(stats=stats) as con:
        rows = con.execute(sql.text("rollback_targets"), {**window.params, "to": to_publication}).fetchall()
    found = {row[0]: _Target(*row[1:]) for row in rows}
    now = {day: target.current for day, target in found.items()}
    missing = [p for p in window.keys if p not in found]
    if missing:
        raise ValueError(f"cannot roll back {window}: partitions {window_label(missing)} were never published")
    if to_publication:
        named = shown_id(repr(to_publication))  # quoted: a newline or a terminal escape in it is shown, not obeyed
        for p in window.keys:
            if not found[p].to_found:
                raise ValueError(f"publication {named} did not publish partition {p}")
        already = [p for p in window.keys if to_publication in (found[p].current, found[p].shown)]
        if already:
            raise ValueError(f"cannot roll back {window} to publication {named}: partition(s) {window_label(already)} "
                             "already show it; name an earlier publication, or leave those days out of the window")
        return {p: to_publication for p in window.keys}, now
    out = {}
    for p in window.keys:
        target = found[p]
        if not target.shown_found:
            raise ValueError(f"publication {target.shown} did not publish partition {p}")
        if target.prev is None:
            raise ValueError(f"cannot roll back {window}: partition {p} shows its first publication ({target.shown}); "
                             "there is nothing earlier to restore")
        out[p] = target.prev
    return out, now


# Each phase's share of a year's rollback on 2026-12-06 (targets 0.5 s, restore 0.3 s, publish 0.5 s, events
# 0.8 s), its days' rows pointed at where the version store holds them.
PHASES = (("targets", 0.24), ("restore", 0.14), ("publish", 0.24))
# The job's events after the commit (a materialization per day and asset): only the job, which writes them, has it.
EVENTS_PHASE = ("events", 0.38)


def header(start: str, end: str | None) -> str:
    """The run log's name for the rollback: its window as validated, never the config's text as typed."""
    try:
        return f"rollback {Window.of(start, end)}"
    except ValueError:
        return "rollback (of a window that is not valid)"


# The job a rollback runs as (jobs.rollback_job), which sensors pick out of the run records, and the assets whose
# partitions it restores (its events, and its failure alert, name them).
JOB_NAME = "rollback_job"
RESTORED_ASSETS = (STAGED_ORDER_LINES, FCT_ORDER_LINES, REVENUE_DAILY)


def config_of(run: Any) -> dict[str, Any]:
    """The rollback_range op's config of a rollback_job run (anything with its `run_config`): what it asks."""
    return (((run.run_config or {}).get("ops") or {}).get("rollback_range") or {}).get("config") or {}


def asked(run: Any) -> tuple[tuple[str, ...], str | None] | None:
    """What a rollback_job run (anything with its `run_config`) asks for: the days of its window and the publication
    it restores (None: one version back), as validated; None if it asks for nothing valid. A reason, or an `end`
    left out or given as the start, asks for the same rollback (the `meaning` of attempts.earlier)."""
    config = config_of(run)
    try:
        return tuple(Window.of(config["start"], config.get("end")).keys), config.get("to_publication") or None
    except (KeyError, TypeError, ValueError):
        return None


def committed_by(wh: Warehouse, start: str, end: str | None, run_ids: list[str],
                 stats: LockStats | None = None) -> Publication | None:
    """The rollback of [start, end] that one of `run_ids` (a retried run's earlier attempts) committed, as it
    published it, if one did: a retry writes its events instead of stepping each day back once more. Refused if a
    day of the window was published since (a retry must not report as current what is not)."""
    if not run_ids:
        return None
    window = Window.of(start, end)
    with wh.reader(stats=stats) as con:
        found = con.execute(sql.text("rollback_committed_by"), {**window.params, "runs": run_ids}).fetchone()
        if found is None:
            return None
        pub_id, days = found[0], [str(d) for d in found[1]]
        replaced = {d: p for d, p in zip(days, found[2]) if p is not None}
        if days != window.keys:
            raise PublishConflict(f"an earlier attempt of this run committed rollback {pub_id} of "
                                  f"{window_label(days)}, not of {window}: nothing was rolled back again; roll back "
                                  "anew from what is current")
        now = ledger.current(con, window)
        moved = sorted(p for p in days if p not in now or now[p].publication_id != pub_id)
        if moved:
            raise PublishConflict(f"an earlier attempt of this run committed rollback {pub_id} of {window}, and "
                                  f"partitions {window_label(moved)} were published since: nothing was rolled back "
                                  "again; roll back anew from what is current")
        after = ledger.publication_candidates(con, {p: pub_id for p in window.keys})
        return Publication(pub_id, "rollback", window, ledger.published(con, replaced), after, 0.0)


def run_info(run_id: str, reason: str, tags: Mapping[str, str]) -> RunInfo:
    """A rollback run as the ledger and its notice know it: who asked and the operator's tags from the run's tags,
    the reason from its config, and no backfill."""
    return dataclasses.replace(RunInfo.from_tags(run_id, tags), backfill_id=None, reason=reason)


def rollback(wh: Warehouse, start: str, end: str | None, reason: str, run_id: str,
             to_publication: str | None = None, progress: Progress | None = None,
             give_way: GiveWay | None = None, stats: LockStats | None = None,
             tags: Mapping[str, str] | None = None) -> Publication:
    """Restore the chosen publication of every partition of [start, end] in one commit. `progress`: the run log's
    (default: none logged). `give_way` (the rollback job's): called before each warehouse hold of its long writes,
    as a backfill's, so today's load neither queues behind a year's chunks nor shares its cores with them. `stats`:
    the figures of each of its warehouse holds. `tags`: the run's, for who asked and the operator's own tags in the
    ledger and the notice (the reason is the one given here)."""
    progress = progress or Progress(None, header(start, end), PHASES)
    run = run_info(run_id, reason, tags or {})
    with progress.stopping():
        return _rollback(wh, start, end, run, to_publication, progress, give_way, stats)


def _rollback(wh: Warehouse, start: str, end: str | None, run: RunInfo, to_publication: str | None,
              progress: Progress, give_way: GiveWay | None, stats: LockStats | None) -> Publication:
    reason, run_id = run.reason or "", run.run_id
    if not reason.strip():
        raise ValueError("a rollback needs a reason (it is recorded in the ledger)")
    if len(reason) > REASON_MAX_CHARS:
        raise ValueError(f"a rollback's reason is {len(reason):,} characters, past the {REASON_MAX_CHARS:,} it may "
                         "have (it goes into the ledger, the notice, the Slack message and the run's events): say "
                         "why in short and point to the rest (an incident link, say)")
    too_long = tag_refusal(run)  # the override, who asked, the operator's own tags: recorded as a backfill's are
    if too_long:
        raise TagRefusal(description=too_long)
    window = Window.of(start, end)
    # The newest partition is the current lane's: a rollback reaching it from an earlier day is a correction of it
    # by another name, refused as a backfill's is unless the run carries an override reason.
    newest = partitions.newest_partition()
    if fence_refusal(window, None, run.fence_override, newest):
        raise FenceRefusal(
            description=f"Refused: rollback over {window} includes {newest}, the newest partition, which the current "
                        f"lane (daily schedule) owns. Nothing was rolled back. Roll back up to the day before {newest} "
                        f"(and {newest} alone, if it must be), or, deliberately, relaunch with the tag "
                        f"{FENCE_OVERRIDE_TAG}=<reason> (atlasmart rollback --fence-override <reason>; recorded in the "
                        "ledger).",
            metadata={"refused_partitions": [newest], "window": str(window)})
    chosen, chosen_from = _targets(wh, window, to_publication, stats)
    progress.done("targets", f"{len(chosen)} partition(s), to {len(set(chosen.values()))} earlier publication(s)")
    scratch = wh.scratch_path(run_id)

    def written(k: int, n: int, part: Window, changed: int) -> None:
        # A restored day's rows are in the store already (`changed` counts days written): most chunks write none.
        progress.part("publish", k / (n + 1), f"chunk {k}/{n} ({part}) written ahead, {changed} day(s)" if changed
                      else f"chunk {k}/{n} ({part}): {len(part.keys)} day(s) pointed at the version store, no line "
                           "written")

    try:
        try:
            keys = reference.keys_in_force(wh)
        except deletions.RequestError as exc:
            raise ValueError(f"cannot roll back {window}: {exc}. A rollback cannot tell whether what it restores holds "
                             "the subject of a request it cannot read: fix the file first") from None
        after, restored, now, stored = restore_candidates(wh, scratch, window, chosen, give_way, stats, keys)
        # The targets were chosen in a read of their own: a day published since then would be rolled back past.
        moved = sorted(p for p, pub in chosen_from.items() if p not in now or now[p].publication_id != pub)
        if moved:
            raise PublishConflict(f"partitions {window_label(moved)} were published since this rollback chose what "
                                  "to restore; nothing was published, roll back again from what is current")
        progress.done("restore", f"{sum(c.rows for c in after.values()):,} rows of {len(after)} partition(s), "
                                 "pointed at where the version store holds them")
        failpoints.hold("rollback_restored", run_id)
        pub = publish(wh, scratch, window, run, CODE_VERSION, after, now,
                      kind="rollback", restored=restored, stored=stored, give_way=give_way, on_chunk=written,
                      stats=stats)
        progress.done("publish", f"publication {pub.publication_id}, {len(pub.after)} partition(s) restored, "
                                 f"{len(pub.changed)} of them to other content")
        failpoints.hold("rollback_committed", run_id)
        return pub
    finally:
        wh.drop_scratch(run_id)
