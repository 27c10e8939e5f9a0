"""A long writer hands the warehouse lock to every process that announced it waits, and only to them: with
nobody waiting it goes on at once, and a dead waiter's announcement is ignored.

DuckDB's file lock is per process, so the waiter is a real second process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from atlasmart_assets.warehouse.connection import (
    ANNOUNCEMENT_FRESH_S,
    HANDOVER_MAX_S,
    announced_waiters,
    hand_over,
    is_lock_conflict,
    open_file,
    waiters_dir,
)

WAITER = """
import sys, time
from pathlib import Path
from atlasmart_assets.warehouse.connection import open_file
with open_file(Path(sys.argv[1]), read_only=True, config={}, timeout_s=120) as con:
    con.execute("select 1").fetchall()
    time.sleep(float(sys.argv[2]))
"""


def _wait_for(what: str, predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    path = tmp_path / "warehouse.duckdb"
    duckdb.connect(str(path)).close()
    return path


def test_a_waiting_process_gets_the_lock_between_two_holds(warehouse: Path) -> None:
    holding_s = 5.0
    with open_file(warehouse, read_only=False, config={}, timeout_s=10) as con:
        con.execute("create table t as select 1 as x")
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, str(warehouse), str(holding_s)])
        try:
            _wait_for("the waiter's announcement", lambda: announced_waiters(warehouse))
            [marker] = announced_waiters(warehouse)
            assert marker.name.startswith(f"{waiter.pid}-"), marker
        except BaseException:
            waiter.kill()
            raise
    try:
        hand_over(warehouse)
        # The waiter had its turn before the writer went on: it holds the file now.
        with pytest.raises(duckdb.Error) as err:
            duckdb.connect(str(warehouse)).close()
        assert is_lock_conflict(err.value), err.value
        assert not announced_waiters(warehouse), "the waiter withdrew its announcement once it got the lock"
    finally:
        assert waiter.wait(timeout=120) == 0


def test_with_nobody_waiting_the_writer_goes_on_at_once(warehouse: Path) -> None:
    started = time.monotonic()
    hand_over(warehouse)
    assert time.monotonic() - started < HANDOVER_MAX_S / 5, "no waiter, no pause"


def test_a_dead_waiters_announcement_is_ignored(warehouse: Path) -> None:
    waiters_dir(warehouse).mkdir()
    stale = waiters_dir(warehouse) / "999999-1"
    stale.touch()
    old = time.time() - 10 * ANNOUNCEMENT_FRESH_S
    os.utime(stale, (old, old))
    assert announced_waiters(warehouse) == []
    started = time.monotonic()
    hand_over(warehouse)
    assert time.monotonic() - started < HANDOVER_MAX_S / 5
