"""The days a correction need not build again. A day's current version was built by this release from the same landing
batches and the same customer dimension, it applied the deletion requests that name a record of its evidence now (none,
for most days), and its published rows and mart rows are still the ones its ledger row describes: building it again
would give the same rows, controls and extract bytes. Such a day publishes its current version again as it is (a new
ledger row, no line written); every other day of the window is built and audited."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

import duckdb
import pandas as pd

from atlasmart_assets import candidates, contract, dimension, raw_files, raw_load, reference, sql
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.connection import GiveWay, LockStats, attached_hold, preemptible_hold
from atlasmart_assets.warehouse.ledger import Current, DayCandidate
from atlasmart_assets.window import Window


@dataclass(frozen=True)
class Kept:
    """The days published again as they are: what each publishes (its current ledger row) and its staged figures
    (rows, unresolved_customers); and the days whose published rows differ from their ledger row (a changed stored
    line, a changed mart row). Those are built, and their lines written afresh rather than pointed at again."""

    days: dict[str, DayCandidate] = field(default_factory=dict)
    staged: dict[str, dict[str, int]] = field(default_factory=dict)
    differ: tuple[str, ...] = ()


def _this_release(fingerprint: str | None) -> bool:
    """A fingerprint this DuckDB release computes the same way (candidates.fingerprint names its release)."""
    return bool(fingerprint) and str(fingerprint).startswith(f"duckdb {duckdb.__version__}:")


Requested = Mapping[str, Collection[str]]  # day -> the deletion requests naming a record of it


def _named_when_built(now: Current) -> Collection[str]:
    """The deletion requests that named a record of the day's evidence when its version was built; for a version
    written before they were recorded (migration 014), those it applied, as compared before."""
    return now.requests_named if now.requests_named is not None else now.requests_applied


def eligible(current: dict[str, Current], evidence: dict[str, candidates.Evidence], dimension_version: str | None,
             code_version: str, requested: Requested | None, keys: Collection[str]) -> list[str]:
    """The days of `keys` whose current version read what a build now would: the same landing batches (ordered
    sha256s), customer dimension version and release, the deletion requests that named a record of its evidence when
    it was built those that name one now (`requested`; None: not looked at yet, as the raw step decides), and rows
    stored with a fingerprint of this DuckDB release to check them by. A request is immutable once loaded
    (reference.py refuses one whose bytes changed) and was in force for that build, so a day it names stays as
    built; before, such a day was built again by every correction for good (in the bench's year, one erasure of a
    customer who buys on most days made every later re-publish build 292 of its 365 days). A rolled-back day is
    never kept: the version it restored may have been built by another release than the rollback's."""
    out = []
    for day in sorted(keys):
        now, ev = current.get(day), evidence.get(day)
        if (now is not None and ev is not None and _this_release(now.fingerprint) and now.stored_as
                and now.kind == "publish" and now.code_version == code_version
                and now.dimension_version == dimension_version and now.input_sha256 == ev.digest
                and (requested is None or set(requested.get(day, ())) == set(_named_when_built(now)))):
            out.append(day)
    return out


def keepable(wh: Warehouse, window: Window, files: list[raw_files.RawFile]) -> set[str]:
    """The days of `window` a correction could keep as published, from what the raw step knows: `eligible` with the
    landing batches of `files`, the customer dimension's version in the raw directory and this release's code
    version; deletion requests are the correction's to look at. Any other day is built (a new dimension version or
    release builds every day), so the raw step copies its loaded lines into the run's scratch rather than profile
    them where they are loaded and have the correction copy them after. An unreadable dimension: none (the
    correction refuses it)."""
    try:
        version = reference.Reference(batches=dimension.load(wh.settings.raw_dir)).dimension_version
    except dimension.DimensionError:
        return set()
    with wh.reader() as con:
        current = ledger.current(con, window)
    batches: dict[str, list[dict[str, str]]] = {}
    # In candidates.evidence's order: by source_high_sequence, then batch id.
    for f in sorted(files, key=lambda f: (f.partition, f.high_sequence, f.batch_id)):
        batches.setdefault(f.partition, []).append({"batch": f.batch_id, "sha256": f.sha256})
    evidence = {day: candidates.Evidence(tuple(found), []) for day, found in batches.items()}
    return set(eligible(current, evidence, version, contract.CODE_VERSION, None, window.keys))


