"""Saturation while it happens: the objective on queued and running current-lane runs (pure), the incident ledger
(record once per backfill, run and objective), the message, and the sensor recording and alerting once — on real
run records whose start and end times are set explicitly, so nothing depends on timing."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from atlasmart_assets import slo  # noqa: E402
from atlasmart_assets.alerts import format as fmt  # noqa: E402
from atlasmart_assets.alerts import saturation_sensor  # noqa: E402
from atlasmart_assets.alerts.delivery import THREAD_KEY  # noqa: E402
from atlasmart_assets.resources import Warehouse  # noqa: E402
from atlasmart_assets.slo import Breach, Objective, RunSample  # noqa: E402
from atlasmart_assets.warehouse import incidents  # noqa: E402
from slack_server import SlackServer, block_errors  # noqa: E402

OBJ = Objective(queue_wait_s=120, duration_s=600)


def _s(run_id: str, lane: str, created: float, started: float | None, ended: float | None,
       backfill: str | None = None, status: str = "STARTED") -> RunSample:
    return RunSample(run_id, lane, created, started, ended, status, backfill)


def test_a_run_still_queued_or_running_is_judged_on_its_time_so_far() -> None:
    queued = _s("q", "current", 0, None, None, status="QUEUED")
    assert slo.observed(queued, now=130) == {"queue_wait": 130}
    assert slo.breaches(queued, OBJ, now=130) == [Breach("q", "queue_wait", 130, 120, "QUEUED")]
    running = _s("r", "current", 0, 10, None)
    assert slo.observed(running, now=700) == {"queue_wait": 10, "duration": 690}
    assert [b.metric for b in slo.breaches(running, OBJ, now=700)] == ["duration"]
    assert slo.breaches(_s("e", "current", 0, 120, 720, status="SUCCESS"), OBJ, now=9999) == [], "equal is met"


def test_saturation_names_each_backfill_and_the_current_runs_that_overlapped_it() -> None:
    samples = [
        _s("bf1-run", "backfill", 100, 110, None, "bf-1"),
        _s("bf2-run", "backfill", 0, 5, 50, "bf-2", "SUCCESS"),
        _s("before", "current", 0, 1, 400, status="SUCCESS"),        # overlapped bf-2 and bf-1, ended before since
        _s("slow", "current", 120, 125, None),                      # running during bf-1: 900 s so far
        _s("waiting", "current", 200, None, None, status="QUEUED"),  # queued during bf-1: 825 s so far
        _s("quick", "current", 300, 301, 310, status="SUCCESS"),     # met the objective
        _s("other", "other", 120, 121, None),
    ]
    found = slo.saturation(samples, OBJ, now=1025, since=500)
    assert [s.backfill_id for s in found] == ["bf-1"]
    [bf1] = found
    assert {(b.run_id, b.metric, b.observed_s) for b in bf1.breaches} == {("slow", "duration", 900),
                                                                          ("waiting", "queue_wait", 825)}
    assert [r.run_id for r in bf1.backfill_runs] == ["bf1-run"] and bf1.current_run_ids == ["slow", "waiting"]
    # Judged since the start of time, the run that ended earlier (and overlapped both backfills) counts for each.
    early = slo.saturation(samples, Objective(0.5, 10_000), now=1025, since=0)
    assert {s.backfill_id: sorted({b.run_id for b in s.breaches}) for s in early} == \
        {"bf-1": ["before", "quick", "slow", "waiting"], "bf-2": ["before"]}


def _incident(breaches: tuple[Breach, ...], backfill: str = "bf-1") -> incidents.Incident:
    import datetime as dt
    return incidents.Incident(0, "", backfill, "2026-09-01..2026-09-10", dt.datetime(2026, 9, 22, 3, 0),
                              ("bf1-run",), 2, 2, 4, 4, breaches)


def test_a_breach_is_recorded_once_per_backfill_run_and_objective(env) -> None:  # noqa: ANN001
    a, b = Breach("r1", "duration", 700.0, 600.0, "STARTED"), Breach("r2", "queue_wait", 130.0, 120.0, "QUEUED")
    with Warehouse().writer() as con:
        first = incidents.record(con, _incident((a,)))
        again = incidents.record(con, _incident((a, b)))
        none = incidents.record(con, _incident((a, b)))
        other = incidents.record(con, _incident((a,), backfill="bf-2"))
    assert first is not None and first.breaches == (a,)
    assert again is not None and again.breaches == (b,) and again.incident_seq > first.incident_seq
    assert none is None and other is not None
    with Warehouse().reader() as con:
        listed = incidents.after(con, 0)
        assert set(incidents.known(con, ["bf-1"])) == {("bf-1", "r1", "duration"), ("bf-1", "r2", "queue_wait")}
    assert [(i.incident_id, i.backfill_id, [x.run_id for x in i.breaches]) for i in listed] == \
        [(first.incident_id, "bf-1", ["r1"]), (again.incident_id, "bf-1", ["r2"]), (other.incident_id, "bf-2", ["r1"])]
    per = {r["backfill_id"]: r for r in slo.incidents_per_backfill(Warehouse())}
    assert (per["bf-1"]["incidents"], per["bf-1"]["current_runs"], per["bf-1"]["duration_max_s"],
            per["bf-1"]["queue_wait_max_s"], per["bf-1"]["backfill_lane_limit"]) == (2, 2, 700.0, 130.0, 2)


def test_saturation_message_names_the_backfill_runs_figures_and_what_to_do() -> None:
    s = fmt.Saturation("sat-20260922T030000-1", "bf-year", "2025-09-22..2026-09-20", "2026-09-22 03:00:00 UTC",
                       [fmt.SaturationBreach("c0ffee00-1111-2222-3333-444455556666", "queue_wait", 130.5, 120, "QUEUED"),
                        fmt.SaturationBreach("c0ffee00-1111-2222-3333-444455556666", "duration", 0.25, 0.001, "STARTED")],
                       ["bf000000-aaaa"], 4, 4, 4, 4)
    [message] = fmt.saturation_incident(s, fmt.Links("http://ui.test"))
    shown = json.dumps(message.blocks)
    for part in ("Current lane saturated", "<http://ui.test/runs/b/bf-year|bf-year>", "2025-09-22..2026-09-20",
                 "<http://ui.test/runs/c0ffee00-1111-2222-3333-444455556666|c0ffee00>: queue wait 130.5 s > "
                 "objective 120 s (QUEUED)", "duration 0.25 s > objective 0.001 s (STARTED)",
                 "4 (backfill lane limit 4)", "4 of 4 (max_concurrent_runs)", "sat-20260922T030000-1",
                 "audit.saturation_incidents", "dagster/backfill"):
        assert part in shown, part
    assert "bf-year" in message.text and "queue wait 130.5 s > objective 120 s" in message.text
    assert block_errors([dict(b) for b in message.blocks]) == []


# --- the sensor over real run records -------------------------------------------------------------------------

JOB = dg.GraphDefinition("g").to_job("j")
QUEUE = {"concurrency": {"runs": {"max_concurrent_runs": 4,
                                  "tag_concurrency_limits": [{"key": "dagster/backfill", "limit": 3}]}}}


def _event(instance: dg.DagsterInstance, run: dg.DagsterRun, kind: dg.DagsterEventType, at: float) -> None:
    instance.report_dagster_event(dg.DagsterEvent(kind.value, job_name=run.job_name), run_id=run.run_id, timestamp=at)


@pytest.fixture()
def queue_instance(tmp_path: Path) -> Any:
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home"), overrides=QUEUE) as instance:
        yield instance


def _tick(instance: dg.DagsterInstance, slack: Any, cursor: str | None, at: float) -> tuple[str, str]:
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor)
    skip = saturation_sensor.evaluate(ctx, slack, Warehouse(), clock=lambda: at)
    return ctx.cursor or "", skip.skip_message or ""


def test_sensor_records_each_breach_against_the_backfill_and_alerts_it_once(env, queue_instance,  # noqa: ANN001
                                                                             monkeypatch) -> None:
    from atlasmart_assets.alerts.slack import AtlasSlack
    monkeypatch.setenv("ATLASMART_SLO_QUEUE_WAIT_S", "2")
    monkeypatch.setenv("ATLASMART_SLO_DURATION_S", "10")
    instance = queue_instance
    backfill = instance.create_run_for_job(JOB, tags={"dagster/backfill": "bf-sat", "atlasmart/reason": "r",
                                                      "dagster/asset_partition_range_start": "2026-09-01",
                                                      "dagster/asset_partition_range_end": "2026-09-10"})
    early = instance.create_run_for_job(JOB, tags={"atlasmart/lane": "current", "dagster/partition": "2026-09-20"})
    current = instance.create_run_for_job(JOB, tags={"atlasmart/lane": "current", "dagster/partition": "2026-09-21"})
    t = max(r.create_timestamp.timestamp() for r in instance.get_run_records())
    _event(instance, early, dg.DagsterEventType.RUN_START, t + 0.5)    # waited 0.5 s, ended before the backfill
    _event(instance, early, dg.DagsterEventType.RUN_SUCCESS, t + 0.8)
    _event(instance, backfill, dg.DagsterEventType.RUN_START, t + 1)
    _event(instance, current, dg.DagsterEventType.RUN_START, t + 3)    # queued 3 s (> 2) while the backfill ran
    thread = "1700000000.000777"
    instance.daemon_cursor_storage.set_cursor_values({THREAD_KEY.format(backfill_id="bf-sat"): thread})
    with SlackServer() as server:
        slack = AtlasSlack(token="xoxb-test", base_url=server.base_url, timeout_s=1, ui_base_url="http://ui.test")
        cursor, first = _tick(instance, slack, None, t + 5)
        cursor, second = _tick(instance, slack, cursor, t + 6)
        cursor, third = _tick(instance, slack, cursor, t + 20)           # now running 17 s (> 10)
        _event(instance, current, dg.DagsterEventType.RUN_SUCCESS, t + 21)
        cursor, fourth = _tick(instance, slack, cursor, t + 30)
    assert "recorded 1 saturation incident(s)" in first and "delivered 1 saturation alert" in first
    assert "recorded 0" in second and "delivered 0" in second
    assert "recorded 1" in third and "recorded 0" in fourth and "delivered 0" in fourth
    assert len(server.messages) == 2, server.texts
    assert all(m["thread_ts"] == thread and m["reply_broadcast"] for m in server.messages)
    assert "queue wait 3 s > objective 2 s (STARTED)" in server.rendered[0]
    assert "duration 17 s > objective 10 s (STARTED)" in server.rendered[1]
    assert early.run_id[:8] not in "".join(server.rendered)
    with Warehouse().reader() as con:
        rows = con.execute("select backfill_id, backfill_window, run_id, metric, observed_s, objective_s, run_status, "
                           "backfill_run_ids, backfill_runs_in_progress, backfill_lane_limit, runs_in_progress, "
                           "max_concurrent_runs from audit.saturation_incidents order by incident_seq").fetchall()
    # The alerts said what was known when each breach was seen; the ledger keeps how bad it got: the run ended
    # at t + 21, so its duration is 18 s, final, and both rows say SUCCESS (no new incident, no new alert).
    assert rows == [
        ("bf-sat", "2026-09-01..2026-09-10", current.run_id, "queue_wait", 3.0, 2.0, "SUCCESS",
         json.dumps([backfill.run_id]), 1, 3, 2, 4),
        ("bf-sat", "2026-09-01..2026-09-10", current.run_id, "duration", 18.0, 10.0, "SUCCESS",
         json.dumps([backfill.run_id]), 1, 3, 2, 4),
    ]
    report = slo.markdown(slo.current_lane_report([], now=0), "2026-09-21", None, slo.objective_of(Warehouse()),
                          slo.incidents_per_backfill(Warehouse()))
    assert "| bf-sat | 2026-09-01..2026-09-10 | 2 | 1 | 3 / 2 | 18 / 10 | 3 |" in report


def test_without_slack_incidents_are_still_recorded(env, queue_instance, monkeypatch) -> None:  # noqa: ANN001
    from atlasmart_assets.alerts.slack import AtlasSlack
    monkeypatch.setenv("ATLASMART_SLO_DURATION_S", "0.001")
    instance = queue_instance
    backfill = instance.create_run_for_job(JOB, tags={"dagster/backfill": "bf-quiet"})
    current = instance.create_run_for_job(JOB, tags={"atlasmart/lane": "current"})
    t = time.time()
    _event(instance, backfill, dg.DagsterEventType.RUN_START, t)
    _event(instance, current, dg.DagsterEventType.RUN_START, t + 0.1)
    _, skip = _tick(instance, AtlasSlack(token=""), None, t + 1)
    assert "recorded 1 saturation incident(s)" in skip and "ATLASMART_SLACK_TOKEN is not set" in skip
    with Warehouse().reader() as con:
        assert con.execute("select backfill_id, run_id, metric from audit.saturation_incidents").fetchall() == \
            [("bf-quiet", current.run_id, "duration")]


def test_the_slo_report_of_many_backfills_with_incidents_shows_the_newest_in_one_small_event(env, instance) -> None:  # noqa: ANN001
    """Incidents accumulate over the years (the table is never pruned): the report shows the newest backfills and
    counts the rest, so its event does not grow with history (200 backfills made a 103 KB event)."""
    import datetime as dt

    from atlasmart_assets.definitions import defs

    with Warehouse().writer() as con:
        for k in range(200):
            incidents.record(con, incidents.Incident(
                0, "", f"bf-{k:03d}", "2026-09-01..2026-09-10", dt.datetime(2026, 1, 1) + dt.timedelta(hours=k),
                ("bf-run",), 2, 2, 4, 4, (Breach(f"r{k}", "duration", 700.0, 600.0, "STARTED"),)))
    result = defs.resolve_job_def("slo_report").execute_in_process(instance=instance)
    assert result.success
    [event] = [e for e in instance.all_logs(result.run_id) if e.dagster_event
               and e.dagster_event.event_type_value == "ASSET_OBSERVATION"]
    meta = event.dagster_event.event_specific_data.asset_observation.metadata
    shown = meta["slo_saturation_incidents"].value
    assert [r["backfill_id"] for r in shown] == [f"bf-{k:03d}" for k in range(199, 199 - slo.INCIDENT_BACKFILLS_SHOWN, -1)]
    assert meta["slo_saturation_backfills"].value == 200
    assert f"the {slo.INCIDENT_BACKFILLS_SHOWN} newest of 200 backfills" in meta["slo_report"].value
    assert len(dg.serialize_value(event)) < 32 * 1024
    assert max(len(dg.serialize_value(e)) for e in instance.all_logs(result.run_id)) < 64 * 1024
