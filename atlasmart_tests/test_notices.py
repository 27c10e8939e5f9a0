"""The change notice belongs to the publication: the publish writes it (no Slack, no daemon), named after the backfill
or the publication, with every day before → after, the neighbours proven unchanged and the extracts to refresh."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from typing import Iterator

import pytest

from atlasmart_assets import lab, notices
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.definitions import defs
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse

BF = "BF-20260920-0900-R1"


def _change(day: str, before: list[float] | None, after: list[float], changed: bool = True) -> fmt.PartitionChange:
    return fmt.PartitionChange(day, "pub-2", "publish", int(before[0]) if before else None, int(after[0]), before,
                               after, ("a" * 64) if before else None, ("b" if changed else "a") * 64, changed)


def _notice(**kw: object) -> notices.Notice:
    base = dict(
        name="bf-1.md", kind="publish", backfill_id="bf-1", publication_ids=["pub-2"], run_ids=["r-1"],
        published_at="2026-09-22 09:00:00 UTC", reason="legacy cost", requested_by="ana", fence_override=None,
        code_version="0.2.0+abc", changes=[_change("2026-09-20", [8, 5, 10, 690, 435, 255], [8, 5, 10, 690, 425, 265]),
                                           _change("2026-09-18", [3, 3, 3, 30, 10, 20], [3, 3, 3, 30, 10, 20], False)],
        neighbours=[notices.NeighbourProof("2026-09-21", "pub-1", "c" * 64, "pub-1", "c" * 64, "e" * 64, "e" * 64),
                    notices.NeighbourProof("2026-09-17", None, None, None, None, None, None)],
        ui_base_url="http://ui.example")
    base.update(kw)
    return notices.Notice(**base)  # type: ignore[arg-type]


def test_notice_names_days_before_after_neighbours_and_extracts_to_refresh() -> None:
    text = notices.markdown(_notice())
    assert text.startswith("# Correction notice — backfill bf-1\n")
    assert "| [2026-09-20](http://ui.example/assets/mart/revenue_daily?view=partitions&partition=2026-09-20) " \
           "| 8 → 8 (±0) | cost 435 → 425 (-10), gross_profit 255 → 265 (+10) |" in text
    assert "| lines 8, orders 5, units 10, gmv 690, cost 435, gross_profit 255 | " in text
    assert "| lines 8, orders 5, units 10, gmv 690, cost 425, gross_profit 265 | " in text
    assert "| [2026-09-18](" in text and "unchanged aaaaaaaaaaaa" in text
    assert "- 2026-09-21: **unchanged** — publication pub-1" in text
    assert "- 2026-09-17: unchanged (never published, before or after)" in text
    assert "- `published/partition=2026-09-20.json`: sha256 aaaaaaaaaaaaaaaa → bbbbbbbbbbbbbbbb" in text
    assert "partition=2026-09-18.json" not in text.split("## Saved extracts to refresh")[1]
    moved = notices.NeighbourProof("2026-09-21", "pub-1", "c" * 64, "pub-9", "d" * 64, "e" * 64, "f" * 64)
    assert "- 2026-09-21: **CHANGED**" in notices.markdown(_notice(neighbours=[moved]))


def test_hostile_values_cannot_forge_markdown_in_the_notice() -> None:
    text = notices.markdown(_notice(reason="x\n# Published OK\n| 2026-09-20 | fake |", requested_by="<b>eve</b>",
                                    tags={"t": "[click](http://evil)"}))
    assert not any(line.startswith(("# Published", "| 2026-09-20 | fake")) for line in text.splitlines())
    assert "- Reason: x \\# Published OK \\| 2026-09-20 \\| fake \\|" in text
    assert "<b>" not in text and "\\[click\\](http://evil)" in text
    assert "- Backfill: <http://ui.example/runs/b/bf-1>" in text


def test_invisible_characters_in_a_notice_are_shown_as_code_points() -> None:
    """A right-to-left override in a reason showed the rest of the notice's line reversed; a zero-width space in who
    asked made two names read the same."""
    unseen = "cost\u202e0 si latot\u202c"
    text = notices.markdown(_notice(backfill_id="bf-\u2066x", reason=unseen, requested_by="ana\u200bana",
                                    tags={"t\u200f": unseen + "\x1b[31m"}))
    assert not fmt.INVISIBLE.search(text.replace("\n", "")), repr(fmt.INVISIBLE.search(text.replace("\n", "")))
    assert "- Reason: cost\\[U+202E\\]0 si latot\\[U+202C\\]" in text
    assert "ana\\[U+200B\\]ana" in text and "backfill bf-\\[U+2066\\]x" in text and "\\[U+001B\\]" in text


def test_a_repaired_day_whose_content_also_changed_is_told_as_both() -> None:
    """A day whose rows changed behind the ledger and that a late batch changed too: the notice names it changed and
    repaired, and never says its before and after agree (a review found it did)."""
    both = dataclasses.replace(_change("2026-09-20", [8, 5, 10, 690, 435, 255], [9, 5, 11, 700, 440, 260]),
                               repaired=True)
    text = notices.markdown(_notice(changes=[both]))
    assert "content changed: 2026-09-20; repaired: 2026-09-20 (their published rows differed" in text, text
    assert "agree" not in text
    [row] = [line for line in text.splitlines() if line.startswith("| [2026-09-20]")]
    assert "aaaaaaaaaaaa → bbbbbbbbbbbb (repaired)" in row, row


def test_a_hostile_backfill_id_never_becomes_a_path() -> None:
    assert notices.notice_name("bf-20260920-01") == "bf-20260920-01.md"
    for hostile in ("../../../x/evil", "/etc/passwd", ".hidden", "a b", "x" * 300):
        name = notices.notice_name(hostile)
        assert "/" not in name and not name.startswith(".") and name.startswith("id-"), name


def test_the_publish_writes_the_notice_without_slack_or_a_daemon(env, instance, published, monkeypatch) -> None:
    monkeypatch.delenv("ATLASMART_SLACK_TOKEN", raising=False)
    published(("2026-09-19", "2026-09-20"), ("2026-09-21", None))
    lab.publish_legacy_incident(Warehouse())
    newest = (env.published_dir / "partition=2026-09-21.json").read_bytes()
    assert run_chain(instance, "2026-09-20", "2026-09-20",
                     {"dagster/backfill": BF, "atlasmart/reason": "legacy cost 40 on one line", "ticket": "OPS-9"}).success

    text = (env.notices_dir / f"{BF}.md").read_text()
    assert text.startswith(f"# Correction notice — backfill {BF}")
    assert "- Reason: legacy cost 40 on one line" in text and "- Tags: ticket=OPS-9" in text
    day = next(line for line in text.splitlines() if line.startswith("| [2026-09-20]"))
    assert "| 8 → 8 (±0) | cost 435 → 425 (-10), gross_profit 255 → 265 (+10) |" in day, day
    assert "- 2026-09-19: **unchanged**" in text and "- 2026-09-21: **unchanged**" in text
    assert "- `published/partition=2026-09-20.json`: sha256 " in text
    assert "## Input evidence" in text and "- 2026-09-20: B-2026-09-20-01 (sha256 " in text
    assert (env.published_dir / "partition=2026-09-21.json").read_bytes() == newest
    # Every publication has its notice: the daily ones are named after their publication id.
    assert len(list(env.notices_dir.glob("pub-*.md"))) == 3  # 19..20, 21, the incident's republication


def test_a_rollback_writes_its_notice_named_after_its_publication(env, instance, published) -> None:
    published(("2026-09-19", "2026-09-21", {"atlasmart/fence_override": "test"}))
    lab.publish_legacy_incident(Warehouse())
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance, run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-20",
                                                                              "reason": "undo the incident"}}}})
    assert result.success
    [path] = env.notices_dir.glob("rol-*.md")
    text = path.read_text()
    assert text.startswith("# Rollback notice — publication rol-")
    assert "cost 435 → 425 (-10)" in text and "(restores pub-" in text
    assert "- 2026-09-19: **unchanged**" in text and "- 2026-09-21: **unchanged**" in text


def test_a_rollback_s_notice_and_ledger_say_who_asked_and_the_operator_s_tags(env, instance, published) -> None:
    """A rollback launched with a user tag and a tag of the operator's own: its notice names both, as a
    correction's does (a review found "Requested by: no user tag" and no tags: the run's tags never reached it)."""
    published(("2026-09-19", "2026-09-21", {"atlasmart/fence_override": "test"}))
    lab.publish_legacy_incident(Warehouse())
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance, tags={"user": "ana", "ticket": "OPS-9"},
        run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-20", "reason": "undo the incident"}}}})
    assert result.success
    [path] = env.notices_dir.glob("rol-*.md")
    head = path.read_text().split("## ")[0]
    assert "- Reason: undo the incident" in head and "- Requested by: ana" in head and "ticket=OPS-9" in head, head


def test_a_day_s_requests_are_named_up_to_a_bound_and_counted_beyond_it() -> None:
    """Requests accumulate: a year's notice that named 3,000 on each day was 12 MB. The ledger and the extract keep
    every id; the notice names ten a day and counts the rest."""
    batch = {"batch": "B-1", "sha256": "ab" * 32, "source_high_sequence": 7}
    many = tuple(f"DR-{k:05d}" for k in range(1, 3001))
    few = ("DR-00001", "DR-00002")
    day = {"input_batches": [batch], "dimension_version": None, "input_sha256": None, "source_high_sequence": 7}
    lines = notices._inputs({"2026-09-01": {**day, "requests_applied": many},
                             "2026-09-02": {**day, "requests_applied": few}}, {})
    assert "DR-00010," not in lines["2026-09-01"] and "DR-00010 and 2,990 more" in lines["2026-09-01"]
    assert "DR-00011" not in lines["2026-09-01"] and len(lines["2026-09-01"]) < 400
    assert lines["2026-09-02"].endswith("deletion requests applied: DR-00001, DR-00002")


@pytest.fixture
def new_york(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone is New York's (UTC-5 in December) for the test."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_commit_time_labelled_utc_is_utc_on_a_host_outside_utc(env, instance, new_york) -> None:
    """Every AtlasMart connection's session zone is UTC: the ledger's published_at, and the notice's "committed …
    UTC" from it, are UTC on a host in New York (a review found them five hours off)."""
    before = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    assert run_chain(instance, "2026-09-19").success
    after = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    [path] = env.notices_dir.glob("pub-*.md")
    stamp = re.search(r"committed (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", path.read_text())
    assert stamp, path.read_text()
    committed = dt.datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
    assert before - dt.timedelta(seconds=2) <= committed <= after, (committed, before, after)
