"""How much of the machine a backfill takes: every core while no current-lane run is queued or running, and
ATLASMART_BACKFILL_THREADS cores (default 1) while one is, so today's load keeps the others (re-decided while the
backfill works, not once per step); always a lower CPU priority (ATLASMART_BACKFILL_NICE), so that when both want a
core the scheduler gives it to today's load; and no new warehouse hold while a current-lane run is queued or running
(up to ATLASMART_BACKFILL_GIVE_WAY_S per hold)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Callable, Iterator, TypeVar

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
    """A backfill step's DuckDB threads: None (DuckDB's default, every core) where `yield_cores` re-decides the
    cores while the step works; elsewhere decided once, at the step's start: the cap while a current-lane run is
    queued or running, else every core."""
    if PINS and len(os.sched_getaffinity(0)) > capped:
        return None
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


# Only Linux lets a process set the CPUs each of its threads may run on (without privileges, both ways).
PINS = sys.platform.startswith("linux") and hasattr(os, "sched_setaffinity")
WATCH_S = 0.5


class CoreYield:
    """What `yield_cores` did: how long the backfill ran on fewer cores, and how often it was asked to."""

    def __init__(self) -> None:
        self.yielded_s = 0.0
        self.times = 0


def _pin_all_threads(cpus: set[int]) -> None:
    """Every thread of this process to `cpus`. Threads started later inherit their parent's set, so this is
    applied again at every watch: a thread started between two listings is caught at the next."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError, OSError):
            pass  # a thread that ended since the listing, or one the platform will not move


@contextlib.contextmanager
def yield_cores(instance: dg.DagsterInstance, cores: int, enabled: bool = True) -> Iterator[CoreYield]:
    """While the body runs, this process (DuckDB's worker threads included) keeps to `cores` of its CPUs whenever a
    current-lane run is queued, starting or started, and has all of them back as soon as none is. A watcher thread
    checks the run records every WATCH_S; every thread of the process gets all its CPUs back on exit. Without
    per-thread CPU sets (not Linux), with no more CPUs than `cores`, or not `enabled` (today's load), it does
    nothing."""
    done = CoreYield()
    allowed = set(os.sched_getaffinity(0)) if PINS and enabled else set()
    if len(allowed) <= cores:
        yield done
        return
    kept = set(sorted(allowed)[-cores:])
    stop = threading.Event()

    def watch() -> None:
        since: float | None = None
        while not stop.is_set():
            try:
                busy = current_lane_active(instance, RUNNING)
            except Exception:  # noqa: BLE001 - the instance unreadable for a moment: keep what was decided
                busy = since is not None
            if busy and since is None:
                since, done.times = time.monotonic(), done.times + 1
            elif not busy and since is not None:
                done.yielded_s += time.monotonic() - since
                since = None
            _pin_all_threads(kept if busy else allowed)
            stop.wait(WATCH_S)
        if since is not None:
            done.yielded_s += time.monotonic() - since

    # A daemon: a run terminated while it works must not be kept alive by its watcher.
    watcher = threading.Thread(target=watch, name="atlasmart-yield-cores", daemon=True)
    watcher.start()
    try:
        yield done
    finally:
        stop.set()
        watcher.join()
        _pin_all_threads(allowed)
