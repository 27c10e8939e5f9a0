"""The publish: staged and fact rows written ahead into the version store, then ONE commit (ledger pointers +
mart + history + flags); rollback's restore; and the recovery of the extracts after a crash between the commit and
the symlink swap."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import time
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator

import duckdb
import pandas as pd

from atlasmart_assets import candidates, extracts, notices, sql
from atlasmart_assets.alerts.format import window_label
from atlasmart_assets.failpoints import failpoint, hold as held_at
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.settings import Settings
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.connection import (GiveWay, LockStats, attach, connect, hand_over, preemptible_hold,
                                                   transaction)
from atlasmart_assets.warehouse.ledger import Current, DayCandidate, Publication
from atlasmart_assets.window import Window


class PublishConflict(RuntimeError):
    """The current publication of a partition moved between the audit and the publish."""


def recover_extracts(wh: Warehouse, con: duckdb.DuckDBPyConnection, keep: Collection[str] = ()) -> bool:
    """After a crash between commit and swap, point `published` at the version the ledger committed (the ledger
    is the commit point). Then finish the prune of an erasure that committed but did not prune (killed or failed
    after its commit): every version but the current one (and `keep`, the caller's own) goes, as it holds the
    erased days' old figures. `con` holds the warehouse (a reader will do): no publisher is between its commit and
    its prune meanwhile. Returns whether it moved `published`."""
    cfg = wh.settings
    latest = ledger.latest_publication_id(con)
    moved = False
    if latest and extracts.current_version(cfg) != latest and (cfg.versions_dir / latest).is_dir():
        extracts.swap(cfg, latest)
        moved = True
    for pub_id in extracts.erasures_pending(cfg):
        current = extracts.current_version(cfg)
        if current and ledger.is_committed(con, pub_id):
            extracts.prune(cfg, {current, *keep}, immediately=True)
        extracts.erased(cfg, pub_id)
    return moved


def _refuse_if_moved(before: dict[str, Current], expected: dict[str, Current], days: list[str]) -> None:
    """Refuse when a day's current publication is no longer the one the audit compared against."""
    moved = sorted(p for p in days if (before.get(p) and before[p].seq) != (expected.get(p) and expected[p].seq))
    if moved:
        raise PublishConflict(f"partitions {moved} were republished since this run audited them; "
                              "nothing was published, re-run to audit against the new publication")


# Line ids named in a refusal, each cut to so many characters (a line id is the source's: any length).
SHOWN_LINE_IDS, SHOWN_ID_CHARS = 5, 64


def _refuse_if_line_ids_published_since(con: duckdb.DuckDBPyConnection, window: Window, as_of: int) -> None:
    """Refuse when a day outside the window was published after the run's cross-day audit searched the published
    fact (ledger seq `as_of`) and holds a line id of the candidate (scratch attached as `s`). Two runs the lanes let
    overlap (today's load beside a backfill) each audit against the other's days as they were; without this the
    second commit would publish a line on two days, and no later audit compares two days both kept as published."""
    days = [r[0] for r in con.execute(
        "select partition_date from audit.current_publications where seq > $seq "
        "and partition_date not between $start and $end order by 1", {"seq": as_of, **window.params}).fetchall()]
    if not days:
        return
    rows = con.execute(
        "select f.partition_date::varchar, f.line_id from fact.fct_order_lines f "
        "where f.partition_date in (select unnest($days::date[])) "
        "and f.line_id in (select line_id from s.candidate.staged_order_lines) order by 1, 2",
        {"days": days}).fetchall()
    if rows:
        shown = ", ".join(f"{line_id[:SHOWN_ID_CHARS]!r} on {day}" for day, line_id in rows[:SHOWN_LINE_IDS])
        more = f" and {len(rows) - SHOWN_LINE_IDS} more" if len(rows) > SHOWN_LINE_IDS else ""
        raise PublishConflict(f"line ids of this run's candidate were published on another day since its cross-day "
                              f"audit ({shown}{more}): a line on two days would be counted twice; nothing was "
                              "published, re-run to audit against the new publication")


def _requests_of(cand: Current | DayCandidate) -> set[str]:
    """The deletion requests a version applied or that named a record of its evidence when it was built."""
    return set(cand.requests_applied) | set(cand.requests_named or ())


def _requests_named(found: Iterable[Iterable[str]]) -> str:
    """The request ids found (per day), each once, the first few named and cut, the rest counted."""
    requests = sorted({r for day in found for r in day})
    shown = ", ".join(repr(r[:SHOWN_ID_CHARS]) for r in requests[:SHOWN_LINE_IDS])
    return shown + (f" and {len(requests) - SHOWN_LINE_IDS} more" if len(requests) > SHOWN_LINE_IDS else "")


def _refuse_if_requests_unseen(before: dict[str, Current], loaded: Collection[str]) -> None:
    """Refuse when a day's current version applied, or was built under, a deletion request this run did not load: a
    run that loaded its requests later published it since, and this run's candidate would publish the subject's
    lines again (found by a review: a backfill that loaded its requests just before another run applied a new one
    published the erased line again)."""
    known = set(loaded)
    unseen = {d: sorted(_requests_of(c) - known) for d, c in sorted(before.items())}
    unseen = {d: r for d, r in unseen.items() if r}
    if unseen:
        raise PublishConflict(f"partitions {window_label(sorted(unseen))} were published since this run loaded its "
                              f"deletion requests, applying {_requests_named(unseen.values())}, which it did not load: "
                              "its candidate would publish their subject again; nothing was published, re-run to "
                              "apply them")


def _erasing(con: duckdb.DuckDBPyConnection, pub_id: str, before: dict[str, Current],
             after: dict[str, DayCandidate], deletion_keys: pd.DataFrame | None) -> dict[str, list[str]]:
    """Per day, the deletion requests for which its other versions are erased: those its candidate applies or was
    built under and the version it replaces was not, where another version of the day may hold a line they name
    (_held). A request applied to lines of the replaced version finds them there. A request naming only a line the
    source retracted before it came takes no line out, yet an earlier version may hold that line (found by a review:
    a rollback published it again). A second request for a subject already erased holds none in any version since,
    whichever of the two is credited with its lines, and erases no rollback history again (as a review found it
    did). Without `deletion_keys` (the requests' keys: request_id, customer_id, line_id) every new request erases."""
    new: dict[str, set[str]] = {}
    for day, cand in after.items():
        prev = before.get(day)
        requests = _requests_of(cand) - (_requests_of(prev) if prev else set())
        if requests:
            new[day] = requests
    if new and deletion_keys is not None:
        held = _held(con, pub_id, new, deletion_keys)
        new = {d: r & held.get(d, set()) for d, r in new.items()}
    for day, requests in _holding_suppressed(con, pub_id, sorted(after)).items():
        new.setdefault(day, set()).update(requests)
    return {d: sorted(r) for d, r in sorted(new.items()) if r}


def _holding_suppressed(con: duckdb.DuckDBPyConnection, pub_id: str, days: list[str]) -> dict[str, set[str]]:
    """Per day, the requests credited with a line the build suppresses that another stored version of the day holds
    (retained_suppressed_lines.sql): whichever customer that version gave the line, the request now covers it. A
    review found a late batch moving an order to a requesting customer, its lines left out, and the rollback
    publishing them again under their former customer, which no key of the request names. None without a build's
    suppressed lines in the scratch (a rollback's, a run that built no day)."""
    if not days or not con.execute("select count(*) from duckdb_tables() where database_name = 's' and schema_name "
                                   "= 'candidate' and table_name = 'suppressed_lines'").fetchone()[0]:
        return {}
    held: dict[str, set[str]] = {}
    params = {"pub": pub_id, "days": [dt.date.fromisoformat(d) for d in days]}
    for table in ledger.STORE_TABLES:
        for day, request_id in con.execute(sql.text("retained_suppressed_lines").format(store=table),
                                           params).fetchall():
            held.setdefault(day.isoformat(), set()).add(request_id)
    return held


Key = tuple[str | None, str | None]  # a deletion key: (customer_id, line_id), one of them set


def _keys_by_request(deletion_keys: pd.DataFrame) -> dict[str, set[Key]]:
    out: dict[str, set[Key]] = {}
    for request_id, customer, line in deletion_keys[["request_id", "customer_id", "line_id"]].itertuples(index=False):
        out.setdefault(str(request_id), set()).add((None if pd.isna(customer) else str(customer),
                                                    None if pd.isna(line) else str(line)))
    return out


def _held(con: duckdb.DuckDBPyConnection, pub_id: str, new: dict[str, set[str]],
          deletion_keys: pd.DataFrame) -> dict[str, set[str]]:
    """Of `new` (day -> requests), the requests a version of the day other than `pub_id` may hold a line of: a
    stored version holding one (retained_subject_lines.sql), or a version whose lines retention dropped while its
    extract stands, unless it was built under a request naming the same key (it held none of its lines)."""
    keys = _keys_by_request(deletion_keys)
    pairs = [(dt.date.fromisoformat(day), request, customer, line) for day, requests in sorted(new.items())
             for request in sorted(requests) for customer, line in keys.get(request, ())]
    if not pairs:
        return {}
    held: dict[str, set[str]] = {}
    con.register("new_pairs", pd.DataFrame(pairs, columns=["partition_date", "request_id", "customer_id", "line_id"],
                                           dtype=object))
    try:
        for table in ledger.STORE_TABLES:
            query = sql.text("retained_subject_lines").format(store=table)
            for day, request_id in con.execute(query, {"pub": pub_id}).fetchall():
                held.setdefault(day.isoformat(), set()).add(request_id)
    finally:
        con.unregister("new_pairs")
    unreadable = con.execute(sql.text("unreadable_versions"),
                             {"pub": pub_id, "days": [dt.date.fromisoformat(d) for d in sorted(new)]}).fetchall()
    for day, applied, named in unreadable:
        built = set(json.loads(applied) if applied else ()) | set(json.loads(named) if named else ())
        covered = set().union(*(keys.get(b, set()) for b in built))
        customers = {c for c, _ in covered if c is not None}
        lines = {line for _, line in covered if line is not None}
        for request in new[day.isoformat()]:
            if any(c not in customers if c is not None else line not in lines for c, line in keys.get(request, ())):
                held.setdefault(day.isoformat(), set()).add(request)
    return held


def _refuse_if_past_retention(con: duckdb.DuckDBPyConnection, restored: dict[str, str], retain: int,
                              window: Window) -> None:
    """Refuse a rollback whose versions went past retention since it read them: a publish that committed meanwhile
    pruned their mart rows at its commit and drops their lines once nothing points at them, so the rollback would
    point at rows that are gone (it reads them before its commit, in other holds)."""
    gone = _past_retention(con, restored, retain, window)
    if gone:
        raise PublishConflict(f"the versions to restore of {window_label(gone)} went past retention "
                              f"(ATLASMART_RETAIN_VERSIONS={retain}) since this rollback read them: a publication "
                              "committed meanwhile; nothing was published, roll back again from what is current")


def _past_retention(con: duckdb.DuckDBPyConnection, versions: dict[str, str], retain: int,
                    window: Window) -> list[str]:
    """The days whose version in `versions` a rollback can no longer restore (ledger.restorable), sorted."""
    restorable = ledger.restorable(con, retain, window)
    return sorted(p for p, pub in versions.items() if (p, pub) not in restorable)


def _refuse_if_abandoned(con: duckdb.DuckDBPyConnection, pub_id: str) -> None:
    if not ledger.may_write(con, pub_id):
        raise PublishConflict(f"publication {pub_id} was taken for abandoned (another correction found its run "
                              "ended); nothing was published, re-run")


OnChunk = Callable[[int, int, Window, int], None]  # (k, n, the chunk's days, how many of them written)


def _next_hold(wh: Warehouse, give_way: GiveWay | None, stats: LockStats | None, first: bool = False) -> None:
    """Before a long write's next hold: wait while today's load runs (a backfill's `give_way`), then let every
    process that announced it waits on the lock go first (not before the first hold: nothing was held yet)."""
    if give_way is not None:
        waited = give_way()
        if stats is not None:
            stats.gave_way.append(waited)
    if not first:
        hand_over(wh.settings.warehouse_path)


def _hold(wh: Warehouse, give_way: GiveWay | None, stats: LockStats | None,
          open_hold: Callable[[], contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]],
          body: Callable[[duckdb.DuckDBPyConnection], None]) -> None:
    """One chunk's hold of a long write, in one transaction: a backfill's (it has a `give_way`) is given up to a
    process that announces it waits on the lock, and started again (`preemptible_hold`)."""
    if give_way is not None:
        preemptible_hold(open_hold, wh.settings.warehouse_path, body, stats, give_way)
        return
    with open_hold() as con, transaction(con):
        body(con)


