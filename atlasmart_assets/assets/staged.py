"""staged.order_lines: typed, deduplicated on line_id (latest source sequence), joined to the SCD2 customer version."""


from typing import Iterator

import dagster as dg

from atlasmart_assets import candidates, raw_files, warehouse
from atlasmart_assets.assets.common import BACKFILL_POLICY, CODE_VERSION, begin, check_result, has_table, refuse
from atlasmart_assets.assets.raw import customers, raw_order_lines
from atlasmart_assets.audits import unique_keys
from atlasmart_assets.partitions import daily_partitions

KEY = ("staged", "order_lines")
UNIQUE = "staged_order_lines_line_id_unique"


@dg.asset(
    key=list(KEY), group_name="staged", partitions_def=daily_partitions, backfill_policy=BACKFILL_POLICY,
    code_version=CODE_VERSION, deps=[raw_order_lines, customers],
    check_specs=[dg.AssetCheckSpec(UNIQUE, asset=list(KEY), blocking=True)],
    description="One row per line_id and day, with the customer's country and tier valid at order time.",
)
def staged_order_lines(context: dg.AssetExecutionContext) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    step = begin(context)
    scratch = warehouse.scratch_path(step.cfg, step.run.run_id)
    con = warehouse.open_scratch(step.cfg, step.run.run_id)
    reuse = has_table(con, "raw_lines")
    if not reuse:
        con.close()
        warehouse.copy_out(step.cfg, scratch, "raw.order_lines", step.window, "raw_lines")
        con = warehouse.open_scratch(step.cfg, step.run.run_id)
    try:
        customers_file = step.cfg.raw_dir / "customers.json"
        candidates.build_staged(con, str(customers_file), step.window)
        per_day = con.execute(
            "select partition_date, count(*), count(*) - count(distinct line_id), count(*) filter (where tier = 'unknown') "
            "from staged group by 1 order by 1").fetchall()
    finally:
        con.close()
    audit = unique_keys(UNIQUE, KEY, {d.isoformat(): dup for d, _, dup, _ in per_day})
    yield check_result(audit)
    refuse(step, [audit])
    warehouse.replace_window(step.cfg, scratch, "staged.order_lines", "staged", step.window)
    yield dg.MaterializeResult(metadata={
        "window": str(step.window),
        "rows": sum(n for _, n, _, _ in per_day),
        "per_partition": dg.MetadataValue.json({d.isoformat(): {"rows": n, "unresolved_customers": u}
                                                for d, n, _, u in per_day}),
        "customers_sha256": raw_files.sha256_of(customers_file),
        "raw_reused_from_this_run": reuse,
        "code_version": CODE_VERSION,
        **warehouse.LOCK_STATS.figures(),
    })
