"""The saturation-incident ledger (`audit.saturation_incidents`): a current-lane run that missed its objective while
a backfill ran, recorded against the backfill. One row per (backfill, run, objective), so a breach is recorded once
however often it is seen; the rows recorded together form one incident (one alert)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Sequence

import duckdb

from atlasmart_assets.slo import Breach
from atlasmart_assets.warehouse.connection import transaction
from atlasmart_assets.warehouse.migrations import has_table


@dataclass(frozen=True)
class Incident:
    """What was recorded against one backfill in one detection: the breaches and the lane's figures then."""

    incident_seq: int
    incident_id: str
    backfill_id: str
    backfill_window: str
    detected_at: dt.datetime  # naive UTC
    backfill_run_ids: tuple[str, ...]
    backfill_runs_in_progress: int
    backfill_lane_limit: int | None
    runs_in_progress: int
    max_concurrent_runs: int | None
    breaches: tuple[Breach, ...]


_COLUMNS = ("incident_seq", "incident_id", "backfill_id", "backfill_window", "run_id", "metric", "observed_s",
            "objective_s", "run_status", "detected_at", "backfill_run_ids", "backfill_runs_in_progress",
            "backfill_lane_limit", "runs_in_progress", "max_concurrent_runs")


TABLE = "saturation_incidents"


def exists(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the ledger has the table: a reader of a warehouse no writer has migrated since 010 sees none."""
    return has_table(con, "audit", TABLE)


Key = tuple[str, str, str]  # (backfill_id, run_id, metric)


def known(con: duckdb.DuckDBPyConnection, backfill_ids: Sequence[str]) -> dict[Key, tuple[float, str]]:
    """The breaches already recorded for these backfills, with the figure and run status last recorded."""
    if not backfill_ids or not exists(con):
        return {}
    rows = con.execute("select backfill_id, run_id, metric, observed_s, run_status from audit.saturation_incidents "
                       "where list_contains($ids, backfill_id)", {"ids": list(backfill_ids)}).fetchall()
    return {(b, r, m): (o, st) for b, r, m, o, st in rows}


def grow(con: duckdb.DuckDBPyConnection, key: Key, observed_s: float, status: str) -> None:
    """A recorded breach still growing (the run waits or works on): keep its largest figure and latest status,
    so the ledger and the SLO report show how bad it got, not how bad it was when first seen."""
    con.execute("update audit.saturation_incidents set observed_s = greatest(observed_s, $o), run_status = $s "
                "where backfill_id = $b and run_id = $r and metric = $m",
                {"o": observed_s, "s": status, "b": key[0], "r": key[1], "m": key[2]})


def record(con: duckdb.DuckDBPyConnection, draft: Incident) -> Incident | None:
    """Insert the draft's breaches not yet recorded, in one transaction, under a new incident number; returns the
    incident as recorded, or None when every breach was already there."""
    with transaction(con):
        seq = con.execute("select nextval('audit.saturation_incident_seq')").fetchone()[0]
        incident_id = f"sat-{draft.detected_at:%Y%m%dT%H%M%S}-{seq}"
        fresh = []
        for b in draft.breaches:
            params: dict[str, Any] = {
                "incident_seq": seq, "incident_id": incident_id, "backfill_id": draft.backfill_id,
                "backfill_window": draft.backfill_window, "run_id": b.run_id, "metric": b.metric,
                "observed_s": b.observed_s, "objective_s": b.objective_s, "run_status": b.status,
                "detected_at": draft.detected_at, "backfill_run_ids": json.dumps(list(draft.backfill_run_ids)),
                "backfill_runs_in_progress": draft.backfill_runs_in_progress,
                "backfill_lane_limit": draft.backfill_lane_limit, "runs_in_progress": draft.runs_in_progress,
                "max_concurrent_runs": draft.max_concurrent_runs}
            inserted = con.execute(
                f"insert into audit.saturation_incidents ({', '.join(_COLUMNS)}) "
                f"values ({', '.join('$' + c for c in _COLUMNS)}) on conflict do nothing returning run_id",
                params).fetchall()
            if inserted:
                fresh.append(b)
    if not fresh:
        return None
    return Incident(seq, incident_id, draft.backfill_id, draft.backfill_window, draft.detected_at,
                    draft.backfill_run_ids, draft.backfill_runs_in_progress, draft.backfill_lane_limit,
                    draft.runs_in_progress, draft.max_concurrent_runs, tuple(fresh))


def after(con: duckdb.DuckDBPyConnection, seq: int) -> list[Incident]:
    """Incidents numbered above `seq`, oldest first."""
    if not exists(con):
        return []
    rows = con.execute(f"select {', '.join(_COLUMNS)} from audit.saturation_incidents where incident_seq > $seq "
                       "order by incident_seq, run_id, metric", {"seq": seq}).fetchall()
    grouped: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        r = dict(zip(_COLUMNS, row))
        grouped.setdefault(r["incident_seq"], []).append(r)
    out = []
    for seq_, group in grouped.items():
        g = group[0]
        out.append(Incident(
            seq_, g["incident_id"], g["backfill_id"], g["backfill_window"] or "", g["detected_at"],
            tuple(json.loads(g["backfill_run_ids"])), g["backfill_runs_in_progress"], g["backfill_lane_limit"],
            g["runs_in_progress"], g["max_concurrent_runs"],
            tuple(Breach(r["run_id"], r["metric"], r["observed_s"], r["objective_s"], r["run_status"]) for r in group)))
    return out
