"""fact.fct_order_lines + mart.revenue_daily (+ published extracts): written as candidates, audited, published at once."""


import json
from typing import Any, Iterator

import dagster as dg

from atlasmart_assets import candidates, warehouse
from atlasmart_assets.assets.common import BACKFILL_POLICY, CODE_VERSION, Step, begin, check_result, has_table, refuse
from atlasmart_assets.assets.staged import staged_order_lines
from atlasmart_assets.audits import Audit, controls_match, row_delta, unique_keys
from atlasmart_assets.partitions import daily_partitions

FACT = ("fact", "fct_order_lines")
MART = ("mart", "revenue_daily")
CANDIDATE_UNIQUE = "fct_order_lines_candidate_line_id_unique"
CONTROLS_MATCH_RAW = "fct_order_lines_controls_match_raw_manifest"
ROW_DELTA = "fct_order_lines_row_delta_within_bounds"
MART_MATCHES_FACT = "revenue_daily_candidate_totals_match_fact"


def audit_candidates(step: Step, con: Any, current: dict[str, warehouse.Current],
                     manifests: dict[str, dict[str, Any]]) -> tuple[list[Audit], dict[str, warehouse.DayCandidate]]:
    """Every blocking audit of the window's candidates, and what each day would publish."""
    fact = candidates.controls(con, "fct_candidate", step.window)
    mart = candidates.controls(con, "mart_candidate", step.window, kind="mart")
    days = candidates.days(con, step.window, manifests)
    fact_lists = {d: candidates.control_list(f) for d, f in fact.items()}
    audits = [
        unique_keys(CANDIDATE_UNIQUE, FACT, {d: f["duplicate_line_ids"] for d, f in fact.items()}),
        controls_match(CONTROLS_MATCH_RAW, FACT, {d: fact_lists.get(d, [0] * 6) for d in step.window.keys},
                       {d: json.loads(m["controls"]) for d, m in manifests.items()}, "raw_manifest"),
        row_delta(ROW_DELTA, FACT, {d: c.rows for d, c in days.items()},
                  {d: c.rows for d, c in current.items()}, step.cfg.shrink_threshold),
        controls_match(MART_MATCHES_FACT, MART, {d: candidates.control_list(m) for d, m in mart.items()},
                       fact_lists, "fact_candidate"),
    ]
    return audits, days


def correct(step: Step) -> tuple[list[Audit], warehouse.Publication | None, dict[str, warehouse.DayCandidate]]:
    """Build candidates for the window in scratch, audit them, and publish only if no blocking audit failed."""
    scratch = warehouse.scratch_path(step.cfg, step.run.run_id)
    current = warehouse.current(step.cfg, step.window)
    manifests = warehouse.raw_manifests(step.cfg, step.window)
    con = warehouse.open_scratch(step.cfg, step.run.run_id)
    if not has_table(con, "staged"):
        con.close()
        warehouse.copy_out(step.cfg, scratch, "staged.order_lines", step.window, "staged")
        con = warehouse.open_scratch(step.cfg, step.run.run_id)
    try:
        candidates.build(con, step.window)
        audits, days = audit_candidates(step, con, current, manifests)
    finally:
        con.close()
    if any(a.blocks for a in audits):
        return audits, None, days
    return audits, warehouse.publish(step.cfg, scratch, step.window, step.run, CODE_VERSION, days, current), days


def _chart(pub: warehouse.Publication) -> str:
    """The change as a markdown-embedded PNG (matplotlib costs a second to import: only changes are drawn)."""
    from atlasmart_assets import chart

    days = sorted(pub.after)
    before = [pub.before.get(d) for d in days]
    after = [pub.after[d] for d in days]
    return chart.markdown_image(chart.before_after_png(days, {
        "rows": ([b.rows if b else None for b in before], [a.rows for a in after]),
        "gmv": ([b.controls[3] if b else None for b in before], [a.controls[3] for a in after]),
        "cost": ([b.controls[4] if b else None for b in before], [a.controls[4] for a in after]),
    }, f"Publication {pub.publication_id} ({pub.window}): before vs after"), "rows, gmv and cost before/after")


def _day_figures(pub: warehouse.Publication) -> dict[str, Any]:
    return {
        d: {"rows_before": b.rows if b else None, "rows_after": a.rows,
            "controls_before": b.controls if b else None, "controls_after": a.controls,
            "sha256_before": b.sha256 if b else None, "sha256_after": a.sha256, "changed": d in pub.changed,
            "input_sha256": a.input_sha256, "source_high_sequence": a.source_high_sequence}
        for d, a in pub.after.items() for b in [pub.before.get(d)]
    }


@dg.multi_asset(
    specs=[
        dg.AssetSpec(list(FACT), group_name="fact", deps=[staged_order_lines], code_version=CODE_VERSION,
                     description="One row per order line (business key line_id)."),
        dg.AssetSpec(list(MART), group_name="mart", deps=[list(FACT)], code_version=CODE_VERSION,
                     description="One row per day x country x tier; the certified extracts published/partition=D.json."),
    ],
    check_specs=[
        dg.AssetCheckSpec(CANDIDATE_UNIQUE, asset=list(FACT), blocking=True),
        dg.AssetCheckSpec(CONTROLS_MATCH_RAW, asset=list(FACT), blocking=True),
        dg.AssetCheckSpec(ROW_DELTA, asset=list(FACT), blocking=True),
        dg.AssetCheckSpec(MART_MATCHES_FACT, asset=list(MART), blocking=True),
    ],
    partitions_def=daily_partitions, backfill_policy=BACKFILL_POLICY, name="fact_and_mart",
)
def fact_and_mart(context: dg.AssetExecutionContext) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    step = begin(context)
    audits, pub, days = correct(step)
    yield from (check_result(a) for a in audits)
    refuse(step, audits)
    assert pub is not None
    warehouse.drop_scratch(step.cfg, step.run.run_id)
    figures = _day_figures(pub)
    common = {"window": str(step.window), "publication_id": pub.publication_id, "code_version": CODE_VERSION,
              "backfill_id": step.run.backfill_id or "", "changed_partitions": pub.changed,
              "publish_lock_hold_s": round(pub.lock_hold_s, 3), **warehouse.LOCK_STATS.figures()}
    yield dg.MaterializeResult(asset_key=list(FACT), metadata={
        **common, "rows": sum(d.rows for d in days.values()), "per_partition": dg.MetadataValue.json(figures)})
    yield dg.MaterializeResult(asset_key=list(MART), metadata={
        **common, "published_sha256": dg.MetadataValue.json({d: c.sha256 for d, c in days.items()}),
        **({"change_chart": dg.MetadataValue.md(_chart(pub))} if pub.changed else {})})
