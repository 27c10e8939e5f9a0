"""staged.order_lines + fact.fct_order_lines + mart.revenue_daily (+ the published extracts): one multi-asset, so
that a correction builds candidates, audits them and commits all three layers and the ledger at once."""

from typing import Callable, Iterator

import dagster as dg

from atlasmart_assets import attempts, capacity, correction, failpoints, notices
from atlasmart_assets.assets.common import (
    BACKFILL_POLICY,
    CODE_VERSION,
    KINDS,
    SCRATCH_MAX_AGE_S,
    StepCapacity,
    check_result,
    refuse,
    step_capacity,
)
from atlasmart_assets.assets import day_metadata
from atlasmart_assets.assets.raw import customers, raw_order_lines
from atlasmart_assets.assets.schemas import FACT_SCHEMA, MART_SCHEMA, STAGED_SCHEMA
from atlasmart_assets.change_chart import change_chart
from atlasmart_assets.contract import FCT_ORDER_LINES, OWNERS, REVENUE_DAILY, STAGED_ORDER_LINES, shown_id
from atlasmart_assets.notices import notice_path
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.progress import Progress
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunScope, scope_of_context


def _is_finished(instance: dg.DagsterInstance) -> Callable[[str], bool]:
    def finished(run_id: str) -> bool:
        run = instance.get_run_by_id(run_id)
        return run is None or run.is_finished
    return finished


@dg.multi_asset(
    specs=[
        dg.AssetSpec(list(STAGED_ORDER_LINES), group_name="staged", deps=[raw_order_lines, customers],
                     code_version=CODE_VERSION, kinds=KINDS, owners=OWNERS,
                     metadata={"dagster/table_name": "staged.order_lines", "dagster/column_schema": STAGED_SCHEMA},
                     description="Typed order lines, deduplicated on line_id (latest source_sequence), joined to the "
                                 "customer's SCD2 version valid at order time. Grain: one row per line_id and day."),
        dg.AssetSpec(list(FCT_ORDER_LINES), group_name="fact", deps=[list(STAGED_ORDER_LINES)],
                     code_version=CODE_VERSION, kinds=KINDS, owners=OWNERS,
                     metadata={"dagster/table_name": "fact.fct_order_lines", "dagster/column_schema": FACT_SCHEMA},
                     description="Order lines with their money figures. Grain: one row per order line (business key "
                                 "line_id)."),
        dg.AssetSpec(list(REVENUE_DAILY), group_name="mart", deps=[list(FCT_ORDER_LINES)],
                     code_version=CODE_VERSION, kinds=KINDS, owners=OWNERS,
                     metadata={"dagster/table_name": "mart.revenue_daily", "dagster/column_schema": MART_SCHEMA},
                     description="Revenue per day, country and tier, and the certified extracts "
                                 "published/partition=D.json. Grain: one row per day x country x tier."),
    ],
    # Each blocks the publish, but the one that only tells a person what changed (WARN): the UI labels it so.
    check_specs=[dg.AssetCheckSpec(name, asset=list(asset), blocking=name not in correction.WARN_ONLY, description=text)
                 for name, (asset, text) in correction.CHECKS.items()],
    partitions_def=daily_partitions, backfill_policy=BACKFILL_POLICY, name="correction",
)
def correction_asset(context: dg.AssetExecutionContext,
                     warehouse: Warehouse) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    scope = scope_of_context(context)
    failpoints.gate(context.op_def.name, scope.run.run_id)
    scope.enforce_fence()
    warehouse.prune_scratch(SCRATCH_MAX_AGE_S)
    cap = step_capacity(context, warehouse, scope)
    progress = Progress(context.log.info, f"correction {scope.window}", correction.PHASES + (correction.EVENTS_PHASE,))
    with progress.stopping():  # the events phase too: a run stopped while Dagster writes them says so
        yield from _correct_and_report(context, warehouse, scope, cap, progress)


