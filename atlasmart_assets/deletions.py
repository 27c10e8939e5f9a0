"""Deletion requests (raw/deletions/<request_id>.json): `{"request_id", "requested_at", "reason", "customer_id"}`
or with `"line_ids": [...]` instead of `customer_id`. Immutable once loaded; applied at every build of any range."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

REQUEST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")


class RequestError(Exception):
    """A deletion request that cannot be applied; the message names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"deletion request {path}: {problem}")
        self.path, self.problem = path, problem

    def __reduce__(self) -> tuple[type, tuple[Path, str], dict]:
        # Raised in a backfill's scratch process and rebuilt in the step's (pausable.py).
        return type(self), (self.path, self.problem), self.__dict__


@dataclass(frozen=True)
class DeletionRequest:
    request_id: str
    path: Path
    sha256: str
    requested_at: str
    reason: str
    customer_id: str | None
    line_ids: tuple[str, ...]

    @property
    def subject(self) -> str:
        return f"customer {self.customer_id}" if self.customer_id else f"{len(self.line_ids)} line(s)"


def _parse(path: Path) -> DeletionRequest:
    if path.suffix != ".json" or not REQUEST_ID.match(path.stem):
        raise RequestError(path, "is not named as a deletion request: <request_id>.json (letters, digits, '_', '.', "
                                 "'-'); every entry of raw/deletions/ is one")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RequestError(path, f"cannot be read: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(path, f"not readable JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise RequestError(path, "expected an object")
    missing = [k for k in ("request_id", "requested_at", "reason") if not isinstance(doc.get(k), str) or not doc[k]]
    if missing:
        raise RequestError(path, f"lacks {', '.join(missing)}")
    if doc["request_id"] != path.stem or not REQUEST_ID.match(doc["request_id"]):
        raise RequestError(path, f"request_id {doc['request_id']!r} must be the file's name (letters, digits, "
                                 "'_', '.', '-')")
    customer, lines = doc.get("customer_id"), doc.get("line_ids")
    if (customer is None) == (lines is None):
        raise RequestError(path, "names exactly one subject: customer_id or line_ids")
    if customer is not None and (not isinstance(customer, str) or not customer):
        raise RequestError(path, "customer_id is not a non-empty string")
    if lines is not None and (not isinstance(lines, list) or not lines
                              or not all(isinstance(x, str) and x for x in lines)):
        raise RequestError(path, "line_ids is not a non-empty list of line ids")
    return DeletionRequest(doc["request_id"], path, hashlib.sha256(data).hexdigest(), doc["requested_at"],
                           doc["reason"], customer, tuple(lines or ()))


def load(raw_dir: Path) -> list[DeletionRequest]:
    folder = raw_dir / "deletions"
    # Every entry, not *.json only: an erasure saved as DR-7.JSON passed over in silence would publish its subject.
    return [_parse(p) for p in sorted(folder.iterdir())] if folder.is_dir() else []


def keys(requests: list[DeletionRequest]) -> pd.DataFrame:
    """One row per suppressed key: (request_id, customer_id, line_id) with one of the two set."""
    rows: list[dict[str, Any]] = []
    for r in requests:
        if r.customer_id:
            rows.append({"request_id": r.request_id, "customer_id": r.customer_id, "line_id": None})
        rows += [{"request_id": r.request_id, "customer_id": None, "line_id": line} for line in r.line_ids]
    return pd.DataFrame(rows, columns=["request_id", "customer_id", "line_id"], dtype="object")
