"""What every partitioned asset does first: resolve its window, respect the fence, flag a correction."""

from __future__ import annotations

from dataclasses import dataclass

import dagster as dg

from atlasmart_assets import __version__, failpoints, lanes, settings, sql, warehouse
from atlasmart_assets.audits import Audit
from atlasmart_assets.settings import Settings
from atlasmart_assets.window import RunInfo, Window, run_info, window_of

CODE_VERSION = f"{__version__}+{sql.fingerprint()}"
BACKFILL_POLICY = dg.BackfillPolicy.single_run()
SCRATCH_MAX_AGE_S = 24 * 3600


@dataclass(frozen=True)
class Step:
    cfg: Settings
    window: Window
    run: RunInfo


def begin(context: dg.AssetExecutionContext) -> Step:
    """Window and identity of this step; refuses a fenced backfill before anything is written."""
    failpoints.gate(context.op_def.name, context.run.run_id)
    window = window_of(context)
    lanes.fence(window, context.run.tags)
    warehouse.LOCK_STATS.reset()
    step = Step(settings.load(), window, run_info(context))
    warehouse.limit_threads(step.cfg.backfill_threads if step.run.backfill_id else None)
    warehouse.prune_scratch(step.cfg, SCRATCH_MAX_AGE_S)
    if step.run.backfill_id:
        warehouse.mark_in_progress(step.cfg, window, step.run)
    return step


def check_result(audit: Audit) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        asset_key=dg.AssetKey(list(audit.asset)),
        check_name=audit.check,
        passed=audit.passed,
        severity=dg.AssetCheckSeverity.ERROR if audit.severity == "ERROR" else dg.AssetCheckSeverity.WARN,
        description=audit.description[:2000],
        metadata={"figures": dg.MetadataValue.json(audit.figures)},
    )


def refuse(step: Step, audits: list[Audit]) -> None:
    """Fail the step (nothing published) when a blocking audit failed."""
    blocking = [a for a in audits if a.blocks]
    if blocking:
        if step.run.backfill_id:
            warehouse.clear_in_progress(step.cfg, step.run.run_id)
        raise dg.Failure(
            description=f"Not published ({step.window}): " + " | ".join(f"{a.check}: {a.description}" for a in blocking),
            metadata={"failed_audits": [a.check for a in blocking]},
        )


def has_table(con, name: str) -> bool:  # noqa: ANN001 - a duckdb connection
    return bool(con.execute("select count(*) from information_schema.tables where table_name = ?", [name]).fetchone()[0])
