"""The alert sensors against real Dagster runs and a real HTTP server on 127.0.0.1 speaking chat.postMessage."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from atlasmart_assets.resources import Warehouse  # noqa: E402
from slack_server import HTTP_500, OK, RATELIMITED, SLOW, SlackServer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOKEN = "xoxb-test-secret-token-0001"
HOSTILE = "<!channel> urgent\n*Correction published* fake line"
GRPC_INFO = '{"host": "localhost", "socket": "/tmp/tmpabc/grpc.sock"}'
ASSET_WINDOW = ["2026-09-03", "2026-09-04", "2026-09-05"]

# One xdist worker runs the whole module: the run history behind most tests is built once.
pytestmark = pytest.mark.xdist_group("alerts")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("alerts")
    shutil.copytree(REPO / "raw", root / "raw")
    manifest = root / "raw" / "partition=2026-09-19.json"
    data = json.loads(manifest.read_text())
    data["manifest"]["controls"]["cost"] += 1
    manifest.write_text(json.dumps(data))
    saved = dict(os.environ)
    os.environ.update(ATLASMART_AS_OF="2026-09-22", ATLASMART_RAW_DIR=str(root / "raw"),
                      ATLASMART_DATA_DIR=str(root / "data"), ATLASMART_SLACK_TOKEN=TOKEN)
    (root / "home").mkdir()
    yield root
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATLASMART_SLACK_TOKEN", TOKEN)


def _run(instance: dg.DagsterInstance, job: str = "atlasmart_daily", partition: str | None = None,
         window: tuple[str, str] | None = None, **tags: str) -> dg.ExecuteInProcessResult:
    from atlasmart_assets.definitions import defs
    if window:
        tags = {**tags, "dagster/asset_partition_range_start": window[0],
                "dagster/asset_partition_range_end": window[1]}
    return defs.resolve_job_def(job).execute_in_process(partition_key=partition, instance=instance, tags=tags,
                                                        raise_on_error=False)


def _asset_backfill(instance: dg.DagsterInstance, backfill_id: str, keys: list[str], tags: dict[str, str]) -> None:
    """A backfill as the UI launches it: an asset backfill, which Dagster stores without partition_names."""
    from dagster._core.execution.backfill import PartitionBackfill

    from atlasmart_assets.definitions import defs
    graph = defs.resolve_asset_graph()
    selection = [k for k in graph.get_all_asset_keys() if graph.get(k).partitions_def is not None]
    instance.add_backfill(PartitionBackfill.from_asset_partitions(
        backfill_id=backfill_id, asset_graph=graph, partition_names=keys, asset_selection=selection,
        backfill_timestamp=time.time(), tags=tags, dynamic_partitions_store=instance, all_partitions=False,
        title=None, description=None, run_config=None))


@pytest.fixture(scope="module")
def history(env: Path) -> Iterator[dict[str, Any]]:
    """One instance with: a clean daily run, a published backfill, a backfill refused by a blocking check,
    a backfill refused by the fence, a republish and its rollback, and an asset backfill not started yet."""
    with dg.instance_for_test(temp_dir=str(env / "home")) as instance:
        runs = {
            "daily": _run(instance, partition="2026-09-17"),
            "ok": _run(instance, window=("2026-09-14", "2026-09-16"), **{"dagster/backfill": "bf-ok",
                       "atlasmart/reason": "late file", "user": "ana", "ticket": "OPS-7",
                       ".dagster/grpc_info": GRPC_INFO}),
            "bad": _run(instance, window=("2026-09-18", "2026-09-19"), **{"dagster/backfill": "bf-bad",
                        "atlasmart/reason": "fix costs"}),
            "fenced": _run(instance, window=("2026-09-20", "2026-09-21"), **{"dagster/backfill": "bf-fenced",
                           "atlasmart/reason": HOSTILE}),
            "redo": _run(instance, window=("2026-09-17", "2026-09-17"), **{"dagster/backfill": "bf-redo",
                         "atlasmart/reason": "recheck"}),
        }
        from atlasmart_assets.definitions import defs
        runs["rollback"] = defs.resolve_job_def("rollback_job").execute_in_process(
            instance=instance, raise_on_error=False,
            run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-17", "reason": "undo recheck"}}}})
        assert [runs[k].success for k in ("daily", "ok", "bad", "fenced", "redo", "rollback")] == \
            [True, True, False, False, True, True]
        _asset_backfill(instance, "bf-asset", ASSET_WINDOW, {"atlasmart/reason": HOSTILE, "user": "bo",
                                                             "dagster/from_ui": "true"})
        yield {"instance": instance, "runs": runs, "home": env / "home"}


BACKFILLS = ("bf-ok", "bf-bad", "bf-fenced", "bf-redo", "bf-asset")
CHECKS = "atlasmart_check_failures_to_slack"
RUNS = "atlasmart_run_failures_to_slack"
LIFECYCLE = "atlasmart_backfill_lifecycle_to_slack"


def _forget(instance: dg.DagsterInstance) -> None:
    """Start a test from nothing delivered: blank the sensors' journals and the backfills' threads."""
    from atlasmart_assets.alerts.delivery import JOURNAL_KEY, THREAD_KEY
    keys = [JOURNAL_KEY.format(sensor=s) for s in (CHECKS, RUNS, LIFECYCLE)]
    keys += [THREAD_KEY.format(backfill_id=b) for b in BACKFILLS]
    instance.daemon_cursor_storage.set_cursor_values({k: "" for k in keys})


def _slack(server: SlackServer, **kw: Any) -> Any:
    from atlasmart_assets.alerts.slack import AtlasSlack
    kw = {"base_url": server.base_url, "timeout_s": 1, **kw}
    return AtlasSlack(token=dg.EnvVar("ATLASMART_SLACK_TOKEN"), ui_base_url="http://ui.test", **kw)


def _tick(sensor_name: str, instance: dg.DagsterInstance, slack: Any, cursor: str | None,
          definitions: dg.Definitions | None = None) -> Any:
    from atlasmart_assets.definitions import defs
    definitions = definitions or defs
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=definitions,
                                  resources={"slack": slack, "warehouse": Warehouse()})
    return definitions.resolve_sensor_def(sensor_name).evaluate_tick(ctx)


def _failing_tick(*args: Any, **kw: Any) -> str:
    """A tick that must raise SlackUnavailable (the daemon then records a FAILURE tick); the error's text."""
    from atlasmart_assets.alerts.delivery import SlackUnavailable
    with pytest.raises(SlackUnavailable) as info:
        _tick(*args, **kw)
    return str(info.value)