def _by_day(rows: list[tuple[Any, ...]], into: dict[str, set[str]] | None = None) -> dict[str, set[str]]:
    out = {} if into is None else into
    for day, request_id in rows:
        out.setdefault(day.isoformat(), set()).add(str(request_id))
    return out


def requested_days(con: duckdb.DuckDBPyConnection, deletion_keys: pd.DataFrame,
                   window: Window) -> dict[str, set[str]]:
    """The days of the run's scratch evidence (candidate.raw_lines) with a record, winning or not, whose customer or
    line id a deletion request names, with those requests: such a day is built unless its current version applied
    them all (eligible)."""
    if deletion_keys.empty:
        return {}
    con.register("requested_keys", deletion_keys)
    try:
        rows = con.execute(sql.text("requested_days").format(lines="candidate.raw_lines", days="true"),
                           window.params).fetchall()
    finally:
        con.unregister("requested_keys")
    return _by_day(rows)


def requested_loaded_days(wh: Warehouse, run_id: str, deletion_keys: pd.DataFrame, days: list[str],
                          stats: LockStats, give_way: GiveWay | None) -> dict[str, set[str]]:
    """requested_days for the days whose lines the raw step profiled where they are loaded (raw_load.UNCOPIED): read
    in raw.order_lines, a chunk of days per short read held as a read-back is (every line of such a day is one of
    its batches', each loaded whole from a byte-identical file)."""
    days = sorted(days)
    if deletion_keys.empty or not days:
        return {}
    found: dict[str, set[str]] = {}
    query = sql.text("requested_days").format(lines="w.raw.order_lines",
                                              days="lines.partition_date in (select unnest($days::date[]))")

    def read(con: duckdb.DuckDBPyConnection, part: list[str]) -> None:
        params = {**Window.of(part[0], part[-1]).params, "days": [dt.date.fromisoformat(d) for d in part]}
        _by_day(con.execute(query, params).fetchall(), found)

    con = wh.open_scratch(run_id)
    try:
        con.register("requested_keys", deletion_keys)
        raw_load.short_reads(wh, con, days, stats, give_way, read,
                             lines=raw_load.batch_lines(con, "candidate.raw_batches"))
    finally:
        con.close()
    return found


def checked_days(window: Window, current: dict[str, Current]) -> list[str]:
    """The days of the window whose published rows can be checked: a fingerprint of this DuckDB release."""
    days = set(window.keys)
    return sorted(d for d, c in current.items() if d in days and _this_release(c.fingerprint))


def copy_published(con: duckdb.DuckDBPyConnection, days: list[str], source: str, target: str, first: bool) -> None:
    """The figures of `days`' published staged lines (staged_controls.sql) and their mart rows, from the warehouse
    (catalog prefix `source`: "" or "w.") into the run's scratch ("" or "s."; candidate.kept_figures,
    candidate.kept_revenue_daily); `first` replaces the tables, else rows are added. Prefixes are code's, never a
    value's."""
    into = "create or replace table {} as" if first else "insert into {}"
    params = {**Window.of(days[0], days[-1]).params, "days": days}
    staged = sql.text("staged_controls").format(staged=f"{source}staged.order_lines")
    con.execute(f"{into.format(target + 'candidate.kept_figures')} select * from ({staged}) "
                "where partition_date in (select unnest($days::date[]))", params)
    con.execute(f"{into.format(target + 'candidate.kept_revenue_daily')} select {', '.join(ledger.MART_COLUMNS)} "
                f"from {source}mart.revenue_daily where partition_date between $start and $end "
                "and partition_date in (select unnest($days::date[]))", params)


