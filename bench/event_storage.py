"""What storing a ranged run's materializations costs: Dagster's SQLite event log against the shipped one.

    python -m bench.event_storage [--events 365] [--batch 250] [--repeats 5]

Each repeat stores the same `--events` partitioned materializations (metadata shaped like a fact partition's) into
a fresh directory three ways, side by side: Dagster's `SqliteEventLogStorage` one event at a time (what a ranged
run gets from it), the shipped storage one event at a time, and the shipped storage in batches of `--batch` (what
Dagster hands it). Prints medians of ms per event and the longest index transaction of a batch: how long the
backfill's batch keeps today's run from writing its own events.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEvent, DagsterEventType, StepMaterializationData
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

from atlasmart_assets.event_storage import DEFAULT_BATCH_SIZE, BatchingSqliteEventLogStorage


def materializations(n: int, run_id: str) -> list[EventLogEntry]:
    out = []
    for k in range(n):
        mat = dg.AssetMaterialization(
            asset_key=["fact", "fct_order_lines"], partition=(dt.date(2025, 1, 1) + dt.timedelta(days=k)).isoformat(),
            tags={"dagster/data_version": f"{k:064x}", "dagster/code_version": "v1"},
            metadata={"dagster/row_count": 20_000 + k, "sha256": "0" * 64, "input": "raw/partition=2025-01-01.json",
                      "controls": {"lines": 20_000.0, "orders": 7_987.0, "units": 59_902.0, "gmv": 6_106_140.8,
                                   "cost": 4_000_000.0, "gross_profit": 2_106_140.8}})
        event = DagsterEvent(event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value, job_name="atlasmart_daily",
                             event_specific_data=StepMaterializationData(mat), step_key="correction")
        out.append(EventLogEntry(error_info=None, level=10, user_message="", run_id=run_id, timestamp=time.time(),
                                 dagster_event=event, job_name="atlasmart_daily", step_key="correction"))
    return out


def one_way(make: Callable[[str], Any], n: int, batch: int | None) -> tuple[float, float]:
    """(ms per event, longest index transaction of a batch in s) for one fresh storage."""
    storage = make(tempfile.mkdtemp(prefix="atlasmart-event-bench-"))
    events = materializations(n, "run")
    longest = 0.0
    if batch:
        mirror = storage._mirror_in_index

        def timed(*args: Any) -> Any:
            nonlocal longest
            started = time.perf_counter()
            try:
                return mirror(*args)
            finally:
                longest = max(longest, time.perf_counter() - started)

        storage._mirror_in_index = timed
    started = time.perf_counter()
    if batch:
        for k in range(0, n, batch):
            storage.store_event_batch(events[k:k + batch])
    else:
        for event in events:
            storage.store_event(event)
    elapsed = time.perf_counter() - started
    stored = storage.get_records_for_run("run", limit=n + 1).records
    assert len(stored) == n, (len(stored), n)
    return 1000 * elapsed / n, longest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=365)
    parser.add_argument("--batch", type=int, default=int(DEFAULT_BATCH_SIZE))
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ways: dict[str, tuple[Callable[[str], Any], int | None]] = {
        "Dagster's SqliteEventLogStorage, one by one": (SqliteEventLogStorage, None),
        "shipped storage, one by one": (BatchingSqliteEventLogStorage, None),
        f"shipped storage, batches of {args.batch}": (BatchingSqliteEventLogStorage, args.batch),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(args.repeats):  # alternating, so the machine's drift falls on every way alike
        for name, (make, batch) in ways.items():
            results[name].append(one_way(make, args.events, batch))
    base = statistics.median(ms for ms, _ in results[next(iter(ways))])
    print(f"{args.events} materializations, medians of {args.repeats}")
    for name, runs in results.items():
        ms = statistics.median(m for m, _ in runs)
        hold = max(h for _, h in runs)
        note = f", longest index transaction {hold * 1000:.0f} ms" if hold else ""
        print(f"  {name}: {ms:.2f} ms an event ({base / ms:.1f}x faster than Dagster's){note}")


if __name__ == "__main__":
    main()
