"""The merge rules of a day's landing batches, in plain Python: the generator writes cumulative controls with
them, and the tests use them as an oracle independent of the SQL that the pipeline runs.

Per line_id the record with the highest source_sequence wins; `"op": "delete"` retracts its line_id; a
snapshot batch retracts every line_id of the day it does not contain whose latest record has a lower
source_sequence than the snapshot's source_high_sequence. The first batch is read as a snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Batch:
    batch_id: str
    kind: str  # "snapshot" | "delta"
    source_high_sequence: int
    lines: Sequence[dict[str, Any]]


def merge(batches: Sequence[Batch]) -> dict[str, dict[str, Any]]:
    """line_id -> the surviving record of the day."""
    latest: dict[str, dict[str, Any]] = {}
    for batch in batches:
        for line in batch.lines:
            prev = latest.get(line["line_id"])
            if prev is None or line["source_sequence"] > prev["source_sequence"]:
                latest[line["line_id"]] = line
    alive = {k: v for k, v in latest.items() if v.get("op", "upsert") != "delete"}
    for batch in batches:
        if batch.kind != "snapshot":
            continue
        present = {line["line_id"] for line in batch.lines}
        for line_id, record in list(alive.items()):
            if line_id not in present and record["source_sequence"] < batch.source_high_sequence:
                del alive[line_id]
    return alive
