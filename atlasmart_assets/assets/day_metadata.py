"""What the fact's and the mart's materializations of one published day carry, whoever published it (a correction
or a rollback): that asset's own figures, as a person reads them in the UI, and nothing another asset's event of the
same day carries already (a year's backfill or rollback writes 365 of each)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg

from atlasmart_assets.assets.common import controls_md
from atlasmart_assets.extracts import file_name
from atlasmart_assets.warehouse.ledger import Publication


def fact(pub: Publication, day: str) -> dict[str, Any]:
    """The fact's: its rows, its six controls before and after (with the sha256 the extract had, where it changed),
    whether the day's rows changed (its extract's content, or only lines the controls and the mart do not see),
    and the sha256 of the landing batches it was built from."""
    after, before = pub.after[day], pub.before.get(day)
    changed = day in pub.changed
    repaired = {"repaired": "its published rows differed from its ledger row (changed behind it): built again from "
                            "its evidence and written afresh; the controls compare ledger rows"} \
        if day in pub.repaired else {}
    return {
        "dagster/row_count": after.rows,
        "controls": controls_md(before.controls if before else None, after.controls,
                                before.sha256 if before and changed else None),
        "changed": changed or day in pub.lines_changed or bool(repaired),
        **repaired,
        "input_sha256": after.input_sha256 or "",
    }


def mart(pub: Publication, day: str, published_dir: Path) -> dict[str, Any]:
    """The mart's: its rows (those of the day's extract), and the extract with its sha256."""
    after = pub.after[day]
    return {"dagster/row_count": len(json.loads(after.extract_json)["rows"]), "sha256": after.sha256,
            "extract": dg.MetadataValue.path(str(published_dir / file_name(day)))}
