"""Short DuckDB connections that wait (never fail) while another process holds the file, and how long they held it."""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import duckdb

T = TypeVar("T")
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass
class LockStats:
    """How long one step waited for and held the warehouse lock (the evidence for lane isolation)."""

    waits: list[float] = field(default_factory=list)
    holds: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        return {
            "lock_acquisitions": len(self.holds),
            "lock_wait_max_s": round(max(self.waits, default=0.0), 3),
            "lock_hold_max_s": round(max(self.holds, default=0.0), 3),
            "lock_hold_total_s": round(sum(self.holds), 3),
        }


def is_lock_conflict(exc: BaseException) -> bool:
    """DuckDB's answer when another process holds the file: an IOException naming the conflicting lock."""
    return isinstance(exc, duckdb.IOException) and "Could not set lock on file" in str(exc)


# A process waiting on the lock tries again at least this often.
POLL_MAX_S = 0.25
# A writer taking the lock again right after releasing it (raw chunks, history copy then commit) pauses this long
# first, so a run waiting on the lock gets its turn in between instead of waiting through both holds.
HANDOVER_S = 0.3


def waiting_on_lock(action: Callable[[], T], timeout_s: float) -> T:
    """`action()`, retried with backoff while another process holds the file, up to `timeout_s`."""
    started = time.monotonic()
    delay = 0.05
    while True:
        try:
            return action()
        except duckdb.Error as exc:
            if not is_lock_conflict(exc) or time.monotonic() - started > timeout_s:
                raise
            time.sleep(delay)
            delay = min(delay * 1.5, POLL_MAX_S)


def hand_over() -> None:
    """Between two holds of the same writer: let a waiting process take the lock first."""
    time.sleep(HANDOVER_S)


@contextlib.contextmanager
def open_file(path: Path, *, read_only: bool, config: dict[str, str], timeout_s: float,
              stats: LockStats | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection to `path`, retried while another process holds it, up to `timeout_s`; closed on exit."""
    started = time.monotonic()
    con = waiting_on_lock(lambda: duckdb.connect(str(path), read_only=read_only, config=config), timeout_s)
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
    waiting_on_lock(lambda: attach(con, path, alias, read_only=True), timeout_s)
    if stats is not None:
        stats.waits.append(time.monotonic() - started)
