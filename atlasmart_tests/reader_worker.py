"""A separate reader process: reads the mart's and the extracts' total cost until told to stop, then once more.

Argv: data dir, output JSON, ready marker, stop marker. It touches the ready marker after its first complete read
(mart and extracts), and after it sees the stop marker it makes one more complete read, so a test that publishes
between the two markers gets at least one read before and one after. A read of the extracts resolves the
`published` symlink once and reads every file of that one version, as a consumer reading several files must.

A lock conflict (a publisher holds the warehouse) is retried and counted; a conflict lasting longer than
MAX_CONFLICT_S, or any other error, ends the reader with exit status 1 and the error in its output.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import duckdb

MAX_CONFLICT_S = 120.0
POLL_S = 0.005


class ReaderError(RuntimeError):
    """The reader could not read (not a lock conflict), or was locked out for too long."""


def mart_cost(warehouse: Path) -> float:
    with duckdb.connect(str(warehouse), read_only=True) as con:
        return float(con.execute("select sum(cost) from mart.revenue_daily").fetchone()[0])


def extracts_cost(published: Path) -> float:
    version = published.resolve()
    return sum(json.loads(p.read_text())["controls"][4] for p in sorted(version.glob("partition=*.json")))


def is_lock_conflict(exc: duckdb.Error) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


class Reader:
    def __init__(self, data_dir: Path) -> None:
        self.warehouse, self.published = data_dir / "warehouse.duckdb", data_dir / "published"
        self.seen: list[dict[str, float]] = []
        self.lock_conflicts = 0
        self.longest_conflict_s = 0.0

    def read(self) -> None:
        """One complete read: the mart (retrying lock conflicts, bounded) and the extracts."""
        since = time.monotonic()
        while True:
            try:
                self.seen.append({"mart_cost": mart_cost(self.warehouse)})
                break
            except duckdb.Error as exc:
                if not is_lock_conflict(exc):
                    raise ReaderError(f"mart read failed: {type(exc).__name__}: {exc}") from exc
                self.lock_conflicts += 1
                waited = time.monotonic() - since
                self.longest_conflict_s = max(self.longest_conflict_s, waited)
                if waited > MAX_CONFLICT_S:
                    raise ReaderError(f"locked out of the warehouse for {waited:.1f}s: {exc}") from exc
                time.sleep(POLL_S)
        self.seen.append({"extract_cost": extracts_cost(self.published)})

    def report(self, error: str | None) -> dict[str, Any]:
        return {"seen": self.seen, "lock_conflicts": self.lock_conflicts,
                "longest_conflict_s": round(self.longest_conflict_s, 3), "error": error}


def main(data_dir: Path, out: Path, ready: Path, stop: Path) -> int:
    reader, error = Reader(data_dir), None
    try:
        reader.read()
        ready.touch()
        while not stop.exists():
            reader.read()
            time.sleep(POLL_S)
        reader.read()
    except Exception as exc:  # noqa: BLE001 - every failure is reported to the test, which fails on it
        error = f"{type(exc).__name__}: {exc}"
    out.write_text(json.dumps(reader.report(error)))
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main(*(Path(a) for a in sys.argv[1:5])))
