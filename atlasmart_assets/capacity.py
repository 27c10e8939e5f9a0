"""How much of the machine a backfill takes. Its scratch work (no warehouse hold in it) uses every core while no
current-lane run is queued or running, and stands paused while one is (on Linux; up to ATLASMART_BACKFILL_GIVE_WAY_S
at a time, then on ATLASMART_BACKFILL_THREADS cores, default 1; elsewhere on those cores throughout), always at a
lower CPU priority (ATLASMART_BACKFILL_NICE); it takes no new warehouse hold while a current-lane run is queued
or running (up to ATLASMART_BACKFILL_GIVE_WAY_S per hold), and gives up a chunk under way when one starts. Its holds
run at full speed: today's load never waits on a slowed holder."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TypeVar

import dagster as dg

from atlasmart_assets import pausable, waiting
from atlasmart_assets.contract import BACKFILL_TAG, CURRENT_LANE, LANE_TAG
from atlasmart_assets.settings import Settings

ACTIVE = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
          dg.DagsterRunStatus.STARTED]
# How many lane-tagged run records a look reads: today's load is one or two of them; the rest would be backfills
# given the tag by hand, which are not today's load.
LOOKED_AT = 100


def current_lane_active(instance: dg.DagsterInstance, statuses: list[dg.DagsterRunStatus] | None = None,
                        own: str | None = None) -> bool:
    """Whether a current-lane run other than `own` (the asking step's run) is in one of `statuses` (default: queued,
    not yet started, starting, started). A run carrying dagster/backfill is a backfill whatever lane tag it was
    given (scope.lane_of, the SLO report): a backfill tagged atlasmart/lane=current by hand waited a minute before
    each of its holds for itself, and one queued behind another held that one up."""
    records = instance.get_run_records(
        filters=dg.RunsFilter(tags={LANE_TAG: CURRENT_LANE}, statuses=statuses or ACTIVE), limit=LOOKED_AT)
    return any(BACKFILL_TAG not in r.dagster_run.tags and r.dagster_run.run_id != own for r in records)


T = TypeVar("T")
# Only Linux gives each thread its own niceness (elsewhere PRIO_PROCESS 0 would lower the whole process).
LOWERS = sys.platform.startswith("linux") and hasattr(os, "setpriority")
# A run record that was created but never launched stays NOT_STARTED: it must not hold a backfill up.
RUNNING = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
POLL_S = 0.25


@dataclass(frozen=True)
class GiveWay:
    """What a backfill calls before each warehouse hold of a long write: it waits while a current-lane run is
    queued or running, up to `max_s`, and returns how long it waited. Today's load then takes the lock as often as
    it needs without queueing behind a backfill chunk each time. `busy()`: whether one is queued or running now,
    which gives up a chunk already under way (connection.preemptible_hold)."""

    instance: dg.DagsterInstance
    max_s: float
    # Told when a wait begins and how it ended: a minute's wait would otherwise leave the run's log on a line that
    # reads "about 1 s to go".
    say: Callable[[str], None] | None = None
    own: str | None = None  # the waiting run's id: never today's load, whatever its tags

    @classmethod
    def of_run(cls, context: Any, cfg: Settings, say: Callable[[str], None] | None) -> "GiveWay":
        """A backfill step's or job's (`context`: Dagster's, with its instance and run), on the settings' bound."""
        return cls(context.instance, cfg.backfill_give_way_s, say, context.run.run_id)

    def busy(self, unreadable: bool = False) -> bool:
        """Whether a current-lane run is queued or running; `unreadable` if the run storage cannot be read (locked
        for a moment): a chunk is not given up on a guess, and a wait asks again."""
        return {"busy": True, "free": False, "unreadable": unreadable}[self._state()]

    def _state(self) -> str:
        """`busy`, `free`, or `unreadable` (the run storage could not be read for a moment)."""
        try:
            return "busy" if current_lane_active(self.instance, RUNNING, self.own) else "free"
        except Exception:  # noqa: BLE001 - the run storage unreadable for a moment: the caller decides
            return "unreadable"

    def __call__(self) -> float:
        # Unreadable: ask again, as the pause and core watchers do; max_s still bounds the wait.
        started = time.monotonic()
        state, said = "free", False
        while time.monotonic() - started < self.max_s:
            state = self._state()
            if state == "free":
                break
            if not said:
                why = ("today's load is queued or running: the next warehouse hold waits until it ends"
                       if state == "busy" else "the run storage cannot be read: the next warehouse hold waits until "
                                               "it can")
                tell(self.say, f"{why} (at most {self.max_s:g} s)")
                said = True
            time.sleep(POLL_S)
        waited = time.monotonic() - started
        waiting.count(waited)
        if said:
            tell(self.say, f"the next warehouse hold goes on after {waited:.1f} s: " + {
                "free": "today's load has ended",
                "busy": "the most it waits; today's load is still queued or running",
                "unreadable": "the most it waits; the run storage still cannot be read"}[state])
        return waited


def tell(say: Callable[[str], None] | None, line: str) -> None:
    """`line` to `say`, if any: a line that cannot be logged must not fail a wait, nor leave work paused."""
    if say is not None:
        with contextlib.suppress(Exception):
            say(line)


def backfill_threads(instance: dg.DagsterInstance, capped: int, own: str | None = None) -> int | None:
    """A backfill step's DuckDB threads: None (DuckDB's default, every core) where `yield_cores` re-decides the
    cores while the step works; elsewhere decided once, at the step's start: the cap while a current-lane run other
    than `own` is queued or running (a record never launched is neither), else every core."""
    if can_pin() and len(os.sched_getaffinity(0)) > capped:
        return None
    return capped if current_lane_active(instance, RUNNING, own) else None


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


def can_pin() -> bool:
    """Whether this process may set its threads' CPU sets: Linux, and not refused here (a sandbox may refuse it)."""
    if not PINS:
        return False
    try:
        os.sched_setaffinity(0, os.sched_getaffinity(0))
    except OSError:
        return False
    return True




