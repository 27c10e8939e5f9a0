"""A long step's progress lines under what an operator meets: a termination while Dagster writes the step's events,
waits for the warehouse, hostile names and configs, the published checks' fallback and lock-out, refusals."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from atlasmart_assets import (capacity, candidates, correction, generate, pausable, progress as progress_mod, reference,
                              waiting)
from atlasmart_assets.checks import published as published_mod
from atlasmart_assets.definitions import defs
from atlasmart_assets.lab import run_chain
from atlasmart_assets.progress import DETAIL_MAX_BYTES, Progress
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo, RunScope
from atlasmart_assets.warehouse.connection import waiters_dir
from atlasmart_assets.window import Window

HISTORY = ("2026-09-01", "2026-09-19")
DAY = "2026-09-20"


def _lines(instance: dg.DagsterInstance, run_id: str, what: str = "") -> list[str]:
    return [e.user_message for e in instance.all_logs(run_id)
            if not e.dagster_event and e.user_message.startswith(what) and " so far, " in e.user_message]


def _step_failures(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    return [e.dagster_event.step_key for e in instance.all_logs(run_id)
            if e.dagster_event and e.dagster_event.event_type_value == "STEP_FAILURE"]


@pytest.mark.parametrize("step, what", [("correction", "correction"), ("raw__order_lines", "raw")])
def test_a_run_terminated_while_dagster_writes_a_steps_events_says_it_was_writing_them(
        env, instance, monkeypatch, step: str, what: str) -> None:
    """Dagster raises a termination (SIGINT in the step's process) outside the step's code while it writes the
    step's events: the step's last line says it was writing them, never `done`."""
    fired: list[str] = []
    original = type(instance).handle_new_event

    def handle(self, event, *args, **kwargs):  # type: ignore[no-untyped-def]
        out = original(self, event, *args, **kwargs)
        de = event.dagster_event
        if not fired and de is not None and de.step_key == step and de.event_type_value == "ASSET_MATERIALIZATION":
            fired.append(step)
            signal.raise_signal(signal.SIGINT)
        return out

    monkeypatch.setattr(type(instance), "handle_new_event", handle)
    result = run_chain(instance, *HISTORY, {"dagster/backfill": f"bf-term-{what}"})
    assert fired and not result.success
    assert _step_failures(instance, result.run_id) == [step]
    # The line said before the events, or, when Python closes the step's code while the step can still log, the
    # line saying it stopped there: never `done`.
    last = _lines(instance, result.run_id, what)[-1]
    assert ("events: writing " in last or "events: stopped: Dagster closed the step" in last) \
        and not last.endswith("done"), last


def _hold_until_waited_on(warehouse: Path, extra_s: float) -> subprocess.Popen:
    """Another process holds the warehouse until a waiter announces itself, then `extra_s` more."""
    code = ("import sys, time, duckdb, pathlib\n"
            "con = duckdb.connect(sys.argv[1]); pathlib.Path(sys.argv[2]).touch()\n"
            "w = pathlib.Path(sys.argv[3])\n"
            "while not (w.is_dir() and any(w.iterdir())): time.sleep(0.02)\n"
            "time.sleep(float(sys.argv[4])); con.close()\n")
    held = warehouse.with_name("held.flag")
    proc = subprocess.Popen([sys.executable, "-c", code, str(warehouse), str(held), str(waiters_dir(warehouse)),
                             str(extra_s)])
    while not held.exists():
        assert proc.poll() is None, "the holder died"
        time.sleep(0.02)
    return proc


def test_a_wait_for_the_warehouse_is_said_apart_and_not_extrapolated(env, instance, published, monkeypatch) -> None:
    """Today's load whose correction waits for the lock: its first line says how long of it was waiting, and the
    estimate leaves the wait out (before: a 6 s wait read "about 69 s to go" for 1.3 s of work)."""
    published(("2026-09-19", None))
    original = reference.load
    holders: list[subprocess.Popen] = []

    def load(wh, stats=None):  # type: ignore[no-untyped-def]
        if not holders:
            holders.append(_hold_until_waited_on(wh.settings.warehouse_path, 1.5))
        return original(wh, stats)

    monkeypatch.setattr(reference, "load", load)
    result = run_chain(instance, DAY)
    holders[0].wait(timeout=60)
    assert result.success
    read = _lines(instance, result.run_id, "correction")[0]
    waited = float(read.split("of which ")[1].split(" s waiting")[0])
    assert waited >= 1.5, read


def test_waiting_is_left_out_of_the_estimate(monkeypatch) -> None:
    clock = iter([0.0, 6.3])
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: next(clock))
    lines: list[str] = []
    p = Progress(lines.append, "job", (("read", 0.1), ("rest", 1.0)))
    waiting.count(6.0)
    p.done("read", "x")  # 0.3 s of work for a tenth of 1.1: about 3 s to go, not 69
    assert lines[0].endswith("6.3 s so far, of which 6.0 s waiting, about 3 s to go"), lines[0]


@pytest.mark.parametrize("changed_lines, said", [(0, "about 1 s to go"), (7_300_000, "about 2 s to go")])
def test_a_publish_that_changes_no_day_expects_no_chart_in_its_events(monkeypatch, changed_lines: int,
                                                                       said: str) -> None:
    """Each phase taking its typical time, what the publish's line estimates is the events' typical time: without
    the change chart where no day changes (a year's re-derive of unchanged days read "about 3 s to go" with 1.1 s),
    with it where the audit finds days that change though no day had new evidence after the build."""
    days, lines = 365, 7_300_000
    costs = [cost.at(days, lines) for _, cost in correction.PHASES[:3]]
    publish_s = correction.COSTS["publish"].at(days, changed_lines)
    now = [0.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    out: list[str] = []
    p = Progress(out.append, "correction", correction.PHASES + (correction.EVENTS_PHASE,))
    p.size(days, lines)
    for (name, _), cost in zip(correction.PHASES, costs):
        now[0] += cost
        p.done(name, "x")
    correction._price_publish(p, days, 0, 0)  # after the build, no day with new evidence: a re-derive, say
    correction._price_publish(p, days, changed_lines, 365 if changed_lines else 0)  # after the audit
    now[0] += publish_s
    p.done("publish", "x")
    assert out[-1].endswith(said), out[-1]


def test_a_line_is_one_line_and_bounded_whatever_it_names() -> None:
    lines: list[str] = []
    forged = "x\nraw 2026-09-20 [3/3] append: 1 new batch(es) appended; 0.1 s so far, done\n" + "日" * 20000
    p = Progress(lines.append, "raw 2026-09-20\u2028", (("parse", 1.0), ("append", 1.0)))
    p.end("parse", f"refused by raw_order_lines_file_readable: {forged}")
    [line] = lines
    assert "\n" not in line and "\u2028" not in line and "\\n" in line, line[:200]
    assert len(json.dumps(line)) < DETAIL_MAX_BYTES + 400, len(json.dumps(line))
    assert line.endswith("so far, ended")


def test_nothing_done_yet_is_no_estimate_rather_than_done() -> None:
    lines: list[str] = []
    p = Progress(lines.append, "job", (("a", 1.0), ("b", 1.0)))
    p.part("a", 0.0, "the shared read failed: each reads on its own")
    p.part("a", float("nan"), "odd")
    assert all(line.endswith("no estimate yet") for line in lines), lines


def _rollback(instance: dg.DagsterInstance, config: dict) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance, raise_on_error=False, run_config={"ops": {"rollback_range": {"config": config}}})


def test_a_rollbacks_lines_name_its_window_as_validated_never_its_config_as_typed(env, instance, published) -> None:
    published(("2026-09-05", "2026-09-06"),
              ("2026-09-05", "2026-09-06", {"dagster/backfill": "bf-2", "atlasmart/rederive": "again"}))
    result = _rollback(instance, {"start": "20260905", "end": "20260906", "reason": "basic format"})
    lines = _lines(instance, result.run_id, "rollback")
    assert lines and all(line.startswith("rollback 2026-09-05..2026-09-06 [") for line in lines), lines
    forged = "2026-09-19\nrollback 2026-09-19 [4/4] events: forged; 0.1 s so far, done\n" + "日" * 20000
    result = _rollback(instance, {"start": forged, "reason": "typo"})
    assert not result.success
    lines = _lines(instance, result.run_id, "rollback")
    assert lines, "the refusal is logged"
    for line in lines:  # the error may quote what was typed: escaped, on one line, cut
        assert line.startswith("rollback (of a window that is not valid) [1/4] targets: stopped by ValueError"), line
        assert "\n" not in line and len(json.dumps(line)) < 2000, line[:300]


def test_a_correction_refused_by_its_audits_estimates_no_work_it_will_not_do(env, published) -> None:
    """The audit line of a refused correction says it was refused and ends there: no estimate of a publish that
    will not happen before it (before: `about 1 s to go`, then the refusal)."""
    published(("2026-09-18", "2026-09-20"))
    logged: list[str] = []
    scope = RunScope(Window.of("2026-09-18", "2026-09-20"), RunInfo("refused-run", "bf-refused"), "backfill",
                     "2026-09-21", None)
    outcome = correction.correct(Warehouse(), scope, lambda _r: True, log=logged.append, adjust_staged=lambda con: con.execute(
        "delete from candidate.staged_order_lines where partition_date = '2026-09-19'"))
    assert outcome.refused and outcome.publication is None
    audit_lines = [line for line in logged if "] audit:" in line]
    assert len(audit_lines) == 1 and "refused by" in audit_lines[0] and audit_lines[0].endswith("ended"), logged


def test_a_corrections_read_of_the_published_state_makes_no_estimate_and_its_build_does(env, instance) -> None:
    """The read of the published state takes about as long for a day as for a year: extrapolated, a year's first
    load read `about 2 s to go` with 17 s ahead. Its line makes no estimate; the build's line does. A correction
    that copies its raw evidence from the warehouse (no raw step in the run) reads work that grows with the
    window: that line makes one."""
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-estimates"})
    assert result.success
    read, build = _lines(instance, result.run_id, "correction")[:2]
    assert "[1/5] read: 0 published day(s) of 19;" in read and read.endswith("no estimate yet"), read
    assert "[2/5] build: " in build and build.endswith(" s to go"), build

    logged: list[str] = []
    scope = RunScope(Window.of(*HISTORY), RunInfo("no-raw-step", "bf-no-raw-step"), "backfill", DAY, None)
    assert correction.correct(Warehouse(), scope, lambda _r: True, log=logged.append).publication is not None
    assert "raw evidence copied from the warehouse" in logged[0] and logged[0].endswith(" s to go"), logged[0]


def test_the_published_checks_fallback_goes_on_and_ends_done(env, instance, published, monkeypatch) -> None:
    """The shared read fails (not on the lock), each check alone reads: the step says so, goes on, and its last line
    is `done` (before: `ended`, then two results written with nothing said)."""
    published((DAY, None))
    original = published_mod.published_checks

    def flaky(wh, window, give_way=None, checks=tuple(published_mod.CHECKED), stats=None):  # type: ignore[no-untyped-def]
        if len(checks) == 2:
            raise duckdb.IOException("IO Error: transient")
        return original(wh, window, give_way, checks, stats)

    monkeypatch.setattr(published_mod, "published_checks", flaky)
    result = run_chain(instance, DAY)
    assert result.success
    lines = _lines(instance, result.run_id, "published checks")
    assert "the shared read failed (IOException): each check reads on its own" in lines[0], lines
    assert "1 published day(s) of 1 read for 2 check(s), 0 failing" in lines[1], lines
    assert lines[-1].endswith("done") and "2 check result(s) written" in lines[-1], lines


def test_the_published_checks_one_of_which_cannot_read_name_the_error(env, instance, published, monkeypatch) -> None:
    published((DAY, None))
    controls = candidates.controls

    def broken_mart(con, relation, *args, **kwargs):  # type: ignore[no-untyped-def]
        if relation == "mart.revenue_daily":
            raise duckdb.CatalogException("Catalog Error: Table with name revenue_daily does not exist!")
        return controls(con, relation, *args, **kwargs)

    monkeypatch.setattr(candidates, "controls", broken_mart)
    result = run_chain(instance, DAY)
    assert not result.success
    last = _lines(instance, result.run_id, "published checks")[-1]
    assert "stopped by CatalogException" in last and "revenue_daily does not exist" in last, last
    assert last.endswith("ended"), last


def test_the_published_checks_none_of_which_can_read_stop_in_their_read(env, instance, published, monkeypatch) -> None:
    published((DAY, None))

    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise duckdb.CatalogException("Catalog Error: Table with name fct_order_lines does not exist!")

    monkeypatch.setattr(published_mod, "published_checks", broken)
    result = run_chain(instance, DAY)
    assert not result.success
    lines = _lines(instance, result.run_id, "published checks")
    assert "[1/2] read: stopped by CatalogException" in lines[-1] and lines[-1].endswith("ended"), lines
    assert not any("held by another process" in line for line in lines), lines


def test_the_published_checks_locked_out_say_they_read_nothing(env, instance, published, monkeypatch, tmp_path) -> None:
    published((DAY, None))
    code = ("import sys, time, duckdb, pathlib\n"
            "con = duckdb.connect(sys.argv[1]); pathlib.Path(sys.argv[2]).touch(); time.sleep(120)\n")
    held = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", code, str(env.data_dir / "warehouse.duckdb"), str(held)])
    try:
        while not held.exists():
            assert holder.poll() is None
            time.sleep(0.02)
        monkeypatch.setenv("ATLASMART_LOCK_TIMEOUT_S", "1")
        keys = {dg.AssetCheckKey(dg.AssetKey(list(published_mod.CHECKED[c])), c) for c in published_mod.CHECKED}
        job = defs.resolve_job_def("atlasmart_daily").get_subset(asset_selection=set(), asset_check_selection=keys)
        result = job.execute_in_process(partition_key=DAY, instance=instance, raise_on_error=False)
    finally:
        holder.kill()
        holder.wait()
    lines = _lines(instance, result.run_id, "published checks")
    assert "read: not read: the warehouse was held by another process; 2 check(s) not evaluated" in lines[0], lines


def _waited(line: str) -> float:
    found = re.search(r"of which ([\d.]+) s waiting", line)
    return float(found.group(1)) if found else 0.0


@pytest.mark.skipif(not pausable.AVAILABLE, reason="the scratch work is paused in a child process on Linux only")
def test_the_raw_profile_paused_beside_todays_load_says_its_pause_apart(env, instance, monkeypatch) -> None:
    """The raw step's profile is scratch work in a child that stands paused while today's load runs. Its line says
    the pause apart and leaves it out of the estimate, as the append's does. Before, the child wrote the line with
    the pauses as it knew them when it was forked: `3.6 s so far, about 3 s to go` with a second left."""
    busy_until = [0.0]
    calls = [0]
    real = capacity.Lowered.run

    def run(self, work, log=None):  # noqa: ANN001, ANN202
        calls[0] += 1
        if calls[0] == 2:  # the raw step's profile (the parse is the first)
            busy_until[0] = time.monotonic() + 3.0
        return real(self, work, log)

    monkeypatch.setattr(capacity.Lowered, "run", run)
    monkeypatch.setattr(capacity, "current_lane_active", lambda *a, **k: time.monotonic() < busy_until[0])
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-paused-profile"})
    assert result.success
    raw = _lines(instance, result.run_id, "raw")
    [profile] = [line for line in raw if "] profile:" in line]
    assert _waited(profile) >= 2.5, raw
    elapsed = float(re.search(r"; ([\d.]+) s so far", profile).group(1))
    ahead = float(re.search(r"about (\d+) s to go", profile).group(1))
    assert ahead <= elapsed - _waited(profile) + 1, profile  # the pause is not extrapolated as work
    # The pause is said as it begins and as it ends.
    logs = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    window = f"{HISTORY[0]}..{HISTORY[1]}"
    begun = logs.index(f"{window}: today's load is queued or running: the scratch work stands paused until it ends "
                       "(at most 60 s)")
    [ended] = [n for n, m in enumerate(logs) if m.startswith(f"{window}: the scratch work goes on after ")
               and m.endswith(" s paused: today's load has ended")]
    assert begun < ended < logs.index(profile), logs


def test_a_refused_raw_step_says_its_profile_once_with_no_estimate(env, instance) -> None:
    """A raw audit that refuses ends the profile's line: its counts, the refusal and `ended`, with no estimate of an
    append that will not happen before it (before: `2 finding(s); about 1 s to go`, then the refusal)."""
    path = env.raw_dir / "partition=2026-09-10.json"
    doc = json.loads(path.read_text())
    doc["lines"][0]["quantity"] = -1
    path.write_text(json.dumps(doc))
    result = run_chain(instance, *HISTORY, {"dagster/backfill": "bf-refused-raw"})
    assert not result.success
    raw = _lines(instance, result.run_id, "raw")
    [profile] = [line for line in raw if "] profile:" in line]
    assert profile == raw[-1] and profile.endswith("ended"), raw
    refused = r"profile: [\d,]+ records, \d+ finding\(s\): refused by [a-z_, ]*raw_order_lines_values_valid"
    assert re.search(refused, profile), profile


def test_a_rollbacks_chunk_lines_say_its_days_are_pointed_at_not_unchanged(env, instance, monkeypatch) -> None:
    """A rollback writes no line: each chunk points its days at the versions the store holds. Its chunk lines said
    `no day changed`, and then its publish line that a day in them changed."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "5")
    assert run_chain(instance, *HISTORY, {"dagster/backfill": "bf-1"}).success
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 3), "B-2026-09-03-02", new=2, restate=1, retract=0)
    assert run_chain(instance, *HISTORY, {"dagster/backfill": "bf-2"}).success
    result = _rollback(instance, {"start": HISTORY[0], "end": HISTORY[1], "reason": "undo bf-2"})
    assert result.success
    lines = _lines(instance, result.run_id, "rollback")
    [published] = [line for line in lines if "] publish: publication" in line]
    assert ", 1 of them to other content" in published, published
    chunks = [line for line in lines if "] publish: chunk" in line]
    assert len(chunks) == 4 and not any("no day changed" in line for line in chunks), chunks
    assert "chunk 1/4 (2026-09-01..2026-09-05): 5 day(s) pointed at the version store, no line written" \
        in chunks[0], chunks


