"""Raw evidence into the warehouse: parse and profile the window's files in scratch, audit them against their
manifests and first-seen fingerprints, and append what is not loaded yet (raw is evidence: it loads on its own)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import duckdb

from atlasmart_assets import capacity, pausable, raw_files, sql
from atlasmart_assets.alerts.format import short_window
from atlasmart_assets.audits import Audit
from atlasmart_assets.contract import RAW_ORDER_LINES
from atlasmart_assets.progress import Cost, Progress
from atlasmart_assets.raw_files import Finding, RawFile
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunScope
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.migrations import has_column
from atlasmart_assets.warehouse.connection import (
    GiveWay,
    LockStats,
    attach,
    attached_hold,
    connect,
    hand_over,
    preemptible_hold,
)
from atlasmart_assets.warehouse.rows import create_table
from atlasmart_assets.window import Window

# Ranges of days a check's description names of a problem many days share (about 1,300 characters at most, within
# the description's 2,000 bytes); the figures name each day.
DESCRIBED_RANGES = 60
# The batches a chunk of the append loads (a temp table its delete and insert join).
LOADING_COLUMNS = (("partition_date", "date"), ("extraction_batch", "varchar"))
FILE_READABLE = "raw_order_lines_file_readable"
REQUIRED_FIELDS = "raw_order_lines_required_fields_present"
VALUES_VALID = "raw_order_lines_values_valid"
MERGE_DETERMINISTIC = "raw_order_lines_merge_deterministic"
MATCH_MANIFEST = "raw_order_lines_match_manifest"
SHA_UNCHANGED = "raw_order_lines_sha256_unchanged"

CHECKS = {
    FILE_READABLE: "Every raw file of the window exists and parses as a raw partition document (blocking).",
    REQUIRED_FIELDS: "Every line carries every required field with a readable value; an older payload shape never "
                     "silently becomes nulls (blocking).",
    VALUES_VALID: "Integers are integers (not \"2\" or 2.0), money has at most two decimals, quantity is positive "
                  "(returns arrive as retractions) and every event_time lies on its partition's day (blocking).",
    MATCH_MANIFEST: "Each batch's records equal its lines, and the day's merged batches give the controls of its "
                    "latest batch (the one with the highest source_high_sequence) (blocking).",
    MERGE_DETERMINISTIC: "No line_id has two records with the same source_sequence and different content, within or "
                         "across a day's batches: the merge never depends on read order (blocking).",
    SHA_UNCHANGED: "Each landing batch's sha256 equals the one first loaded, and no loaded batch has vanished: "
                   "raw is never rewritten in place (blocking).",
}


@dataclass
class RawLoad:
    audits: list[Audit]
    files: list[RawFile]
    figures: dict[str, dict[str, Any]]
    loaded: list[str]
    stats: LockStats


def _immutability(files: list[RawFile], first_seen: dict[tuple[str, str], dict[str, Any]]) -> list[Finding]:
    found = {(f.partition, f.batch_id): f for f in files}
    out = [
        Finding(SHA_UNCHANGED, f.partition, f.path,
                f"batch {f.batch_id}: sha256 {f.sha256[:12]}… differs from {seen['sha256'][:12]}… first loaded by run "
                f"{seen['first_run_id']}: raw is never rewritten in place; deliver a new extraction as a new batch "
                f"(raw/partition={f.partition}/<extraction_batch>.json)")
        for key, f in found.items() for seen in [first_seen.get(key)] if seen and seen["sha256"] != f.sha256
    ]
    out += [
        Finding(SHA_UNCHANGED, day, Path(seen["file"]),
                f"batch {batch} (first loaded by run {seen['first_run_id']}) has vanished: a loaded batch is never "
                "removed; restore the file")
        for (day, batch), seen in sorted(first_seen.items()) if (day, batch) not in found
    ]
    # A file is its first batch for ever: rewritten in place under another batch id (its old bytes moved to a
    # later batch's name, say), it is refused by its path as by its batch.
    by_file: dict[str, list[dict[str, Any]]] = {}
    for seen in sorted(first_seen.values(), key=lambda r: str(r["batch_id"])):
        by_file.setdefault(str(seen["file"]), []).append(seen)
    out += [
        Finding(SHA_UNCHANGED, f.partition, f.path,
                f"this file was loaded as batch {rows[0]['batch_id']} (sha256 {rows[0]['sha256'][:12]}…, run "
                f"{rows[0]['first_run_id']}) and now holds batch {f.batch_id} (sha256 {f.sha256[:12]}…): raw is never "
                "rewritten in place; restore it and deliver the new extraction as a new batch")
        for f in files for rows in [by_file.get(str(f.path), [])]
        if rows and all(r["batch_id"] != f.batch_id and r["sha256"] != f.sha256 for r in rows)
    ]
    return out


def _described(findings: list[Finding]) -> str:
    """The findings of one check, those that share a problem said once: the problem, how many files of how many
    days have it, and their ranges of days (a window with a hundred days missing their file reads as one sentence,
    where a sentence a day was cut after the third in the step's failure, which keeps 500 bytes of it). Of several
    problems, one of them shared, each is said with its count before any list of days, so that the failure says
    every one of them. Findings that share no problem are each said with its file, as before."""
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        groups.setdefault(f.problem, []).append(f)
    if len(groups) == len(findings):  # no problem shared: each said with its file, as it was found
        return "; ".join(f"raw partition {f.partition} ({f.path}): {f.problem}" for f in findings)
    ordered = sorted(groups.items(), key=lambda g: len(g[1]))

    def count(same: list[Finding]) -> str:
        days = len({f.partition for f in same})
        return (f"{len(same)} files of " if len(same) > days else "") + f"{days} raw partition(s)"

    def where(same: list[Finding]) -> str:
        if len(same) == 1:
            return f"raw partition {same[0].partition} ({same[0].path})"
        days = sorted({f.partition for f in same})
        return f"{short_window(days, DESCRIBED_RANGES)} ({same[0].path} and {len(same) - 1} other file(s))"

    if len(ordered) == 1:
        problem, same = ordered[0]
        return f"{problem}: {count(same)}, {where(same)}"
    heads = "; ".join(f"({k}) {problem}: {count(same)}" for k, (problem, same) in enumerate(ordered, 1))
    return heads + ". " + "; ".join(f"({k}) {where(same)}" for k, (_, same) in enumerate(ordered, 1))


def _figures(findings: list[Finding]) -> dict[str, str]:
    """Each day's entry in the check's figures: what is wrong with its files, each problem once with how many of its
    files have it."""
    per_day: dict[str, dict[str, int]] = {}
    for f in findings:
        counts = per_day.setdefault(f.partition, {})
        text = raw_files.figure_of(f.problem)
        counts[text] = counts.get(text, 0) + 1
    return {day: "; ".join(text if n == 1 else f"{text} ({n} files)" for text, n in counts.items())
            for day, counts in per_day.items()}


def _audits(findings: list[Finding], files: list[RawFile], checks: tuple[str, ...] = tuple(CHECKS)) -> list[Audit]:
    """The verdict of each of `checks` (default: every raw check) on `findings`."""
    out = []
    for name in checks:
        mine = [f for f in findings if f.check == name]
        out.append(Audit(name, RAW_ORDER_LINES, not mine, description=_described(mine) or f"{len(files)} files pass",
                         figures=_figures(mine)))
    return out


# Each phase's typical cost (progress.Cost: fixed, per day, per million lines), fitted on 2026-12-06 to first loads of
# 365 days x 10, 2,000 and 20,000 lines and 60 x 20,000 (the bench's year: parse 10.1 s, profile 2.4 s, append
# 5.5 s, events 0.4 s). expect() scales the append down to the batches not loaded yet.
PHASES = (("parse", Cost(0.4, 0.0005, 1.27)), ("profile", Cost(0.1, 0.0, 0.31)),
          ("append", Cost(0.2, 0.003, 0.45)))
COSTS = dict(PHASES)
# The step's per-day materializations and check results, which Dagster writes once the load is done (between the
# append's last line and the step's end).
EVENTS_PHASE = ("events", Cost(0.1, 0.001))


def _parse(wh: Warehouse, scope: RunScope, threads: int | None,
           loaded: dict[str, dict[str, Any]]) -> list[RawFile]:
    """The window's files fingerprinted, and those not loaded yet parsed, in the run's scratch (no warehouse hold)."""
    con = wh.open_scratch(scope.run.run_id, threads)
    try:
        return raw_files.load_window(con, wh.settings.raw_dir, scope.window, loaded, threads)
    finally:
        con.close()


def _profile(wh: Warehouse, scope: RunScope, threads: int | None, files: list[RawFile],
             elsewhere: raw_files.Measures) -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """The window's records in the run's scratch profiled and merged (no warehouse hold), with the measures of the
    days profiled in place (`elsewhere`)."""
    con = wh.open_scratch(scope.run.run_id, threads)
    try:
        return raw_files.profile(con, files, elsewhere)
    finally:
        con.close()


def day_chunks(wh: Warehouse, days: list[str], stats: LockStats, give_way: GiveWay | None,
               lines: Mapping[str, int] | None = None) -> Iterator[list[str]]:
    """`days` a chunk at a time (Settings.chunks, by each day's `lines` where given), as a long read or write of the
    raw step takes them: a backfill's waits before each chunk while today's load runs (when there is more than one
    chunk), and from the second on the processes that announced they wait on the lock go first."""
    parts = wh.settings.chunks(days, lines)
    for n, part in enumerate(parts):
        if give_way is not None and len(parts) > 1:
            stats.gave_way.append(give_way())
        if n:
            hand_over(wh.settings.warehouse_path)
        yield part


def short_reads(wh: Warehouse, con: duckdb.DuckDBPyConnection, days: list[str], stats: LockStats,
                give_way: GiveWay | None, read: Callable[[duckdb.DuckDBPyConnection, list[str]], None],
                after: Callable[[list[str]], None] | None = None, lines: Mapping[str, int] | None = None) -> None:
    """`read(con, part)` for each chunk of `days` (sorted), in one short read: the warehouse attached read-only to
    `con` as `w`, then detached. A reader keeps today's publish out as a writer would, so a backfill's long read is
    held as its appends are: it gives way before each chunk, and a chunk under way is given up (rolled back) to a
    process waiting on the lock or to today's load starting. `after(part)`: once the chunk is read and the
    warehouse let go. `lines`: each day's, to size the chunks by."""
    long_read = give_way is not None and len(wh.settings.chunks(days, lines)) > 1

    def hold() -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
        return attached_hold(con, wh.settings.warehouse_path, "w", wh.settings.lock_timeout_s, stats)

    for part in day_chunks(wh, days, stats, give_way, lines):
        preemptible_hold(hold, wh.settings.warehouse_path, lambda con, part=part: read(con, part), stats,
                         give_way if long_read else None, preemptible=long_read)
        if after is not None:
            after(part)


def _read_loaded_lines(con: duckdb.DuckDBPyConnection, part: list[str]) -> None:
    con.execute(sql.text("raw_lines_loaded"), {**Window.of(part[0], part[-1]).params,
                                              "days": [dt.date.fromisoformat(d) for d in part]})


def read_back(wh: Warehouse, run_id: str, days: list[str], stats: LockStats, give_way: GiveWay | None,
              lines: Mapping[str, int] | None = None) -> None:
    """The lines of the batches the run's scratch lists in candidate.reused_batches, copied from raw.order_lines
    into its candidate.raw_lines, a chunk of `days` per short read (short_reads). One scratch connection takes them
    all and attaches the warehouse read-only for each chunk: the scratch is written back once, at the end, not
    inside every hold (a year's read-back: 6.2-7.5 s against 8.1-10.2 s, holds of 0.6-0.8 s against 1.2-1.4 s).
    `lines`: each day's, to size the chunks by."""
    days = sorted(days)
    if not days or not wh.settings.warehouse_path.exists():
        return  # nothing was ever loaded: nothing to read back
    con = wh.open_scratch(run_id)
    try:
        short_reads(wh, con, days, stats, give_way, _read_loaded_lines, lines=lines)
    finally:
        con.close()


def batch_lines(con: duckdb.DuckDBPyConnection, batches: str) -> dict[str, int]:
    """Each day's lines as `batches` (a table with raw.batches' partition_date and records) records them."""
    return {day.isoformat(): int(n) for day, n in con.execute(
        f"select partition_date, coalesce(sum(records), 0) from {batches} group by 1").fetchall()}


def published_lines(wh: Warehouse, window: Window, stats: LockStats | None = None) -> dict[str, int]:
    """Each published day's lines of the window as the ledger records them, to size reads of published history by
    (none before a first publish; one day is one read whatever its lines, so not looked up)."""
    if len(window.keys) == 1 or not wh.settings.warehouse_path.exists():
        return {}
    with wh.reader(stats=stats) as con:
        return {d.isoformat(): int(n or 0) for d, n in con.execute(
            "select partition_date, rows_after from audit.current_publications "
            "where partition_date between $start and $end", window.params).fetchall()}


def file_lines(files: list[RawFile]) -> dict[str, int]:
    """Each day's lines as its files' manifests count them (_records)."""
    out: dict[str, int] = {}
    for f in files:
        out[f.partition] = out.get(f.partition, 0) + _records(f)
    return out


def copy_fingerprints(con: duckdb.DuckDBPyConnection, window: Window) -> None:
    """The fingerprints of the window's loaded batches (those of this DuckDB release) into the scratch attached as
    `s`, for verify_read_back."""
    # A warehouse no writer has migrated since 012 has none (a reader does not migrate): nothing to compare.
    if has_column(con, "raw", "batches", "lines_fingerprint"):
        picked = "lines_fingerprint from raw.batches where starts_with(lines_fingerprint, version() || ':') and"
    else:
        picked = "cast(null as varchar) as lines_fingerprint from raw.batches where false and"
    con.execute(f"create or replace table s.candidate.loaded_fingerprints as select partition_date, batch_id, {picked} "
                "partition_date between $start and $end", window.params)


def verify_read_back(wh: Warehouse, run_id: str, days: list[str] | None = None,
                     lowered: capacity.Lowered | None = None) -> None:
    """Refuse (RawInputError) when a batch's lines read back into the run's scratch (those of `days`, default all)
    are not those loaded from its file, as candidate.loaded_fingerprints records them (copy_fingerprints): a
    correction builds from them, and no raw audit looked at them since they were read. A batch loaded before its
    lines were fingerprinted is not compared. Scratch work: run `lowered` beside today's load."""
    differ = (lowered or capacity.Lowered()).run(lambda: _differing(wh, run_id, days))
    for day, batch, file, loaded, now in differ:
        raise raw_files.RawInputError(
            Path(file), day, f"batch {batch}: the warehouse's copy of its lines differs from what was loaded from "
                             f"its file (loaded {loaded}; now {now}); nothing was published. Run the chain with "
                             "raw/order_lines over this window: its raw audit names every such batch")


def _differing(wh: Warehouse, run_id: str, days: list[str] | None) -> list[tuple[Any, ...]]:
    con = wh.open_scratch(run_id)
    try:
        fingerprints = sql.text("batch_lines_fingerprints").format(lines="candidate.raw_lines")
        return con.execute(
            "select l.partition_date::varchar, l.batch_id, b.file, l.lines_fingerprint, "
            f"coalesce(f.lines_fingerprint, {ledger.EMPTY_FINGERPRINT}) as now "
            f"from candidate.loaded_fingerprints l left join ({fingerprints}) f "
            "on f.partition_date = l.partition_date and f.extraction_batch = l.batch_id "
            "join candidate.raw_batches b on b.partition_date = l.partition_date and b.batch_id = l.batch_id "
            "where now is distinct from l.lines_fingerprint "
            + ("" if days is None else "and l.partition_date in (select unnest($days::date[])) ")
            + "order by 1, 2 limit 1", {} if days is None else {"days": [dt.date.fromisoformat(d) for d in days]}
        ).fetchall()
    finally:
        con.close()


# The days of the run's evidence whose lines the raw step profiled where they are loaded and did not copy into
# the scratch's candidate.raw_lines: a correction copies those it builds (copy_uncopied).
UNCOPIED = "candidate.uncopied_days"


def uncopied_days(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The days UNCOPIED lists in the run's scratch (none in a scratch the raw step did not write)."""
    if not con.execute("select count(*) from information_schema.tables where table_schema = 'candidate' "
                       "and table_name = 'uncopied_days'").fetchone()[0]:
        return []
    return [r[0].isoformat() for r in con.execute(f"select partition_date from {UNCOPIED}").fetchall()]


def profile_in_place(wh: Warehouse, run_id: str, files: list[RawFile], days: list[str], stats: LockStats,
                     give_way: GiveWay | None) -> raw_files.Measures:
    """The measures of `days`' lines (every batch of each one loaded from a byte-identical file), a chunk of days
    at a time: its lines read from raw.order_lines in a short read, as read_back reads them, into an in-memory
    database, and profiled there after the read. Nothing is written to the run's scratch file: DuckDB writes a
    table into a database file about three times slower than into memory (a 120-day read-back: 1.7 s against
    0.55 s)."""
    days = sorted(days)
    found = raw_files.Measures()
    if not days:
        return found
    wanted = set(days)
    mine = [f for f in files if f.partition in wanted]
    # Past the buffer pool it spills where the run's scratch spills (dropped with it), not into the cwd.
    scratch = wh.scratch_path(run_id)
    con = connect(config={**wh.duckdb_config(), "temp_directory": str(scratch.with_name(scratch.name + ".tmp"))})
    try:
        con.execute("create schema candidate")
        raw_files.record_batches(con, mine)
        create_table(con, "candidate.reused_batches", raw_files.REUSED_COLUMNS,
                     [(dt.date.fromisoformat(f.partition), f.batch_id, str(f.path)) for f in mine])

        def read(con: duckdb.DuckDBPyConnection, part: list[str]) -> None:
            con.execute(sql.text("raw_lines_table"))  # a chunk's lines replace the chunk's before (and their memory)
            _read_loaded_lines(con, part)

        short_reads(wh, con, days, stats, give_way, read,
                    after=lambda part: found.add(raw_files.measure(con, all_read_back=True)), lines=file_lines(mine))
    finally:
        con.close()
    return found


def copy_uncopied(wh: Warehouse, run_id: str, uncopied: list[str], days: list[str], stats: LockStats,
                  give_way: GiveWay | None, lowered: capacity.Lowered | None = None) -> list[str]:
    """The lines of those of `days` the raw step profiled in place (`uncopied`, as UNCOPIED lists them), read back
    into the run's scratch (candidate.raw_lines), compared with what was loaded (a line changed since the raw step
    compared them is refused, verify_read_back) and no longer listed there. Returns the days copied: when there are
    any, the scratch's merge is stale."""
    wanted = sorted(set(uncopied) & set(days))
    if not wanted:
        return []
    con = wh.open_scratch(run_id)
    try:
        lines = batch_lines(con, "candidate.raw_batches")
    finally:
        con.close()
    read_back(wh, run_id, wanted, stats, give_way, lines)
    with wh.reader(stats=stats) as con:
        attach(con, wh.scratch_path(run_id), "s")
        copy_fingerprints(con, Window.of(wanted[0], wanted[-1]))
        con.execute("detach s")
    verify_read_back(wh, run_id, wanted, lowered)
    con = wh.open_scratch(run_id)
    try:
        con.execute(f"delete from {UNCOPIED} where partition_date in (select unnest($days::date[]))",
                    {"days": [dt.date.fromisoformat(d) for d in wanted]})
    finally:
        con.close()
    return wanted


def load(wh: Warehouse, scope: RunScope, threads: int | None = None,
         log: Callable[[str], None] | None = None, give_way: GiveWay | None = None,
         lowered: capacity.Lowered | None = None,
         keepable: Callable[[list[RawFile]], set[str]] | None = None, progress: Progress | None = None) -> RawLoad:
    """Audit the window's raw files and append those not loaded yet; nothing is written if an audit fails.
    In a window longer than one chunk, a batch already loaded from a byte-identical file (same sha256, every line
    loaded) is not parsed again: its lines are read back from the warehouse, and every audit runs on them as on a
    parsed file's.
    A backfill's parse and profile run `lowered` (lower CPU priority, fewer cores beside today's load; the reads
    and appends, which hold the warehouse, do not), and its `give_way` is called before each chunk's hold: it
    waits while today's load runs. `keepable(files)`: the days the correction may keep as published (default: any);
    a loaded day outside it is copied into the scratch for the build, not profiled where it is loaded.
    `progress`: the step's (it goes on to its events phase), or one of the load's own."""
    progress = progress or Progress(pausable.relayed(log), f"raw {scope.window}", PHASES)
    with progress.stopping():
        return _load(wh, scope, threads, log, give_way, lowered, keepable, progress)


def _load(wh: Warehouse, scope: RunScope, threads: int | None, log: Callable[[str], None] | None,
          give_way: GiveWay | None, lowered: capacity.Lowered | None,
          keepable: Callable[[list[RawFile]], set[str]] | None, progress: Progress) -> RawLoad:
    stats = LockStats()
    run_id = scope.run.run_id
    scratch_work = lowered or capacity.Lowered()
    progress.watch(lambda: capacity.paused_s(lowered))  # the scratch work paused beside today's load
    with wh.reader(stats=stats) as rcon:
        first_seen = ledger.loaded_batches(rcon, scope.window)
    # Reading loaded batches back pays off for a window of more than one chunk, by days or by lines (a year's
    # re-publish: raw step 34-37 s -> 16-19 s; 31 days of 200,000 lines: 23.5-23.9 s -> 5.6-6.0 s); a short one
    # (today's load) parses its few files and so takes the lock no more often than before.
    loaded_lines: dict[str, int] = {}
    for (day, _), seen in first_seen.items():
        loaded_lines[day] = loaded_lines.get(day, 0) + int(seen["loaded_rows"] or 0)
    by_file = ({str(seen["file"]): seen for seen in first_seen.values()}
               if len(wh.settings.chunks(scope.window.keys, loaded_lines)) > 1 else {})
    try:
        files = scratch_work.run(lambda: _parse(wh, scope, threads, by_file), log=log)
    except raw_files.RawInputError as exc:
        more = f" and {len(exc.others)} more problem(s)" if exc.others else ""
        progress.end("parse", f"refused by {FILE_READABLE}: {exc.partition}, {exc.path}{more}; nothing appended")
        findings = [Finding(FILE_READABLE, e.partition, e.path, e.problem) for e in exc.each()]
        # Only the check that ran: the others read nothing, and a result of theirs would show green in the UI.
        return RawLoad(_audits(findings, [], (FILE_READABLE,)), [], {}, [], stats)
    loaded = [f for f in files if f.read_back]
    # A day whose every batch is loaded from an identical file is profiled where it is loaded, unless it is to be
    # built (every day with atlasmart/rederive): it would be read twice. A day with a batch parsed now is merged with
    # its loaded ones in the scratch.
    parsed_days = {f.partition for f in files if not f.read_back}
    in_place = sorted({f.partition for f in loaded} - parsed_days) if loaded and not scope.run.rederive else []
    if in_place and keepable is not None:
        may_keep = keepable(files)
        in_place = [d for d in in_place if d in may_keep]
    read_back(wh, run_id, sorted({f.partition for f in loaded} - set(in_place)), stats, give_way, file_lines(loaded))
    con = wh.open_scratch(run_id)
    try:
        create_table(con, UNCOPIED, (("partition_date", "date"),), [(dt.date.fromisoformat(d),) for d in in_place])
    finally:
        con.close()
    # Raw is immutable: a batch whose identical file is already fully loaded needs no second copy. One loaded
    # before its lines were fingerprinted (or under another DuckDB release) is parsed and loaded again, once.
    to_load = [f for f in files if (f.partition, f.batch_id) not in first_seen
               or first_seen[(f.partition, f.batch_id)]["loaded_rows"] != f.manifest["records"]
               or not first_seen[(f.partition, f.batch_id)]["fingerprint_current"]]
    _size(progress, len(scope.window.keys), files, set(in_place))
    progress.expect("append", len(to_load) / max(len(files), 1))
    progress.done("parse", f"{len(files)} batch file(s): {len(files) - len(loaded)} parsed, {len(loaded)} "
                           "already loaded from identical files read back from the warehouse"
                           + (f" ({len(in_place)} day(s) of them read where they are loaded, not copied)"
                              if in_place else ""))
    elsewhere = profile_in_place(wh, run_id, files, in_place, stats, give_way)
    figures, findings = scratch_work.run(lambda: _profile(wh, scope, threads, files, elsewhere), log=log)
    findings += _immutability(files, first_seen)
    audits = _audits(findings, files)
    # Said here, not in the child that profiled: only this process knows how long the child stood paused beside
    # today's load (said apart, not extrapolated), and whether an audit refuses (then no estimate of an append).
    profiled = f"{sum(int(f['records']) for f in figures.values()):,} records, {len(findings)} finding(s)"
    if any(a.blocks for a in audits):
        progress.end("profile", f"{profiled}: refused by {', '.join(a.check for a in audits if a.blocks)}; "
                                "nothing appended")
        return RawLoad(audits, files, figures, [], stats)
    progress.done("profile", profiled)
    # Each chunk of days is its own short transaction (rows and batch records together), so a year's first load
    # never holds the warehouse for long; a crash between chunks leaves whole batches, and the next run loads the rest.
    days, lines = sorted({f.partition for f in to_load}), file_lines(to_load)
    chunks = len(wh.settings.chunks(days, lines))
    long_write = chunks > 1  # one chunk is one short hold, like a one-chunk publish: nothing to give way to
    for k, part in enumerate(day_chunks(wh, days, stats, give_way, lines), start=1):
        chunk = set(part)
        _append(wh, run_id, [f for f in to_load if f.partition in chunk], stats, give_way if long_write else None)
        if long_write:
            progress.part("append", k / chunks, f"chunk {k}/{chunks} ({part[0]}..{part[-1]}) appended")
    progress.done("append", f"{len(to_load)} new batch(es) appended")
    return RawLoad(audits, files, figures, days, stats)


def _append(wh: Warehouse, run_id: str, to_load: list[RawFile], stats: LockStats,
            give_way: GiveWay | None = None) -> None:
    """Append these batches' lines from the run's scratch, and record them as loaded, in one transaction. A
    backfill's (it has a `give_way`) is given up to a process that announces it waits on the lock, and started
    again once today's load has run."""
    @contextlib.contextmanager
    def hold() -> Iterator[duckdb.DuckDBPyConnection]:
        with wh.writer(stats) as wcon:
            attach(wcon, wh.scratch_path(run_id), "s")
            create_table(wcon, "loading", LOADING_COLUMNS,
                         [(dt.date.fromisoformat(f.partition), f.batch_id) for f in to_load], temp=True)
            yield wcon

    # The range lets both statements skip the row groups of other days (min/max per row group), instead of
    # joining every row of the window's scratch and of raw.order_lines in each chunk.
    days = Window.of(min(f.partition for f in to_load), max(f.partition for f in to_load))
    span = days.params

    def append(wcon: duckdb.DuckDBPyConnection) -> None:
        wcon.execute("delete from raw.order_lines r using loading l where r.partition_date = l.partition_date "
                     "and r.extraction_batch = l.extraction_batch and r.partition_date between $start and $end",
                     span)
        wcon.execute(
            "insert into raw.order_lines (partition_date, line_id, order_id, customer_id, sku, quantity, "
            "unit_price, unit_cost, event_time, source_sequence, extraction_batch, op) "
            "select c.partition_date, line_id, order_id, customer_id, sku, quantity, unit_price, unit_cost, "
            "event_time, source_sequence, c.extraction_batch, op from s.candidate.raw_lines c "
            "semi join loading l on c.partition_date = l.partition_date "
            "and c.extraction_batch = l.extraction_batch where c.partition_date between $start and $end", span)
        ledger.record_batches(wcon, [_batch_row(f, run_id) for f in to_load], days)

    preemptible_hold(hold, wh.settings.warehouse_path, append, stats, give_way, preemptible=give_way is not None)


# Seconds a line costs the parse phase (parsed, read back into the scratch, or only fingerprinted: profiled where it
# is loaded) and the profile (in the scratch, or read from the warehouse into memory), fitted as PHASES were.
PARSE_LINE_S = {"parsed": 1.27e-6, "read back": 0.6e-6, "in place": 0.15e-6}
PROFILE_LINE_S = {"parsed": 0.31e-6, "read back": 0.31e-6, "in place": 1.3e-6}
IN_PLACE_DAY_S = 0.003


def _size(progress: Progress, days: int, files: list[RawFile], in_place: set[str]) -> None:
    """The estimate sized to the run: a re-publish reads back or profiles in place what a first load parses."""
    lines = {"parsed": 0, "read back": 0, "in place": 0}
    for f in files:
        lines["parsed" if not f.read_back else "in place" if f.partition in in_place else "read back"] += _records(f)
    progress.size(days, sum(lines.values()))
    parse, profile = COSTS["parse"], COSTS["profile"]
    progress.reprice("parse", Cost(parse.at(days, 0) + sum(PARSE_LINE_S[k] * n for k, n in lines.items())))
    progress.reprice("profile", Cost(profile.at(days, 0) + sum(PROFILE_LINE_S[k] * n for k, n in lines.items())
                                     + (IN_PLACE_DAY_S * days if lines["in place"] else 0.0)))


def _records(f: RawFile) -> int:
    """The lines a batch's manifest says it holds, for the estimate (0 if it says nothing readable)."""
    try:
        return max(int(f.manifest.get("records") or 0), 0)
    except (TypeError, ValueError):
        return 0


def _batch_row(f: RawFile, run_id: str) -> dict[str, Any]:
    return {"partition_date": f.partition, "batch_id": f.batch_id, "file": str(f.path), "sha256": f.sha256,
            "kind": f.kind, "source_high_sequence": f.high_sequence, "extracted_at": f.manifest.get("extracted_at"),
            "records": f.manifest["records"], "controls": json.dumps(f.controls), "run_id": run_id}
