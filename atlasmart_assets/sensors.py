"""Sensors of the code location (Slack alerts and lifecycle notices are added by atlasmart_assets.alerts)."""

import dagster as dg

sensors: list[dg.SensorDefinition] = []
