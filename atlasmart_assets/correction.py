"""The one write–audit–publish path: build candidates for the window in scratch, audit them, and publish staged,
fact and mart (with the ledger and the extracts) in one commit only if no blocking audit failed."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

import duckdb

from atlasmart_assets import audits, candidates, capacity, failpoints, raw_load, reference, sql, unchanged
from atlasmart_assets.audits import Audit
from atlasmart_assets.contract import CODE_VERSION, CONTROL_NAMES, FCT_ORDER_LINES, REVENUE_DAILY, STAGED_ORDER_LINES
from atlasmart_assets.progress import Cost, Progress
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunScope
from atlasmart_assets.warehouse import flags, ledger
from atlasmart_assets.warehouse.connection import GiveWay, LockStats, attach, attached_hold
from atlasmart_assets.warehouse.ledger import Current, DayCandidate, Publication
from atlasmart_assets.warehouse.publish import collect_abandoned, publish
from atlasmart_assets.window import Window

STAGED_UNIQUE = "staged_order_lines_line_id_unique"
CANDIDATE_UNIQUE = "fct_order_lines_candidate_line_id_unique"
CONTROLS_MATCH_RAW = "fct_order_lines_controls_match_raw_manifest"
ROW_COUNT_UNCHANGED = "fct_order_lines_row_count_unchanged"
# Checks whose failure is a WARN for a person to read, never a refusal of the publish.
WARN_ONLY = frozenset({ROW_COUNT_UNCHANGED})
ROW_DELTA = "fct_order_lines_row_delta_within_bounds"
MART_MATCHES_FACT = "revenue_daily_candidate_totals_match_fact"
UNIQUE_ACROSS_DAYS = "fct_order_lines_line_id_unique_across_days"
NO_SUPPRESSED_KEY = "fct_order_lines_holds_no_suppressed_key"

CHECKS: dict[str, tuple[tuple[str, ...], str]] = {
    STAGED_UNIQUE: (STAGED_ORDER_LINES, "The staged candidate holds each line_id at most once per day (blocking)."),
    CANDIDATE_UNIQUE: (FCT_ORDER_LINES, "The fact candidate holds each line_id at most once per day (blocking)."),
    CONTROLS_MATCH_RAW: (FCT_ORDER_LINES, "The fact candidate's six controls per day equal the raw manifest's "
                                          "(blocking)."),
    ROW_COUNT_UNCHANGED: (FCT_ORDER_LINES, "Rows per day equal the current publication's; any change is a WARN "
                                           "for a person to read (a first publication passes)."),
    ROW_DELTA: (FCT_ORDER_LINES, "No day doubles, and none shrinks beyond ATLASMART_SHRINK_THRESHOLD unless the run "
                                 "carries atlasmart/accept_shrink=<reason> (blocking)."),
    UNIQUE_ACROSS_DAYS: (FCT_ORDER_LINES, "No line_id of the candidate appears on another day, in the window or in "
                                          "the published fact outside it (blocking)."),
    reference.REFERENCE_VALID: (STAGED_ORDER_LINES, reference.DESCRIPTION),
    NO_SUPPRESSED_KEY: (FCT_ORDER_LINES, "No candidate line belongs to the subject of a deletion request (a customer "
                                         "or line ids) (blocking)."),
    MART_MATCHES_FACT: (REVENUE_DAILY, "The mart candidate's totals per day equal the fact candidate's (blocking)."),
}


# Each phase's typical cost (progress.Cost: fixed, per day, per million lines), fitted on 2026-12-06 to first loads of
# 365 days x 10, 2,000 and 20,000 lines and 60 x 20,000 (the bench's year: build 5.5 s, audit 1.9 s, publish 5.2 s,
# events 2.4 s). The read is that of a run without its raw step, which copies its raw evidence from the warehouse
# (a year's took 4 s); otherwise it reads the published state, about 0.2 s for a day or a year, which says nothing
# of the work ahead: its line makes no estimate (a year's first load read "about 2 s to go" with 17 s ahead), and
# its time then counts as READ_PUBLISHED. The build and audit are sized to the lines built, the publish to the
# lines of the days that change (_price_publish).
PHASES = (("read", Cost(0.2, 0.0, 0.55)), ("build", Cost(0.25, 0.0, 0.7)), ("audit", Cost(0.35, 0.0, 0.22)),
          ("publish", Cost(0.3, 0.0022, 0.55)))
COSTS = dict(PHASES)
READ_PUBLISHED = Cost(0.2)
# A kept day is checked against its ledger and a built day's lines may be copied from the warehouse, in the build
# phase; the publish writes only the lines of the days that change, but commits, links and indexes every day.
KEPT_DAY_S, COPIED_LINE_S = 0.002, 0.6e-6
# The step's events after the commit (a materialization per day and asset, the change chart). Only the asset,
# which writes them, has this phase. A publish that changes no day draws no chart (a year's takes about 1 s).
EVENTS_PHASE = ("events", Cost(1.2, 0.0035))
EVENTS_WITHOUT_CHART = Cost(0.2, 0.0035)


@dataclass
class Outcome:
    """What one correction did: its audits, what each day would publish, and the publication if it happened."""

    audits: list[Audit]
    days: dict[str, DayCandidate]
    publication: Publication | None
    staged: dict[str, dict[str, int]]
    stats: LockStats = field(default_factory=LockStats)

    @property
    def refused(self) -> list[Audit]:
        return [a for a in self.audits if a.blocks]


def has_table(con: duckdb.DuckDBPyConnection, schema: str, name: str) -> bool:
    return bool(con.execute("select count(*) from information_schema.tables where table_schema = $s "
                            "and table_name = $n", {"s": schema, "n": name}).fetchone()[0])


def _read_published(wh: Warehouse, scope: RunScope, stats: LockStats, need_raw: bool, give_way: GiveWay | None,
                    lowered: capacity.Lowered | None) -> tuple[dict[str, Current], dict[str, DayCandidate] | None]:
    """One short read: the current publication of the window, and for a window of one chunk (today's load) what
    deciding its kept days reads (unchanged.read_with_ledger). And if this run did not parse the raw files itself,
    its loaded evidence: the batches in that read, their lines a chunk of days per short read after it (a year's
    lines took 4 s in one)."""
    run_id = scope.run.run_id
    read = None
    lines: dict[str, int] = {}
    with wh.reader(stats=stats) as con:
        current = ledger.current(con, scope.window)
        rows = {d: c.rows for d, c in current.items()}
        if len(wh.settings.chunks(scope.window.keys, rows)) == 1 and unchanged.checked_days(scope.window, current):
            attach(con, wh.scratch_path(run_id), "s")
            read = unchanged.read_with_ledger(con, scope.window, current)
            con.execute("detach s")
        if need_raw:
            attach(con, wh.scratch_path(run_id), "s")
            con.execute("create schema if not exists s.candidate")
            con.execute("create or replace table s.candidate.raw_batches as select partition_date, batch_id, file, "
                        "kind, source_high_sequence, records, controls, extracted_at, sha256 from raw.batches "
                        "where partition_date between $start and $end", scope.window.params)
            con.execute("create or replace table s.candidate.reused_batches as select partition_date, batch_id, "
                        "file from s.candidate.raw_batches")
            raw_load.copy_fingerprints(con, scope.window)
            lines = raw_load.batch_lines(con, "s.candidate.raw_batches")
            con.execute("detach s")
    if need_raw:
        con = wh.open_scratch(run_id)
        try:
            con.execute(sql.text("raw_lines_table"))
        finally:
            con.close()
        raw_load.read_back(wh, run_id, scope.window.keys, stats, give_way, lines)
        raw_load.verify_read_back(wh, run_id, lowered=lowered)
    return current, read


def _suppressed_key_counts(con: duckdb.DuckDBPyConnection, scope: RunScope) -> dict[str, int]:
    rows = con.execute(sql.text("suppressed_key_counts"), scope.window.params).fetchall()
    return {d.isoformat(): n for d, n in rows}


def _reconciled(evidence: dict[str, candidates.Evidence],
                suppressed: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """The controls a day must publish: its latest batch's, minus what deletion requests suppress."""
    out = {}
    for day, ev in evidence.items():
        gone = suppressed.get(day, {}).get("controls", [0] * 6)
        out[day] = [round(float(t) - float(g), 2) for t, g in zip(ev.target_controls, gone)]
    return out


def _newly_suppressed(suppressed: dict[str, Any] | None) -> int:
    """The lines deletion requests suppress that the day's current version still holds: those named by no request
    it applied (candidates.suppressed)."""
    return int(suppressed["newly"]) if suppressed else 0


def audit(scope: RunScope, con: duckdb.DuckDBPyConnection, current: dict[str, Current],
          evidence: dict[str, candidates.Evidence], shrink_threshold: float, repeats: LineIdRepeats,
          ref: reference.Reference | None = None, suppressed: dict[str, dict[str, Any]] | None = None,
          keys: list[str] | None = None) -> tuple[list[Audit], dict[str, DayCandidate]]:
    """Every audit of the candidates of the window's days (or of `keys`, the days built), and what each of them
    would publish. `repeats`: the candidate's repeated line ids, found by the caller (partly under a warehouse
    hold)."""
    window = scope.window
    keys = window.keys if keys is None else keys
    built = set(keys)
    repeated_within_days = {d: n for d, n in repeats.within_days(window).items() if d in built}
    # The mart candidate also holds the rows of the days kept as published (checked against their extracts).
    mart = {d: m for d, m in candidates.controls(con, "candidate.revenue_daily", window, kind="mart").items()
            if d in built}
    fact = candidates.controls(con, "candidate.fct_order_lines", window)
    suppressed = suppressed or {}
    days = candidates.days(con, window, evidence, reference=reference.identity(ref) if ref else None,
                           applied={d: s["requests"] for d, s in suppressed.items()}, fact_figures=fact, keys=keys)
    expected = _reconciled({d: e for d, e in evidence.items() if d in built}, suppressed)
    fact_lists = {d: candidates.control_list(f) for d, f in fact.items()}
    rows_after = {d: c.rows for d, c in days.items()}
    rows_now = {d: c.rows for d, c in current.items()}
    return [
        # The fact candidate is the staged one row for row (fct_order_lines.sql projects it, with no join or
        # filter): the same line ids per day, so one count serves both.
        audits.unique_keys(STAGED_UNIQUE, STAGED_ORDER_LINES, repeated_within_days),
        audits.unique_keys(CANDIDATE_UNIQUE, FCT_ORDER_LINES, repeated_within_days),
        audits.controls_match(CONTROLS_MATCH_RAW, FCT_ORDER_LINES, {d: fact_lists.get(d, [0] * 6) for d in keys},
                              expected, "raw_manifest_less_suppressed",
                              extra={"suppressed": {d: {"lines": s["controls"][0], "requests": s["requests"]}
                                                    for d, s in suppressed.items()}},
                              when_missing="no raw batch of theirs is loaded; materialize raw/order_lines for "
                                           "them in the same run (select the four assets)"),
        audits.no_suppressed_keys(NO_SUPPRESSED_KEY, FCT_ORDER_LINES, _suppressed_key_counts(con, scope)),
        audits.row_count_unchanged(ROW_COUNT_UNCHANGED, FCT_ORDER_LINES, rows_after, rows_now),
        # Lines a deletion request suppresses are a recorded decision, not a shrink to question: the lines of the
        # requests the day's current version had not applied yet are counted back. Those it had applied are not in
        # its rows either (counting them back made a day of 5 lines, 7 suppressed, read as doubled from 5 to 12).
        audits.row_delta_within_bounds(ROW_DELTA, FCT_ORDER_LINES,
                                       {d: n + _newly_suppressed(suppressed.get(d))
                                        for d, n in rows_after.items()}, rows_now, shrink_threshold,
                                       scope.run.accept_shrink, _new_batches(current, evidence, keys)),
        audits.unique_across_days(UNIQUE_ACROSS_DAYS, FCT_ORDER_LINES, repeats.other_days),
        _mart_matches_fact(con, window, {d: candidates.control_list(m) for d, m in mart.items()}, fact_lists),
    ], days


def _mart_matches_fact(con: duckdb.DuckDBPyConnection, window: Window, mart: dict[str, list[int | float]],
                       fact: dict[str, list[int | float]]) -> Audit:
    """The mart candidate's totals against the fact's; where its orders differ, the orders that explain it (looked
    for only then: no pass over a year's lines when every day agrees)."""
    found = audits.controls_match(MART_MATCHES_FACT, REVENUE_DAILY, mart, fact, "fact_candidate")
    orders = CONTROL_NAMES.index("orders")
    days = [d for d, m in found.figures["mismatches"].items()
            if m["candidate"] and m["fact_candidate"] and m["candidate"][orders] != m["fact_candidate"][orders]]
    return audits.explained_by_split_orders(found, candidates.split_orders(con, window, days)) if days else found


@dataclass(frozen=True)
class LineIdRepeats:
    """The candidate's repeated line ids (line_id_repeats.sql): per day, how many of its lines repeat a line id of
    the same day, and its line ids that are also on another day (days with neither are absent)."""

    duplicates: dict[str, int]
    other_days: dict[str, list[str]]
    # The ledger's newest seq when the published days were searched: the commit looks again at days published
    # after it (publish's line_ids_as_of).
    as_of_seq: int = 0

    def within_days(self, window: Window) -> dict[str, int]:
        return {d: self.duplicates.get(d, 0) for d in window.keys}


def _line_id_repeats(wh: Warehouse, scope: RunScope, threads: int | None, stats: LockStats,
                     give_way: GiveWay | None, scratch_work: capacity.Lowered,
                     lines: dict[str, int]) -> LineIdRepeats:
    """The candidate's repeated line ids: within a day, and across days (built by the run, or published: outside
    the window, or a day the run keeps as published).
    The warehouse is held only while the published days outside the window are searched for the candidate's
    line ids (a semi join that finds the few shared ones), after giving way to today's load as every hold of a
    long backfill does; the pass over the window (a year's 7.3 M line ids) is scratch work, lowered and paused while
    today's load runs like the build. `lines`: each day's, as the publish weighs them."""
    con = wh.open_scratch(scope.run.run_id, threads)
    as_of = 0
    try:
        if wh.settings.warehouse_path.exists():
            # As every hold of a long write: a backfill of one chunk (by days and by lines) takes its few short
            # holds without waiting.
            if give_way is not None and len(wh.settings.chunks(scope.window.keys, lines)) > 1:
                stats.gave_way.append(give_way())
            with attached_hold(con, wh.settings.warehouse_path, "w", wh.settings.lock_timeout_s, stats):
                # A day the run keeps as published is the published fact's, like the days outside the window.
                con.execute("create or replace table candidate.published_elsewhere as "
                            "select partition_date, line_id from w.fact.fct_order_lines where partition_date not in "
                            "(select partition_date from candidate.build_days) "
                            "and line_id in (select line_id from candidate.fct_order_lines)")
                as_of = int(con.execute("select coalesce(max(seq), 0) from w.audit.publications").fetchone()[0])
        else:
            con.execute("create or replace table candidate.published_elsewhere "
                        "(partition_date date, line_id varchar)")
    finally:
        con.close()
    return replace(scratch_work.run(lambda: _repeats_in_scratch(wh, scope.run.run_id, threads)), as_of_seq=as_of)


def _repeats_in_scratch(wh: Warehouse, run_id: str, threads: int | None) -> LineIdRepeats:
    con = wh.open_scratch(run_id, threads)
    try:
        published = "select partition_date, line_id from candidate.published_elsewhere"
        rows = con.execute(sql.text("line_id_repeats").format(published=published)).fetchall()
    finally:
        con.close()
    return LineIdRepeats({d.isoformat(): int(n) for d, n, _ in rows if n},
                         {d.isoformat(): list(ids) for d, _, ids in rows if ids})


def _take_window(wh: Warehouse, scope: RunScope, stats: LockStats, run_finished: Callable[[str], bool],
                 ref: reference.Reference, give_way: GiveWay | None) -> None:
    """Flags of crashed runs are cleared here, without waiting for a sensor; a backfill then flags its window, and
    drops the rows ended runs wrote ahead of a commit that never came (today's load leaves that to the backfill
    lane: a year's rows take several holds). The reference evidence this run applies is recorded at its first
    sighting (it is immutable from then on)."""
    with wh.writer(stats) as con:
        reference.record_first_sightings(con, ref, scope.run.run_id)
        for run_id in flags.held_by(con):
            if run_id != scope.run.run_id and run_finished(run_id):
                flags.clear(con, run_id)
        if scope.is_backfill:
            flags.mark(con, scope.window, scope.run)
    if scope.is_backfill:
        collect_abandoned(wh, lambda run_id: run_id != scope.run.run_id and run_finished(run_id), stats, give_way)


@dataclass(frozen=True)
class SinceAttempts:
    """A publication as its events tell it after earlier attempts of its run: `publication` with each day's `before`
    as it was before those attempts' publications of it, and per day those publications (walked back through)."""

    publication: Publication
    attempts: dict[str, tuple[str, ...]] = field(default_factory=dict)


def since_earlier_attempts(wh: Warehouse, pub: Publication, run_ids: list[str],
                           stats: LockStats | None = None) -> SinceAttempts:
    """`pub` with each day's `before` walked back through the versions `run_ids` (a retried run's earlier attempts,
    which committed and then failed before their events) published of it, in a row, from the one `pub` replaced: a
    retry that publishes again what its first attempt committed tells the change the run made, not "unchanged". A
    version another run published in between stops the walk (the retry replaced that one)."""
    if not run_ids:
        return SinceAttempts(pub)
    with wh.reader(stats=stats) as con:
        rows = con.execute(sql.text("attempts_publications").format(repaired=ledger.repaired_column(con)),
                           {**pub.window.params, "runs": run_ids}).fetchall()
        theirs: dict[str, dict[str, str | None]] = {}
        repaired_by = {(day, pub_id) for day, pub_id, _, repaired in rows if repaired}
        for day, pub_id, prev, _ in rows:
            theirs.setdefault(day, {})[pub_id] = prev
        walked: dict[str, str | None] = {}
        through: dict[str, tuple[str, ...]] = {}
        for day, now in pub.before.items():
            versions, shown, seen = theirs.get(day, {}), now.publication_id, []
            while shown is not None and shown in versions and shown not in seen:
                seen.append(shown)
                shown = versions[shown]
            if seen:
                walked[day], through[day] = shown, tuple(seen)
        if not walked:
            return SinceAttempts(pub)
        replaced = ledger.published(con, {d: p for d, p in walked.items() if p is not None})
    before = {**{d: c for d, c in pub.before.items() if d not in walked}, **replaced}
    # A day an earlier attempt wrote afresh (its rows had changed behind the ledger) was repaired by this run.
    repaired = set(pub.repaired) | {d for d, seen in through.items() if any((d, p) in repaired_by for p in seen)}
    return SinceAttempts(replace(pub, before=before, repaired=tuple(sorted(repaired))), through)


def release_window(wh: Warehouse, run_id: str, stats: LockStats | None = None) -> None:
    with wh.writer(stats) as con:
        flags.clear(con, run_id)


def _evidence(wh: Warehouse, scope: RunScope, threads: int | None, ref: reference.Reference,
              need_raw: bool) -> tuple[dict[str, candidates.Evidence], dict[str, set[str]], list[str]]:
    """The evidence each day of the window reads (merged in scratch if the raw step did not), the days with a
    record a deletion request names, with those requests (no warehouse hold), and the days the raw step profiled
    where they are loaded (their lines are not in the scratch; the caller finds their requested days there)."""
    con = wh.open_scratch(scope.run.run_id, threads)
    try:
        if need_raw:
            candidates.merge_evidence(con)
        uncopied = [] if need_raw else raw_load.uncopied_days(con)
        return (candidates.evidence(con, scope.window),
                unchanged.requested_days(con, ref.deletion_keys, scope.window), uncopied)
    finally:
        con.close()


def _build(wh: Warehouse, scope: RunScope, threads: int | None, ref: reference.Reference, days: list[str],
           kept: unchanged.Kept, adjust_staged: Callable[[duckdb.DuckDBPyConnection], None] | None,
           merge: bool) -> None:
    """The candidates of `days` in scratch (no warehouse hold); the mart candidate also takes the kept days'
    published rows, so the one commit writes the window's mart as before. `merge`: lines were added to the
    scratch's evidence since its merge."""
    con = wh.open_scratch(scope.run.run_id, threads)
    try:
        if merge:
            candidates.merge_evidence(con)
        candidates.build_staged(con, ref.customers, ref.deletion_keys, scope.window, days)
        if adjust_staged is not None:
            adjust_staged(con)
        candidates.build(con)
        if kept.days:
            cols = ", ".join(ledger.MART_COLUMNS)
            con.execute(f"insert into candidate.revenue_daily ({cols}) select {cols} from candidate.kept_revenue_daily "
                        "where partition_date in (select unnest($days::date[]))", {"days": sorted(kept.days)})
    finally:
        con.close()


def _keep(wh: Warehouse, scope: RunScope, current: dict[str, Current], evidence: dict[str, candidates.Evidence],
          requested: unchanged.Requested, ref: reference.Reference, stats: LockStats, give_way: GiveWay | None,
          adjusting: bool, read: dict[str, DayCandidate] | None) -> unchanged.Kept:
    """The days published again as they are (unchanged.py), and the days whose published rows differ from their
    ledger; none is kept when the run re-derives every day (its tag) or a test adjusts the staged candidate."""
    rebuild = adjusting or bool(scope.run.rederive)
    days = [] if rebuild else unchanged.eligible(current, evidence, ref.dimension_version, CODE_VERSION, requested,
                                                 scope.window.keys)
    return unchanged.verify(wh, scope.run.run_id, scope.window, current, days, stats, give_way, read)


def _audit_candidates(wh: Warehouse, scope: RunScope, threads: int | None, current: dict[str, Current],
                      evidence: dict[str, candidates.Evidence], repeats: LineIdRepeats, ref: reference.Reference,
                      built: list[str], kept: unchanged.Kept, requested: unchanged.Requested
                      ) -> tuple[list[Audit], dict[str, DayCandidate], dict[str, dict[str, int]]]:
    """Every audit of the candidates of the days built, in scratch (no warehouse hold); what each day of the
    window would publish (a kept day: its current version), with the deletion requests that name its evidence
    (`requested`), and the staged figures per day."""
    con = wh.open_scratch(scope.run.run_id, threads)
    try:
        suppressed = candidates.suppressed(con, scope.window,
                                           {d: c.requests_applied for d, c in current.items()})
        staged_figures = candidates.controls(con, "candidate.staged_order_lines", scope.window, kind="staged")
        found, days = audit(scope, con, current, evidence, wh.settings.shrink_threshold, repeats, ref, suppressed,
                            built)
        found.insert(0, ref.audit())
        staged_figures = {d: staged_figures.get(d, candidates.NO_LINES) for d in days}
        days = {d: replace(c, fingerprint=candidates.fingerprint(staged_figures[d])) for d, c in days.items()}
        staged = {d: {"rows": int(f["lines"]), "unresolved_customers": int(f["unresolved_customers"])}
                  for d, f in staged_figures.items()}
        # A kept day is what a build now gives: the requests naming its evidence now are recorded for it too (a
        # version from before they were recorded gets them so).
        named = {d: replace(c, requests_named=tuple(sorted(requested.get(d, ()))))
                 for d, c in {**days, **kept.days}.items()}
        return found, named, {**staged, **kept.staged}
    finally:
        con.close()


def _batches_differ(cur: Current, evidence: dict[str, candidates.Evidence], day: str) -> bool:
    """Whether `day`'s landing batches differ from those its current version `cur` read."""
    return cur.input_sha256 != (evidence[day].digest if day in evidence else None)


def _new_batches(current: dict[str, Current], evidence: dict[str, candidates.Evidence], days: list[str]) -> set[str]:
    """The published days whose landing batches differ from those their current version read."""
    return {d for d in days if d in current and _batches_differ(current[d], evidence, d)}


def _new_evidence(current: dict[str, Current], evidence: dict[str, candidates.Evidence],
                  dimension_version: str | None, days: list[str]) -> list[str]:
    """The days not published yet, or whose landing batches or customer dimension differ from what their current
    version read. A new deletion request or release may change other days too: the audit finds those."""
    return [d for d in days if d not in current or current[d].dimension_version != dimension_version
            or _batches_differ(current[d], evidence, d)]


def _build_line(scope: RunScope, built: list[str], new: list[str], kept: unchanged.Kept) -> str:
    """The run log's build line: how many days were built, how many kept as published, and why."""
    line = f"candidates for {len(built)} day(s) of {len(scope.window.keys)}, {len(new)} with new evidence"
    if scope.run.rederive:
        line += "; every day built again (atlasmart/rederive)"
    if kept.days:
        line += (f"; {len(kept.days)} kept as published (same evidence, dimension, deletion requests and release, "
                 "published rows as their ledger says)")
    if kept.differ:
        more = f" and {len(kept.differ) - 10} more" if len(kept.differ) > 10 else ""
        line += f"; built again, their published rows differing from their ledger: {', '.join(kept.differ[:10])}{more}"
    return line


def _price_publish(progress: Progress, days: int, changed_lines: int, changing_days: int) -> None:
    """The publish's cost: every day's commit, and the lines of the days that change written; and the events
    after it, with the change chart only where a day changes (an unchanged re-derive read "about 3 s to go" with
    1.1 s). Priced after the build, then again once the audit says which days change, up or down."""
    progress.reprice("publish", Cost(COSTS["publish"].at(days, changed_lines)))
    progress.reprice(EVENTS_PHASE[0], EVENTS_PHASE[1] if changing_days else EVENTS_WITHOUT_CHART)


def correct(wh: Warehouse, scope: RunScope, run_finished: Callable[[str], bool], threads: int | None = None,
            adjust_staged: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
            log: Callable[[str], None] | None = None, give_way: GiveWay | None = None,
            lowered: capacity.Lowered | None = None, progress: Progress | None = None) -> Outcome:
    """Build, audit and (if clean) publish the window. Every exit path that did not publish releases the run's
    flags; the scratch database is dropped after a publication and kept for inspection after a refusal.
    `adjust_staged` edits the staged candidate before fact and mart are derived (the audit tests craft bad
    candidates with it). A backfill's scratch work runs `lowered` (lower CPU priority, fewer cores beside today's
    load), and its `give_way` is called before each warehouse hold of the publish."""
    progress = progress or Progress(log, f"correction {scope.window}", PHASES)
    with progress.stopping():
        return _correct(wh, scope, run_finished, threads, adjust_staged, give_way, lowered, progress)


def _correct(wh: Warehouse, scope: RunScope, run_finished: Callable[[str], bool], threads: int | None,
             adjust_staged: Callable[[duckdb.DuckDBPyConnection], None] | None, give_way: GiveWay | None,
             lowered: capacity.Lowered | None, progress: Progress) -> Outcome:
    stats = LockStats()
    run_id = scope.run.run_id
    progress.watch(lambda: capacity.paused_s(lowered))  # the scratch work paused beside today's load
    ref = reference.load(wh, stats)
    if ref.problems:
        progress.end("read", f"refused by {ref.audit().check}; nothing published")
        return Outcome([ref.audit()], {}, None, {}, stats)
    _take_window(wh, scope, stats, run_finished, ref, give_way)
    failpoints.gate("window_flagged", run_id)
    outcome: Outcome | None = None
    try:
        con = wh.open_scratch(run_id, threads)
        try:
            need_raw = not has_table(con, "candidate", "raw_lines")
        finally:
            con.close()
        current, read = _read_published(wh, scope, stats, need_raw, give_way, lowered)
        if not need_raw:
            progress.expect("read", 0.0)
        progress.done("read", f"{len(current)} published day(s) of {len(scope.window.keys)}"
                      + ("; raw evidence copied from the warehouse" if need_raw else ""))
        # The scratch work runs lowered for a backfill; the warehouse holds (the cross-day lookup, the publish)
        # are taken at the run's own priority, so today's load never waits on a lowered holder.
        scratch_work = lowered or capacity.Lowered()
        evidence, requested, uncopied = scratch_work.run(lambda: _evidence(wh, scope, threads, ref, need_raw))
        for day, ids in unchanged.requested_loaded_days(wh, run_id, ref.deletion_keys, uncopied, stats,
                                                        give_way).items():
            requested.setdefault(day, set()).update(ids)
        kept = _keep(wh, scope, current, evidence, requested, ref, stats, give_way, adjust_staged is not None, read)
        built = [d for d in scope.window.keys if d not in kept.days]
        lines = {d: int(evidence[d].target_controls[0]) for d in built if d in evidence}
        progress.size(len(scope.window.keys), sum(lines.values()))
        if not need_raw:  # its line made no estimate; its time counts as what it was
            progress.reprice("read", READ_PUBLISHED)
            progress.expect("read", 1.0)
        progress.reprice("build", Cost(COSTS["build"].at(0, sum(lines.values())) + KEPT_DAY_S * len(kept.days)
                                       + COPIED_LINE_S * sum(lines.get(d, 0) for d in uncopied)))
        # The days built whose lines the raw step left in the warehouse (it profiled them there) are copied now.
        added = raw_load.copy_uncopied(wh, run_id, uncopied, built, stats, give_way, lowered)
        scratch_work.run(lambda: _build(wh, scope, threads, ref, built, kept, adjust_staged, bool(added)))
        new = _new_evidence(current, evidence, ref.dimension_version, built)
        # Until the audit says which days changed, a day read from the evidence its current version read is taken
        # to publish unchanged (a new deletion request or release may still change it).
        _price_publish(progress, len(scope.window.keys), sum(lines.get(d, 0) for d in new), len(new))
        progress.done("build", _build_line(scope, built, new, kept))
        # Each day's lines as the publish will weigh them: the built days' from their evidence, the kept ones' own.
        weights = {**{d: current[d].rows for d in kept.days if d in current}, **lines}
        repeats = _line_id_repeats(wh, scope, threads, stats, give_way, scratch_work, weights)
        found, days, staged = scratch_work.run(lambda: _audit_candidates(
            wh, scope, threads, current, evidence, repeats, ref, built, kept, requested))
        if kept.days:
            # In the UI a check over kept days alone would read as an audit of them: say they were not built.
            note = f" ({len(kept.days)} day(s) kept as published, not built again: audited when published)"
            found = [replace(a, description=a.description + note)
                     if a.check in CHECKS and a.check != reference.REFERENCE_VALID else a for a in found]
        outcome = Outcome(found, days, None, staged, stats)
        # The audit says which days change: only their lines are written (a year's re-publish of unchanged days
        # published in 2 s, its first load in 14 s).
        reused = ledger.reused(current, days)
        written = [d for d in days if d not in reused]
        _price_publish(progress, len(scope.window.keys), sum(days[d].rows for d in written), len(written))
        audited = f"{len(found)} audits, {len(outcome.refused)} refusing, {sum(c.rows for c in days.values()):,} rows"
        if outcome.refused:
            progress.end("audit", f"{audited}: refused by {', '.join(a.check for a in outcome.refused)}; "
                                  "nothing published")
        else:
            progress.done("audit", audited)
            def written(k: int, n: int, part: Window, changed: int) -> None:
                progress.part("publish", k / (n + 1),
                              f"chunk {k}/{n} ({part}) written ahead, {changed} changed day(s)" if changed else
                              f"chunk {k}/{n} ({part}): no day changed, no line written")
            # A day whose stored rows differ from its ledger is written afresh, not pointed at those rows again.
            expected = {d: replace(c, fingerprint=None) if d in kept.differ else c for d, c in current.items()}
            # A kept day has no candidate rows: the publish must point it at its stored ones, or it would be empty.
            unstored = sorted(set(kept.days) - set(ledger.reused(expected, days)))
            if unstored:
                raise RuntimeError(f"days {unstored} were kept as published but the publish would not read their "
                                   "stored rows; nothing was published")
            outcome.publication = publish(wh, wh.scratch_path(run_id), scope.window, scope.run, CODE_VERSION,
                                          days, expected, stats=stats, give_way=give_way, on_chunk=written,
                                          line_ids_as_of=repeats.as_of_seq,
                                          deletion_keys=ref.deletion_keys, repaired=kept.differ)
            wh.drop_scratch(run_id)
            progress.done("publish", f"publication {outcome.publication.publication_id}, "
                                     f"{len(outcome.publication.changed)} day(s) changed")
        return outcome
    finally:
        if outcome is None or outcome.publication is None:
            release_window(wh, run_id, stats)
