"""A real AtlasMart deployment for tests: dagster-webserver + dagster-daemon on a private DAGSTER_HOME.

Grain: one deployment per test (or module). Reusable by browser tests: `Deployment.url` is the UI,
`Deployment.graphql` speaks to it as the UI does, `Deployment.instance()` reads the run records.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import dagster as dg
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOCATION = "atlasmart"
REPOSITORY = "__repository__"
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}

LAUNCH_RUN = """
mutation($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on PipelineNotFoundError { message }
  }
}"""

LAUNCH_BACKFILL = """
mutation($p: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $p) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
    ... on InvalidStepError { invalidStepKey }
    ... on InvalidOutputError { invalidOutputName }
    ... on UnauthorizedError { message }
  }
}"""

SCHEDULE_ID = """
query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) { __typename
    ... on Schedule { id } ... on PythonError { message } ... on ScheduleNotFoundError { message } } }"""

STOP_SCHEDULE = """
mutation($id: String!) { stopRunningSchedule(id: $id) { __typename
    ... on ScheduleStateResult { scheduleState { status } } ... on PythonError { message } } }"""

SENSOR_ID = """
query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
    ... on Sensor { id } ... on PythonError { message } ... on SensorNotFoundError { message } } }"""

START_SENSOR = """
mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename
    ... on Sensor { sensorState { status } } ... on PythonError { message } } }"""

STOP_SENSOR = """
mutation($id: String!) { stopSensor(id: $id) { __typename
    ... on StopSensorMutationResult { instigationState { status } } ... on PythonError { message } } }"""

# What launches runs by itself besides the daily schedule: stopped by the tests that construct the queue.
SELF_LAUNCHING_SENSORS = ("atlasmart_freshness", "atlasmart_newest_partition_catch_up")
SELF_LAUNCHING_SCHEDULES = ("atlasmart_daily_schedule", "atlasmart_observe_landing_batches",
                            "atlasmart_scan_published_for_suppressed_keys")

# `make test` runs the deployment tests on three workers (--dist loadgroup), a group per worker: a deployment mostly
# waits on daemon ticks and gated runs (on three workers at 16ad1f9 the cores were still about a quarter idle through
# the tier), so three side by side fit on two cores. Their lengths at 16ad1f9 (--durations, two workers): lanes 180 s,
# freshness/saturation 196 s, UI backfill 109 s, first run 58 s; in two groups the tier took 297 s, bound by lanes +
# UI backfill. On three workers it took 234 s, and 229 s once the queue was read every second (the lanes test 157 s).
WORKER_A = pytest.mark.xdist_group("deployments-a")
WORKER_B = pytest.mark.xdist_group("deployments-b")
WORKER_C = pytest.mark.xdist_group("deployments-c")

LOCATION_STATUS = """
{ workspaceOrError { __typename ... on Workspace { locationEntries { name loadStatus
    locationOrLoadError { __typename ... on PythonError { message } } } } } }"""


class DeploymentError(RuntimeError):
    """The deployment did not come up, or refused a request."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def generate_raw(raw_dir: Path, start: str, days: int, lines: int, customers: int) -> None:
    """Synthetic raw evidence through the project's own generator CLI."""
    subprocess.run([sys.executable, "-m", "atlasmart_assets.generate", "--raw-dir", str(raw_dir), "--start", start,
                    "--days", str(days), "--lines", str(lines), "--customers", str(customers)],
                   check=True, cwd=REPO_ROOT, capture_output=True)


