"""Alert content is a pure function of its inputs: Block Kit within Slack's limits, a plain-text fallback, the
figures an operator acts on, links into the UI, and every hostile value escaped."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import sys
import unicodedata
from pathlib import Path
from typing import Callable

import pytest

from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.alerts.slack import api_base_url

sys.path.insert(0, str(Path(__file__).parent))
from slack_server import MAX_BLOCKS_TEXT_CHARS, block_errors, block_text_chars, rendered  # noqa: E402

LINKS = fmt.Links("http://ui.example/")
HOSTILE = "<!channel> urgent\n*Correction published* fake line"


def _shown(messages: list[fmt.Message]) -> str:
    return "\n".join(rendered({"text": m.text, "blocks": list(m.blocks)}) for m in messages)


def _valid(messages: list[fmt.Message]) -> None:
    for m in messages:
        assert m.text and len(m.text) <= 3000
        assert block_errors(list(m.blocks)) == []


FAILURE = fmt.CheckFailure(
    asset="fact/fct_order_lines", check="fct_order_lines_row_delta_within_bounds", severity="WARN", blocking=False,
    failing=["2026-09-18"], window="2026-09-17..2026-09-19", description="row counts change in ['2026-09-18']",
    figures={"per_partition": {"2026-09-17": {"before": 9, "after": 9, "delta": 0},
                               "2026-09-18": {"before": 10, "after": 12, "delta": 2}}},
    run_id="abc12345-run", backfill_id="bf-9")


def test_check_failure_names_asset_check_failing_day_severity_figures_and_links() -> None:
    messages = fmt.check_failure(FAILURE, LINKS)
    _valid(messages)
    shown = _shown(messages)
    for part in ("fct_order_lines_row_delta_within_bounds", "<http://ui.example/assets/fact/fct_order_lines|fact/fct_order_lines>",
                 "WARN", "non-blocking", "2026-09-17..2026-09-19", "2026-09-18: rows 10 → 12 (+2)",
                 "rows unchanged on 1 other day(s)",
                 "<http://ui.example/assets/fact/fct_order_lines?view=partitions&partition=2026-09-18|2026-09-18>",
                 "<http://ui.example/runs/abc12345-run|abc12345>", "<http://ui.example/runs/b/bf-9|bf-9>"):
        assert part in shown
    assert ":warning:" in shown and ":red_circle:" not in shown
    assert "Check failed: fct_order_lines_row_delta_within_bounds" in messages[0].text


def test_error_blocking_check_is_marked_as_such() -> None:
    shown = _shown(fmt.check_failure(fmt.CheckFailure(**{**FAILURE.__dict__, "severity": "ERROR", "blocking": True}),
                                     LINKS))
    assert ":red_circle:" in shown and "(blocking)" in shown


def test_figures_are_readable_named_controls_not_json_and_the_what_line_is_not_repeated() -> None:
    figures = {"mismatches": {"2026-09-19": {"candidate": [10, 5, 20, 690, 60, 40.5],
                                             "manifest": [10, 5, 20, 700, 60, 40]}}, "partitions": 2}
    desc = f"controls differ from manifest: {figures['mismatches']}"
    messages = fmt.check_failure(fmt.CheckFailure(**{**FAILURE.__dict__, "description": desc, "figures": figures,
                                                     "failing": fmt.failing_partitions(figures)}), LINKS)
    shown = _shown(messages)
    assert "*What:* controls differ from manifest\n" in shown + "\n" and "{" not in shown.split("*What:*")[1].split("\n")[0]
    assert "2026-09-19: manifest → candidate: gmv 700 → 690 (-10), gross_profit 40 → 40.5 (+0.5)" in shown
    assert "\\u" not in shown and "```" not in shown


def test_huge_figures_are_split_never_cut() -> None:
    figures = {"mismatches": {f"2026-{m:02d}-{d:02d}": {"candidate": [1, 2, 3, 4, 5, d], "raw": [1, 2, 3, 4, 5, 0]}
                              for m in range(1, 13) for d in range(1, 29)}}
    messages = fmt.check_failure(fmt.CheckFailure(**{**FAILURE.__dict__, "figures": figures}), LINKS)
    _valid(messages)
    shown = _shown(messages)
    assert all(f"{day}: raw → candidate" in shown for day in figures["mismatches"])
    assert "truncated" not in shown


def test_failing_partitions_from_figures() -> None:
    assert fmt.failing_partitions({"mismatches": {"2026-09-19": {}}, "partitions": 2}) == ["2026-09-19"]
    assert fmt.failing_partitions({"duplicate_line_ids": {"2026-09-01": 0, "2026-09-02": 3}}) == ["2026-09-02"]
    assert fmt.failing_partitions({"per_partition": {"2026-09-01": {"delta": 0}, "2026-09-02": {"delta": -4}}}) == \
        ["2026-09-02"]
    assert fmt.failing_partitions({"2026-09-05": "record 3: cost is not a number"}) == ["2026-09-05"]
    assert fmt.failing_partitions({"value": 1}) == [] and fmt.failing_partitions(None) == []


def test_run_failure_names_assets_not_the_implicit_job_failing_days_errors_and_links() -> None:
    f = fmt.RunFailure(None, ["fact/fct_order_lines", "mart/revenue_daily"], "r1234567-x", "2026-09-01..2026-09-17",
                       ["2026-09-17"], "bf-9", HOSTILE,
                       [fmt.StepError("fact_and_mart", ["fact/fct_order_lines"], "Not published: <b>bad</b> ```x```")])
    messages = fmt.run_failure(f, LINKS)
    _valid(messages)
    shown = _shown(messages)
    assert "__ASSET_JOB" not in shown and "`fact/fct_order_lines`, `mart/revenue_daily`" in shown
    assert "partition=2026-09-17|2026-09-17>" in shown and "2026-09-01..2026-09-17" in shown
    assert "&lt;b&gt;bad&lt;/b&gt;" in shown and "``````" not in shown
    assert "<http://ui.example/runs/r1234567-x|r1234567>" in shown and "<http://ui.example/runs/b/bf-9|bf-9>" in shown
    named = fmt.run_failure(fmt.RunFailure(**{**f.__dict__, "job": "atlasmart_daily"}), LINKS)
    assert "(job `atlasmart_daily`)" in _shown(named)


def test_long_error_is_bounded_and_says_so() -> None:
    f = fmt.RunFailure("j", ["a/b"], "r", "", [], None, None, [fmt.StepError("s", [], "x" * 9000)])
    messages = fmt.run_failure(f, LINKS)
    _valid(messages)
    assert "more characters in the run's log" in _shown(messages)


BACKFILL = fmt.Backfill("bf-1", "2026-09-14..2026-09-16 (3 days)", ["fact/fct_order_lines"], "late file", "ana",
                        {"ticket": "OPS-7"}, ["run-aaaa1111", "run-bbbb2222"])
CHANGES = [
    fmt.PartitionChange("2026-09-14", "pub-1", "publish", 10, 12, [10, 5, 20, 690, 60, 40], [12, 6, 24, 700, 70, 50],
                        "a" * 64, "b" * 64, True),
    fmt.PartitionChange("2026-09-15", "pub-1", "publish", 9, 9, [9, 4, 18, 90, 50, 40], [9, 4, 18, 90, 50, 40],
                        "c" * 64, "c" * 64, False),
]
NEIGHBOURS = [fmt.Neighbour("2026-09-13", "pub-0", "d" * 64, True), fmt.Neighbour("2026-09-17", None, None, True)]


def test_started_notice_has_window_assets_reason_who_tags_and_backfill_link() -> None:
    messages = fmt.backfill_started(BACKFILL, LINKS, "mart.revenue_daily_v")
    _valid(messages)
    shown = _shown(messages)
    for part in ("<http://ui.example/runs/b/bf-1|bf-1>", "2026-09-14..2026-09-16 (3 days)", "fact/fct_order_lines",
                 "late file", "*Requested by*\nana", "ticket=OPS-7", "mart.revenue_daily_v"):
        assert part in shown
    assert messages[0].text.startswith("Correction in progress — backfill bf-1")


def test_requested_by_falls_back_to_the_reason() -> None:
    assert fmt.requested_by(None, "late file") == "no user tag — reason: late file"
    assert fmt.requested_by("ana", "late file") == "ana"


def test_internal_tags_are_not_shown() -> None:
    tags = {".dagster/grpc_info": '{"socket": "/tmp/x"}', "dagster/backfill": "b", "dagster/from_ui": "true",
            "atlasmart/reason": "r", "ticket": "OPS-7"}
    assert fmt.visible_tags(tags, hidden=["atlasmart/reason"]) == {"ticket": "OPS-7"}


def test_published_message_lists_changed_days_with_named_deltas_and_unchanged_ranges() -> None:
    messages = fmt.backfill_published(BACKFILL, CHANGES, NEIGHBOURS, "http://notices.example/bf-1.md",
                                      "mart/revenue_daily", LINKS)
    _valid(messages)
    shown = _shown(messages)
    assert "2 partition(s) republished, content changed in 1" in shown
    day = next(line for line in shown.splitlines() if "2026-09-14|2026-09-14>" in line)
    assert "rows 10 → 12 (+2)" in day and "gmv 690 → 700 (+10)" in day and "units 20 → 24 (+4)" in day
    assert "hash aaaaaaaaaaaa → bbbbbbbbbbbb" in day
    assert "<http://ui.example/assets/mart/revenue_daily?view=partitions&partition=2026-09-14|2026-09-14>" in day
    assert "1 day(s): 2026-09-15" in shown and "2026-09-17 unchanged (never published)" in shown
    assert "<http://notices.example/bf-1.md|bf-1.md>" in shown
    assert "|---|" not in shown
    path = fmt.backfill_published(BACKFILL, CHANGES, NEIGHBOURS, "/data/notices/bf-1.md", "mart/revenue_daily", LINKS)
    assert "`/data/notices/bf-1.md`" in _shown(path) and "/data/notices/bf-1.md" in path[0].text


def test_published_message_tells_the_days_written_afresh_because_their_rows_differed_from_the_ledger() -> None:
    repaired = [CHANGES[0], dataclasses.replace(CHANGES[1], repaired=True)]
    messages = fmt.backfill_published(BACKFILL, repaired, NEIGHBOURS, "/n/bf-1.md", "mart/revenue_daily", LINKS)
    _valid(messages)
    assert "*Repaired:* 1 day(s): 2026-09-15: their published rows differed from the ledger" in _shown(messages)
    assert "; repaired 2026-09-15" in messages[0].text
    plain = _shown(fmt.backfill_published(BACKFILL, CHANGES, NEIGHBOURS, "/n/bf-1.md", "mart/revenue_daily", LINKS))
    assert "Repaired" not in plain and "repaired" not in plain
    failed = fmt.backfill_failed(BACKFILL, "COMPLETED_FAILED", LINKS, repaired)
    _valid(failed)
    assert "*Repaired:* 1 day(s): 2026-09-15" in _shown(failed)
    assert "Repaired" not in _shown(fmt.backfill_failed(BACKFILL, "COMPLETED_FAILED", LINKS, CHANGES))


def _day(i: int) -> str:
    return (dt.date(2025, 1, 1) + dt.timedelta(days=i)).isoformat()


def test_two_years_of_changes_are_split_over_messages_within_slack_limits_and_nothing_is_lost() -> None:
    changes = [fmt.PartitionChange(_day(i), "pub-9", "publish", 100 + i, 101 + i, [100 + i, 50, 300, 6900.5, 4000, 2900.5],
                                   [101 + i, 50, 301, 6910.25, 4001, 2909.25], "a" * 64, "b" * 64, True)
               for i in range(700)]
    changes += [fmt.PartitionChange(_day(700 + i), "pub-9", "publish", 5, 5, [5] * 6, [5] * 6, "c" * 64, "c" * 64, False)
                for i in range(28)]
    messages = fmt.backfill_published(BACKFILL, changes, NEIGHBOURS, "/n/bf-1.md", "mart/revenue_daily", LINKS)
    _valid(messages)
    assert len(messages) > 1 and "(part 2 of" in _shown(messages[1:2])
    shown = _shown(messages)
    assert all(f"partition={c.partition}|{c.partition}>: rows" in shown for c in changes[:700])
    assert "28 day(s): 2026-12-02..2026-12-29" in shown
    assert "2026-09-13 unchanged" in shown and "/n/bf-1.md" in shown


@pytest.mark.parametrize("days", [17, 30, 60, 365])
def test_a_long_correction_is_split_before_slack_refuses_its_blocks_text(days: int) -> None:
    """Slack refuses a message whose blocks' text adds up past about 12,000 characters (msg_blocks_too_long),
    however few its blocks: a review found 60 changed days in one message of 18,606 characters, refused, which
    blocked every later alert. Each message stays under it (the test server's stricter 11,000), nothing lost."""
    changes = [fmt.PartitionChange(_day(i), f"pub-{i:04d}", "publish", 1000 + i, 1001 + i,
                                   [1000, 900, 3000, 686433.56, 435.0, 265.0], [1001, 901, 3002, 686443.56, 425.0, 275.0],
                                   "a" * 64, "b" * 64, True) for i in range(days)]
    messages = fmt.backfill_published(BACKFILL, changes, [], "/n/bf-1.md", "mart/revenue_daily", LINKS)
    _valid(messages)
    assert all(block_text_chars(list(m.blocks)) <= MAX_BLOCKS_TEXT_CHARS for m in messages)
    shown = _shown(messages)
    assert all(f"partition={c.partition}|{c.partition}>: rows" in shown for c in changes)


@pytest.mark.parametrize("n", [1, 4, 5, 12])
def test_full_sections_are_spread_over_messages_by_their_text_and_none_is_lost(n: int) -> None:
    blocks = [fmt._section(f"{i:04d}" + "x" * 2900) for i in range(n)]
    messages = fmt._messages(["head"], blocks)
    _valid(messages)
    kept = [b for m in messages for b in m.blocks if not b["text"]["text"].startswith("_(part")]
    assert kept == blocks and len(messages) == -(-n // 3)


@pytest.mark.parametrize("n", [1, 50, 51, 99, 100, 149])
def test_blocks_are_spread_over_messages_of_at_most_50_and_none_is_lost(n: int) -> None:
    blocks = [fmt._section(f"b{i}") for i in range(n)]
    messages = fmt._messages(["head"], blocks)
    _valid(messages)
    kept = [b for m in messages for b in m.blocks if not b["text"]["text"].startswith("_(part")]
    assert kept == blocks and len(messages) == (1 if n <= 50 else 1 + -(-(n - 50) // 49))


def test_window_text_groups_consecutive_days() -> None:
    assert fmt.window_text(["2026-09-03", "2026-09-01", "2026-09-02", "2026-09-06"]) == "2026-09-01..2026-09-03, 2026-09-06"
    assert fmt.window_label(["2026-09-01", "2026-09-02"]) == "2026-09-01..2026-09-02 (2 days)"
    assert fmt.window_label([]) == ""


def test_deltas_are_named_and_signed() -> None:
    assert fmt.control_deltas([10, 5, 20, 690, 60, 40], [10, 5, 20, 700, 60, 39.75]) == \
        ["gmv 690 → 700 (+10)", "gross_profit 40 → 39.75 (-0.25)"]
    assert fmt.delta(None, 5) == "new 5" and fmt.delta(2407.9, 2408.9) == "2407.9 → 2408.9 (+1)"


def test_rollback_replies_name_the_undone_backfill_and_restored_days() -> None:
    messages = fmt.rolled_back("r9abcdef-1", "bad fix", CHANGES[:1], ["bf-1"], "mart/revenue_daily", LINKS)
    _valid(messages)
    shown = _shown(messages)
    assert "*Rolled back* 2026-09-14" in shown and "<http://ui.example/runs/b/bf-1|bf-1>" in shown
    assert "bad fix" in shown and "gmv 690 → 700 (+10)" in shown
    assert "*Requested by*\nno user tag — reason: bad fix" in shown
    by_ana = _shown(fmt.rolled_back("r9abcdef-1", "bad fix", CHANGES[:1], ["bf-1"], "mart/revenue_daily", LINKS,
                                    user="ana <@U1>"))
    assert "*Requested by*\nana &lt;@U1&gt;" in by_ana


# --- hostile input --------------------------------------------------------------------------------------------

def _hostile_backfill() -> fmt.Backfill:
    # The backfill id is a run tag anyone can set: hostile too.
    return fmt.Backfill(HOSTILE, "2026-09-14", ["a/b"], HOSTILE, None, {"note": "<@U123> & <https://evil|click>"})


BUILDERS = ["started", "failed", "published", "rolled-back", "run-failure", "check"]


def _each_message(value: str, backfill: Callable[[], fmt.Backfill]) -> list[Callable[[], list[fmt.Message]]]:
    """Every message whose text can carry `value` (a reason, a tag, an id, an error), in BUILDERS' order."""
    return [
        lambda: fmt.backfill_started(backfill(), LINKS, "v"),
        lambda: fmt.backfill_failed(backfill(), "FAILURE", LINKS),
        lambda: fmt.backfill_published(backfill(), CHANGES, NEIGHBOURS, "/n/x.md", "a/b", LINKS),
        lambda: fmt.rolled_back("r", value, CHANGES, [value], "a/b", LINKS),
        lambda: fmt.run_failure(fmt.RunFailure(None, ["a/b"], "r", "", [], value, value,
                                               [fmt.StepError("s", [], value)]), LINKS),
        lambda: fmt.check_failure(fmt.CheckFailure("a/b", "c", "ERROR", True, [], "", value, {"x": value}, "r"), LINKS),
    ]


@pytest.mark.parametrize("build", _each_message(HOSTILE, _hostile_backfill), ids=BUILDERS)
def test_hostile_values_cannot_ping_or_forge_a_status_line(build) -> None:  # noqa: ANN001
    messages = build()
    _valid(messages)
    for text in [m.text for m in messages] + [_shown(messages)]:
        assert "<!channel>" not in text and "<@U123>" not in text and "<https://evil" not in text
        text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)  # error text is verbatim in code: not rendered
        assert not re.search(r"^\s*\*Correction published\*", text, re.MULTILINE)
        assert not any(line.startswith("*Correction published* fake") for line in text.splitlines())
    assert "&lt;!channel&gt; urgent *Correction published* fake line" in _shown(messages)


# A right-to-left override shows the rest of its line reversed ("…ton si 0" reads "0 is not…"), a zero-width space
# and a bidi isolate are not seen at all, a NUL or an escape may end or colour a terminal's copy.
UNSEEN = "late file\u202e0 si latot\u202c ana\u200bana \u2066x\u2069 \x00\x1b[31m\u2028\ufeff"


def _unseen_backfill() -> fmt.Backfill:
    return fmt.Backfill("bf-\u202e1", "2026-09-14", ["a/b"], UNSEEN, UNSEEN, {"note": UNSEEN})


@pytest.mark.parametrize("build", _each_message(UNSEEN, _unseen_backfill), ids=BUILDERS)
def test_invisible_characters_in_hostile_values_are_shown_as_code_points(build) -> None:  # noqa: ANN001
    messages = build()
    _valid(messages)
    for text in [m.text for m in messages] + [json.dumps([list(m.blocks) for m in messages], ensure_ascii=False)]:
        assert not fmt.INVISIBLE.search(text.replace("\n", "")), repr(fmt.INVISIBLE.search(text.replace("\n", "")))
    shown = _shown(messages)
    assert "[U+202E]0 si latot[U+202C]" in shown and "ana[U+200B]ana" in shown and "[U+0000][U+001B]" in shown


def test_a_reason_of_invisible_characters_only_still_gives_valid_messages() -> None:
    reason = "\u202e" * 1000  # the longest reason a run takes; each shown as eight characters
    backfill = fmt.Backfill("bf-1", "2026-09-14", ["a/b"], reason, reason, {"note": reason})
    for messages in (fmt.backfill_started(backfill, LINKS, "v"), fmt.backfill_failed(backfill, "FAILURE", LINKS),
                     fmt.backfill_published(backfill, CHANGES, NEIGHBOURS, "/n/x.md", "a/b", LINKS)):
        _valid(messages)
        assert "\u202e" not in _shown(messages) and "[U+202E]" in _shown(messages)


# Default-ignorable characters of other categories that render as nothing (or a blank): Unicode's
# Default_Ignorable_Code_Point beyond Cc/Cf, less the variation selectors (emoji need U+FE0F) and the unassigned.
IGNORABLE = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F, 0x3164, 0xFFA0}


def test_the_invisible_characters_are_unicodes_controls_and_formats_but_the_joiners() -> None:
    """INVISIBLE is written out (computing it from unicodedata costs every process 0.16 s at import): held here
    against this Python's Unicode tables, both ways."""
    kept = {"\t", "\n", "\r", "\u200c", "\u200d"}
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        invisible = (unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") and char not in kept) or code in IGNORABLE
        assert bool(fmt.INVISIBLE.fullmatch(char)) == invisible, (hex(code), unicodedata.category(char))


@pytest.mark.parametrize("text, shown", [
    ("ana\u200dana", "ana[U+200D]ana"), ("ana\u200cana", "ana[U+200C]ana"), ("\u200dana", "[U+200D]ana"),
    ("ana\u034fana", "ana[U+034F]ana"), ("ana\u3164ana", "ana[U+3164]ana"),
    ("\U0001F468\u200d\U0001F469", "\U0001F468\u200d\U0001F469"),  # an emoji sequence keeps its joiner
    ("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"),  # Persian
    ("\u2764\ufe0f", "\u2764\ufe0f"),  # a variation selector is an emoji's presentation
])
def test_joiners_are_kept_only_between_characters_beyond_ascii(text: str, shown: str) -> None:
    assert fmt.esc(text) == shown and fmt.md(text) == shown.replace("[", "\\[").replace("]", "\\]")


LONG_ID = "bf-" + "x" * 60_000


@pytest.mark.parametrize("build", [
    lambda: fmt.backfill_started(fmt.Backfill(LONG_ID, "2026-09-14", ["a/b"], "r", None, {}), LINKS, "v"),
    lambda: fmt.backfill_failed(fmt.Backfill(LONG_ID, "2026-09-14", ["a/b"], "r", None, {}), "FAILURE", LINKS),
    lambda: fmt.backfill_published(fmt.Backfill(LONG_ID, "2026-09-14", ["a/b"], "r", None, {}), CHANGES, NEIGHBOURS,
                                   "/n/x.md", "a/b", LINKS),
    lambda: fmt.rolled_back("r", "why", CHANGES, [LONG_ID], "a/b", LINKS),
    lambda: fmt.check_failure(fmt.CheckFailure("a/b", "c", "ERROR", True, [], "", "d", {}, "r", LONG_ID), LINKS),
], ids=["started", "failed", "published", "rolled-back", "check"])
def test_a_backfill_id_set_by_hand_is_shown_cut_and_unlinked_in_valid_messages(build) -> None:  # noqa: ANN001
    """The dagster/backfill tag is anyone's to set: a 60,000-character id took a section past Slack's 3,000
    characters (and its URL with it). It is shown cut (contract.shown_id), with no link."""
    messages = build()
    _valid(messages)
    shown = _shown(messages)
    assert LONG_ID not in shown and "bf-" + "x" * 61 + "… (59,939 more characters)" in shown
    assert "/runs/b/bf-xxx" not in shown


@pytest.mark.parametrize("given", ["http://127.0.0.1:9/api", "http://127.0.0.1:9/api/", "http://127.0.0.1:9",
                                   "http://127.0.0.1:9/"])
def test_slack_base_url_accepted_with_or_without_api(given: str) -> None:
    assert api_base_url(given) == "http://127.0.0.1:9/api/"


def test_a_failed_backfill_that_had_published_says_the_publication_stands() -> None:
    nothing = _shown(fmt.backfill_failed(BACKFILL, "COMPLETED_FAILED", LINKS))
    after_commit = _shown(fmt.backfill_failed(BACKFILL, "COMPLETED_FAILED", LINKS, CHANGES))
    assert "nothing of a failed run was published" in nothing
    assert "nothing of a failed run was published" not in after_commit
    assert "published, then failed" in after_commit and "pub-1" in after_commit
    assert "stand and readers see them" in after_commit


def test_a_run_failure_names_the_root_cause_dagster_wrapped() -> None:
    from types import SimpleNamespace

    from atlasmart_assets.alerts.run_sensor import _with_root_cause

    root = SimpleNamespace(message="IOException: Could not set lock on file", cause=None)
    wrapper = SimpleNamespace(message='Error occurred while executing op "correction":', cause=root)
    text = _with_root_cause(wrapper)
    assert text.startswith("Error occurred") and "Caused by: IOException: Could not set lock on file" in text


def test_a_scattered_window_keeps_every_head_within_slacks_limits() -> None:
    """A dimension-drift backfill over 300 alternate days: the window is hundreds of ranges; each head line shows
    the first and the last and how many (the UI has the rest), so no section exceeds Slack's 3,000 characters and
    the reason and requester are not cut from the text fallback."""
    days = [(dt.date(2025, 1, 1) + dt.timedelta(days=2 * k)).isoformat() for k in range(300)]
    b = fmt.Backfill("bf-1", fmt.window_label(days), ["a/b"], "dimension drift", "ops@example.com", {})
    for messages in (fmt.backfill_started(b, LINKS, "v"), fmt.backfill_failed(b, "FAILURE", LINKS),
                     fmt.stale_flags(fmt.StaleFlag("r" * 32, "bf-1", "why", days, "t", 4000, "FAILURE", 1800),
                                     "v", "a/b", LINKS)):
        _valid(messages)
        assert "(300 ranges)" in messages[0].text and "2025-01-01" in messages[0].text
        for block in (b for m in messages for b in m.blocks):
            assert len(json.dumps(block)) < 3000
    assert "dimension drift" in fmt.backfill_started(b, LINKS, "v")[0].text


def test_a_large_amount_is_shown_as_it_reads_not_with_its_binary_error() -> None:
    from atlasmart_assets.alerts.format import delta, num
    assert num(611182914115.32) == "611182914115.32"
    assert num(6194902.91) == "6194902.91" and num(0.1 + 0.2) == "0.3" and num(2.5) == "2.5" and num(700.0) == "700"
    assert delta(611182914114.0, 611182914115.32) == "611182914114 → 611182914115.32 (+1.32)"
    from atlasmart_assets.assets.common import controls_md
    table = controls_md([1, 1, 1, 686433675450.49, 0, 0], [1, 1, 1, 686433675453.56, 0, 0]).value
    assert "| +3.07 |" in table and "3.0701" not in table, table


def test_a_check_alert_shows_a_figure_line_past_a_thousand_characters_whole() -> None:
    """Only reasons and tags are cut (a run is refused with a longer one); a check's figures never are (a review
    found 200 line ids cut at the thousandth character when the cut was put in every single-line field)."""
    ids = [f"L-{i:06d}" for i in range(200)]
    failure = fmt.CheckFailure("fact/fct_order_lines", "fct_order_lines_line_id_unique", "ERROR", True,
                               ["2026-09-20"], "2026-09-20", "line ids on two days", {"line_ids": ids}, "run-1")
    assert ids[-1] in _shown(fmt.check_failure(failure, LINKS))
