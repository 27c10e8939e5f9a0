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
from typing import Callable

import dagster as dg
import pytest

from atlasmart_assets import extracts, generate, settings
from atlasmart_assets.lab import publish_legacy_incident, published_as_candidates, run_chain
from atlasmart_assets.recovery import recover_on_load
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.warehouse.publish import publish
from atlasmart_assets.window import Window
from atlasmart_tests import crash_worker, state

REPO = Path(__file__).resolve().parent.parent


def _spawn(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.001)


def test_reader_sees_all_old_or_all_new(env, instance, tmp_path) -> None:
    days = 10
    for k in range(days):
        day = dt.date(2026, 9, 1) + dt.timedelta(days=k)
        generate.write_raw(env.raw_dir, day, generate.synthetic_lines(day, 1_000, 40))
    window = Window.of("2026-09-01", "2026-09-10")
    assert run_chain(instance, "2026-09-01", "2026-09-10").success
    old = sum(extracts.read(env, d)["controls"][4] for d in window.keys)

    # A correction of every day of the range (every cost + 1), published in one commit.
    wh = Warehouse()
    scratch = wh.scratch_path("reader-test")
    days_after = published_as_candidates(wh, "reader-test", window,
                                         "update candidate.staged_order_lines set unit_cost = unit_cost + 1")
    new = sum(c.controls[4] for c in days_after.values())

    out, ready, stop = tmp_path / "seen.json", tmp_path / "ready", tmp_path / "stop"
    reader = _spawn("atlasmart_tests.reader_worker", str(env.data_dir), str(out), str(ready), str(stop))
    _wait(lambda: ready.exists() or reader.poll() is not None, "the reader's first read", 120)
    assert ready.exists(), f"the reader ended before its first read: {out.read_text() if out.exists() else ''}"
    publish(wh, scratch, window, RunInfo("reader-test"), "test", days_after, None)
    stop.touch()
    assert reader.wait(timeout=180) in (0, 1)
    result = json.loads(out.read_text())
    assert result["error"] is None and reader.returncode == 0, result["error"]
    seen = result["seen"]
    mart = {round(s["mart_cost"], 2) for s in seen if "mart_cost" in s}
    files = {round(s["extract_cost"], 2) for s in seen if "extract_cost" in s}
    # A read before the publish and one after it are guaranteed (ready, then stop): both versions are seen, and
    # nothing but them.
    assert mart == {round(old, 2), round(new, 2)}, (mart, old, new)
    assert files == {round(old, 2), round(new, 2)}, (files, old, new)
    print(f"\n[reader] {len(seen) // 2} reads, {result['lock_conflicts']} lock conflicts retried "
          f"(longest {result['longest_conflict_s']}s)")


@pytest.fixture(scope="module")
def incident_dir(published_state, tmp_path_factory) -> Path:
    """A data dir where 2026-09-20 carries the legacy cost: the state a correction starts from."""
    base = tmp_path_factory.mktemp("incident")
    shutil.copytree(REPO / "raw", base / "raw")
    # The cached runs are the ones the erasure tests below (and test_kill_points) start from.
    shutil.copytree(published_state(("2026-09-18", "2026-09-20"), ("2026-09-21", None)), base / "data", symlinks=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATLASMART_RAW_DIR", str(base / "raw"))
        mp.setenv("ATLASMART_DATA_DIR", str(base / "data"))
        publish_legacy_incident(Warehouse())
    return base


# (failpoint, extra environment): with one-day chunks the three days' rows are written ahead of the commit (a
# kill at wrote_versions leaves them pending); with the default, a window of one chunk writes them in the commit.
POINTS = [("wrote_versions", {"ATLASMART_CHUNK_DAYS": "1"}), ("wrote_versions", {}), ("wrote_extracts_ahead", {}),
          ("staged_extracts", {}), ("wrote_mart.revenue_daily", {}), ("committed", {}), ("swapped", {})]
# Kill delays after the publish has staged its extracts (its first failpoint): the kill lands inside the
# transaction or the swap, at instants no named failpoint marks.
TIMER_DELAYS_S = [0.0, 0.02, 0.1]
TIMER_ATTEMPTS = 5


def _fresh_copy(incident_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attempt: int) -> settings.Settings:
    base = tmp_path / f"attempt{attempt}"
    shutil.copytree(incident_dir / "raw", base / "raw")
    shutil.copytree(incident_dir / "data", base / "data", symlinks=True)
    monkeypatch.setenv("ATLASMART_RAW_DIR", str(base / "raw"))
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(base / "data"))
    return settings.load()


