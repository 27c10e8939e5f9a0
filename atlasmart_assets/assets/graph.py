"""The code location's assets in one list, and their graph (for the plan's downstream reach)."""

from typing import Any

import dagster as dg

from atlasmart_assets.assets.correction import correction_asset
from atlasmart_assets.assets.raw import customers, landing_batches, raw_order_lines
from atlasmart_assets.resources import WAREHOUSE_KEY, Warehouse

ASSETS: list[dg.AssetsDefinition | dg.AssetSpec] = [landing_batches, customers, raw_order_lines, correction_asset]


def asset_graph() -> Any:
    """The graph of these assets alone (the plan needs their edges, not the whole code location)."""
    return dg.Definitions(assets=ASSETS, resources={WAREHOUSE_KEY: Warehouse()}).resolve_asset_graph()
