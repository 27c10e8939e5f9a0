"""When the code location starts: point `published` at the version the ledger committed, if a run was killed
between its commit and the symlink swap. Best effort: a busy warehouse is left to the next publish."""

from __future__ import annotations

import logging

from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse.connection import is_lock_conflict
from atlasmart_assets.warehouse.publish import recover_extracts

LOAD_TIMEOUT_S = 2.0
log = logging.getLogger(__name__)


def recover_on_load(wh: Warehouse) -> bool:
    try:
        if not wh.settings.warehouse_path.exists():
            return False
        with wh.reader(timeout_s=LOAD_TIMEOUT_S) as con:
            moved = recover_extracts(wh, con)
    except Exception as exc:  # noqa: BLE001 - loading the code location must not fail on a busy or odd warehouse
        if not is_lock_conflict(exc):
            log.warning("atlasmart: extract recovery skipped at load: %s", exc)
        return False
    if moved:
        log.warning("atlasmart: `published` re-pointed at the committed version after an interrupted publish")
    return moved
