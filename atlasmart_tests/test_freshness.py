"""Freshness of the newest closed day: the deadline arithmetic (pure), the verdict, the check on a real warehouse,
its sensor's one-evaluation-per-state run keys, and the check failure reaching Slack once (in process)."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from atlasmart_assets.alerts import format as fmt  # noqa: E402
from atlasmart_assets.checks import freshness  # noqa: E402
from atlasmart_assets.checks.freshness import Freshness, deadline_of, deadline_offset, due_partition  # noqa: E402
from atlasmart_assets.lab import run_chain  # noqa: E402
from atlasmart_assets.resources import Warehouse  # noqa: E402
from slack_server import SlackServer  # noqa: E402

D = dt.date.fromisoformat
SIX = dt.timedelta(hours=6)
START = D("2026-09-01")


def test_deadline_offset_is_hh_mm_after_the_day_closes() -> None:
    assert deadline_offset("06:00") == SIX
    assert deadline_offset(" 30:15 ") == dt.timedelta(hours=30, minutes=15)
    for bad in ("6", "06:60", "48:00", "six", "-1:00", ""):
        with pytest.raises(ValueError, match="ATLASMART_FRESHNESS_DEADLINE"):
            deadline_offset(bad)
    assert deadline_of(D("2026-09-21"), SIX) == dt.datetime(2026, 9, 22, 6, 0)


def test_due_partition_follows_the_clock_and_never_passes_the_pinned_newest() -> None:
    newest = D("2026-09-21")  # ATLASMART_AS_OF=2026-09-22
    assert due_partition(newest, START, SIX, dt.datetime(2026, 9, 22, 5, 59)) == D("2026-09-20")
    assert due_partition(newest, START, SIX, dt.datetime(2026, 9, 22, 6, 0)) == newest
    # AS_OF pinned in the past: the partition set ends at the newest day, whatever the clock says.
    assert due_partition(newest, START, SIX, dt.datetime(2026, 11, 30, 12, 0)) == newest
    # AS_OF ahead of the clock: the newest day whose deadline the clock has passed.
    assert due_partition(D("2026-12-04"), START, SIX, dt.datetime(2026, 11, 30, 12, 0)) == D("2026-11-29")
    assert due_partition(newest, START, dt.timedelta(hours=30), dt.datetime(2026, 9, 23, 5, 0)) == D("2026-09-20")
    assert due_partition(newest, START, SIX, dt.datetime(2026, 9, 1, 12, 0)) is None


def _verdict(**kw: object) -> Freshness:
    base = dict(newest="2026-09-21", due="2026-09-21", deadline=dt.datetime(2026, 9, 22, 6),
                now=dt.datetime(2026, 9, 22, 9, 30))
    return Freshness(**{**base, **kw})  # type: ignore[arg-type]


def test_missing_partition_fails_naming_day_deadline_overdue_and_backfills() -> None:
    v = _verdict(backfills=("bf-year",))
    assert not v.passed and v.state == "2026-09-21:missing" and v.overdue_s == 3.5 * 3600
    text = v.description()
    for part in ("2026-09-21", "not published", "2026-09-22 06:00:00 UTC", "ATLASMART_FRESHNESS_DEADLINE=06:00",
                 "overdue by 3 h 30 min", "bf-year"):
        assert part in text
    assert fmt.failing_partitions(v.figures()) == ["2026-09-21"], "the check alert names the late day"


def test_published_partition_passes_and_says_when_it_was_late() -> None:
    on_time = _verdict(first_published_at=dt.datetime(2026, 9, 22, 2, 10), publication_id="pub-1")
    assert on_time.passed and on_time.late_by_s is None and on_time.state == "2026-09-21:published"
    late = _verdict(first_published_at=dt.datetime(2026, 9, 22, 7, 0), publication_id="pub-2")
    assert late.passed and late.late_by_s == 3600 and "1 h 0 min after its deadline" in late.description()
    assert _verdict(due=None, deadline=None).passed


def test_check_reads_the_ledger_and_the_sensor_evaluates_each_state_once(env, instance) -> None:  # noqa: ANN001
    from atlasmart_assets.definitions import defs
    sensor = defs.get_sensor_def(freshness.SENSOR_NAME)

    def tick() -> dg.RunRequest:
        ctx = dg.build_sensor_context(instance=instance, definitions=defs, resources={"warehouse": Warehouse()})
        [request] = sensor.evaluate_tick(ctx).run_requests
        return request

    assert tick().run_key == "freshness:2026-09-21:missing"
    missing = freshness.read(Warehouse())
    assert (missing.due, missing.passed, missing.deadline) == ("2026-09-21", False, dt.datetime(2026, 9, 22, 6))
    assert run_chain(instance, "2026-09-21").success
    published = freshness.read(Warehouse())
    assert published.passed and published.publication_id and published.late_by_s > 0  # published after 09-22 06:00
    assert tick().run_key == "freshness:2026-09-21:published"


def test_a_late_partition_is_one_failed_check_alerted_once(env, instance, monkeypatch) -> None:  # noqa: ANN001
    from atlasmart_assets.alerts.slack import AtlasSlack
    from atlasmart_assets.definitions import defs
    monkeypatch.setenv("ATLASMART_SLACK_TOKEN", "xoxb-test")
    assert run_chain(instance, "2026-09-20").success  # the day before is published, the newest is not
    result = defs.resolve_job_def(freshness.JOB_NAME).execute_in_process(instance=instance)
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.check_name == freshness.CHECK_NAME and not evaluation.passed
    check_sensor = defs.get_sensor_def("atlasmart_check_failures_to_slack")
    with SlackServer() as server:
        slack = AtlasSlack(token=dg.EnvVar("ATLASMART_SLACK_TOKEN"), base_url=server.base_url, timeout_s=1,
                           ui_base_url="http://ui.test")
        cursor = None
        for _ in range(2):
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                          resources={"slack": slack, "warehouse": Warehouse()})
            cursor = check_sensor.evaluate_tick(ctx).cursor
    [message] = [r for r in server.rendered if freshness.CHECK_NAME in r]
    assert len(server.messages) == 1
    for part in ("*ERROR*", "Failing partition(s)*\n<http://ui.test/assets/mart/revenue_daily?view=partitions&"
                 "partition=2026-09-21|2026-09-21>", "not published", "2026-09-22 06:00:00 UTC"):
        assert part in message


def test_freshness_failures_are_alerted_once_per_state_in_the_channel_wherever_they_ran(env, instance,  # noqa: ANN001
                                                                                       monkeypatch) -> None:
    """Dagster also runs the freshness check inside every materialization of mart/revenue_daily, backfills included:
    the same late day evaluated in a backfill's run, by the sensor's job and again in another backfill is one
    alert, posted in the channel at once (it judges the current load, not the backfill's thread)."""
    from atlasmart_assets.alerts.slack import AtlasSlack
    from atlasmart_assets.definitions import defs
    monkeypatch.setenv("ATLASMART_SLACK_TOKEN", "xoxb-test")
    assert run_chain(instance, "2026-09-20").success
    job = defs.resolve_job_def(freshness.JOB_NAME)
    check_sensor = defs.get_sensor_def("atlasmart_check_failures_to_slack")
    with SlackServer() as server:
        slack = AtlasSlack(token=dg.EnvVar("ATLASMART_SLACK_TOKEN"), base_url=server.base_url, timeout_s=1,
                           ui_base_url="http://ui.test")
        cursor = None
        for tags in ({"dagster/backfill": "bkfirst"}, {}, {"dagster/backfill": "bksecond"}):
            result = job.execute_in_process(instance=instance, tags=tags)
            assert [e.passed for e in result.get_asset_check_evaluations()] == [False]
            ctx = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                          resources={"slack": slack, "warehouse": Warehouse()})
            tick = check_sensor.evaluate_tick(ctx)
            cursor = tick.cursor
    assert len(server.messages) == 1, server.texts
    [message] = server.messages
    assert freshness.CHECK_NAME in message["text"] and "2026-09-21" in server.rendered[0]
    assert not message.get("thread_ts"), "a freshness failure is not a reply in a backfill's thread"
    assert "1 repeat(s) of an alerted state not sent again" in tick.skip_message
