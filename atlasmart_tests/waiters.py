"""A process waiting on the warehouse lock, as its announcement shows it to a long writer: kept fresh, never taking
the lock (the tests of chunks given up to waiters)."""

from __future__ import annotations

import threading
from pathlib import Path

from atlasmart_assets.warehouse.connection import waiters_dir


class StandingWaiter:
    """An announcement on `warehouse`'s lock, refreshed every 0.2 s from `start()` until `stop()`."""

    def __init__(self, warehouse: Path, name: str = "999999-1") -> None:
        self.marker = waiters_dir(warehouse) / name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_fresh, daemon=True)

    def _keep_fresh(self) -> None:
        while not self._stop.is_set():
            self.marker.touch()
            self._stop.wait(0.2)

    @property
    def started(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self.marker.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.marker.unlink(missing_ok=True)
