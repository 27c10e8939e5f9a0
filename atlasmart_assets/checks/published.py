"""Checks on published tables, whoever wrote them: key uniqueness, and mart totals equal to fact totals."""


import dagster as dg

from atlasmart_assets import candidates, settings, warehouse
from atlasmart_assets.assets.common import check_result
from atlasmart_assets.assets.fact_mart import FACT, MART
from atlasmart_assets.audits import controls_match, unique_keys
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.window import Window


def _window(context: dg.AssetCheckExecutionContext) -> Window:
    # A run that selects only checks cannot give a time window; build it from the keys.
    if context.has_partition_key_range:
        r = context.partition_key_range
        return Window.of(r.start, r.end)
    keys = daily_partitions.get_partition_keys()
    return Window.of(keys[0], keys[-1])


@dg.asset_check(asset=dg.AssetKey(list(FACT)),
                name="fct_order_lines_line_id_unique", partitions_def=daily_partitions)
def fct_order_lines_line_id_unique(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """line_id is unique in the published fact over the run's window (catches any writer, not only ours)."""
    cfg, window = settings.load(), _window(context)
    with warehouse.connect(cfg) as con:
        figures = candidates.controls(con, "fact.fct_order_lines", window)
    return check_result(unique_keys("fct_order_lines_line_id_unique", FACT,
                                    {d: f["duplicate_line_ids"] for d, f in figures.items()}))


@dg.asset_check(asset=dg.AssetKey(list(MART)), name="revenue_daily_totals_match_fact", blocking=True,
                partitions_def=daily_partitions)
def revenue_daily_totals_match_fact(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
    """Published mart totals equal published fact totals per day: a mart left behind is a failure."""
    cfg, window = settings.load(), _window(context)
    with warehouse.connect(cfg) as con:
        fact = candidates.controls(con, "fact.fct_order_lines", window)
        mart = candidates.controls(con, "mart.revenue_daily", window, kind="mart")
    return check_result(controls_match(
        "revenue_daily_totals_match_fact", MART, {d: candidates.control_list(m) for d, m in mart.items()},
        {d: candidates.control_list(f) for d, f in fact.items()}, "published_fact"))
