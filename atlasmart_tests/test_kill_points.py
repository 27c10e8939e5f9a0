"""A correction SIGKILLed at an instant no named failpoint marks (a kill hook installed in the killed process: SIGKILL
as the n-th call of a function begins), then what the reader contract promises a reader of `published_versions/`
afterwards (a crash review's cases, 2026-12-07: both failed on the code before)."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from typing import Any

import dagster as dg

from atlasmart_assets import extracts, generate
from atlasmart_assets.lab import run_chain
from atlasmart_assets.recovery import recover_on_load
from atlasmart_assets.resources import Warehouse
from atlasmart_tests.evidence_edits import deletion_request

WINDOW = ("2026-09-18", "2026-09-20")
TODAY = "2026-09-21"


def _kill_at(hook: str) -> None:
    """`module:attr:n`: SIGKILL this process as the n-th call of module.attr begins."""
    import importlib
    module_name, attr, n = hook.split(":")
    module, calls = importlib.import_module(module_name), [0]
    real = getattr(module, attr)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == int(n):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(module, attr, wrapped)


def _killed(start: str, end: str, backfill: str, hook: str) -> int:
    _kill_at(hook)
    result = run_chain(dg.DagsterInstance.ephemeral(), start, end, {"dagster/backfill": backfill})
    return 0 if result.success else 1


def killed_backfill(start: str, end: str, backfill: str, hook: str) -> int | None:
    """A backfill of [start, end] in a fresh Python process with this test's environment, SIGKILLed at `hook`; its
    exit code. Not forked from crash_worker's forkserver: that one binds the ATLASMART_* variables of the test that
    first started it, and a test here setting others made a later crash_worker test's run fail (the clean-clone run
    found it)."""
    code = (f"import sys; from atlasmart_tests.test_kill_points import _killed; "
            f"sys.exit(_killed({start!r}, {end!r}, {backfill!r}, {hook!r}))")
    done = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=300)
    return done.returncode


def test_a_kill_inside_the_swap_leaves_the_superseded_version_its_grace(env, published, monkeypatch) -> None:
    """`extracts.swap` renames the link, fsyncs the data dir, then marks the previous version superseded. Killed
    between the rename and the mark, the version readers resolved a moment ago carries no marker: the next publish
    judges it as one never swapped in, by its directory's mtime (when it was built), and with
    ATLASMART_RETAIN_VERSIONS=1 removes it in its hold, at once, though it was superseded seconds ago (the README
    promises a slow pass its ATLASMART_VERSION_GRACE_S "even with ATLASMART_RETAIN_VERSIONS=1")."""
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    monkeypatch.setenv("ATLASMART_VERSION_GRACE_S", "3600")
    published(WINDOW, (TODAY, None))
    shown = extracts.current_version(env)
    built = time.time() - 7200  # the version current until now was built two hours ago (yesterday's load, say)
    os.utime(env.versions_dir / shown, (built, built))
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 19), "B-2026-09-19-02")
    # extracts._fsync_dir runs once at the end of complete() (in the hold, before the commit) and once in swap(),
    # right after os.replace: the second call is the instant between the rename and the superseded marker.
    assert killed_backfill(*WINDOW, "bf-late", "atlasmart_assets.extracts:_fsync_dir:2") == -signal.SIGKILL
    assert extracts.current_version(env) != shown, "the kill came after the rename"
    with dg.DagsterInstance.ephemeral() as inst:
        assert run_chain(inst, TODAY).success  # today's load: the next publish
    assert (env.versions_dir / shown).is_dir(), (
        f"{shown}, superseded seconds ago, was removed within its grace: a reader that resolved `published` before "
        f"the swap loses its files ({sorted(p.name for p in env.versions_dir.iterdir())})")


def test_a_kill_right_after_a_commit_that_erased_nothing_leaves_superseded_versions_their_grace(
        env, published, monkeypatch) -> None:
    """With a deletion request in force that erases nothing here, a correction killed right after its commit leaves
    no `.erasing-<pub>` marker: until 2026-12-07 every correction wrote one before its commit and removed it after,
    and recovery took the committed marker for an erasure, removing every extract version but the current one at
    once, grace or not (the README lets an erasure, and only an erasure, win over the grace period)."""
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "10")  # the default (set: see killed_backfill)
    monkeypatch.setenv("ATLASMART_VERSION_GRACE_S", "3600")
    published(WINDOW, (TODAY, None))
    deletion_request(env.raw_dir, "DR-0001", line_ids=["no-such-line"])  # in force, names no line of the window
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 19), "B-2026-09-19-02")
    shown = extracts.current_version(env)
    # extracts.swap: its first call in the run is publish's, right after the commit (which erased nothing).
    assert killed_backfill(*WINDOW, "bf-late", "atlasmart_assets.extracts:swap:1") == -signal.SIGKILL
    assert not extracts.erasures_pending(env), "a commit that erases nothing leaves no erasure to finish"
    recover_on_load(Warehouse())
    assert extracts.current_version(env) != shown, "the late batch's publication committed (and is now current)"
    assert (env.versions_dir / shown).is_dir(), (
        f"{shown}, superseded by a publication that erased nothing, was removed within its grace "
        f"({sorted(p.name for p in env.versions_dir.iterdir())})")


def test_a_commit_that_erases_nothing_writes_no_erasure_marker(env, published, monkeypatch) -> None:
    """The marker whose recovery removes every superseded version at once is written only for a commit that erases
    (decided in its hold, before it): a request in force that names no line of the window erases nothing."""
    published(WINDOW, (TODAY, None))
    deletion_request(env.raw_dir, "DR-0001", line_ids=["no-such-line"])
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 19), "B-2026-09-19-02")
    marked: list[str] = []
    real = extracts.erasing
    monkeypatch.setattr(extracts, "erasing", lambda cfg, pub_id: (marked.append(pub_id), real(cfg, pub_id))[1])
    with dg.DagsterInstance.ephemeral() as inst:
        assert run_chain(inst, *WINDOW, {"dagster/backfill": "bf-late"}).success
    assert marked == [], marked