def _run_id_of(message: dict[str, Any]) -> str:
    return re.search(r"/runs/([0-9a-f-]{36})", message["text"]).group(1)  # type: ignore[union-attr]


def test_backfill_alerts_wait_for_started_then_reply_in_its_thread(history: dict[str, Any]) -> None:
    """A backfill's check and run failures are posted after its "started" message, as replies in its thread,
    whichever sensor ticks first."""
    instance, runs = history["instance"], history["runs"]
    _forget(instance)
    with SlackServer() as server:
        checks = _tick(CHECKS, instance, _slack(server), None)
        failures = _tick(RUNS, instance, _slack(server), None)
        assert server.messages == []
        assert "waiting for their backfill's started message" in checks.skip_message
        assert "waiting for backfill bf-bad's started message" in failures.skip_message
        _tick(LIFECYCLE, instance, _slack(server), None)
        started = {b: next(m for m in server.messages if "Correction in progress" in m["text"] and f" {b} " in m["text"])
                   for b in BACKFILLS}
        checks = _tick(CHECKS, instance, _slack(server), checks.cursor)
        failures = _tick(RUNS, instance, _slack(server), failures.cursor)
        count = len(server.messages)
        _tick(CHECKS, instance, _slack(server), checks.cursor)
        _tick(RUNS, instance, _slack(server), failures.cursor)
    assert len(server.messages) == count, "a second tick re-sent an alert"
    manifest = [m for m in server.messages if "raw_order_lines_match_manifest" in m["text"]]
    assert len(manifest) == 1 and manifest[0]["thread_ts"] == started["bf-bad"]["ts"]
    bad_run, fenced_run = runs["bad"].run_id, runs["fenced"].run_id
    run_alerts = {_run_id_of(m): m for m in server.messages if m["text"].startswith("Run failed")}
    assert run_alerts[bad_run]["thread_ts"] == started["bf-bad"]["ts"]
    assert run_alerts[fenced_run]["thread_ts"] == started["bf-fenced"]["ts"]
    assert all(server.messages.index(started["bf-bad"]) < server.messages.index(m)
               for m in (manifest[0], run_alerts[bad_run]))


def test_check_failure_names_the_failing_day_figures_and_links(history: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from atlasmart_assets.alerts import delivery
    monkeypatch.setattr(delivery, "THREAD_WAIT_S", 0.0)
    instance = history["instance"]
    _forget(instance)
    bad_run = history["runs"]["bad"].run_id
    with SlackServer() as server:
        _tick(CHECKS, instance, _slack(server), None)
    shown = next(r for r in server.rendered if "raw_order_lines_match_manifest" in r)
    for part in ("<http://ui.test/assets/raw/order_lines|raw/order_lines>", "*ERROR* (blocking)",
                 "*Failing partition(s)*\n<http://ui.test/assets/raw/order_lines?view=partitions&partition=2026-09-19|",
                 "*Run window*\n2026-09-18..2026-09-19", "2408.9", f"<http://ui.test/runs/{bad_run}|",
                 "<http://ui.test/runs/b/bf-bad|bf-bad>"):
        assert part in shown
    assert "\\u" not in shown


def test_check_passed_false_is_recorded_as_failed(history: dict[str, Any]) -> None:
    from atlasmart_assets.alerts.check_records import records_after
    key = dg.AssetCheckKey(dg.AssetKey(["raw", "order_lines"]), "raw_order_lines_match_manifest")
    failed = [r for r in records_after(history["instance"], key, 0) if r.failed]
    assert [(r.run_id, r.passed, r.severity) for r in failed] == [(history["runs"]["bad"].run_id, False, "ERROR")]
    assert failed[0].created > 0


@pytest.fixture()
def warn_defs() -> dg.Definitions:
    from atlasmart_assets.alerts import check_sensor

    @dg.asset(name="tiny")
    def tiny() -> int:
        return 1

    @dg.asset_check(asset=tiny, name="tiny_is_big")
    def tiny_is_big() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   metadata={"figures": dg.MetadataValue.json({"value": 1, "minimum": 2})})

    return dg.Definitions(assets=[tiny], asset_checks=[tiny_is_big], sensors=[check_sensor.build()])


