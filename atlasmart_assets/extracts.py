"""Certified per-day extracts: canonical content, and a versioned directory swapped in with one atomic rename.

`published` is a symlink to `published_versions/<publication_id>`; a publication stages a complete new
version (unchanged days hard-linked, changed days written and fsynced, and `index.json` naming every day's
file and sha256) and then replaces the symlink.

The reader contract: resolve `published` once (or read `published/index.json` and then only the files it
names, relative to the resolved version), and read every file of one pass from that version. Such a reader
never sees two versions mixed; a superseded version stays on disk for ATLASMART_VERSION_GRACE_S after it
was replaced, so a slow reader finishes its pass. A reader that opens `published/partition=D.json` files one
by one through the link gets each file whole (per-file atomicity) but may mix versions across files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from atlasmart_assets.contract import CONTROL_NAMES
from atlasmart_assets.settings import Settings



def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def content_sha256(partition: str, controls: list[int | float], rows: list[dict[str, Any]]) -> str:
    """Hash of what a day publishes: same content, same hash; any change, a new hash."""
    return hashlib.sha256(_canonical({"partition": partition, "controls": controls, "rows": rows}).encode()).hexdigest()


def document(partition: str, controls: list[int | float], rows: list[dict[str, Any]], inputs: dict[str, Any]) -> str:
    """The exact bytes of a day's extract (deterministic: no timestamps, no run ids)."""
    doc = {
        "partition": partition,
        "control_names": list(CONTROL_NAMES),
        "controls": controls,
        "rows": rows,
        "input": inputs,
        "sha256": content_sha256(partition, controls, rows),
    }
    return json.dumps(doc, sort_keys=True, indent=1) + "\n"


def file_name(partition: str) -> str:
    return f"partition={partition}.json"


def partition_of(path: Path) -> str:
    """The partition a day's extract file is named for (`file_name`'s inverse)."""
    return path.name[len("partition="):-len(".json")]


def current_version(cfg: Settings) -> str | None:
    link = cfg.published_dir
    return os.readlink(link).rsplit("/", 1)[-1] if link.is_symlink() else None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


INDEX = "index.json"
SUPERSEDED = ".superseded_at"