def _write_ahead(wh: Warehouse, scratch: Path, parts: list[Window], lines: dict[str, int], pub_id: str,
                 run_id: str, expected: dict[str, Current] | None, stats: LockStats | None,
                 give_way: GiveWay | None, on_chunk: OnChunk | None, reuse: dict[str, str]) -> None:
    """The candidate rows of every versioned layer, into the version store under `pub_id`, a chunk of days per
    transaction; days in `reuse` are stored already, and a chunk of only such days takes no hold (the first
    always does: it records the pending publish, with the lines it writes of each day, for a collection that drops
    them). Readers see none of it until the commit's ledger rows point at it. Before each chunk: if its days were
    republished since the audit (a deletion request applied to one, say), or this publish was taken for abandoned,
    nothing more is written."""
    window = Window(parts[0].start, parts[-1].end)
    version = 0

    @contextlib.contextmanager
    def with_scratch() -> Iterator[duckdb.DuckDBPyConnection]:
        with wh.writer(stats) as con:
            attach(con, scratch, "s")
            yield con

    for n, part in enumerate(parts):
        changed = sum(1 for day in part.keys if day not in reuse)
        if n > 0 and not changed:
            if on_chunk is not None:
                on_chunk(n + 1, len(parts), part, 0)
            continue
        _next_hold(wh, give_way, stats, first=n == 0)

        def chunk(con: duckdb.DuckDBPyConnection, n: int = n, part: Window = part) -> None:
            nonlocal version
            if n == 0:
                con.execute("insert into audit.pending_versions (publication_id, run_id, window_start, "
                            "window_end, day_lines) values ($p, $r, $start, $end, $lines)",
                            {"p": pub_id, "r": run_id, **window.params,
                             "lines": [0 if day in reuse else lines.get(day, 0) for day in window.keys]})
                version = ledger.number_version(con, pub_id)
            else:
                _refuse_if_abandoned(con, pub_id)
            if expected is not None:
                _refuse_if_moved(ledger.current(con, part), expected, part.keys)
            for layer in ledger.VERSIONED:
                ledger.write_version(con, layer, pub_id, version, f"s.{layer.candidate}", part, reuse)

        _hold(wh, give_way, stats, with_scratch, chunk)
        if on_chunk is not None:
            on_chunk(n + 1, len(parts), part, changed)


