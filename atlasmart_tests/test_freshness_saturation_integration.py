"""Issue 17 items 3-4 from a real deployment (dagster-webserver + dagster-daemon, loopback Slack server):

1. a late current partition: nothing published for the newest closed day 2026-09-21 (ATLASMART_AS_OF=2026-09-22,
   due by 2026-09-22 06:00 UTC) -> the sensor `atlasmart_freshness` launches one evaluation -> one failed
   `revenue_daily_newest_partition_fresh` -> exactly one Slack message, through the check-failure alert path;
2. saturation: the backfill lane's limit raised on purpose (dagster.yaml: dagster/backfill limit 2) and the duration
   objective set tiny (ATLASMART_SLO_DURATION_S=0.001), a current-lane run held beside a backfill run (the test
   holds the warehouse lock until both have started, so they overlap by construction, never by timing) -> one
   incident recorded against the backfill in audit.saturation_incidents and alerted once in the backfill's thread;
   the SLO report lists it; once the current run published the day, the freshness check passes (no second alert).

Grain: one deployment for both scenarios, in order."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import pytest

from atlasmart_assets.checks.freshness import CHECK_KEY, CHECK_NAME, JOB_NAME
from atlasmart_assets.contract import CURRENT_LANE_TAGS
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse.connection import open_file
from atlasmart_tests.deployment import (
    FINISHED,
    REPO_ROOT,
    WORKER_B,
    Deployment,
    deployment,
    runs,
    wait_backfill_runs,
    wait_runs_finished,
    wait_sensor_ticks,
)
from atlasmart_tests.slack_server import SlackServer

pytestmark = [pytest.mark.integration, WORKER_B]

CHAIN = [["raw", "order_lines"], ["staged", "order_lines"], ["fact", "fct_order_lines"], ["mart", "revenue_daily"]]
BACKFILL = [f"2026-09-{d:02d}" for d in range(1, 20)]  # 2026-09-01 .. 2026-09-19, well behind the fence
NEWEST = "2026-09-21"
CHECKS = "atlasmart_check_failures_to_slack"
SATURATION = "atlasmart_saturation_incidents"
# The backfill lane's limit raised on purpose (the repo's dagster.yaml has 1): the incident records the limit in force.
DAGSTER_YAML = """
concurrency:
  runs:
    max_concurrent_runs: 4
    tag_concurrency_limits:
      - key: "dagster/backfill"
        limit: 2
      - key: "atlasmart/lane"
        value: "current"
        limit: 2
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
run_monitoring:
  enabled: true
  poll_interval_seconds: 30
telemetry:
  enabled: false
"""


@pytest.fixture(scope="module")
def slack() -> Iterator[SlackServer]:
    with SlackServer() as server:
        yield server


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fresh") / "data"


@pytest.fixture(scope="module")
def dep(slack: SlackServer, data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    env = {"ATLASMART_RAW_DIR": str(REPO_ROOT / "raw"), "ATLASMART_DATA_DIR": str(data_dir),
           "ATLASMART_AS_OF": "2026-09-22", "ATLASMART_START_DATE": "2026-09-01",
           "ATLASMART_SLO_DURATION_S": "0.001", "ATLASMART_SLACK_TOKEN": "xoxb-deployment-test",
           # The newest day must stay unpublished until the test publishes it (the late-partition scenario).
           "ATLASMART_CATCH_UP": "off",
           # The current run is held beside the backfill: its scratch work would stand paused up to 60 s at a time.
           "ATLASMART_BACKFILL_GIVE_WAY_S": "5",
           # Sensors tick every 5 s instead of 30 s: "no second message in the next two ticks" costs 10 s, not 60.
           "ATLASMART_SENSOR_INTERVAL_S": "5",
           "ATLASMART_SLACK_BASE_URL": slack.origin, "ATLASMART_UI_BASE_URL": "http://ui.test"}
    with deployment(tmp_path_factory.mktemp("deployment"), env, DAGSTER_YAML) as d:
        yield d


def freshness_alerts(slack: SlackServer) -> list[str]:
    return [r for r in slack.rendered if CHECK_NAME in r]


def check_evaluations(dep: Deployment) -> list[Any]:
    """The freshness check's completed evaluations, newest first."""
    from atlasmart_assets.alerts.check_records import records_after
    with dep.instance() as instance:
        return [r for r in reversed(records_after(instance, CHECK_KEY, 0)) if not r.planned]


def incidents(data_dir: Path) -> list[dict[str, Any]]:
    with open_file(data_dir / "warehouse.duckdb", read_only=True, config={}, timeout_s=60) as con:
        if not con.execute("select count(*) from information_schema.tables "
                           "where table_name = 'saturation_incidents'").fetchone()[0]:
            return []
        cur = con.execute("select * from audit.saturation_incidents order by incident_seq, run_id, metric")
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row)) for row in cur.fetchall()]


