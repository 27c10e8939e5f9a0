"""The one daily partitions definition, and which partition the current lane owns."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from atlasmart_assets import settings

def today() -> dt.date:
    """'Today' for the freeze window: ATLASMART_AS_OF when set, else the UTC clock."""
    return settings.load().as_of or dt.datetime.now(dt.timezone.utc).date()


def newest_partition() -> str:
    """The newest closed day: owned by the current lane, fenced against backfills."""
    return (today() - dt.timedelta(days=1)).isoformat()


def _definition() -> dg.DailyPartitionsDefinition:
    cfg = settings.load()
    as_of = cfg.as_of
    # With ATLASMART_AS_OF the partition set ends at that day (exclusive), so the UI offers only days
    # that the pinned "today" has closed.
    end = as_of.isoformat() if as_of else None
    return dg.DailyPartitionsDefinition(start_date=cfg.start_date.isoformat(), end_date=end)


daily_partitions = _definition()
