"""Stale days: published days whose evidence changed since their publication — a new, changed or vanished landing
batch, a dimension batch that changes the tier or country of one of its lines at order time, or a deletion
request whose subject it, or a version of it kept for rollback, holds. Computed from the ledger, the published
staged table, the version store and the files; writes nothing."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import duckdb

from atlasmart_assets import raw_files, raw_load, reference, sql
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse.connection import LockStats, connect
from atlasmart_assets.window import Window

QUALIFIED = re.compile(r"^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*\Z")
# Every stored version's lines: those of staged lines, and those kept as fact rows only.
STORE = "versions.fct_order_lines"


class ReferenceUnreadable(ValueError):
    """The dimension batches or deletion requests cannot be read, so no day is judged against them: `days` are the
    days stale by their landing batches alone."""

    def __init__(self, problems: list[str], days: list["StaleDay"]) -> None:
        super().__init__("the dimension batches and deletion requests cannot be read, so no day was judged against "
                         f"them: {'; '.join(problems)} (every run is refused until this is fixed)")
        self.days = days


@dataclass(frozen=True)
class StaleDay:
    partition: str
    reasons: list[str]
    publication_id: str
    new_batches: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reasons(raw_dir: Path, day: str, published: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The day's batches on disk against those its publication read, matched by batch id (a later batch's file is
    named by it; the first file's is in its manifest), never by position: the ledger lists them by source sequence,
    and a late batch of an older extraction sorts before the first (a review found such a day stale for good)."""
    first = raw_files.path_for(raw_dir, day)
    by_id = {b["batch"]: b for b in published}
    reasons, new = [], []
    later_ids = set()
    for path in raw_files.later_batches(raw_dir, day):
        later_ids.add(path.stem)
        seen = by_id.get(path.stem)
        if seen is None:
            new.append(path.stem)
            reasons.append(f"new batch {path.stem}")
        elif raw_files.sha256_of(path) != seen["sha256"]:
            reasons.append(f"batch {path.stem} changed since publication")
    # The published batches no later file accounts for: the first file's, and any that vanished.
    unmatched = [b for b in published if b["batch"] not in later_ids]
    if unmatched and first.is_file():
        sha = raw_files.sha256_of(first)
        named = _batch_id(first)
        ours = next((b for b in unmatched if b["sha256"] == sha), None) or \
            next((b for b in unmatched if b["batch"] == named), unmatched[0])
        if ours["sha256"] != sha:
            reasons.append(f"first batch {first.name} changed since publication")
        unmatched.remove(ours)
    elif unmatched:
        reasons.append(f"first batch {first.name} vanished")
        unmatched = unmatched[1:]
    reasons += [f"batch {b['batch']} vanished" for b in unmatched]
    return reasons, new


def _batch_id(path: Path) -> str | None:
    """The batch id the file's manifest names (read from its head), if it can be read there."""
    try:
        return str(json.loads(raw_files.head_manifest(path) or "{}").get("extraction_batch") or "") or None
    except (ValueError, AttributeError):
        return None


def _reference_reasons(wh: Warehouse, ref: reference.Reference, published_batches: dict[str, list[str]],
                       days: Window, lines: dict[str, int]) -> dict[str, list[str]]:
    """Per published day of `days`: the dimension batches that change the tier or country of its lines at order
    time (the semantic radius, never "every day"), and the deletion requests whose subject it, or a version of it kept
    for rollback, still holds. Read a
    chunk of days (and of `lines`, each day's as its ledger row says) per hold: all published history is years of
    lines."""
    if not wh.settings.warehouse_path.exists():
        return {}
    out: dict[str, list[str]] = {}
    con = connect(":memory:")
    try:
        con.register("dimension_in_force", ref.customers)
        con.register("deletion_keys_in_force", ref.deletion_keys)
        batch_ids = [b.batch_id for b in ref.batches]

        def read(con: duckdb.DuckDBPyConnection, part: list[str]) -> None:
            published_view(con, "staged.order_lines", part)
            drifted = con.execute(sql.text("dimension_drift")).fetchall()
            held = con.execute(sql.text("suppressed_published")).fetchall()
            # A version kept for rollback may hold a subject the current one does not (the source retracted its
            # lines before the request came): a build of the day applies the request and erases that version.
            published_view(con, STORE, part)
            kept = {(d, r): n for d, r, n in con.execute(sql.text("suppressed_published")).fetchall()}
            for day, request_id, _ in held:
                kept.pop((day, request_id), None)
            for day, lines in drifted:
                used = published_batches.get(day.isoformat(), [])
                newer = [b for b in batch_ids if b not in used] or batch_ids[-1:]
                out.setdefault(day.isoformat(), []).append(
                    f"dimension batch {', '.join(newer)} changes tier or country of {lines} line(s)")
            for day, request_id, lines in held:
                out.setdefault(day.isoformat(), []).append(f"deletion request {request_id} holds {lines} line(s)")
            for (day, request_id), lines in sorted(kept.items()):
                out.setdefault(day.isoformat(), []).append(
                    f"deletion request {request_id}: a version kept for rollback holds {lines} line(s)")

        raw_load.short_reads(wh, con, days.keys, LockStats(), None, read, lines=lines)
    finally:
        con.close()
    return out


def published_view(con: duckdb.DuckDBPyConnection, table: str, part: list[str]) -> None:
    """`published.order_lines`, the relation dimension_drift.sql and suppressed_published.sql read: the published
    `table` (`schema.name`, chosen by code) of the warehouse attached as `w`, its days of `part` (sorted). A view
    takes no bound parameters: the bounds are dates, written by isoformat."""
    if not QUALIFIED.match(table):
        raise ValueError(f"not a schema-qualified table: {table!r}")
    first, last = dt.date.fromisoformat(part[0]), dt.date.fromisoformat(part[-1])
    con.execute("create schema if not exists published")
    con.execute(f"create or replace view published.order_lines as select * from w.{table} "
                f"where partition_date between date '{first.isoformat()}' and date '{last.isoformat()}'")


def stale_days(wh: Warehouse, window: Window | None = None) -> list[StaleDay]:
    """Every published day (of `window`, default all) whose evidence on disk differs from what it published. Raises
    ReferenceUnreadable (carrying the days its landing batches make stale) when the dimension batches or deletion
    requests cannot be read: a day they would make stale cannot be told from one they would not."""
    with wh.reader() as con:
        where = "where partition_date between $start and $end" if window else ""
        rows = con.execute(f"select partition_date, publication_id, input_batches, dimension_batches, rows_after "
                           f"from audit.current_publications {where} order by partition_date",
                           window.params if window else {}).fetchall()
    used = {d.isoformat(): [b["batch"] for b in json.loads(dims)] for d, _, _, dims, _ in rows if dims}
    lines = {d.isoformat(): int(n or 0) for d, _, _, _, n in rows}
    ref = reference.load(wh) if rows else None
    readable = ref is not None and not ref.problems
    by_reference = _reference_reasons(wh, ref, used, Window(rows[0][0], rows[-1][0]), lines) if readable else {}
    out = []
    raw_dir = wh.settings.raw_dir
    for day, pub_id, batches, _, _ in rows:
        reasons, new = _reasons(raw_dir, day.isoformat(), json.loads(batches)) if batches else ([], [])
        reasons += by_reference.get(day.isoformat(), [])
        if reasons:
            out.append(StaleDay(day.isoformat(), reasons, pub_id, new))
    if ref is not None and ref.problems:
        raise ReferenceUnreadable(ref.problems, out)
    return out
