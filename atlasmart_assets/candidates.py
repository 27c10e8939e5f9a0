"""Build fact and mart candidates in the run's scratch database, and what each day would publish."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import duckdb

from atlasmart_assets import extracts, sql
from atlasmart_assets.contract import CONTROL_NAMES
from atlasmart_assets.warehouse.ledger import DayCandidate
from atlasmart_assets.window import Window


def number(value: Any) -> int | float:
    """Canonical JSON number: money as an integer when whole, else rounded to cents."""
    if value is None:
        return 0
    if isinstance(value, (Decimal, float)):
        return int(value) if value == int(value) else round(float(value), 2)
    return int(value)


def build_staged(con: duckdb.DuckDBPyConnection, customers_file: str, window: Window) -> None:
    """candidate.staged_order_lines for the window, from candidate.raw_lines and the SCD2 customer file."""
    con.execute(f"create or replace table candidate.customers as {sql.text('customers')}", {"file": customers_file})
    con.execute(f"create or replace table candidate.staged_order_lines as {sql.text('staged_order_lines')}",
                window.params)


def build(con: duckdb.DuckDBPyConnection, window: Window) -> None:
    """candidate.fct_order_lines and candidate.revenue_daily for the whole window, from candidate.staged_order_lines."""
    con.execute(f"create or replace table candidate.fct_order_lines as {sql.text('fct_order_lines')}", window.params)
    con.execute(f"create or replace table candidate.revenue_daily as {sql.text('revenue_daily')}")


def controls(con: duckdb.DuckDBPyConnection, relation: str, window: Window, kind: str = "fact") -> dict[str, dict[str, Any]]:
    """Per day: the six controls (and, for facts, duplicate line ids) of a fact- or mart-shaped relation."""
    query = sql.text(f"{kind}_controls").format(**{kind: relation})
    cur = con.execute(query, window.params)
    names = [d[0] for d in cur.description]
    out: dict[str, dict[str, Any]] = {}
    for row in cur.fetchall():
        rec = dict(zip(names, row))
        day = rec.pop("partition_date").isoformat()
        out[day] = {k: number(v) for k, v in rec.items()}
    return out


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


def days(con: duckdb.DuckDBPyConnection, window: Window, inputs: dict[str, dict[str, Any]],
         fact: str = "candidate.fct_order_lines", mart: str = "candidate.revenue_daily") -> dict[str, DayCandidate]:
    """What each day of the window would publish: rows, controls, content hash and the extract's exact bytes."""
    fact_figures = controls(con, fact, window)
    rows_by_day = mart_rows(con, mart, window)
    out: dict[str, DayCandidate] = {}
    for day in window.keys:
        ctl = control_list(fact_figures.get(day))
        source = inputs.get(day, {})
        identity = {"raw_sha256": source.get("sha256"), "source_high_sequence": source.get("source_high_sequence"),
                    "extraction_batch": source.get("extraction_batch")}
        text = extracts.document(day, ctl, rows_by_day[day], identity)
        out[day] = DayCandidate(day, int(ctl[0]), ctl, extracts.content_sha256(day, ctl, rows_by_day[day]), text,
                                source.get("sha256"), source.get("source_high_sequence"))
    return out
