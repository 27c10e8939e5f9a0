"""The environment contract (ATLASMART_*): where AtlasMart reads and writes. Runs get it through the warehouse
resource; the partitions definition and the command line read it directly. Every value is checked when the code
location loads: a typo is one clear error naming the variable, never a run failing later on it."""

from __future__ import annotations

import datetime as dt
import functools
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import duckdb

from atlasmart_assets.window import Window, chunks

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
    chunk_days: int = 31
    chunk_lines: int = 2_000_000
    backfill_nice: int = 10
    backfill_give_way_s: float = 60.0
    freshness_deadline: str = "06:00"
    slo_queue_wait_s: float = 120.0
    slo_duration_s: float = 600.0
    flag_alert_after_s: float = 1800.0
    sensor_interval_s: int = 30
    schedule_hour: int = 2
    catch_up: bool = True

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

    def chunks(self, days: Sequence[str], lines: Mapping[str, int] | None = None) -> list[list[str]]:
        """`days` as a long correction holds the warehouse for them: runs of at most ATLASMART_CHUNK_DAYS days and,
        given each day's `lines`, ATLASMART_CHUNK_LINES lines (a heavier day alone)."""
        return chunks(days, self.chunk_days, lines, self.chunk_lines)

    def split(self, window: Window, lines: Mapping[str, int] | None = None) -> list[Window]:
        """The window as `chunks` cuts its days."""
        return window.split(self.chunk_days, lines, self.chunk_lines)


def _as_of(value: str | None) -> dt.date | None:
    if not value:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"ATLASMART_AS_OF={value!r} is not a YYYY-MM-DD date") from exc


DEADLINE_ENV = "ATLASMART_FRESHNESS_DEADLINE"
_OFFSET = re.compile(r"^(\d{1,2}):([0-5]\d)\Z")


def deadline_offset(text: str) -> dt.timedelta:
    """ATLASMART_FRESHNESS_DEADLINE, 'HH:MM' from 00:00 to 47:59: how long after its day closes (00:00 UTC of the
    next day) a partition must be published. '06:00' = by 06:00 UTC the next morning."""
    match = _OFFSET.match(text.strip())
    if not match or int(match.group(1)) > 47:
        raise ValueError(f"{DEADLINE_ENV}={text!r} is not an offset HH:MM (00:00..47:59) after the day closes, "
                         "e.g. 06:00")
    return dt.timedelta(hours=int(match.group(1)), minutes=int(match.group(2)))


_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*(B|bytes|K|M|G|T|P|E|KB|MB|GB|TB|PB|EB|KiB|MiB|GiB|TiB|PiB|EiB|%)\Z",
                     re.IGNORECASE | re.ASCII)
