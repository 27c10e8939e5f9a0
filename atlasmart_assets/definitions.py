"""The one Definitions of the AtlasMart code location."""

from __future__ import annotations

import dagster as dg

from atlasmart_assets.assets.graph import ASSETS
from atlasmart_assets.checks.freshness import freshness_job, revenue_daily_newest_partition_fresh
from atlasmart_assets.checks.published import (
    fct_order_lines_published_history_free_of_suppressed_keys,
    published_tables_checks,
)
from atlasmart_assets.jobs import (
    daily_job,
    observe_landing_job,
    observe_landing_schedule,
    plan_job,
    rollback_job,
    suppression_scan_job,
    suppression_scan_schedule,
)
from atlasmart_assets.recovery import recover_on_load
from atlasmart_assets.resources import WAREHOUSE_KEY, warehouse_resource
from atlasmart_assets.schedules import daily_schedule, newest_partition_catch_up
from atlasmart_assets.sensors import sensors, slack_resources
from atlasmart_assets.slo import slo_report

warehouse = warehouse_resource()
recover_on_load(warehouse)

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=[published_tables_checks, fct_order_lines_published_history_free_of_suppressed_keys,
                  revenue_daily_newest_partition_fresh],
    jobs=[daily_job, rollback_job, plan_job, slo_report, observe_landing_job, suppression_scan_job, freshness_job],
    schedules=[daily_schedule, observe_landing_schedule, suppression_scan_schedule],
    sensors=[newest_partition_catch_up, *sensors],
    resources={WAREHOUSE_KEY: warehouse, **slack_resources},
    executor=dg.in_process_executor,
)
