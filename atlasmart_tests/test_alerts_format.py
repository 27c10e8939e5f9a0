"""Alert text is a pure function of its inputs: each message carries the figures an operator acts on."""

from atlasmart_assets.alerts import format as fmt

FAILURE = fmt.CheckFailure(
    asset="fact/fct_order_lines", check="fct_order_lines_row_delta_within_bounds", severity="WARN", blocking=False,
    partitions="2026-09-17..2026-09-19", description="row counts change in ['2026-09-18']",
    figures={"per_partition": {"2026-09-18": {"before": 10, "after": 12, "delta": 2}}},
    run_id="abc123", run_url="http://ui.example/runs/abc123")


def test_check_failure_names_asset_check_partitions_severity_figures_and_run_link() -> None:
    text = fmt.check_failure(FAILURE)
    for part in ("fact/fct_order_lines", "fct_order_lines_row_delta_within_bounds", "2026-09-17..2026-09-19",
                 "WARN", "non-blocking", '"after": 12', "<http://ui.example/runs/abc123|abc123>"):
        assert part in text
    assert ":warning:" in text and ":red_circle:" not in text


def test_error_blocking_check_is_marked_as_such() -> None:
    text = fmt.check_failure(fmt.CheckFailure(**{**FAILURE.__dict__, "severity": "ERROR", "blocking": True}))
    assert ":red_circle:" in text and "(blocking)" in text


def test_huge_figures_are_truncated() -> None:
    text = fmt.check_failure(fmt.CheckFailure(**{**FAILURE.__dict__, "figures": {"x": "y" * 10_000}}))
    assert "(truncated)" in text and len(text) < 4000


def test_run_failure_lists_errors_backfill_and_link() -> None:
    text = fmt.run_failure(fmt.RunFailure("atlasmart_daily", "r1", "http://ui/runs/r1", "2026-09-20..2026-09-21",
                                          "bf-9", "late file", ["fact_and_mart: Refused: backfill bf-9"]))
    for part in ("atlasmart_daily", "2026-09-20..2026-09-21", "`bf-9`", "late file", "Refused", "<http://ui/runs/r1|r1>"):
        assert part in text


BACKFILL = fmt.Backfill("bf-1", "2026-09-14..2026-09-16", ["fact/fct_order_lines"], "late file", "ana",
                        {"ticket": "OPS-7"})
CHANGES = [
    fmt.PartitionChange("2026-09-14", "pub-1", "publish", 10, 12, [10, 5, 20, 100, 60, 40], [12, 6, 24, 120, 70, 50],
                        "a" * 64, "b" * 64, True),
    fmt.PartitionChange("2026-09-15", "pub-1", "publish", 9, 9, [9, 4, 18, 90, 50, 40], [9, 4, 18, 90, 50, 40],
                        "c" * 64, "c" * 64, False),
]
NEIGHBOURS = [fmt.Neighbour("2026-09-13", "pub-0", "d" * 64, True), fmt.Neighbour("2026-09-17", None, None, True)]


def test_started_notice_has_window_assets_reason_and_who() -> None:
    text = fmt.backfill_started(BACKFILL)
    for part in ("bf-1", "2026-09-14..2026-09-16", "fact/fct_order_lines", "late file", "ana", "ticket=OPS-7"):
        assert part in text


def test_change_notice_shows_before_after_hash_and_neighbours() -> None:
    md = fmt.change_notice_markdown(BACKFILL, CHANGES, NEIGHBOURS)
    assert "| 2026-09-14 | 10 → 12 (+2) | [10, 5, 20, 100, 60, 40] | [12, 6, 24, 120, 70, 50] | changed aaaaaaaaaaaa → bbbbbbbbbbbb |" in md
    assert "| 2026-09-15 | 9 → 9 (+0) |" in md and "unchanged cccccccccccc" in md
    assert "- 2026-09-13: unchanged (publication pub-0" in md and "- 2026-09-17: unchanged (never published)" in md
    assert "content changed: 2026-09-14" in md


def test_published_message_summarises_changed_partitions() -> None:
    text = fmt.backfill_published(BACKFILL, CHANGES, NEIGHBOURS, "/data/notices/bf-1.md")
    assert "2 partition(s) republished, content changed in 1 (2026-09-14)" in text
    assert "/data/notices/bf-1.md" in text


def test_rollback_names_the_undone_backfill() -> None:
    text = fmt.rolled_back("r9", "http://ui/runs/r9", "bad fix", CHANGES[:1], ["bf-1"])
    assert "Rolled back* 2026-09-14" in text and "`bf-1`" in text and "bad fix" in text
