"""Checks on published tables, whoever wrote them: key uniqueness, and mart totals equal to fact totals."""

import dagster as dg

from atlasmart_assets import candidates, settings, warehouse
from atlasmart_assets.assets.common import check_result
from atlasmart_assets.assets.fact_mart import FACT, MART
from atlasmart_assets.audits import Audit, controls_match, unique_keys
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.settings import Settings
from atlasmart_assets.window import RANGE_END, RANGE_START, Window

FACT_UNIQUE = "fct_order_lines_line_id_unique"
MART_MATCHES = "revenue_daily_totals_match_fact"


def _window(context: dg.AssetCheckExecutionContext) -> Window:
    """The run's window, from its tags: a check-only or single-partition run has no time window to ask for,
    and checking every partition there would scan the whole published history."""
    tags = context.run.tags
    if RANGE_START in tags:
        return Window.of(tags[RANGE_START], tags[RANGE_END])
    if "dagster/partition" in tags:
        return Window.of(tags["dagster/partition"])
    keys = daily_partitions.get_partition_keys()
    return Window.of(keys[0], keys[-1])


def published_fact_unique(cfg: Settings, window: Window) -> Audit:
    with warehouse.connect(cfg) as con:
        figures = candidates.controls(con, "fact.fct_order_lines", window)
    return unique_keys(FACT_UNIQUE, FACT, {d: f["duplicate_line_ids"] for d, f in figures.items()})


def published_mart_matches_fact(cfg: Settings, window: Window) -> Audit:
    with warehouse.connect(cfg) as con:
        fact = candidates.controls(con, "fact.fct_order_lines", window)
        mart = candidates.controls(con, "mart.revenue_daily", window, kind="mart")
    return controls_match(MART_MATCHES, MART, {d: candidates.control_list(m) for d, m in mart.items()},
                          {d: candidates.control_list(f) for d, f in fact.items()}, "published_fact")


@dg.asset_check(asset=dg.AssetKey(list(FACT)), name=FACT_UNIQUE, partitions_def=daily_partitions)
def fct_order_lines_line_id_unique(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """line_id is unique in the published fact over the run's window (catches any writer, not only ours)."""
    return check_result(published_fact_unique(settings.load(), _window(context)))


@dg.asset_check(asset=dg.AssetKey(list(MART)), name=MART_MATCHES, blocking=True, partitions_def=daily_partitions)
def revenue_daily_totals_match_fact(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """Published mart totals equal published fact totals per day: a mart left behind is a failure."""
    return check_result(published_mart_matches_fact(settings.load(), _window(context)))
