"""One select per model; `text(name)` returns the body of `name.sql`."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent


@functools.cache
def text(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text()


@functools.cache
def fingerprint(name: str | None = None) -> str:
    """A short hash of one model (or of every model: part of the code version recorded with each publication)."""
    digest = hashlib.sha256()
    for path in sorted(SQL_DIR.glob(f"{name or '*'}.sql")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:12]
