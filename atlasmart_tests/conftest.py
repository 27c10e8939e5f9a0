"""Shared fixtures: a real DuckDB data dir and a copy of the shipped raw evidence per test."""

import atexit
import fcntl
import hashlib
import os
import shutil
import tempfile

# The partitions definition reads ATLASMART_AS_OF at import: pin the lab's "today" before anything imports it.
os.environ.setdefault("ATLASMART_AS_OF", "2026-09-22")
os.environ.setdefault("ATLASMART_START_DATE", "2026-09-01")
# `make test` exports the repo's DAGSTER_HOME (var/dagster_home); tests never write run history there.
os.environ["DAGSTER_HOME"] = tempfile.mkdtemp(prefix="atlasmart-tests-home-")
atexit.register(shutil.rmtree, os.environ["DAGSTER_HOME"], ignore_errors=True)  # each test process's own

from pathlib import Path  # noqa: E402
from typing import Callable, Iterator  # noqa: E402

import dagster as dg  # noqa: E402
import pytest  # noqa: E402

from atlasmart_assets import settings  # noqa: E402
# Load the code location once, before any test changes the environment: the warehouse resource binds (as
# dg.EnvVar) exactly the ATLASMART_* variables set at load time, as a deployment does.
from atlasmart_assets import definitions  # noqa: E402,F401
from atlasmart_assets.lab import run_chain  # noqa: E402
from atlasmart_tests import state  # noqa: E402

REPO_RAW = Path(__file__).resolve().parent.parent / "raw"
# The ATLASMART_* settings every test starts from: a cached publication is built under these alone.
BASELINE = {k: v for k, v in os.environ.items() if k.startswith("ATLASMART_")}


LOST_GROUP = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup` pytest-xdist keeps an `xdist_group` on one worker by appending `@<group>` to each
    of its tests' ids. Where it could not (pytest 9.2 with pytest-xdist 3.8), the groups are silently spread over
    the workers: each such test fails at setup, before its fixtures, saying why."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        groups = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                  for m in item.iter_markers("xdist_group")}
        suffix = "@" + "_".join(sorted(groups))
        if groups and not item.nodeid.endswith(suffix):
            item.stash[LOST_GROUP] = (f"--dist loadgroup lost this test's xdist_group ({item.nodeid} does not end in "
                                      f"{suffix}): this pytest and pytest-xdist do not group tests (see README, "
                                      "Dependencies)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    lost = item.stash.get(LOST_GROUP, None)
    if lost:
        pytest.fail(lost, pytrace=False)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> settings.Settings:
    """ATLASMART_RAW_DIR (a writable copy of raw/) and ATLASMART_DATA_DIR under tmp_path."""
    raw = tmp_path / "raw"
    shutil.copytree(REPO_RAW, raw)
    monkeypatch.setenv("ATLASMART_RAW_DIR", str(raw))
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "data"))
    return settings.load()


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    """An in-memory Dagster instance: runs execute and record events as on disk, without SQLite's fsyncs."""
    with dg.DagsterInstance.ephemeral() as inst:
        yield inst


# (start, end) or (start, end, tags): end None is a single-partition run; tags as run_chain takes them.
Run = tuple[str, str | None] | tuple[str, str | None, dict[str, str]]


@pytest.fixture(scope="session")
def published_state(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """`published_state((start, end), (start, end, tags), ...)` is the data dir those runs of the daily job leave on
    the shipped raw (end None: a single-partition run; tags e.g. a backfill's), to be copied, never written. Each
    sequence runs once per session, in whichever pytest-xdist worker asks first (their base temps sit side by side
    under one root), under the baseline settings (not the asking test's). Ask before patching anything the runs
    would call."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "published-cache"
    root.mkdir(exist_ok=True)

    def build(*runs: Run) -> Path:
        key = tuple((run[0], run[1], tuple(sorted(run[2].items())) if len(run) > 2 else ()) for run in runs)
        cached = root / hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        with open(f"{cached}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker waits for the runs rather than repeating them
            if not (cached / "done").exists():
                shutil.rmtree(cached, ignore_errors=True)
                shutil.copytree(REPO_RAW, cached / "raw")
                with pytest.MonkeyPatch.context() as mp, dg.DagsterInstance.ephemeral() as inst:
                    for name in [k for k in os.environ if k.startswith("ATLASMART_") and k not in BASELINE]:
                        mp.delenv(name)  # a setting the asking test made is not the state other tests share
                    for name, value in BASELINE.items():
                        mp.setenv(name, value)
                    mp.setenv("ATLASMART_RAW_DIR", str(cached / "raw"))
                    mp.setenv("ATLASMART_DATA_DIR", str(cached / "data"))
                    for start, end, tags in key:
                        assert run_chain(inst, start, end, dict(tags)).success, (start, end, tags)
                (cached / "done").write_text(repr(key))
        return cached / "data"
    return build


@pytest.fixture
def published(env: settings.Settings, published_state: Callable[..., Path]) -> Callable[..., None]:
    """`published(*runs)` gives the test's data dir a copy of `published_state(*runs)`. The test's instance holds
    none of those runs."""
    def make(*runs: Run) -> None:
        shutil.copytree(published_state(*runs), env.data_dir, symlinks=True)
    return make


@pytest.fixture
def snapshot():
    return state.snapshot
