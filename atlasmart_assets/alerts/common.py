"""What every alert sensor shares: the JSON cursor, the batch size, and what a run's tags say about its window."""

from __future__ import annotations

import json
from typing import Any, Mapping

import dagster as dg

from atlasmart_assets.alerts.slack import NO_TOKEN_REASON, AtlasSlack
from atlasmart_assets.scope import window_from_tags

BATCH = 20
SLACK_KEY = "slack"
# A check result carrying this metadata judges the instance, not its run (freshness): alerted once per state.
STATE_KEY = "state"


def load_cursor(raw: str | None) -> dict[str, Any]:
    return json.loads(raw) if raw else {}


def dump_cursor(state: Mapping[str, Any]) -> str:
    return json.dumps(state, sort_keys=True, separators=(",", ":"))


def window_keys(tags: Mapping[str, str]) -> list[str]:
    """Every partition key a run targets, from its tags (a ranged run's days expanded; [] when it names none)."""
    try:
        window = window_from_tags(tags)
    except ValueError:
        return []
    return window.keys if window else []


def skip_unless_configured(slack: AtlasSlack) -> dg.SkipReason | None:
    return None if slack.configured else dg.SkipReason(NO_TOKEN_REASON)
