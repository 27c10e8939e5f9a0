"""Issues 8 and 16: the operator's path in a real browser — a backfill launched from the Dagster UI, the fence seen
there, and a rollback from the command line seen on the restored partition (with its change notice).

Grain: one deployment (dagster-webserver + dagster-daemon, the repo's dagster.yaml) on a copy of the shipped raw,
one headless chromium driven by Playwright. Screenshots land in tmp_path/screenshots (the path is printed). Asset
steps wait at a test gate (ATLASMART_GATE_DIR) until the test opens them, so the first backfill is in progress for
certain while the second is launched, and the second's QUEUED status is read, not inferred from timestamps.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import dagster as dg
import duckdb
import pytest
from playwright.sync_api import expect

from atlasmart_assets.contract import CONTROL_NAMES
from atlasmart_assets.contract import CURRENT_LANE_TAGS
from atlasmart_assets.lab import publish_legacy_incident
from atlasmart_assets.resources import Warehouse
from atlasmart_tests.deployment import (
    FINISHED,
    LAUNCH_RUN,
    LOCATION,
    REPOSITORY,
    WORKER_C,
    Deployment,
    DeploymentError,
    Gates,
    deployment,
    max_concurrent,
    runs,
    wait_backfill_run,
    wait_backfill_runs,
    wait_runs_finished,
)
from atlasmart_tests.ui import CHROMIUM, Operator, browser, in_ci

pytestmark = [
    pytest.mark.integration,
    WORKER_C,
    pytest.mark.skipif(not CHROMIUM.exists() and not in_ci(),
                       reason=f"{CHROMIUM} is missing (install Debian's chromium; `make test` does); "
                              "under CI a missing chromium fails instead"),
]

REPO_RAW = Path(__file__).resolve().parent.parent / "raw"
AS_OF = "2026-09-22"
NEWEST = "2026-09-21"
JOB = "atlasmart_daily"
SCHEDULE = "atlasmart_daily_schedule"
PROBE_JOB = "slo_report"  # no asset step, so never held at the gate
FACT = "fact/fct_order_lines"
HISTORY = ("2026-09-16", "2026-09-20")      # historical: ends the day before the newest partition
REACHES_NEWEST = ("2026-09-19", NEWEST)
REASON = "issue-8 UI walk: republish 16-20 Sep"
FENCED_REASON = "issue-8 UI walk: reaches the newest day"
ROLLED_BACK = "2026-09-20"
ROLLBACK_REASON = "issue-16 UI walk: undo the legacy republication of 20 Sep"


def days(first: str, last: str) -> list[str]:
    start, end = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    return [(start + dt.timedelta(days=k)).isoformat() for k in range((end - start).days + 1)]


def launch_ranged(dep: Deployment, asset_paths: Sequence[Sequence[str]], first: str, last: str,
                  tags: dict[str, str]) -> str:
    """launchRun of a subset of the daily job over a range (one run, no backfill tag)."""
    selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "jobName": JOB,
                "assetSelection": [{"path": list(p)} for p in asset_paths]}
    tags = {**tags, "dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    params = {"selector": selector, "runConfigData": {},
              "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]}}
    result = dep.graphql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
    if result["__typename"] != "LaunchRunSuccess":
        raise DeploymentError(f"launchRun refused: {result}")
    return result["run"]["runId"]


def rollback_from_cli(dep: Deployment, day: str, reason: str) -> dict[str, Any]:
    """`atlasmart rollback` with the deployment's environment (its DAGSTER_HOME and data dir); its JSON summary."""
    done = subprocess.run([str(Path(sys.executable).parent / "atlasmart"), "rollback", "--from", day, "--reason", reason],
                          env=dep.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout[done.stdout.index("{"):])


def raw_controls(raw_dir: Path, partition: str) -> list[float]:
    controls = json.loads((raw_dir / f"partition={partition}.json").read_text())["manifest"]["controls"]
    return [controls[name] for name in CONTROL_NAMES]


