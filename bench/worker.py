"""One measured workload in its own process; the parent reads its peak memory from wait4 and its figures from --out.

The environment (ATLASMART_*, DAGSTER_HOME) is set by the parent before this process starts, so the
partitions definition sees the bench's AS_OF and START_DATE at import.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import duckdb

PHASES: dict[str, float] = defaultdict(float)

# Module functions whose cumulative time is reported per run (wrapped here, the project code is unchanged).
TIMED = {
    "raw_files": ("load_window", "profile", "sha256_of"),
    "raw_load": ("load",),
    "correction": ("correct", "audit", "publish"),
    "candidates": ("merge_evidence", "build_staged", "build", "days", "suppressed"),
    "warehouse.ledger": ("current", "retire", "prune_history", "write_rows", "loaded_batches"),
    "extracts": ("stage", "swap", "prune"),
}


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASES[name] += time.perf_counter() - started
    return wrapper


def _instrument() -> None:
    import importlib

    for module_name, names in TIMED.items():
        module = importlib.import_module(f"atlasmart_assets.{module_name}")
        for name in names:
            setattr(module, name, _timed(f"{module_name}.{name}", getattr(module, name)))


def _step_durations(instance: Any, run_id: str) -> dict[str, float]:
    """Wall time of each step of a run, from the instance's event log."""
    starts: dict[str, float] = {}
    out: dict[str, float] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None or not event.step_key:
            continue
        if event.event_type_value == "STEP_START":
            starts[event.step_key] = entry.timestamp
        elif event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE") and event.step_key in starts:
            out[event.step_key] = round(entry.timestamp - starts[event.step_key], 3)
    return out


def _run_span(instance: Any, run_id: str) -> dict[str, float | None]:
    """The run as Dagster records it (the duration the UI shows: RUN_START -> RUN_SUCCESS/FAILURE), apart from the
    call's wall time, which also holds the run's creation (its planned events) before it starts."""
    record = instance.get_run_record_by_id(run_id)
    start, end = (record.start_time, record.end_time) if record else (None, None)
    return {"run_start_to_end_s": round(end - start, 3) if start and end else None}


def _event_log(instance: Any, run_id: str) -> dict[str, int]:
    """What the run wrote to the instance's event log: events, bytes (as Dagster serializes them), the largest."""
    import dagster as dg

    sizes = [len(dg.serialize_value(entry)) for entry in instance.all_logs(run_id)]
    return {"events": len(sizes), "bytes": sum(sizes), "largest_bytes": max(sizes, default=0)}


def _lock_figures(instance: Any, run_id: str) -> dict[str, float]:
    """The run's warehouse lock figures, from its materializations' and check results' metadata (each step records
    its own: the published checks' reads on their results)."""
    import dagster as dg

    out: dict[str, float] = {"lock_wait_max_s": 0.0, "lock_hold_max_s": 0.0, "lock_hold_total_s": 0.0}
    seen: set[str] = set()
    for entry in instance.all_logs(run_id, of_type={dg.DagsterEventType.ASSET_MATERIALIZATION,
                                                    dg.DagsterEventType.ASSET_CHECK_EVALUATION}):
        if entry.dagster_event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
            meta = entry.dagster_event.event_specific_data.metadata
        else:
            meta = entry.asset_materialization.metadata if entry.asset_materialization else {}
        if "publish_lock_hold_s" in meta:  # the commit's own hold (the correction's run-wide figures)
            out["publish_lock_hold_s"] = float(meta["publish_lock_hold_s"].value)
        if "lock_hold_max_s" not in meta or entry.step_key in seen:
            continue
        seen.add(entry.step_key)
        out["lock_wait_max_s"] = max(out["lock_wait_max_s"], float(meta["lock_wait_max_s"].value))
        out["lock_hold_max_s"] = max(out["lock_hold_max_s"], float(meta["lock_hold_max_s"].value))
        out["lock_hold_total_s"] += float(meta["lock_hold_total_s"].value)
    return {k: round(v, 3) for k, v in out.items()}


