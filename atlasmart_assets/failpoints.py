"""Test-only hooks, inert unless their variable is set: a SIGKILL at a named point of the publish, and a gate that
holds a run's step until a test opens it (how a test constructs overlap and queueing instead of hoping for it).

Gate protocol, in the directory ATLASMART_GATE_DIR names: a step arriving at `point` touches
`<run_id>.<point>.arrived`, then waits until `<point>.open` (every run) or `<run_id>.open` (every point of that
run) exists, and touches `<run_id>.<point>.passed`. It waits at most ATLASMART_GATE_TIMEOUT_S (300 s), then fails
the step: a forgotten gate is a loud failure, never a silent pass. A `hold` point is a gate only for a test that
asks for it (`<point>.hold` in the directory), so tests that hold every step at its start do not meet it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

FAILPOINT_ENV = "ATLASMART_FAILPOINT"
FAILPOINT_TRACE_ENV = "ATLASMART_FAILPOINT_TRACE"
GATE_DIR_ENV = "ATLASMART_GATE_DIR"
GATE_TIMEOUT_ENV = "ATLASMART_GATE_TIMEOUT_S"
DEFAULT_GATE_TIMEOUT_S = 300.0
GATE_POLL_S = 0.1


class GateNotOpened(RuntimeError):
    """A test held this step at a gate and never opened it."""


def failpoint(name: str) -> None:
    """Crash tests: record that this point was reached (in the directory ATLASMART_FAILPOINT_TRACE names), and
    SIGKILL this process here when ATLASMART_FAILPOINT names the point."""
    trace = os.environ.get(FAILPOINT_TRACE_ENV)
    if trace:
        Path(trace, name).touch()
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def gate(point: str, run_id: str) -> None:
    """Hold this step at `point` until a test opens the gate (no-op unless ATLASMART_GATE_DIR is set)."""
    directory = os.environ.get(GATE_DIR_ENV)
    if not directory:
        return
    gates = Path(directory)
    timeout_s = float(os.environ.get(GATE_TIMEOUT_ENV, DEFAULT_GATE_TIMEOUT_S))
    opened = (gates / f"{point}.open", gates / f"{run_id}.open")
    (gates / f"{run_id}.{point}.arrived").touch()
    deadline = time.monotonic() + timeout_s
    while not any(p.exists() for p in opened):
        if time.monotonic() > deadline:
            raise GateNotOpened(f"run {run_id} waited {timeout_s:.0f}s at gate {point!r} in {gates}; "
                                f"nothing created {opened[0].name} or {opened[1].name}")
        time.sleep(GATE_POLL_S)
    (gates / f"{run_id}.{point}.passed").touch()


def hold(point: str, run_id: str) -> None:
    """A gate at `point` where the gate directory holds `<point>.hold` (no-op otherwise)."""
    directory = os.environ.get(GATE_DIR_ENV)
    if directory and Path(directory, f"{point}.hold").exists():
        gate(point, run_id)