def _thread_ids(pid: int | str = "self") -> set[int]:
    try:
        return {int(tid) for tid in os.listdir(f"/proc/{pid}/task")}
    except OSError:
        return set()  # a process that has ended


def _pin_all_threads(cpus: set[int], pid: int | str = "self") -> set[int]:
    """Every thread of process `pid` (this one by default) to `cpus`; returns the threads listed. Threads started
    later inherit their parent's set, so this is applied again at every watch: a thread started between two
    listings is caught at the next."""
    listed = _thread_ids(pid)
    for tid in listed:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # a thread that ended since the listing
    return listed


def _restore(cpus: set[int]) -> None:
    """Every thread back to `cpus`, again until no thread appeared meanwhile (one started by a thread still pinned
    during the pass would keep the pinned set)."""
    for _ in range(10):
        if _pin_all_threads(cpus) == _thread_ids():
            return


@contextlib.contextmanager
def yield_cores(instance: dg.DagsterInstance | None, cores: int,
                own: str | None = None) -> Iterator[pausable.Pauses]:
    """While the body runs, this process (DuckDB's worker threads included) keeps to `cores` of its CPUs whenever a
    current-lane run is queued, starting or started, and has all of them back as soon as none is. A watcher thread
    checks the run records every WATCH_S; every thread of the process gets all its CPUs back on exit. Without an
    `instance` (today's load), without per-thread CPU sets, or with no more CPUs than `cores`, it does nothing."""
    done = pausable.Pauses()
    allowed = set(os.sched_getaffinity(0)) if instance is not None and can_pin() else set()
    if len(allowed) <= cores:
        yield done
        return
    kept = set(sorted(allowed)[-cores:])
    stop = threading.Event()

    def watch() -> None:
        since: float | None = None
        while not stop.is_set():
            try:
                busy = current_lane_active(instance, RUNNING, own)
            except Exception:  # noqa: BLE001 - the instance unreadable for a moment: keep what was decided
                busy = since is not None
            if stop.is_set():
                break
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
        # A run storage that hangs must not hold the step's end: the watcher pins nothing once told to stop.
        watcher.join(timeout=10)
        _restore(allowed)


@dataclass
class Lowered:
    """How a backfill runs its scratch work, which takes no warehouse hold: `nice` steps lower in CPU priority and,
    given the Dagster `instance`, out of today's way while a current-lane run is queued or running. On Linux, with
    `max_pause_s` > 0, in a child process that stands paused meanwhile (`pausable`), up to `max_pause_s` at a time,
    then keeps to `cores` CPUs; elsewhere in a thread kept to `cores` CPUs (`yield_cores`). The warehouse holds run
    outside it, at the run's own priority and on every core, so today's load never waits on a slowed holder.
    `yielded` adds up what was done across the calls."""

    nice: int = 0
    instance: dg.DagsterInstance | None = None
    cores: int = 1
    max_pause_s: float = 0.0
    yielded: pausable.Pauses = field(default_factory=pausable.Pauses)
    say: Callable[[str], None] | None = None  # told when the work is paused for today's load, and goes on
    own: str | None = None  # the step's run id: never today's load, whatever its tags

    @classmethod
    def of_run(cls, context: Any, cfg: Settings, say: Callable[[str], None] | None) -> "Lowered":
        """A backfill step's or job's scratch work (`context`: Dagster's, with its instance and run), as the
        settings lower, pause and cap it."""
        return cls(cfg.backfill_nice, context.instance, cfg.backfill_threads, cfg.backfill_give_way_s, say=say,
                   own=context.run.run_id)

    def run(self, work: Callable[[], T], log: Callable[[str], None] | None = None) -> T:
        """`work()` lowered. Lines it logs through `pausable.relayed(log)` reach `log`, from a child too."""
        if self.instance is not None and self.max_pause_s > 0 and pausable.AVAILABLE:
            return self._run_paused(work, log)
        done = pausable.Pauses()
        try:
            with yield_cores(self.instance, self.cores, self.own) as done:
                return run_lowered(self.nice, work)
        finally:
            self.yielded.yielded_s += done.yielded_s
            self.yielded.times += done.times

    def _run_paused(self, work: Callable[[], T], log: Callable[[str], None] | None) -> T:
        instance = self.instance
        assert instance is not None
        allowed = set(os.sched_getaffinity(0)) if can_pin() else set()
        kept = set(sorted(allowed)[-self.cores:])

        def pin(pid: int, yielding: bool) -> None:
            if len(allowed) > self.cores:
                _pin_all_threads(kept if yielding else allowed, pid)

        return pausable.run(work, lambda: current_lane_active(instance, RUNNING, self.own), nice=self.nice,
                            max_pause_s=self.max_pause_s, log=log, on_yield=pin, pauses=self.yielded,
                            say=functools.partial(tell, self.say) if self.say is not None else None,
                            cores=self.cores if len(allowed) > self.cores else None)


def yielded_s(lowered: Lowered | None) -> float:
    """How long a step's scratch work ran on fewer cores (0 for today's load), for its run-wide figures."""
    return round(lowered.yielded.yielded_s, 3) if lowered else 0.0


def paused_s(lowered: Lowered | None) -> float:
    """How long a step's scratch work stood paused for today's load (0 for today's load), for its run-wide
    figures."""
    return round(lowered.yielded.paused_s, 3) if lowered else 0.0
