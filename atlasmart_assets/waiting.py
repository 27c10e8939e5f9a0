"""How long this process has spent waiting rather than working: for the warehouse's lock, for another process's turn
with it, for today's load to end. A step's progress lines say it apart and leave it out of their estimates; it is
counted where the waiting happens, so no wait escapes it (a read's lock wait as much as a publish's)."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_total = [0.0]


def count(seconds: float) -> None:
    """`seconds` more spent waiting."""
    if seconds > 0:
        with _lock:
            _total[0] += seconds


def total() -> float:
    """Every wait counted in this process so far (a forked child starts from its parent's)."""
    return _total[0]
