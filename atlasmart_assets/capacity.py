"""How many cores a backfill may use: every core while no current-lane run is queued or running, and
ATLASMART_BACKFILL_THREADS (default 1) while one is, so today's load keeps a core."""

from __future__ import annotations

import dagster as dg

from atlasmart_assets.contract import CURRENT_LANE, LANE_TAG

ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED]


def current_lane_active(instance: dg.DagsterInstance) -> bool:
    return bool(instance.get_run_records(
        filters=dg.RunsFilter(tags={LANE_TAG: CURRENT_LANE}, statuses=ACTIVE), limit=1))


def backfill_threads(instance: dg.DagsterInstance, capped: int) -> int | None:
    """None (DuckDB's default: every core) when the current lane is idle, else the cap."""
    return capped if current_lane_active(instance) else None
