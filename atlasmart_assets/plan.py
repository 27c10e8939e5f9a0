"""A backfill plan before launch: scope, fence, downstream reach, neighbours, and the data impact. Writes nothing."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

import dagster as dg
import duckdb

from atlasmart_assets import candidates, capacity, partitions, raw_files, raw_load, reference, sql, stale
from atlasmart_assets.alerts.format import md
from atlasmart_assets.contract import shown_id
from atlasmart_assets.event_budget import bounded_figures, cut_text, encoded_size
from atlasmart_assets.progress import Cost, Progress
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo, fence_refusal, tag_refusal
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.connection import GiveWay, LockStats
from atlasmart_assets.window import Window


@dataclass(frozen=True)
class DayImpact:
    partition: str
    rows_now: int | None
    rows_after: int
    controls_now: list[float] | None
    controls_after: list[float]
    sha256_now: str | None
    sha256_after: str
    lines_added: int
    lines_removed: int
    lines_changed: int
    sample_line_ids: list[str]
    lines_tier_or_country_changed: int = 0

    @property
    def changed(self) -> bool:
        return self.sha256_now != self.sha256_after


@dataclass(frozen=True)
class Plan:
    requested: str
    in_scope: list[str]
    refused: list[str]
    refusal: str | None
    assets: list[str]
    neighbours: dict[str, str | None]
    protected: dict[str, str | None]
    impact: dict[str, DayImpact] = field(default_factory=dict)
    stale: dict[str, list[str]] = field(default_factory=dict)
    # Why no day was judged against the dimension batches and deletion requests (they cannot be read), if so.
    stale_unjudged: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["impact"] = {d: {**asdict(i), "changed": i.changed} for d, i in self.impact.items()}
        return out


def _reach(graph: Any, selected: list[str]) -> list[str]:
    """The selected assets and every asset downstream of them, from the code location's asset graph."""
    todo = [dg.AssetKey.from_user_string(s) for s in selected]
    unknown = [s for s, key in zip(selected, todo) if not graph.has(key)]
    if unknown:
        known = ", ".join(sorted(k.to_user_string() for k in graph.materializable_asset_keys))
        more = f" (and {len(unknown) - 1:,} more unknown)" if len(unknown) > 1 else ""
        raise ValueError(f"no asset {shown_id(repr(unknown[0]))} in the code location{more}; its assets: {known}")
    seen: set[dg.AssetKey] = set()
    while todo:
        key = todo.pop()
        if key not in seen:
            seen.add(key)
            todo.extend(graph.get(key).child_keys)
    return sorted(k.to_user_string() for k in seen)


# Each phase's typical cost (progress.Cost: fixed, per day, per million lines), fitted on 2026-12-06 to plans of 365
# days x 2,000 lines and 60 x 20,000: the parse, the build, the comparison with the published fact (copied a chunk
# of days per read), the stale days, and the observation with its chart (about 2 s whatever the window).
PHASES = (("parse", Cost(0.4, 0.0005, 1.27)), ("build", Cost(0.3, 0.0015, 0.7)), ("compare", Cost(0.3, 0.003, 0.5)),
          ("stale", Cost(0.05, 0.001)), ("events", Cost(1.8)))


def _parse(wh: Warehouse, run_id: str, window: Window) -> tuple[int, int]:
    """The window's raw files into the plan's scratch: how many batch files, how many records."""
    con = wh.open_scratch(run_id)
    try:
        files = raw_files.load_window(con, wh.settings.raw_dir, window)
        return len(files), con.execute("select count(*) from candidate.raw_lines").fetchone()[0]
    finally:
        con.close()


def _build(wh: Warehouse, run_id: str, window: Window, ref: reference.Reference) -> dict[str, ledger.DayCandidate]:
    """The candidates in the plan's scratch, built exactly as a backfill builds them."""
    con = wh.open_scratch(run_id)
    try:
        candidates.merge_evidence(con)
        candidates.build_staged(con, ref.customers, ref.deletion_keys, window)
        candidates.build(con)
        suppressed = candidates.suppressed(con, window)
        return candidates.days(con, window, candidates.evidence(con, window), reference=reference.identity(ref),
                               applied={d: x["requests"] for d, x in suppressed.items()})
    finally:
        con.close()


