"""What a run writes to the event log stays small and per partition; long steps log progress; a backfill takes
every core only while the current lane is idle."""

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

import dagster as dg
import duckdb
import pytest

from atlasmart_assets import capacity, generate, pausable
from atlasmart_assets.assets.common import controls_md
from atlasmart_assets.change_chart import MAX_CHART_BYTES
from atlasmart_assets.contract import CURRENT_LANE_TAGS
from atlasmart_assets.lab import run_chain
from atlasmart_assets.progress import Progress
from atlasmart_assets.warehouse.connection import PREEMPT_BUSY_POLL_S, LockStats, open_file, preemptible_hold
from atlasmart_assets.window import Window
from atlasmart_tests.current_runs import running_current_run, until_written
from atlasmart_tests.waiters import StandingWaiter

HISTORY = ("2026-09-01", "2026-09-19")


# What is the run's, not a day's: written once per asset, on the newest day's event.
RUN_WIDE = {"window", "publication_id", "change_notice", "change_chart", "code_version", "backfill_id",
            "changed_partitions", "lock_hold_max_s", "lock_hold_total_s", "cpu_niceness", "cores_yielded_s",
            "scratch_paused_s"}


def test_each_partition_carries_its_own_figures_and_no_event_is_large(env, instance) -> None:
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-meta"})
    assert result.success
    records = instance.fetch_materializations(dg.AssetKey(["fact", "fct_order_lines"]), limit=100).records
    by_day = {r.partition_key: r.asset_materialization.metadata for r in records}
    assert len(by_day) == 19
    rows = {d: m["dagster/row_count"].value for d, m in by_day.items()}
    manifests = {d: json.loads((env.raw_dir / f"partition={d}.json").read_text())["manifest"]["controls"]["lines"]
                 for d in rows}
    assert rows == manifests, "each day's own row count, not the run's total"
    # The run's own figures are written once per asset, on the newest day's event, not copied into every day's.
    for key in (["raw", "order_lines"], ["staged", "order_lines"], ["fact", "fct_order_lines"], ["mart", "revenue_daily"]):
        events = instance.fetch_materializations(dg.AssetKey(key), limit=100).records
        carrying = sorted(r.partition_key for r in events if "window" in r.asset_materialization.metadata
                          and r.run_id == result.run_id)
        assert carrying == [HISTORY[1]], (key, carrying)
        newest = next(r for r in events if r.partition_key == HISTORY[1]).asset_materialization.metadata
        assert newest["window"].value == f"{HISTORY[0]}..{HISTORY[1]}" and "lock_hold_max_s" in newest
        # The backfill's scratch work ran 10 steps lower in CPU priority than the run's own thread.
        assert newest["cpu_niceness"].value == capacity.niceness_of(10), key
        repeated = {r.partition_key: sorted(RUN_WIDE & set(r.asset_materialization.metadata)) for r in events
                    if r.run_id == result.run_id and r.partition_key != HISTORY[1]}
        assert len(repeated) == 18 and not any(repeated.values()), (key, repeated)
    sizes = [len(e.to_json()) if hasattr(e, "to_json") else len(str(e)) for e in instance.all_logs(result.run_id)]
    assert max(sizes) < 64 * 1024, max(sizes)
    logs = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    assert any("[4/5] publish" in m and "so far" in m for m in logs), "the correction logs its phases"
    # The step is not said to be done while Dagster still writes its events: the last line comes after them.
    lines = _progress_lines(instance, result.run_id, "correction")
    assert not any(line.endswith(", done") for line in lines[:-1]), lines
    assert "[5/5] events: 57 partition materializations (19 day(s) x 3 assets)" in lines[-1], lines[-1]
    assert lines[-1].endswith(", done"), lines[-1]
    last_materialization = max(e.timestamp for e in instance.all_logs(result.run_id)
                               if e.dagster_event and e.dagster_event.event_type_value == "ASSET_MATERIALIZATION"
                               and e.dagster_event.step_key == "correction")
    done_at = next(e.timestamp for e in instance.all_logs(result.run_id) if e.user_message == lines[-1])
    assert done_at >= last_materialization, "logged once every materialization of the step was written"
    checks = _progress_lines(instance, result.run_id, "published checks")
    assert [line.split("] ")[1].split(":")[0] for line in checks] == ["read", "events"], checks
    assert "19 published day(s) of 19 read for 2 check(s), 0 failing" in checks[0] and \
        checks[-1].endswith(", done"), checks


def _progress_lines(instance: dg.DagsterInstance, run_id: str, what: str) -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id)
            if not e.dagster_event and e.user_message.startswith(what) and " so far, " in e.user_message]


