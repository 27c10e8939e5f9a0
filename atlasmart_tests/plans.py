"""What tests read of DuckDB's work: a scratch database of synthetic days parsed and merged as a run's is, the plan
DuckDB makes of a query, and a connection that sees each statement before it runs."""

import json
from pathlib import Path
from typing import Any, Callable

import duckdb

from atlasmart_assets import candidates, raw_files
from atlasmart_assets.window import Window


def merged_scratch(path: Path, raw: Path, window: Window) -> duckdb.DuckDBPyConnection:
    """A scratch database at `path` holding `raw`'s batches of `window`, parsed and merged (candidate.merged_lines)."""
    con = duckdb.connect(str(path))
    con.execute("create schema candidate")
    raw_files.load_window(con, raw, window)
    candidates.merge_evidence(con)
    return con


def plan_of(con: duckdb.DuckDBPyConnection, query: str, params: Any = None) -> list[dict[str, Any]]:
    """DuckDB's plan of `query` on `con` as it stands (its settings included), as JSON operator trees."""
    return json.loads(con.execute(f"explain (format json) {query}", params).fetchall()[0][1])


def operators(plan: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every operator of `plan`, parents before children."""
    out: list[dict[str, Any]] = []
    for node in plan:
        out.append(node)
        out += operators(node.get("children", []))
    return out


class Watched:
    """A DuckDB connection that hands each statement and its parameters to `before` before running it."""

    def __init__(self, con: duckdb.DuckDBPyConnection, before: Callable[[str, Any], None]) -> None:
        self.con = con
        self.before = before

    def execute(self, query: str, params: Any = None) -> duckdb.DuckDBPyConnection:
        self.before(query, params)
        return self.con.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.con, name)
