"""Lanes on one run queue: the fence on the newest partition, the current lane's tags and its daily schedule."""

from __future__ import annotations

from typing import Mapping

import dagster as dg

from atlasmart_assets import partitions
from atlasmart_assets.window import BACKFILL_TAG, FENCE_OVERRIDE_TAG, LANE_TAG, Window

CURRENT_LANE_TAGS = {LANE_TAG: "current", "dagster/priority": "10"}


class FenceRefusal(dg.Failure):
    """A backfill reached into the partition the current lane owns."""


def fence(window: Window, tags: Mapping[str, str]) -> None:
    """Refuse, before anything is written, a backfill whose window includes the newest partition."""
    if BACKFILL_TAG not in tags:
        return
    newest = partitions.newest_partition()
    if newest not in window.keys:
        return
    if tags.get(FENCE_OVERRIDE_TAG, "").strip():
        return
    raise FenceRefusal(
        description=(
            f"Refused: backfill {tags[BACKFILL_TAG]} over {window} includes {newest}, the newest partition, which "
            f"the current lane (daily schedule) owns. Nothing was written. Backfill up to the day before {newest}, "
            f"or, deliberately, relaunch with the tag {FENCE_OVERRIDE_TAG}=<reason> (recorded in the ledger)."
        ),
        metadata={"refused_partitions": [newest], "window": str(window)},
    )

