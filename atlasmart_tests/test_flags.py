"""Correction flags are owned by the run that set them and cleared on every exit path it can reach; a crashed
run's flags are cleared by the next run's start."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from atlasmart_assets import lab
from atlasmart_assets.correction import correct
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo, RunScope
from atlasmart_assets.warehouse import flags
from atlasmart_assets.warehouse.publish import PublishConflict
from atlasmart_assets.window import Window

REPO = Path(__file__).resolve().parent.parent


def _scope(run_id: str, start: str, end: str, backfill: str) -> RunScope:
    return RunScope(Window.of(start, end), RunInfo(run_id, backfill), "backfill", "2026-09-21", None)


def _held() -> dict[str, list[str]]:
    with Warehouse().reader() as con:
        return flags.held_by(con)


def test_a_window_another_live_backfill_holds_is_refused_and_its_flags_stay(env, instance, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    with Warehouse().writer() as con:
        flags.mark(con, Window.of("2026-09-18", "2026-09-19"), RunInfo("run-a", "bf-a"))
    with pytest.raises(flags.WindowHeld, match="run-a"):
        correct(Warehouse(), _scope("run-b", "2026-09-19", "2026-09-20", "bf-b"), run_finished=lambda _: False)
    assert _held() == {"run-a": ["2026-09-18", "2026-09-19"]}, "run-b neither took nor cleared run-a's days"


def test_a_publish_conflict_leaves_no_flag(env, instance, published) -> None:
    published(("2026-09-18", "2026-09-20"))

    def republish_meanwhile(_con) -> None:  # noqa: ANN001 - another publisher moves 2026-09-20 after our audit read
        lab.publish_legacy_incident(Warehouse())

    lines: list[str] = []
    with pytest.raises(PublishConflict):
        correct(Warehouse(), _scope("run-c", "2026-09-20", "2026-09-20", "bf-c"), lambda _: True,
                adjust_staged=republish_meanwhile, log=lines.append)
    assert _held() == {}
    assert "publish: stopped by PublishConflict: partitions ['2026-09-20'] were republished" in lines[-1], lines[-1]
    assert lines[-1].endswith("ended"), "the run log's last line says the step stopped, not what is left to do"


def test_a_refusal_and_a_parse_error_leave_no_flag(env, instance, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    outcome = correct(Warehouse(), _scope("run-d", "2026-09-19", "2026-09-19", "bf-d"), lambda _: True,
                      adjust_staged=lambda con: con.execute("delete from candidate.staged_order_lines"))
    assert outcome.refused and outcome.publication is None and _held() == {}
    (env.raw_dir / "partition=2026-09-19.json").write_text("{")
    result = run_chain(instance, "2026-09-18", "2026-09-19", {"dagster/backfill": "bf-parse"})
    assert not result.success and _held() == {}


def test_a_killed_run_leaves_flags_that_the_next_run_clears(env, instance, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    worker = subprocess.Popen([sys.executable, "-m", "atlasmart_tests.crash_worker", "2026-09-18", "2026-09-19"],
                              cwd=REPO, env={**os.environ, "ATLASMART_FAILPOINT": "staged_extracts"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert worker.wait(timeout=180) == -signal.SIGKILL
    left = _held()
    assert list(left.values()) == [["2026-09-18", "2026-09-19"]], left
    # The next run (current lane, one day) clears the dead run's flags before it starts, without any sensor.
    assert run_chain(instance, "2026-09-20").success
    assert _held() == {}
