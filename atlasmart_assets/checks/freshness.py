"""Freshness of the newest closed day: `revenue_daily_newest_partition_fresh`, an asset check on mart/revenue_daily
that fails when the newest partition whose deadline has passed has no publication in the ledger. Grain: one
evaluation per (due partition, published or not), launched by the sensor `atlasmart_freshness`.

Why not Dagster's build_time_partition_freshness_checks: probed on 1.13.27 with the partition set ending at a pinned
ATLASMART_AS_OF, it takes its deadline from the wall clock (the latest 06:00 tick of today, not the pinned day's),
and with AS_OF ahead of the clock it expects a partition other than the fence's newest; and it reads Dagster's
materialization events, not the ledger that is AtlasMart's commit point. This check derives the due partition from
the same `partitions.newest_partition()` the fence uses and reads `audit.publications` through Warehouse.reader()."""

import datetime as dt
from dataclasses import dataclass
from typing import Any, Sequence

import dagster as dg

from atlasmart_assets import partitions
from atlasmart_assets.contract import BACKFILL_TAG, PRIORITY_TAG, REVENUE_DAILY, shown_id
from atlasmart_assets.resources import WAREHOUSE_KEY, Warehouse
from atlasmart_assets.settings import DEADLINE_ENV, deadline_offset

CHECK_NAME = "revenue_daily_newest_partition_fresh"
JOB_NAME = "atlasmart_freshness"
SENSOR_NAME = "atlasmart_freshness"
TICK_LOCK_TIMEOUT_S = 20.0
_IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                dg.DagsterRunStatus.STARTED]


def deadline_of(partition: dt.date, offset: dt.timedelta) -> dt.datetime:
    """When `partition` must be published by (naive UTC)."""
    return dt.datetime.combine(partition + dt.timedelta(days=1), dt.time()) + offset


def due_partition(newest: dt.date, start: dt.date, offset: dt.timedelta, now: dt.datetime) -> dt.date | None:
    """The newest partition whose deadline has passed at `now` (naive UTC), never past `newest` (the partition set
    ends there, also under a pinned ATLASMART_AS_OF); None when no partition is due yet."""
    latest = (now - offset).date() - dt.timedelta(days=1)
    due = min(newest, latest)
    return due if due >= start else None


