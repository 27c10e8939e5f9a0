"""What the asset adapters share: audits as Dagster check results, refusal as a step failure, the backfill policy."""

from __future__ import annotations

import dagster as dg

from atlasmart_assets.audits import Audit
from atlasmart_assets.contract import CODE_VERSION

BACKFILL_POLICY = dg.BackfillPolicy.single_run()
SCRATCH_MAX_AGE_S = 24 * 3600
KINDS = {"duckdb"}

__all__ = ["BACKFILL_POLICY", "CODE_VERSION", "KINDS", "SCRATCH_MAX_AGE_S", "check_result", "refuse"]


def check_result(audit: Audit) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        asset_key=dg.AssetKey(list(audit.asset)),
        check_name=audit.check,
        passed=audit.passed,
        severity=dg.AssetCheckSeverity.ERROR if audit.severity == "ERROR" else dg.AssetCheckSeverity.WARN,
        description=audit.description[:2000],
        metadata={"figures": dg.MetadataValue.json(audit.figures)},
    )


def refuse(window: str, audits: list[Audit]) -> None:
    """Fail the step (nothing published) when a blocking audit failed."""
    blocking = [a for a in audits if a.blocks]
    if blocking:
        raise dg.Failure(
            description=f"Not published ({window}): " + " | ".join(f"{a.check}: {a.description}" for a in blocking),
            metadata={"failed_audits": [a.check for a in blocking]},
        )
