"""Checks on published tables, whoever wrote them: key uniqueness, and mart totals equal to fact totals. Read-only."""


import dagster as dg

from atlasmart_assets import candidates
from atlasmart_assets.assets.common import check_result
from atlasmart_assets.audits import Audit, controls_match, unique_keys
from atlasmart_assets.contract import FCT_ORDER_LINES, REVENUE_DAILY
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import scope_of
from atlasmart_assets.window import Window

FACT_UNIQUE = "fct_order_lines_line_id_unique"
MART_MATCHES = "revenue_daily_totals_match_fact"


def _window(context: dg.AssetCheckExecutionContext) -> Window:
    """The run's window from its scope; a check-only run with no partition checks the whole partition set."""
    keys = daily_partitions.get_partition_keys()
    return scope_of(context.run.run_id, context.run.tags, [keys[0], keys[-1]]).window


def published_fact_unique(wh: Warehouse, window: Window) -> Audit:
    with wh.reader() as con:
        figures = candidates.controls(con, "fact.fct_order_lines", window)
    return unique_keys(FACT_UNIQUE, FCT_ORDER_LINES, {d: f["duplicate_line_ids"] for d, f in figures.items()})


def published_mart_matches_fact(wh: Warehouse, window: Window) -> Audit:
    with wh.reader() as con:
        fact = candidates.controls(con, "fact.fct_order_lines", window)
        mart = candidates.controls(con, "mart.revenue_daily", window, kind="mart")
    return controls_match(MART_MATCHES, REVENUE_DAILY, {d: candidates.control_list(m) for d, m in mart.items()},
                          {d: candidates.control_list(f) for d, f in fact.items()}, "published_fact")


@dg.asset_check(asset=dg.AssetKey(list(FCT_ORDER_LINES)), name=FACT_UNIQUE, partitions_def=daily_partitions,
                description="line_id is unique in the published fact over the run's window (catches any writer).")
def fct_order_lines_line_id_unique(context: dg.AssetCheckExecutionContext,
                                   warehouse: Warehouse) -> dg.AssetCheckResult:
    return check_result(published_fact_unique(warehouse, _window(context)))


@dg.asset_check(asset=dg.AssetKey(list(REVENUE_DAILY)), name=MART_MATCHES, partitions_def=daily_partitions,
                description="Published mart totals equal published fact totals per day: a mart left behind fails.")
def revenue_daily_totals_match_fact(context: dg.AssetCheckExecutionContext,
                                    warehouse: Warehouse) -> dg.AssetCheckResult:
    return check_result(published_mart_matches_fact(warehouse, _window(context)))
