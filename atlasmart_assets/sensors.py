"""Sensors of the code location: Slack alerts on failed checks and runs, backfill lifecycle notices, the clearing
of correction flags left by runs that ended without publishing (and the alert when they stay), the freshness of
the newest closed day, and saturation incidents recorded against backfills."""

import dagster as dg

from atlasmart_assets import correction_flags, settings
from atlasmart_assets.alerts import check_sensor, flag_sensor, lifecycle, run_sensor, saturation_sensor
from atlasmart_assets.alerts.common import SLACK_KEY
from atlasmart_assets.alerts.slack import slack_resource
from atlasmart_assets.checks import freshness

# How often each sensor ticks (ATLASMART_SENSOR_INTERVAL_S, default 30 s): how soon an alert can arrive.
INTERVAL_S = settings.load().sensor_interval_s
sensors: list[dg.SensorDefinition] = [
    module.build(interval_s=INTERVAL_S)
    for module in (check_sensor, run_sensor, lifecycle, correction_flags, flag_sensor, freshness, saturation_sensor)]

slack_resources: dict[str, object] = {SLACK_KEY: slack_resource()}
