"""Jobs: the daily chain (what the schedule runs), the operator's rollback, and the backfill plan."""


import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import dagster as dg
from pydantic import Field

from atlasmart_assets import attempts, capacity, event_storage, notices, plan, sql
from atlasmart_assets import rollback as rollback_mod
from atlasmart_assets.alerts.format import short_window
from atlasmart_assets.assets import day_metadata
from atlasmart_assets.assets.graph import asset_graph
from atlasmart_assets.checks.freshness import revenue_daily_newest_partition_fresh
from atlasmart_assets.contract import (
    FCT_ORDER_LINES,
    KIND_TAG,
    LAUNCHED_FROM_TAG,
    RAW_CUSTOMERS,
    REVENUE_DAILY,
)
from atlasmart_assets.progress import Progress
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse.connection import LockStats
from atlasmart_assets.warehouse.ledger import Publication

# `atlasmart rollback` tags its run so (cli.py): the rollback's lines then also go to the terminal.
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
    start: str = Field(description="First partition to roll back (YYYY-MM-DD).")
    end: str | None = Field(default=None, description="Last partition (YYYY-MM-DD); default: start alone.")
    reason: str = Field(description="Why: recorded in the ledger, the notice and the Slack message.")
    to_publication: str | None = Field(default=None, description="Restore this publication id; default: one "
                                                                  "version back per partition.")


def _restored_metadata(pub: Publication, day: str, restored_from: str | None, unresolved: int,
                       asset: tuple[str, ...], published_dir: Path, run_wide: dict[str, Any] | None) -> dict[str, Any]:
    """One restored partition's materialization: which version it is, and what readers see now, each asset its own
    figures as a correction's events carry them: fact and mart (day_metadata), staged its rows and `unresolved`
    customers' lines; the rollback's own figures (`run_wide`: publication, notice, lock figures) only on the newest
    day's, as a correction's are."""
    own: dict[str, Any] = (day_metadata.fact(pub, day) if asset == FCT_ORDER_LINES else
                           day_metadata.mart(pub, day, published_dir) if asset == REVENUE_DAILY else
                           {"dagster/row_count": pub.after[day].rows, "unresolved_customers": unresolved})
    return {**own, "restored_from": restored_from or "", **(run_wide or {})}


@dg.op(out=dg.Out(dict, description="publication_id, window and the restored partitions (rows, controls, sha256)"))
def rollback_range(context: dg.OpExecutionContext, config: RollbackConfig,
                   warehouse: Warehouse) -> Iterator[dg.DagsterEvent | dg.Output]:
    """Restore an earlier publication of every partition in [start, end], in one atomic commit; record a
    materialization of staged, fact and mart for each restored partition, so the UI shows the restored version."""
    progress = Progress(_log_for(context), rollback_mod.header(config.start, config.end),
                        rollback_mod.PHASES + (rollback_mod.EVENTS_PHASE,))
    with progress.stopping():  # the events too: a run stopped while Dagster writes them says so
        yield from _roll_back_and_report(context, config, warehouse, progress)


def _log_for(context: dg.OpExecutionContext) -> Callable[[str], None]:
    """The run's log; launched by `atlasmart rollback` (in its own process, Dagster's console log left out), each
    line also goes to the operator's terminal as it is written."""
    if context.run.tags.get(LAUNCHED_FROM_TAG) != "cli":
        return context.log.info

    def both(line: str) -> None:
        context.log.info(line)
        print(line, file=sys.stderr, flush=True)

    return both