_MEMORY_UNITS = {"b": 1, "bytes": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15, "e": 10**18,
                 "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15, "eb": 10**18, "kib": 1 << 10,
                 "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50, "eib": 1 << 60}
# The least memory limit a run works in: one thread of the raw parse takes the JSON reader's two buffers of 16 MiB
# at the least, besides the values (raw_files.thread_memory); at 16MB no parse ran at all.
MEMORY_MIN = "64MB"


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def memory_bytes(text: str) -> int:
    """A memory size as DuckDB takes it ('1GB', '4G', '512MiB', '50%' of the machine, '-1' for DuckDB's default
    of 80 %) in bytes."""
    text = text.strip()
    if text == "-1":
        return int(_physical_memory() * 0.8)
    match = _MEMORY.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a memory size such as 1GB, 4G, 512MiB or 50%")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(_physical_memory() * number / 100 if unit == "%" else number * _MEMORY_UNITS[unit])


@functools.lru_cache(maxsize=16)
def duckdb_memory_limit(value: str) -> str:
    """`value` as DuckDB shows it once it has taken it as its memory limit ('953.6 MiB'); ValueError with DuckDB's
    reason if it does not take it. DuckDB is the judge of its own forms (`1 gigabyte`, `.5GB`, `1e9B` and `150%` among
    them: a pattern of ours both refused some it takes and took some it refuses, for every run to fail on)."""
    try:
        con = duckdb.connect(config={"memory_limit": value})
        try:  # a limit of a few bytes is taken, then fails the first statement
            return str(con.execute("select current_setting('memory_limit')").fetchone()[0])
        finally:
            con.close()
    except duckdb.Error as exc:
        raise ValueError(str(exc)) from exc


def _memory(env: Mapping[str, str], name: str, default: str) -> str:
    """A DuckDB memory limit, refused with its name and value unless DuckDB takes it and it is at least MEMORY_MIN:
    a typo would otherwise surface as DuckDB's error at the first connection of some run, or a limit of a few
    bytes."""
    value = str(env.get(name, default)).strip()
    # DuckDB reads any negative size as no limit of ours (its default, 80 % of the machine); only -1 says so.
    if value.startswith("-") and value != "-1":
        raise ValueError(f"{name}={value!r} is negative: a memory limit is a size such as 1GB, or -1 for DuckDB's "
                         "default (80 % of the machine)")
    try:
        size = memory_bytes(duckdb_memory_limit(value))
    except ValueError as exc:
        raise ValueError(f"{name}={value!r} is not a memory limit DuckDB takes (such as 1GB, 4G, 512MiB or 50%): "
                         f"{exc}") from exc
    if size < memory_bytes(duckdb_memory_limit(MEMORY_MIN)):  # both as DuckDB shows them (it truncates)
        raise ValueError(f"{name}={value!r} is below {MEMORY_MIN}")
    return value


def _number(env: Mapping[str, str], name: str, default: str, minimum: float, unit: str,
            whole: bool = False, maximum: float = math.inf, above: bool = False) -> float:
    """A numeric setting, refused with its name, value and the expected range (nan and inf are no setting)."""
    value = str(env.get(name, default)).strip()
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    low = number <= minimum if above else number < minimum
    if not math.isfinite(number) or low or number > maximum or (whole and not number.is_integer()):
        bound = f"{'>' if above else '>='} {minimum:g}" + (f" and <= {maximum:g}" if math.isfinite(maximum) else "")
        what = f"a whole number of {unit}" if whole else (f"a number of {unit}" if unit else "a number")
        raise ValueError(f"{name}={value!r} is not {what} {bound}")
    return number


def load(overrides: Mapping[str, str | None] | None = None) -> Settings:
    """The settings from the environment, with `overrides` (e.g. the warehouse resource's config) winning."""
    env = {**os.environ, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    return Settings(
        raw_dir=Path(env.get("ATLASMART_RAW_DIR", REPO_ROOT / "raw")).resolve(),
        data_dir=Path(env.get("ATLASMART_DATA_DIR", REPO_ROOT / "var")).resolve(),
        as_of=_as_of(env.get("ATLASMART_AS_OF")),
        start_date=_date(env, "ATLASMART_START_DATE", "2026-09-01"),
        retain_versions=int(_number(env, "ATLASMART_RETAIN_VERSIONS", "10", 1, "versions", whole=True)),
        shrink_threshold=_number(env, "ATLASMART_SHRINK_THRESHOLD", "0.2", 0, "", maximum=1),
        lock_timeout_s=_number(env, "ATLASMART_LOCK_TIMEOUT_S", "600", 0, "seconds", above=True),
        duckdb_memory_limit=_memory(env, "ATLASMART_DUCKDB_MEMORY_LIMIT", "1GB"),
        backfill_threads=int(_number(env, "ATLASMART_BACKFILL_THREADS", "1", 1, "threads", whole=True)),
        version_grace_s=_number(env, "ATLASMART_VERSION_GRACE_S", "300", 0, "seconds"),
        chunk_days=int(_number(env, "ATLASMART_CHUNK_DAYS", "31", 1, "days", whole=True)),
        chunk_lines=int(_number(env, "ATLASMART_CHUNK_LINES", "2000000", 1, "lines", whole=True)),
        backfill_nice=int(_number(env, "ATLASMART_BACKFILL_NICE", "10", 0, "steps", whole=True, maximum=19)),
        backfill_give_way_s=_number(env, "ATLASMART_BACKFILL_GIVE_WAY_S", "60", 0, "seconds"),
        freshness_deadline=_deadline(env.get(DEADLINE_ENV, "06:00")),
        slo_queue_wait_s=_number(env, "ATLASMART_SLO_QUEUE_WAIT_S", "120", 0, "seconds", above=True),
        slo_duration_s=_number(env, "ATLASMART_SLO_DURATION_S", "600", 0, "seconds", above=True),
        flag_alert_after_s=_number(env, "ATLASMART_FLAG_ALERT_AFTER_S", "1800", 0, "seconds", above=True),
        sensor_interval_s=int(_number(env, "ATLASMART_SENSOR_INTERVAL_S", "30", 1, "seconds", whole=True)),
        schedule_hour=int(_number(env, "ATLASMART_SCHEDULE_HOUR", "2", 0, "hours (UTC)", whole=True, maximum=23)),
        catch_up=_switch(env, "ATLASMART_CATCH_UP", "on"),
    )


SWITCH_ON = ("1", "on", "true", "yes")
SWITCH_OFF = ("0", "off", "false", "no")


def _switch(env: Mapping[str, str], name: str, default: str) -> bool:
    """On or off, refused with its name and value otherwise (a typo must not leave a switch in its default)."""
    value = str(env.get(name, default)).strip().lower()
    if value not in SWITCH_ON + SWITCH_OFF:
        raise ValueError(f"{name}={env.get(name)!r} is neither on ({', '.join(SWITCH_ON)}) nor off "
                         f"({', '.join(SWITCH_OFF)})")
    return value in SWITCH_ON


def _date(env: Mapping[str, str], name: str, default: str) -> dt.date:
    value = env.get(name, default)
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"{name}={value!r} is not a YYYY-MM-DD date") from exc


def _deadline(value: str) -> str:
    deadline_offset(value)
    return value.strip()
