"""Sensors of the code location: Slack alerts on failed checks and runs, backfill lifecycle notices, the clearing
of correction flags left by runs that ended without publishing (and the alert when they stay), the freshness of
the newest closed day, and saturation incidents recorded against backfills."""

import dagster as dg

from atlasmart_assets import correction_flags
from atlasmart_assets.alerts import check_sensor, flag_sensor, lifecycle, run_sensor, saturation_sensor
from atlasmart_assets.alerts.common import SLACK_KEY
from atlasmart_assets.alerts.slack import slack_resource
from atlasmart_assets.checks import freshness

sensors: list[dg.SensorDefinition] = [check_sensor.build(), run_sensor.build(), lifecycle.build(),
                                      correction_flags.build(), flag_sensor.build(), freshness.build(),
                                      saturation_sensor.build()]

slack_resources: dict[str, object] = {SLACK_KEY: slack_resource()}
