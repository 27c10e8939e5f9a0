"""No event grows with the window (issue 15: none over 64 KiB): a check's figures and a refusal's text over a year
are cut to a budget, failing days first, and say what they left out."""

from __future__ import annotations

import datetime as dt
import json

import dagster as dg
import pytest

from atlasmart_assets import audits, generate
from atlasmart_assets.alerts.format import failing_partitions, figure_lines
from atlasmart_assets.assets.common import REFUSAL_MAX_BYTES, check_result, refuse
from atlasmart_assets.contract import shown_id
from atlasmart_assets.event_budget import FIGURES_MAX_BYTES, OMITTED, bounded_figures, cut_text, encoded_size
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state

EVENT_MAX_BYTES = 64 * 1024
YEAR = [(dt.date(2025, 9, 22) + dt.timedelta(days=k)).isoformat() for k in range(365)]
FACT = ("fact", "fct_order_lines")


def _controls(k: int) -> list[float]:
    return [20000.0 + k, 8000.0 + k, 60000.0 + k, 6194839.91 + k, 3706826.68 + k, 2488013.23]


def _serialized(result: dg.AssetCheckResult) -> int:
    return len(dg.serialize_value(result.metadata)) + len(result.description or "")


def test_a_year_of_mismatched_controls_is_one_small_check_event_naming_its_failing_days_first() -> None:
    # Every day mismatches but 2026-03-01 .. 2026-03-03, whose figures are equal: the cut keeps mismatches only.
    candidate = {d: _controls(k) for k, d in enumerate(YEAR)}
    expected = {d: ([x + 1 for x in _controls(k)] if d not in {"2026-03-01", "2026-03-02", "2026-03-03"}
                     else _controls(k)) for k, d in enumerate(YEAR)}
    audit = audits.controls_match("fct_order_lines_controls_match_staged", FACT, candidate, expected, "staged")
    uncut = {"figures": dg.MetadataValue.json(audit.figures),
             "figures_readable": dg.MetadataValue.md("\n".join(f"- {line}" for line in figure_lines(audit.figures)))}
    assert len(dg.serialize_value(uncut)) > EVENT_MAX_BYTES, "the scenario must be over the event limit uncut"

    result = check_result(audit)
    assert _serialized(result) < EVENT_MAX_BYTES - 8 * 1024, "room left for the envelope Dagster adds"
    figures = result.metadata["figures"].value
    assert len(json.dumps(figures, ensure_ascii=False)) <= FIGURES_MAX_BYTES
    kept = figures["mismatches"]
    assert kept and set(kept) <= set(audit.figures["mismatches"])
    assert {d: audit.figures["mismatches"][d] for d in kept} == kept, "kept entries are the audit's own, unchanged"
    assert figures[OMITTED] == {"mismatches": len(audit.figures["mismatches"]) - len(kept)}
    assert figures["partitions"] == 365, "the totals beside the days are never cut"
    assert result.metadata["figures"].value is not audit.figures and len(audit.figures["mismatches"]) == 362
    readable = result.metadata["figures_readable"].value
    # Markdown-escaped for the UI (entries\_omitted renders as entries_omitted).
    assert OMITTED.replace("_", "\\_") + ":" in readable and sorted(kept)[0] in readable
    assert failing_partitions(figures) == sorted(kept)


def test_row_counts_over_a_year_keep_the_days_that_moved_before_the_days_that_did_not() -> None:
    moved = set(YEAR[100:140])
    candidate = {d: 20000 + (7 if d in moved else 0) for d in YEAR}
    published = {d: 20000 for d in YEAR}
    # A figures budget that forces a cut of this size: the moved days must survive it.
    audit = audits.row_count_unchanged("fct_order_lines_row_count_unchanged", FACT, candidate, published)
    cut = bounded_figures(audit.figures, max_bytes=4096)
    assert len(json.dumps(cut, ensure_ascii=False)) <= 4096
    assert moved <= set(cut["per_partition"]), "every day whose rows moved is kept"
    assert cut[OMITTED]["per_partition"] == 365 - len(cut["per_partition"])
    assert any(line.startswith("2026-") and "rows" in line for line in figure_lines(cut))