def _materialize_tiny(defs: dg.Definitions, instance: dg.DagsterInstance, n: int) -> None:
    for _ in range(n):
        assert defs.resolve_implicit_global_asset_job_def().execute_in_process(instance=instance).success


def test_warn_failures_resume_after_restart_without_duplicates_or_gaps(warn_defs: dg.Definitions,
                                                                      tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from atlasmart_assets.alerts import common
    with SlackServer() as server:
        with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
            _materialize_tiny(warn_defs, instance, 3)
            saved = _tick(CHECKS, instance, _slack(server), None, warn_defs).cursor
        assert len(server.texts) == 3 and all(":warning:" in t and "minimum: 2" in t for t in server.rendered)
        with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
            _materialize_tiny(warn_defs, instance, 2)
            monkeypatch.setattr(common, "BATCH", 1)
            cursor = saved
            for _ in range(3):
                cursor = _tick(CHECKS, instance, _slack(server), cursor, warn_defs).cursor
            runs = [r.run_id for r in instance.get_runs()]
    alerted = [_run_id_of(m) for m in server.messages]
    assert sorted(alerted) == sorted(runs) and len(set(alerted)) == 5


@pytest.mark.parametrize("mode", [HTTP_500, SLOW])
def test_slack_outage_fails_the_tick_visibly_and_loses_or_repeats_nothing(warn_defs: dg.Definitions,
                                                                          tmp_path: Path, mode: str) -> None:
    """Slack takes one alert, then is down: the tick FAILS with the reason (Dagster keeps the old cursor), and
    the next tick, from that old cursor, sends the two others and not the first again."""
    with SlackServer(slow_s=2.5) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _materialize_tiny(warn_defs, instance, 3)
        server.script = [OK, mode]
        error = _failing_tick(CHECKS, instance, _slack(server), None, warn_defs)
        assert "delivered 1 check alert(s)" in error and "Slack did not take the next message" in error
        assert len(server.messages) == 1
        _tick(CHECKS, instance, _slack(server), None, warn_defs)
        runs = sorted(r.run_id for r in instance.get_runs())
    assert sorted(_run_id_of(m) for m in server.messages) == runs


def test_the_code_server_reports_an_outage_as_a_failed_evaluation_with_the_reason(warn_defs: dg.Definitions,
                                                                                  tmp_path: Path) -> None:
    """What the daemon receives from the code server for a tick that raised: an error snapshot (the tick is
    recorded as FAILURE, shown red in the UI with this text), not a skip."""
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin
    from dagster._grpc.impl import get_external_sensor_execution
    with SlackServer(mode=HTTP_500) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _materialize_tiny(warn_defs, instance, 1)
        defs = dg.Definitions(assets=warn_defs.assets, asset_checks=warn_defs.asset_checks,
                              sensors=warn_defs.sensors, resources={"slack": _slack(server)})
        snap = get_external_sensor_execution(defs.get_repository_def(), RegisteredCodeLocationOrigin("t"),
                                             instance.get_ref(), CHECKS, None, None, None, None, None)
    assert type(snap).__name__ == "SensorExecutionErrorSnap"
    text = snap.error.to_string()
    assert "Error occurred during the execution of evaluation_fn for sensor atlasmart_check_failures_to_slack" in text
    assert "SlackUnavailable" in text and "HTTP 500" in text and "retried on the next tick" in text


def test_daemon_killed_mid_tick_resends_nothing_slack_took(warn_defs: dg.Definitions, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from atlasmart_assets.alerts.slack import AtlasSlack
    post = AtlasSlack.post_part
    calls = {"n": 0}

    def dies_after_two(self: AtlasSlack, *args: Any, **kw: Any) -> tuple[str, str]:
        if calls["n"] == 2:
            raise SystemExit("daemon killed")
        calls["n"] += 1
        return post(self, *args, **kw)

    with SlackServer() as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _materialize_tiny(warn_defs, instance, 3)
        monkeypatch.setattr(AtlasSlack, "post_part", dies_after_two)
        with pytest.raises(SystemExit):
            _tick(CHECKS, instance, _slack(server), None, warn_defs)
        monkeypatch.setattr(AtlasSlack, "post_part", post)
        assert len(server.messages) == 2
        cursor = _tick(CHECKS, instance, _slack(server), None, warn_defs).cursor
        _tick(CHECKS, instance, _slack(server), cursor, warn_defs)
        runs = sorted(r.run_id for r in instance.get_runs())
    assert sorted(_run_id_of(m) for m in server.messages) == runs


def test_429_with_short_retry_after_is_waited_out_in_the_tick(warn_defs: dg.Definitions, tmp_path: Path) -> None:
    with SlackServer(retry_after_s=1) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _materialize_tiny(warn_defs, instance, 1)
        server.script = [RATELIMITED]
        result = _tick(CHECKS, instance, _slack(server, max_wait_s=5), None, warn_defs)
    assert "delivered 1 check alert(s)" in result.skip_message
    assert server.attempts == 2 and server.attempt_times[1] - server.attempt_times[0] >= 1.0
    assert len(server.messages) == 1


def test_429_with_long_retry_after_stops_and_no_tick_posts_before_it(warn_defs: dg.Definitions,
                                                                     tmp_path: Path) -> None:
    with SlackServer(retry_after_s=2) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _materialize_tiny(warn_defs, instance, 2)
        server.script = [RATELIMITED]
        first = _tick(CHECKS, instance, _slack(server, max_wait_s=0), None, warn_defs)
        assert "rate-limited" in first.skip_message and "not before" in first.skip_message
        assert json.loads(first.cursor)["not_before"] > time.time()
        early = _tick(CHECKS, instance, _slack(server, max_wait_s=0), first.cursor, warn_defs)
        assert server.attempts == 1 and server.messages == [] and "rate-limited" in early.skip_message
        time.sleep(2.1)
        late = _tick(CHECKS, instance, _slack(server, max_wait_s=0), early.cursor, warn_defs)
    assert len(server.messages) == 2 and "not_before" not in json.loads(late.cursor)


@pytest.mark.parametrize("header, waited", [("0", 1.0), ("-3", 30.0), ("nan", 30.0), ("inf", 30.0),
                                            ("1e12", 3600.0), ("soon", 30.0), ("2", 2.0)])
def test_retry_after_is_bounded_so_it_neither_spins_nor_parks_the_alerts(header: str, waited: float) -> None:
    """Slack sends whole seconds; anything else must not make a tick post in a tight loop (0) or store a
    not-before no clock reaches (inf)."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.slack import SlackRateLimited
    with SlackServer() as server:
        server.script = [f"ratelimited:{header}"]
        with pytest.raises(SlackRateLimited) as err:
            _slack(server).post(fmt.Message("hello", ()))
    assert err.value.retry_after_s == waited


def test_blocks_slack_refuses_are_resent_as_text(tmp_path: Path) -> None:
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import Outbox
    with SlackServer() as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        ctx = dg.build_sensor_context(instance=instance, cursor=None)
        box = Outbox(ctx, _slack(server), "probe")
        too_many = tuple({"type": "section", "text": {"type": "mrkdwn", "text": "x"}} for _ in range(60))
        assert box.send("k", [fmt.Message("the fallback", too_many)], lambda ts: None)
    assert len(server.refused) == 1 and server.messages[0].get("blocks") is None
    assert server.messages[0]["text"].startswith("the fallback") and "invalid_blocks" in server.messages[0]["text"]


def test_a_cut_fallback_resent_without_its_blocks_does_not_point_to_them(tmp_path: Path) -> None:
    """A fallback text cut to its bound ends "(full message in the blocks)": sent alone because Slack refused the
    blocks, it said the full message was in blocks nobody got (a review found it)."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import Outbox
    with SlackServer() as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        box = Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe")
        too_many = tuple({"type": "section", "text": {"type": "mrkdwn", "text": "x"}} for _ in range(60))
        message = fmt.Message(fmt._plain(["a line of the alert " * 200]), too_many)
        assert message.text.endswith(fmt.IN_THE_BLOCKS)
        assert box.send("k", [message], lambda ts: None)
    [sent] = server.messages
    assert sent.get("blocks") is None and "full message in the blocks" not in sent["text"]
    assert "Slack refused this message's detail blocks" in sent["text"]


def test_blocks_whose_text_slack_finds_too_long_are_resent_as_text_and_the_queue_moves_on(tmp_path: Path) -> None:
    """Slack answers msg_blocks_too_long for blocks whose text adds up past its limit, each block within its
    own: the message goes out as its text and the next notice follows (a review found that answer failed every
    tick on the same message, so no later alert went out)."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import Outbox
    with SlackServer() as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        box = Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe")
        long_text = tuple(fmt._section("x" * 2900) for _ in range(5))
        assert box.send("k1", [fmt.Message("the long one", long_text)], lambda ts: None)
        assert box.send("k2", [fmt.Message("the next one", ())], lambda ts: None)
    assert [m["text"].split("\n")[0] for m in server.messages] == ["the long one", "the next one"]
    assert "msg_blocks_too_long" in server.messages[0]["text"] and box.error is None


@pytest.mark.parametrize("path", ["/api", "/api/", "", "/"])
def test_slack_base_url_with_or_without_api(path: str) -> None:
    from atlasmart_assets.alerts import format as fmt
    with SlackServer() as server:
        ts = _slack(server, base_url=server.origin + path).post(fmt.Message("hello", ()))
    assert server.texts == ["hello"] and ts == server.messages[0]["ts"]


def test_without_token_sensors_skip_with_reason(history: dict[str, Any]) -> None:
    from atlasmart_assets.alerts.slack import AtlasSlack
    with SlackServer() as server:
        for name in (CHECKS, RUNS, LIFECYCLE):
            result = _tick(name, history["instance"], AtlasSlack(token="", base_url=server.base_url), None)
            assert "ATLASMART_SLACK_TOKEN is not set" in result.skip_message
    assert server.attempts == 0


def test_run_failures_name_assets_failing_days_and_escape_the_reason(history: dict[str, Any],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from atlasmart_assets.alerts import delivery
    monkeypatch.setattr(delivery, "THREAD_WAIT_S", 0.0)
    instance, runs = history["instance"], history["runs"]
    _forget(instance)
    with SlackServer() as server:
        cursor = _tick(RUNS, instance, _slack(server), None).cursor
        first = list(server.rendered)
        _tick(RUNS, instance, _slack(server), cursor)
    assert len(first) == 2 and server.rendered == first
    fenced = next(t for t in first if runs["fenced"].run_id in t)
    assert "Refused: backfill bf-fenced" in fenced and "*Failing partition(s)*\n2026-09-20..2026-09-21" in fenced
    assert "&lt;!channel&gt; urgent *Correction published* fake line" in fenced and "<!channel>" not in fenced
    bad = next(t for t in first if runs["bad"].run_id in t)
    assert "raw_order_lines_match_manifest" in bad and "fix costs" in bad
    assert "<http://ui.test/assets/raw/order_lines?view=partitions&partition=2026-09-19|2026-09-19>" in bad
    assert "*Run window*\n2026-09-18..2026-09-19" in bad and "*Step* `raw__order_lines` (raw/order_lines)" in bad
    assert "```Not published (2026-09-18..2026-09-19)" in bad
    assert "__ASSET_JOB" not in bad and "`mart/revenue_daily`" in bad and "`raw/order_lines`" in bad


def test_lifecycle_threads_follow_ups_under_started_with_windows_links_and_notice(
        history: dict[str, Any], env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from atlasmart_assets.alerts.delivery import THREAD_KEY
    instance = history["instance"]
    _forget(instance)
    with SlackServer() as server:
        cursor = _tick(LIFECYCLE, instance, _slack(server, notice_base_url="https://wiki.test/notices/"), None).cursor
        first = list(server.messages)
        _tick(LIFECYCLE, instance, _slack(server), cursor)
    assert server.messages == first, "a second tick re-sent a notice"
    started = {b: next(m for m in first if m["text"].startswith(f"Correction in progress — backfill {b} "))
               for b in BACKFILLS}
    assert all("thread_ts" not in m for m in started.values())
    assert all(instance.daemon_cursor_storage.get_cursor_values({k}).get(k) == started[b]["ts"]
               for b in BACKFILLS for k in [THREAD_KEY.format(backfill_id=b)])
    state = json.loads(cursor)["backfills"]
    assert {b: state[b]["ts"] for b in BACKFILLS} == {b: m["ts"] for b, m in started.items()}
    replies = {b: [m for m in first if m.get("thread_ts") == started[b]["ts"]] for b in BACKFILLS}
    assert [len(replies[b]) for b in BACKFILLS] == [1, 1, 1, 2, 0]
    assert all(first.index(started[b]) < first.index(r) for b in BACKFILLS for r in replies[b])

    from slack_server import rendered
    shown = {b: rendered(started[b]) for b in BACKFILLS}
    assert "over *2026-09-14..2026-09-16 (3 days)*" in shown["bf-ok"] and "*Requested by*\nana" in shown["bf-ok"]
    assert "*Assets*\n`fact/fct_order_lines`, `mart/revenue_daily`, `raw/order_lines`, `staged/order_lines`" in \
        shown["bf-ok"]
    assert "ticket=OPS-7" in shown["bf-ok"] and "<http://ui.test/runs/b/bf-ok|bf-ok>" in shown["bf-ok"]
    assert all("grpc_info" not in rendered(m) and "socket" not in rendered(m) for m in first)
    assert "over *2026-09-03..2026-09-05 (3 days)*" in shown["bf-asset"], "asset backfill window from its record"
    assert "window unknown" not in "".join(shown.values())
    assert "*Requested by*\nbo" in shown["bf-asset"] and "from_ui" not in shown["bf-asset"]
    assert "&lt;!channel&gt; urgent *Correction published* fake line" in shown["bf-asset"]
    assert not any(line.startswith("*Correction published*") for m in first for line in rendered(m).splitlines())
    assert "*Requested by*\nno user tag — reason: recheck" in shown["bf-redo"]

    published = rendered(replies["bf-ok"][0])
    assert "3 partition(s) republished" in published and replies["bf-ok"][0]["reply_broadcast"] is False
    assert "partition=2026-09-14|2026-09-14>: rows new " in published
    assert "<https://wiki.test/notices/bf-ok.md|bf-ok.md>" in published
    for b in ("bf-bad", "bf-fenced"):
        assert "Correction failed" in replies[b][0]["text"] and replies[b][0]["reply_broadcast"] is True
    rollback = next(m for m in replies["bf-redo"] if "Rolled back" in m["text"])
    assert rollback["reply_broadcast"] is True and "undo recheck" in rendered(rollback)
    assert "<http://ui.test/runs/b/bf-redo|bf-redo>" in rendered(rollback)

    # The notice is the one the publish wrote (the sensor links it, it does not write its own).
    notice = (env / "data" / "notices" / "bf-ok.md").read_text()
    assert "| [2026-09-14](" in notice and "| new " in notice and "- 2026-09-17: **unchanged**" in notice
    assert "- 2026-09-13: unchanged (never published, before or after)" in notice and "- Tags: ticket=OPS-7" in notice
    assert "- Requested by: ana" in notice
    assert "rol-" in rendered(rollback) and "Change notice:" in rendered(rollback), "the rollback links its notice"


def test_lifecycle_cursor_written_before_threads_is_honoured(history: dict[str, Any]) -> None:
    """A cursor of the previous format ("started"/"done" per backfill): nothing is re-sent, and an outcome still
    owed goes to the channel (there is no thread to reply in)."""
    instance = history["instance"]
    _forget(instance)
    old = json.dumps({"backfills": {"bf-ok": "started", "bf-bad": "done", "bf-fenced": "done", "bf-redo": "done",
                                    "bf-asset": "started"}, "rollbacks": []})
    with SlackServer() as server:
        _tick(LIFECYCLE, instance, _slack(server), old)
    published = [m for m in server.messages if "Correction published" in m["text"]]
    assert len(published) == 1 and "thread_ts" not in published[0]
    assert not any("Correction in progress" in t or "Correction failed" in t for t in server.texts)


def test_token_never_printed(history: dict[str, Any], capsys: pytest.CaptureFixture[str],
                             caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from atlasmart_assets.alerts import delivery
    monkeypatch.setattr(delivery, "THREAD_WAIT_S", 0.0)
    caplog.set_level(logging.DEBUG)
    _forget(history["instance"])
    errors = []
    with SlackServer(mode=HTTP_500) as server:
        for name in (CHECKS, RUNS, LIFECYCLE):
            errors.append(_failing_tick(name, history["instance"], _slack(server), None))
    assert server.auth_headers and all(h == f"Bearer {TOKEN}" for h in server.auth_headers)
    out = capsys.readouterr()
    seen = out.out + out.err + caplog.text + "".join(errors)
    assert TOKEN not in seen and "HTTP 500" in seen


# Loads the code location the way a code server does, in a fresh process where the token is set before any import,
# and prints what it holds: the resources' repr and the repository snapshot the UI renders (resource config).
# `leaky` is the same snapshot with the token given as a plain string: the control that the check can fail.
SHOW_RESOURCES = """
import json, os
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value
import dagster as dg
from atlasmart_assets.alerts.slack import AtlasSlack
from atlasmart_assets.definitions import defs

def ui(definitions):
    return serialize_value(RepositorySnap.from_def(definitions.get_repository_def()).resources)

leaky = dg.Definitions(assets=defs.assets, asset_checks=defs.asset_checks, jobs=defs.jobs, schedules=defs.schedules,
                       sensors=defs.sensors,
                       resources={**defs.resources, "slack": AtlasSlack(token=os.environ["ATLASMART_SLACK_TOKEN"])})
print(json.dumps({"repr": repr(defs.resources), "ui": ui(defs), "leaky_ui": ui(leaky)}))
"""


def test_token_never_in_the_loaded_definitions_or_what_the_ui_shows(env: Path) -> None:
    import subprocess

    assert os.environ["ATLASMART_SLACK_TOKEN"] == TOKEN
    proc = subprocess.run([sys.executable, "-c", SHOW_RESOURCES], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout.strip().splitlines()[-1])
    assert TOKEN in shown["leaky_ui"], "the control: a plain-string token must show in the snapshot"
    assert "ATLASMART_SLACK_TOKEN" in shown["repr"] and "ATLASMART_SLACK_TOKEN" in shown["ui"]
    assert TOKEN not in shown["repr"] and TOKEN not in shown["ui"]
    assert TOKEN not in proc.stderr


def test_a_failed_runs_failing_days_are_its_error_checks_days_not_warnings_or_freshness(tmp_path: Path) -> None:
    """A WARN (rows changed: every real correction) and the freshness check's due day are not why a run failed."""
    from atlasmart_assets.alerts.run_sensor import _failing_days

    @dg.asset(check_specs=[dg.AssetCheckSpec(n, asset="a") for n in ("warned", "refused", "fresh")])
    def a() -> Iterator[Any]:
        yield dg.MaterializeResult()
        yield dg.AssetCheckResult(check_name="warned", passed=False, severity=dg.AssetCheckSeverity.WARN,
                                  metadata={"figures": {"2026-09-14": {"rows": 3}}})
        yield dg.AssetCheckResult(check_name="refused", passed=False,
                                  metadata={"figures": {"mismatches": {"2026-09-15": [1, 2]}}})
        yield dg.AssetCheckResult(check_name="fresh", passed=False, metadata={"state": "late:2026-09-21",
                                                                              "figures": {"2026-09-21": {}}})

    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        result = dg.materialize([a], instance=instance)
        assert _failing_days(instance, result.run_id) == ["2026-09-15"]


def test_after_an_outage_follow_ups_wait_for_the_thread_opener_before_posting_in_the_channel(tmp_path: Path) -> None:
    """A backfill failed during a Slack outage longer than THREAD_WAIT_S: while the lifecycle sensor still cannot
    post its "started", the run's failure waits for that thread instead of landing in the channel first."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import OPENER_WAIT_MAX_S, THREAD_WAIT_S, Outbox, SlackUnavailable
    from atlasmart_assets.alerts.slack import AtlasSlack

    now = [time.time()]
    down = AtlasSlack(token="xoxb-test", base_url="http://127.0.0.1:9/api", timeout_s=1)
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        def outbox(opens: bool = False) -> Outbox:
            return Outbox(dg.build_sensor_context(instance=instance, cursor=None), down, "probe-lifecycle" if opens
                          else "probe-runs", clock=lambda: now[0], opens_threads=opens)

        failed_at = now[0]
        now[0] += THREAD_WAIT_S + 60  # ten minutes of outage later
        assert outbox().reply_target("bf-1", failed_at) == (None, False), "nobody is trying to open the thread"
        opener = outbox(opens=True)
        assert not opener.send("started:bf-1", [fmt.Message("started", ())], lambda ts: None)
        with pytest.raises(SlackUnavailable):
            opener.finish("no lifecycle notice sent", 1)
        assert outbox().reply_target("bf-1", failed_at) == (None, True), "the opener is blocked: wait for it"
        now[0] += OPENER_WAIT_MAX_S
        assert outbox().reply_target("bf-1", failed_at) == (None, False), "never held for good"
        now[0] -= OPENER_WAIT_MAX_S
        outbox(opens=True).finish("delivered 0 lifecycle notice(s)", 0)
        assert outbox().reply_target("bf-1", failed_at) == (None, False)


def test_enabling_alerts_on_an_instance_with_a_past_does_not_replay_it(history: dict[str, Any],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The sensors' first tick treats what happened before it (beyond FIRST_TICK_HORIZON_S) as history: no
    flood of old check failures, run failures, ended backfills and rollbacks when a token is first set; and the
    cursors move past them, so no later tick sends them either. A backfill still in progress is news."""
    from atlasmart_assets.alerts import delivery
    monkeypatch.setattr(delivery, "THREAD_WAIT_S", 0.0)
    monkeypatch.setattr(delivery, "FIRST_TICK_HORIZON_S", -60.0)  # everything so far is "before the first tick"
    instance = history["instance"]
    _forget(instance)
    with SlackServer() as server:
        for name in (LIFECYCLE, CHECKS, RUNS):
            cursor = _tick(name, instance, _slack(server), None).cursor
            monkeypatch.setattr(delivery, "FIRST_TICK_HORIZON_S", 24 * 3600.0)
            _tick(name, instance, _slack(server), cursor)
            monkeypatch.setattr(delivery, "FIRST_TICK_HORIZON_S", -60.0)
    texts = [m.get("text", "") for m in server.messages]
    assert [t.split(" over ")[0] for t in texts] == ["Correction in progress — backfill bf-asset"], texts


def test_a_retry_after_one_sensor_met_holds_every_sensor(tmp_path: Path) -> None:
    """Slack limits the app (one token, one channel), not a sensor: after the lifecycle sensor's 429 with a long
    Retry-After, the run sensor posts nothing before it either."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import Outbox
    with SlackServer() as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        server.script = ["ratelimited:60"]
        first = Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server, max_wait_s=0), "one")
        assert not first.send("k1", [fmt.Message("one", ())], lambda ts: None)
        other = Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server, max_wait_s=0), "two")
        assert other.stopped and not other.send("k2", [fmt.Message("two", ())], lambda ts: None)
        assert "rate-limited" in other.finish("delivered 0", 1).skip_message
    assert server.attempts == 1 and server.messages == []


def test_a_tick_stops_posting_when_its_time_for_slack_is_spent_and_the_next_goes_on(tmp_path: Path) -> None:
    """Dagster gives a sensor's evaluation 60 s and then starts the next tick while the code server may still be
    posting: a tick stops posting after TICK_BUDGET_S, skipped (not failed) saying so, and the next tick posts
    the rest, each once. A slow Slack is not a blocked one: replies keep waiting for threads as usual."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import OPENER_BLOCKED_KEY, TICK_BUDGET_S, Outbox
    spent = [0.0]
    with SlackServer() as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        def outbox() -> Outbox:
            return Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe",
                          clock=lambda: time.time() + spent[0], opens_threads=True)

        box = outbox()
        assert box.send("k1", [fmt.Message("one", ())], lambda ts: None)
        spent[0] += TICK_BUDGET_S * 2 / 3  # a slow answer
        assert box.send("k2", [fmt.Message("two", ())], lambda ts: None)
        spent[0] += TICK_BUDGET_S * 2 / 3
        assert not box.send("k3", [fmt.Message("three", ())], lambda ts: None)
        skipped = box.finish("delivered 2", 1)
        assert "s for Slack are spent: 1 pending" in skipped.skip_message and box.error is None
        assert not instance.daemon_cursor_storage.get_cursor_values({OPENER_BLOCKED_KEY}).get(OPENER_BLOCKED_KEY)
        again = outbox()
        assert again.send("k3", [fmt.Message("three", ())], lambda ts: None)
    assert [m["text"] for m in server.messages] == ["one", "two", "three"]


def _answer_lost(server: SlackServer, box: Any) -> None:
    """Through `box` (an Outbox on `server`): an alert Slack answers, which teaches the channel id, then the notice
    Slack posts but whose answer comes after the client gave up; the tick fails."""
    from slack_server import TAKEN_SLOW

    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import SlackUnavailable
    assert box.send("earlier", [fmt.Message("an earlier alert", ())], lambda ts: None)
    server.script = [TAKEN_SLOW]
    assert not box.send("notice", [fmt.Message("the notice", ())], lambda ts: None)
    with pytest.raises(SlackUnavailable):
        box.finish("delivered 1", 1)


def test_a_lost_answer_s_lookup_stays_within_the_tick_s_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost answer's lookup over a slow Slack (9 s a page) in a busy channel stops between pages once the tick's
    time is spent, leaving the part pending instead of posting it late (a review found a tick reading history for
    90 s and then posting, past the 60 s Dagster gives it)."""
    from slack_sdk import WebClient

    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import TICK_BUDGET_S, Outbox
    spent = [0.0]
    with SlackServer(slow_s=2.5, page_limit=1) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _answer_lost(server, Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe"))
        for i in range(12):
            server.accept({"text": f"chatter {i}"})
        history = WebClient.conversations_history

        def slow(self, **kw):  # noqa: ANN001, ANN003, ANN202 - 9 s an answer, within the client's 10 s
            spent[0] += 9.0
            return history(self, **kw)

        monkeypatch.setattr(WebClient, "conversations_history", slow)
        again = Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe",
                       clock=lambda: time.time() + spent[0])
        assert not again.send("notice", [fmt.Message("the notice", ())], lambda ts: None)
        assert again.out_of_time and spent[0] <= TICK_BUDGET_S + 9.0, spent
        assert "pending, posted next tick" in again.finish("delivered 0", 1).skip_message
    assert [m["text"] for m in server.messages].count("the notice") == 1


@pytest.mark.parametrize("history_error", ["ratelimited", "http500", "internal_error"])
def test_a_lost_answer_is_looked_up_again_next_tick_when_slack_is_busy_never_posted_twice(
        tmp_path: Path, history_error: str) -> None:
    """A post Slack took but whose answer was lost, and the lookup meets a busy Slack (429, 500, internal_error:
    likely just when answers get lost). The tick stops with the part pending, and the next asks again: one
    message (a review found it posted again at once, a duplicate). A 429 there holds every sensor's posts."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import NOT_BEFORE_KEY, Outbox, SlackUnavailable
    with SlackServer(slow_s=2.5, retry_after_s=30) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        def outbox(later_s: float = 0.0) -> Outbox:
            return Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe",
                          clock=lambda: time.time() + later_s)

        _answer_lost(server, outbox())
        server.history_error = history_error
        busy = outbox()
        assert not busy.send("notice", [fmt.Message("the notice", ())], lambda ts: None)
        if history_error == "ratelimited":
            assert "rate-limited" in busy.finish("delivered 0", 1).skip_message
            assert float(instance.daemon_cursor_storage.get_cursor_values({NOT_BEFORE_KEY})[NOT_BEFORE_KEY]) > \
                time.time() + 20, "every sensor waits out the lookup's Retry-After"
        else:
            with pytest.raises(SlackUnavailable, match="could not check whether Slack took notice#0"):
                busy.finish("delivered 0", 1)
        server.history_error = None
        assert outbox(later_s=60).send("notice", [fmt.Message("the notice", ())], lambda ts: None)
    assert [m["text"] for m in server.messages] == ["an earlier alert", "the notice"]


