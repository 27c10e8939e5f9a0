"""Checks on published tables, whoever wrote them: key uniqueness, and mart totals equal to fact totals. Read-only."""


from typing import Callable, Collection, Iterator

import dagster as dg
import duckdb

from atlasmart_assets import candidates, capacity, raw_load, reference, sql, stale
from atlasmart_assets.assets.common import check_result, window_log
from atlasmart_assets.audits import ERROR, WARN, Audit, controls_match, unique_keys
from atlasmart_assets.contract import FCT_ORDER_LINES, REVENUE_DAILY
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.progress import Progress, stopped_by
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import scope_of
from atlasmart_assets.warehouse.connection import GiveWay, LockStats, connect, hand_over, is_lock_conflict
from atlasmart_assets.window import Window

FACT_UNIQUE = "fct_order_lines_line_id_unique"
NO_SUPPRESSED = "fct_order_lines_published_history_free_of_suppressed_keys"
MART_MATCHES = "revenue_daily_totals_match_fact"


def _window(context: dg.AssetCheckExecutionContext, wh: Warehouse) -> tuple[Window, GiveWay | None]:
    """The run's window from its scope (a check-only run with no partition checks the whole partition set), and a
    backfill's give-way to today's load."""
    keys = daily_partitions.get_partition_keys()
    scope = scope_of(context.run.run_id, context.run.tags, [keys[0], keys[-1]])
    give_way = capacity.GiveWay.of_run(context, wh.settings, window_log(context, scope)) if scope.is_backfill else None
    return scope.window, give_way


def unreadable(check: str, asset: tuple[str, ...], wh: Warehouse, exc: Exception) -> Audit:
    """The check could not read the warehouse (another process held it past the timeout). That says nothing about
    the data: a WARN that names the cause, never a run failure that would claim nothing was published."""
    return Audit(check, asset, False, WARN,
                 f"not evaluated: the warehouse was held by another process for over {wh.settings.lock_timeout_s:g} s "
                 f"({exc}); whatever this run published stands, the check runs again with the next run",
                 {"evaluated": False})


Checks = dict[str, tuple[str, ...]]  # check name -> its asset


def _guarded(checks: Checks, wh: Warehouse, audit: Callable[[], list[Audit]]) -> list[Audit]:
    """`audit`'s verdicts, or one `unreadable` WARN per check of `checks` (name -> asset) when the read was locked
    out."""
    try:
        return audit()
    except duckdb.Error as exc:
        if not is_lock_conflict(exc):
            raise
        return [unreadable(check, asset, wh, exc) for check, asset in checks.items()]


Figures = dict[str, dict]


def _read_by_chunk(wh: Warehouse, window: Window,
                   read: Callable[[duckdb.DuckDBPyConnection, Window], tuple[Figures, ...]],
                   give_way: GiveWay | None = None, stats: LockStats | None = None) -> tuple[Figures, ...]:
    """`read` over each chunk of the window (ATLASMART_CHUNK_DAYS, and ATLASMART_CHUNK_LINES of the lines the ledger
    says each day publishes) in its own short read-only connection, handing the lock to a waiting writer between
    two: a year's check never keeps today's load out for long. A backfill's (`give_way`) reads no chunk while
    today's load runs: it would take the cores today's load works on. Each day is read whole in one snapshot (the
    checks are per day)."""
    out: tuple[Figures, ...] = ()
    parts = wh.settings.split(window, raw_load.published_lines(wh, window, stats))
    for n, part in enumerate(parts):
        if give_way is not None and len(parts) > 1:
            give_way()
        if n:
            hand_over(wh.settings.warehouse_path)
        with wh.reader(stats=stats) as con:
            got = read(con, part)
        out = tuple({**a, **b} for a, b in zip(out, got)) if out else got
    return out


CHECKED = {FACT_UNIQUE: FCT_ORDER_LINES, MART_MATCHES: REVENUE_DAILY}


# The fact's query for each selection: one pass for both checks, and each alone reads only its own figures.
FACT_QUERY = {frozenset(CHECKED): "published_fact_figures", frozenset({FACT_UNIQUE}): "fact_duplicates",
              frozenset({MART_MATCHES}): "fact_controls"}


