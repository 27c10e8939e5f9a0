"""Sensors of the code location: Slack alerts on failed checks and runs, backfill lifecycle notices, and the
clearing of correction flags left by runs that ended without publishing."""

import dagster as dg

from atlasmart_assets import correction_flags
from atlasmart_assets.checks import freshness
from atlasmart_assets.alerts import check_sensor, lifecycle, run_sensor
from atlasmart_assets.alerts.common import SLACK_KEY
from atlasmart_assets.alerts.slack import slack_resource

sensors: list[dg.SensorDefinition] = [check_sensor.build(), run_sensor.build(), lifecycle.build(),
                                      correction_flags.build(), freshness.build()]

slack_resources: dict[str, object] = {SLACK_KEY: slack_resource()}
