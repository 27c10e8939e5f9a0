"""Current-lane runs as the daemon leaves them, for tests of how a backfill gives way to today's load."""

from __future__ import annotations

import time
import uuid
from typing import Callable

import dagster as dg

from atlasmart_assets.contract import CURRENT_LANE_TAGS


def running_current_run(instance: dg.DagsterInstance) -> dg.DagsterRun:
    """A current-lane run as the daemon leaves it while it runs (STARTED), without running anything."""
    return instance.add_run(dg.DagsterRun(job_name="atlasmart_daily", run_id=str(uuid.uuid4()),
                                          status=dg.DagsterRunStatus.STARTED, tags=CURRENT_LANE_TAGS))


def until_written(write: Callable[[], object]) -> None:
    """A write to the in-memory instance from a second thread, again while SQLite says a table is locked (the
    reading thread holds it for a moment)."""
    for _ in range(100):
        try:
            write()
            return
        except Exception:  # noqa: BLE001 - sqlalchemy's OperationalError: database table is locked
            time.sleep(0.05)
    write()
