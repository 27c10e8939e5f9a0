"""A retried correction's notice tells the change its events tell: the batches it added, and no day another run
published in between (a review's cases, 2026-12-07)."""

import datetime as dt

import dagster as dg

from atlasmart_assets import generate, notices
from atlasmart_assets.assets import day_metadata
from atlasmart_assets.contract import RANGE_END_TAG, RANGE_START_TAG
from atlasmart_assets.lab import run_chain
from atlasmart_tests import retries, state
from atlasmart_tests.test_late_batches import _current, _daily, _days_line

DAY = "2026-09-18"
LATE = "B-2026-09-18-02"


def _evidence(text: str) -> list[str]:
    return [line for line in text.splitlines() if LATE in line]


def test_a_retried_single_run_notice_marks_the_batch_the_run_added(env, published, monkeypatch) -> None:
    """Without a retry the notice's Input evidence marks the late batch "— added"; a retry's notice, which covers
    its first attempt's publication (before the first, after its own), marks it too."""
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), LATE, new=2, restate=1, retract=1)
    retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {"dagster/partition": DAY, "atlasmart/reason": "late"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        pub_a1 = _current(env, DAY)[0]
        first_notice = notices.notice_path(env, pub_a1).read_text()
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        mart = state.latest(inst, "mart/revenue_daily", DAY).asset_materialization.metadata
        text = open(mart["change_notice"].value).read()
        assert f"content changed: {DAY}" in text
        assert any("— added" in line for line in _evidence(first_notice))
        assert any("— added" in line for line in _evidence(text)), _evidence(text)


def test_a_retry_notice_tells_a_day_another_run_published_in_between_as_its_events_do(env, published,
                                                                                     monkeypatch) -> None:
    """A1 publishes 17..19 (a late batch on the 18th) and fails writing its events; a late batch lands on the 19th
    and another run S publishes the 19th alone; A1's retry publishes 17..19. Events: the 18th changed (walked back
    through A1), the 19th not (S published it in between: the walk stops). The notice its events link says the
    same (a review found it telling S's change of the 19th as the retry's)."""
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), LATE, new=2, restate=1, retract=1)
    retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {"atlasmart/reason": "late", RANGE_START_TAG: "2026-09-17", RANGE_END_TAG: "2026-09-19"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        generate.late_delta(env.raw_dir, dt.date.fromisoformat("2026-09-19"), "B-2026-09-19-02", new=1, restate=0,
                            retract=0, seed=3)
        other = run_chain(inst, "2026-09-19", "2026-09-19", {"dagster/backfill": "bf-other"})
        assert other.success, state.failure_text(other)
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        changed = {d: state.latest(inst, "fact/fct_order_lines", d).asset_materialization.metadata["changed"].value
                   for d in ("2026-09-17", "2026-09-18", "2026-09-19")}
        mart = state.latest(inst, "mart/revenue_daily", "2026-09-19").asset_materialization.metadata
        text = open(mart["change_notice"].value).read()
        assert changed == {"2026-09-17": False, "2026-09-18": True, "2026-09-19": False}
        assert _days_line(text).endswith(f"content changed: {DAY}"), _days_line(text)


def test_a_retried_backfill_run_notice_marks_the_batch_the_run_added(env, published, monkeypatch) -> None:
    """The same with the backfill tag kept (a retry while the backfill is still requested): the backfill's notice
    covers both publications, and marks the late batch "— added" as a first run's does."""
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), LATE, new=2, restate=1, retract=1)
    retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {"dagster/backfill": "bf-kept", "atlasmart/reason": "late", RANGE_START_TAG: DAY, RANGE_END_TAG: DAY}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        first_notice = notices.notice_path(env, "bf-kept").read_text()
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        mart = state.latest(inst, "mart/revenue_daily", DAY).asset_materialization.metadata
        text = open(mart["change_notice"].value).read()
        assert any("— added" in line for line in _evidence(first_notice))
        assert any("— added" in line for line in _evidence(text)), _evidence(text)
