"""The partition window a run owns, and who asked for it (from the run's tags)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Mapping

import dagster as dg

BACKFILL_TAG = "dagster/backfill"
REASON_TAG = "atlasmart/reason"
FENCE_OVERRIDE_TAG = "atlasmart/fence_override"
LANE_TAG = "atlasmart/lane"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


@dataclass(frozen=True)
class Window:
    """An inclusive range of daily partitions."""

    start: dt.date
    end: dt.date

    @classmethod
    def of(cls, start: str, end: str | None = None) -> "Window":
        window = cls(dt.date.fromisoformat(start), dt.date.fromisoformat(end or start))
        if window.end < window.start:
            raise ValueError(f"window {start}..{end} ends before it starts")
        return window

    @property
    def keys(self) -> list[str]:
        return [(self.start + dt.timedelta(days=k)).isoformat() for k in range((self.end - self.start).days + 1)]

    @property
    def params(self) -> dict[str, dt.date]:
        return {"start": self.start, "end": self.end}

    def __str__(self) -> str:
        return self.start.isoformat() if self.start == self.end else f"{self.start}..{self.end}"


@dataclass(frozen=True)
class RunInfo:
    """Identity of the run publishing: recorded in the ledger with every change it makes."""

    run_id: str
    backfill_id: str | None = None
    reason: str | None = None
    fence_override: str | None = None

    @classmethod
    def from_tags(cls, run_id: str, tags: Mapping[str, str]) -> "RunInfo":
        return cls(run_id, tags.get(BACKFILL_TAG), tags.get(REASON_TAG), tags.get(FENCE_OVERRIDE_TAG))


def window_of(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> Window:
    """The run's window; works for one partition and for a ranged (single-run backfill) run."""
    keys = context.partition_keys if isinstance(context, dg.AssetExecutionContext) else None
    if keys is None:
        r = context.partition_key_range
        return Window.of(r.start, r.end)
    return Window.of(min(keys), max(keys))


def run_info(context: dg.AssetExecutionContext) -> RunInfo:
    return RunInfo.from_tags(context.run.run_id, context.run.tags)
