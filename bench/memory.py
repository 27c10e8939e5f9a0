"""The peak memory of a child's whole process tree: the sum of its processes' PSS (a page shared by several is
counted once, split among them), sampled while it runs. A backfill's step forks its scratch work and both hold
memory at once; `ru_maxrss` from wait4 is the largest single process only (the year's first load on 2026-12-07: its
tree 1,201 MiB, its largest process 1,068 MiB)."""

from __future__ import annotations

import threading
from pathlib import Path

SAMPLE_S = 0.2


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_pss_kib(pid: int) -> int:
    """The PSS of `pid` and every process under it, now."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _pss_kib(p)
        todo += _children(p)
    return total


class TreePeak:
    """Samples the tree of `pid` every SAMPLE_S in a thread of its own until `stop()`, which returns the peak in
    MiB (None where /proc gives no PSS: not Linux)."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="bench-tree-peak", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            self._peak = max(self._peak, tree_pss_kib(self._pid))
            self._done.wait(SAMPLE_S)

    @property
    def peak_mib(self) -> float | None:
        """The peak so far (None before a sample found any)."""
        return round(self._peak / 1024, 1) if self._peak else None

    def stop(self) -> float | None:
        self._done.set()
        self._thread.join(timeout=10)
        return self.peak_mib
