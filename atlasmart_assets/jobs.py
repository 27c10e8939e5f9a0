"""Jobs: the daily chain (what the schedule runs) and the operator's rollback of a range."""


import dagster as dg

from atlasmart_assets import rollback as rollback_mod
from atlasmart_assets.partitions import daily_partitions

CHAIN = dg.AssetSelection.groups("raw", "staged", "fact", "mart") - dg.AssetSelection.keys(["raw", "customers"])

daily_job = dg.define_asset_job(
    "atlasmart_daily",
    selection=CHAIN,
    partitions_def=daily_partitions,
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
