"""Stale days: published days whose evidence changed since their publication (a new, changed or vanished landing
batch). Computed from the ledger's recorded batch set and the files on disk; writes nothing."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from atlasmart_assets import raw_files
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.window import Window


@dataclass(frozen=True)
class StaleDay:
    partition: str
    reasons: list[str]
    publication_id: str
    new_batches: list[str]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _reasons(raw_dir: Path, day: str, published: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    first = raw_files.path_for(raw_dir, day)
    by_id = {b["batch"]: b for b in published}
    reasons, new = [], []
    if published and first.is_file() and raw_files.sha256_of(first) != published[0]["sha256"]:
        reasons.append(f"first batch {first.name} changed since publication")
    later_ids = set()
    for path in raw_files.later_batches(raw_dir, day):
        later_ids.add(path.stem)
        seen = by_id.get(path.stem)
        if seen is None:
            new.append(path.stem)
            reasons.append(f"new batch {path.stem}")
        elif raw_files.sha256_of(path) != seen["sha256"]:
            reasons.append(f"batch {path.stem} changed since publication")
    for batch in published[1:]:
        if batch["batch"] not in later_ids:
            reasons.append(f"batch {batch['batch']} vanished")
    if published and not first.is_file():
        reasons.append(f"first batch {first.name} vanished")
    return reasons, new


def stale_days(wh: Warehouse, window: Window | None = None) -> list[StaleDay]:
    """Every published day (of `window`, default all) whose evidence on disk differs from what it published."""
    with wh.reader() as con:
        where = "where partition_date between $start and $end" if window else ""
        rows = con.execute(f"select partition_date, publication_id, input_batches from audit.current_publications "
                           f"{where} order by partition_date", window.params if window else {}).fetchall()
    out = []
    raw_dir = wh.settings.raw_dir
    for day, pub_id, batches in rows:
        if not batches:
            continue
        reasons, new = _reasons(raw_dir, day.isoformat(), json.loads(batches))
        if reasons:
            out.append(StaleDay(day.isoformat(), reasons, pub_id, new))
    return out
