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

from atlasmart_assets import waiting

T = TypeVar("T")
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*\Z")


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


class LockTimeout(duckdb.IOException):
    """The lock still held by another process after ATLASMART_LOCK_TIMEOUT_S: says how long it waited and for what,
    with DuckDB's own text (who holds it), which is_lock_conflict still recognises. A step's progress adds which
    run's days and phase it stopped (Progress.stopping)."""


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
    refused_at: float | None = None  # the first refusal: from then on the caller waits, not works
    try:
        while True:
            try:
                return action()
            except duckdb.Error as exc:
                refused_at = time.monotonic() if refused_at is None else refused_at
                if not is_lock_conflict(exc):
                    raise
                if time.monotonic() - started > timeout_s:
                    raise LockTimeout(
                        f"waited {time.monotonic() - started:.1f} s (ATLASMART_LOCK_TIMEOUT_S={timeout_s:g}) for the "
                        f"warehouse{f' {path}' if path is not None else ''}, and another process still holds it: "
                        f"{exc}. Nothing more was written; raise ATLASMART_LOCK_TIMEOUT_S, or end the process "
                        "holding it (an open DuckDB client, say), and run again") from None
                if marker is not None:
                    # Best effort (a read-only data dir has no announcements: such a waiter just polls).
                    with contextlib.suppress(OSError):
                        marker.parent.mkdir(exist_ok=True)
                        marker.touch()
                        announced = True
                time.sleep(delay)
                delay = min(delay * 1.5, POLL_MAX_S)
    finally:
        if refused_at is not None:
            waiting.count(time.monotonic() - refused_at)
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
    started = time.monotonic()
    deadline = started + HANDOVER_MAX_S
    while announced_waiters(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    waiting.count(time.monotonic() - started)


def connect(database: str = ":memory:", *, read_only: bool = False,
            config: dict[str, str] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection whose session time zone is UTC, whatever the host's: `now()` is stored in timestamp
    columns (the ledger's published_at, the flags' since, …) and read back as UTC (the notice says "UTC"; a review
    found it local time on a host outside UTC). ICU is built in, but loads only after the connection opens, so the
    zone is set then, not in `config`."""
    con = duckdb.connect(database, read_only=read_only, config=config or {})
    con.execute("set TimeZone = 'UTC'")
    return con


@contextlib.contextmanager
def open_file(path: Path, *, read_only: bool, config: dict[str, str], timeout_s: float,
              stats: LockStats | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to `path`, retried while another process holds it, up to `timeout_s`; closed on exit."""
    started = time.monotonic()
    con = waiting_on_lock(lambda: connect(str(path), read_only=read_only, config=config), timeout_s, path)
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


@contextlib.contextmanager
def attached_hold(con: duckdb.DuckDBPyConnection, path: Path, alias: str, timeout_s: float,
                  stats: LockStats | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Another process's database attached read-only to `con` for one short hold (a writer of `path` is kept out
    as by a read-only connection), then detached; the wait and the hold are recorded apart."""
    attach_waiting(con, path, alias, timeout_s, stats)
    held_from = time.monotonic()
    try:
        yield con
    except BaseException:
        # The hold's own error is the one to report; closing the connection releases the database anyway.
        with contextlib.suppress(duckdb.Error):
            con.execute(f"detach {alias}")
        raise
    else:
        con.execute(f"detach {alias}")
    finally:
        if stats is not None:
            stats.holds.append(time.monotonic() - held_from)


# How often a preemptible hold looks for announced waiters, and for today's load starting (a run storage read);
# how often one chunk's hold is given up at most to waiters, and to today's load starting.
PREEMPT_POLL_S = 0.05
PREEMPT_BUSY_POLL_S = 0.25
PREEMPT_MAX = 3
PREEMPT_START_MAX = 1
WAITER, STARTED = "a process waiting on the lock", "today's load, which started"


class GiveWay(Protocol):
    """A backfill's way of giving way to today's load. Called, it waits while a current-lane run is queued or
    running (bounded) and returns how long it waited; `busy(unreadable)` says whether one is now (`unreadable`
    when the run storage cannot be read)."""

    def __call__(self) -> float: ...

    def busy(self, unreadable: bool = False) -> bool: ...


class Preempted(Exception):
    """A hold given up for a process that announced it waits on the lock, or for today's load that started; its
    transaction was rolled back."""


class Preemption:
    """While active, interrupts `con`'s statements as soon as a process announces it waits on `path` (if
    `waiters`), or, given `started` (called every PREEMPT_BUSY_POLL_S in a thread of its own, so a slow run storage
    never delays the first), as soon as it says today's load started. Leaving it (before the commit) ends the
    watch, without waiting for a run storage read under way: a commit is never interrupted. If it fired, leaving
    raises Preempted, so the transaction rolls back even if the last statement had finished."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, waiters: bool = True,
                 started: Callable[[], bool] | None = None) -> None:
        self._con, self._path, self._waiters, self._started = con, path, waiters, started
        self._lock = threading.Lock()
        self._active = True
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.fired = False
        self.reason = ""

    def _fire(self, reason: str) -> bool:
        with self._lock:
            if not self._active:
                return False
            # Again at every poll once fired: DuckDB clears a pending interrupt when the next statement starts, so
            # one landing between two statements would be lost.
            self.reason = self.reason or reason
            self.fired = True
            self._con.interrupt()
            return True

    def _watch_waiters(self) -> None:
        while not self._stop.wait(PREEMPT_POLL_S):
            if (self.fired or (self._waiters and announced_waiters(self._path))) and not self._fire(WAITER):
                return

    def _watch_runs(self) -> None:
        assert self._started is not None
        while not self._stop.wait(PREEMPT_BUSY_POLL_S):
            if self._started():
                self._fire(STARTED)
                return  # the waiters' watch goes on interrupting

    def __enter__(self) -> Preemption:
        if self._waiters and announced_waiters(self._path):
            self.fired, self.reason = True, WAITER  # one already there (hand_over timed out on it, or it just came)
            raise Preempted(f"gave up the hold of {self._path} to {self.reason}")
        watches = [self._watch_waiters] + ([self._watch_runs] if self._started is not None else [])
        for watch in watches:
            thread = threading.Thread(target=watch, name="atlasmart-preemption", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        with self._lock:
            self._active = False
        self._stop.set()
        for thread in self._threads:
            # A run storage read under way may take long (SQLite waits on its own locks): once inactive, nothing
            # the thread does can touch the connection, so the hold does not wait for it.
            thread.join(timeout=2 * PREEMPT_POLL_S)
        if self.fired and exc_type is None:
            raise Preempted(f"gave up the hold of {self._path} to {self.reason}")
        return False


def preemptible_hold(open_hold: Callable[[], contextlib.AbstractContextManager[duckdb.DuckDBPyConnection]],
                     path: Path, body: Callable[[duckdb.DuckDBPyConnection], None],
                     stats: LockStats | None = None, give_way: GiveWay | None = None, *,
                     preemptible: bool = True) -> None:
    """One chunk of a long write: `body(con)` in one transaction on a hold from `open_hold()`. A backfill's
    (`preemptible`): if a process announces it waits on `path` while the body runs, or today's load starts (a
    current-lane run queued or started while none was when the attempt began: `give_way.busy()`), the statements
    are interrupted, the transaction rolls back, the backfill gives way (waits while today's load runs), the lock
    goes to the waiters (hand_over) and the chunk starts again: up to PREEMPT_MAX times for waiters and
    PREEMPT_START_MAX for today's load starting, each counted apart; then it is held to the end. Today's load
    neither waits on a backfill's chunk (but for a poll and a rollback) nor shares the cores with one. Not
    `preemptible` (today's load): held to the end."""
    if not preemptible:
        with open_hold() as con, transaction(con):
            body(con)
        return
    given_up = {WAITER: 0, STARTED: 0}
    while True:
        guard: Preemption | None = None
        started: Callable[[], bool] | None = None
        # Asked before the hold is taken (a slow run storage must not lengthen it); unreadable counts as running.
        if give_way is not None and given_up[STARTED] < PREEMPT_START_MAX and not give_way.busy(unreadable=True):
            started = give_way.busy
        try:
            with open_hold() as con:
                with transaction(con):
                    guard = Preemption(con, path, waiters=given_up[WAITER] < PREEMPT_MAX, started=started)
                    with guard:
                        body(con)
            return
        except Exception:
            # Once it fired, whatever the interrupted statement raised is the interruption; an error of the
            # chunk's own comes back on the next try, the last of which is never interrupted.
            if guard is None or not guard.fired:
                raise
        given_up[guard.reason] += 1
        if stats is not None:
            stats.preempted += 1
        if give_way is not None:
            waited = give_way()
            if stats is not None:
                stats.gave_way.append(waited)
        hand_over(path)