def _chain_runs(args: argparse.Namespace) -> dict[str, Any]:
    import dagster as dg

    from atlasmart_assets.contract import CURRENT_LANE_TAGS, REDERIVE_TAG
    from atlasmart_assets.definitions import defs
    from atlasmart_assets.lab import run_chain

    _instrument()
    defs.resolve_job_def("atlasmart_daily")
    # Today's load here loads the same newest day again and again: it re-derives it, so that every run builds its
    # day as a new day's first load does (a day kept as published would build nothing).
    tags = ({"dagster/backfill": args.backfill} if args.backfill
            else {**CURRENT_LANE_TAGS, REDERIVE_TAG: "bench: today's load builds its day"})
    if args.rederive:
        tags[REDERIVE_TAG] = args.rederive
    stop = Path(args.until_file) if args.until_file else None
    if args.delay:
        time.sleep(args.delay)
    runs: list[dict[str, Any]] = []
    with dg.DagsterInstance.get() as instance:
        # Dagster's own cost of the run's event log (planned events, materializations, checks, logs), apart.
        storage = instance.event_log_storage
        storage.store_event = _timed("dagster.store_event", storage.store_event)  # type: ignore[method-assign]
        storage.store_event_batch = _timed(  # type: ignore[method-assign]
            "dagster.store_event_batch", storage.store_event_batch)
        if args.per_partition:
            first, last = dt.date.fromisoformat(args.start), dt.date.fromisoformat(args.end)
            plan = [((first + dt.timedelta(days=k)).isoformat(), None) for k in range((last - first).days + 1)]
        else:
            plan = [(args.start, args.end)] * args.runs
        k = 0
        while True:
            if stop is not None:
                if k >= args.runs and stop.exists():
                    break
            elif k >= len(plan):
                break
            start, end = plan[k % len(plan)]
            PHASES.clear()
            began = time.time()
            t0 = time.perf_counter()
            result = run_chain(instance, start, end, tags)
            wall = time.perf_counter() - t0
            runs.append({
                "window": f"{start}..{end or start}", "wall_s": round(wall, 3), "success": result.success,
                "began": began, "ended": began + wall, "steps": _step_durations(instance, result.run_id),
                "phases": {k2: round(v, 3) for k2, v in sorted(PHASES.items())},
                "lock": _lock_figures(instance, result.run_id),
                "event_log": _event_log(instance, result.run_id),
                **_run_span(instance, result.run_id),
            })
            k += 1
            if args.pause and (stop is not None or k < len(plan)):
                time.sleep(args.pause)
    walls = [r["wall_s"] for r in runs]
    return {"runs": runs, "total_s": round(sum(walls), 3), "median_s": round(statistics.median(walls), 3),
            "max_s": max(walls), "all_success": all(r["success"] for r in runs)}


# The six controls per day of a relation of lines (both floors end with it).
CONTROLS_SQL = """
select
    partition_date,
    count(*) as lines,
    count(distinct order_id) as orders,
    sum(quantity) as units,
    sum(quantity * unit_price) as gmv,
    sum(quantity * unit_cost) as cost,
    sum(quantity * unit_price) - sum(quantity * unit_cost) as gross_profit
from {relation}
group by partition_date
order by partition_date
"""

# The raw files read as the parse reads them (raw_files.read_params): as documents, whatever their line breaks, with
# a buffer sized to the largest file. Until this release the floor read 'auto' with a 1 GB buffer: 8.6-8.7 s against
# 5.4-6.4 s for the year, a floor about 40 % above what DuckDB's read of the files needs.
FLOOR_READ_SQL = """
with docs as (
    select manifest.partition as partition_date, lines
    from read_json($files, format = 'unstructured', maximum_object_size = $max_object_size,
        columns = {manifest: 'struct(partition varchar)',
                   lines: 'struct(line_id varchar, order_id varchar, quantity bigint, unit_price decimal(18, 2),
                                  unit_cost decimal(18, 2), source_sequence bigint)[]'})
),
lines as (
    select partition_date, unnest(lines, recursive := true) from docs
),
"""

FLOOR_SQL = FLOOR_READ_SQL + """
-- The merge as the product's (merge_losers.sql) and the write floor's: the records that lose, looked for only among
-- the keys held more than once. Until 2026-12-07 a window over every record: 1.55 s against 1.38 s for 121 days
-- (median of 3 each, side by side, the same controls; a review found the floor flattering every ratio by that).
keyed as (
    select *, hash(partition_date, line_id) as key_hash from lines
),
repeated as (
    select key_hash from keyed group by key_hash having count(*) > 1
),
losers as (
    select partition_date, line_id, source_sequence
    from keyed semi join repeated using (key_hash)
    qualify row_number() over (partition by partition_date, line_id order by source_sequence desc) > 1
),
latest as (
    select * from keyed anti join losers using (partition_date, line_id, source_sequence)
)
""" + CONTROLS_SQL.format(relation="latest")


# The floor's merge until 2026-12-07, kept to compare with (`floor_merges`): a window ranking every record.
FLOOR_WINDOW_SQL = FLOOR_READ_SQL + """latest as (
    select * from lines
    qualify row_number() over (partition by partition_date, line_id order by source_sequence desc) = 1
)
""" + CONTROLS_SQL.format(relation="latest")


def _window_files(args: argparse.Namespace) -> list[str]:
    """Each day's first batch file (raw/partition=D.json) from --start to --end."""
    from atlasmart_assets.raw_files import path_for
    from atlasmart_assets.window import Window

    return [str(path_for(Path(args.raw_dir), day)) for day in Window.of(args.start, args.end).keys]