def _recover_then_rerun(cfg: settings.Settings) -> tuple[dict, dict]:
    """What a reader sees after the crash (once the code location's start recovered the extracts), and after a
    rerun converged. A read-only reader in the gap between commit and swap moves nothing."""
    extracts_killed = state.files(cfg.published_dir)
    with Warehouse().reader() as con:
        con.execute("select count(*) from audit.current_publications").fetchone()
    assert state.files(cfg.published_dir) == extracts_killed, "a read moved the extracts"
    recover_on_load(Warehouse())
    middle = state.content(cfg)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_chain(instance, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-rerun"}).success
    assert extracts.read(cfg, "2026-09-20")["controls"][4] == 425
    return middle, state.content(cfg)


@pytest.mark.parametrize(("point", "extra"), POINTS)
def test_sigkill_at_a_failpoint_leaves_before_or_after_and_rerun_converges(incident_dir, tmp_path, monkeypatch,
                                                                           point, extra) -> None:
    cfg = _fresh_copy(incident_dir, tmp_path, monkeypatch, 0)
    before = state.content(cfg)
    assert extracts.read(cfg, "2026-09-20")["controls"][4] == 435

    worker = crash_worker.start("2026-09-18", "2026-09-20", {"ATLASMART_FAILPOINT": point, **extra})
    worker.join(timeout=300)
    assert worker.exitcode == -signal.SIGKILL
    middle, after = _recover_then_rerun(cfg)
    assert middle == (after if point in ("committed", "swapped") else before), point
    # History holds each superseded version once, and the rows the killed publish wrote ahead of its commit were
    # collected by the rerun: every stored row belongs to a publication the ledger knows, none is pending.
    repeated = state.table_rows(cfg, "(select publication_id, partition_date, line_id, count(*) as n "
                                     "from history.fct_order_lines group by all)", "n > 1")
    assert repeated == [], repeated[:3]
    for store in ("versions.staged_order_lines", "versions.fct_order_lines"):
        orphans = state.table_rows(cfg, f"(select distinct publication_id from {store})",
                                   "publication_id not in (select publication_id from audit.publications)")
        assert orphans == [], (store, orphans)
    assert state.table_rows(cfg, "audit.pending_versions") == [], "no publish is left pending"


@pytest.mark.parametrize("delay_s", TIMER_DELAYS_S)
def test_sigkill_inside_the_publish_leaves_before_or_after(incident_dir, tmp_path, monkeypatch, delay_s) -> None:
    """SIGKILL `delay_s` after the publish staged its extracts; only a kill that lands before the publish swapped
    its extracts in counts (a later one proves nothing): otherwise the attempt is repeated with no delay."""
    for attempt in range(TIMER_ATTEMPTS):
        cfg = _fresh_copy(incident_dir, tmp_path, monkeypatch, attempt)
        before = state.content(cfg)
        trace = tmp_path / f"trace{attempt}"
        trace.mkdir()
        worker = crash_worker.start("2026-09-18", "2026-09-20", {"ATLASMART_FAILPOINT_TRACE": str(trace)})
        _wait(lambda: (trace / "staged_extracts").exists() or not worker.is_alive(),
              "the worker to enter the publish", 300)
        assert (trace / "staged_extracts").exists(), f"the worker ended (status {worker.exitcode}) before publishing"
        time.sleep(delay_s)
        worker.kill()
        worker.join(timeout=60)
        code = worker.exitcode
        if (trace / "swapped").exists():
            delay_s = 0.0
            continue
        assert code == -signal.SIGKILL
        middle, after = _recover_then_rerun(cfg)
        assert middle in (before, after), "a mix of before and after"
        committed = (trace / "committed").exists()
        if committed:
            assert middle == after
        print(f"\n[kill] {delay_s}s after staged_extracts, attempt {attempt + 1}: the committed failpoint was "
              f"{'' if committed else 'not '}reached; a reader then saw {'after' if middle == after else 'before'}")
        return
    pytest.fail(f"in {TIMER_ATTEMPTS} attempts no SIGKILL landed inside the publish")


ERASED_DAYS = ["2026-09-18", "2026-09-19", "2026-09-20"]  # C00004 buys on each


def _old_figures(cfg: settings.Settings) -> dict[str, list[str]]:
    """Per extract version but the current one: the erased days whose file differs from the current one's."""
    current = extracts.resolve(cfg)
    now = {d: (current / extracts.file_name(d)).read_bytes() for d in ERASED_DAYS}
    out = {}
    for version in cfg.versions_dir.iterdir():
        old = [d for d in ERASED_DAYS if version != current and (version / extracts.file_name(d)).is_file()
               and (version / extracts.file_name(d)).read_bytes() != now[d]]
        if old:
            out[version.name] = old
    return out


@pytest.mark.parametrize("failpoint", ["committed", "swapped"])
def test_an_erasure_killed_after_its_commit_leaves_no_version_with_the_erased_figures(
        env, published, monkeypatch, failpoint) -> None:
    """A publish applying a deletion request, SIGKILLed after its commit: the code location's load finishes its
    prune, so no extract version but the current one holds the erased days' old figures. A review found them kept
    (readable under published_versions/) until ten more publications pushed them out."""
    from atlasmart_tests.evidence_edits import deletion_request
    published(("2026-09-18", "2026-09-20"), ("2026-09-21", None))
    monkeypatch.setenv("ATLASMART_VERSION_GRACE_S", "3600")
    deletion_request(env.raw_dir, "DR-0001", customer_id="C00004")
    worker = crash_worker.start("2026-09-18", "2026-09-20", {"ATLASMART_FAILPOINT": failpoint})
    worker.join(timeout=300)
    assert worker.exitcode == -signal.SIGKILL
    assert _old_figures(env), "the kill came before the prune"
    recover_on_load(Warehouse())
    assert extracts.read(env, "2026-09-18")["input"]["requests_applied"] == ["DR-0001"]
    assert _old_figures(env) == {}
    assert not list(env.versions_dir.parent.glob(f"{extracts.ERASING}*")), "the erasure is done"


def test_an_erasure_whose_notice_cannot_be_written_leaves_no_version_with_the_erased_figures(
        env, instance, published, monkeypatch) -> None:
    """The disk of the notices is full: the publish that applied a request fails after its commit, and no
    version but the current one holds the erased figures (the prune comes before the notice)."""
    import errno

    from atlasmart_assets import notices
    from atlasmart_tests.evidence_edits import deletion_request
    published(("2026-09-18", "2026-09-20"), ("2026-09-21", None))
    monkeypatch.setenv("ATLASMART_VERSION_GRACE_S", "3600")
    deletion_request(env.raw_dir, "DR-0001", customer_id="C00004")

    def disk_full(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as mp:
        mp.setattr(notices, "write", disk_full)
        assert not run_chain(instance, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-erase"}).success
    assert extracts.read(env, "2026-09-18")["input"]["requests_applied"] == ["DR-0001"], "the erasure committed"
    assert _old_figures(env) == {}
