"""One run's scope, computed in one place: its window, who asked and why, its lane, and the fence's decision.

Assets, checks, sensors, the plan and the lab all ask this module; nothing else reads the run's tags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import dagster as dg

from atlasmart_assets import partitions
from atlasmart_assets.contract import (
    ACCEPT_SHRINK_TAG,
    BACKFILL_TAG,
    CURRENT_LANE,
    FENCE_OVERRIDE_TAG,
    KIND_TAG,
    LANE_TAG,
    LAUNCHED_FROM_TAG,
    PARTITION_TAG,
    RANGE_END_TAG,
    REDERIVE_TAG,
    RANGE_START_TAG,
    REASON_MAX_CHARS,
    REASON_TAG,
    USER_TAGS,
    shown_id,
)
from atlasmart_assets.window import Window


class FenceRefusal(dg.Failure):
    """A run reached into the partition the current lane owns."""


class TagRefusal(dg.Failure):
    """A run whose reason or another tag value is too long to record."""


def tag_refusal(run: RunInfo) -> str | None:
    """Why a run's reason, override, who asked or own tags cannot be recorded (too long), or None."""
    given = [(REASON_TAG, run.reason), (FENCE_OVERRIDE_TAG, run.fence_override),
             (ACCEPT_SHRINK_TAG, run.accept_shrink), (REDERIVE_TAG, run.rederive), ("user", run.requested_by),
             *run.tags]
    long = [(tag, len(value)) for tag, value in given if value and len(value) > REASON_MAX_CHARS]
    if not long:
        return None
    tag, n = long[0]
    return (f"Refused: the tag {shown_id(tag)} is {n:,} characters, past the {REASON_MAX_CHARS:,} a run's reason or "
            "tag may have (each goes into every day's ledger row, the change notice, the Slack message and the run's "
            "events). Nothing was written. Say why in short and point to the rest (an incident link, say).")


@dataclass(frozen=True)
class RunInfo:
    """Identity of the run publishing: recorded in the ledger with every change it makes."""

    run_id: str
    backfill_id: str | None = None
    reason: str | None = None
    fence_override: str | None = None
    accept_shrink: str | None = None
    requested_by: str | None = None
    # The operator's own tags (Dagster's `dagster/...` and the named ones above left out), for the change notice.
    tags: tuple[tuple[str, str], ...] = ()
    # Set (to why): every day of the window is built again, even one whose evidence, dimension, deletion requests
    # and code are those its current version was built from.
    rederive: str | None = None

    @classmethod
    def from_tags(cls, run_id: str, tags: Mapping[str, str]) -> "RunInfo":
        def text(key: str) -> str | None:
            value = (tags.get(key) or "").strip()
            return value or None

        # atlasmart/rederive stays among the operator's own tags: the change notice lists it with its reason.
        named = {BACKFILL_TAG, REASON_TAG, FENCE_OVERRIDE_TAG, ACCEPT_SHRINK_TAG, LANE_TAG, KIND_TAG, LAUNCHED_FROM_TAG,
                 *USER_TAGS}
        own = tuple(sorted((k, v) for k, v in tags.items()
                           if k not in named and not k.startswith(("dagster/", ".dagster/"))))
        return cls(run_id, text(BACKFILL_TAG), text(REASON_TAG), text(FENCE_OVERRIDE_TAG), text(ACCEPT_SHRINK_TAG),
                   next((text(k) for k in USER_TAGS if text(k)), None), own, text(REDERIVE_TAG))


def window_from_tags(tags: Mapping[str, str]) -> Window | None:
    """The partition or range a run targets, from the tags Dagster puts on it (None when it names none)."""
    if tags.get(RANGE_START_TAG) and tags.get(RANGE_END_TAG):
        return Window.of(tags[RANGE_START_TAG], tags[RANGE_END_TAG])
    if tags.get(PARTITION_TAG):
        return Window.of(tags[PARTITION_TAG])
    return None


def lane_of(tags: Mapping[str, str]) -> str:
    # A backfill run is in the backfill lane whatever else it carries (dagster.yaml limits dagster/backfill).
    if BACKFILL_TAG in tags:
        return "backfill"
    return CURRENT_LANE if tags.get(LANE_TAG) == CURRENT_LANE else "other"


def fence_refusal(window: Window, backfill_id: str | None, override: str | None, newest: str) -> str | None:
    """Why the fence refuses this window, or None. A backfill may not touch the newest partition, and no run may
    reach it from an earlier day (that is a backfill by another name), unless an override reason is given."""
    if newest not in window.keys or (override or "").strip():
        return None
    if backfill_id is None and window.start.isoformat() == newest:
        return None
    what = f"backfill {shown_id(backfill_id)}" if backfill_id is not None else "ranged run"
    return (f"Refused: {what} over {window} includes {newest}, the newest partition, which the current lane "
            f"(daily schedule) owns. Nothing was written. Backfill up to the day before {newest}, or, deliberately, "
            f"relaunch with the tag {FENCE_OVERRIDE_TAG}=<reason> (recorded in the ledger).")


@dataclass(frozen=True)
class RunScope:
    window: Window
    run: RunInfo
    lane: str
    newest: str
    refusal: str | None
    tags_refusal: str | None = None

    @property
    def is_backfill(self) -> bool:
        return self.run.backfill_id is not None

    def enforce_fence(self) -> None:
        """Refuse, before anything is written, a run the fence does not allow (or whose tags cannot be recorded)."""
        if self.tags_refusal:
            raise TagRefusal(description=self.tags_refusal)
        if self.refusal:
            raise FenceRefusal(description=self.refusal,
                               metadata={"refused_partitions": [self.newest], "window": str(self.window)})


def scope_of(run_id: str, tags: Mapping[str, str], partition_keys: Sequence[str] | None = None) -> RunScope:
    window = window_from_tags(tags)
    if window is None:
        if not partition_keys:
            raise ValueError(f"run {run_id} targets no partition (tags name none)")
        window = Window.of(min(partition_keys), max(partition_keys))
    run = RunInfo.from_tags(run_id, tags)
    newest = partitions.newest_partition()
    return RunScope(window, run, lane_of(tags), newest,
                    fence_refusal(window, run.backfill_id, run.fence_override, newest), tag_refusal(run))


def scope_of_context(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext | dg.OpExecutionContext) -> RunScope:
    keys = None
    if isinstance(context, dg.AssetExecutionContext) and context.has_partition_key_range:
        keys = context.partition_keys
    return scope_of(context.run.run_id, context.run.tags, keys)
