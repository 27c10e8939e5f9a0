"""Progress of a long step in the run's log: each phase with its counts, the time so far and an estimate of what
remains (from the phase's share of a typical run)."""

from __future__ import annotations

import time
from typing import Callable, Sequence


class Progress:
    def __init__(self, log: Callable[[str], None] | None, what: str, phases: Sequence[tuple[str, float]]) -> None:
        self._log = log
        self._what = what
        self._weights = dict(phases)
        self._order = [name for name, _ in phases]
        self._done = 0.0
        self._started = time.monotonic()

    def done(self, phase: str, detail: str) -> None:
        self._done += self._weights.get(phase, 0.0)
        elapsed = time.monotonic() - self._started
        total = sum(self._weights.values())
        left = elapsed / self._done * (total - self._done) if self._done else None
        position = f"{self._order.index(phase) + 1}/{len(self._order)}" if phase in self._order else "-"
        estimate = "done" if left is None or self._done >= total else f"about {left:.0f} s to go"
        if self._log is not None:
            self._log(f"{self._what} [{position}] {phase}: {detail}; {elapsed:.1f} s so far, {estimate}")
