"""Short DuckDB connections that wait (never fail) while another process holds the file, and how long they held it."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol, TypeVar

import duckdb

T = TypeVar("T")
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass
class LockStats:
    """How long one step waited for and held the warehouse lock (the evidence for lane isolation)."""

    waits: list[float] = field(default_factory=list)
    holds: list[float] = field(default_factory=list)
    gave_way: list[float] = field(default_factory=list)
    preempted: int = 0

    def figures(self) -> dict[str, float]:
        return {
            "lock_acquisitions": len(self.holds),
            "lock_wait_max_s": round(max(self.waits, default=0.0), 3),
            "lock_hold_max_s": round(max(self.holds, default=0.0), 3),
            "lock_hold_total_s": round(sum(self.holds), 3),
            "gave_way_total_s": round(sum(self.gave_way), 3),
            "holds_given_up": self.preempted,
        }


def is_lock_conflict(exc: BaseException) -> bool:
    """DuckDB's answer when another process holds the file: an IOException naming the conflicting lock."""
    return isinstance(exc, duckdb.IOException) and "Could not set lock on file" in str(exc)


# A process waiting on the lock tries again at least this often.
POLL_MAX_S = 0.25
# A writer about to take the lock again (the next chunk of a long write) first lets the processes that announced
# they wait on it go: up to this long, and not at all when nobody waits.
HANDOVER_MAX_S = 5.0
# A waiter refreshes its announcement at every retry; an older one is a waiter that died (killed while waiting).
ANNOUNCEMENT_FRESH_S = 2.0
ANNOUNCEMENT_GONE_S = 60.0


def waiters_dir(path: Path) -> Path:
    """Where processes waiting on the lock of `path` announce themselves (one empty file each)."""
    return path.with_name(path.name + ".waiting")


def waiting_on_lock(action: Callable[[], T], timeout_s: float, path: Path | None = None) -> T:
    """`action()`, retried with backoff while another process holds the file, up to `timeout_s`. While it waits
    it announces itself next to `path`, so a long writer hands the lock over at its next chunk boundary."""
    started = time.monotonic()
    delay = 0.05
    marker = waiters_dir(path) / f"{os.getpid()}-{threading.get_ident()}" if path is not None else None
    announced = False
    try:
        while True:
            try:
                return action()
            except duckdb.Error as exc:
                if not is_lock_conflict(exc) or time.monotonic() - started > timeout_s:
                    raise
                if marker is not None:
                    # Best effort (a read-only data dir has no announcements: such a waiter just polls).
                    with contextlib.suppress(OSError):
                        marker.parent.mkdir(exist_ok=True)
                        marker.touch()
                        announced = True
                time.sleep(delay)
                delay = min(delay * 1.5, POLL_MAX_S)
    finally:
        if announced:
            with contextlib.suppress(OSError):
                marker.unlink(missing_ok=True)


def announced_waiters(path: Path) -> list[Path]:
    """The live announcements of processes waiting on the lock of `path`."""
    try:
        entries = list(waiters_dir(path).iterdir())
    except OSError:
        return []
    now = time.time()
    live = []
    for entry in entries:
        with contextlib.suppress(OSError):
            age = now - entry.stat().st_mtime
            if age <= ANNOUNCEMENT_FRESH_S:
                live.append(entry)
            elif age > ANNOUNCEMENT_GONE_S:
                entry.unlink()  # a waiter killed while it waited leaves its announcement behind
    return live


def hand_over(path: Path) -> None:
    """Between two holds of the same writer: every process that announced it waits on `path` takes its turn first
    (up to HANDOVER_MAX_S); with nobody waiting, the writer goes on at once."""
    deadline = time.monotonic() + HANDOVER_MAX_S
    while announced_waiters(path) and time.monotonic() < deadline:
        time.sleep(0.02)