def _span(seconds: float) -> str:
    """A duration an operator reads at a glance: '45 s', '12 min', '3 h 20 min', '69 d 6 h'."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _stamp(value: dt.datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class Freshness:
    """The verdict on the due partition: published (first arrival, current publication) or not, against its
    deadline. Times are naive UTC."""

    newest: str
    due: str | None
    deadline: dt.datetime | None
    now: dt.datetime
    first_published_at: dt.datetime | None = None
    publication_id: str | None = None
    setting: str = "06:00"
    backfills: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.due is None or self.publication_id is not None

    @property
    def state(self) -> str:
        """What a new evaluation could change: the due partition and whether it is published."""
        return "nothing-due" if self.due is None else f"{self.due}:{'published' if self.passed else 'missing'}"

    @property
    def overdue_s(self) -> float | None:
        if self.passed or self.deadline is None:
            return None
        return round((self.now - self.deadline).total_seconds(), 3)

    @property
    def late_by_s(self) -> float | None:
        """How long after its deadline a published partition first arrived (None if on time)."""
        if self.first_published_at is None or self.deadline is None or self.first_published_at <= self.deadline:
            return None
        return round((self.first_published_at - self.deadline).total_seconds(), 3)

    def description(self) -> str:
        rule = f"{DEADLINE_ENV}={self.setting}"
        if self.due is None:
            return f"No partition is due yet ({rule}); the newest partition {self.newest} is not yet due."
        due_by = _stamp(self.deadline)
        if self.passed:
            late = f", {_span(self.late_by_s)} after its deadline" if self.late_by_s else ""
            later = "" if self.due == self.newest else f" The newest partition {self.newest} is not due yet."
            return (f"{self.due} is published (publication {self.publication_id}; first arrived "
                    f"{_stamp(self.first_published_at)}{late}); it was due by {due_by} ({rule}).{later}")
        text = (f"{self.due}, the newest closed day due, is not published: it was due by {due_by} ({rule}) and is "
                f"overdue by {_span(self.overdue_s or 0)}.")
        if self.backfills:
            text += (f" Backfill(s) in progress: {', '.join(self.backfills)} — a backfill holding the shared compute "
                     "delays the current load while nothing fails (see the SLO report and saturation incidents).")
        return text

    def figures(self) -> dict[str, Any]:
        """Keyed by the due day, so the check-failure alert names it as the failing partition."""
        if self.due is None:
            return {"newest_partition": self.newest, "due": None}
        return {self.due: {
            "due_by_utc": _stamp(self.deadline),
            "published": self.passed,
            "publication_id": self.publication_id,
            "first_published_at_utc": _stamp(self.first_published_at),
            "late_by_s": self.late_by_s,
            "overdue_s": self.overdue_s,
            "evaluated_at_utc": _stamp(self.now),
            "backfills_in_progress": list(self.backfills),
        }}


def read(wh: Warehouse, backfills: Sequence[str] = (), timeout_s: float | None = None) -> Freshness:
    """The verdict now, from the ledger (read-only), on the warehouse clock in UTC."""
    cfg = wh.settings
    offset = deadline_offset(cfg.freshness_deadline)
    newest = partitions.newest_partition()
    with wh.reader(timeout_s=timeout_s) as con:
        now = con.execute("select timezone('UTC', now())").fetchone()[0]
        due = due_partition(dt.date.fromisoformat(newest), cfg.start_date, offset, now)
        first = pub = None
        if due is not None:
            first, pub = con.execute(
                "select timezone('UTC', min(published_at)::timestamptz), arg_max(publication_id, seq) "
                "from audit.publications where partition_date = $d", {"d": due}).fetchone()
    return Freshness(newest, due.isoformat() if due else None, deadline_of(due, offset) if due else None, now,
                     first, pub, cfg.freshness_deadline, tuple(backfills))


def backfills_in_progress(instance: dg.DagsterInstance) -> list[str]:
    """Backfills with a run queued or running now, their ids as a person is shown them (contract.shown_id)."""
    records = instance.get_run_records(dg.RunsFilter(statuses=_IN_PROGRESS), limit=500)
    return sorted({shown_id(r.dagster_run.tags[BACKFILL_TAG]) for r in records if BACKFILL_TAG in r.dagster_run.tags})


@dg.asset_check(asset=dg.AssetKey(list(REVENUE_DAILY)), name=CHECK_NAME,
                description="The newest closed day whose deadline (ATLASMART_FRESHNESS_DEADLINE after the day "
                            "closes, default 06:00 UTC) has passed is published in the ledger.")
def revenue_daily_newest_partition_fresh(context: dg.AssetCheckExecutionContext,
                                         warehouse: Warehouse) -> dg.AssetCheckResult:
    verdict = read(warehouse, backfills_in_progress(context.instance))
    return dg.AssetCheckResult(
        passed=verdict.passed, severity=dg.AssetCheckSeverity.ERROR, description=verdict.description(),
        metadata={"figures": dg.MetadataValue.json(verdict.figures()), "state": verdict.state,
                  "due_partition": verdict.due or "none", "newest_partition": verdict.newest})


CHECK_KEY = revenue_daily_newest_partition_fresh.check_key
freshness_job = dg.define_asset_job(
    JOB_NAME, selection=dg.AssetSelection.checks(revenue_daily_newest_partition_fresh),
    tags={PRIORITY_TAG: "10"},
    description="Evaluates revenue_daily_newest_partition_fresh (launched by the sensor atlasmart_freshness).")


def build(interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(name=SENSOR_NAME, job=freshness_job, minimum_interval_seconds=interval_s,
               default_status=dg.DefaultSensorStatus.RUNNING, required_resource_keys={WAREHOUSE_KEY},
               description="Evaluates the freshness of the newest closed day once per state (due partition, "
                           "published or missing): a late current load becomes one failed check, alerted once.")
    def _sensor(context: dg.SensorEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        wh: Warehouse = getattr(context.resources, WAREHOUSE_KEY)
        verdict = read(wh, timeout_s=TICK_LOCK_TIMEOUT_S)
        if verdict.due is None:
            return dg.SkipReason(verdict.description())
        # The run key is the state: Dagster launches one run per key, so a missing partition is evaluated (and
        # alerted) once, and again only once it is published or the next day becomes due.
        return dg.RunRequest(run_key=f"freshness:{verdict.state}", tags={"atlasmart/freshness": verdict.state})

    return _sensor