@pytest.mark.parametrize("target, name, step, phase", [
    ("atlasmart_assets.candidates.build", "build", "correction", "[2/5] build"),
    ("atlasmart_assets.correction.audit", "audit", "correction", "[3/5] audit"),
    ("atlasmart_assets.raw_load._append", "append", "raw", "[3/4] append"),
    ("atlasmart_assets.assets.day_metadata.fact", "metadata", "correction", "[5/5] events"),
])
def test_a_step_stopped_by_an_error_in_any_phase_ends_its_log_there(env, instance, monkeypatch, target: str,
                                                                     name: str, step: str, phase: str) -> None:
    """An error (a DuckDB failure, say) in any phase, not only the publish: the step's last progress line names the
    phase it stopped in and the error, and ends with `ended`, not with an estimate of work that will not happen."""
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"simulated failure in {name}")

    monkeypatch.setattr(target, fail)
    result = run_chain(instance, *HISTORY, {"dagster/backfill": f"bf-stop-{name}"})
    assert not result.success
    lines = _progress_lines(instance, result.run_id, step)
    assert lines, "the step logged its phases"
    assert f"{phase}: stopped by RuntimeError: simulated failure in {name}" in lines[-1], lines[-1]
    assert lines[-1].endswith("ended"), lines[-1]


def test_a_correction_refused_by_its_reference_data_says_so_in_its_log(env, instance) -> None:
    (env.raw_dir / "deletions").mkdir()
    (env.raw_dir / "deletions" / "DR-9.json").write_text(json.dumps({"request_id": "DR-9", "requested_at": "x"}))
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-ref"})
    assert not result.success
    lines = _progress_lines(instance, result.run_id, "correction")
    assert len(lines) == 1 and "[1/5] read: refused by " in lines[0] and lines[0].endswith("ended"), lines


def test_progress_estimates_what_remains() -> None:
    lines: list[str] = []
    progress = Progress(lines.append, "job", (("a", 1.0), ("b", 3.0)))
    progress.done("a", "10 rows")
    progress.part("b", 0.5, "chunk 1/2")
    progress.done("b", "done it")
    assert lines[0].startswith("job [1/2] a: 10 rows;") and "to go" in lines[0]
    assert lines[1].startswith("job [2/2] b: chunk 1/2;") and "to go" in lines[1]
    assert lines[2].startswith("job [2/2] b: done it;") and lines[2].endswith("done")


def test_progress_within_a_phase_estimates_less_as_it_goes(monkeypatch) -> None:
    clock = iter([0.0, 10.0, 20.0, 30.0])
    monkeypatch.setattr("atlasmart_assets.progress.time.monotonic", lambda: next(clock))
    lines: list[str] = []
    progress = Progress(lines.append, "job", (("a", 1.0), ("b", 1.0)))
    progress.done("a", "x")              # 10 s for half the work: about 10 s to go
    progress.part("b", 0.5, "half of b")  # 20 s for three quarters: about 7 s to go
    progress.end("b", "refused")
    assert lines[0].endswith("10.0 s so far, about 10 s to go")
    assert lines[1].endswith("20.0 s so far, about 7 s to go")
    assert lines[2].endswith("30.0 s so far, ended"), "a refusal estimates nothing"


def test_progress_expects_only_the_work_a_run_has_ahead(monkeypatch) -> None:
    """A phase with less ahead than a typical run's (a re-publish's append of no batch) weighs less in the
    estimate; with none ahead, the phase before it ends the estimate."""
    clock = iter([0.0, 10.0, 20.0, 30.0])
    monkeypatch.setattr("atlasmart_assets.progress.time.monotonic", lambda: next(clock))
    lines: list[str] = []
    progress = Progress(lines.append, "job", (("a", 1.0), ("b", 1.0), ("c", 2.0)))
    progress.expect("c", 0.5)
    progress.done("a", "x")   # 10 s for a third of what is ahead (1 of 1 + 1 + 1): about 20 s to go
    progress.expect("c", 0.0)
    progress.done("b", "y")   # nothing of c is ahead: done
    assert lines[0].endswith("10.0 s so far, about 20 s to go"), lines[0]
    assert lines[1].endswith("20.0 s so far, done"), lines[1]


def test_progress_expectations_replace_each_other_and_a_finished_step_is_done(monkeypatch) -> None:
    clock = iter([0.0, 10.0, 20.0])
    monkeypatch.setattr("atlasmart_assets.progress.time.monotonic", lambda: next(clock))
    lines: list[str] = []
    # Shares whose sum depends on the order they are added in (0.9999999999999999 or 1.0).
    progress = Progress(lines.append, "job", (("build", 0.3), ("audit", 0.15), ("publish", 0.45), ("read", 0.1)))
    progress.expect("publish", 0.5)
    progress.expect("publish", 0.5)  # half of a typical publish, not a quarter
    progress.done("build", "x")      # 10 s for 0.3 of 0.775: about 16 s to go
    progress.finished("audit", "publish")
    progress.done("read", "y")
    assert lines[0].endswith("10.0 s so far, about 16 s to go"), lines[0]
    assert lines[1].endswith("20.0 s so far, done"), lines[1]


PROGRESS_UNDER_A_SEED = """
import itertools, sys
from atlasmart_assets import progress as module
clock = itertools.count(0.0, 10.0)
module.time.monotonic = lambda: next(clock)
lines = []
# Shares whose sums differ in the last bit with the order they are added in.
p = module.Progress(lines.append, "job", (("build", 0.3), ("audit", 0.15), ("check", 0.07), ("publish", 0.6),
                                          ("read", 0.45)))
p.finished("check", "audit", "build")
p.done("publish", "x")
finished_share = repr(p._done)
p.part("read", 1.0, "last chunk")
print("|".join(lines), finished_share)
"""


