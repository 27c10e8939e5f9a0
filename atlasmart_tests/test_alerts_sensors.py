"""The alert sensors against real Dagster runs and a real HTTP server speaking chat.postMessage."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from slack_server import HTTP_500, OK, RATELIMITED, SLOW, SlackServer  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TOKEN = "xoxb-test-secret-token-0001"

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


def _run(instance: dg.DagsterInstance, job: str = "atlasmart_daily", partition: str | None = None,
         window: tuple[str, str] | None = None, **tags: str) -> dg.ExecuteInProcessResult:
    from atlasmart_assets.definitions import defs
    if window:
        tags = {**tags, "dagster/asset_partition_range_start": window[0],
                "dagster/asset_partition_range_end": window[1]}
    return defs.resolve_job_def(job).execute_in_process(partition_key=partition, instance=instance, tags=tags,
                                                        raise_on_error=False)


@pytest.fixture(scope="module")
def history(env: Path) -> Iterator[dict[str, Any]]:
    """One instance with: a clean daily run, a published backfill, a backfill refused by a blocking check,
    a backfill refused by the fence, a republish and its rollback."""
    with dg.instance_for_test(temp_dir=str(env / "home")) as instance:
        runs = {
            "daily": _run(instance, partition="2026-09-17"),
            "ok": _run(instance, window=("2026-09-14", "2026-09-16"), **{"dagster/backfill": "bf-ok",
                       "atlasmart/reason": "late file", "user": "ana", "ticket": "OPS-7"}),
            "bad": _run(instance, window=("2026-09-18", "2026-09-19"), **{"dagster/backfill": "bf-bad",
                        "atlasmart/reason": "fix costs"}),
            "fenced": _run(instance, window=("2026-09-20", "2026-09-21"), **{"dagster/backfill": "bf-fenced"}),
            "redo": _run(instance, window=("2026-09-17", "2026-09-17"), **{"dagster/backfill": "bf-redo",
                         "atlasmart/reason": "recheck"}),
        }
        from atlasmart_assets.definitions import defs
        runs["rollback"] = defs.resolve_job_def("rollback_job").execute_in_process(
            instance=instance, raise_on_error=False,
            run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-17", "reason": "undo recheck"}}}})
        assert [runs[k].success for k in ("daily", "ok", "bad", "fenced", "redo", "rollback")] == \
            [True, True, False, False, True, True]
        yield {"instance": instance, "runs": runs, "home": env / "home"}


@pytest.fixture()
def slack_token(monkeypatch: pytest.MonkeyPatch) -> str:
    """The token `_slack` reads through dg.EnvVar, for tests that do not run inside the module's `env`."""
    monkeypatch.setenv("ATLASMART_SLACK_TOKEN", TOKEN)
    return TOKEN


def _slack(server: SlackServer, **kw: Any) -> Any:
    from atlasmart_assets.alerts.slack import AtlasSlack
    return AtlasSlack(token=dg.EnvVar("ATLASMART_SLACK_TOKEN"), base_url=server.base_url,
                      ui_base_url="http://ui.test", timeout_s=1, **kw)


def _tick(sensor_name: str, instance: dg.DagsterInstance, slack: Any, cursor: str | None,
          definitions: dg.Definitions | None = None) -> Any:
    from atlasmart_assets.definitions import defs
    definitions = definitions or defs
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=definitions,
                                  resources={"slack": slack})
    return definitions.resolve_sensor_def(sensor_name).evaluate_tick(ctx)


CHECKS = "atlasmart_check_failures_to_slack"
RUNS = "atlasmart_run_failures_to_slack"
LIFECYCLE = "atlasmart_backfill_lifecycle_to_slack"


def test_failed_blocking_check_is_alerted_once_with_figures_and_link(history: dict[str, Any]) -> None:
    bad_run = history["runs"]["bad"].run_id
    with SlackServer() as server:
        first = _tick(CHECKS, history["instance"], _slack(server), None)
        texts = list(server.texts)
        second = _tick(CHECKS, history["instance"], _slack(server), first.cursor)
    assert len(server.texts) == len(texts), "the second tick re-sent an alert"
    manifest = [t for t in texts if "raw_order_lines_match_manifest" in t]
    assert len(manifest) == 1
    text = manifest[0]
    for part in ("raw/order_lines", "ERROR", "2026-09-18..2026-09-19", "2408.9", f"<http://ui.test/runs/{bad_run}|"):
        assert part in text
    assert second.cursor is not None


def test_check_passed_false_is_recorded_as_failed(history: dict[str, Any]) -> None:
    from atlasmart_assets.alerts.check_records import records_after
    key = dg.AssetCheckKey(dg.AssetKey(["raw", "order_lines"]), "raw_order_lines_match_manifest")
    failed = [r for r in records_after(history["instance"], key, 0) if r.failed]
    assert [(r.run_id, r.passed, r.severity) for r in failed] == [(history["runs"]["bad"].run_id, False, "ERROR")]


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


