"""What the asset adapters share: audits as Dagster check results, refusal as a step failure, the backfill policy,
how much of the machine a step takes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Sequence

import dagster as dg

from atlasmart_assets import capacity
from atlasmart_assets.alerts.format import difference, figure_lines, md, num, signed
from atlasmart_assets.audits import Audit
from atlasmart_assets.contract import CODE_VERSION, CONTROL_NAMES
from atlasmart_assets.event_budget import READABLE_MAX_BYTES, bounded_figures, cut_text
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunScope

POLICY_ENV = "ATLASMART_BACKFILL_POLICY"


def backfill_policy(value: str) -> dg.BackfillPolicy | None:
    """`single_run` (the default: a backfill is one ranged run, audited and published at once) or `per_partition`
    (Dagster's default of one run per partition; the bench's comparison of what an operator waits for)."""
    if value == "single_run":
        return dg.BackfillPolicy.single_run()
    if value == "per_partition":
        return None
    raise ValueError(f"{POLICY_ENV}={value!r} is neither 'single_run' nor 'per_partition'")


BACKFILL_POLICY = backfill_policy(os.environ.get(POLICY_ENV, "single_run"))
SCRATCH_MAX_AGE_S = 24 * 3600
KINDS = {"duckdb"}

__all__ = ["BACKFILL_POLICY", "CODE_VERSION", "KINDS", "SCRATCH_MAX_AGE_S", "check_result", "controls_md", "refuse"]


REFUSAL_MAX_BYTES = 4000


def check_result(audit: Audit, extra: dict[str, float] | None = None) -> dg.AssetCheckResult:
    """The audit as Dagster's check result; its figures and text cut to the event budget (event_budget.py), so one
    check event stays small however long the window. `extra`: figures of the step that evaluated it (its lock
    figures)."""
    figures = bounded_figures(audit.figures)
    return dg.AssetCheckResult(
        asset_key=dg.AssetKey(list(audit.asset)),
        check_name=audit.check,
        passed=audit.passed,
        severity=dg.AssetCheckSeverity.ERROR if audit.severity == "ERROR" else dg.AssetCheckSeverity.WARN,
        description=cut_text(audit.description),
        metadata={"figures": dg.MetadataValue.json(figures), "figures_readable": _figures_md(figures),
                  **(extra or {})},
    )


def _figures_md(figures: object) -> dg.MarkdownMetadataValue:
    """The figures one line per day or key (controls named, with deltas), for a person; `figures` stays the JSON
    the alerts read."""
    lines = figure_lines(figures, md)
    return dg.MetadataValue.md(cut_text("\n".join(f"- {line}" for line in lines), READABLE_MAX_BYTES) if lines
                               else "(no figures)")


def refuse(window: str, audits: list[Audit]) -> None:
    """Fail the step (nothing published) when a blocking audit failed."""
    blocking = [a for a in audits if a.blocks]
    if blocking:
        text = " | ".join(f"{a.check}: {cut_text(a.description, 500)}" for a in blocking)
        raise dg.Failure(
            description=cut_text(f"Not published ({window}): {text}", REFUSAL_MAX_BYTES),
            metadata={"failed_audits": [a.check for a in blocking]},
        )


def controls_md(before: Sequence[float] | None, after: Sequence[float],
                sha256_before: str | None = None) -> dg.MarkdownMetadataValue:
    """A day's six controls as the UI shows markdown: control, before, after, change; and, when the extract
    changed, the sha256 it had. Markdown, not Dagster's table value: the table carries its schema in every
    partition's event (1.6 KB a day, a year's backfill writes 365 of them)."""
    lines = ["| control | before | after | change |", "|---|---:|---:|---:|"]
    for i, name in enumerate(CONTROL_NAMES):
        b = float(before[i]) if before is not None and i < len(before) else None
        a = float(after[i])
        change = "new" if b is None else signed(difference(a, b))
        lines.append(f"| {name} | {num(b)} | {num(a)} | {change} |")
    if sha256_before:
        lines.append(f"\nsha256 before: `{sha256_before}`")
    return dg.MetadataValue.md("\n".join(lines))


@dataclass(frozen=True)
class StepCapacity:
    """What a step may take of the machine (capacity.py): a backfill's DuckDB threads, its scratch work lowered
    (CPU priority, cores beside today's load) and its give-way before each warehouse hold; today's load takes all."""

    threads: int | None
    niceness: int
    lowered: capacity.Lowered | None
    give_way: capacity.GiveWay | None


def window_log(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext,
               scope: RunScope) -> Callable[[str], None]:
    """A line about the step's window for its log, as a wait for today's load says it begins and ends (through
    capacity.tell, which drops a line that cannot be logged)."""
    def say(line: str) -> None:
        context.log.info(f"{scope.window}: {line}")
    return say


def step_capacity(context: dg.AssetExecutionContext, warehouse: Warehouse, scope: RunScope) -> StepCapacity:
    """The step's capacity, logged once at its start."""
    cfg = warehouse.settings
    backfill = scope.is_backfill
    own = context.run.run_id
    threads = capacity.backfill_threads(context.instance, cfg.backfill_threads, own) if backfill else None
    lowered_by = cfg.backfill_nice if backfill else 0
    niceness = capacity.niceness_of(lowered_by)
    context.log.info(f"{scope.window}: {len(scope.window.keys)} day(s), lane {scope.lane}, DuckDB threads "
                     f"{threads or 'all cores'}, CPU niceness of the scratch work {niceness}")
    say = window_log(context, scope)
    return StepCapacity(
        threads, niceness,
        capacity.Lowered.of_run(context, cfg, say) if backfill else None,
        capacity.GiveWay.of_run(context, cfg, say) if backfill else None)