def test_figures_within_budget_are_left_exactly_as_they_are() -> None:
    figures = {"mismatches": {"2026-09-01": {"candidate": [1.0], "staged": [2.0]}}, "partitions": 1}
    assert bounded_figures(figures) is figures
    assert bounded_figures([1, 2, 3]) == [1, 2, 3]


@pytest.mark.parametrize("figures", [
    {d: ["L-%06d" % n for n in range(40)] for d in YEAR},                  # raw problems keyed by day at the top
    {"line_ids_on_other_days": {d: ["L-%06d" % n for n in range(300)] for d in YEAR[:3]}},  # long lists inside
    {"note": "x" * 100_000},                                                 # one value over budget on its own
])
def test_any_shape_of_figures_is_cut_to_the_budget(figures: dict) -> None:
    cut = bounded_figures(figures)
    assert len(json.dumps(cut, ensure_ascii=False)) <= FIGURES_MAX_BYTES


def test_a_refusal_over_a_year_is_one_bounded_text() -> None:
    candidate = {d: _controls(k) for k, d in enumerate(YEAR)}
    expected = {d: [x + 1 for x in _controls(k)] for k, d in enumerate(YEAR)}
    blocking = [audits.controls_match(f"check_{n}", FACT, candidate, expected, "staged") for n in range(3)]
    with pytest.raises(dg.Failure) as refused:
        refuse(f"{YEAR[0]}..{YEAR[-1]}", blocking)
    text = refused.value.description
    assert len(text) <= REFUSAL_MAX_BYTES
    assert text.startswith(f"Not published ({YEAR[0]}..{YEAR[-1]}): check_0: controls differ from staged")
    assert all(f"check_{n}:" in text for n in range(3)), "every blocking check is named"


@pytest.mark.parametrize("char", ["注", "😀", "\"", "a"])
def test_a_text_is_cut_to_the_bytes_an_event_stores_it_in_whatever_its_characters(char: str) -> None:
    text = "start " + char * 20_000
    cut = cut_text(text, 2000)
    assert len(dg.serialize_value({"t": cut})) <= 2000 + len('{"t": ""}'), "the bytes Dagster writes, not characters"
    assert cut.startswith("start " + char) and cut.endswith("more characters)")
    left_out = int(cut.rsplit("(", 1)[1].split()[0])
    assert cut[:len(text) - left_out] == text[:len(text) - left_out], "the note counts what it left out"
    assert encoded_size(cut_text(text[:100], 2000)) == encoded_size(text[:100]), "a text that fits is left as it is"


def test_figures_of_non_ascii_text_are_cut_to_the_bytes_an_event_stores_them_in() -> None:
    figures = {d: ["注" * 800] for d in YEAR[:16]}  # within the budget counted in characters, 5x over in bytes
    assert len(json.dumps(figures, ensure_ascii=False)) < FIGURES_MAX_BYTES < len(dg.serialize_value(figures)) / 4
    cut = bounded_figures(figures)
    assert len(dg.serialize_value(dg.MetadataValue.json(cut))) <= FIGURES_MAX_BYTES + 200
    assert cut[OMITTED]["days"] > 0


def test_a_hostile_non_ascii_line_id_refuses_the_run_in_events_under_64_kib(env, instance) -> None:
    """A raw line whose line_id is 12,000 CJK characters and whose quantity is 0: the values check refuses the
    run and names the line, in events that stay under the limit (each such character is 6 bytes as Dagster writes
    it; a budget in characters wrote a 179 KB check event)."""
    day = dt.date(2026, 9, 2)
    lines = generate.synthetic_lines(day, 12, 40)
    bad = dict(lines[0], line_id="注" * 12_000, quantity=0, source_sequence=lines[-1]["source_sequence"] + 1)
    generate.write_raw(env.raw_dir, day, lines + [bad])
    result = run_chain(instance, day.isoformat(), day.isoformat(), {"dagster/backfill": "bf-hostile"})
    assert not result.success
    events = instance.all_logs(result.run_id)
    refused = [e for e in events if e.dagster_event and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
               and not e.dagster_event.event_specific_data.passed]
    assert [e.dagster_event.event_specific_data.asset_check_key.name for e in refused] == \
        ["raw_order_lines_values_valid"]
    assert "注注注" in refused[0].dagster_event.event_specific_data.description, "the line is named, cut"
    sizes = sorted(len(dg.serialize_value(e)) for e in events)
    assert sizes[-1] < EVENT_MAX_BYTES, sizes[-5:]