def _prune(wh: Warehouse, parts: list[Window], stats: LockStats | None, give_way: GiveWay | None) -> None:
    """Retention of the versioned layers, after the commit and a chunk of days per transaction: it only drops
    superseded versions, which no reader of the published tables sees."""
    for part in parts:
        _next_hold(wh, give_way, stats)
        _hold(wh, give_way, stats, lambda: wh.writer(stats),
              lambda con, part=part: ledger.prune_versions(con, wh.settings.retain_versions, part))


def _drop(wh: Warehouse, pending: ledger.Pending, stats: LockStats | None, give_way: GiveWay | None = None) -> None:
    """Drop an abandoned publish's rows a chunk of days per transaction (and of each day's lines, where its record
    has them), then its record (a drop cut short is finished by the next collection: the record stays marked
    abandoned until the end). A backfill's (`give_way`) waits while today's load runs before each chunk, and a chunk
    under way is given up and started again, as its other long writes are: a year's abandoned rows are millions of
    lines per layer (a review found them dropped back to back beside today's load)."""
    for part in wh.settings.split(pending.window, pending.lines):
        _next_hold(wh, give_way, stats)
        _hold(wh, give_way, stats, lambda: wh.writer(stats),
              lambda con, part=part: ledger.drop_version_rows(con, pending.publication_id, part))
    with wh.writer(stats) as con, transaction(con):
        ledger.forget_pending(con, pending.publication_id)


