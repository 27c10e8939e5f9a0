"""Why a backfill's scratch work is paused rather than slowed beside today's load: how much a memory-bound and a
CPU-bound loop on one core slow while another process works on the other core (streaming memory, or spinning).

    python -m bench.contention [--repeats 5]

Each loop is pinned to the first CPU; the neighbour to the last one, at niceness 19 (lower priority changes nothing
here: it has a core of its own). Prints medians and the ratio to the loop alone."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Callable

import numpy as np

NEIGHBOURS = {
    "streams memory": "import numpy as np\na = np.random.rand(50_000_000)\nwhile True:\n    a.sum()",
    "spins": "while True:\n    pass",
}


def _memory_bound() -> Callable[[], None]:
    a = np.random.rand(50_000_000)
    return lambda: [a.sum() for _ in range(5)] and None


def _cpu_bound() -> Callable[[], None]:
    def spin() -> None:
        s = 0
        for i in range(5_000_000):
            s += i * i
    return spin


def _timed(work: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("needs at least two CPUs")
    os.sched_setaffinity(0, {cpus[0]})
    loops = {"memory-bound (numpy sum of 400 MB, 5x)": _memory_bound(), "CPU-bound (Python loop)": _cpu_bound()}
    print(f"| loop on CPU {cpus[0]} | alone | neighbour on CPU {cpus[-1]} | beside it | ratio |")
    print("|---|---|---|---|---|")
    for name, work in loops.items():
        alone = _timed(work, args.repeats)
        for what, code in NEIGHBOURS.items():
            neighbour = subprocess.Popen(["taskset", "-c", str(cpus[-1]), "nice", "-n", "19", sys.executable, "-c",
                                          code])
            try:
                time.sleep(2.0)  # its array allocated, its loop running
                beside = _timed(work, args.repeats)
            finally:
                neighbour.kill()
                neighbour.wait()
            print(f"| {name} | {alone:.3f} s | {what} | {beside:.3f} s | {beside / alone:.2f}x |")


if __name__ == "__main__":
    main()