@pytest.mark.parametrize("answer, begun, ended", [
    (True, "today's load is queued or running: the next warehouse hold waits until it ends (at most 0.6 s)",
     "the most it waits; today's load is still queued or running"),
    (OSError("database table is locked: runs"),
     "the run storage cannot be read: the next warehouse hold waits until it can (at most 0.6 s)",
     "the most it waits; the run storage still cannot be read"),
], ids=["busy", "unreadable"])
def test_a_give_way_says_why_it_waits_and_why_it_went_on(monkeypatch, answer, begun: str, ended: str) -> None:
    """Found by a review: with the run storage unreadable, the wait said today's load was running, then that it had
    ended (a second query, after the wait, read unreadable as free). Each is said as it was seen, asked once."""
    asked: list[int] = []

    def active(_instance, _statuses=None, _own=None) -> bool:  # noqa: ANN001
        asked.append(1)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(capacity, "current_lane_active", active)
    lines: list[str] = []
    waited = capacity.GiveWay(None, 0.6, lines.append)()  # type: ignore[arg-type]
    assert waited >= 0.6 and len(lines) == 2, lines
    assert lines[0] == begun and lines[1].startswith("the next warehouse hold goes on after ") and \
        lines[1].endswith(ended), lines
    assert len(asked) <= 0.6 / capacity.POLL_S + 2, "asked once a poll, not again after the wait"