def _abandon(wh: Warehouse, pub_id: str) -> None:
    """A publish that will not commit: its written-ahead rows go (best effort; what is left is collected by the
    next backfill)."""
    try:
        with wh.writer() as con, transaction(con):
            ledger.mark_abandoned(con, [pub_id])
            pending = ledger.pending_versions(con).get(pub_id)
        if pending is not None:
            _drop(wh, pending, None)
    except Exception:  # noqa: BLE001 - the publish's own error is the one to report
        pass


def collect_abandoned(wh: Warehouse, run_finished: Callable[[str], bool], stats: LockStats | None = None,
                      give_way: GiveWay | None = None) -> list[str]:
    """Drop the written-ahead rows of publishes whose run ended without committing (killed between the first
    chunk and the commit), and finish drops cut short; a backfill's drops give way to today's load (`give_way`).
    They are marked abandoned first, in one transaction: from then on such a publish can neither write nor commit,
    whatever its run really is. Returns their ids."""
    with wh.writer(stats) as con, transaction(con):
        found = ledger.pending_versions(con)
        gone = sorted(p for p, pending in found.items() if pending.abandoned or run_finished(pending.run_id))
        ledger.mark_abandoned(con, gone)
    for pub_id in gone:
        _drop(wh, found[pub_id], stats, give_way)
    return gone


