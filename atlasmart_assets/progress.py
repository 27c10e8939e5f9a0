"""Progress of a long step in the run's log: each phase with its counts, the time so far and an estimate of what
remains (from the phase's share of a typical run, and the time spent working on it: waits for the warehouse or
for today's load are said apart and not extrapolated)."""

from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from atlasmart_assets import waiting
from atlasmart_assets.event_budget import cut_text
from atlasmart_assets.warehouse.connection import LockTimeout

# A line is an event in the run's log: what a phase says (it may name a file, a batch, an error) is cut to this
# many bytes as Dagster writes them, and the header (the window) to HEADER_MAX_BYTES.
DETAIL_MAX_BYTES = 1000
HEADER_MAX_BYTES = 200
# Waits shorter than this are not worth a mention.
WAIT_SHOWN_S = 0.05


# The size a step's costs are read at until it knows its own (Progress.size): the bench's year.
TYPICAL_DAYS, TYPICAL_LINES = 365, 7_300_000


@dataclass(frozen=True)
class Cost:
    """A phase's typical seconds (fitted to first loads of 365 days x 10, 2,000 and 20,000 lines and 60 days x
    20,000): fixed, per day of the window, per million lines. Only their ratios matter. Against fixed shares (those
    of the bench's year), a year of light days read "about 1 s to go" with 5 s ahead: a step's events and each
    chunk's hold cost by the day, its parse and build by the line."""

    fixed: float
    per_day: float = 0.0
    per_million_lines: float = 0.0

    def at(self, days: int, lines: int) -> float:
        return self.fixed + self.per_day * max(days, 0) + self.per_million_lines * max(lines, 0) / 1e6


