"""The daily schedule: the newest closed day, in the current lane."""

from __future__ import annotations

import dagster as dg

from atlasmart_assets.jobs import daily_job
from atlasmart_assets.contract import CURRENT_LANE_TAGS

daily_schedule = dg.build_schedule_from_partitioned_job(
    daily_job,
    name="atlasmart_daily_schedule",
    hour_of_day=2,
    tags=CURRENT_LANE_TAGS,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="The newest closed day, in the current lane (tag atlasmart/lane=current, priority 10).",
)
