"""Undo a correction: restore each partition's previous publication in one commit, recorded as a rollback."""

from __future__ import annotations

from atlasmart_assets import settings, warehouse
from atlasmart_assets.assets.common import CODE_VERSION
from atlasmart_assets.window import RunInfo, Window


def rollback(start: str, end: str | None, reason: str, run_id: str) -> warehouse.Publication:
    if not reason.strip():
        raise ValueError("a rollback needs a reason (it is recorded in the ledger)")
    cfg = settings.load()
    window = Window.of(start, end)
    scratch = warehouse.scratch_path(cfg, run_id)
    after, targets, now = warehouse.restore_candidates(cfg, scratch, window)
    return warehouse.publish(cfg, scratch, window, RunInfo(run_id, None, reason), CODE_VERSION, after, now,
                             kind="rollback", fact_source="fct_restore", mart_source="mart_restore", restored=targets)
