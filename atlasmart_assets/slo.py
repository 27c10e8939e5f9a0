"""The current lane's SLO report: queue wait and duration of current-lane runs, with and without a backfill in
progress, the freshness of the newest partition, and the saturation incidents recorded against each backfill.
Grain: one report per job run, over the recent run records.

Also the objective a current-lane run must meet while a backfill runs (queue wait and duration, ATLASMART_SLO_*),
evaluated on runs still queued or running, so a breach is seen while it happens (the saturation sensor)."""


import datetime as dt
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import dagster as dg

from atlasmart_assets import partitions
from atlasmart_assets.contract import BACKFILL_TAG, CURRENT_LANE
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import lane_of
from atlasmart_assets.warehouse.migrations import has_table
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
    backfill_id: str | None = None

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
                     run.status.value, run.tags.get(BACKFILL_TAG))


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


@dataclass(frozen=True)
class Objective:
    """What a current-lane run must meet: queue wait (start - enqueue) and duration (end - start), in seconds."""

    queue_wait_s: float
    duration_s: float


QUEUE_WAIT = "queue_wait"
DURATION = "duration"


@dataclass(frozen=True)
class Breach:
    """One current-lane run over one objective, as observed at `now` (a run still queued or running counts the
    time so far)."""

    run_id: str
    metric: str
    observed_s: float
    objective_s: float
    status: str


def observed(run: RunSample, now: float) -> dict[str, float]:
    """Queue wait and duration so far: a queued run has waited since it was enqueued, a running one has run since
    it started."""
    out = {QUEUE_WAIT: (run.started if run.started is not None else now) - run.created}
    if run.started is not None:
        out[DURATION] = (run.ended if run.ended is not None else now) - run.started
    return out


def breaches(run: RunSample, objective: Objective, now: float) -> list[Breach]:
    limits = {QUEUE_WAIT: objective.queue_wait_s, DURATION: objective.duration_s}
    return [Breach(run.run_id, metric, round(value, 3), limits[metric], run.status)
            for metric, value in observed(run, now).items() if value > limits[metric]]


@dataclass(frozen=True)
class Saturation:
    """A backfill during which current-lane runs missed the objective: its runs then, and the breaches."""

    backfill_id: str
    backfill_runs: tuple[RunSample, ...]
    breaches: tuple[Breach, ...]

    @property
    def current_run_ids(self) -> list[str]:
        return sorted({b.run_id for b in self.breaches})


def _live_since(run: RunSample, since: float) -> bool:
    return run.ended is None or run.ended >= since


def saturation(samples: Sequence[RunSample], objective: Objective, now: float, since: float) -> list[Saturation]:
    """Per backfill: the current-lane runs in progress, or ended since `since` (the previous evaluation), that
    overlapped one of its runs (queued or running while it ran) and miss the objective now, with its runs they
    overlapped. A run still queued or running is judged on its time so far, so a breach is seen while it happens."""
    by_backfill: dict[str, list[RunSample]] = {}
    for s in samples:
        if s.lane == "backfill" and s.backfill_id and s.started is not None:
            by_backfill.setdefault(s.backfill_id, []).append(s)
    current = [s for s in samples if s.lane == CURRENT_LANE and _live_since(s, since)]
    out = []
    for backfill_id, runs in sorted(by_backfill.items()):
        hit = [r for r in current if backfill_overlaps(r, runs, now)]
        found = [b for r in hit for b in breaches(r, objective, now)]
        if found:
            breaching = [r for r in hit if any(b.run_id == r.run_id for b in found)]
            overlapped = [b for b in runs if any(backfill_overlaps(r, [b], now) for r in breaching)]
            out.append(Saturation(backfill_id, tuple(sorted(overlapped, key=lambda r: r.created)), tuple(found)))
    return out


def freshness_s(published_at: dt.datetime | None, now: dt.datetime) -> float | None:
    """Seconds since the newest partition's latest publication; None when it was never published."""
    return None if published_at is None else round((now - published_at).total_seconds(), 3)


def _fmt(value: Any) -> str:
    return "—" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))