def test_a_late_newest_partition_is_one_failed_check_alerted_once(dep: Deployment, slack: SlackServer) -> None:
    [message] = dep.wait_for("the freshness failure in Slack", lambda: freshness_alerts(slack), timeout_s=240)
    delivered_at = time.time()
    for part in ("*Check failed* `revenue_daily_newest_partition_fresh`", "*ERROR*",
                 f"partition={NEWEST}|{NEWEST}>", "not published", "2026-09-22 06:00:00 UTC"):
        assert part in message, message
    # Two more completed ticks of the check-failure sensor (and of the freshness sensor) send nothing again.
    wait_sensor_ticks(dep, CHECKS, delivered_at, 2, timeout_s=180)
    wait_sensor_ticks(dep, "atlasmart_freshness", delivered_at, 2, timeout_s=180)
    assert len(freshness_alerts(slack)) == 1
    with dep.instance() as instance:
        evaluations = runs(instance, {"dagster/sensor_name": "atlasmart_freshness"})
    assert [r.dagster_run.tags["atlasmart/freshness"] for r in evaluations] == [f"{NEWEST}:missing"]
    assert [r.dagster_run.job_name for r in evaluations] == [JOB_NAME]
    [failed] = check_evaluations(dep)
    assert failed.failed and failed.metadata["figures"][NEWEST]["published"] is False


def test_saturation_is_recorded_against_the_backfill_and_alerted_once(dep: Deployment, slack: SlackServer,
                                                                      data_dir: Path) -> None:
    warehouse = Warehouse(data_dir=str(data_dir))
    # The gate: while this process holds the warehouse, a run that has started cannot finish, so the current run
    # launched after the backfill run started overlaps it by construction.
    with warehouse.writer():
        backfill_id = dep.launch_backfill(CHAIN, BACKFILL, {"atlasmart/reason": "issue 17: saturation evidence"},
                                          title="lane limit raised")
        [backfill_run] = wait_backfill_runs(dep, backfill_id, {"STARTED"}, timeout_s=240)
        current_id = dep.launch_run("atlasmart_daily", {**CURRENT_LANE_TAGS, "dagster/partition": NEWEST})
        with dep.instance() as instance:
            dep.wait_for("the current run to start", lambda: instance.get_run_by_id(current_id).status.value
                         in {"STARTED", *FINISHED}, timeout_s=180)
            assert instance.get_run_by_id(current_id).status.value == "STARTED"
    finished = wait_runs_finished(dep, [backfill_run.dagster_run.run_id, current_id], timeout_s=420)
    assert {r.dagster_run.status.value for r in finished} == {"SUCCESS"}, [
        (r.dagster_run.run_id, r.dagster_run.status.value) for r in finished]

    dep.wait_for("the incident in the ledger", lambda: incidents(data_dir), timeout_s=180)
    dep.wait_for("the saturation alert", lambda: [m for m in slack.messages if "Current lane saturated" in m["text"]],
                 timeout_s=420)
    started = next(m for m in slack.messages if "Correction in progress" in m["text"] and backfill_id in m["text"])
    after = time.time()
    wait_sensor_ticks(dep, SATURATION, after, 2, timeout_s=180)
    rows = incidents(data_dir)
    alerts = [m for m in slack.messages if "Current lane saturated" in m["text"]]
    print(f"\n[saturation] incidents: {json.dumps(rows, default=str, indent=1)}")

    duration = [r for r in rows if r["metric"] == "duration"]
    assert [(r["backfill_id"], r["run_id"]) for r in duration] == [(backfill_id, current_id)]
    d = duration[0]
    assert d["objective_s"] == 0.001 and d["observed_s"] > 0.001 and d["run_status"] in {"STARTED", "SUCCESS"}
    assert (d["backfill_lane_limit"], d["max_concurrent_runs"]) == (2, 4)
    assert json.loads(d["backfill_run_ids"]) == [backfill_run.dagster_run.run_id]
    assert d["backfill_window"] == "2026-09-01..2026-09-19"
    assert {r["backfill_id"] for r in rows} == {backfill_id}, "no run but the held one was attributed"
    # One alert per incident, each a reply in the backfill's thread (broadcast), naming it and the run.
    assert len(alerts) == len({r["incident_id"] for r in rows}) >= 1
    assert all(m["thread_ts"] == started["ts"] and m["reply_broadcast"] for m in alerts)
    shown = "\n".join(slack.rendered[slack.messages.index(m)] for m in alerts)
    for part in (f"<http://ui.test/runs/b/{backfill_id}|{backfill_id}>", f"<http://ui.test/runs/{current_id}|",
                 "objective 0.001 s", "backfill lane limit 2", d["incident_id"]):
        assert part in shown, part

    # The SLO report lists the incidents against the backfill.
    report_run = dep.launch_run("slo_report", {})
    [record] = wait_runs_finished(dep, [report_run], timeout_s=120)
    assert record.dagster_run.status.value == "SUCCESS"
    with dep.instance() as instance:
        [observed] = [e.asset_observation.metadata for e in instance.all_logs(
            report_run, of_type=dg.DagsterEventType.ASSET_OBSERVATION) if e.asset_observation]
    [per] = observed["slo_saturation_incidents"].value
    assert (per["backfill_id"], per["incidents"], per["backfill_lane_limit"]) == (backfill_id, len(alerts), 2)
    assert f"| {backfill_id} | 2026-09-01..2026-09-19 |" in observed["slo_report"].value
    print(f"[saturation] slo_report:\n{observed['slo_report'].value}")

    # The current run published the newest day: the freshness check passes, and the one failure alert stays one.
    passed = dep.wait_for("a passing freshness evaluation", lambda: [e for e in check_evaluations(dep)
                                                                     if e.passed], timeout_s=240)
    assert passed[0].metadata["figures"][NEWEST]["published"] is True
    assert len(freshness_alerts(slack)) == 1


