"""raw.order_lines: the day's evidence verified (sha256, manifest, shape) and loaded as received."""


from typing import Iterator

import dagster as dg

from atlasmart_assets import raw_load
from atlasmart_assets.assets.common import BACKFILL_POLICY, CODE_VERSION, KINDS, check_result, refuse
from atlasmart_assets.contract import OWNERS, RAW_CUSTOMERS, RAW_ORDER_LINES
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import scope_of_context
from atlasmart_assets.settings import load as load_settings
from atlasmart_assets.assets.schemas import CUSTOMERS_SCHEMA, RAW_SCHEMA

customers = dg.AssetSpec(
    key=list(RAW_CUSTOMERS), group_name="raw", kinds={"json"}, owners=OWNERS,
    description="SCD2 customer dimension (raw/customers.json). Grain: one row per customer version, "
                "valid_from inclusive, valid_to exclusive.",
    metadata={"dagster/column_schema": CUSTOMERS_SCHEMA,
              "file": dg.MetadataValue.path(str(load_settings().raw_dir / "customers.json"))},
)


@dg.asset(
    key=list(RAW_ORDER_LINES), group_name="raw", partitions_def=daily_partitions, backfill_policy=BACKFILL_POLICY,
    code_version=CODE_VERSION, kinds=KINDS, owners=OWNERS,
    check_specs=[dg.AssetCheckSpec(name, asset=list(RAW_ORDER_LINES), blocking=True, description=text)
                 for name, text in raw_load.CHECKS.items()],
    metadata={"dagster/table_name": "raw.order_lines", "dagster/column_schema": RAW_SCHEMA},
    description="Order lines as received. Grain: one row per record received; raw files are verified and never "
                "modified.",
)
def raw_order_lines(context: dg.AssetExecutionContext,
                    warehouse: Warehouse) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    scope = scope_of_context(context)
    scope.enforce_fence()
    threads = warehouse.settings.backfill_threads if scope.is_backfill else None
    loaded = raw_load.load(warehouse, scope, threads)
    yield from (check_result(a) for a in loaded.audits)
    refuse(str(scope.window), loaded.audits)
    yield dg.MaterializeResult(metadata={
        "window": str(scope.window),
        "dagster/row_count": sum(int(fig["records"]) for fig in loaded.figures.values()),
        "partitions_loaded": len(loaded.loaded),
        "partitions_already_loaded": len(loaded.files) - len(loaded.loaded),
        "per_partition": dg.MetadataValue.json({
            f.partition: {"records": loaded.figures[f.partition]["records"],
                          "controls": loaded.figures[f.partition]["controls"],
                          "sha256": f.sha256, "source_high_sequence": f.manifest["source_high_sequence"]}
            for f in loaded.files}),
        "code_version": CODE_VERSION,
        **loaded.stats.figures(),
    })
