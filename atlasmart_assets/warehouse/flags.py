"""'Correction in progress' flags: owned by the run that set them, cleared by it (or, after a crash, by the next run
and by the clearing sensor)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb

from atlasmart_assets.scope import RunInfo
from atlasmart_assets.window import Window


class WindowHeld(RuntimeError):
    """Another backfill's correction holds part of this window."""


def mark(con: duckdb.DuckDBPyConnection, window: Window, run: RunInfo) -> None:
    """Tell readers this window is being corrected; refuse days another live correction holds."""
    held = con.execute("select partition_date, run_id, backfill_id from audit.corrections_in_progress "
                       "where partition_date between $start and $end and run_id <> $run_id",
                       {**window.params, "run_id": run.run_id}).fetchall()
    if held:
        days = ", ".join(f"{d} (run {r}, backfill {b})" for d, r, b in held[:5])
        raise WindowHeld(f"{len(held)} day(s) of {window} are being corrected by another run: {days}")
    con.execute("insert into audit.corrections_in_progress select d::date, $backfill, $run_id, $reason, now() "
                "from generate_series($start::timestamp, $end::timestamp, interval 1 day) as g(d) "
                "on conflict do nothing",
                {**window.params, "backfill": run.backfill_id, "run_id": run.run_id, "reason": run.reason})


def clear(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Remove the flags `run_id` set; returns how many."""
    return con.execute("delete from audit.corrections_in_progress where run_id = $run_id returning partition_date",
                       {"run_id": run_id}).fetchall().__len__()


def held_by(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """run_id -> the days it flags."""
    out: dict[str, list[str]] = {}
    for day, run_id in con.execute("select partition_date, run_id from audit.corrections_in_progress "
                                   "order by partition_date").fetchall():
        out.setdefault(run_id, []).append(day.isoformat())
    return out


@dataclass(frozen=True)
class Flag:
    """One flagged day: who holds it, since when (UTC) and for how long, on the warehouse's own clock."""

    day: str
    run_id: str
    backfill_id: str | None
    reason: str | None
    since: dt.datetime
    age_s: float


def aged(con: duckdb.DuckDBPyConnection) -> list[Flag]:
    """Every flag with its age (the warehouse clock both sides, so the session time zone cancels out)."""
    rows = con.execute("select partition_date, run_id, backfill_id, reason, timezone('UTC', since::timestamptz), "
                       "epoch(now()::timestamp) - epoch(since) from audit.corrections_in_progress "
                       "order by run_id, partition_date").fetchall()
    return [Flag(d.isoformat(), r, b, why, since, float(age)) for d, r, b, why, since, age in rows]
