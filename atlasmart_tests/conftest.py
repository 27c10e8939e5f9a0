"""Shared fixtures: a real DuckDB data dir and a copy of the shipped raw evidence per test."""

import os

# The partitions definition reads ATLASMART_AS_OF at import: pin the lab's "today" before anything imports it.
os.environ.setdefault("ATLASMART_AS_OF", "2026-09-22")
os.environ.setdefault("ATLASMART_START_DATE", "2026-09-01")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import dagster as dg  # noqa: E402
import pytest  # noqa: E402

from atlasmart_assets import settings  # noqa: E402
# Load the code location once, before any test changes the environment: the warehouse resource binds (as
# dg.EnvVar) exactly the ATLASMART_* variables set at load time, as a deployment does.
from atlasmart_assets import definitions  # noqa: E402,F401
from atlasmart_tests import state  # noqa: E402

REPO_RAW = Path(__file__).resolve().parent.parent / "raw"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> settings.Settings:
    """ATLASMART_RAW_DIR (a writable copy of raw/) and ATLASMART_DATA_DIR under tmp_path."""
    raw = tmp_path / "raw"
    shutil.copytree(REPO_RAW, raw)
    monkeypatch.setenv("ATLASMART_RAW_DIR", str(raw))
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "data"))
    return settings.load()


@pytest.fixture
def instance() -> dg.DagsterInstance:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def snapshot():
    return state.snapshot
