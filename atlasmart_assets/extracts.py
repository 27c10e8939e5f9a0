"""Certified per-day extracts: canonical content, and a versioned directory swapped in with one atomic rename.

`published` is a symlink to `published_versions/<publication_id>`; a publication stages a complete new
version (unchanged days hard-linked, changed days written and fsynced) and then replaces the symlink, so
a reader of `published/` sees every day of the old version or every day of the new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from atlasmart_assets.settings import Settings

CONTROL_NAMES = ["lines", "orders", "units", "gmv", "cost", "gross_profit"]


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def content_sha256(partition: str, controls: list[int | float], rows: list[dict[str, Any]]) -> str:
    """Hash of what a day publishes: same content, same hash; any change, a new hash."""
    return hashlib.sha256(_canonical({"partition": partition, "controls": controls, "rows": rows}).encode()).hexdigest()


def document(partition: str, controls: list[int | float], rows: list[dict[str, Any]], inputs: dict[str, Any]) -> str:
    """The exact bytes of a day's extract (deterministic: no timestamps, no run ids)."""
    doc = {
        "partition": partition,
        "control_names": CONTROL_NAMES,
        "controls": controls,
        "rows": rows,
        "input": inputs,
        "sha256": content_sha256(partition, controls, rows),
    }
    return json.dumps(doc, sort_keys=True, indent=1) + "\n"


def file_name(partition: str) -> str:
    return f"partition={partition}.json"


def current_version(cfg: Settings) -> str | None:
    link = cfg.published_dir
    return os.readlink(link).rsplit("/", 1)[-1] if link.is_symlink() else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stage(cfg: Settings, version: str, changed: dict[str, str]) -> Path:
    """Build version `version`: the current version's days plus `changed` (partition -> bytes)."""
    target = cfg.versions_dir / version
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    current = current_version(cfg)
    if current:
        for src in (cfg.versions_dir / current).glob("partition=*.json"):
            if src.name[len("partition="):-len(".json")] not in changed:
                os.link(src, target / src.name)
    for partition, text in changed.items():
        path = target / file_name(partition)
        with path.open("w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    _fsync_dir(target)
    return target


def swap(cfg: Settings, version: str) -> None:
    """Point `published` at `version` with one atomic rename."""
    if cfg.published_dir.exists() and not cfg.published_dir.is_symlink():
        raise RuntimeError(f"{cfg.published_dir} is a directory, not AtlasMart's versioned symlink; move it away")
    tmp = cfg.data_dir / f".published.{version}.tmp"
    if tmp.is_symlink():
        tmp.unlink()
    os.symlink(os.path.join(cfg.versions_dir.name, version), tmp)
    os.replace(tmp, cfg.published_dir)
    _fsync_dir(cfg.data_dir)


def prune(cfg: Settings, keep: set[str]) -> None:
    """Remove staged versions no ledger row needs any more (and half-built ones from crashed runs)."""
    if not cfg.versions_dir.exists():
        return
    current = current_version(cfg)
    for path in cfg.versions_dir.iterdir():
        if path.name not in keep and path.name != current:
            shutil.rmtree(path, ignore_errors=True)


def read(cfg: Settings, partition: str) -> dict[str, Any] | None:
    path = cfg.published_dir / file_name(partition)
    return json.loads(path.read_text()) if path.exists() else None
