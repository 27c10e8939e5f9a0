"""The customer dimension as a sequence of immutable batches: raw/customers.json first, then
raw/customers/<batch_id>.json in name order; a later batch replaces the whole SCD2 history of each customer it
lists. Validated per customer (no overlap, no gap after the first valid_from); errors name batch and customer."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from atlasmart_assets.contract import BATCH_NAME, shown_id

FIRST_BATCH = "customers"
ATTRIBUTES = ("country", "tier")


class DimensionError(Exception):
    """A dimension batch that cannot be used; the message names the batch file and the customer."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"dimension batch {path}: {problem}")
        self.path, self.problem = path, problem

    def __reduce__(self) -> tuple[type, tuple[Path, str], dict]:
        # Raised in a backfill's scratch process and rebuilt in the step's (pausable.py).
        return type(self), (self.path, self.problem), self.__dict__


@dataclass(frozen=True)
class DimensionBatch:
    batch_id: str
    path: Path
    sha256: str
    versions: tuple[dict[str, Any], ...]

    @property
    def customers(self) -> set[str]:
        return {v["customer_id"] for v in self.versions}


def paths(raw_dir: Path) -> list[Path]:
    """The first batch and every entry of raw/customers/ (one not named as a batch is refused, not passed over)."""
    later = sorted((raw_dir / "customers").iterdir()) if (raw_dir / "customers").is_dir() else []
    return [raw_dir / "customers.json", *later]


# A bound is a date (its midnight, UTC) or a time with its zone; the join compares it with the order's time, so a
# version that starts at noon is not in force in the morning (until 2026-12-07 a bound was cut to its date: a
# review found a noon change re-tiering a morning order, and gaps or overlaps within a day accepted).
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})")


def _instant(value: Any, path: Path, customer: str, name: str) -> dt.datetime | None:
    """A version's bound as a UTC time without zone (as order times are compared), or None for an open valid_to."""
    if value is None and name == "valid_to":
        return None
    try:
        if isinstance(value, str) and _DATE.fullmatch(value):
            return dt.datetime.combine(dt.date.fromisoformat(value), dt.time())
        if isinstance(value, str) and _INSTANT.fullmatch(value):
            return dt.datetime.fromisoformat(value).astimezone(dt.timezone.utc).replace(tzinfo=None)
    except ValueError:
        pass
    raise DimensionError(path, f"customer {shown_id(customer)}: {name} {shown_id(repr(value))} is not a date "
                               "(YYYY-MM-DD) or a time with its zone (YYYY-MM-DDThh:mm:ssZ)")


def _shown(moment: dt.datetime | None) -> str:
    if moment is None:
        return "open"
    return moment.date().isoformat() if moment.time() == dt.time() else f"{moment.isoformat()}Z"


def _validate(path: Path, versions: list[dict[str, Any]]) -> None:
    by_customer: dict[str, list[dict[str, Any]]] = {}
    for v in versions:
        if not isinstance(v, dict) or not v.get("customer_id"):
            raise DimensionError(path, f"a version without customer_id: {v!r}"[:300])
        if not isinstance(v["customer_id"], str) or not v["customer_id"].strip():
            # A number here would be a customer no line names (line customer ids are text), and sorts with none.
            raise DimensionError(path, f"customer_id {v['customer_id']!r} is not a text id"[:300])
        for name in ATTRIBUTES:
            if not isinstance(v.get(name), str) or not v[name]:
                raise DimensionError(path, f"customer {v['customer_id']}: {name} is missing")
        by_customer.setdefault(v["customer_id"], []).append(v)
    for customer, rows in by_customer.items():
        spans = sorted(((_instant(r.get("valid_from"), path, customer, "valid_from"),
                         _instant(r.get("valid_to"), path, customer, "valid_to")) for r in rows),
                       key=lambda s: s[0])
        for (start, end), (next_start, _) in zip(spans, spans[1:]):
            if end is None or end > next_start:
                raise DimensionError(path, f"customer {customer}: versions overlap ({_shown(start)}..{_shown(end)} "
                                           f"and from {_shown(next_start)})")
            if end < next_start:
                raise DimensionError(path, f"customer {customer}: a gap between {_shown(end)} and "
                                           f"{_shown(next_start)}")
        for start, end in spans:
            if end is not None and end <= start:
                raise DimensionError(path, f"customer {customer}: valid_to {_shown(end)} is not after valid_from "
                                           f"{_shown(start)}")


def load(raw_dir: Path) -> list[DimensionBatch]:
    out = []
    for path in paths(raw_dir):
        if path.parent.name != "customers" and not path.is_file():
            raise DimensionError(path, "the dimension's first batch is missing")
        if path.parent.name == "customers" and (path.suffix != ".json" or not BATCH_NAME.fullmatch(path.stem)):
            raise DimensionError(path, "a dimension batch is named <batch_id>.json (letters, digits, '_', '.', '-')")
        if path.parent.name == "customers" and path.stem == FIRST_BATCH:
            raise DimensionError(path, f"a later dimension batch cannot be named {FIRST_BATCH!r}, the id of the first "
                                       f"batch (raw/{FIRST_BATCH}.json): name it by its own batch id")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DimensionError(path, f"cannot be read: {exc.strerror or exc}") from exc
        try:
            doc = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise DimensionError(path, f"not readable JSON: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("customers"), list):
            raise DimensionError(path, "expected an object with a 'customers' list")
        _validate(path, doc["customers"])
        batch_id = FIRST_BATCH if path.parent.name != "customers" else path.stem
        out.append(DimensionBatch(batch_id, path, hashlib.sha256(data).hexdigest(), tuple(doc["customers"])))
    return out


def effective(batches: list[DimensionBatch]) -> pd.DataFrame:
    """The SCD2 versions in force: each later batch replaces the whole history of every customer it lists."""
    current: dict[str, list[dict[str, Any]]] = {}
    for batch in batches:
        listed: dict[str, list[dict[str, Any]]] = {}
        for v in batch.versions:
            c = v["customer_id"]
            listed.setdefault(c, []).append({
                "customer_id": c, "country": v["country"], "tier": v["tier"],
                "valid_from": pd.Timestamp(_instant(v["valid_from"], batch.path, c, "valid_from")),
                "valid_to": pd.Timestamp(_instant(v.get("valid_to"), batch.path, c, "valid_to"))})
        current.update(listed)
    rows = [v for _, versions in sorted(current.items()) for v in versions]
    return pd.DataFrame(rows, columns=["customer_id", "country", "tier", "valid_from", "valid_to"])


def version(batches: list[DimensionBatch]) -> str:
    """The dimension version a publication joined: a digest of the ordered batch set."""
    return hashlib.sha256("\n".join(f"{b.batch_id}:{b.sha256}" for b in batches).encode()).hexdigest()[:16]


def identity(batches: list[DimensionBatch]) -> list[dict[str, str]]:
    return [{"batch": b.batch_id, "sha256": b.sha256} for b in batches]
