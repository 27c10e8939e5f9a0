"""One select per model; `text(name)` returns the body of `name.sql`; `migrations()` the numbered schema changes."""

from __future__ import annotations

import functools
import re
from pathlib import Path

SQL_DIR = Path(__file__).resolve().parent
MIGRATION = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql\Z")


@functools.cache
def text(name: str) -> str:
    return (SQL_DIR / f"{name}.sql").read_text()


@functools.cache
def migrations() -> tuple[tuple[int, str, str], ...]:
    """(number, name, body) of every migration, in order; numbers are unique and never reused."""
    found = []
    for path in sorted((SQL_DIR / "migrations").glob("*.sql")):
        match = MIGRATION.match(path.name)
        if not match:
            raise RuntimeError(f"{path}: a migration is named NNN_snake_case.sql")
        found.append((int(match.group(1)), match.group(2), path.read_text()))
    numbers = [n for n, _, _ in found]
    if len(set(numbers)) != len(numbers):
        raise RuntimeError(f"duplicate migration numbers in {SQL_DIR / 'migrations'}: {numbers}")
    return tuple(found)