@pytest.mark.parametrize("backfill_id", ["注" * 21_000, "b" * 60_000], ids=["cjk-21000", "ascii-60000"])
def test_a_backfill_id_set_by_hand_is_cut_in_the_events_it_reaches(env, instance, backfill_id: str) -> None:
    """The newest day's events carry the run's backfill id once: a 21,000-character one made them 130-151 KB
    (found by a review). It is shown cut (contract.shown_id); the run publishes as it would."""
    result = run_chain(instance, "2026-09-01", "2026-09-05", {"dagster/backfill": backfill_id})
    assert result.success
    events = instance.all_logs(result.run_id)
    assert max(len(dg.serialize_value(e)) for e in events) < EVENT_MAX_BYTES
    for key in (["staged", "order_lines"], ["fact", "fct_order_lines"], ["mart", "revenue_daily"]):
        [shown] = [r.asset_materialization.metadata["backfill_id"].value
                   for r in instance.fetch_materializations(dg.AssetKey(key), limit=10).records
                   if "backfill_id" in r.asset_materialization.metadata]
        assert shown == shown_id(backfill_id) and backfill_id.startswith(shown.split("… (")[0]), shown
        assert shown.endswith(f"… ({len(backfill_id) - 64:,} more characters)"), shown


def test_a_fenced_backfill_with_an_id_set_by_hand_is_refused_in_small_events(env, instance) -> None:
    """The fence's refusal names the backfill: a 60,000-character id made its events 124-187 KB (found by a review)."""
    backfill_id = "bf-" + "x" * 60_000
    result = run_chain(instance, "2026-09-20", "2026-09-21", {"dagster/backfill": backfill_id})
    assert not result.success
    assert max(len(dg.serialize_value(e)) for e in instance.all_logs(result.run_id)) < 16 * 1024
    assert any(shown_id(backfill_id) in c for c in state.failure_causes(result)), state.failure_causes(result)


def test_a_check_views_figures_show_markdown_from_raw_values_as_text() -> None:
    """A raw line id holding markdown (an image of a remote host, a link) is shown as text in the check's view in
    the UI, not rendered: the readable figures escape markdown as the batch list does."""
    from atlasmart_assets.assets.common import check_result
    hostile = "![pixel](https://evil.example/p.png) [click](https://evil.example/x) **bold** | cell"
    audit = audits.Audit("raw_order_lines_values_valid", ("raw", "order_lines"), False, "ERROR", "invalid values",
                  {"2026-09-05": f"1 lines hold invalid values, e.g. {hostile}"})
    readable = check_result(audit).metadata["figures_readable"].value
    assert "![pixel](" not in readable and "[click](" not in readable and "**bold**" not in readable, readable
    assert "\\!\\[pixel\\]" in readable and "\\| cell" in readable, readable


def _largest_event(instance: dg.DagsterInstance, run_id: str) -> int:
    return max(len(dg.serialize_value(e)) for e in instance.all_logs(run_id))


@pytest.mark.parametrize("job, config", [
    ("rollback_job", {"start": "2026-09-05" + "日" * 20_000, "reason": "typo"}),
    ("rollback_job", {"start": "2026-09-05", "end": "2026-09-06", "reason": "undo", "to_publication": "pub-" + "x" * 100_000}),
    ("plan_job", {"start": "2026-09-05" + "日" * 20_000}),
    ("plan_job", {"start": "2026-09-05", "assets": ["raw/" + "x" * 100_000]}),
], ids=["rollback window", "rollback target", "plan window", "plan asset"])
def test_a_rollback_or_plan_refused_for_its_config_writes_no_event_over_64_kib(env, instance, job, config) -> None:
    """A config value quoted whole in a refusal made the run's failure events 105-490 KB (a review's cases): the
    value is shown cut, and Python's own error quoting it is not chained."""
    from atlasmart_assets.definitions import defs

    assert run_chain(instance, "2026-09-05", "2026-09-06").success
    op = "rollback_range" if job == "rollback_job" else "plan_backfill"
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, raise_on_error=False, run_config={"ops": {op: {"config": config}}})
    assert not result.success
    assert _largest_event(instance, result.run_id) < EVENT_MAX_BYTES
    causes = " ".join(state.failure_causes(result))
    assert "more characters)" in causes, causes