LIFECYCLE = "atlasmart_backfill_lifecycle_to_slack"
REDELIVERED = ["2026-09-02", "2026-09-03"]
# Slack's answers to the first posts after the restart: two short Retry-Afters the tick sleeps through, then one
# longer than the tick may wait (AtlasSlack.max_wait_s 10 s), which ends the tick and holds the next post back.
BURST = ["ratelimited:1", "ratelimited:1", "ratelimited:12"]


def test_a_daemon_killed_mid_tick_and_a_429_burst_deliver_each_message_once_in_its_thread(
        dep: Deployment, slack: SlackServer) -> None:
    """The lifecycle sensor posts a backfill's "started" and "published" in one tick (the sensor was stopped while
    the backfill ran). Slack takes "started"; "published" is held unanswered while the daemon is SIGKILLed, so
    that tick never ends and Dagster never saves its cursor. A new daemon then meets a 429 burst. Each message
    arrives once, "published" in the thread "started" opened, and no post comes before its Retry-After."""
    dep.stop_sensor(LIFECYCLE)
    backfill_id = dep.launch_backfill(CHAIN, REDELIVERED, {"atlasmart/reason": "issue 17: delivery across restarts"},
                                      title="delivery across a daemon restart")
    records = wait_backfill_runs(dep, backfill_id, FINISHED, timeout_s=420)
    assert {r.dagster_run.status.value for r in records} == {"SUCCESS"}
    with dep.instance() as instance:
        dep.wait_for("the backfill to complete", lambda: instance.get_backfill(backfill_id).status.value
                     == "COMPLETED_SUCCESS", timeout_s=180)

    def ours(text: str) -> bool:
        return backfill_id in text and text.startswith("Correction")

    slack.hold_if = lambda payload: ours(payload.get("text", "")) and "Correction published" in payload["text"]
    dep.start_sensor(LIFECYCLE)
    dep.wait_for("the tick to reach the published message", slack.held.is_set, timeout_s=240)
    [started] = [m for m in slack.messages if ours(m["text"])]
    assert "Correction in progress" in started["text"] and not started.get("thread_ts")
    slack.script = list(BURST)
    dep.restart_daemon()
    slack.release.set()  # the held request is answered 503 to a dead client: Slack never posted it

    published = dep.wait_for("the published message", lambda: [m for m in slack.messages if ours(m["text"])
                                                                and "Correction published" in m["text"]],
                             timeout_s=300)
    wait_sensor_ticks(dep, LIFECYCLE, time.time(), 2, timeout_s=180)
    mine = [m for m in slack.messages if ours(m["text"])]
    print(f"\n[delivery] requests for {backfill_id}: "
          f"{[(round(t, 2), mode) for t, mode, text in slack.answered if ours(text)]}")
    assert mine == [started, published[0]], [m["text"][:80] for m in mine]
    assert published[0]["thread_ts"] == started["ts"] and not published[0].get("reply_broadcast")

    attempts = [(t, mode) for t, mode, text in slack.answered if ours(text)]
    assert [mode for _, mode in attempts] == ["ok", "ok", *BURST, "ok"], attempts
    for (t, mode), (t_next, _) in zip(attempts, attempts[1:]):
        if mode.startswith("ratelimited"):
            retry_after = float(mode.partition(":")[2])
            assert t_next - t >= retry_after - 0.01, f"posted {t_next - t:.2f} s after a Retry-After of {retry_after}"