def printable(text: str) -> str:
    """`text` on one line: a newline, a tab or any other character that is not printable shown as its escape
    (\\n, \\u2028), so that a file or batch name cannot start a line of its own that reads like progress."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


# What Dagster raises in a step whose run is terminated from the UI or whose process gets SIGINT (Ctrl-C) or
# SIGTERM, and what Python raises for a Ctrl-C outside Dagster's handling: the operator stopped it, no error did.
INTERRUPTIONS = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")


def stopped_by(exc: BaseException) -> str:
    if type(exc).__name__ in INTERRUPTIONS:
        return "stopped: the run was interrupted (terminated, Ctrl-C or SIGTERM)"
    message = cut_text(str(exc), 300)
    return f"stopped by {type(exc).__name__}" + (f": {message}" if message.strip() else "")


# Collections under way (gc.callbacks): a step's generator that a reference cycle kept alive is closed by the
# collector, at whatever point it runs, possibly inside the event storage's own lock (Dagster's in-memory storage
# holds a plain Lock across each query); a line logged from there deadlocked a test run.
_COLLECTING = [0]


def _on_collect(phase: str, _info: dict) -> None:
    _COLLECTING[0] += 1 if phase == "start" else -1


gc.callbacks.append(_on_collect)


class Progress:
    def __init__(self, log: Callable[[str], None] | None, what: str,
                 phases: Sequence[tuple[str, float | Cost]]) -> None:
        """`phases`: each phase's share of the step, or its Cost (read at the bench's year until `size` says the
        step's own size)."""
        self._log = log
        self._what = cut_text(printable(what), HEADER_MAX_BYTES)
        self._waits: list[Callable[[], float]] = []
        self._costs = {name: cost for name, cost in phases if isinstance(cost, Cost)}
        self._typical = {name: cost.at(TYPICAL_DAYS, TYPICAL_LINES) if isinstance(cost, Cost) else float(cost)
                         for name, cost in phases}
        self._fractions: dict[str, float] = {}
        self._size = (TYPICAL_DAYS, TYPICAL_LINES)
        self._order = [name for name, _ in phases]
        self._finished: set[str] = set()
        self._started = time.monotonic()
        self._waited_before = waiting.total()
        self._ended = False

    @property
    def _weights(self) -> dict[str, float]:
        return {name: share * self._fractions.get(name, 1.0) for name, share in self._typical.items()}

    @property
    def _done(self) -> float:
        return sum(self._weights[name] for name in self._order if name in self._finished)

    def watch(self, waited: Callable[[], float]) -> None:
        """`waited()`: more seconds the step has spent waiting so far, beyond the process's own waits counted in
        `waiting` (the lock, today's load): its scratch work paused beside today's load, say."""
        self._waits.append(waited)

    def _waited(self) -> float:
        """Waiting is said apart in each line and left out of the estimate, which would otherwise extrapolate a wait
        as work (a one-day run that waited 6 s for the lock read "about 69 s to go")."""
        total = waiting.total() - self._waited_before
        for waited in self._waits:
            with contextlib.suppress(Exception):  # a figure for the log never fails the step
                total += max(float(waited()), 0.0)
        return total

    def _line(self, phase: str, detail: str, share: float, estimate: bool = True) -> None:
        elapsed = time.monotonic() - self._started
        waited = min(self._waited(), elapsed)
        total = sum(self._weights.values())
        position = f"{self._order.index(phase) + 1}/{len(self._order)}" if phase in self._order else "-"
        if not estimate:
            tail = "ended"
        # Sums of the same shares in another order may differ in the last bit: that is done, not "0 s to go".
        elif share >= total - 1e-9:
            tail = "done"
        elif not share > 0:  # nothing behind it yet (or a share that is not a number): nothing to extrapolate
            tail = "no estimate yet"
        else:
            tail = f"about {(elapsed - waited) / share * (total - share):.0f} s to go"
        waits = f"of which {waited:.1f} s waiting, " if waited >= WAIT_SHOWN_S else ""
        if self._log is not None:
            self._log(f"{self._what} [{position}] {phase}: {cut_text(printable(detail), DETAIL_MAX_BYTES)}; "
                      f"{elapsed:.1f} s so far, {waits}{tail}")

    def done(self, phase: str, detail: str) -> None:
        """The phase finished."""
        self._finished.add(phase)
        self._line(phase, detail, self._done)

    def size(self, days: int, lines: int) -> None:
        """The step's own size: the phases given a Cost weigh what they cost at it."""
        self._size = (days, lines)
        for name, cost in self._costs.items():
            self._typical[name] = cost.at(days, lines)

    def reprice(self, phase: str, cost: Cost) -> None:
        """The phase costs `cost` in this step (a correction's read, which copies raw evidence only in some runs);
        a phase this step does not have stays out of it."""
        if phase not in self._typical:
            return
        self._costs[phase] = cost
        self._typical[phase] = cost.at(*self._size)

    def expect(self, phase: str, fraction: float) -> None:
        """Only `fraction` (0..1) of the phase's typical work lies ahead: the estimate shrinks its share to match
        (a re-publish appends no batch and writes no unchanged day, which a first load's shares assume it does)."""
        self._fractions[phase] = min(max(fraction, 0.0), 1.0)

    def finished(self, *phases: str) -> None:
        """These phases finished, said elsewhere (by a copy of this object in the process that ran them): counted
        for what remains, not logged again."""
        self._finished.update(phases)

    def part(self, phase: str, fraction: float, detail: str) -> None:
        """`fraction` (0..1) of a long phase is behind it: a year's publish writes a dozen chunks over 20 s."""
        share = self._done + self._weights.get(phase, 0.0) * min(max(fraction, 0.0), 1.0)
        self._line(phase, detail, share)

    def writing_events(self, what: str) -> None:
        """Said before a step's events are handed to Dagster: Dagster writes them between the steps of the step's
        generator and raises a termination there, outside the step's code, so a run stopped then ends its log with
        this line (then Dagster's step failure), never with `done`."""
        self.part("events", 0.0, f"writing {what}")

    def end(self, phase: str, detail: str) -> None:
        """The step stops before its last phase (a refusal): no estimate of work that will not happen."""
        self._ended = True
        self._line(phase, detail, self._done, estimate=False)

    @property
    def complete(self) -> bool:
        return all(name in self._finished for name in self._order)

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
            # Dagster writes a step's events outside its code and raises a termination there, before it steps the
            # generator again; the generator is then closed (what is being handled then need not be why). Closed by
            # the garbage collector instead, it says nothing: the log's last line stays the one said before.
            if not self._ended and not self.complete and not _COLLECTING[0]:
                with contextlib.suppress(Exception):
                    self.end(self.current, "stopped: Dagster closed the step before this phase ended (the run was "
                                           "terminated, or the step failed outside its code)")
            raise
        except BaseException as exc:
            if isinstance(exc, LockTimeout):  # DuckDB's text names a file and a PID, not the run's days
                exc.add_note(f"in {self._what}, phase {self.current}")
            if not self._ended:
                with contextlib.suppress(Exception):  # the error that stopped the step is the one to raise
                    self.end(self.current, stopped_by(exc))
            raise