def test_a_lost_answer_beyond_the_first_page_of_history_is_found(tmp_path: Path) -> None:
    """The lookup of a lost answer reads history page by page: a message posted long enough ago that newer ones
    fill the first page is still found, not posted twice."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import Outbox
    with SlackServer(slow_s=2.5, page_limit=3) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _answer_lost(server, Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe"))
        for i in range(7):  # others post in the channel meanwhile
            server.accept({"text": f"chatter {i}"})
        again = Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe")
        assert again.send("notice", [fmt.Message("the notice", ())], lambda ts: None)
    assert [m["text"] for m in server.messages].count("the notice") == 1 and server.pages >= 3


def test_a_lost_answer_whose_lookup_stays_busy_past_the_give_up_is_posted_again(tmp_path: Path) -> None:
    """If Slack's history stays busy for LOOKUP_GIVE_UP_S after the first try, the part is posted again: twice
    rather than lost."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import LOOKUP_GIVE_UP_S, Outbox
    with SlackServer(slow_s=2.5) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _answer_lost(server, Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe"))
        server.history_error = "internal_error"
        later = time.time() + LOOKUP_GIVE_UP_S + 1
        again = Outbox(dg.build_sensor_context(instance=instance, cursor=None), _slack(server), "probe",
                       clock=lambda: later)
        assert again.send("notice", [fmt.Message("the notice", ())], lambda ts: None)
    assert [m["text"] for m in server.messages] == ["an earlier alert", "the notice", "the notice"]


@pytest.mark.parametrize("history_error", [None, "missing_scope"])
def test_a_post_slack_took_whose_answer_was_lost_is_found_not_posted_twice(tmp_path: Path,
                                                                           history_error: str | None) -> None:
    """Slack posts the message but its answer comes after the client gave up. The next tick asks Slack (history,
    by the part's metadata) before posting again: the message stays single, and its reply goes in its thread.
    Without the history scope it cannot ask: it posts again (twice rather than lost) and says so."""
    from slack_server import TAKEN_SLOW

    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.alerts.delivery import Outbox, SlackUnavailable
    with SlackServer(slow_s=2.5, history_error=history_error) as server, \
            dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        def outbox(cursor: str | None) -> Outbox:
            return Outbox(dg.build_sensor_context(instance=instance, cursor=cursor), _slack(server), "probe")

        box = outbox(None)
        assert box.send("earlier", [fmt.Message("an earlier alert", ())], lambda ts: None)  # learns the channel id
        server.script = [TAKEN_SLOW]
        two_parts = [fmt.Message("part one", ()), fmt.Message("part two", ())]
        assert not box.send("notice", two_parts, lambda ts: None)
        with pytest.raises(SlackUnavailable):
            box.finish("delivered 1", 1)
        again = outbox(None)  # the cursor was not saved (the tick raised): the journal carries on
        assert again.send("notice", two_parts, lambda ts: None)
    texts = [m["text"] for m in server.messages]
    if history_error is None:
        assert texts == ["an earlier alert", "part one", "part two"] and server.lookups == 1
        assert server.messages[2]["thread_ts"] == server.messages[1]["ts"], "part two replies to the one part one"
    else:
        assert texts == ["an earlier alert", "part one", "part one", "part two"] and server.lookups == 1
