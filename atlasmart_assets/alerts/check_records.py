"""Asset check executions from the instance's event log: the only module that touches Dagster's internal
check-record API (dagster._core.storage.asset_check_execution_record), so an upgrade breaks one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.storage.asset_check_execution_record import (
    AssetCheckExecutionRecord,
    AssetCheckExecutionRecordStatus,
)

PAGE = 200


@dataclass(frozen=True)
class CheckRecord:
    """One row of the check-execution table: PLANNED until its result arrives, then SUCCEEDED or FAILED."""

    key: dg.AssetCheckKey
    id: int
    run_id: str
    status: str
    partition: str | None
    passed: bool | None
    severity: str | None
    blocking: bool | None
    description: str | None
    metadata: dict[str, Any]
    created: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == AssetCheckExecutionRecordStatus.FAILED.value

    @property
    def planned(self) -> bool:
        return self.status == AssetCheckExecutionRecordStatus.PLANNED.value


def _record(r: AssetCheckExecutionRecord) -> CheckRecord:
    ev = r.evaluation if r.status != AssetCheckExecutionRecordStatus.PLANNED else None
    return CheckRecord(
        key=r.key, id=r.id, run_id=r.run_id, status=r.status.value, partition=r.partition,
        passed=getattr(ev, "passed", None),
        severity=ev.severity.value if ev is not None and ev.severity is not None else None,
        blocking=getattr(ev, "blocking", None),
        description=getattr(ev, "description", None),
        metadata={k: getattr(v, "value", v) for k, v in (ev.metadata if ev is not None else {}).items()},
        created=r.create_timestamp,
    )


def records_after(instance: dg.DagsterInstance, key: dg.AssetCheckKey, after_id: int) -> list[CheckRecord]:
    """Every execution record of `key` with id > after_id, oldest first (the storage pages newest first)."""
    storage = instance.event_log_storage
    found: list[CheckRecord] = []
    cursor: int | None = None
    while True:
        page = storage.get_asset_check_execution_history(key, limit=PAGE, cursor=cursor)
        fresh = [r for r in page if r.id > after_id]
        found.extend(_record(r) for r in fresh)
        if len(page) < PAGE or len(fresh) < len(page):
            break
        cursor = page[-1].id
    return sorted(found, key=lambda r: r.id)