def test_a_line_that_cannot_be_logged_does_not_fail_the_wait(monkeypatch) -> None:
    monkeypatch.setattr(capacity, "current_lane_active", lambda *a, **k: True)

    def broken(_line: str) -> None:
        raise RuntimeError("the log is gone")

    assert capacity.GiveWay(None, 0.3, broken)() >= 0.3  # type: ignore[arg-type]


def test_a_step_closed_by_the_garbage_collector_logs_nothing_from_there() -> None:
    """A terminated step's generator kept alive by a reference cycle is closed by the collector, at whatever point it
    runs: a line logged from there went into Dagster's in-memory event storage while a query held its lock, and the
    test run hung. Closed by its caller, the step still says where it stopped."""
    import gc

    def step(progress: Progress):  # noqa: ANN202
        with progress.stopping():
            yield 1
            yield 2

    logged: list[str] = []
    closed = step(Progress(logged.append, "raw w", (("parse", 1.0),)))
    next(closed)
    closed.close()
    assert len(logged) == 1 and "stopped: Dagster closed the step" in logged[0], logged

    collected = step(Progress(logged.append, "raw w", (("parse", 1.0),)))
    next(collected)
    cycle: list[object] = [collected]
    cycle.append(cycle)
    del collected, cycle
    gc.collect()
    assert len(logged) == 1, logged