def _write(path: Path, text: str) -> None:
    with path.open("w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def resolve(cfg: Settings) -> Path | None:
    """The version directory `published` points at now: resolve once, then read only inside it."""
    version = current_version(cfg)
    return cfg.versions_dir / version if version else None


def write_ahead(cfg: Settings, version: str, changed: dict[str, str]) -> None:
    """The changed days' files of version `version` (partition -> bytes), written and fsynced, before the commit
    takes the lock: nobody reads the directory until the swap, and it holds only this publication's own extracts
    (never another version's, which an erasure may be removing meanwhile)."""
    target = cfg.versions_dir / version
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for partition, text in changed.items():
        _write(target / file_name(partition), text)


def complete(cfg: Settings, version: str, changed: dict[str, str]) -> Path:
    """Finish version `version`, in the commit's hold: the current version's other days hard-linked, a changed day's
    file written (again, if another publisher's prune of half-built versions took it since `write_ahead`, or
    never written ahead), and `index.json` naming every day's file and sha256."""
    target = cfg.versions_dir / version
    target.mkdir(parents=True, exist_ok=True)
    digests = {}
    for partition, text in changed.items():
        data = text.encode()
        path = target / file_name(partition)
        if not path.is_file() or path.stat().st_size != len(data):
            _write(path, text)
        digests[partition] = hashlib.sha256(data).hexdigest()
    current = current_version(cfg)
    if current:
        # A linked day's sha256 is the one the current version's index names: the same file (today's load would
        # otherwise read and hash every other day of the year inside its hold).
        indexed = _index_digests(cfg.versions_dir / current)
        for src in (cfg.versions_dir / current).glob("partition=*.json"):
            partition = partition_of(src)
            if partition not in changed:
                dst = target / src.name
                dst.unlink(missing_ok=True)
                os.link(src, dst)
                digests[partition] = indexed.get(partition) or hashlib.sha256(dst.read_bytes()).hexdigest()
    for stray in target.glob("partition=*.json"):
        if partition_of(stray) not in digests:
            stray.unlink()
    _write(target / INDEX, json.dumps({
        "publication_id": version,
        "partitions": {p: {"file": file_name(p), "sha256": digest} for p, digest in sorted(digests.items())},
    }, sort_keys=True, indent=1) + "\n")
    _fsync_dir(target)
    return target


def _index_digests(version_dir: Path) -> dict[str, str]:
    """Each day's sha256 as `version_dir`'s index names it (none if it has no readable index)."""
    try:
        index = json.loads((version_dir / INDEX).read_text())
        return {p: str(e["sha256"]) for p, e in index["partitions"].items() if e.get("file") == file_name(p)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def stage(cfg: Settings, version: str, changed: dict[str, str]) -> Path:
    """Build version `version` at once: the current version's days plus `changed` (partition -> bytes)."""
    write_ahead(cfg, version, changed)
    return complete(cfg, version, changed)


def swap(cfg: Settings, version: str) -> None:
    """Point `published` at `version` with one atomic rename."""
    if cfg.published_dir.exists() and not cfg.published_dir.is_symlink():
        raise RuntimeError(f"{cfg.published_dir} is a directory, not AtlasMart's versioned symlink; move it away")
    tmp = cfg.data_dir / f".published.{version}.tmp"
    if tmp.is_symlink():
        tmp.unlink()
    previous = current_version(cfg)
    superseded = (cfg.versions_dir / previous / SUPERSEDED
                  if previous and previous != version and (cfg.versions_dir / previous).is_dir() else None)
    # Marked before the rename too: killed between the two, the version readers resolved a moment ago still has
    # its grace (unmarked, it was judged by when it was built and removed at once: a review found it). The mark
    # on the version still current is harmless: the current one is never removed.
    if superseded is not None:
        superseded.touch()
    os.symlink(os.path.join(cfg.versions_dir.name, version), tmp)
    os.replace(tmp, cfg.published_dir)
    _fsync_dir(cfg.data_dir)
    if superseded is not None:
        superseded.touch()  # its grace counts from the swap


def clock(cfg: Settings) -> float:
    """Now, as the versions' directory stamps a file it writes: what a marker's time is compared with (the
    filesystem's clock, not this process's, which may lag or lead it)."""
    # Beside the versions, not among them: nothing that lists them ever sees it.
    probe = cfg.versions_dir.parent / f".clock-{os.getpid()}-{threading.get_ident()}"
    probe.touch()
    try:
        return probe.stat().st_mtime
    finally:
        probe.unlink(missing_ok=True)


# Beside the versions: "publication P may erase" from before its commit until its erasure pruned the versions. A
# publish killed or failed after committing an erasure leaves it, and recovery finishes the prune.
ERASING = ".erasing-"


def erasing(cfg: Settings, pub_id: str) -> None:
    """Record, durably, that `pub_id`'s commit may erase: every other version must go once it committed."""
    path = cfg.versions_dir.parent / f"{ERASING}{pub_id}"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fh.write(pub_id)
        fh.flush()
        os.fsync(fh.fileno())


def erased(cfg: Settings, pub_id: str) -> None:
    (cfg.versions_dir.parent / f"{ERASING}{pub_id}").unlink(missing_ok=True)


def erasures_pending(cfg: Settings) -> list[str]:
    return sorted(p.name[len(ERASING):] for p in cfg.versions_dir.parent.glob(f"{ERASING}*"))


def prune(cfg: Settings, keep: set[str], immediately: bool = False, superseded: bool | None = None,
          superseded_by: float | None = None) -> None:
    """Remove versions no ledger row needs any more (and half-built ones from crashed runs), once they have been
    superseded for longer than the grace period. `superseded`: only the versions a swap superseded (True), only
    those never swapped in (False: half-built, or another publisher's before its commit), or both (None).
    `superseded_by`: only those superseded by then (`keep` was judged then: a later swap is a later publisher's to
    judge)."""
    if not cfg.versions_dir.exists():
        return
    current = current_version(cfg)
    cutoff = time.time() - cfg.version_grace_s
    for path in cfg.versions_dir.iterdir():
        if path.name in keep or path.name == current:
            continue
        marker = path / SUPERSEDED
        marked = marker.exists()
        if superseded is not None and marked != superseded:
            continue
        try:
            since = marker.stat().st_mtime if marked else path.stat().st_mtime
        except FileNotFoundError:  # another publisher's prune took it meanwhile
            continue
        if superseded_by is not None and since > superseded_by:
            continue
        if immediately or since < cutoff:
            shutil.rmtree(path, ignore_errors=True)


def read(cfg: Settings, partition: str) -> dict[str, Any] | None:
    path = cfg.published_dir / file_name(partition)
    return json.loads(path.read_text()) if path.exists() else None
