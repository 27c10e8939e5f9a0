"""A run's private candidate database: no reader looks there and no other run writes it."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import duckdb

from atlasmart_assets.warehouse.connection import connect

RUN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")


def path(scratch_dir: Path, run_id: str) -> Path:
    if not RUN_ID.match(run_id) or run_id.startswith("."):
        raise ValueError(f"not a usable run id for a scratch file name: {run_id!r}")
    return scratch_dir / f"{run_id}.duckdb"


def open(scratch_dir: Path, run_id: str, config: dict[str, str]) -> duckdb.DuckDBPyConnection:  # noqa: A001
    scratch_dir.mkdir(parents=True, exist_ok=True)
    con = connect(str(path(scratch_dir, run_id)), config=config)
    con.execute("create schema if not exists candidate")
    return con


def drop(scratch_dir: Path, run_id: str) -> None:
    """Remove a run's scratch database with its WAL and spill directory."""
    base = path(scratch_dir, run_id)
    for p in (base, base.with_name(base.name + ".wal"), base.with_name(base.name + ".tmp")):
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def prune(scratch_dir: Path, max_age_s: float) -> None:
    """Scratch of finished or crashed runs (a failed run's scratch is kept a while for inspection)."""
    if scratch_dir.exists():
        cutoff = time.time() - max_age_s
        for p in scratch_dir.glob("*.duckdb*"):
            if p.stat().st_mtime < cutoff:
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