def _impact(wh: Warehouse, window: Window, now: dict[str, ledger.Current], progress: Progress,
            lowered: capacity.Lowered, give_way: GiveWay | None) -> dict[str, DayImpact]:
    """Candidates built exactly as a backfill would, in a private scratch database, compared with what is published.
    The parse and the build are a backfill's in size (a year's: 7.3 M records): they run as its scratch work does
    (`lowered`: out of today's way), and the reads of the published fact give way to today's load as its do."""
    cfg = wh.settings
    run_id = f"plan-{uuid.uuid4().hex[:12]}"
    try:
        files, records = lowered.run(lambda: _parse(wh, run_id, window))
        progress.size(len(window.keys), records)
        progress.done("parse", f"{files} batch file(s) of {len(window.keys)} day(s), {records:,} records")
        ref = reference.load(wh)  # read here: a paused child must hold no read of the warehouse
        if ref.problems:
            raise ValueError("; ".join(ref.problems))
        days = lowered.run(lambda: _build(wh, run_id, window, ref))
        progress.done("build", f"candidates for {len(days)} day(s), {sum(c.rows for c in days.values()):,} rows")
        con = wh.open_scratch(run_id)
        try:
            # The window's published fact, a chunk of days per hold (a year's in one hold kept today's load out
            # about 5 s), its columns as published: a plan never migrates, so they may be an older schema's.
            # Nothing published yet: nothing to compare with.
            if cfg.warehouse_path.exists():
                def copy(con: duckdb.DuckDBPyConnection, part: list[str]) -> None:
                    into = ("create table candidate.fct_published as" if part[0] == window.keys[0]
                            else "insert into candidate.fct_published")
                    con.execute(f"{into} select * from w.fact.fct_order_lines where partition_date between $start "
                                "and $end", Window.of(part[0], part[-1]).params)

                raw_load.short_reads(wh, con, window.keys, LockStats(), give_way, copy,
                                     lines={d: c.rows for d, c in now.items()})
            else:
                con.execute("create or replace table candidate.fct_published as "
                            "select * from candidate.fct_order_lines limit 0")
            diff = {r[0].isoformat(): r[1:] for r in con.execute(sql.text("impact")).fetchall()}
        finally:
            con.close()
    finally:
        wh.drop_scratch(run_id)
    progress.done("compare", f"{sum(1 for d, c in days.items() if not now.get(d) or now[d].sha256 != c.sha256)} of "
                             f"{len(days)} day(s) would change, compared with the published fact")
    out = {}
    for day, cand in days.items():
        cur = now.get(day)
        added, removed, changed, sample, dimension_changed = diff.get(day, (0, 0, 0, [], 0))
        out[day] = DayImpact(day, cur.rows if cur else None, cand.rows, cur.controls if cur else None, cand.controls,
                             cur.sha256 if cur else None, cand.sha256, added, removed, changed, list(sample or []),
                             dimension_changed)
    return out


def header(start: str, end: str | None) -> str:
    """The run log's name for the plan: its window as validated, never the config's text as typed."""
    try:
        return f"plan {Window.of(start, end)}"
    except ValueError:
        return "plan (of a window that is not valid)"


def make(wh: Warehouse, graph: Any, start: str, end: str | None = None,
         assets: list[str] | None = None, backfill: bool = True, fence_override: str | None = None,
         with_impact: bool = True, progress: Progress | None = None, lowered: capacity.Lowered | None = None,
         give_way: GiveWay | None = None) -> Plan:
    """What a backfill of [start, end] would touch and change; reads the warehouse, writes nothing to it.
    `progress`: the plan job's, which goes on to its events phase. `lowered` and `give_way`: the plan job's, as a
    backfill's (default: the scratch work at a backfill's lower CPU priority, nothing to give way to)."""
    window = Window.of(start, end)
    reach = _reach(graph, assets or ["raw/order_lines"])
    progress = progress or Progress(None, header(start, end), PHASES)
    newest = partitions.newest_partition()
    too_long = tag_refusal(RunInfo("(planned)", fence_override=fence_override))
    refusal = too_long or fence_refusal(window, "(planned)" if backfill else None, fence_override, newest)
    # An override too long to record refuses the whole backfill, as it would refuse the run.
    refused = window.keys if too_long else [newest] if refusal else []
    scope = [k for k in window.keys if k not in refused]
    before = window.start - dt.timedelta(days=1)
    after = window.end + dt.timedelta(days=1)
    edges = Window(before, after)
    with wh.reader() as con:
        now = ledger.current(con, edges)
        protected_pub = ledger.current(con, Window.of(newest)).get(newest)
    neighbours = {d.isoformat(): (now[d.isoformat()].sha256 if d.isoformat() in now else None) for d in (before, after)
                  if d.isoformat() < newest}
    protected: dict[str, str | None] = {}
    if newest not in scope:
        protected[newest] = protected_pub.sha256 if protected_pub else None
    if not (with_impact and scope):
        for phase in ("parse", "build", "compare"):
            progress.expect(phase, 0.0)
            progress.finished(phase)
    lowered = lowered or capacity.Lowered(wh.settings.backfill_nice)
    impact = (_impact(wh, Window.of(min(scope), max(scope)), now, progress, lowered, give_way)
              if with_impact and scope else {})
    try:
        found, unjudged = stale.stale_days(wh, window), None
    except stale.ReferenceUnreadable as exc:
        found, unjudged = exc.days, str(exc)
    stale_now = {d.partition: d.reasons for d in found}
    progress.done("stale", f"{len(stale_now)} day(s) stale (evidence changed since publication)")
    return Plan(str(window), scope, refused, refusal, reach, neighbours, protected,
                impact, stale_now, unjudged)


def _now(value: Any) -> Any:
    """A day's published figure, or "unpublished" for a day the backfill publishes first."""
    return "unpublished" if value is None else value