def markdown(report: dict[str, dict[str, Any]], newest: str, fresh: float | None, objective: Objective | None = None,
             incidents: Sequence[dict[str, Any]] = (), backfills: int | None = None) -> str:
    """The table an operator reads on the asset page. `incidents`: the rows shown (newest first) of `backfills`
    backfills with incidents (default: all of them shown)."""
    cols = ["runs", "succeeded", "failed", "queue_wait_p50_s", "queue_wait_p95_s", "duration_p50_s", "duration_p95_s"]
    lines = ["| current-lane runs | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {split} | " + " | ".join(str(figs[c]) for c in cols) + " |" for split, figs in report.items()]
    lines.append("")
    lines.append(f"Newest partition {newest}: " + ("never published" if fresh is None else
                                                    f"published {fresh:.0f} s ago"))
    if objective is not None:
        lines += ["", f"Objective of a current-lane run while a backfill runs: queue wait ≤ {objective.queue_wait_s:g} s, "
                      f"duration ≤ {objective.duration_s:g} s (ATLASMART_SLO_QUEUE_WAIT_S, ATLASMART_SLO_DURATION_S)."]
    lines.append("")
    if not incidents:
        lines.append("Saturation incidents: none recorded.")
        return "\n".join(lines)
    heads = ["backfill", "window", "incidents", "current runs", "queue wait max / objective (s)",
             "duration max / objective (s)", "backfill lane limit", "first detected (UTC)", "last detected (UTC)"]
    more = (backfills or len(incidents)) - len(incidents)
    lines += ["Saturation incidents per backfill, newest first (audit.saturation_incidents)"
              + (f": the {len(incidents)} newest of {backfills:,} backfills, every one in the table" if more else ":"),
              "",
              "| " + " | ".join(heads) + " |", "|---" * len(heads) + "|"]
    for i in incidents:
        lines.append("| " + " | ".join([
            str(i["backfill_id"]), _fmt(i["backfill_window"]), str(i["incidents"]), str(i["current_runs"]),
            f"{_fmt(i['queue_wait_max_s'])} / {_fmt(i['queue_wait_objective_s'])}",
            f"{_fmt(i['duration_max_s'])} / {_fmt(i['duration_objective_s'])}", _fmt(i["backfill_lane_limit"]),
            str(i["first_detected_utc"]), str(i["last_detected_utc"])]) + " |")
    return "\n".join(lines)


def _newest_published_at(wh: Warehouse, newest: str) -> tuple[dt.datetime | None, dt.datetime]:
    """The newest partition's latest publication time and the warehouse clock, on one clock (session time zone)."""
    with wh.reader() as con:
        row = con.execute("select max(published_at), now()::timestamp from audit.current_publications "
                          "where partition_date = $d::date", {"d": newest}).fetchone()
    return row[0], row[1]


def incidents_per_backfill(wh: Warehouse) -> list[dict[str, Any]]:
    """The SLO report's view: per backfill, newest detection first, incidents, current runs hit, worst queue wait
    and duration observed against the objective, first and last detection (UTC)."""
    with wh.reader() as con:
        if not has_table(con, "audit", "saturation_incidents"):
            return []
        rows = con.execute("""
            select
                backfill_id,
                any_value(backfill_window) as backfill_window,
                count(distinct incident_id) as incidents,
                count(distinct run_id) as current_runs,
                max(observed_s) filter (where metric = 'queue_wait') as queue_wait_max_s,
                max(objective_s) filter (where metric = 'queue_wait') as queue_wait_objective_s,
                max(observed_s) filter (where metric = 'duration') as duration_max_s,
                max(objective_s) filter (where metric = 'duration') as duration_objective_s,
                max(backfill_lane_limit) as backfill_lane_limit,
                max(backfill_runs_in_progress) as backfill_runs_in_progress_max,
                strftime(min(detected_at), '%Y-%m-%d %H:%M:%S') as first_detected_utc,
                strftime(max(detected_at), '%Y-%m-%d %H:%M:%S') as last_detected_utc
            from audit.saturation_incidents
            group by backfill_id
            order by max(detected_at) desc, backfill_id
        """)
        names = [d[0] for d in rows.description]
        return [dict(zip(names, r)) for r in rows.fetchall()]


def objective_of(wh: Warehouse) -> Objective:
    cfg = wh.settings
    return Objective(cfg.slo_queue_wait_s, cfg.slo_duration_s)


# The report is one event: past this many backfills (about 500 bytes each in the table and the JSON), the newest
# are shown and the rest counted; audit.saturation_incidents keeps them all.
INCIDENT_BACKFILLS_SHOWN = 25


class SloReportConfig(dg.Config):
    lookback_runs: int = 1000


@dg.op(description="Queue wait and duration (p50/p95) of current-lane runs with/without a backfill; freshness; "
                   "saturation incidents per backfill.")
def slo_report_op(context: dg.OpExecutionContext, config: SloReportConfig, warehouse: Warehouse) -> None:
    records = context.instance.get_run_records(limit=config.lookback_runs)
    samples = [sample_of(r) for r in records if r.dagster_run.run_id != context.run_id]
    report = current_lane_report(samples, dt.datetime.now(dt.timezone.utc).timestamp())
    newest = partitions.newest_partition()
    published_at, now = _newest_published_at(warehouse, newest)
    fresh = freshness_s(published_at, now)
    per_backfill = incidents_per_backfill(warehouse)
    shown = per_backfill[:INCIDENT_BACKFILLS_SHOWN]
    table = markdown(report, newest, fresh, objective_of(warehouse), shown, len(per_backfill))
    context.log.info("SLO report\n" + table)
    context.log_event(dg.AssetObservation(asset_key=REPORT_ASSET, metadata={
        "slo_current_with_backfill": dg.MetadataValue.json(report["with_backfill"]),
        "slo_current_without_backfill": dg.MetadataValue.json(report["without_backfill"]),
        "slo_newest_partition": newest,
        "slo_newest_partition_freshness_s": dg.MetadataValue.float(fresh) if fresh is not None else "never published",
        "slo_saturation_incidents": dg.MetadataValue.json(shown),
        "slo_saturation_backfills": len(per_backfill),
        "slo_report": dg.MetadataValue.md(table),
    }))


@dg.job(description="SLO report of the current lane (run records + ledger), observed on mart/revenue_daily.")
def slo_report() -> None:
    slo_report_op()
