"""AtlasMart: safe, audited backfills of daily order lines over DuckDB."""

__version__ = "0.1.0"
