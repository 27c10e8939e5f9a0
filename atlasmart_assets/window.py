"""An inclusive range of daily partitions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Mapping, Sequence

from atlasmart_assets.contract import shown_id


@dataclass(frozen=True)
class Window:
    """An inclusive range of daily partitions."""

    start: dt.date
    end: dt.date

    @classmethod
    def of(cls, start: str, end: str | None = None) -> "Window":
        try:
            window = cls(dt.date.fromisoformat(start), dt.date.fromisoformat(end or start))
        except (TypeError, ValueError):
            # Cut, and without Python's own error chained (it quotes the text whole): a config's 20,000-character
            # start made a refused run's failure event 490 KB.
            shown = shown_id(repr(start)) + (f"..{shown_id(repr(end))}" if end is not None else "")
            raise ValueError(f"window {shown}: partitions are YYYY-MM-DD dates") from None
        if window.end < window.start:
            raise ValueError(f"window {start}..{end} ends before it starts (did you swap --from and --to?)")
        return window

    @property
    def keys(self) -> list[str]:
        return [(self.start + dt.timedelta(days=k)).isoformat() for k in range((self.end - self.start).days + 1)]

    def split(self, days: int, lines: Mapping[str, int] | None = None, most_lines: int | None = None) -> list["Window"]:
        """Consecutive windows covering this one, in order, each of at most `days` days and, given each day's
        `lines`, of at most `most_lines` lines (a day over that alone)."""
        return [Window.of(part[0], part[-1]) for part in chunks(self.keys, days, lines, most_lines)]

    @property
    def params(self) -> dict[str, dt.date]:
        return {"start": self.start, "end": self.end}

    def __str__(self) -> str:
        return self.start.isoformat() if self.start == self.end else f"{self.start}..{self.end}"


def chunks(days: Sequence[str], most_days: int, lines: Mapping[str, int] | None = None,
           most_lines: int | None = None) -> list[list[str]]:
    """`days` (in order) cut into consecutive runs of at most `most_days` days and, given each day's `lines` (a day
    not in it has none), of at most `most_lines` lines, where a day over that is a run of its own. A hold's work
    grows with its lines, not its days: a month of heavy days is cut where a month of the bench's is not."""
    out: list[list[str]] = []
    weight = 0
    for day in days:
        own = (lines or {}).get(day, 0)
        if not out or len(out[-1]) >= most_days or (most_lines is not None and weight + own > most_lines):
            out.append([])
            weight = 0
        out[-1].append(day)
        weight += own
    return out
