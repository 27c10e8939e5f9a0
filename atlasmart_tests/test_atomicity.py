"""A reader never sees a half-published range; SIGKILL anywhere in a correction leaves before or after."""

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atlasmart_assets import candidates, extracts, generate, settings
from atlasmart_assets.lab import publish_legacy_incident, run_chain
from atlasmart_assets.recovery import recover_on_load
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.warehouse.connection import attach
from atlasmart_assets.warehouse.publish import publish
from atlasmart_assets.window import Window
from atlasmart_tests import state

REPO = Path(__file__).resolve().parent.parent


def _spawn(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_reader_sees_all_old_or_all_new(env, instance, tmp_path) -> None:
    days = 10
    for k in range(days):
        day = dt.date(2026, 9, 1) + dt.timedelta(days=k)
        generate.write_raw(env.raw_dir, day, generate.synthetic_lines(day, 4_000, 40))
    window = Window.of("2026-09-01", "2026-09-10")
    assert run_chain(instance, "2026-09-01", "2026-09-10").success
    old = sum(extracts.read(env, d)["controls"][4] for d in window.keys)

    # A correction of every day of the range (every cost + 1), published in one commit.
    wh = Warehouse()
    scratch = wh.scratch_path("reader-test")
    with wh.reader() as rcon:
        attach(rcon, scratch, "s")
        rcon.execute("create schema s.candidate")
        rcon.execute("create table s.candidate.staged_order_lines as select * from staged.order_lines")
        rcon.execute("detach s")
    con = wh.open_scratch("reader-test")
    con.execute("update candidate.staged_order_lines set unit_cost = unit_cost + 1")
    candidates.build(con, window)
    days_after = candidates.days(con, window, {})
    con.close()
    new = sum(c.controls[4] for c in days_after.values())

    out, stop = tmp_path / "seen.json", tmp_path / "stop"
    reader = _spawn("atlasmart_tests.reader_worker", str(env.data_dir), str(out), str(stop))
    time.sleep(1.0)
    publish(wh, scratch, window, RunInfo("reader-test"), "test", days_after, None)
    time.sleep(1.0)
    stop.touch()
    assert reader.wait(timeout=30) == 0
    seen = json.loads(out.read_text())
    mart = {round(s["mart_cost"], 2) for s in seen if "mart_cost" in s}
    files = {round(s["extract_cost"], 2) for s in seen if "extract_cost" in s}
    assert mart <= {round(old, 2), round(new, 2)} and round(new, 2) in mart, (mart, old, new)
    assert files <= {round(old, 2), round(new, 2)} and round(new, 2) in files, (files, old, new)
    assert len(seen) > 20


@pytest.fixture(scope="module")
def incident_dir(tmp_path_factory) -> Path:
    """A data dir where 2026-09-20 carries the legacy cost: the state a correction starts from."""
    base = tmp_path_factory.mktemp("incident")
    raw = base / "raw"
    shutil.copytree(REPO / "raw", raw)
    old = {k: os.environ.get(k) for k in ("ATLASMART_RAW_DIR", "ATLASMART_DATA_DIR")}
    os.environ.update(ATLASMART_RAW_DIR=str(raw), ATLASMART_DATA_DIR=str(base / "data"))
    try:
        import dagster as dg

        with dg.instance_for_test() as inst:
            assert run_chain(inst, "2026-09-18", "2026-09-20").success and run_chain(inst, "2026-09-21").success
        publish_legacy_incident(Warehouse())
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return base


POINTS = ["staged_extracts", "wrote_staged.order_lines", "wrote_fact.fct_order_lines", "wrote_mart.revenue_daily", "committed", "swapped",
          "timer:1.5", "timer:3.0"]


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_leaves_before_or_after_and_rerun_converges(incident_dir, tmp_path, monkeypatch, point) -> None:
    shutil.copytree(incident_dir / "raw", tmp_path / "raw")
    shutil.copytree(incident_dir / "data", tmp_path / "data", symlinks=True)
    monkeypatch.setenv("ATLASMART_RAW_DIR", str(tmp_path / "raw"))
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "data"))
    cfg = settings.load()
    before = state.content(cfg)
    assert extracts.read(cfg, "2026-09-20")["controls"][4] == 435

    fail = {} if point.startswith("timer:") else {"ATLASMART_FAILPOINT": point}
    worker = _spawn("atlasmart_tests.crash_worker", "2026-09-18", "2026-09-20", env=fail)
    if point.startswith("timer:"):
        try:
            worker.wait(timeout=float(point.split(":")[1]))
        except subprocess.TimeoutExpired:
            worker.send_signal(signal.SIGKILL)
    code = worker.wait(timeout=120)

    # A read-only reader in the gap between commit and swap sees the committed tables and the old extracts,
    # and moves nothing; the code location's start (or the next publish) re-points the extracts.
    extracts_killed = state.files(cfg.published_dir)
    with Warehouse().reader() as con:
        con.execute("select count(*) from audit.current_publications").fetchone()
    assert state.files(cfg.published_dir) == extracts_killed, "a read moved the extracts"
    recover_on_load(Warehouse())
    middle = state.content(cfg)

    rerun = _spawn("atlasmart_tests.crash_worker", "2026-09-18", "2026-09-20")
    assert rerun.wait(timeout=120) == 0
    after = state.content(cfg)
    assert extracts.read(cfg, "2026-09-20")["controls"][4] == 425
    assert middle in (before, after), f"{point}: a mix of before and after"
    if not point.startswith("timer:"):
        assert code == -signal.SIGKILL
        assert middle == (after if point in ("committed", "swapped") else before), point
