"""A correction run in its own process, so a test can SIGKILL it (ATLASMART_FAILPOINT, or a kill once the failpoint
trace shows it inside the publish, or held at the test gate).

`start()` forks the run from a forkserver that imported the code location once, so a kill test does not pay
Dagster's import in every worker process; `python -m atlasmart_tests.crash_worker START END` runs it standalone.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Mapping

import dagster as dg

from atlasmart_assets.lab import run_chain

BACKFILL_ID = "bf-crash"
_CONTEXT: list[ForkServerContext] = []


def correct(start: str, end: str) -> int:
    result = run_chain(dg.DagsterInstance.ephemeral(), start, end, {"dagster/backfill": BACKFILL_ID})
    return 0 if result.success else 1


def _forked(start: str, end: str, env: Mapping[str, str]) -> None:
    # The forkserver's environment is the one of the test that first started it: take this test's instead.
    for key in [k for k in os.environ if k.startswith("ATLASMART_")]:
        del os.environ[key]
    os.environ.update(env)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.exit(correct(start, end))


def start(start: str, end: str, extra_env: Mapping[str, str] | None = None) -> BaseProcess:
    """Fork a correction of [start, end] with this process's ATLASMART_* environment plus `extra_env`."""
    if not _CONTEXT:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["atlasmart_tests.crash_worker", "atlasmart_assets.definitions"])
        _CONTEXT.append(context)
    env = {k: v for k, v in os.environ.items() if k.startswith("ATLASMART_")} | dict(extra_env or {})
    proc = _CONTEXT[0].Process(target=_forked, args=(start, end, env), daemon=True)
    proc.start()
    return proc


if __name__ == "__main__":
    sys.exit(correct(sys.argv[1], sys.argv[2]))