@contextlib.contextmanager
def open_file(path: Path, *, read_only: bool, config: dict[str, str], timeout_s: float,
              stats: LockStats | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to `path`, retried while another process holds it, up to `timeout_s`; closed on exit."""
    started = time.monotonic()
    con = waiting_on_lock(lambda: duckdb.connect(str(path), read_only=read_only, config=config), timeout_s, path)
    acquired = time.monotonic()
    if stats is not None:
        stats.waits.append(acquired - started)
    try:
        yield con
    finally:
        con.close()
        if stats is not None:
            stats.holds.append(time.monotonic() - acquired)


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    con.execute("begin transaction")
    try:
        yield con
    except BaseException:
        con.execute("rollback")
        raise
    con.execute("commit")


def attach(con: duckdb.DuckDBPyConnection, path: Path, alias: str, read_only: bool = False) -> None:
    """ATTACH takes no bound parameters: the path is quoted as a string literal, the alias must be an identifier."""
    if not IDENTIFIER.match(alias):
        raise ValueError(f"not an identifier: {alias!r}")
    literal = "'" + str(path).replace("'", "''") + "'"
    con.execute(f"attach {literal} as {alias} (read_only {'true' if read_only else 'false'})")


def quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def attach_waiting(con: duckdb.DuckDBPyConnection, path: Path, alias: str, timeout_s: float,
                   stats: LockStats | None = None) -> None:
    """Attach another process's database read-only, waiting while a writer holds it (as open_file does)."""
    started = time.monotonic()
    waiting_on_lock(lambda: attach(con, path, alias, read_only=True), timeout_s, path)
    if stats is not None:
        stats.waits.append(time.monotonic() - started)


# How often a preemptible hold looks for announced waiters, and for today's load starting (a run storage read);
# how often one chunk's hold is given up at most.
PREEMPT_POLL_S = 0.05
PREEMPT_BUSY_POLL_S = 0.25
PREEMPT_MAX = 3


class GiveWay(Protocol):
    """A backfill's way of giving way to today's load. Called, it waits while a current-lane run is queued or
    running (bounded) and returns how long it waited; `busy()` says whether one is now."""

    def __call__(self) -> float: ...

    def busy(self) -> bool: ...


class Preempted(Exception):
    """A hold given up for a process that announced it waits on the lock, or for today's load that started; its
    transaction was rolled back."""


class Preemption:
    """While active, interrupts `con`'s statements as soon as a process announces it waits on `path`, or, given
    `busy`, as soon as today's load starts (`busy()` turns true; one already running when the hold began does not
    count: the hold waited for it as long as it may). Leaving it (before the commit) ends the watch: a commit is
    never interrupted. If it fired, leaving raises Preempted, so the transaction rolls back even if the last
    statement had finished."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, enabled: bool = True,
                 busy: Callable[[], bool] | None = None) -> None:
        self._con, self._path, self._enabled, self._busy = con, path, enabled, busy
        self._lock = threading.Lock()
        self._active = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._was_busy = True
        self.fired = False
        self.reason = ""

    def _should_fire(self, polls: int) -> bool:
        if announced_waiters(self._path):
            self.reason = "a process waiting on the lock"
            return True
        every = max(1, round(PREEMPT_BUSY_POLL_S / PREEMPT_POLL_S))
        if not self._was_busy and self._busy is not None and polls % every == 0 and self._busy():
            self.reason = "today's load, which started"
            return True
        return False

    def _watch(self) -> None:
        polls = 0
        while not self._stop.wait(PREEMPT_POLL_S):
            polls += 1
            if self.fired or self._should_fire(polls):
                with self._lock:
                    if not self._active:
                        return
                    # Again at every poll once fired: DuckDB clears a pending interrupt when the next statement
                    # starts, so one landing between two statements would be lost.
                    self.fired = True
                    self._con.interrupt()

    def __enter__(self) -> Preemption:
        if self._enabled and announced_waiters(self._path):
            self.fired = True  # a waiter already there (hand_over timed out on it, or it just came): it goes first
            self.reason = "a process waiting on the lock"
            raise Preempted(f"gave up the hold of {self._path} to {self.reason}")
        if self._enabled:
            self._was_busy = self._busy is None or self._busy()
            self._thread = threading.Thread(target=self._watch, name="atlasmart-preemption", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        with self._lock:
            self._active = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.fired and exc_type is None:
            raise Preempted(f"gave up the hold of {self._path} to {self.reason}")
        return False


def preemptible_hold(open_hold: Callable[[], contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]],
                     path: Path, body: Callable[[duckdb.DuckDBPyConnection], None],
                     stats: LockStats | None = None, give_way: GiveWay | None = None, *,
                     preemptible: bool = True) -> None:
    """One chunk of a long write: `body(con)` in one transaction on a hold from `open_hold()`. A backfill's
    (`preemptible`): if a process announces it waits on `path` while the body runs, or today's load starts
    (`give_way.busy()`), the statements are interrupted, the transaction rolls back, the backfill gives way (waits
    while today's load runs), the lock goes to the waiters (hand_over) and the chunk starts again, up to PREEMPT_MAX
    times; then it is held to the end. Today's load neither waits on a backfill's chunk (but for a poll and a
    rollback) nor shares the cores with one. Not `preemptible` (today's load): held to the end."""
    if not preemptible:
        with open_hold() as con, transaction(con):
            body(con)
        return
    for attempt in range(PREEMPT_MAX + 1):
        guard: Preemption | None = None
        try:
            with open_hold() as con:
                with transaction(con):
                    guard = Preemption(con, path, enabled=attempt < PREEMPT_MAX,
                                       busy=give_way.busy if give_way is not None else None)
                    with guard:
                        body(con)
            return
        except Exception:
            # Once it fired, whatever the interrupted statement raised is the interruption; an error of the
            # chunk's own comes back on the next try, the last of which is never interrupted.
            if guard is None or not guard.fired:
                raise
        if stats is not None:
            stats.preempted += 1
        if give_way is not None:
            waited = give_way()
            if stats is not None:
                stats.gave_way.append(waited)
        hand_over(path)
