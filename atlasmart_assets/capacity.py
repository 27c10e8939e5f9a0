"""How much of the machine a backfill takes: every core while no current-lane run is queued or running, and
ATLASMART_BACKFILL_THREADS (default 1) while one is, so today's load keeps a core; always a lower CPU priority
(ATLASMART_BACKFILL_NICE), so that when both want a core the scheduler gives it to today's load; and no new
warehouse hold while a current-lane run is queued or running (up to ATLASMART_BACKFILL_GIVE_WAY_S per hold)."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, TypeVar

import dagster as dg

from atlasmart_assets.contract import CURRENT_LANE, LANE_TAG

ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED]


def current_lane_active(instance: dg.DagsterInstance,
                        statuses: list[dg.DagsterRunStatus] | None = None) -> bool:
    """Whether a current-lane run is in one of `statuses` (default: queued, not yet started, starting, started)."""
    return bool(instance.get_run_records(
        filters=dg.RunsFilter(tags={LANE_TAG: CURRENT_LANE}, statuses=statuses or ACTIVE), limit=1))


T = TypeVar("T")
# Only Linux gives each thread its own niceness (elsewhere PRIO_PROCESS 0 would lower the whole process).
LOWERS = sys.platform.startswith("linux") and hasattr(os, "setpriority")
# A run record that was created but never launched stays NOT_STARTED: it must not hold a backfill up.
RUNNING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
POLL_S = 0.25


def give_way(instance: dg.DagsterInstance, max_s: float) -> Callable[[], float]:
    """What a backfill calls before each warehouse hold of a long write: it waits while a current-lane run is
    queued or running, up to `max_s`, and returns how long it waited. Today's load then takes the lock as often as
    it needs without queueing behind a backfill chunk each time."""
    def wait() -> float:
        started = time.monotonic()
        while time.monotonic() - started < max_s and current_lane_active(instance, RUNNING):
            time.sleep(POLL_S)
        return time.monotonic() - started
    return wait


def backfill_threads(instance: dg.DagsterInstance, capped: int) -> int | None:
    """None (DuckDB's default: every core) when the current lane is idle, else the cap."""
    return capped if current_lane_active(instance) else None


def niceness_of(nice: int) -> int:
    """The niceness `run_lowered(nice, ...)` runs at, from the calling thread's (0 when it lowers nothing)."""
    if nice <= 0 or not LOWERS:
        return 0
    return min(os.getpriority(os.PRIO_PROCESS, 0) + nice, 19)


def run_lowered(nice: int, work: Callable[[], T]) -> T:
    """`work()` in a thread of its own, `nice` steps lower in CPU priority than the caller. On Linux niceness is a
    thread's own and the threads it starts inherit it, so a DuckDB database opened in `work` (its worker threads
    start at connect) runs lowered too; idle cores stay usable (a lowered thread only loses a core another wants).
    The caller's priority never changes: nothing to restore (raising a priority back needs CAP_SYS_NICE), and the
    warehouse holds that follow, taken by the caller, never run lowered while today's load waits on them."""
    if nice <= 0 or not LOWERS:
        return work()
    target = niceness_of(nice)
    out: list[T] = []
    failed: list[BaseException] = []

    def body() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, target)
            out.append(work())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failed.append(exc)

    # A daemon: a run terminated while it works must not keep its process alive.
    thread = threading.Thread(target=body, name="atlasmart-lowered", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return out[0]
