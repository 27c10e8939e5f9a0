"""How much of the machine a backfill takes: every core while no current-lane run is queued or running, and
ATLASMART_BACKFILL_THREADS (default 1) while one is, so today's load keeps a core; always a lower CPU priority
(ATLASMART_BACKFILL_NICE), so that when both want a core the scheduler gives it to today's load; and no new
warehouse hold while a current-lane run is queued or running (up to ATLASMART_BACKFILL_GIVE_WAY_S per hold)."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Callable, Iterator

import dagster as dg

from atlasmart_assets.contract import CURRENT_LANE, LANE_TAG

ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED]


def current_lane_active(instance: dg.DagsterInstance) -> bool:
    return bool(instance.get_run_records(
        filters=dg.RunsFilter(tags={LANE_TAG: CURRENT_LANE}, statuses=ACTIVE), limit=1))


# A run record that was created but never launched stays NOT_STARTED: it must not hold a backfill up.
RUNNING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
POLL_S = 0.25


def current_lane_running(instance: dg.DagsterInstance) -> bool:
    return bool(instance.get_run_records(
        filters=dg.RunsFilter(tags={LANE_TAG: CURRENT_LANE}, statuses=RUNNING), limit=1))


def give_way(instance: dg.DagsterInstance, max_s: float) -> Callable[[], float]:
    """What a backfill calls before each warehouse hold of a long write: it waits while a current-lane run is
    queued or running, up to `max_s`, and returns how long it waited. Today's load then takes the lock as often as
    it needs without queueing behind a backfill chunk each time."""
    def wait() -> float:
        started = time.monotonic()
        while time.monotonic() - started < max_s and current_lane_running(instance):
            time.sleep(POLL_S)
        return time.monotonic() - started
    return wait


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