def test_progress_reads_the_same_whatever_order_python_keeps_the_finished_phases_in() -> None:
    """The finished phases are a set, whose order follows the string hash seed of the process: the same work done
    sums to the same share and logs the same lines under every seed, and all of it done logs `done`."""
    outputs = {}
    for seed in range(16):
        out = subprocess.run([sys.executable, "-c", PROGRESS_UNDER_A_SEED], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "PYTHONHASHSEED": str(seed)})
        assert out.returncode == 0, out.stderr
        outputs[seed] = out.stdout.strip()
    assert len(set(outputs.values())) == 1, outputs
    logged, _ = outputs[0].rsplit(" ", 1)
    assert logged.endswith(", done"), logged


def test_without_per_thread_cpu_sets_a_backfill_step_caps_its_threads_when_it_starts(instance, monkeypatch) -> None:
    monkeypatch.setattr(capacity, "PINS", False)
    assert capacity.backfill_threads(instance, 1) is None, "idle current lane: every core"
    run = instance.create_run_for_job(dg.GraphDefinition("noop").to_job(), tags=CURRENT_LANE_TAGS)
    assert run.status == dg.DagsterRunStatus.NOT_STARTED
    assert capacity.current_lane_active(instance), "a current-lane run not yet finished"
    # A record never launched holds nobody up (a review found it capping every later backfill step).
    assert capacity.backfill_threads(instance, 1) is None
    running = running_current_run(instance)
    assert capacity.backfill_threads(instance, 1) == 1
    assert capacity.backfill_threads(instance, 1, own=running.run_id) is None, "a run is never its own today's load"


def test_a_backfill_given_the_lane_tag_is_not_todays_load(instance) -> None:
    """The UI lets an operator add any tag to a backfill: one carrying atlasmart/lane=current is still a backfill
    (scope.lane_of). Queued behind the running one, it held that one up before every hold; running, it waited for
    itself (a review's cases)."""
    instance.add_run(dg.DagsterRun(job_name="atlasmart_daily", run_id=str(uuid.uuid4()),
                                   status=dg.DagsterRunStatus.STARTED,
                                   tags={**CURRENT_LANE_TAGS, "dagster/backfill": "bf-tagged"}))
    assert not capacity.current_lane_active(instance, capacity.RUNNING)
    started = time.monotonic()
    assert capacity.GiveWay(instance, max_s=30)() < 1 and time.monotonic() - started < 10
    today = running_current_run(instance)
    assert capacity.current_lane_active(instance, capacity.RUNNING), "today's load beside it still counts"
    assert not capacity.current_lane_active(instance, capacity.RUNNING, own=today.run_id)