def _roll_back_and_report(context: dg.OpExecutionContext, config: RollbackConfig, warehouse: Warehouse,
                          progress: Progress) -> Iterator[dg.DagsterEvent | dg.Output]:
    log = _log_for(context)
    stats = LockStats()
    # Re-executed asking for another window or target, it is another rollback: only the same one's commit counts.
    earlier = attempts.earlier(context.instance, context.run, rollback_mod.asked)
    pub = rollback_mod.committed_by(warehouse, config.start, config.end, earlier, stats)
    if pub is not None:
        log(f"rollback: an earlier attempt of this run committed {pub.publication_id}; nothing is rolled back again, "
            "its events are written now")
        progress.finished("targets", "restore")
        progress.done("publish", f"publication {pub.publication_id}, committed by an earlier attempt of this run")
    else:
        pub = rollback_mod.rollback(warehouse, config.start, config.end, config.reason, context.run.run_id,
                                    config.to_publication, progress,
                                    capacity.GiveWay.of_run(context, warehouse.settings,
                                                            lambda line: log(f"rollback: {line}")),
                                    stats, context.run.tags)
    context.log.info(f"rolled back {pub.window}: publication {pub.publication_id}, {len(pub.changed)} partition(s) "
                     f"changed: {short_window(pub.changed) or 'none'}")
    with warehouse.reader(stats=stats) as con:
        restored = dict(con.execute("select partition_date::varchar, restored_from from audit.publications "
                                    "where publication_id = $p", {"p": pub.publication_id}).fetchall())
        # The ledger keeps no count of a version's unresolved customers: read from the lines the rollback points at.
        unresolved = dict(con.execute(sql.text("staged_unresolved"),
                                      {**pub.window.params, "p": pub.publication_id}).fetchall())
    notice = notices.notice_path(warehouse.settings, pub.publication_id)
    if not notice.exists():  # an attempt that committed and stopped before writing it
        with warehouse.reader(stats=stats) as con:
            notices.write(warehouse.settings, con, pub.publication_id,
                          rollback_mod.run_info(context.run.run_id, config.reason, context.run.tags))
    notice = notice if notice.exists() else None
    newest = max(pub.after)
    run_wide = {"publication_id": pub.publication_id, "kind": "rollback", "window": str(pub.window),
                **({"change_notice": dg.MetadataValue.path(str(notice))} if notice is not None else {}),
                "publish_lock_hold_s": round(pub.lock_hold_s, 3), **stats.figures()}
    assets = rollback_mod.RESTORED_ASSETS
    progress.writing_events(f"{len(assets) * len(pub.after):,} partition materializations")
    yield from event_storage.batched(context, [
        dg.AssetMaterialization(
            asset_key=list(asset), partition=day,
            description=f"Rolled back to {restored.get(day)}" + (
                f" by {pub.publication_id} ({pub.window}): {config.reason}" if day == newest else ""),
            metadata=_restored_metadata(pub, day, restored.get(day), int(unresolved.get(day, 0)), asset,
                                        warehouse.settings.published_dir,
                                        run_wide if day == newest else None))
        for day in sorted(pub.after) for asset in assets])
    progress.done("events", f"{len(assets) * len(pub.after):,} partition materializations "
                            f"({len(pub.after)} day(s) x {len(assets)} assets)")
    yield dg.Output({"publication_id": pub.publication_id, "window": str(pub.window),
                     "notice": str(notice) if notice else None,
                     "restored": {d: {"rows": c.rows, "controls": c.controls, "sha256": c.sha256,
                                      "restored_from": restored.get(d)} for d, c in sorted(pub.after.items())}})


@dg.job(description="Undo corrections of a range: restores tables and extracts to an earlier publication "
                    "(default: one version back), in one commit recorded in the ledger, with a materialization of "
                    "staged, fact and mart per restored partition and a change notice. The CLI's rollback runs it too.",
        tags={KIND_TAG: "rollback"})
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
    progress = Progress(context.log.info, plan.header(config.start, config.end), plan.PHASES)
    cfg = warehouse.settings
    with progress.stopping():
        # A plan parses and builds what the backfill would: it gives way to today's load as the backfill does.
        p = plan.make(warehouse, asset_graph(), config.start, config.end, config.assets,
                      fence_override=config.fence_override, progress=progress,
                      lowered=capacity.Lowered.of_run(context, cfg, context.log.info),
                      give_way=capacity.GiveWay.of_run(context, cfg, context.log.info))
        context.log.info(plan.markdown(p, plan.PLAN_TEXT_MAX_BYTES))
        progress.writing_events("the plan's observation and its chart")
        context.log_event(dg.AssetObservation(asset_key=["fact", "fct_order_lines"],
                                              metadata=plan.observation_metadata(p)))
        progress.done("events", "the plan's observation")


@dg.job(description="Preview a backfill: scope, fence, downstream reach, neighbours and data impact. Publishes nothing.")
def plan_job() -> None:
    plan_backfill()
