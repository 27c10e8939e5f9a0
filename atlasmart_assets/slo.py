"""The current lane's SLO report: queue wait and duration of current-lane runs, with and without a backfill in
progress, and the freshness of the newest partition. Grain: one report per job run, over the recent run records."""


import datetime as dt
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import dagster as dg

from atlasmart_assets import partitions
from atlasmart_assets.contract import CURRENT_LANE
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import lane_of
REPORT_ASSET = dg.AssetKey(["mart", "revenue_daily"])


@dataclass(frozen=True)
class RunSample:
    """One run as the SLO report sees it: lane, queue entry, start and end (epoch seconds)."""

    run_id: str
    lane: str  # "current", "backfill" or "other"
    created: float
    started: float | None
    ended: float | None
    status: str

    @property
    def queue_wait_s(self) -> float | None:
        return None if self.started is None else self.started - self.created

    @property
    def duration_s(self) -> float | None:
        return None if self.started is None or self.ended is None else self.ended - self.started


def sample_of(record: Any) -> RunSample:
    """A RunSample from a Dagster RunRecord."""
    run = record.dagster_run
    created = record.create_timestamp
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.timezone.utc)
    return RunSample(run.run_id, lane_of(dict(run.tags)), created.timestamp(), record.start_time, record.end_time,
                     run.status.value)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(rank), math.ceil(rank)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def backfill_overlaps(run: RunSample, backfills: Iterable[RunSample], now: float) -> bool:
    """Whether a backfill run was in progress at any moment between the run's enqueue and its end."""
    run_end = run.ended if run.ended is not None else now
    return any(b.started is not None and b.started < run_end and (b.ended if b.ended is not None else now) > run.created
               for b in backfills)


def _stats(runs: list[RunSample]) -> dict[str, Any]:
    waits = [r.queue_wait_s for r in runs if r.queue_wait_s is not None]
    durations = [r.duration_s for r in runs if r.duration_s is not None]
    rnd = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return {
        "runs": len(runs),
        "succeeded": sum(r.status == "SUCCESS" for r in runs),
        "failed": sum(r.status == "FAILURE" for r in runs),
        "queue_wait_p50_s": rnd(percentile(waits, 50)),
        "queue_wait_p95_s": rnd(percentile(waits, 95)),
        "duration_p50_s": rnd(percentile(durations, 50)),
        "duration_p95_s": rnd(percentile(durations, 95)),
    }


def current_lane_report(samples: Sequence[RunSample], now: float) -> dict[str, dict[str, Any]]:
    """Queue wait and duration percentiles of current-lane runs, split by whether a backfill was in progress."""
    backfills = [s for s in samples if s.lane == "backfill"]
    current = [s for s in samples if s.lane == CURRENT_LANE]
    during = [r for r in current if backfill_overlaps(r, backfills, now)]
    alone = [r for r in current if r not in during]
    return {"with_backfill": _stats(during), "without_backfill": _stats(alone)}


def freshness_s(published_at: dt.datetime | None, now: dt.datetime) -> float | None:
    """Seconds since the newest partition's latest publication; None when it was never published."""
    return None if published_at is None else round((now - published_at).total_seconds(), 3)


def markdown(report: dict[str, dict[str, Any]], newest: str, fresh: float | None) -> str:
    """The table an operator reads on the asset page."""
    cols = ["runs", "succeeded", "failed", "queue_wait_p50_s", "queue_wait_p95_s", "duration_p50_s", "duration_p95_s"]
    lines = ["| current-lane runs | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {split} | " + " | ".join(str(figs[c]) for c in cols) + " |" for split, figs in report.items()]
    lines.append("")
    lines.append(f"Newest partition {newest}: " + ("never published" if fresh is None else
                                                    f"published {fresh:.0f} s ago"))
    return "\n".join(lines)


def _newest_published_at(wh: Warehouse, newest: str) -> tuple[dt.datetime | None, dt.datetime]:
    """The newest partition's latest publication time and the warehouse clock, on one clock (session time zone)."""
    with wh.reader() as con:
        row = con.execute("select max(published_at), now()::timestamp from audit.current_publications "
                          "where partition_date = $d::date", {"d": newest}).fetchone()
    return row[0], row[1]


class SloReportConfig(dg.Config):
    lookback_runs: int = 1000


@dg.op(description="Queue wait and duration (p50/p95) of current-lane runs with/without a backfill; freshness.")
def slo_report_op(context: dg.OpExecutionContext, config: SloReportConfig, warehouse: Warehouse) -> None:
    records = context.instance.get_run_records(limit=config.lookback_runs)
    samples = [sample_of(r) for r in records if r.dagster_run.run_id != context.run_id]
    report = current_lane_report(samples, dt.datetime.now(dt.timezone.utc).timestamp())
    newest = partitions.newest_partition()
    published_at, now = _newest_published_at(warehouse, newest)
    fresh = freshness_s(published_at, now)
    table = markdown(report, newest, fresh)
    context.log.info("SLO report\n" + table)
    context.log_event(dg.AssetObservation(asset_key=REPORT_ASSET, metadata={
        "slo_current_with_backfill": dg.MetadataValue.json(report["with_backfill"]),
        "slo_current_without_backfill": dg.MetadataValue.json(report["without_backfill"]),
        "slo_newest_partition": newest,
        "slo_newest_partition_freshness_s": dg.MetadataValue.float(fresh) if fresh is not None else "never published",
        "slo_report": dg.MetadataValue.md(table),
    }))


@dg.job(description="SLO report of the current lane (run records + ledger), observed on mart/revenue_daily.")
def slo_report() -> None:
    slo_report_op()
