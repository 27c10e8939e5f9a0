"""AtlasMart: safe, audited backfills of daily order lines over DuckDB."""

from atlasmart_assets.contract import PACKAGE_VERSION as __version__

__all__ = ["__version__"]