def _kill_group(proc: subprocess.Popen, timeout_s: float = 10) -> None:
    """SIGKILL the process's group until it is empty: code servers and run workers may outlive their parent."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader: a zombie would keep the group alive for killpg
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.1)


@dataclass
class Deployment:
    """A running webserver + daemon pair; every process is in its own session so teardown kills the group."""

    home: Path
    env: dict[str, str]
    port: int
    logs: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: Sequence[str]) -> None:
        with open(self.logs / f"{name}.log", "wb") as out:
            self.procs.append(subprocess.Popen(list(args), cwd=REPO_ROOT, env=self.env, stdout=out,
                                               stderr=subprocess.STDOUT, start_new_session=True))

    def start(self, timeout_s: float = 90) -> "Deployment":
        # Create the SQLite storages once, here: webserver and daemon migrating a fresh home at the same
        # moment race (alembic "more than one head").
        with self.instance() as instance:
            instance.get_runs(limit=1)
        workspace = ["-w", str(REPO_ROOT / "workspace.yaml")]
        self._spawn("webserver", [str(BIN / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(self.port), *workspace])
        self._spawn("daemon", [str(BIN / "dagster-daemon"), "run", *workspace])
        self._wait_loaded(timeout_s)
        return self

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            _kill_group(proc)
            proc.wait()

    def log_tail(self, chars: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in sorted(self.logs.glob("*.log")))

    def _wait_loaded(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise DeploymentError(f"a deployment process exited early\n{self.log_tail()}")
            try:
                last = self.graphql(LOCATION_STATUS)
            except (urllib.error.URLError, ConnectionError, TimeoutError, DeploymentError) as exc:
                last = exc
                time.sleep(0.5)
                continue
            entries = last["workspaceOrError"]["locationEntries"]
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                errors = [e for e in entries if e["locationOrLoadError"]["__typename"] == "PythonError"]
                if errors:
                    raise DeploymentError(f"code location failed to load: {errors}")
                return
            time.sleep(0.5)
        raise DeploymentError(f"webserver not ready after {timeout_s}s: {last}\n{self.log_tail()}")

    def graphql(self, query: str, variables: Mapping[str, Any] | None = None, retries: int = 0) -> dict[str, Any]:
        """One GraphQL request. `retries`: how often an HTTP 5xx is retried (only for idempotent requests: a
        launch that answered 500 may still have launched)."""
        body = json.dumps({"query": query, "variables": dict(variables or {})}).encode()
        req = urllib.request.Request(f"{self.url}/graphql", data=body, headers={"Content-Type": "application/json"})
        for attempt in range(retries + 1):
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    payload = json.loads(resp.read())
                break
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:2000]
                if exc.code < 500 or attempt == retries:
                    raise DeploymentError(f"GraphQL HTTP {exc.code}: {detail}\n{self.log_tail()}") from exc
                time.sleep(1 + attempt)
        if payload.get("errors"):
            raise DeploymentError(f"GraphQL errors: {payload['errors']}")
        return payload["data"]

    def launch_run(self, job: str, tags: Mapping[str, str]) -> str:
        """launchRun, as the UI's Launchpad does; returns the run id (the run is queued)."""
        params = {"selector": {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "jobName": job},
                  "runConfigData": {},
                  "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]}}
        result = self.graphql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
        if result["__typename"] != "LaunchRunSuccess":
            raise DeploymentError(f"launchRun refused: {result}")
        return result["run"]["runId"]

    def launch_backfill(self, asset_paths: Sequence[Sequence[str]], partitions: Sequence[str],
                        tags: Mapping[str, str], title: str | None = None) -> str:
        """launchPartitionBackfill, the mutation behind the UI's backfill dialog; returns the backfill id."""
        params = {"assetSelection": [{"path": list(p)} for p in asset_paths], "partitionNames": list(partitions),
                  "tags": [{"key": k, "value": v} for k, v in tags.items()], "title": title}
        result = self.graphql(LAUNCH_BACKFILL, {"p": params})["launchPartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            raise DeploymentError(f"launchPartitionBackfill refused: {result}")
        return result["backfillId"]

    def stop_schedule(self, name: str) -> None:
        """Stop a schedule (as the UI's toggle does), so that no tick adds a run in the middle of a scenario."""
        selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "scheduleName": name}
        found = self.graphql(SCHEDULE_ID, {"s": selector}, retries=3)["scheduleOrError"]
        if found["__typename"] != "Schedule":
            raise DeploymentError(f"schedule {name} not found: {found}")
        result = self.graphql(STOP_SCHEDULE, {"id": found["id"]}, retries=3)["stopRunningSchedule"]
        if result["__typename"] != "ScheduleStateResult" or result["scheduleState"]["status"] != "STOPPED":
            raise DeploymentError(f"stopRunningSchedule refused: {result}")

    def stop_sensor(self, name: str) -> None:
        """Stop a sensor (as the UI's toggle does)."""
        selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "sensorName": name}
        found = self.graphql(SENSOR_ID, {"s": selector}, retries=3)["sensorOrError"]
        if found["__typename"] != "Sensor":
            raise DeploymentError(f"sensor {name} not found: {found}")
        result = self.graphql(STOP_SENSOR, {"id": found["id"]}, retries=3)["stopSensor"]
        if result["__typename"] != "StopSensorMutationResult" or result["instigationState"]["status"] != "STOPPED":
            raise DeploymentError(f"stopSensor refused: {result}")

    def start_sensor(self, name: str) -> None:
        """Start a stopped sensor again (as the UI's toggle does); its cursor is kept."""
        selector = {"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY, "sensorName": name}
        result = self.graphql(START_SENSOR, {"s": selector}, retries=3)["startSensor"]
        if result["__typename"] != "Sensor" or result["sensorState"]["status"] != "RUNNING":
            raise DeploymentError(f"startSensor refused: {result}")

    def restart_daemon(self) -> None:
        """SIGKILL the daemon's process group (its code server and any tick in flight with it), then start a new
        daemon: what an OOM kill or a host restart does to it. The webserver keeps running."""
        [daemon] = [p for p in self.procs if "dagster-daemon" in str(p.args[0])]
        _kill_group(daemon)
        daemon.wait()
        self.procs.remove(daemon)
        (self.logs / "daemon.log").rename(self.logs / f"daemon-{int(time.time())}.log")
        self._spawn("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(REPO_ROOT / "workspace.yaml")])

    def quiet(self) -> None:
        """Stop everything that launches runs by itself, so a test alone decides which runs exist."""
        for name in SELF_LAUNCHING_SCHEDULES:
            self.stop_schedule(name)
        for name in SELF_LAUNCHING_SENSORS:
            self.stop_sensor(name)

        def idle() -> bool:
            with self.instance() as instance:
                return not instance.get_run_records(dg.RunsFilter(statuses=[
                    dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                    dg.DagsterRunStatus.STARTED]), limit=1)
        # A run they launched before they were stopped ends first (none of them waits at the gate).
        self.wait_for("the runs launched before the quiet to end", idle, timeout_s=300)

    def status(self, run_id: str) -> str:
        with self.instance() as instance:
            run = instance.get_run_by_id(run_id)
        if run is None:
            raise DeploymentError(f"no run {run_id}")
        return run.status.value

    def instance(self) -> dg.DagsterInstance:
        """The deployment's instance, read from this process (run records, event logs)."""
        return dg.DagsterInstance.from_config(str(self.home))

    def wait_for(self, what: str, predicate: Callable[[], Any], timeout_s: float, poll_s: float = 0.5) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                raise DeploymentError(f"a deployment process exited while waiting for {what}\n{self.log_tail()}")
            value = predicate()
            if value:
                return value
            time.sleep(poll_s)
        raise DeploymentError(f"timed out after {timeout_s}s waiting for {what}\n{self.log_tail()}")


@dataclass(frozen=True)
class Gates:
    """The test's side of `atlasmart_assets.failpoints.gate`: which runs are held at a step, and opening them.

    With ATLASMART_GATE_DIR set, every asset step of every run waits at its start until its run or its step is
    opened, so a test decides which runs are in progress at once instead of hoping they overlap."""

    directory: Path
    points: tuple[str, ...] = ("raw__order_lines", "correction", "window_flagged")

    def env(self, timeout_s: float = 900) -> dict[str, str]:
        self.directory.mkdir(parents=True, exist_ok=True)
        # The catch-up sensor would add a newest-day run that the gate holds: these tests launch it themselves.
        return {"ATLASMART_GATE_DIR": str(self.directory), "ATLASMART_GATE_TIMEOUT_S": str(timeout_s),
                "ATLASMART_CATCH_UP": "off"}

    def arrived(self, run_id: str) -> bool:
        return any(self.directory.glob(f"{run_id}.*.arrived"))

    def open_run(self, *run_ids: str) -> None:
        for run_id in run_ids:
            (self.directory / f"{run_id}.open").touch()

    def open_all(self) -> None:
        for point in self.points:
            (self.directory / f"{point}.open").touch()

    def opened_at(self, run_id: str) -> float | None:
        """When the run's first step passed the gate (epoch seconds), if it did."""
        passed = [p.stat().st_mtime for p in self.directory.glob(f"{run_id}.*.passed")]
        return min(passed, default=None)


def max_concurrent(records: Sequence[dg.RunRecord]) -> int:
    """Most runs in progress at one instant, from run start/end timestamps (an end frees before a start takes)."""
    events = sorted([(r.start_time, 1) for r in records if r.start_time is not None]
                    + [(r.end_time, -1) for r in records if r.end_time is not None])
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def runs(instance: dg.DagsterInstance, tags: Mapping[str, str] | None = None) -> list[dg.RunRecord]:
    return list(instance.get_run_records(dg.RunsFilter(tags=dict(tags)) if tags else None))


def backfill_runs(instance: dg.DagsterInstance, backfill_id: str) -> list[dg.RunRecord]:
    return runs(instance, {"dagster/backfill": backfill_id})


def finished(records: Sequence[dg.RunRecord]) -> bool:
    return bool(records) and all(r.dagster_run.status.value in FINISHED for r in records)


def wait_runs_finished(dep: Deployment, run_ids: Sequence[str], timeout_s: float) -> list[dg.RunRecord]:
    with dep.instance() as instance:
        def done() -> list[dg.RunRecord] | None:
            records = list(instance.get_run_records(dg.RunsFilter(run_ids=list(run_ids))))
            return records if len(records) == len(run_ids) and finished(records) else None
        return dep.wait_for(f"runs {list(run_ids)} to finish", done, timeout_s)


def wait_backfill_run(dep: Deployment, backfill_id: str, timeout_s: float) -> str:
    """The id of the one run the (single-run) backfill created, once the backfill daemon created it."""
    with dep.instance() as instance:
        records = dep.wait_for(f"backfill {backfill_id} to create its run",
                               lambda: backfill_runs(instance, backfill_id), timeout_s)
    [record] = records
    return record.dagster_run.run_id


def wait_backfill_runs(dep: Deployment, backfill_id: str, status: set[str], timeout_s: float) -> list[dg.RunRecord]:
    """Until the backfill has runs and all are in `status` (e.g. {"STARTED"} or FINISHED)."""
    with dep.instance() as instance:
        def ready() -> list[dg.RunRecord] | None:
            records = backfill_runs(instance, backfill_id)
            return records if records and all(r.dagster_run.status.value in status for r in records) else None
        return dep.wait_for(f"backfill {backfill_id} runs in {status}", ready, timeout_s)


@dataclass(frozen=True)
class Hold:
    """One continuous hold of a file's POSIX lock by one process (epoch seconds, +- the poll interval)."""

    pid: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class LockWatcher:
    """Who holds the warehouse's DuckDB lock and for how long, seen from outside through /proc/locks (Linux).

    Reading /proc/locks takes no lock, so the watcher does not perturb the runs it measures.
    """

    def __init__(self, path: Path, poll_s: float = 0.01) -> None:
        self.path, self.poll_s = path, poll_s
        self.holds: list[Hold] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _holders(self, inode: int) -> set[int]:
        suffix = f":{inode}"
        return {int(f[4]) for f in (line.split() for line in Path("/proc/locks").read_text().splitlines())
                if len(f) > 5 and f[1] == "POSIX" and f[5].endswith(suffix)}

    def _watch(self) -> None:
        inode = self.path.stat().st_ino
        since: dict[int, float] = {}
        while not self._stop.is_set():
            now, holders = time.time(), self._holders(inode)
            for pid in set(since) - holders:
                self.holds.append(Hold(pid, since.pop(pid), now))
            for pid in holders - set(since):
                since[pid] = now
            time.sleep(self.poll_s)
        self.holds += [Hold(pid, start, time.time()) for pid, start in since.items()]

    def __enter__(self) -> "LockWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_pids(instance: dg.DagsterInstance, run_id: str) -> set[int]:
    """The processes that executed a run's steps (from its event log)."""
    return {e.dagster_event.pid for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)
            if e.dagster_event and e.dagster_event.pid}


def sensor_ticks(instance: dg.DagsterInstance, name: str) -> list[Any]:
    """Every recorded tick of the sensor `name` (newest first); none before its first tick."""
    from dagster._core.scheduler.instigation import InstigatorType  # internal: the one way to a sensor's ticks

    states = [s for s in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
              if s.instigator_name == name]
    return [t for s in states for t in instance.get_ticks(s.instigator_origin_id, s.selector_id, limit=500)]


def wait_sensor_ticks(dep: Deployment, name: str, after: float, count: int, timeout_s: float) -> list[Any]:
    """Until the sensor has completed `count` ticks that started after `after` (epoch seconds)."""
    with dep.instance() as instance:
        def done() -> list[Any] | None:
            ticks = [t for t in sensor_ticks(instance, name)
                     if t.timestamp > after and t.status.value != "STARTED"]
            return ticks if len(ticks) >= count else None
        return dep.wait_for(f"{count} completed tick(s) of {name}", done, timeout_s)


def schedule_hour_away_from_now(now: dt.datetime | None = None) -> int:
    """An hour for the daily schedule 12 hours from now (UTC): its tick then never falls inside a test session. At
    02:00 UTC, the default, a deployment test running across it saw the schedule publish the newest day it had
    to keep unpublished."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return (now.hour + 12) % 24


@contextlib.contextmanager
def deployment(tmp: Path, atlasmart_env: Mapping[str, str], dagster_yaml: str | None = None) -> Iterator[Deployment]:
    """Start webserver + daemon on a fresh DAGSTER_HOME holding the repo's dagster.yaml (or `dagster_yaml`, for a
    deployment configured differently on purpose); always torn down."""
    home = tmp / "dagster_home"
    logs = tmp / "logs"
    home.mkdir(parents=True)
    logs.mkdir(parents=True)
    if dagster_yaml is None:
        shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    else:
        (home / "dagster.yaml").write_text(dagster_yaml)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ATLASMART_", "DAGSTER_"))}
    env["ATLASMART_SCHEDULE_HOUR"] = str(schedule_hour_away_from_now())
    env.update(atlasmart_env)
    env["DAGSTER_HOME"] = str(home)
    dep = Deployment(home=home, env=env, port=free_port(), logs=logs)
    try:
        yield dep.start()
    finally:
        dep.stop()


CATCH_UP_SENSOR = "atlasmart_newest_partition_catch_up"


def wait_catch_up(dep: Deployment, partition: str, timeout_s: float = 150) -> str:
    """The run the catch-up sensor launches for the newest partition on a fresh deployment (the test launches
    nothing); returns its run id once it exists."""
    with dep.instance() as instance:
        def launched() -> str | None:
            found = runs(instance, {"dagster/sensor_name": CATCH_UP_SENSOR, "dagster/partition": partition})
            return found[0].dagster_run.run_id if found else None
        return dep.wait_for(f"the catch-up run of {partition}", launched, timeout_s)