def test_with_per_thread_cpu_sets_a_backfill_step_keeps_every_duckdb_thread(instance, monkeypatch) -> None:
    """yield_cores takes the cores away while a current run runs, and gives them back: a cap decided at the step's
    start would hold for the whole step."""
    monkeypatch.setattr(capacity, "can_pin", lambda: True)
    monkeypatch.setattr(capacity.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    running_current_run(instance)
    assert capacity.backfill_threads(instance, 1) is None


def test_a_backfill_waits_to_take_the_warehouse_while_a_current_lane_run_runs(instance) -> None:
    wait = capacity.GiveWay(instance, max_s=120)
    assert wait() < 1, "no current-lane run: no wait"
    run = running_current_run(instance)
    ender = threading.Timer(0.5, lambda: until_written(lambda: instance.report_run_failed(run)))
    ender.start()
    waited = wait()
    ender.join()
    assert instance.get_run_by_id(run.run_id).is_finished, "it went on only once today's run had ended"
    assert 0.4 < waited < 60, waited


def test_a_run_storage_unreadable_for_a_moment_does_not_fail_the_backfill(instance, monkeypatch) -> None:
    """SQLite answers 'database table is locked' while another thread writes (seen in CI on the in-memory
    instance): giving way asks again instead of failing the backfill's step."""
    answers = iter([OSError("database table is locked: runs"), True, False])

    def flaky(_instance, _statuses=None, _own=None) -> bool:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(capacity, "current_lane_active", flaky)
    waited = capacity.GiveWay(instance, max_s=30)()
    assert 2 * capacity.POLL_S <= waited < 30, waited
    assert next(answers, "all asked") == "all asked"


def test_a_backfill_gives_way_for_a_bounded_time_only(instance) -> None:
    # A run record created but never launched stays NOT_STARTED for ever: it holds nobody up.
    instance.add_run(dg.DagsterRun(job_name="atlasmart_daily", run_id=str(uuid.uuid4()),
                                   status=dg.DagsterRunStatus.NOT_STARTED, tags=CURRENT_LANE_TAGS))
    assert capacity.GiveWay(instance, max_s=120)() < 1
    running_current_run(instance)  # never ends
    waited = capacity.GiveWay(instance, max_s=0.3)()
    assert 0.3 <= waited < 30, waited


def _chunk_beside_todays_load(instance: dg.DagsterInstance, warehouse: Path, start_run: bool,
                              ) -> tuple[list[int], LockStats, list[bool]]:
    """A backfill's chunk (preemptible_hold with the backfill's GiveWay) whose first attempt inserts rows, then
    either starts today's load (a current-lane run, ended 1 s later by another thread) and runs a statement that
    never ends on its own, or just works for a second. Returns the attempts, the lock figures, and whether the
    statement was interrupted."""
    stats, attempts, interrupted = LockStats(), [], []

    def chunk(con: duckdb.DuckDBPyConnection) -> None:
        attempts.append(len(attempts) + 1)
        con.execute("create table if not exists t (x bigint)")
        con.execute(f"insert into t select range from range({10 * len(attempts)})")
        if len(attempts) > 1:
            return
        if not start_run:
            time.sleep(4 * PREEMPT_BUSY_POLL_S)
            return
        run = running_current_run(instance)
        threading.Timer(1.0, lambda: until_written(lambda: instance.report_run_failed(run))).start()
        deadline = threading.Timer(120, con.interrupt)  # only if nothing gives the chunk up
        deadline.start()
        try:
            con.execute("select sum(range) from range(10000000000000)").fetchall()
        except duckdb.InterruptException:
            interrupted.append(deadline.is_alive())
            raise
        finally:
            deadline.cancel()

    preemptible_hold(lambda: open_file(warehouse, read_only=False, config={}, timeout_s=10), warehouse, chunk,
                     stats, capacity.GiveWay(instance, max_s=30))
    return attempts, stats, interrupted


def test_a_chunk_under_way_is_given_up_when_todays_load_starts(instance, tmp_path) -> None:
    """Today's load starting (no lock wanted yet: its scratch work comes first) interrupts the backfill's chunk at
    once, which rolls back, waits until today's run has ended, and is written again: the cores are today's."""
    warehouse = tmp_path / "w.duckdb"
    attempts, stats, interrupted = _chunk_beside_todays_load(instance, warehouse, start_run=True)
    assert interrupted == [True], "today's load starting interrupted the chunk, not the test's deadline"
    assert attempts == [1, 2] and stats.preempted == 1, (attempts, stats)
    assert 0.5 < stats.gave_way[0] < 30, "the chunk started again only once today's run had ended"
    with open_file(warehouse, read_only=True, config={}, timeout_s=10) as con:
        assert con.execute("select count(*) from t").fetchone() == (20,), "only the last attempt's rows"


def test_a_chunk_is_not_given_up_for_a_current_run_it_began_beside(instance, tmp_path) -> None:
    """A current-lane run already running when the chunk began (the backfill gave way to it as long as it may) does
    not give the chunk up: it would only be given up again and again beside a long run."""
    running_current_run(instance)
    attempts, stats, _ = _chunk_beside_todays_load(instance, tmp_path / "w.duckdb", start_run=False)
    assert attempts == [1] and stats.preempted == 0, (attempts, stats)


def test_a_run_storage_unreadable_when_a_chunk_begins_gives_it_up_to_no_run(instance, tmp_path,
                                                                            monkeypatch) -> None:
    """Unreadable at the chunk's start counts as a current-lane run already running (the backfill waited for it):
    the chunk is not given up when the storage answers again that one runs."""
    answers = iter([OSError("database table is locked: runs")])

    def flaky(_instance, _statuses=None, _own=None) -> bool:
        answer = next(answers, True)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(capacity, "current_lane_active", flaky)
    attempts, stats, _ = _chunk_beside_todays_load(instance, tmp_path / "w.duckdb", start_run=False)
    assert attempts == [1] and stats.preempted == 0, (attempts, stats)


def _newest_figures(instance: dg.DagsterInstance, key: list[str], run_id: str | None = None) -> dict:
    """The metadata of the one materialization of `key` for HISTORY's newest day (of `run_id`), where a backfill
    over HISTORY writes its run-wide figures."""
    [record] = [r for r in instance.fetch_materializations(dg.AssetKey(key), limit=100).records
                if r.partition_key == HISTORY[1] and run_id in (None, r.run_id)]
    return record.asset_materialization.metadata


def test_a_long_backfill_gives_way_before_each_warehouse_hold(env, instance, monkeypatch) -> None:
    """19 days in chunks of 5: the raw append and the rows written ahead take 4 holds each, then the commit. With
    a current-lane run running throughout, the backfill waits (here up to 0.2 s) before each of them, and still
    publishes."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "5")
    monkeypatch.setenv("ATLASMART_BACKFILL_GIVE_WAY_S", "0.2")
    running_current_run(instance)
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-gives-way"})
    assert result.success
    waited = {}
    for key in (["raw", "order_lines"], ["fact", "fct_order_lines"]):
        waited[key[0]] = _newest_figures(instance, key)["gave_way_total_s"].value
    assert waited["raw"] >= 4 * 0.2 and waited["fact"] >= 5 * 0.2, waited
    # The long phases say how far they got, chunk by chunk, with what remains.
    logs = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    appended = [m for m in logs if "[3/4] append: chunk" in m]
    written = [m for m in logs if "[4/5] publish: chunk" in m and "written ahead" in m]
    assert [m.split("chunk ")[1][:3] for m in appended] == ["1/4", "2/4", "3/4", "4/4"], appended
    # The parse and profile ran in the scratch child: the step still counts them done, so after the last chunk only
    # its events are ahead, and they end it.
    assert appended[-1].endswith("about 0 s to go"), appended[-1]
    raw_events = [m for m in logs if m.startswith("raw ") and "[4/4] events: 19 partition materialization(s)" in m]
    assert raw_events and raw_events[-1].endswith("done"), raw_events
    assert [m.split("chunk ")[1][:3] for m in written] == ["1/4", "2/4", "3/4", "4/4"], written
    assert "(2026-09-01..2026-09-05)" in written[0] and all("to go" in m for m in written), written
    # The profile ran in the paused child process: the step says it, once the child has answered.
    assert any("[2/4] profile:" in m for m in logs), logs
    # Each wait is said as it begins and as it ends, in the step's log: a wait of the default minute would otherwise
    # leave it on a line that reads "about 1 s to go".
    window = f"{HISTORY[0]}..{HISTORY[1]}"
    held = [m for m in logs if m == f"{window}: today's load is queued or running: the next warehouse hold waits "
                                     "until it ends (at most 0.2 s)"]
    went_on = [m for m in logs if m.startswith(f"{window}: the next warehouse hold goes on after 0.")
               and m.endswith(" s: the most it waits; today's load is still queued or running")]
    assert len(held) == len(went_on) >= 4 + 5, (held, went_on)
    if pausable.AVAILABLE:
        for key in (["raw", "order_lines"], ["fact", "fct_order_lines"]):
            assert _newest_figures(instance, key)["scratch_paused_s"].value >= 0.2, key
        paused = [m for m in logs if m == f"{window}: today's load is queued or running: the scratch work stands "
                                          "paused until it ends (at most 0.2 s)"]
        runs = "on 1 core(s) until that ends" if MAY_YIELD_CORES else "beside it"
        resumed = [m for m in logs if m.startswith(f"{window}: the scratch work goes on after 0.") and m.endswith(
            f" s paused: today's load is still queued or running; it runs {runs}")]
        assert len(paused) == len(resumed) >= 2, (paused, resumed)
    if MAY_YIELD_CORES:
        for key in (["raw", "order_lines"], ["fact", "fct_order_lines"]):
            assert _newest_figures(instance, key)["cores_yielded_s"].value > 0, key


def test_a_long_backfill_gives_its_chunks_up_to_processes_waiting_on_the_warehouse(env, instance,
                                                                                monkeypatch) -> None:
    """19 days in chunks of 5, with a process announcing that it waits on the warehouse throughout: every chunk of
    the raw append and of the rows written ahead is given up PREEMPT_MAX times (its transaction rolled back), then
    held to its end; the backfill publishes the same rows as without waiters, raw loaded once."""
    from atlasmart_assets.warehouse import connection

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "5")
    monkeypatch.setattr(connection, "HANDOVER_MAX_S", 0.05)  # the announcer never takes the lock
    path = env.warehouse_path
    waiter = StandingWaiter(path)
    waiter.start()
    try:
        result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-preempted"})
    finally:
        waiter.stop()
    assert result.success
    given_up = {}
    for key in (["raw", "order_lines"], ["fact", "fct_order_lines"]):
        given_up[key[0]] = _newest_figures(instance, key)["holds_given_up"].value
    assert given_up == {"raw": 4 * connection.PREEMPT_MAX, "fact": 4 * connection.PREEMPT_MAX}, given_up
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert con.execute("select (select count(*) from raw.order_lines) = (select sum(records) from raw.batches)"
                           ).fetchone() == (True,), "each batch's lines appended once"
        published = con.execute("select count(*) from staged.order_lines").fetchone()
    finally:
        con.close()
    again = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-unhindered"})
    assert again.success
    _newest_figures(instance, ["mart", "revenue_daily"], again.run_id)  # it published
    con = duckdb.connect(str(path), read_only=True)
    try:
        assert con.execute("select count(*) from staged.order_lines").fetchone() == published
    finally:
        con.close()


def test_a_backfill_of_one_chunk_does_not_wait(env, instance, monkeypatch) -> None:
    """19 days within one chunk (31): one raw append and one publish hold, short ones, like today's: no give-way.
    (Its scratch work still stands paused beside the current run, up to the give-way bound at a time: 1 s here.)"""
    monkeypatch.setenv("ATLASMART_BACKFILL_GIVE_WAY_S", "1")
    running_current_run(instance)
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-one-chunk"})
    assert result.success
    for key in (["raw", "order_lines"], ["fact", "fct_order_lines"]):
        assert _newest_figures(instance, key)["gave_way_total_s"].value == 0, key


MAY_YIELD_CORES = capacity.PINS and len(os.sched_getaffinity(0)) >= 2


def _cpu_sets() -> set[frozenset[int]]:
    """The distinct CPU sets the threads of this process may run on."""
    out = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            out.add(frozenset(os.sched_getaffinity(int(tid))))
        except ProcessLookupError:
            pass
    return out


def _until(what: str, predicate: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what} ({_cpu_sets()})"
        time.sleep(0.05)


@pytest.mark.skipif(not MAY_YIELD_CORES, reason="needs Linux per-thread CPU sets and at least 2 CPUs")
def test_a_backfill_keeps_to_fewer_cores_only_while_a_current_lane_run_runs(instance, tmp_path) -> None:
    """Every thread of the backfill's process (DuckDB's workers, started before or during) keeps to one CPU while
    a current-lane run runs, and gets every CPU back once it has ended, and on exit."""
    allowed = frozenset(os.sched_getaffinity(0))
    with capacity.yield_cores(instance, 1) as cores:
        con = duckdb.connect(str(tmp_path / "w.duckdb"), config={"threads": "2"})
        for _ in range(4):  # the current lane idle: nothing is taken away (several watches)
            assert _cpu_sets() == {allowed}
            time.sleep(capacity.WATCH_S / 2)
        run = running_current_run(instance)
        _until("every thread on one CPU", lambda: {len(c) for c in _cpu_sets()} == {1})
        later = duckdb.connect(str(tmp_path / "later.duckdb"), config={"threads": "2"})
        later.execute("select sum(range) from range(1000000)").fetchall()
        _until("threads started meanwhile on one CPU too", lambda: {len(c) for c in _cpu_sets()} == {1})
        instance.report_run_failed(run)
        _until("every CPU back once the current run ended", lambda: _cpu_sets() == {allowed})
        con.execute("select sum(range) from range(1000000)").fetchall()
        later.close()
        con.close()
    assert _cpu_sets() == {allowed}
    assert cores.times == 1 and cores.yielded_s > 0, (cores.times, cores.yielded_s)


def test_today_s_load_never_gives_up_cores(env, instance) -> None:
    """Beside another current-lane run in flight, today's own run keeps every core: its steps yield nothing (were
    it wired as a backfill, it would keep to one core while that other run is STARTED)."""
    running_current_run(instance)
    result = run_chain(instance, "2026-09-21", tags=dict(CURRENT_LANE_TAGS))
    assert result.success
    for key in (["raw", "order_lines"], ["fact", "fct_order_lines"]):
        [record] = [r for r in instance.fetch_materializations(dg.AssetKey(key), limit=10).records
                    if r.run_id == result.run_id]
        assert record.asset_materialization.metadata["cores_yielded_s"].value == 0, key


def _niceness(tid: int) -> int:
    """A thread's niceness, from /proc (field 19 of its stat, after the command name in parentheses)."""
    stat = Path(f"/proc/self/task/{tid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[16])


@pytest.mark.skipif(not capacity.LOWERS, reason="per-thread niceness is Linux's")
def test_a_backfills_scratch_work_and_the_duckdb_threads_it_starts_run_at_lower_cpu_priority(tmp_path) -> None:
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    seen: dict[str, object] = {}

    def work() -> str:
        seen["thread"] = os.getpriority(os.PRIO_PROCESS, 0)
        before = {int(t) for t in os.listdir("/proc/self/task")}
        con = duckdb.connect(str(tmp_path / "w.duckdb"), config={"threads": "2"})
        con.execute("select sum(range) from range(10000000)").fetchall()
        seen["duckdb"] = {_niceness(t) for t in {int(t) for t in os.listdir("/proc/self/task")} - before}
        con.close()
        return "done"

    assert capacity.run_lowered(10, work) == "done"
    assert seen["thread"] == capacity.niceness_of(10) == min(caller + 10, 19)
    assert seen["duckdb"] == {min(caller + 10, 19)}, "DuckDB's worker threads inherit the lowered priority"
    assert os.getpriority(os.PRIO_PROCESS, 0) == caller, "the caller's priority never changes"
    with pytest.raises(ZeroDivisionError):
        capacity.run_lowered(10, lambda: 1 / 0)
    assert capacity.run_lowered(0, lambda: os.getpriority(os.PRIO_PROCESS, 0)) == caller, "the current lane's"


YEAR_EVENT_LOG_BUDGET = 5_000_000  # bytes a 365-day backfill may write to the event log (issue 15)


def _run_bytes(instance: dg.DagsterInstance, run_id: str) -> int:
    """Bytes of the run's events in the event log, as Dagster serializes them, but its change chart: the chart is
    drawn once per run, larger for more days up to its cap, which the projections add instead."""
    total = 0
    for entry in instance.all_logs(run_id):
        total += len(dg.serialize_value(entry))
        chart = entry.asset_materialization.metadata.get("change_chart") if entry.asset_materialization else None
        if chart is not None:
            total -= len(chart.value)
    return total


def _year_projection(instance: dg.DagsterInstance, label: str, short: tuple[str, str], long: tuple[str, str]
                     ) -> tuple[float, float, list[str]]:
    """Re-publishes of `short` then `long` (backfills): the cost of a day of events, and the year it projects to
    (365 days, with the largest chart added: unchanged days draw none). Returns the runs' ids too."""
    runs = [run_chain(instance, *window, {"dagster/backfill": f"bf-{label}-{k}"}) for k, window in enumerate((short, long))]
    assert all(r.success for r in runs)
    days = [len(Window.of(*window).keys) for window in (short, long)]
    sizes = [_run_bytes(instance, r.run_id) for r in runs]
    per_day = (sizes[1] - sizes[0]) / (days[1] - days[0])
    projected = sizes[1] + (365 - days[1]) * per_day + MAX_CHART_BYTES
    print(f"\n{label}: {days[0]} days {sizes[0]:,} B, {days[1]} days {sizes[1]:,} B: {per_day:,.0f} B a day -> 365 days "
          f"{projected:,.0f} B")
    return per_day, projected, [r.run_id for r in runs]


def test_a_years_backfill_fits_the_event_log_budget(env, instance, published) -> None:
    """Every day costs the same few events, and the check results grow by a line a day; the run-wide figures and
    the chart are paid once. Re-publishes of 5 and of 19 days give the cost per day, with the check results'
    growth in it; projected to 365 days, with the largest chart added (unchanged days draw none): ≤ 5 MB."""
    published((*HISTORY, {"dagster/backfill": "bf-first"}))
    per_day, projected, _ = _year_projection(instance, "unchanged", (HISTORY[0], "2026-09-05"), HISTORY)
    assert per_day > 0 and projected <= YEAR_EVENT_LOG_BUDGET, (per_day, projected)


def test_a_year_in_which_every_day_changed_fits_the_event_log_budget(env, instance, published) -> None:
    """The larger case: every day has a late batch (a new line, a restated price, a retraction), so each day's
    events carry two batches, the controls before and after, and the sha256 it had; the chart is drawn. Cost per
    day from re-publishes of 5 and 14 changed days, projected to 365 days with the chart at its cap: ≤ 5 MB."""
    published((*HISTORY, {"dagster/backfill": "bf-first"}))
    first = dt.date.fromisoformat(HISTORY[0])
    for k in range(19):
        day = first + dt.timedelta(days=k)
        generate.late_delta(env.raw_dir, day, f"B-{day.isoformat()}-02")
    per_day, projected, run_ids = _year_projection(instance, "changed", (HISTORY[0], "2026-09-05"),
                                                   ("2026-09-06", HISTORY[1]))
    changed = [r.asset_materialization.metadata["changed"].value
               for r in instance.fetch_materializations(dg.AssetKey(["fact", "fct_order_lines"]), limit=100).records
               if r.run_id in run_ids]
    assert len(changed) == 19 and all(changed), "every day of both re-publishes changed"
    assert per_day > 0 and projected <= YEAR_EVENT_LOG_BUDGET, (per_day, projected)


def test_a_year_of_days_with_many_long_named_batches_fits_the_event_log_budget(env, instance, published) -> None:
    """Hourly deltas with ids as long as a batch name may be (128 characters), on every day: each day's raw event
    lists its first batch and its latest ones around a count, each id cut; the controls before and after, the sha256
    it had, the chart. Cost per day from re-publishes of 5 and 14 such days, projected to 365 days: ≤ 5 MB."""
    published((*HISTORY, {"dagster/backfill": "bf-first"}))
    first = dt.date.fromisoformat(HISTORY[0])
    for k in range(19):
        day = first + dt.timedelta(days=k)
        for j in range(8):
            generate.late_delta(env.raw_dir, day, f"B-{day.isoformat()}-{j + 2:02d}-" + "x" * 112, seed=j)
    per_day, projected, _ = _year_projection(instance, "many-batches", (HISTORY[0], "2026-09-05"),
                                             ("2026-09-06", HISTORY[1]))
    assert per_day > 0 and projected <= YEAR_EVENT_LOG_BUDGET, (per_day, projected)


def test_a_day_of_many_batches_costs_its_event_no_more_than_a_day_of_five(env, instance, published) -> None:
    """A day may receive hundreds of batches (hourly deltas): its raw event lists the first and the latest two,
    with how many it leaves out, so its size does not grow with the batch count. Days of 3 and of 40 batches,
    loaded in one run, are compared."""
    published((*HISTORY, {"dagster/backfill": "bf-first"}))
    few, many, long_ids = dt.date(2026, 9, 3), dt.date(2026, 9, 4), dt.date(2026, 9, 5)
    for day, later in ((few, 2), (many, 39)):
        for k in range(later):
            generate.late_delta(env.raw_dir, day, f"B-{day.isoformat()}-{k + 2:02d}", seed=k)
    for k in range(4):  # batch ids as long as a batch name may be (128 characters)
        generate.late_delta(env.raw_dir, long_ids, f"B-{long_ids.isoformat()}-{k + 2:02d}-" + "x" * 112, seed=k)
    result = run_chain(instance, few.isoformat(), long_ids.isoformat(), {"dagster/backfill": "bf-many"})
    assert result.success
    events = {e.asset_materialization.partition: e for e in instance.all_logs(result.run_id)
              if e.asset_materialization and e.asset_materialization.asset_key == dg.AssetKey(["raw", "order_lines"])}
    shown = {day: events[day].asset_materialization.metadata["batches"].value for day in events}
    many_md = shown[many.isoformat()]
    assert many_md.count("\n- `") == 2 and "- … 37 more batch(es), every one in raw.batches" in many_md, many_md
    assert f"`B-{many.isoformat()}-01`" in many_md and f"`B-{many.isoformat()}-40`" in many_md, many_md
    assert f"`B-{many.isoformat()}-38`" not in many_md, "the batches left out are not listed"
    assert shown[few.isoformat()].count("- `") == 3 and "more batch" not in shown[few.isoformat()]
    # The newest day also carries the run's own figures: compare the days' batch lists and their events without them.
    size = {day: len(dg.serialize_value(e)) for day, e in events.items()}
    assert size[few.isoformat()] < 8 * 1024, size
    assert abs(len(many_md) - len(shown[few.isoformat()])) < 100, (len(many_md), len(shown[few.isoformat()]))
    long_md = shown[long_ids.isoformat()]
    assert long_md.count("x" * 10 + "…" + "x" * 13 + "`") == 2, "each long id is shown cut, whole in raw.batches"
    assert all(f"`B-{long_ids.isoformat()}-{k:02d}-x" in long_md for k in (4, 5)), "its start tells them apart"
    assert len(long_md) - len(shown[few.isoformat()]) <= 2 * 25 + 60, (len(long_md), len(shown[few.isoformat()]))


def test_a_days_controls_read_as_a_small_markdown_table() -> None:
    changed = controls_md([10, 4, 12, 690, 400.5, 289.5], [10, 4, 12, 700, 400.5, 299.5], "ab" * 32).value
    assert "| gmv | 690 | 700 | +10 |" in changed and "| lines | 10 | 10 | ±0 |" in changed
    assert "| gross_profit | 289.5 | 299.5 | +10 |" in changed and f"sha256 before: `{'ab' * 32}`" in changed
    first = controls_md(None, [10, 4, 12, 690, 400.5, 289.5]).value
    assert "| cost | — | 400.5 | new |" in first and "sha256 before" not in first
    assert len(changed) < 400, "a day's controls stay small: a year's backfill writes 365 of them"


def test_long_batch_ids_that_differ_only_at_their_end_are_shown_apart() -> None:
    from atlasmart_assets.assets.raw import SHOWN_ID_CHARS, _shown_id

    hourly = ["extract-" + "y" * 60 + f"-T{h:02d}" for h in (1, 2)]
    shown = [_shown_id(b) for b in hourly]
    assert shown[0] != shown[1] and all(len(s) == SHOWN_ID_CHARS for s in shown), shown
    assert _shown_id("B-2026-09-18-02") == "B-2026-09-18-02", "a short id is shown whole"


def test_an_extraction_time_is_shown_to_the_second_whichever_fraction_mark_it_uses() -> None:
    """ISO 8601 writes a fraction of a second with a point or a comma (Python reads both): either is left out of a
    day's event, whatever its digits, and the offset stays."""
    from atlasmart_assets.assets.raw import shown_time

    digits = "1" * 40
    assert shown_time(f"2025-09-23T01:00:00.{digits}+00:00") == "2025-09-23T01:00:00+00:00"
    assert shown_time(f"2025-09-23T01:00:00,{digits}+02:00") == "2025-09-23T01:00:00+02:00"
    assert shown_time(f"2025-09-23T01:00:00,{digits}Z") == "2025-09-23T01:00:00Z"
    assert shown_time("2025-09-23T01:00:00+00:00") == "2025-09-23T01:00:00+00:00", "no fraction: unchanged"


def test_progress_sized_to_a_light_window_weighs_its_per_day_work_as_it_costs(monkeypatch) -> None:
    """A phase's cost has a part per day (events, each chunk's hold) and a part per line (parse, build): on a year
    of light days the estimate after the per-line work weighs the per-day work that follows as it costs there, not
    at the bench year's share (such a year read "about 1 s to go" with 5 s ahead)."""
    from atlasmart_assets.progress import TYPICAL_DAYS, TYPICAL_LINES, Cost

    phases = (("build", Cost(0.0, 0.0, 1.0)), ("events", Cost(0.0, 0.01)))
    clock = iter([0.0, 10.0, 0.0, 10.0])
    monkeypatch.setattr("atlasmart_assets.progress.time.monotonic", lambda: next(clock))
    heavy: list[str] = []
    Progress(heavy.append, "job", phases).done("build", "x")   # at the bench's year: 7.3 s of build, 3.65 s of events
    light: list[str] = []
    progress = Progress(light.append, "job", phases)
    progress.size(TYPICAL_DAYS, TYPICAL_LINES // 100)          # 0.073 s of build, the same 3.65 s of events
    progress.done("build", "x")
    assert heavy[0].endswith("10.0 s so far, about 5 s to go"), heavy[0]
    assert light[0].endswith("10.0 s so far, about 500 s to go"), light[0]


def test_progress_reprices_a_phase_at_what_this_run_does_in_it(monkeypatch) -> None:
    from atlasmart_assets.progress import Cost

    clock = iter([0.0, 10.0])
    monkeypatch.setattr("atlasmart_assets.progress.time.monotonic", lambda: next(clock))
    lines: list[str] = []
    progress = Progress(lines.append, "job", (("read", Cost(1.0, 0.0, 1.0)), ("build", Cost(4.0))))
    progress.reprice("read", Cost(2.0))  # this run's read copies nothing: its fixed part only
    progress.done("read", "x")
    assert lines[0].endswith("10.0 s so far, about 20 s to go"), lines[0]


def test_repricing_a_phase_the_step_does_not_have_leaves_its_estimate_alone(monkeypatch) -> None:
    """A caller that prices every phase of a correction prices a rollback's too: a phase the step does not have
    adds no work to its estimate (and no phase to its count)."""
    from atlasmart_assets.progress import Cost

    clock = iter([0.0, 10.0])
    monkeypatch.setattr("atlasmart_assets.progress.time.monotonic", lambda: next(clock))
    lines: list[str] = []
    progress = Progress(lines.append, "job", (("read", Cost(2.0)), ("build", Cost(4.0))))
    progress.reprice("audit", Cost(1000.0))
    progress.done("read", "x")
    assert lines[0].startswith("job [1/2] read: x;") and lines[0].endswith("10.0 s so far, about 20 s to go"), lines
