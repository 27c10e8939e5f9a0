"""The bench's two floors (bench/worker.py) compute what the raw manifests say, on generated evidence with
retransmitted lines (the merge decides the controls): a floor that computed anything else would not be a floor of
the same work."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from atlasmart_assets.generate import write_synthetic
from bench.worker import _floor, _write_floor

START = dt.date(2025, 9, 22)
DAYS = 4


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


def test_a_floor_that_disagrees_with_a_manifest_is_flagged(tmp_path: Path) -> None:
    raw = _evidence(tmp_path)
    day = raw / f"partition={(START + dt.timedelta(days=2)).isoformat()}.json"
    doc = json.loads(day.read_text())
    doc["manifest"]["controls"]["gmv"] += 1
    day.write_text(json.dumps(doc))
    assert _write_floor(_args(raw, tmp_path / "wf.json"))["matches_manifests"] is False
    assert _floor(_args(raw, tmp_path / "f.json"))["matches_manifests"] is False