def _matches_manifests(files: list[str], rows: list[tuple[Any, ...]]) -> bool:
    """Whether the controls per day (partition_date, then the six) equal each day's manifest: a floor that computes
    anything else is not a floor of the same work."""
    import duckdb

    from atlasmart_assets.contract import CONTROL_NAMES
    from atlasmart_assets.raw_files import manifests

    con = duckdb.connect()
    try:
        texts = manifests(con, [Path(f) for f in files])
    finally:
        con.close()
    want = {}
    for text in texts.values():
        manifest = json.loads(text or "null") or {}
        want[manifest.get("partition")] = [float((manifest.get("controls") or {}).get(n, "nan")) for n in CONTROL_NAMES]
    got = {str(r[0]): [float(x) for x in r[1:7]] for r in rows}
    return got == want


def _floor(args: argparse.Namespace) -> dict[str, Any]:
    """The floor: DuckDB reads every raw file of the window once and computes the six controls per day."""
    import duckdb

    from atlasmart_assets.raw_files import object_size

    files = _window_files(args)
    buffer = object_size(map(Path, files))
    t0 = time.perf_counter()
    # The runs' memory limit when the bench sets one (--memory-limit), as every run it is the floor of has it.
    limit = os.environ.get("ATLASMART_DUCKDB_MEMORY_LIMIT")
    con = duckdb.connect(config={"memory_limit": limit} if limit else {})
    rows = con.execute(FLOOR_SQL, {"files": files, "max_object_size": buffer}).fetchall()
    con.close()
    wall = time.perf_counter() - t0
    return {"wall_s": round(wall, 3), "days": len(rows), "lines": sum(r[1] for r in rows),
            "matches_manifests": _matches_manifests(files, rows)}


def _floor_merges(args: argparse.Namespace) -> dict[str, Any]:
    """The floor's query with its merge now and as it was (FLOOR_WINDOW_SQL), alternated `--runs` times each on the
    same files: their medians, and that both give every manifest's controls."""
    import duckdb

    from atlasmart_assets.raw_files import object_size

    files = _window_files(args)
    params = {"files": files, "max_object_size": object_size(map(Path, files))}
    walls: dict[str, list[float]] = {"losers (the floor)": [], "window (before 2026-12-07)": []}
    matches = {}
    for _ in range(args.runs):
        for name, query in zip(walls, (FLOOR_SQL, FLOOR_WINDOW_SQL)):
            t0 = time.perf_counter()
            con = duckdb.connect()
            rows = con.execute(query, params).fetchall()
            con.close()
            walls[name].append(round(time.perf_counter() - t0, 3))
            matches[name] = _matches_manifests(files, rows)
    out = {name: {"median_s": statistics.median(w), "walls": w, "matches_manifests": matches[name]}
           for name, w in walls.items()}
    print(json.dumps(out, indent=1))
    return out


# The write floor: the least a first load writes in this storage layout (tables of a DuckDB file, DuckDB's own
# compression, AtlasMart's connection settings), with nothing else. The window's lines read as the floor reads them
# (with every field raw.order_lines stores) and written once, in one statement, into a table with raw.order_lines'
# columns (as received); then the staged lines (merged on line_id, the order's time, the customer version valid at
# it) written once into a second table with the version store's columns; then the six controls per day read from
# them. No typing checks, audits, ledger, chunks under a lock or Dagster: what is left of a first load above this is
# what AtlasMart does besides writing its two layers once. Like the floor, it reads each day's first batch file
# (raw/partition=D.json) and customers.json, and takes every record for an upsert (the bench's evidence holds no
# retraction).
WRITE_FLOOR_RAW_SQL = """
create table raw_lines as
select
    partition_date,
    line.line_id,
    line.order_id,
    line.customer_id,
    line.sku,
    line.quantity,
    line.unit_price,
    line.unit_cost,
    timezone('UTC', line.event_time) as event_time,
    line.source_sequence,
    extraction_batch,
    coalesce(line.op, 'upsert') as op
from (
    select
        cast(manifest.partition as date) as partition_date,
        manifest.extraction_batch as extraction_batch,
        unnest(lines) as line
    from read_json($files, format = 'unstructured', maximum_object_size = $max_object_size,
        columns = {manifest: 'struct(partition varchar, extraction_batch varchar)',
                   lines: 'struct(op varchar, line_id varchar, order_id varchar, customer_id varchar, sku varchar,
                                  quantity bigint, unit_price decimal(18, 2), unit_cost decimal(18, 2),
                                  event_time timestamptz, source_sequence bigint)[]'})
)
"""