def markdown(plan: Plan, max_bytes: int | None = None) -> str:
    """The plan as an operator reads it. Within `max_bytes` (as the UI's event stores it; None: whole, as the
    command prints it) the table shows whole rows, then one saying how many days it leaves out, and the partitions
    the backfill leaves unchanged are always named."""
    cut = (lambda text: cut_text(text, 2000)) if max_bytes is not None else (lambda text: text)
    head = [f"**Backfill plan {plan.requested}** — in scope: {len(plan.in_scope)} partitions"]
    if plan.refused:
        what = "refused by the fence" if plan.refused == [partitions.newest_partition()] else "refused"
        head.append(cut(f"\n:no_entry: {what}: {', '.join(plan.refused)} — {plan.refusal}"))
    head.append(f"\nAssets the correction reaches: {', '.join(plan.assets)}")
    if plan.stale:
        head.append(cut("\nStale in this window (evidence changed since publication): " +
                        "; ".join(f"{d} ({', '.join(md(x) for x in r)})" for d, r in sorted(plan.stale.items()))))
    if plan.stale_unjudged:
        head.append(cut(f"\n:warning: Stale days not judged in full: {md(plan.stale_unjudged)}"))
    head.append("\n| partition | rows now → after | controls now → after | lines +/-/~ | tier/country changes | changes |")
    head.append("|---|---|---|---|---|---|")
    rows = [f"| {d} | {_now(i.rows_now)} → {i.rows_after} | {_now(i.controls_now)} → {i.controls_after} | "
            f"+{i.lines_added} / -{i.lines_removed} / ~{i.lines_changed} | {i.lines_tier_or_country_changed} | "
            f"{'yes' if i.changed else 'no'} |" for d, i in plan.impact.items()]
    guarded = {**plan.neighbours, **plan.protected}
    tail = [cut("\nUnchanged by this backfill (current sha256): " +
                ", ".join(f"{d} `{(s or 'unpublished')[:12]}`" for d, s in sorted(guarded.items())))]
    if max_bytes is not None:
        more = "| … | {} more day(s), every one in `atlasmart plan --json` | | | | |"
        # Each line and the newline before it (written as two bytes, "\n"), in the bytes the event stores.
        budget = max_bytes - sum(encoded_size(line) + 2 for line in head + tail) - encoded_size(more) - 10
        shown: list[str] = []
        for row in rows:
            budget -= encoded_size(row) + 2
            if budget < 0:
                break
            shown.append(row)
        rows = shown + [more.format(len(rows) - len(shown))] if len(shown) < len(rows) else rows
    return "\n".join(head + rows + tail)


# The plan is shown in one observation event, which stays under 64 KiB whatever the window: a year's plan (a table
# row, an impact entry and a chart point per day) would be several hundred KB. Each part is cut to its share.
PLAN_TEXT_MAX_BYTES = 12_000
PLAN_FIGURES_MAX_BYTES = 12 * 1024
PLAN_CHART_MAX_BYTES = 18 * 1024
PLAN_DAYS_LISTED = 400


def png(plan: Plan, max_bytes: int | None = None) -> bytes | None:
    """The plan's chart: a point per day (`max_bytes` None: the command's file), or at the highest resolution that
    fits `max_bytes` (beyond a quarter, weekly means), or None if none does."""
    from atlasmart_assets import chart

    imp = list(plan.impact.values())
    days = list(plan.impact)
    panels: dict[str, chart.Series] = {
        "rows": ([i.rows_now for i in imp], [i.rows_after for i in imp]),
        "gmv": ([i.controls_now[3] if i.controls_now else None for i in imp], [i.controls_after[3] for i in imp]),
        "cost": ([i.controls_now[4] if i.controls_now else None for i in imp], [i.controls_after[4] for i in imp]),
    }
    title = f"Backfill plan {plan.requested}: published now vs after the correction"
    if max_bytes is None:
        return chart.before_after_png(days, panels, title)
    days, panels, title, unit = chart.readable(days, panels, title)
    return chart.fitting_png(days, panels, title, max_bytes=max_bytes, unit=unit)


def observation_metadata(plan: Plan) -> dict[str, Any]:
    """What the plan job's observation carries: the plan as an operator reads it with its chart, the plan's figures,
    the days that would change and the days the fence refuses, each cut to its share of one event."""
    from atlasmart_assets import chart

    image = png(plan, PLAN_CHART_MAX_BYTES) if plan.impact else None
    text = markdown(plan, PLAN_TEXT_MAX_BYTES)
    changing = [d for d, i in plan.impact.items() if i.changed]
    return {
        "backfill_plan": dg.MetadataValue.md(text + ("\n\n" + chart.markdown_image(image, "rows and gmv") if image else "")),
        "plan": dg.MetadataValue.json(bounded_figures(plan.as_dict(), PLAN_FIGURES_MAX_BYTES)),
        # A day is 14 bytes of the event: past PLAN_DAYS_LISTED (more than a year) the count says the rest.
        "partitions_changing": changing[:PLAN_DAYS_LISTED],
        "partitions_changing_count": len(changing),
        "refused_by_fence": plan.refused[:PLAN_DAYS_LISTED],
    }
