"""Jobs: the daily chain (what the schedule runs) and the operator's rollback of a range."""


import dagster as dg

from atlasmart_assets import chart, plan
from atlasmart_assets import rollback as rollback_mod

CHAIN = dg.AssetSelection.groups("raw", "staged", "fact", "mart") - dg.AssetSelection.assets(["raw", "customers"])

daily_job = dg.define_asset_job(
    "atlasmart_daily",
    selection=CHAIN,
    description="raw -> staged -> fact + mart for a window, audited and published in one commit.",
)


class RollbackConfig(dg.Config):
    start: str
    end: str | None = None
    reason: str


@dg.op
def rollback_range(context: dg.OpExecutionContext, config: RollbackConfig) -> None:
    """Restore the previous publication of every partition in [start, end], in one atomic commit."""
    pub = rollback_mod.rollback(config.start, config.end, config.reason, context.run.run_id)
    context.log.info(f"rolled back {pub.window}: publication {pub.publication_id}, partitions {pub.changed}")
    context.log_event(dg.AssetObservation(asset_key=["mart", "revenue_daily"], metadata={
        "rollback_publication_id": pub.publication_id, "window": str(pub.window),
        "restored": dg.MetadataValue.json({d: {"rows": c.rows, "controls": c.controls, "sha256": c.sha256}
                                           for d, c in pub.after.items()})}))


@dg.job(description="Undo the latest publication of a range: restores tables and extracts, recorded in the ledger.")
def rollback_job() -> None:
    rollback_range()


class PlanConfig(dg.Config):
    start: str
    end: str | None = None
    assets: list[str] = ["raw/order_lines"]
    fence_override: str | None = None


@dg.op
def plan_backfill(context: dg.OpExecutionContext, config: PlanConfig) -> None:
    """Compute, without publishing, what a backfill of [start, end] would touch and change."""
    p = plan.make(config.start, config.end, config.assets, fence_override=config.fence_override)
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