def test_warn_failures_resume_after_restart_without_duplicates_or_gaps(warn_defs: dg.Definitions, tmp_path: Path,
                                                                      slack_token: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from atlasmart_assets.alerts import common
    with SlackServer() as server:
        with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
            _materialize_tiny(warn_defs, instance, 3)
            saved = _tick(CHECKS, instance, _slack(server), None, warn_defs).cursor
        assert len(server.texts) == 3 and all(":warning:" in t and '"minimum": 2' in t for t in server.texts)
        with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
            _materialize_tiny(warn_defs, instance, 2)
            monkeypatch.setattr(common, "BATCH", 1)
            cursor, sent = saved, []
            for _ in range(3):
                cursor = _tick(CHECKS, instance, _slack(server), cursor, warn_defs).cursor
                sent.append(len(server.texts))
            runs = [r.run_id for r in instance.get_runs()]
    assert sent == [4, 5, 5], "the sensor did not deliver one alert per tick with BATCH = 1"
    alerted = [t.rsplit("|", 1)[1].rstrip(">") for t in server.texts]
    assert sorted(alerted) == sorted(runs) and len(set(alerted)) == 5


@pytest.mark.parametrize("mode", [RATELIMITED, HTTP_500, SLOW])
def test_refused_post_keeps_the_alert_for_the_next_tick(warn_defs: dg.Definitions, tmp_path: Path,
                                                        slack_token: str, mode: str) -> None:
    with SlackServer(mode=mode, slow_s=2.5) as server, dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        _materialize_tiny(warn_defs, instance, 1)
        refused = _tick(CHECKS, instance, _slack(server), None, warn_defs)
        assert server.messages == [] and "retried next tick" in refused.skip_message
        server.mode = OK
        _tick(CHECKS, instance, _slack(server), refused.cursor, warn_defs)
    assert len(server.texts) == 1 and "tiny_is_big" in server.texts[0]


def test_without_token_sensors_skip_with_reason(history: dict[str, Any]) -> None:
    from atlasmart_assets.alerts.slack import AtlasSlack
    with SlackServer() as server:
        for name in (CHECKS, RUNS, LIFECYCLE):
            result = _tick(name, history["instance"], AtlasSlack(token="", base_url=server.base_url), None)
            assert "ATLASMART_SLACK_TOKEN is not set" in result.skip_message
    assert server.attempts == 0


def test_run_failures_alerted_once_with_errors(history: dict[str, Any]) -> None:
    runs = history["runs"]
    with SlackServer() as server:
        cursor = _tick(RUNS, history["instance"], _slack(server), None).cursor
        first = list(server.texts)
        _tick(RUNS, history["instance"], _slack(server), cursor)
    assert len(first) == 2 and server.texts == first
    fenced = next(t for t in first if runs["fenced"].run_id in t)
    assert "Refused: backfill bf-fenced" in fenced and "2026-09-20..2026-09-21" in fenced
    bad = next(t for t in first if runs["bad"].run_id in t)
    assert "raw_order_lines_match_manifest" in bad and "fix costs" in bad


def test_lifecycle_notices_sent_once_in_order_with_change_notice(history: dict[str, Any], env: Path) -> None:
    with SlackServer() as server:
        cursor = _tick(LIFECYCLE, history["instance"], _slack(server), None).cursor
        first = list(server.texts)
        _tick(LIFECYCLE, history["instance"], _slack(server), cursor)
    assert server.texts == first
    by = {b: [t for t in first if f"`{b}`" in t and "Rolled back" not in t]
          for b in ("bf-ok", "bf-bad", "bf-fenced", "bf-redo")}
    assert all(len(v) == 2 and "Correction in progress" in v[0] for v in by.values())
    started_ok, published_ok = by["bf-ok"]
    assert "2026-09-14..2026-09-16" in started_ok and "late file" in started_ok and "ana" in started_ok
    assert "3 partition(s) republished" in published_ok
    assert "Correction failed" in by["bf-bad"][1] and "Correction failed" in by["bf-fenced"][1]
    notice = (env / "data" / "notices" / "bf-ok.md").read_text()
    assert "| 2026-09-14 | — → " in notice and "- 2026-09-17: unchanged" in notice
    assert "- 2026-09-13: unchanged (never published)" in notice
    rollback = [t for t in first if "Rolled back" in t]
    assert len(rollback) == 1 and "2026-09-17" in rollback[0] and "`bf-redo`" in rollback[0]
    assert "undo recheck" in rollback[0]


def test_token_never_printed(history: dict[str, Any], warn_defs: dg.Definitions, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    results = []
    with SlackServer(mode=HTTP_500) as server:
        for name in (CHECKS, RUNS, LIFECYCLE):
            results.append(_tick(name, history["instance"], _slack(server), None))
    assert server.auth_headers and all(h == f"Bearer {TOKEN}" for h in server.auth_headers)
    out = capsys.readouterr()
    seen = out.out + out.err + caplog.text + "".join(str(r) for r in results)
    assert TOKEN not in seen


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

leaky = dg.Definitions(assets=defs.assets, sensors=defs.sensors,
                       resources={"slack": AtlasSlack(token=os.environ["ATLASMART_SLACK_TOKEN"])})
print(json.dumps({"repr": repr(defs.resources), "ui": ui(defs), "leaky_ui": ui(leaky)}))
"""


def test_token_never_in_the_loaded_definitions_or_what_the_ui_shows(env: Path) -> None:
    assert os.environ["ATLASMART_SLACK_TOKEN"] == TOKEN
    proc = subprocess.run([sys.executable, "-c", SHOW_RESOURCES], cwd=REPO, env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = json.loads(proc.stdout.strip().splitlines()[-1])
    assert TOKEN in shown["leaky_ui"], "the control: a plain-string token must show in the snapshot"
    assert "ATLASMART_SLACK_TOKEN" in shown["repr"] and "ATLASMART_SLACK_TOKEN" in shown["ui"]
    assert TOKEN not in shown["repr"] and TOKEN not in shown["ui"]
    assert TOKEN not in proc.stderr
