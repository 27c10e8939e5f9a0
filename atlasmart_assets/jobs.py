"""Jobs: the daily chain (what the schedule runs), the operator's rollback, and the backfill plan."""


import dagster as dg

from atlasmart_assets import chart, plan
from atlasmart_assets import rollback as rollback_mod
from atlasmart_assets.assets.graph import asset_graph
from atlasmart_assets.checks.freshness import revenue_daily_newest_partition_fresh
from atlasmart_assets.contract import RAW_CUSTOMERS
from atlasmart_assets.resources import Warehouse

HISTORY_SCAN = dg.AssetCheckKey(dg.AssetKey(["fact", "fct_order_lines"]),
                                "fct_order_lines_published_history_free_of_suppressed_keys")
# The all-history scan and the freshness check (which judges the newest day, not the run's window) run on their
# own schedule and sensor, never in a daily or backfill run.
CHAIN = (dg.AssetSelection.groups("raw", "staged", "fact", "mart") - dg.AssetSelection.assets(list(RAW_CUSTOMERS))
         - dg.AssetSelection.checks(HISTORY_SCAN) - dg.AssetSelection.checks(revenue_daily_newest_partition_fresh))

daily_job = dg.define_asset_job(
    "atlasmart_daily",
    selection=CHAIN,
    description="raw -> staged + fact + mart for a window, audited and published in one commit.",
)


observe_landing_job = dg.define_asset_job(
    "observe_landing_batches", selection=dg.AssetSelection.assets(["raw", "landing_batches"]),
    description="Observe the landing batches on disk: a day with a new batch gets a new data version.",
)

observe_landing_schedule = dg.ScheduleDefinition(
    name="atlasmart_observe_landing_batches", job=observe_landing_job, cron_schedule="*/10 * * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Every 10 minutes: new landing batches show as 'upstream changed' on the days they touch.",
)


suppression_scan_job = dg.define_asset_job(
    "scan_published_for_suppressed_keys",
    selection=dg.AssetSelection.checks(HISTORY_SCAN),
    description="Scan all published history for lines of a deletion request's subject.",
)

suppression_scan_schedule = dg.ScheduleDefinition(
    name="atlasmart_scan_published_for_suppressed_keys", job=suppression_scan_job, cron_schedule="30 3 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily: no published day may hold a line of a deletion request's subject (fails into Slack).",
)


class RollbackConfig(dg.Config):
    start: str
    end: str | None = None
    reason: str
    to_publication: str | None = None


@dg.op
def rollback_range(context: dg.OpExecutionContext, config: RollbackConfig, warehouse: Warehouse) -> None:
    """Restore an earlier publication of every partition in [start, end], in one atomic commit."""
    pub = rollback_mod.rollback(warehouse, config.start, config.end, config.reason, context.run.run_id,
                                config.to_publication)
    context.log.info(f"rolled back {pub.window}: publication {pub.publication_id}, partitions {pub.changed}")
    context.log_event(dg.AssetObservation(asset_key=["mart", "revenue_daily"], metadata={
        "rollback_publication_id": pub.publication_id, "window": str(pub.window),
        "restored": dg.MetadataValue.json({d: {"rows": c.rows, "controls": c.controls, "sha256": c.sha256}
                                           for d, c in pub.after.items()})}))


@dg.job(description="Undo corrections of a range: restores tables and extracts to an earlier publication "
                    "(default: one version back), recorded in the ledger.")
def rollback_job() -> None:
    rollback_range()


class PlanConfig(dg.Config):
    start: str
    end: str | None = None
    assets: list[str] = ["raw/order_lines"]
    fence_override: str | None = None


@dg.op
def plan_backfill(context: dg.OpExecutionContext, config: PlanConfig, warehouse: Warehouse) -> None:
    """Compute, without publishing, what a backfill of [start, end] would touch and change."""
    p = plan.make(warehouse, asset_graph(), config.start, config.end, config.assets,
                  fence_override=config.fence_override)
    text = plan.markdown(p)
    image = plan.png(p) if p.impact else None
    context.log.info(text)
    context.log_event(dg.AssetObservation(asset_key=["fact", "fct_order_lines"], metadata={
        "backfill_plan": dg.MetadataValue.md(text + ("\n\n" + chart.markdown_image(image, "rows and gmv") if image else "")),
        "plan": dg.MetadataValue.json(p.as_dict()),
        "partitions_changing": [d for d, i in p.impact.items() if i.changed],
        "refused_by_fence": p.refused,
    }))


@dg.job(description="Preview a backfill: scope, fence, downstream reach, neighbours and data impact. Publishes nothing.")
def plan_job() -> None:
    plan_backfill()
