"""A backfill's scratch work runs in a child process that stands paused while a current-lane run runs (issue 15:
today's load beside a year's backfill). Real processes, a real Dagster instance's run records."""

import os
import threading
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest

from atlasmart_assets import capacity, pausable
from atlasmart_assets.contract import CURRENT_LANE_TAGS
from atlasmart_assets.raw_files import RawInputError

pytestmark = pytest.mark.skipif(not pausable.AVAILABLE, reason="pausing a child process is Linux's (fork)")


def _running_current_run(instance: dg.DagsterInstance) -> dg.DagsterRun:
    return instance.add_run(dg.DagsterRun(job_name="atlasmart_daily", run_id=str(uuid.uuid4()),
                                          status=dg.DagsterRunStatus.STARTED, tags=CURRENT_LANE_TAGS))


def _ticking(stamps: Path, stop: Path) -> int:
    """Work that writes the time every 10 ms until `stop` exists (at most 60 s); returns how many it wrote."""
    n = 0
    deadline = time.monotonic() + 60
    with stamps.open("a") as fh:
        while not stop.exists() and time.monotonic() < deadline:
            fh.write(f"{time.monotonic()}\n")
            fh.flush()
            n += 1
            time.sleep(0.01)
    return n


def _until(predicate, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


def test_a_backfills_scratch_work_stands_still_while_a_current_lane_run_runs(instance, tmp_path) -> None:
    """No tick is written while today's run is STARTED; the work goes on once it has ended and returns its
    result to the step."""
    stamps, stop = tmp_path / "stamps", tmp_path / "stop"
    lowered = capacity.Lowered(0, instance, 1, max_pause_s=60)  # the priority is another test's
    out: list[int] = []
    worker = threading.Thread(target=lambda: out.append(lowered.run(lambda: _ticking(stamps, stop))))
    worker.start()
    _until(lambda: stamps.exists() and len(stamps.read_text().splitlines()) > 5)
    run = _running_current_run(instance)
    started = time.monotonic()
    time.sleep(2.0)
    # Taken before the run's end is reported: the watcher may resume the child (and it tick) before
    # report_run_failed returns to this thread.
    ended = time.monotonic()
    instance.report_run_failed(run)
    count = len(stamps.read_text().splitlines())
    _until(lambda: len(stamps.read_text().splitlines()) > count + 5)  # going on again
    stop.touch()
    worker.join(timeout=30)
    ticks = [float(line) for line in stamps.read_text().splitlines()]
    assert out == [len(ticks)], "the child's result reached the step"
    # The longest stall of the ticker is the pause: it began after today's run started (within a watch) and ended
    # after it ended.
    before, after = max(zip(ticks, ticks[1:]), key=lambda gap: gap[1] - gap[0])
    assert after - before > 1.0, (before, after)
    assert before > started - 1.0 and after > ended, (started, ended, before, after)
    assert not [t for t in ticks if started + 1.0 < t < ended], "no tick while today's run ran"
    assert lowered.yielded.times == 1 and lowered.yielded.paused_s > 1.0, lowered.yielded


def test_a_pause_is_bounded_then_the_work_keeps_to_fewer_cores(instance, tmp_path) -> None:
    """A current-lane run that never ends (its process gone without a word) holds a backfill up for
    `max_pause_s` only."""
    _running_current_run(instance)
    lowered = capacity.Lowered(0, instance, 1, max_pause_s=0.3)

    def work() -> str:
        time.sleep(0.5)
        return "done"

    assert lowered.run(work) == "done"
    assert 0.3 <= lowered.yielded.paused_s < 20, lowered.yielded
    assert lowered.yielded.yielded_s > 0, "past the cap it went on, yielding cores instead"


def test_the_child_runs_at_lower_priority_and_its_lines_reach_the_parents_log(instance) -> None:
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    lines: list[str] = []

    def work() -> tuple[int, int]:
        log = pausable.relayed(lines.append)
        for n in range(3):
            log(f"line {n}")
        return os.getpid(), os.getpriority(os.PRIO_PROCESS, 0)

    pid, niceness = capacity.Lowered(10, instance, 1, max_pause_s=60).run(work, log=lines.append)
    assert pid != os.getpid(), "the work ran in a child process"
    assert niceness == min(caller + 10, 19)
    assert os.getpriority(os.PRIO_PROCESS, 0) == caller
    assert lines == ["line 0", "line 1", "line 2"]


def test_the_childs_exception_reaches_the_step_as_itself(instance) -> None:
    def bad() -> None:
        raise RawInputError(Path("/raw/partition=2026-09-01.json"), "2026-09-01", "not JSON")

    with pytest.raises(RawInputError) as caught:
        capacity.Lowered(0, instance, 1, max_pause_s=60).run(bad)
    assert caught.value.partition == "2026-09-01" and caught.value.problem == "not JSON"
    assert any("scratch process" in note for note in caught.value.__notes__)


def test_a_child_that_dies_is_an_error_naming_how() -> None:
    with pytest.raises(pausable.ChildDied, match="SIGKILL"):
        pausable.run(lambda: os.kill(os.getpid(), 9), lambda: False)


def test_an_interrupted_step_leaves_no_child_working(tmp_path) -> None:
    """The run terminated while its scratch work runs (paused or not): the child is killed and reaped."""
    pid_file = tmp_path / "pid"
    calls = {"n": 0}

    def busy() -> bool:
        calls["n"] += 1
        if pid_file.exists():
            raise KeyboardInterrupt  # what Dagster's termination raises in the step's thread, in kind
        return calls["n"] % 2 == 0

    def work() -> None:
        written = pid_file.with_suffix(".tmp")
        written.write_text(str(os.getpid()))
        os.replace(written, pid_file)  # whole, or not there
        time.sleep(60)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pausable.run(work, busy, watch_s=0.05)
    assert time.monotonic() - started < 30
    child = int(pid_file.read_text())
    with pytest.raises((ProcessLookupError, ChildProcessError)):
        os.kill(child, 0)