def _correct_and_report(context: dg.AssetExecutionContext, warehouse: Warehouse, scope: RunScope, cap: StepCapacity,
                        progress: Progress) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    """Build, audit and publish the window, then its check results and each day's materializations."""
    outcome = correction.correct(warehouse, scope, _is_finished(context.instance), cap.threads,
                                 give_way=cap.give_way, lowered=cap.lowered, progress=progress)
    if outcome.publication is not None:
        progress.writing_events(f"{len(outcome.audits)} check results and "
                                f"{3 * len(outcome.publication.after):,} partition materializations")
    yield from (check_result(a) for a in outcome.audits)
    refuse(str(scope.window), outcome.audits)
    pub = outcome.publication
    assert pub is not None
    # A retry's publish repeats what an earlier attempt committed: its events tell the change since before that one,
    # and so does its notice (a backfill's covers every publication of the backfill already; Dagster drops the
    # backfill's tag from a run re-executed once the backfill is over).
    since = correction.since_earlier_attempts(warehouse, pub, attempts.earlier(context.instance, context.run),
                                              outcome.stats)
    pub = since.publication
    cfg = warehouse.settings
    if since.attempts and not scope.run.backfill_id:
        with warehouse.reader(stats=outcome.stats) as con:
            notices.write(cfg, con, pub.publication_id, scope.run, also=since.attempts)
    path = notice_path(cfg, scope.run.backfill_id or pub.publication_id)
    notice = {"change_notice": dg.MetadataValue.path(str(path))} if path.exists() else {}
    try:
        image = change_chart(pub)
    except Exception as exc:  # noqa: BLE001 - the publication is committed; a chart must never fail it
        context.log.warning(f"change chart not drawn: {type(exc).__name__}: {exc}")
        image = None
    for day in sorted(pub.after):
        staged = outcome.staged.get(day, {"rows": 0, "unresolved_customers": 0})
        context.add_asset_metadata({"dagster/row_count": staged["rows"],
                                    "unresolved_customers": staged["unresolved_customers"]},
                                   asset_key=list(STAGED_ORDER_LINES), partition_key=day)
        context.add_asset_metadata(day_metadata.fact(pub, day), asset_key=list(FCT_ORDER_LINES), partition_key=day)
        context.add_asset_metadata(day_metadata.mart(pub, day, cfg.published_dir), asset_key=list(REVENUE_DAILY),
                                   partition_key=day)
    # The run's own figures (publication, notice, chart) go once, on the newest day's event: Dagster copies a ranged
    # MaterializeResult's metadata into every partition's event, which grows the event log with days x days.
    newest = max(pub.after)
    common = {"window": str(scope.window), "publication_id": pub.publication_id, "code_version": CODE_VERSION,
              "backfill_id": shown_id(scope.run.backfill_id or ""), "changed_partitions": len(pub.changed),
              "lines_changed_partitions": len(pub.lines_changed), "repaired_partitions": len(pub.repaired),
              "publish_lock_hold_s": round(pub.lock_hold_s, 3), "cpu_niceness": cap.niceness,
              "cores_yielded_s": capacity.yielded_s(cap.lowered),
              "scratch_paused_s": capacity.paused_s(cap.lowered), **outcome.stats.figures()}
    for key in (STAGED_ORDER_LINES, FCT_ORDER_LINES):
        context.add_asset_metadata(common, asset_key=list(key), partition_key=newest)
    chart_entry = {"change_chart": dg.MetadataValue.md(image)} if image else {}
    context.add_asset_metadata({**common, **notice, **chart_entry}, asset_key=list(REVENUE_DAILY),
                               partition_key=newest)
    for key in (STAGED_ORDER_LINES, FCT_ORDER_LINES, REVENUE_DAILY):
        yield dg.MaterializeResult(asset_key=list(key))
    # Runs once Dagster has written the events of the last result yielded.
    progress.done("events", f"{3 * len(pub.after):,} partition materializations ({len(pub.after)} day(s) x 3 assets), "
                            f"{len(outcome.audits)} check results" + (", the change chart" if image else ""))
