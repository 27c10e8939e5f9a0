"""The environment contract (ATLASMART_*): where AtlasMart reads and writes. Runs get it through the warehouse
resource; the partitions definition and the command line read it directly."""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Settings:
    raw_dir: Path
    data_dir: Path
    as_of: dt.date | None
    start_date: dt.date
    retain_versions: int
    shrink_threshold: float
    lock_timeout_s: float
    duckdb_memory_limit: str
    backfill_threads: int
    version_grace_s: float
    freshness_deadline: str = "06:00"
    slo_queue_wait_s: float = 120.0
    slo_duration_s: float = 600.0
    flag_alert_after_s: float = 1800.0
    sensor_interval_s: int = 30

    @property
    def warehouse_path(self) -> Path:
        return self.data_dir / "warehouse.duckdb"

    @property
    def published_dir(self) -> Path:
        return self.data_dir / "published"

    @property
    def versions_dir(self) -> Path:
        return self.data_dir / "published_versions"

    @property
    def scratch_dir(self) -> Path:
        return self.data_dir / "scratch"

    @property
    def notices_dir(self) -> Path:
        return self.data_dir / "notices"


def _as_of(value: str | None) -> dt.date | None:
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"ATLASMART_AS_OF={value!r} is not a YYYY-MM-DD date") from exc


def _interval(value: str) -> int:
    try:
        seconds = int(value)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise ValueError(f"ATLASMART_SENSOR_INTERVAL_S={value!r} is not a whole number of seconds >= 1")
    return seconds


def load(overrides: Mapping[str, str | None] | None = None) -> Settings:
    """The settings from the environment, with `overrides` (e.g. the warehouse resource's config) winning."""
    env = {**os.environ, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    return Settings(
        raw_dir=Path(env.get("ATLASMART_RAW_DIR", REPO_ROOT / "raw")).resolve(),
        data_dir=Path(env.get("ATLASMART_DATA_DIR", REPO_ROOT / "var")).resolve(),
        as_of=_as_of(env.get("ATLASMART_AS_OF")),
        start_date=dt.date.fromisoformat(env.get("ATLASMART_START_DATE", "2026-09-01")),
        retain_versions=int(env.get("ATLASMART_RETAIN_VERSIONS", "10")),
        shrink_threshold=float(env.get("ATLASMART_SHRINK_THRESHOLD", "0.2")),
        lock_timeout_s=float(env.get("ATLASMART_LOCK_TIMEOUT_S", "600")),
        duckdb_memory_limit=env.get("ATLASMART_DUCKDB_MEMORY_LIMIT", "1GB"),
        backfill_threads=int(env.get("ATLASMART_BACKFILL_THREADS", "1")),
        version_grace_s=float(env.get("ATLASMART_VERSION_GRACE_S", "300")),
        freshness_deadline=env.get("ATLASMART_FRESHNESS_DEADLINE", "06:00"),
        slo_queue_wait_s=float(env.get("ATLASMART_SLO_QUEUE_WAIT_S", "120")),
        slo_duration_s=float(env.get("ATLASMART_SLO_DURATION_S", "600")),
        flag_alert_after_s=float(env.get("ATLASMART_FLAG_ALERT_AFTER_S", "1800")),
        sensor_interval_s=_interval(env.get("ATLASMART_SENSOR_INTERVAL_S", "30")),
    )
