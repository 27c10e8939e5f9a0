"""The bench's two floors (bench/worker.py) compute what the raw manifests say, on generated evidence with
retransmitted lines (the merge decides the controls), and the write floor writes the rows a first load loads and
publishes: a floor that computed anything else would not be a floor of the same work."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import dagster as dg
import duckdb

from atlasmart_assets.generate import write_synthetic
from atlasmart_assets.lab import run_chain
from atlasmart_assets.raw_files import path_for
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.settings import Settings
from atlasmart_assets.window import Window
from bench.worker import _floor, _write_floor, write_floor_tables

START = dt.date(2025, 9, 22)
DAYS = 4
STAGED = ("partition_date, line_id, order_id, customer_id, country, tier, sku, quantity, unit_price, unit_cost, "
          "order_time, event_time, source_sequence")
RAW = ("partition_date, line_id, order_id, customer_id, sku, quantity, unit_price, unit_cost, event_time, "
       "source_sequence, extraction_batch, op")


def _evidence(tmp_path: Path) -> Path:
    raw = tmp_path / "raw"
    write_synthetic(raw, START, DAYS, 1000, 40)
    return raw


def _args(raw: Path, out: Path) -> argparse.Namespace:
    end = START + dt.timedelta(days=DAYS - 1)
    return argparse.Namespace(raw_dir=str(raw), start=START.isoformat(), end=end.isoformat(), out=str(out))


def _manifests(raw: Path) -> list[dict]:
    return [json.loads(p.read_text())["manifest"] for p in sorted(raw.glob("partition=*.json"))]


def test_the_write_floor_writes_every_record_and_the_merged_lines_with_the_manifests_controls(tmp_path: Path) -> None:
    raw = _evidence(tmp_path)
    manifests = _manifests(raw)
    # Retransmitted records (a lower sequence, another price) are what makes the merge matter.
    assert sum(m["records"] for m in manifests) > sum(m["controls"]["lines"] for m in manifests)
    got = _write_floor(_args(raw, tmp_path / "wf.json"))
    assert got["matches_manifests"] is True
    assert got["days"] == DAYS
    assert got["raw_rows"] == sum(m["records"] for m in manifests)
    assert got["staged_rows"] == sum(m["controls"]["lines"] for m in manifests)
    assert got["file_bytes"] > 0
    assert not list(tmp_path.glob("*.duckdb*")), "the write floor's database is removed after the measure"


def test_the_read_floor_matches_the_manifests(tmp_path: Path) -> None:
    raw = _evidence(tmp_path)
    got = _floor(_args(raw, tmp_path / "f.json"))
    assert got["matches_manifests"] is True
    assert got["lines"] == sum(m["controls"]["lines"] for m in _manifests(raw))


def test_the_floors_merge_now_and_before_give_the_same_controls(tmp_path: Path) -> None:
    """`python -m bench.worker floor_merges` compares the floor's merge with the one it had before 2026-12-07: both
    give every manifest's controls on evidence with retransmitted lines (only the time may differ)."""
    from bench.worker import _floor_merges

    raw = _evidence(tmp_path)
    got = _floor_merges(argparse.Namespace(**vars(_args(raw, tmp_path / "m.json")), runs=1))
    assert [g["matches_manifests"] for g in got.values()] == [True, True], got


def test_a_floor_that_disagrees_with_a_manifest_is_flagged(tmp_path: Path) -> None:
    raw = _evidence(tmp_path)
    day = raw / f"partition={(START + dt.timedelta(days=2)).isoformat()}.json"
    doc = json.loads(day.read_text())
    doc["manifest"]["controls"]["gmv"] += 1
    day.write_text(json.dumps(doc))
    assert _write_floor(_args(raw, tmp_path / "wf.json"))["matches_manifests"] is False
    assert _floor(_args(raw, tmp_path / "f.json"))["matches_manifests"] is False


def test_the_write_floor_writes_the_lines_a_first_load_publishes(env: Settings, instance: dg.DagsterInstance) -> None:
    """Row for row what a real first load publishes in staged.order_lines (the dimension's SCD2 versions and the
    order times included, which the controls never read) and loads in raw.order_lines: a floor of the same work."""
    start, end = "2026-09-01", "2026-09-10"
    assert run_chain(instance, start, end, {"dagster/backfill": "floors"}).success
    files = [str(path_for(env.raw_dir, day)) for day in Window.of(start, end).keys]
    con = duckdb.connect()
    try:
        write_floor_tables(con, files, env.raw_dir / "customers.json")
        with Warehouse().reader() as wh:
            published = wh.execute(f"select {STAGED} from staged.order_lines where partition_date between $s and $e "
                                   "order by all", {"s": start, "e": end}).fetchall()
            loaded = wh.execute(f"select {RAW} from raw.order_lines where partition_date between $s and $e "
                                "order by all", {"s": start, "e": end}).fetchall()
        floor_staged = con.execute(f"select {STAGED} from staged_lines order by all").fetchall()
        floor_raw = con.execute(f"select {RAW} from raw_lines order by all").fetchall()
    finally:
        con.close()
    assert len({r[5] for r in published}) > 1, "customers of several tiers"
    assert floor_staged == published
    assert floor_raw == loaded