def ledger_rows(warehouse: Path, first: str, last: str, timeout_s: float = 30) -> list[dict[str, Any]]:
    """audit.publications for a range, read-only; retried while a sensor of the deployment holds the file."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with duckdb.connect(str(warehouse), read_only=True) as con:
                cur = con.execute("select partition_date::varchar as partition, kind, backfill_id, reason, "
                                  "controls_after from audit.publications "
                                  "where partition_date between ?::date and ?::date order by partition_date, seq",
                                  [first, last])
                names = [d[0] for d in cur.description]
                return [dict(zip(names, row)) for row in cur.fetchall()]
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture
def walk_env(tmp_path: Path) -> dict[str, str]:
    raw = tmp_path / "raw"
    shutil.copytree(REPO_RAW, raw)
    return {"ATLASMART_RAW_DIR": str(raw), "ATLASMART_DATA_DIR": str(tmp_path / "data"),
            "ATLASMART_AS_OF": AS_OF, "ATLASMART_START_DATE": "2026-09-01", **Gates(tmp_path / "gates").env()}


def test_operator_backfills_history_from_the_ui_and_sees_the_fence(tmp_path: Path, walk_env: dict[str, str]) -> None:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing under CI: `make test` installs Debian's chromium")
    t0 = time.monotonic()
    raw_dir, data_dir = Path(walk_env["ATLASMART_RAW_DIR"]), Path(walk_env["ATLASMART_DATA_DIR"])
    newest_extract = data_dir / "published" / f"partition={NEWEST}.json"
    shots = tmp_path / "screenshots"
    print(f"\n[ui] screenshots: {shots}")

    gates = Gates(Path(walk_env["ATLASMART_GATE_DIR"]))
    with deployment(tmp_path / "deployment", walk_env) as dep:
        dep.quiet()  # a tick would add a run the gate holds
        # What the daily lane leaves behind: the newest day published, and raw loaded for history, so the
        # correction's partitions have their upstream (the UI otherwise warns "Upstream data missing").
        current = dep.launch_run(JOB, {**CURRENT_LANE_TAGS, "dagster/partition": NEWEST})
        staged = launch_ranged(dep, [["raw", "order_lines"]], *HISTORY, CURRENT_LANE_TAGS)
        gates.open_run(current, staged)
        loaded = wait_runs_finished(dep, [current, staged], timeout_s=300)
        assert [r.dagster_run.status.value for r in loaded] == ["SUCCESS", "SUCCESS"], dep.log_tail()
        newest_before = newest_extract.read_bytes()
        t_loaded = time.monotonic()

        with browser() as b:
            op = Operator(b.new_page(viewport={"width": 1400, "height": 900}), dep.url, shots)
            op.open_partitions(FACT)
            op.shot("fact-partitions")
            backfill = op.launch_backfill(HISTORY, {"atlasmart/reason": REASON}, "history")
            backfill_run = wait_backfill_run(dep, backfill, timeout_s=300)
            dep.wait_for("the history backfill run at the gate", lambda: gates.arrived(backfill_run), timeout_s=300)
            # Launched while the first is in progress: the backfill lane must hold it until the first run ends.
            fenced = op.launch_backfill(REACHES_NEWEST, {"atlasmart/reason": FENCED_REASON}, "reaches-newest")
            fenced_run_id = wait_backfill_run(dep, fenced, timeout_s=300)
            # A run queued after it, dequeued and finished: the daemon has looked at the fenced run and left it.
            [probe] = wait_runs_finished(dep, [dep.launch_run(PROBE_JOB, {})], timeout_s=180)
            held = {"history": dep.status(backfill_run), "fenced": dep.status(fenced_run_id),
                    "probe": probe.dagster_run.status.value}
            assert held == {"history": "STARTED", "fenced": "QUEUED", "probe": "SUCCESS"}, held
            assert not gates.arrived(fenced_run_id)
            gates.open_all()

            backfill_runs = wait_backfill_runs(dep, backfill, FINISHED, timeout_s=300)
            op.wait_backfill_status(backfill, "Succeeded", timeout_s=180)
            op.shot("history-backfill-succeeded")

            fenced_runs = wait_backfill_runs(dep, fenced, FINISHED, timeout_s=300)
            op.wait_backfill_status(fenced, "Failed", timeout_s=180)
            op.shot("reaches-newest-backfill-failed")
            [fenced_run] = fenced_runs
            op.step_failures(fenced_run.dagster_run.run_id)
            refusal = op.page.get_by_text(re.compile(
                rf"Refused: backfill {fenced} over {REACHES_NEWEST[0]}\.\.{NEWEST} includes {NEWEST}"
                r".*atlasmart/fence_override=<reason>", re.S)).first
            expect(refusal).to_be_visible()
            op.shot("fence-refusal-in-event-log")

            op.open_partitions(FACT)
            op.shot("fact-partitions-after")

            # Undo from the command line: the legacy pipeline republishes one day without audits (cost 435), the
            # operator runs `atlasmart rollback` against the deployment's instance, and the UI shows the restored
            # version on the partition: the same rollback_job run a UI launch makes.
            ledger = ledger_rows(data_dir / "warehouse.duckdb", *HISTORY)  # what the backfill recorded
            publish_legacy_incident(Warehouse(raw_dir=str(raw_dir), data_dir=str(data_dir)))
            rolled = rollback_from_cli(dep, ROLLED_BACK, ROLLBACK_REASON)
            op.open(f"/assets/{FACT}?view=partitions&partition={ROLLED_BACK}")
            expect(op.page.get_by_text(rolled["publication_id"]).first).to_be_visible(timeout=60_000)
            op.shot("restored-partition")
            op.open(f"/runs/{rolled['run_id']}")
            expect(op.page.get_by_text("rollback_job").first).to_be_visible()
            op.shot("rollback-run")
        t_walked = time.monotonic()

        with dep.instance() as instance:
            every_backfill_run = [r for r in runs(instance) if "dagster/backfill" in r.dagster_run.tags]
            rollback_run = instance.get_run_by_id(rolled["run_id"])
            restored = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(FACT.split("/")), asset_partitions=[ROLLED_BACK]),
                limit=1).records

    # The runs: one per backfill (single_run policy), launched from the UI with the reason, and never two at once.
    assert len(backfill_runs) == 1 and len(fenced_runs) == 1
    [run] = backfill_runs
    assert run.dagster_run.status.value == "SUCCESS"
    assert run.dagster_run.tags["dagster/backfill"] == backfill
    assert run.dagster_run.tags["atlasmart/reason"] == REASON
    assert run.dagster_run.tags.get("dagster/from_ui") == "true"
    assert (run.dagster_run.tags["dagster/asset_partition_range_start"],
            run.dagster_run.tags["dagster/asset_partition_range_end"]) == HISTORY
    assert fenced_run.dagster_run.status.value == "FAILURE"
    assert fenced_run.dagster_run.tags["dagster/backfill"] == fenced
    assert fenced_run.dagster_run.tags["atlasmart/reason"] == FENCED_REASON
    assert max_concurrent(every_backfill_run) == 1, "two backfill runs were in progress at once"
    assert fenced_run.start_time >= run.end_time, "the queued backfill run started before the first one ended"

    # The range is published with its raw manifest's controls, and the ledger names the backfill and the reason.
    for day in days(*HISTORY):
        doc = json.loads((data_dir / "published" / f"partition={day}.json").read_text())
        assert doc["controls"] == pytest.approx(raw_controls(raw_dir, day)), day
    assert [r["partition"] for r in ledger] == days(*HISTORY)
    assert all(r["backfill_id"] == backfill and r["reason"] == REASON for r in ledger), ledger
    assert all(json.loads(r["controls_after"]) == pytest.approx(raw_controls(raw_dir, r["partition"]))
               for r in ledger), ledger

    # The fence: nothing of the refused run was written; the newest day keeps the current lane's publication, byte-identical.
    assert all(r["backfill_id"] != fenced for r in ledger_rows(data_dir / "warehouse.duckdb", "2026-09-01", NEWEST))
    assert [r["backfill_id"] for r in ledger_rows(data_dir / "warehouse.duckdb", NEWEST, NEWEST)] == [None]
    assert not list((data_dir / "scratch").glob(f"{fenced_run.dagster_run.run_id}*"))
    assert newest_extract.read_bytes() == newest_before

    # The rollback: a run of rollback_job in the deployment's instance, the partition's latest materialization,
    # cost back to 425 in the extract, and its notice with the figures and the neighbours proven unchanged.
    assert rollback_run is not None and rollback_run.job_name == "rollback_job" and rollback_run.is_success
    assert rollback_run.tags["atlasmart/launched_from"] == "cli"
    assert restored and restored[0].run_id == rolled["run_id"]
    assert restored[0].asset_materialization.metadata["publication_id"].value == rolled["publication_id"]
    assert json.loads((data_dir / "published" / f"partition={ROLLED_BACK}.json").read_text())["controls"] == \
        pytest.approx(raw_controls(raw_dir, ROLLED_BACK))
    notice = Path(rolled["notice"]).read_text()
    assert notice.startswith(f"# Rollback notice — publication {rolled['publication_id']}")
    assert "cost 435 → 425 (-10)" in notice
    assert "- 2026-09-19: **unchanged**" in notice and f"- {NEWEST}: **unchanged**" in notice

    first, second = sorted([run, fenced_run], key=lambda r: r.start_time or 0)
    queued_together = second.create_timestamp.timestamp() < (first.end_time or 0)
    print(f"[ui] backfill runs queued together: {queued_together} (the lane then ran them one after the other)")
    print(f"[ui] screenshots ({len(op.taken)}): " + ", ".join(p.name for p in op.taken))
    print(f"[ui] load {t_loaded - t0:.0f}s, browser walk {t_walked - t_loaded:.0f}s, total {time.monotonic() - t0:.0f}s")