def publish(wh: Warehouse, scratch: Path, window: Window, run: RunInfo, code_version: str,
            after: dict[str, DayCandidate], expected: dict[str, Current] | None, *, kind: str = "publish",
            restored: dict[str, str] | None = None, stored: dict[str, str] | None = None,
            stats: LockStats | None = None, give_way: GiveWay | None = None,
            on_chunk: OnChunk | None = None, line_ids_as_of: int | None = None,
            deletion_keys: pd.DataFrame | None = None, repaired: Collection[str] = ()) -> Publication:
    """Publish staged, fact and mart for the whole window in ONE commit, with the ledger and the prior version;
    then swap the extracts in. A window of more than one chunk (ATLASMART_CHUNK_DAYS days, or ATLASMART_CHUNK_LINES
    lines of its days, written or pointed at: retention drops about as many) has its staged and fact rows written
    ahead into the version store, so its commit moves the ledger's pointers (and the small mart) rather than rows,
    and retention follows the commit; a window of one chunk (today's load) does all of it in the commit, one hold.
    `expected` is what the audit compared against: if another publisher moved a partition since, nothing is
    published; nor if a day's current version applied or was built under a deletion request not among
    `deletion_keys` (a correction's: the keys of the requests it loaded, which also decide the days whose earlier
    versions a request erases: _erasing). `stored` (a rollback's): days whose rows the version store holds already
    (-> the publication that stored them), pointed at rather than written.
    `give_way` (a backfill's) is called before each hold of a long write, `on_chunk` (k, n, days, how many of them
    were written) after each chunk of the write ahead. `line_ids_as_of`: the ledger seq at which the candidate's
    line ids were searched among the published days (a correction's cross-day audit); the commit refuses if a day
    published since holds one of them. `repaired`: days written afresh because their published rows differed from
    their ledger row; the ledger marks them (their before and after there may agree), and the notice tells them."""
    cfg = wh.settings
    repaired = tuple(sorted(set(repaired) & set(after)))
    pub_id = ledger.new_publication_id(kind)
    # Decided on what the audit compared against: if a day moved since, the commit refuses.
    reuse = {**ledger.reused(expected or {}, after), **(stored or {})}
    # Chunks by each day's lines too, written or pointed at: a month of heavy days in one commit held the warehouse
    # for seconds, writing their rows or dropping those of the versions retention lets go.
    lines = {p: c.rows for p, c in after.items()}
    parts = cfg.split(window, lines)
    ahead = len(parts) > 1
    texts = {p: c.extract_json for p, c in after.items()}
    committed = commit_began = False
    try:
        if ahead:
            _write_ahead(wh, scratch, parts, lines, pub_id, run.run_id, expected, stats, give_way, on_chunk, reuse)
            failpoint("wrote_versions")
            _next_hold(wh, give_way, stats)
        _extracts_ahead(cfg, pub_id, texts)
        failpoint("wrote_extracts_ahead")
        with wh.writer(stats) as con:
            acquired = time.monotonic()
            recover_extracts(wh, con, keep={pub_id})
            before = ledger.current(con, window)
            if expected is not None:
                _refuse_if_moved(before, expected, sorted(set(before) | set(expected)))
            if deletion_keys is not None:
                _refuse_if_requests_unseen(before, set(deletion_keys["request_id"].astype(str)))
            if ahead:
                _refuse_if_abandoned(con, pub_id)
            if restored:  # a day without rows has nothing retention could drop (the restore passes it too)
                _refuse_if_past_retention(con, {p: t for p, t in restored.items() if after[p].rows},
                                          cfg.retain_versions, window)
            attach(con, scratch, "s")
            if line_ids_as_of is not None:
                _refuse_if_line_ids_published_since(con, window, line_ids_as_of)
            extracts.complete(cfg, pub_id, texts)
            failpoint("staged_extracts")
            # What the commit erases, decided in this hold before it (nothing it writes first is another version's):
            # the marker is written only for a commit that erases, so a crash after a commit that erased nothing
            # never has its recovery remove superseded versions within their grace (a review found it did).
            erase = _erasing(con, pub_id, before, after, deletion_keys)
            if erase:
                extracts.erasing(cfg, pub_id)
            commit_began = True
            with transaction(con):
                keep = _commit(con, pub_id, kind, run, code_version, window, before, after, restored or {},
                               cfg.retain_versions, ahead, reuse, erase, repaired)
            committed = True
            failpoint("committed")
            held_at("publish_committed", run.run_id)
            extracts.swap(cfg, pub_id)
            failpoint("swapped")
            # Earlier extract versions hold the erased days' old figures: only the current one survives an erasure,
            # in the hold that commits it, before anything that can fail (the notice); killed before, the next
            # hold on the warehouse finishes it (recover_extracts).
            if erase:
                extracts.prune(cfg, {pub_id}, immediately=True)
                extracts.erased(cfg, pub_id)
            notices.write(cfg, con, pub_id, run)
            # A version never swapped in (a crashed run's) is judged in the hold: another publisher's, built in its
            # own hold, is never taken half-way. A superseded one only goes after the hold (below).
            if not erase:
                extracts.prune(cfg, keep | {pub_id}, superseded=False)
            over = ledger.over_retention(con, cfg.retain_versions, window) if ahead else set()
            hold = time.monotonic() - acquired
            judged_at = extracts.clock(cfg)
        if not erase:
            # A superseded version is a link per published day: removing it grows with the published history, not
            # the window, so no hold waits on it. None is swapped in again (a publication gets a new one). `keep`
            # was judged in the hold: a version superseded since is the next publisher's to judge.
            extracts.prune(cfg, keep | {pub_id}, superseded=True, superseded_by=judged_at)
        _prune(wh, [part for part in parts if over & set(part.keys)], stats, give_way)
        return Publication(pub_id, kind, window, before, after, hold, repaired)
    except BaseException:
        if not committed:
            extracts.erased(cfg, pub_id)  # never committed: nothing to erase
        if ahead and not committed:
            _abandon(wh, pub_id)
        if not commit_began:
            # Never the ledger's: no reader or recovery can need it (after the commit began, the ledger may name it).
            shutil.rmtree(cfg.versions_dir / pub_id, ignore_errors=True)
        raise