def published_checks(wh: Warehouse, window: Window, give_way: GiveWay | None = None,
                     checks: Collection[str] = tuple(CHECKED), stats: LockStats | None = None) -> list[Audit]:
    """The published checks named in `checks` over the window, in the order of CHECKED. For both, the published
    fact is read once, its line ids and its controls in one pass per chunk (a year's checks: one scan of 7.3 M
    lines through the ledger's view instead of two)."""
    query = FACT_QUERY.get(frozenset(checks))
    if query is None:
        raise ValueError(f"not a selection of the published checks {list(CHECKED)}: {sorted(checks)}")
    mart_too = MART_MATCHES in checks

    def read(con: duckdb.DuckDBPyConnection, part: Window) -> tuple[Figures, Figures]:
        fact = candidates.controls(con, "fact.fct_order_lines", part, query=query)
        mart = candidates.controls(con, "mart.revenue_daily", part, kind="mart") if mart_too else {}
        return fact, mart

    fact, mart = _read_by_chunk(wh, window, read, give_way, stats)
    out: list[Audit] = []
    if FACT_UNIQUE in checks:
        out.append(unique_keys(FACT_UNIQUE, FCT_ORDER_LINES, {d: f["duplicate_line_ids"] for d, f in fact.items()}))
    if mart_too:
        out.append(controls_match(MART_MATCHES, REVENUE_DAILY, {d: candidates.control_list(m) for d, m in mart.items()},
                                  {d: candidates.control_list(f) for d, f in fact.items()}, "published_fact"))
    return out


# The lock figures a published check's result carries (its step's reads of the warehouse).
LOCK_FIGURES = ("lock_acquisitions", "lock_wait_max_s", "lock_hold_max_s", "lock_hold_total_s")
# A year's step on 2026-12-06: 2.0 s, most of it the chunked read.
PHASES = (("read", 0.8), ("events", 0.2))


@dg.multi_asset_check(
    name="published_tables_checks",
    specs=[dg.AssetCheckSpec(FACT_UNIQUE, asset=dg.AssetKey(list(FCT_ORDER_LINES)), partitions_def=daily_partitions,
                             description="line_id is unique in the published fact over the run's window (catches "
                                         "any writer)."),
           dg.AssetCheckSpec(MART_MATCHES, asset=dg.AssetKey(list(REVENUE_DAILY)), partitions_def=daily_partitions,
                             description="Published mart totals equal published fact totals per day: a mart left "
                                         "behind fails.")],
    can_subset=True,
    description="The published fact and mart over the run's window, read once for both checks.",
)
def published_tables_checks(context: dg.AssetCheckExecutionContext,
                            warehouse: Warehouse) -> Iterator[dg.AssetCheckResult]:
    """Per run window: one result per selected check. Should the shared read fail (other than on the lock), each
    check is read again on its own, so the one that can still read reports before the step fails."""
    selected = {key.name: CHECKED[key.name] for key in context.selected_asset_check_keys}
    window, give_way = _window(context, warehouse)
    stats = LockStats()

    def run(checks: Checks) -> list[Audit]:
        return _guarded(checks, warehouse, lambda: published_checks(warehouse, window, give_way, tuple(checks), stats))

    progress = Progress(context.log.info, f"published checks {window}", PHASES)
    with progress.stopping():
        failed: list[Exception] = []
        try:
            audits = run(selected)
        except Exception as exc:
            if len(selected) < 2:
                raise
            progress.part("read", 0.0, f"the shared read failed ({type(exc).__name__}): each check reads on its own")
            audits, failed = _each_alone(selected, run)
            if not audits:
                raise failed[0]  # no check could read: the step stops in its read, naming the first error
        progress.done("read", _read_line(window, selected, audits))
        # The step's holds of the warehouse (reads, which keep today's writer out too), as a correction's events
        # carry theirs: the bench's lock figures count them (a review found them in no figure).
        held = {k: v for k, v in stats.figures().items() if k in LOCK_FIGURES}
        for audit in audits:
            yield check_result(audit, held)
        if failed:
            progress.end("events", f"{len(audits)} check result(s) written; the other check's read "
                                   + stopped_by(failed[0]))
            raise failed[0]
        progress.done("events", f"{len(audits)} check result(s) written")