def read_with_ledger(con: duckdb.DuckDBPyConnection, window: Window,
                     current: dict[str, Current]) -> dict[str, DayCandidate] | None:
    """In the caller's short read of the warehouse (`con`, the run's scratch attached as `s`), for a window of one
    chunk (today's load): what `verify` reads, so that it takes no hold of its own. Returns the ledger rows of the
    checked days' current publications (None: nothing to check)."""
    days = checked_days(window, current)
    if not days:
        return None
    con.execute("create schema if not exists s.candidate")
    copy_published(con, days, "", "s.", first=True)
    return ledger.publication_candidates(con, {d: current[d].publication_id for d in days})


def verify(wh: Warehouse, run_id: str, window: Window, current: dict[str, Current], keep: list[str],
           stats: LockStats, give_way: GiveWay | None, read: dict[str, DayCandidate] | None = None) -> Kept:
    """Checks the published rows of every day of the window whose current version has a fingerprint of this DuckDB
    release against it (line count and fingerprint of its published staged lines), and those of the days in `keep`
    also against their extract (mart rows); keeps the days of `keep` that pass. `read`: what read_with_ledger read
    already (today's load). Else short reads: the ledger rows of the very publications `current` names, then a
    chunk of days per read (held as a backfill's read-back is: it gives way before each chunk, and a chunk under way
    is given up to a process waiting on the lock or to today's load starting) into the run's scratch
    (candidate.kept_figures; candidate.kept_revenue_daily, which the build adds to its mart candidate). A year's
    figures took 0.4 s."""
    checked = checked_days(window, current)
    if not checked:
        return Kept()
    found: dict[str, DayCandidate] = {}
    if read is not None:
        keeping = set(keep)
        found = {d: c for d, c in read.items() if d in keeping}
    elif keep:  # a run that keeps nothing (atlasmart/rederive) needs no ledger rows: one hold fewer
        with wh.reader(stats=stats) as rcon:
            found = ledger.publication_candidates(rcon, {d: current[d].publication_id for d in keep})
    rows = {d: current[d].rows for d in checked}
    long_read = give_way is not None and len(wh.settings.chunks(checked, rows)) > 1
    con = wh.open_scratch(run_id)
    try:
        def hold() -> contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]:
            return attached_hold(con, wh.settings.warehouse_path, "w", wh.settings.lock_timeout_s, stats)

        if read is None:  # else read_with_ledger copied them in today's load's read of the ledger
            for k, part in enumerate(raw_load.day_chunks(wh, checked, stats, give_way, rows)):
                preemptible_hold(hold, wh.settings.warehouse_path,
                                 lambda con, part=part, first=k == 0: copy_published(con, part, "w.", "", first),
                                 stats, give_way if long_read else None, preemptible=long_read)
        cur = con.execute("select * from candidate.kept_figures")
        names = [d[0] for d in cur.description][1:]
        found_figures = {r[0].isoformat(): {n: candidates.number(v) for n, v in zip(names, r[1:])}
                         for r in cur.fetchall()}
        figures = {d: found_figures.get(d, candidates.NO_LINES) for d in checked}
        mart = candidates.mart_rows(con, "candidate.kept_revenue_daily", window)
    finally:
        con.close()
    differ = [d for d in checked if current[d].fingerprint != candidates.fingerprint(figures[d])
              or int(figures[d]["lines"]) != current[d].rows]
    kept = {}
    for day in keep:
        cand = found.get(day)
        if day in differ or cand is None:
            continue
        if mart.get(day) != json.loads(cand.extract_json).get("rows"):
            differ.append(day)
        else:
            kept[day] = cand
    staged_figures = {d: {"rows": int(figures[d]["lines"]),
                          "unresolved_customers": int(figures[d]["unresolved_customers"])} for d in kept}
    return Kept(kept, staged_figures, tuple(sorted(differ)))