# The merge as AtlasMart does it (merge_losers.sql, less the snapshots' retractions: one batch a day): the few
# records that lose, found among the keys held more than once, listed apart; a window over every record (the read
# floor's merge) made a year's staged write 5.8-6.6 s at the 1 GB memory limit, against 4.2-4.7 s this way.
WRITE_FLOOR_LOSERS_SQL = """
create temp table losers as
with repeated as (
    select hash(partition_date, line_id) as key_hash
    from raw_lines
    group by key_hash
    having count(*) > 1
)
select lines.rowid as row_id
from raw_lines as lines
semi join repeated on hash(lines.partition_date, lines.line_id) = repeated.key_hash
qualify row_number() over (partition by partition_date, line_id order by source_sequence desc) > 1
"""

WRITE_FLOOR_STAGED_SQL = """
create table staged_lines as
with latest as not materialized (
    select lines.*
    from raw_lines as lines
    anti join losers on lines.rowid = losers.row_id
),
customers as (
    select
        c.customer_id, c.country, c.tier,
        cast(c.valid_from as timestamp) as valid_from,
        cast(c.valid_to as timestamp) as valid_to
    from (
        select unnest(customers) as c
        from read_json($customers, columns = {customers: 'struct(customer_id varchar, country varchar,
                                                                tier varchar, valid_from varchar, valid_to varchar)[]'})
    )
),
orders as (
    select partition_date, order_id, min(event_time) as order_time
    from latest
    group by partition_date, order_id
)
select
    'write-floor' as publication_id, 1 as version,
    latest.partition_date, latest.line_id, latest.order_id, latest.customer_id,
    coalesce(customers.country, 'unknown') as country, coalesce(customers.tier, 'unknown') as tier,
    latest.sku, latest.quantity, latest.unit_price, latest.unit_cost, orders.order_time,
    latest.event_time, latest.source_sequence
from latest
inner join orders using (partition_date, order_id)
left join customers
    on latest.customer_id = customers.customer_id
    and orders.order_time >= customers.valid_from
    and (customers.valid_to is null or orders.order_time < customers.valid_to)
"""


def write_floor_tables(con: duckdb.DuckDBPyConnection, files: list[str], customers: Path) -> tuple[float, float]:
    """The write floor's two writes into `con` (raw_lines, then staged_lines); the seconds each took."""
    from atlasmart_assets.raw_files import object_size

    t0 = time.perf_counter()
    con.execute(WRITE_FLOOR_RAW_SQL, {"files": files, "max_object_size": object_size(map(Path, files))})
    t1 = time.perf_counter()
    con.execute(WRITE_FLOOR_LOSERS_SQL)
    con.execute(WRITE_FLOOR_STAGED_SQL, {"customers": str(customers)})
    return t1 - t0, time.perf_counter() - t1


def _write_floor(args: argparse.Namespace) -> dict[str, Any]:
    """The write floor (WRITE_FLOOR_RAW_SQL), into a fresh database file beside --out, removed afterwards, on a
    connection with AtlasMart's own settings (its memory limit; insertion order not kept)."""
    import duckdb

    from atlasmart_assets.resources import Warehouse

    files = _window_files(args)
    db = Path(args.out).with_suffix(".write-floor.duckdb")
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    config = Warehouse().duckdb_config()
    try:
        t0 = time.perf_counter()
        con = duckdb.connect(str(db), config=config)
        raw_s, staged_s = write_floor_tables(con, files, Path(args.raw_dir) / "customers.json")
        rows = con.execute(CONTROLS_SQL.format(relation="staged_lines")).fetchall()
        raw_rows = con.execute("select count(*) from raw_lines").fetchone()[0]
        con.close()
        wall = time.perf_counter() - t0
        size = db.stat().st_size
    finally:
        for done in (db, db.with_name(db.name + ".wal")):
            done.unlink(missing_ok=True)
    return {"wall_s": round(wall, 3), "raw_s": round(raw_s, 3), "staged_s": round(staged_s, 3),
            "days": len(rows), "raw_rows": raw_rows, "staged_rows": sum(r[1] for r in rows), "file_bytes": size,
            "memory_limit": config.get("memory_limit"), "matches_manifests": _matches_manifests(files, rows)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=("chain", "floor", "write_floor", "floor_merges"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--start", required=True)
    parser.add_argument("--end")
    parser.add_argument("--raw-dir")
    parser.add_argument("--backfill", help="dagster/backfill tag value; without it the run carries the current lane's tags")
    parser.add_argument("--rederive", help="atlasmart/rederive tag value: every day of the window is built again")
    parser.add_argument("--per-partition", action="store_true", help="one single-partition run per day of start..end")
    parser.add_argument("--runs", type=int, default=1, help="runs of the window (with --until-file: at least this many)")
    parser.add_argument("--until-file", help="keep running the window until this file exists")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait (after imports) before the first run")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between two runs")
    args = parser.parse_args(argv)
    result = {"chain": _chain_runs, "floor": _floor, "write_floor": _write_floor,
              "floor_merges": _floor_merges}[args.mode](args)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
