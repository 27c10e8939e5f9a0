"""How much of the machine a backfill takes: every core while no current-lane run is queued or running, and
ATLASMART_BACKFILL_THREADS (default 1) while one is, so today's load keeps a core; and always a lower CPU priority
(ATLASMART_BACKFILL_NICE), so that when both want a core the scheduler gives it to today's load."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

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


@contextlib.contextmanager
def lowered_priority(nice: int) -> Iterator[int]:
    """The block runs `nice` steps lower in CPU priority; yields the niceness in force. On Linux the niceness is
    the calling thread's and every thread it starts inherits it, so a DuckDB database opened inside the block
    (its worker threads start at connect) runs lowered too. Idle cores stay usable: a lowered thread only loses
    when another wants the core. The priority is restored after the block where the process may raise it."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        yield 0
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, min(before + nice, 19))
    try:
        yield os.getpriority(os.PRIO_PROCESS, 0)
    finally:
        # Raising it again needs CAP_SYS_NICE; without it the thread stays lowered (a run's step process ends anyway).
        with contextlib.suppress(PermissionError):
            os.setpriority(os.PRIO_PROCESS, 0, before)
