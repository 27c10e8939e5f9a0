"""The seed's integrated lab, replayed end to end: publish two days, the legacy-cost incident, a one-day backfill."""

import hashlib
from pathlib import Path
from typing import Any

import dagster as dg

from atlasmart_assets import candidates, extracts
from atlasmart_assets.contract import BACKFILL_TAG, RANGE_END_TAG, RANGE_START_TAG, REASON_TAG
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.warehouse.connection import attach
from atlasmart_assets.warehouse.ledger import DayCandidate, Publication
from atlasmart_assets.warehouse.publish import publish
from atlasmart_assets.window import Window

HISTORICAL, CURRENT = "2026-09-20", "2026-09-21"
LEGACY_LINE, LEGACY_COST = "2026-09-20-L0007", 40


def run_chain(instance: dg.DagsterInstance, start: str, end: str | None = None,
              tags: dict[str, str] | None = None) -> dg.ExecuteInProcessResult:
    """One in-process run of the daily job over [start, end] (a ranged run when end is given)."""
    from atlasmart_assets.definitions import defs

    job = defs.resolve_job_def("atlasmart_daily")
    if end is None:
        return job.execute_in_process(partition_key=start, instance=instance, tags=tags or {}, raise_on_error=False)
    return job.execute_in_process(instance=instance, raise_on_error=False,
                                  tags={**(tags or {}), RANGE_START_TAG: start, RANGE_END_TAG: end})


def published_as_candidates(wh: Warehouse, run_id: str, window: Window, change: str,
                            params: dict[str, Any] | None = None) -> dict[str, DayCandidate]:
    """The window's published staged lines copied into the run's scratch as its staged candidate, changed there by
    the SQL `change` (an update of candidate.staged_order_lines), and built into fact and mart candidates: what
    each day would publish. A correction made by hand, without the audits (the lab's legacy incident, tests)."""
    with wh.reader() as rcon:
        attach(rcon, wh.scratch_path(run_id), "s")
        rcon.execute("create schema if not exists s.candidate")
        rcon.execute("create or replace table s.candidate.staged_order_lines as select * from staged.order_lines "
                     "where partition_date between $start and $end", window.params)
        rcon.execute("detach s")
    con = wh.open_scratch(run_id)
    try:
        con.execute(change, params or {})
        candidates.build(con)
        return candidates.days(con, window, {})
    finally:
        con.close()


def publish_legacy_incident(wh: Warehouse) -> Publication:
    """Republish 2026-09-20 the way the legacy pipeline did (no audits): one line at a legacy cost of 40."""
    window, run_id = Window.of(HISTORICAL), "lab-legacy-incident"
    days = published_as_candidates(wh, run_id, window,
                                   "update candidate.staged_order_lines set unit_cost = $cost where line_id = $line",
                                   {"cost": LEGACY_COST, "line": LEGACY_LINE})
    pub = publish(wh, wh.scratch_path(run_id), window, RunInfo(run_id, None, "legacy pipeline without audits"),
                  "legacy-cost-v0", days, None)
    wh.drop_scratch(run_id)
    return pub


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(instance: dg.DagsterInstance | None = None) -> dict[str, Any]:
    """Replay the lab on the data dir in the environment; returns the acceptance summary."""
    wh = Warehouse()
    cfg = wh.settings
    instance = instance or dg.DagsterInstance.ephemeral()
    for day in (HISTORICAL, CURRENT):
        result = run_chain(instance, day)
        if not result.success:
            raise RuntimeError(f"lab: publishing {day} failed; see the run's events")
    publish_legacy_incident(wh)
    incident = extracts.read(cfg, HISTORICAL)
    current_before = file_sha256(cfg.published_dir / extracts.file_name(CURRENT))
    backfill = run_chain(instance, HISTORICAL, HISTORICAL, {BACKFILL_TAG: "BF-20260920-0900-R1",
                                                            REASON_TAG: "legacy cost 40 on one line; raw says 30"})
    if not backfill.success:
        raise RuntimeError("lab: the backfill of 2026-09-20 failed; see the run's events")
    hist, cur = extracts.read(cfg, HISTORICAL), extracts.read(cfg, CURRENT)
    current_after = file_sha256(cfg.published_dir / extracts.file_name(CURRENT))
    assert hist is not None and cur is not None and incident is not None
    return {
        "incident_controls": incident["controls"],
        "historical_controls": hist["controls"],
        "current_controls": cur["controls"],
        "current_sha256": cur["sha256"],
        "current_hash_unchanged_after_backfill": current_before == current_after,
        "expected_historical_controls": [8, 5, 10, 690, 425, 265],
        "expected_current_controls": [9, 7, 11, 740, 450, 290],
    }