def _extracts_ahead(cfg: Settings, pub_id: str, texts: dict[str, str]) -> None:
    """The publication's own extracts written before its commit takes the lock (a year's 365 files, written and
    fsynced, were a third of the commit's hold); the hold links the unchanged days and writes the index. Best
    effort: another publisher's prune may take the directory meanwhile, and the hold writes what is missing."""
    with contextlib.suppress(OSError):
        extracts.write_ahead(cfg, pub_id, texts)


def _commit(con: duckdb.DuckDBPyConnection, pub_id: str, kind: str, run: RunInfo, code_version: str,
            window: Window, before: dict[str, Current], after: dict[str, DayCandidate], restored: dict[str, str],
            retain: int, written_ahead: bool, reuse: dict[str, str], erase: dict[str, list[str]],
            repaired: Collection[str] = ()) -> set[str]:
    """The one transaction's writes (the caller's transaction; scratch attached as `s`), erasing the other versions
    of the days in `erase` (_erasing's). Returns the publication ids whose extracts are kept."""
    if not written_ahead:
        version = ledger.number_version(con, pub_id)
        for layer in ledger.VERSIONED:
            ledger.write_version(con, layer, pub_id, version, f"s.{layer.candidate}", window, reuse)
        failpoint("wrote_versions")
    ledger.retire(con, before, window)
    for layer in ledger.COPIED:
        cols = ", ".join(layer.columns)
        con.execute(f"delete from {layer.table} where partition_date between $start and $end", window.params)
        con.execute(f"insert into {layer.table} select {cols} from s.{layer.candidate} "
                    "where partition_date between $start and $end", window.params)
        failpoint(f"wrote_{layer.table}")
    ledger.write_rows(con, pub_id, kind, run, code_version, before, after, restored, repaired)
    ledger.record_storage(con, pub_id, after, reuse)
    con.execute("delete from audit.pending_versions where publication_id = $p", {"p": pub_id})
    if erase:
        ledger.erase_earlier_versions(con, pub_id, erase)
    con.execute("delete from audit.corrections_in_progress where run_id = $run_id", {"run_id": run.run_id})
    if not written_ahead:
        ledger.prune_versions(con, retain, window)
    return ledger.prune_history(con, retain, window)


