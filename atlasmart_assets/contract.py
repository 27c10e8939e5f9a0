"""The names other tools, tests and operators rely on: tags, controls, the code version. Imports nothing of the package."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

PACKAGE_VERSION = "0.2.0"

# A landing batch's or dimension batch's name (its file's stem, and a manifest's extraction_batch), matched whole.
BATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")

# Tags Dagster sets on runs.
BACKFILL_TAG = "dagster/backfill"
PARTITION_TAG = "dagster/partition"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PRIORITY_TAG = "dagster/priority"
REQUESTED_BY_TAG = "atlasmart/requested_by"
# The most characters a reason (or any tag value an operator gives) may have: it goes into every day's ledger row,
# the notice, the Slack message and the run's events. A longer one is refused before anything moves.
REASON_MAX_CHARS = 1000
# Set by AtlasMart itself (a job's definition, the command line), not by the operator: no notice lists them.
KIND_TAG = "atlasmart/kind"
LAUNCHED_FROM_TAG = "atlasmart/launched_from"
USER_TAGS = ("dagster/user", "user", REQUESTED_BY_TAG)

# The UI's backfill ids are 8 characters; one set by hand in the tag may be any length. Where an id is shown (a
# refusal, a check's description, a Slack message) it is cut here: a 60,000-character one made a fenced run's events
# 187 KB.
SHOWN_ID_CHARS = 64


def shown_id(value: str) -> str:
    """`value` as shown to a person: whole up to SHOWN_ID_CHARS, else its start and how many characters were cut."""
    if len(value) <= SHOWN_ID_CHARS:
        return value
    return f"{value[:SHOWN_ID_CHARS]}… ({len(value) - SHOWN_ID_CHARS:,} more characters)"


# Tags an operator (or the schedule) sets.
REASON_TAG = "atlasmart/reason"
FENCE_OVERRIDE_TAG = "atlasmart/fence_override"
ACCEPT_SHRINK_TAG = "atlasmart/accept_shrink"
REDERIVE_TAG = "atlasmart/rederive"
LANE_TAG = "atlasmart/lane"
CURRENT_LANE = "current"
CURRENT_LANE_TAGS = {LANE_TAG: CURRENT_LANE, PRIORITY_TAG: "10"}

# The six controls of a day, in the published order.
CONTROL_NAMES = ("lines", "orders", "units", "gmv", "cost", "gross_profit")

# Asset keys.
RAW_ORDER_LINES = ("raw", "order_lines")
RAW_CUSTOMERS = ("raw", "customers")
LANDING_BATCHES = ("raw", "landing_batches")
STAGED_ORDER_LINES = ("staged", "order_lines")
FCT_ORDER_LINES = ("fact", "fct_order_lines")
REVENUE_DAILY = ("mart", "revenue_daily")

OWNERS = ["team:data-platform"]


def _code_fingerprint() -> str:
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted([*package.rglob("*.sql"), *package.rglob("*.py")]):
        digest.update(str(path.relative_to(package)).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


# Recorded with every publication: the package, and every SQL model and Python module it ran. A day whose current
# version another code built is built again by the next correction (unchanged.py keeps only this code's days).
CODE_VERSION = f"{PACKAGE_VERSION}+{_code_fingerprint()}"
