"""Raw evidence files: locate, fingerprint, parse and profile them, with errors that name file, partition and problem."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from atlasmart_assets import sql
from atlasmart_assets.contract import CONTROL_NAMES
from atlasmart_assets.window import Window

MANIFEST_FIELDS = ("partition", "source", "schema_version", "extraction_batch", "source_high_sequence", "records", "controls")
REQUIRED_FIELDS = ("line_id", "order_id", "customer_id", "sku", "quantity", "unit_price", "unit_cost", "event_time",
                   "source_sequence")


class RawInputError(Exception):
    """Raw evidence that cannot be loaded; the message names the file, the partition and the problem."""

    def __init__(self, path: Path, partition: str, problem: str) -> None:
        super().__init__(f"raw partition {partition} ({path}): {problem}")
        self.path, self.partition, self.problem = path, partition, problem


@dataclass(frozen=True)
class RawFile:
    partition: str
    path: Path
    sha256: str
    manifest: dict[str, Any]

    @property
    def controls(self) -> list[float]:
        return [self.manifest["controls"][name] for name in CONTROL_NAMES]


@dataclass(frozen=True)
class Finding:
    """One failed property of one raw file."""

    check: str
    partition: str
    path: Path
    problem: str


def path_for(raw_dir: Path, partition: str) -> Path:
    return raw_dir / f"partition={partition}.json"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _locate(raw_dir: Path, window: Window) -> dict[str, Path]:
    paths = {key: path_for(raw_dir, key) for key in window.keys}
    for key, path in paths.items():
        if not path.is_file():
            raise RawInputError(path, key, "raw file is missing (no evidence was extracted for this day)")
    return paths


def _mistyped(line: dict[str, Any]) -> str | None:
    """Why a typed field of one line cannot be read, or None."""
    for name in ("quantity", "source_sequence"):
        value = line.get(name)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool)):
            return f"{name} {value!r} is not an integer"
    for name in ("unit_price", "unit_cost"):
        value = line.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{name} {value!r} is not a number"
    value = line.get("event_time")
    if value is not None:
        try:
            dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return f"event_time {value!r} is not an ISO timestamp"
    return None


def _explain_parse_failure(paths: dict[str, Path], error: Exception) -> RawInputError:
    for key, path in paths.items():
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return RawInputError(path, key, f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            return RawInputError(path, key, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
        if not isinstance(doc, dict) or not isinstance(doc.get("lines"), list):
            return RawInputError(path, key, "not a raw partition document (expected an object with 'manifest' and a 'lines' list)")
        for i, line in enumerate(doc["lines"]):
            if not isinstance(line, dict):
                return RawInputError(path, key, f"line {i} is not an object")
            bad = _mistyped(line)
            if bad:
                return RawInputError(path, key, f"line {i} ({line.get('line_id')}): {bad}")
    # DuckDB's message names the file it could not read; blame that one, not the window's first.
    named = [(k, p) for k, p in paths.items() if str(p) in str(error)]
    key, path = named[0] if named else (None, None)
    if key is None:
        return RawInputError(Path(", ".join(str(p) for p in paths.values())), str(Window.of(min(paths), max(paths))),
                             f"DuckDB could not read the window's raw files: {error}")
    return RawInputError(path, key, f"DuckDB could not read this raw file: {error}")


def _manifest(path: Path, partition: str, text: str) -> dict[str, Any]:
    manifest = json.loads(text) if text else None
    if not isinstance(manifest, dict):
        raise RawInputError(path, partition, "manifest header is missing")
    missing = [f for f in MANIFEST_FIELDS if manifest.get(f) is None]
    if missing:
        raise RawInputError(path, partition, f"manifest lacks {', '.join(missing)}")
    if manifest["partition"] != partition:
        raise RawInputError(path, partition, f"manifest says partition {manifest['partition']}, file name says {partition}")
    controls = manifest["controls"]
    if not isinstance(controls, dict):
        raise RawInputError(path, partition, "manifest controls are not an object of the six named controls")
    absent = [c for c in CONTROL_NAMES if controls.get(c) is None]
    if absent:
        raise RawInputError(path, partition, f"manifest controls lack {', '.join(absent)}")
    mistyped = [c for c in CONTROL_NAMES if isinstance(controls[c], bool) or not isinstance(controls[c], (int, float))]
    if mistyped:
        raise RawInputError(path, partition, f"manifest controls {', '.join(mistyped)} are not numbers")
    return manifest


def load_window(con: duckdb.DuckDBPyConnection, raw_dir: Path, window: Window) -> list[RawFile]:
    """Fingerprint and parse the window's raw files into the scratch table candidate.raw_lines."""
    paths = _locate(raw_dir, window)
    files = [str(p) for p in paths.values()]
    try:
        headers = dict(con.execute(sql.text("raw_manifests"), {"files": files}).fetchall())
        con.execute(f"create or replace table candidate.raw_lines as {sql.text('raw_lines')}", {"files": files})
    except duckdb.Error as exc:
        raise _explain_parse_failure(paths, exc) from exc
    return [
        RawFile(key, path, sha256_of(path), _manifest(path, key, headers.get(str(path), "")))
        for key, path in paths.items()
    ]


def _num(value: Any) -> float:
    return float(value) if value is not None else 0.0


def profile(con: duckdb.DuckDBPyConnection, raw_files: list[RawFile]) -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """Per partition figures of the loaded lines, and every shape or control mismatch found in them."""
    cur = con.execute(sql.text("raw_profile"))
    names = [d[0] for d in cur.description]
    by_file = {row[0]: dict(zip(names, row)) for row in cur.fetchall()}
    figures: dict[str, dict[str, Any]] = {}
    findings: list[Finding] = []
    for rf in raw_files:
        fig = by_file.get(str(rf.path), {"records": 0})
        controls = [_num(fig.get(c)) for c in CONTROL_NAMES]
        figures[rf.partition] = {"records": fig.get("records", 0), "controls": controls}
        gaps = [f"{fig[f'missing_{f}']} lines lack {f}" for f in REQUIRED_FIELDS if fig.get(f"missing_{f}")]
        if gaps:
            findings.append(Finding("raw_order_lines_required_fields_present", rf.partition, rf.path,
                                    f"schema_version {rf.manifest.get('schema_version')}: " + "; ".join(gaps)))
        if fig.get("invalid_values"):
            findings.append(Finding("raw_order_lines_values_valid", rf.partition, rf.path,
                                    f"{fig['invalid_values']} lines hold invalid values, e.g. {fig['first_invalid']}"))
        expected = [float(x) for x in rf.controls]
        if fig.get("records", 0) != rf.manifest["records"] or controls != expected:
            findings.append(Finding(
                "raw_order_lines_match_manifest", rf.partition, rf.path,
                f"manifest says records={rf.manifest['records']} controls={expected}, "
                f"lines give records={fig.get('records', 0)} controls={controls}"))
    return figures, findings
