"""Build fact and mart candidates in the run's scratch database, and what each day would publish."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Collection, Iterator, Mapping

import duckdb
import pandas as pd

from atlasmart_assets import extracts, sql
from atlasmart_assets.contract import CONTROL_NAMES
from atlasmart_assets.warehouse.ledger import DayCandidate
from atlasmart_assets.warehouse.rows import create_table
from atlasmart_assets.window import Window


def number(value: Any) -> int | float:
    """Canonical JSON number: money as an integer when whole, else rounded to cents."""
    if value is None:
        return 0
    if isinstance(value, (Decimal, float)):
        return int(value) if value == int(value) else round(float(value), 2)
    return int(value)


def extracted_instant(value: str) -> dt.datetime:
    """The instant an extracted_at names (one without an offset is UTC's), to compare batches' extractions."""
    stamp = dt.datetime.fromisoformat(value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value)
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class Evidence:
    """A day's landing batches (ordered by source_high_sequence) and what the day reconciles to."""

    batches: tuple[dict[str, Any], ...]
    target_controls: list[float]

    @property
    def as_of(self) -> str | None:
        """The newest of the batches' extracted_at (a re-extraction may carry the same source_high_sequence)."""
        stamps = [b["extracted_at"] for b in self.batches if b.get("extracted_at")]
        return max(reversed(stamps), key=extracted_instant) if stamps else None

    @property
    def high_sequence(self) -> int | None:
        return self.batches[-1]["source_high_sequence"] if self.batches else None

    @property
    def digest(self) -> str | None:
        """One fingerprint of the batch set (the ordered batch sha256s)."""
        if not self.batches:
            return None
        return hashlib.sha256("\n".join(b["sha256"] for b in self.batches).encode()).hexdigest()


def merge_evidence(con: duckdb.DuckDBPyConnection) -> bool:
    """candidate.merged_lines from candidate.raw_lines and candidate.raw_batches: a view of the records that win,
    over the table of the few that lose (candidate.raw_lines is not changed after the merge: the view reads it by
    rowid). Whether any key (day, line_id) is held by several records (candidate.repeated_lines)."""
    con.execute(f"create or replace table candidate.repeated_lines as {sql.text('repeated_lines')}")
    con.execute(f"create or replace table candidate.merge_losers as {sql.text('merge_losers')}")
    # A scratch written by an earlier release (a step retried across an upgrade) holds the merged lines as a table.
    if con.execute("select count(*) from information_schema.tables where table_schema = 'candidate' "
                   "and table_name = 'merged_lines' and table_type = 'BASE TABLE'").fetchone()[0]:
        con.execute("drop table candidate.merged_lines")
    con.execute(f"create or replace view candidate.merged_lines as {sql.text('merged_lines')}")
    return bool(con.execute("select count(*) from candidate.repeated_lines").fetchall()[0][0])


def evidence(con: duckdb.DuckDBPyConnection, window: Window) -> dict[str, Evidence]:
    rows = con.execute("select partition_date, batch_id, kind, source_high_sequence, sha256, extracted_at, controls "
                       "from candidate.raw_batches where partition_date between $start and $end "
                       "order by partition_date, source_high_sequence, batch_id", window.params).fetchall()
    out: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        out.setdefault(row[0].isoformat(), []).append(row)
    return {day: Evidence(tuple({"batch": r[1], "kind": r[2], "source_high_sequence": r[3], "sha256": r[4],
                                 "extracted_at": r[5]} for r in batch_rows),
                          [float(x) for x in json.loads(batch_rows[-1][6])])
            for day, batch_rows in out.items()}


def build_staged(con: duckdb.DuckDBPyConnection, customers: pd.DataFrame, deletion_keys: pd.DataFrame,
                 window: Window, days: Collection[str] | None = None) -> None:
    """candidate.staged_order_lines for `days` of the window (default: all of them): the merged evidence less
    what deletion requests suppress, joined to the customer dimension in force (SCD2, version valid at order
    time). The days built are left in candidate.build_days."""
    built = [dt.date.fromisoformat(d) for d in sorted(window.keys if days is None else days)]
    con.execute("create or replace table candidate.build_days as select unnest($days::date[]) as partition_date",
                {"days": built})
    con.register("customers_in_force", customers)
    con.register("deletion_keys_in_force", deletion_keys)
    try:
        con.execute("create or replace table candidate.customers as select cast(customer_id as varchar) as customer_id, "
                    "cast(country as varchar) as country, cast(tier as varchar) as tier, "
                    "cast(valid_from as timestamp) as valid_from, cast(valid_to as timestamp) as valid_to "
                    "from customers_in_force")
        con.execute("create or replace table candidate.deletion_keys as select cast(request_id as varchar) as "
                    "request_id, cast(customer_id as varchar) as customer_id, cast(line_id as varchar) as line_id "
                    "from deletion_keys_in_force")
    finally:
        con.unregister("customers_in_force")
        con.unregister("deletion_keys_in_force")
    # Building every day, the queries read the window as they always did: a filter on the merged lines changes
    # DuckDB's plan (a 120-day first load peaked at 1,172-1,177 MiB with it, 986 MiB without).
    every = len(built) == len(window.keys)
    days_filter = "true" if every else "list_contains($days, merged.partition_date)"
    params = window.params if every else {**window.params, "days": built}
    with joins_as_written(con):
        for name in ("suppressed_lines", "staged_order_lines"):
            con.execute(f"create or replace table candidate.{name} as {sql.text(name).format(days=days_filter)}",
                        params)


@contextlib.contextmanager
def joins_as_written(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """The queries run on `con` meanwhile join in the order their SQL states; DuckDB still builds each hash join on
    the side it estimates smaller. Its join-order pass estimated the merged lines filtered to some days at a few
    hundred rows: a re-publish building a third of a year's days (2.4 M lines) put them on the build side of the
    merge and customer joins and ran out of memory at the 1 GB limit. Without that pass they keep their scan's
    estimate, and the same build peaked at 511 MiB. That is DuckDB 2.0's planner:
    test_partial_build reads the plan the build runs, so a release that plans it otherwise fails there. The setting
    is the database's (DuckDB keeps it global), here the run's own scratch file, which its scratch work opens one
    connection at a time."""
    con.execute("set disabled_optimizers = 'join_order'")
    try:
        yield
    finally:
        con.execute("reset disabled_optimizers")


def suppressed(con: duckdb.DuckDBPyConnection, window: Window,
               applied: Mapping[str, Collection[str]] | None = None) -> dict[str, dict[str, Any]]:
    """Per day: the controls the suppressed lines take out and the requests that suppressed them; given `applied`
    (per day, the requests its current version applied), `newly`: the suppressed lines no request it applied names,
    which the row-delta audit counts back (a second request for lines already left out is no new suppression)."""
    out = {}
    for row in con.execute(sql.text("suppressed_controls"), window.params).fetchall():
        out[row[0].isoformat()] = {"controls": [number(x) for x in row[1:7]], "requests": list(row[7])}
    if applied is None or not out:
        return out
    for figures in out.values():
        figures["newly"] = 0
    create_table(con, "applied_requests", (("partition_date", "date"), ("request_id", "varchar")),
                 [(dt.date.fromisoformat(d), r) for d, requests in applied.items() if d in out for r in requests],
                 temp=True)
    for day, lines in con.execute(sql.text("newly_suppressed"), window.params).fetchall():
        out[day.isoformat()]["newly"] = int(lines)
    return out


def build(con: duckdb.DuckDBPyConnection) -> None:
    """candidate.fct_order_lines and candidate.revenue_daily for every day of candidate.staged_order_lines. The fact
    candidate is a view: it is staged plus three products, and writing it out cost ~4 s for a year."""
    con.execute(f"create or replace view candidate.fct_order_lines as {sql.text('fct_order_lines')}")
    con.execute(f"create or replace table candidate.revenue_daily as {sql.text('revenue_daily')}")


def controls(con: duckdb.DuckDBPyConnection, relation: str, window: Window, kind: str = "fact",
             query: str | None = None) -> dict[str, dict[str, Any]]:
    """Per day: the figures of `<kind>_controls.sql` (the six controls of a fact or mart, a staged relation's
    lines and fingerprint) over `relation`, or those of the query named `query` over the same {kind} relation."""
    query = sql.text(query or f"{kind}_controls").format(**{kind: relation})
    cur = con.execute(query, window.params)
    names = [d[0] for d in cur.description]
    out: dict[str, dict[str, Any]] = {}
    for row in cur.fetchall():
        rec = dict(zip(names, row))
        day = rec.pop("partition_date").isoformat()
        out[day] = {k: number(v) for k, v in rec.items()}
    return out


def split_orders(con: duckdb.DuckDBPyConnection, window: Window,
                 days: Collection[str]) -> list[tuple[str, str, list[str], list[str]]]:
    """The orders of `days` whose lines fall in more than one of the mart's country x tier groups
    (split_orders.sql): day, order, its customers with their group, the batch files of its lines."""
    if not days:
        return []
    return [tuple(row) for row in con.execute(sql.text("split_orders"), {
        **window.params, "days": [dt.date.fromisoformat(d) for d in sorted(days)]}).fetchall()]


# A day without staged lines (every line retracted or erased) has no row in staged_controls.sql: these are its figures,
# so that its version has a fingerprint and a later correction can keep it as published (before, it had none, and
# every correction built it again).
NO_LINES: dict[str, Any] = {"lines": 0, "unresolved_customers": 0, "fingerprint": 0}


def fingerprint(staged_figures: dict[str, Any]) -> str:
    """A day's staged lines as a publish compares them (staged_controls.sql). DuckDB's hash is not promised stable
    across its releases, so the release is part of it: a fingerprint from another one never matches."""
    return f"duckdb {duckdb.__version__}: {staged_figures['lines']} lines, hash sum {staged_figures['fingerprint']}"


def control_list(figures: dict[str, Any] | None) -> list[int | float]:
    names = CONTROL_NAMES
    return [number(figures.get(n)) if figures else 0 for n in names]


def mart_rows(con: duckdb.DuckDBPyConnection, relation: str, window: Window) -> dict[str, list[dict[str, Any]]]:
    cur = con.execute(sql.text("mart_rows").format(mart=relation), window.params)
    names = [d[0] for d in cur.description]
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in window.keys}
    for row in cur.fetchall():
        rec = dict(zip(names, row))
        day: dt.date = rec.pop("partition_date")
        out[day.isoformat()].append({k: v if isinstance(v, str) else number(v) for k, v in rec.items()})
    return out


def days(con: duckdb.DuckDBPyConnection, window: Window, inputs: dict[str, Evidence],
         fact: str = "candidate.fct_order_lines", mart: str = "candidate.revenue_daily",
         reference: dict[str, Any] | None = None,
         applied: dict[str, list[str]] | None = None,
         fact_figures: dict[str, dict[str, Any]] | None = None,
         keys: Collection[str] | None = None) -> dict[str, DayCandidate]:
    """What each day of the window (or each of `keys`) would publish: rows, controls, content hash, the
    extract's exact bytes, and the evidence it read (the ordered batch set and as_of). `fact_figures`: the fact's
    controls, if already read."""
    fact_figures = controls(con, fact, window) if fact_figures is None else fact_figures
    rows_by_day = mart_rows(con, mart, window)
    out: dict[str, DayCandidate] = {}
    for day in window.keys if keys is None else sorted(keys):
        ctl = control_list(fact_figures.get(day))
        ev = inputs.get(day)
        batches = tuple({k: b[k] for k in ("batch", "sha256", "source_high_sequence")} for b in ev.batches) if ev else ()
        ref = reference or {}
        requests = tuple((applied or {}).get(day, ()))
        identity = {"batches": list(batches), "as_of": ev.as_of if ev else None,
                    "source_high_sequence": ev.high_sequence if ev else None,
                    "dimension_version": ref.get("dimension_version"), "requests_applied": list(requests)}
        text = extracts.document(day, ctl, rows_by_day[day], identity)
        out[day] = DayCandidate(day, int(ctl[0]), ctl, extracts.content_sha256(day, ctl, rows_by_day[day]), text,
                                ev.digest if ev else None, ev.high_sequence if ev else None, batches,
                                ev.as_of if ev else None, ref.get("dimension_version"),
                                tuple(ref.get("dimension_batches") or ()), requests)
    return out