def _evaluated(audit: Audit) -> bool:
    return audit.figures.get("evaluated", True) is not False


def _read_line(window: Window, selected: Checks, audits: list[Audit]) -> str:
    """The read phase's line: the published days the checks read (a day with no published line is not read), or
    that the warehouse could not be read; how many failed."""
    evaluated = [a for a in audits if _evaluated(a)]
    if not evaluated:
        return (f"not read: the warehouse was held by another process; {len(audits)} check(s) not evaluated, "
                "they run again with the next run")
    days = max(len(a.figures.get("duplicate_line_ids", {})) or int(a.figures.get("partitions", 0)) for a in evaluated)
    return (f"{days} published day(s) of {len(window.keys)} read for {len(selected)} check(s), "
            f"{sum(1 for a in evaluated if not a.passed)} failing"
            + (f", {len(audits) - len(evaluated)} not evaluated" if len(evaluated) < len(audits) else ""))


def _each_alone(selected: Checks, run: Callable[[Checks], list[Audit]]) -> tuple[list[Audit], list[Exception]]:
    """After the shared read failed: each check read on its own, so the one that can still read reports; the
    errors of those that cannot, for the step to fail with once the others have reported."""
    audits: list[Audit] = []
    failed: list[Exception] = []
    for name, asset in selected.items():
        try:
            audits += run({name: asset})
        except Exception as exc:  # noqa: BLE001 - re-raised once the other check has reported
            failed.append(exc)
    return audits, failed


def published_free_of_suppressed(wh: Warehouse) -> Audit:
    """Every published day, all history: no line of a deletion request's subject. Read a chunk of days per hold
    (years of lines; the scan joins each with every request)."""
    ref = reference.load(wh)
    if ref.problems:
        return Audit(NO_SUPPRESSED, FCT_ORDER_LINES, False, WARN, "not evaluated: " + "; ".join(ref.problems))
    rows: list[tuple] = []
    published_days = _published_days(wh)
    if published_days is not None:
        con = connect(":memory:")
        try:
            con.register("deletion_keys_in_force", ref.deletion_keys)

            def read(con: duckdb.DuckDBPyConnection, part: list[str]) -> None:
                stale.published_view(con, "fact.fct_order_lines", part)
                rows.extend(con.execute(sql.text("suppressed_published")).fetchall())

            raw_load.short_reads(wh, con, published_days.keys, LockStats(), None, read,
                                 lines=raw_load.published_lines(wh, published_days))
        finally:
            con.close()
    held = {f"{d} {r}": n for d, r, n in rows}
    text = (f"no published day holds a line of the {len(ref.requests)} deletion request(s)" if not held else
            f"published days still hold suppressed lines (backfill them): {held}")
    return Audit(NO_SUPPRESSED, FCT_ORDER_LINES, not held, ERROR, text, {"held": held})


def _published_days(wh: Warehouse) -> Window | None:
    """The first to the last published day, or None before anything is published."""
    if not wh.settings.warehouse_path.exists():
        return None
    with wh.reader() as con:
        first, last = con.execute("select min(partition_date), max(partition_date) "
                                  "from audit.current_publications").fetchone()
    return Window(first, last) if first is not None else None


@dg.asset_check(asset=dg.AssetKey(list(FCT_ORDER_LINES)), name=NO_SUPPRESSED,
                description="Scans all published history (daily schedule): no published line belongs to the subject "
                            "of a deletion request. A failure names the days a backfill must correct.")
def fct_order_lines_published_history_free_of_suppressed_keys(warehouse: Warehouse) -> dg.AssetCheckResult:
    (audit,) = _guarded({NO_SUPPRESSED: FCT_ORDER_LINES}, warehouse, lambda: [published_free_of_suppressed(warehouse)])
    return check_result(audit)