def restore_candidates(wh: Warehouse, scratch: Path, window: Window, targets: dict[str, str] | None = None,
                       give_way: GiveWay | None = None, stats: LockStats | None = None,
                       deletion_keys: pd.DataFrame | None = None
                       ) -> tuple[dict[str, DayCandidate], dict[str, str], dict[str, Current], dict[str, str]]:
    """The versions named by `targets` (default: the one each partition's current publication superseded) as
    candidates: the ledger's figures, and the days whose rows the version store holds (-> the publication that
    stored them), which the publish points at rather than writes again. Only the mart's rows are copied into
    scratch; `give_way` is called before that hold. `stats`: each hold's figures. `deletion_keys` (the requests
    in force: request_id, customer_id, line_id): a version holding a line one names is refused."""
    with wh.writer(stats) as con:
        now = ledger.current(con, window)
        if targets is None:
            missing = sorted(p for p in window.keys if p not in now or not now[p].prev_publication_id)
            if missing:
                raise ValueError(f"cannot roll back {window}: partitions {window_label(missing)} have no earlier publication")
            targets = {p: now[p].prev_publication_id for p in window.keys}
        ledger.versions_table(con, "targets", targets)
        rows = con.execute(f"select {ledger.candidate_columns(con)} from audit.publications p "
                           "join targets using (partition_date, publication_id) "
                           "left join audit.day_versions d using (partition_date, publication_id)").fetchall()
        found = {r[0].isoformat(): r for r in rows}
        unknown = sorted(p for p in targets if p not in found)
        if unknown:
            raise ValueError(f"cannot roll back {window}: no publication {targets[unknown[0]]} of {window_label(unknown)}")
        erased = sorted(p for p, r in found.items() if r[5] and r[5].startswith('{"erased"'))
        if erased:
            raise ValueError(f"cannot roll back {window}: the earlier versions of {window_label(erased)} were erased when a deletion "
                             "request was applied to them (a rollback never brings suppressed rows back)")
        # Retention as the commit judges it (_refuse_if_past_retention). A version it let go whose content a kept
        # one holds (a re-run that kept the day as published) is restored from that one's rows: the same lines
        # and figures, under the ledger row named.
        restorable = ledger.restorable(con, wh.settings.retain_versions, window)
        sources = {p: restorable.get((p, t), t) for p, t in targets.items()}
        ledger.versions_table(con, "sources", sources)
        # The publication whose rows each source reads: a version stored before the store recorded where (no
        # day_versions row) owns its rows, as audit.ledger_versions reads it (its fact may be rows kept from before
        # the fact was derived).
        stored = {r[0].isoformat(): r[1] for r in con.execute(
            "select partition_date, case when d.publication_id is null then p.publication_id else d.stored_as end "
            "from audit.publications p join sources using (partition_date, publication_id) "
            "left join audit.day_versions d using (partition_date, publication_id)").fetchall() if r[1] is not None}
        if deletion_keys is not None and len(deletion_keys):
            _refuse_subject_lines(con, window, deletion_keys)
        readable = {r[0].isoformat() for r in con.execute(
            "select distinct partition_date from history.fct_order_lines "
            "join sources using (partition_date, publication_id)").fetchall()}
        # A version past retention has lost its mart rows, even where a rollback's pointer keeps its lines.
        with_rows = [p for p in targets if found[p][2]]
        gone = sorted(p for p in with_rows if (p, targets[p]) not in restorable or p not in readable)
        if gone:
            raise ValueError(f"cannot roll back {window}: the earlier versions of {window_label(gone)} are past retention")
        after = {p: ledger.day_candidate(r) for p, r in found.items()}
    _restore_rows(wh, scratch, sources, give_way, stats)
    _refuse_if_mart_differs(scratch, window, after, targets, sources)
    return after, targets, now, stored


