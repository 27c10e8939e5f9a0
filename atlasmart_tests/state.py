"""What a consumer can read, reduced to comparable values: tables, ledger pointers, extract bytes."""

import hashlib
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from atlasmart_assets.settings import Settings

CONSUMER_TABLES = ("staged.order_lines", "fact.fct_order_lines", "mart.revenue_daily")


def table_rows(cfg: Settings, table: str, where: str = "true") -> list[tuple]:
    with duckdb.connect(str(cfg.warehouse_path), read_only=True) as con:
        return _rows(con, table, where)


def _rows(con: duckdb.DuckDBPyConnection, table: str, where: str = "true") -> list[tuple]:
    return con.execute(f"select * from {table} where {where} order by all").fetchall()


def files(directory: Path) -> dict[str, str]:
    if not directory.exists():
        return {}
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("partition=*.json"))}


def snapshot(cfg: Settings) -> dict[str, Any]:
    """Hashes of every consumer-visible table, the ledger's current pointers, and each extract's bytes."""
    out: dict[str, Any] = {"extracts": files(cfg.published_dir)}
    if not cfg.warehouse_path.exists():
        return out
    # One connection for the whole snapshot: opening a DuckDB database costs about 17 ms of CPU, and the tests take
    # hundreds of snapshots.
    with duckdb.connect(str(cfg.warehouse_path), read_only=True) as con:
        for table in CONSUMER_TABLES:
            out[table] = hashlib.sha256(repr(_rows(con, table)).encode()).hexdigest()
        out["current_publications"] = _rows(con, "audit.current_publications")
    return out


def content(cfg: Settings) -> dict[str, Any]:
    """Only the data a reader sees (tables and extract bytes), without ledger ids and timestamps."""
    return {k: v for k, v in snapshot(cfg).items() if k != "current_publications"}


def failure_text(result: Any) -> str:
    """Every step failure of an in-process run as one text: the operator's description and the error message."""
    texts = []
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        texts.append((data.user_failure_data.description if data.user_failure_data else "") or "")
        texts.append(data.error.message if data.error else "")
    return " ".join(texts)


def failure_causes(result: Any) -> list[str]:
    """The one step failure of an in-process run, as the messages of its error and every cause under it."""
    [failure] = result.get_step_failure_events()
    error, causes = failure.step_failure_data.error, []
    while error is not None:
        causes.append(error.message)
        error = error.cause
    return causes


def latest(instance: dg.DagsterInstance, asset: str, day: str) -> dg.EventLogRecord:
    """The newest materialization of `asset` ("fact/fct_order_lines") for partition `day`."""
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset.split("/")), asset_partitions=[day]), limit=1).records
    return record
