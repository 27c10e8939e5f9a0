"""Correction flags left behind: the clearing sensor clears the flags of ended (or unknown) runs and keeps a live
run's; when flags of an ended run outlive ATLASMART_FLAG_ALERT_AFTER_S (the clearing sensor stopped or failing), one
Slack message per flag says so, in the backfill's thread."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dagster as dg

sys.path.insert(0, str(Path(__file__).parent))
from atlasmart_assets.alerts import flag_sensor  # noqa: E402
from atlasmart_assets.alerts import format as fmt  # noqa: E402
from atlasmart_assets.alerts.delivery import THREAD_KEY  # noqa: E402
from atlasmart_assets.resources import Warehouse  # noqa: E402
from atlasmart_assets.scope import RunInfo  # noqa: E402
from atlasmart_assets.warehouse import flags  # noqa: E402
from atlasmart_assets.window import Window  # noqa: E402
from slack_server import SlackServer, block_errors  # noqa: E402

JOB = dg.GraphDefinition("g").to_job("j")
HOSTILE = "<!channel> fix\n*Correction published* fake"


def _flag(run_id: str, start: str, end: str, backfill: str | None, minutes_ago: int) -> None:
    with Warehouse().writer() as con:
        flags.mark(con, Window.of(start, end), RunInfo(run_id, backfill, HOSTILE))
        con.execute("update audit.corrections_in_progress set since = since - to_minutes($m::bigint) "
                    "where run_id = $r", {"m": minutes_ago, "r": run_id})


def _held() -> dict[str, list[str]]:
    with Warehouse().reader() as con:
        return flags.held_by(con)


def _runs(instance: dg.DagsterInstance) -> dict[str, dg.DagsterRun]:
    failed = instance.create_run_for_job(JOB, tags={"dagster/backfill": "bf-crash"})
    instance.report_run_failed(failed)
    canceled = instance.create_run_for_job(JOB, tags={"dagster/backfill": "bf-cancel"})
    instance.report_run_canceled(canceled)
    live = instance.create_run_for_job(JOB, tags={"dagster/backfill": "bf-live"})
    instance.report_dagster_event(dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, job_name="j"), run_id=live.run_id)
    return {"failed": failed, "canceled": canceled, "live": live}


def _tick(instance: dg.DagsterInstance, slack: Any, cursor: str | None) -> tuple[str, str]:
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor)
    skip = flag_sensor.evaluate(ctx, slack, Warehouse())
    return ctx.cursor or "", skip.skip_message or ""


def test_clearing_sensor_clears_ended_and_unknown_runs_and_keeps_a_live_one(env, instance) -> None:  # noqa: ANN001
    from atlasmart_assets.definitions import defs
    runs = _runs(instance)
    _flag(runs["failed"].run_id, "2026-09-10", "2026-09-11", "bf-crash", 1)
    _flag(runs["canceled"].run_id, "2026-09-12", "2026-09-12", "bf-cancel", 1)
    _flag(runs["live"].run_id, "2026-09-13", "2026-09-14", "bf-live", 90)
    _flag("not-a-run-of-this-instance", "2026-09-15", "2026-09-15", None, 1)
    ctx = dg.build_sensor_context(instance=instance, definitions=defs, resources={"warehouse": Warehouse()})
    result = defs.get_sensor_def("atlasmart_clear_correction_flags").evaluate_tick(ctx)
    assert "cleared the flags of ended runs" in (result.skip_message or "")
    assert _held() == {runs["live"].run_id: ["2026-09-13", "2026-09-14"]}


def test_flags_an_ended_run_left_past_the_bound_are_alerted_once(env, instance) -> None:  # noqa: ANN001
    from atlasmart_assets.alerts.slack import AtlasSlack
    runs = _runs(instance)
    _flag(runs["failed"].run_id, "2026-09-10", "2026-09-11", "bf-crash", 45)   # ended, past the 30 min bound
    _flag(runs["canceled"].run_id, "2026-09-12", "2026-09-12", "bf-cancel", 5)  # ended, within the bound
    _flag(runs["live"].run_id, "2026-09-13", "2026-09-14", "bf-live", 90)      # old, but its run is running
    _flag("gone-run", "2026-09-15", "2026-09-15", None, 31)                     # unknown to this instance
    thread = "1700000000.000042"
    instance.daemon_cursor_storage.set_cursor_values({THREAD_KEY.format(backfill_id="bf-crash"): thread})
    with SlackServer() as server:
        slack = AtlasSlack(token="xoxb-test", base_url=server.base_url, timeout_s=1, ui_base_url="http://ui.test")
        cursor, first = _tick(instance, slack, None)
        cursor, second = _tick(instance, slack, cursor)
        assert len(server.messages) == 2 and "delivered 0" in second, server.texts
        crash = next(m for m in server.messages if runs["failed"].run_id in m["text"])
        gone = next(m for m in server.messages if "gone-run" in m["text"])
        shown = server.rendered[server.messages.index(crash)]
        for part in ("Correction flag left behind", "2026-09-10..2026-09-11", "mart.revenue_daily_v", "FAILURE",
                     "<http://ui.test/runs/b/bf-crash|bf-crash>", "atlasmart_clear_correction_flags",
                     "&lt;!channel&gt; fix *Correction published* fake", "30 min (ATLASMART_FLAG_ALERT_AFTER_S)"):
            assert part in shown, part
        assert crash["thread_ts"] == thread and crash["reply_broadcast"]
        assert "unknown to this Dagster instance" in server.rendered[server.messages.index(gone)]
        assert "thread_ts" not in gone
        assert all(block_errors(m["blocks"]) == [] for m in server.messages)
        # The canceled run's flag passes the bound: alerted then, once; the alerted ones are not repeated.
        with Warehouse().writer() as con:
            con.execute("update audit.corrections_in_progress set since = since - to_minutes(30) where run_id = $r",
                        {"r": runs["canceled"].run_id})
        cursor, third = _tick(instance, slack, cursor)
        cursor, fourth = _tick(instance, slack, cursor)
    assert "delivered 1" in third and "delivered 0" in fourth and len(server.messages) == 3
    assert runs["canceled"].run_id in server.messages[2]["text"] and "CANCELED" in server.rendered[2]
    assert set(json.loads(cursor)["alerted"]) == {runs["failed"].run_id, runs["canceled"].run_id, "gone-run"}


def test_alerted_flags_are_forgotten_once_cleared(env, instance) -> None:  # noqa: ANN001
    from atlasmart_assets.alerts.slack import AtlasSlack
    runs = _runs(instance)
    _flag(runs["failed"].run_id, "2026-09-10", "2026-09-10", "bf-crash", 45)
    with SlackServer() as server:
        slack = AtlasSlack(token="xoxb-test", base_url=server.base_url, timeout_s=1, ui_base_url="http://ui.test")
        cursor, _ = _tick(instance, slack, None)
        with Warehouse().writer() as con:
            flags.clear(con, runs["failed"].run_id)
        cursor, _ = _tick(instance, slack, cursor)
    assert len(server.messages) == 1 and json.loads(cursor)["alerted"] == {}


def test_stale_flag_message_without_a_backfill_or_a_known_run() -> None:
    f = fmt.StaleFlag("r" * 36, None, None, ["2026-09-15"], "2026-09-22 01:00:00 UTC", 3 * 3600 + 60, None, 1800)
    [message] = fmt.stale_flags(f, "mart.revenue_daily_v", "mart/revenue_daily", fmt.Links("http://ui.test"))
    shown = json.dumps(message.blocks)
    assert "unknown to this Dagster instance" in shown and "3 h 1 min" in shown and "(none given)" in shown
    assert "Backfill" not in shown and "2026-09-15" in message.text