def _refuse_if_mart_differs(scratch: Path, window: Window, after: dict[str, DayCandidate], targets: dict[str, str],
                            sources: dict[str, str]) -> None:
    """Refuse restoring mart rows (copied into scratch from the history of `sources`) that are not those the
    restored version's extract published: a mart changed behind the ledger is moved into history as it is when its
    version is superseded, and a version retention let go is restored from another's rows (a review restored such
    a day's figures plus 1,000 under an extract saying otherwise). Every version's extract rows are written as
    candidates.mart_rows reads them, whatever its release. Refused even where another kept version of the content
    holds the rows unchanged: a rollback to that one, by name, reads them."""
    with contextlib.closing(connect(str(scratch))) as con:
        mart = candidates.mart_rows(con, "candidate.revenue_daily", window)
    published = {d: json.loads(c.extract_json).get("rows") for d, c in after.items()}
    # An extract without rows (none of this project's releases wrote one) says nothing to compare with.
    differ = [d for d in sorted(after) if published[d] is not None and mart.get(d) != published[d]]
    if differ:
        twins = [sources[d] for d in differ if sources[d] != targets[d]]
        raise ValueError(f"cannot roll back {window}: the mart rows kept of the versions to restore of "
                         f"{window_label(differ)} differ from what their extracts published (changed behind the "
                         "ledger" + (f"; read from publication(s) {', '.join(sorted(set(twins)))}, of the same "
                                     "content" if twins else "") + "); nothing was published")


def _refuse_subject_lines(con: duckdb.DuckDBPyConnection, window: Window, deletion_keys: pd.DataFrame) -> None:
    """Refuse restoring a version (temp table `sources`: the rows each restored version reads) that holds a line a
    deletion request in force names. Such a version was published before the request and no build of its day
    applied the request since (that build erases it): a review found a day whose current version no longer held the
    subject (the source had retracted it), never built again, whose rollback published the subject's lines
    again."""
    con.register("restore_deletion_keys", deletion_keys.astype(object))
    try:
        held: dict[str, dict[str, int]] = {}
        # The fact's store reads every stored version: those of staged lines, and those kept as fact rows only.
        for day, request_id, lines in con.execute(sql.text("restore_subject_lines")).fetchall():
            held.setdefault(day.isoformat(), {})[request_id] = int(lines)
    finally:
        con.unregister("restore_deletion_keys")
    if held:
        lines = sum(n for found in held.values() for n in found.values())
        raise ValueError(f"cannot roll back {window}: the versions to restore of {window_label(sorted(held))} hold "
                         f"{lines} line(s) that deletion request(s) {_requests_named(held.values())} name (published before the request; "
                         "no build of these days has applied it since). Backfill these days first: the build applies "
                         "the request and erases such versions; a rollback never publishes a suppressed subject again")


def _restore_rows(wh: Warehouse, scratch: Path, targets: dict[str, str], give_way: GiveWay | None,
                  stats: LockStats | None) -> None:
    """The mart rows of the versions `targets` names (restore_candidates' sources), copied into scratch as the mart
    candidate in one hold (15 rows a day). The versioned layers' candidates are left empty: a restored day with
    lines points at the rows the store holds (restore_candidates); one without has none. A day republished
    meanwhile is refused by the publish, which compares against `now`."""
    _next_hold(wh, give_way, stats, first=True)
    with wh.writer(stats) as con:
        ledger.versions_table(con, "targets", targets)
        attach(con, scratch, "s")
        con.execute("create schema if not exists s.candidate")
        for layer in ledger.LAYERS:
            cols = ", ".join(f"h.{c}" for c in layer.columns)
            source = (f"{layer.store} h where false" if layer.store else
                      f"{layer.history} h join targets using (partition_date, publication_id)")
            con.execute(f"create or replace table s.{layer.candidate} as select {cols} from {source}")
