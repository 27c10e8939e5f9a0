"""The one Definitions of the AtlasMart code location."""

from __future__ import annotations

import dagster as dg

from atlasmart_assets.assets.fact_mart import fact_and_mart
from atlasmart_assets.assets.raw import customers, raw_order_lines
from atlasmart_assets.assets.staged import staged_order_lines
from atlasmart_assets.checks.published import fct_order_lines_line_id_unique, revenue_daily_totals_match_fact
from atlasmart_assets.jobs import daily_job, plan_job, rollback_job
from atlasmart_assets.schedules import daily_schedule
from atlasmart_assets.sensors import resources, sensors
from atlasmart_assets.slo import slo_report

defs = dg.Definitions(
    assets=[customers, raw_order_lines, staged_order_lines, fact_and_mart],
    asset_checks=[fct_order_lines_line_id_unique, revenue_daily_totals_match_fact],
    jobs=[daily_job, rollback_job, plan_job, slo_report],
    schedules=[daily_schedule],
    sensors=sensors,
    resources=resources,
    executor=dg.in_process_executor,
)
