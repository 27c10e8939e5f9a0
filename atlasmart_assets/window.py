"""An inclusive range of daily partitions."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """An inclusive range of daily partitions."""

    start: dt.date
    end: dt.date

    @classmethod
    def of(cls, start: str, end: str | None = None) -> "Window":
        try:
            window = cls(dt.date.fromisoformat(start), dt.date.fromisoformat(end or start))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"window {start!r}..{end!r}: partitions are YYYY-MM-DD dates") from exc
        if window.end < window.start:
            raise ValueError(f"window {start}..{end} ends before it starts (did you swap --from and --to?)")
        return window

    @property
    def keys(self) -> list[str]:
        return [(self.start + dt.timedelta(days=k)).isoformat() for k in range((self.end - self.start).days + 1)]

    def split(self, days: int) -> list["Window"]:
        """Consecutive windows of at most `days` days covering this one, in order."""
        step = dt.timedelta(days=days)
        out, start = [], self.start
        while start <= self.end:
            out.append(Window(start, min(start + step - dt.timedelta(days=1), self.end)))
            start += step
        return out

    @property
    def params(self) -> dict[str, dt.date]:
        return {"start": self.start, "end": self.end}

    def __str__(self) -> str:
        return self.start.isoformat() if self.start == self.end else f"{self.start}..{self.end}"
