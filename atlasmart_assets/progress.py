"""Progress of a long step in the run's log: each phase with its counts, the time so far and an estimate of what
remains (from the phase's share of a typical run)."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator, Sequence

from atlasmart_assets.event_budget import cut_text


class Progress:
    def __init__(self, log: Callable[[str], None] | None, what: str, phases: Sequence[tuple[str, float]]) -> None:
        self._log = log
        self._what = what
        self._weights = dict(phases)
        self._typical = dict(phases)
        self._order = [name for name, _ in phases]
        self._finished: set[str] = set()
        self._started = time.monotonic()
        self._ended = False

    @property
    def _done(self) -> float:
        return sum(self._weights[name] for name in self._order if name in self._finished)

    def _line(self, phase: str, detail: str, share: float, estimate: bool = True) -> None:
        elapsed = time.monotonic() - self._started
        total = sum(self._weights.values())
        left = elapsed / share * (total - share) if share else None
        position = f"{self._order.index(phase) + 1}/{len(self._order)}" if phase in self._order else "-"
        if not estimate:
            tail = "ended"
        # Sums of the same shares in another order may differ in the last bit: that is done, not "0 s to go".
        elif left is None or share >= total - 1e-9:
            tail = "done"
        else:
            tail = f"about {left:.0f} s to go"
        if self._log is not None:
            self._log(f"{self._what} [{position}] {phase}: {detail}; {elapsed:.1f} s so far, {tail}")

    def done(self, phase: str, detail: str) -> None:
        """The phase finished."""
        self._finished.add(phase)
        self._line(phase, detail, self._done)

    def expect(self, phase: str, fraction: float) -> None:
        """Only `fraction` (0..1) of the phase's typical work lies ahead: the estimate shrinks its share to match
        (a re-publish appends no batch and writes no unchanged day, which a first load's shares assume it does)."""
        self._weights[phase] = self._typical.get(phase, 0.0) * min(max(fraction, 0.0), 1.0)

    def finished(self, *phases: str) -> None:
        """These phases finished, said elsewhere (by a copy of this object in the process that ran them): counted
        for what remains, not logged again."""
        self._finished.update(phases)

    def part(self, phase: str, fraction: float, detail: str) -> None:
        """`fraction` (0..1) of a long phase is behind it: a year's publish writes a dozen chunks over 20 s."""
        share = self._done + self._weights.get(phase, 0.0) * min(max(fraction, 0.0), 1.0)
        self._line(phase, detail, share)

    def end(self, phase: str, detail: str) -> None:
        """The step stops before its last phase (a refusal): no estimate of work that will not happen."""
        self._ended = True
        self._line(phase, detail, self._done, estimate=False)

    @property
    def current(self) -> str:
        """The phase under way: the first not finished (the last one once all are)."""
        return next((name for name in self._order if name not in self._finished), self._order[-1])

    @contextlib.contextmanager
    def stopping(self) -> Iterator[None]:
        """Around a step's work: an error or a termination ends its log with the phase it stopped in, by what,
        and `ended`, not with an estimate of work that will not happen."""
        try:
            yield
        except GeneratorExit:
            raise  # a generator closed early stopped for no reason worth a line
        except BaseException as exc:
            if not self._ended:
                with contextlib.suppress(Exception):  # the error that stopped the step is the one to raise
                    self.end(self.current, f"stopped by {type(exc).__name__}: {cut_text(str(exc), 300)}")
            raise
