"""The reference evidence every build applies besides the day's batches: the customer dimension (its batches)
and the deletion requests. Parsed, validated and checked against their first-seen fingerprints."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd

from atlasmart_assets import deletions, dimension
from atlasmart_assets.audits import Audit
from atlasmart_assets.contract import STAGED_ORDER_LINES
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse.connection import LockStats
from atlasmart_assets.warehouse.rows import insert_rows

REFERENCE_VALID = "staged_order_lines_reference_data_valid"
DESCRIPTION = ("The customer dimension's batches and the deletion requests parse, validate (no overlapping or gapped "
               "versions per customer, one subject per request) and are unchanged since first loaded (blocking).")


@dataclass
class Reference:
    batches: list[dimension.DimensionBatch] = field(default_factory=list)
    requests: list[deletions.DeletionRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def customers(self) -> pd.DataFrame:
        return dimension.effective(self.batches)

    @property
    def deletion_keys(self) -> pd.DataFrame:
        return deletions.keys(self.requests)

    @property
    def dimension_version(self) -> str | None:
        return dimension.version(self.batches) if self.batches else None

    def audit(self) -> Audit:
        unknown = unknown_subjects(self)
        text = "; ".join(self.problems) or (
            f"dimension version {self.dimension_version} ({len(self.batches)} batch(es)), "
            f"{len(self.requests)} deletion request(s)"
            + (f"; accepted: {', '.join(unknown)} name(s) a customer the dimension does not know (their lines, if "
               "any, are staged with tier unknown and suppressed like any other)" if unknown else ""))
        return Audit(REFERENCE_VALID, STAGED_ORDER_LINES, not self.problems, description=text,
                     figures={"dimension_batches": [b.batch_id for b in self.batches],
                              "deletion_requests": [r.request_id for r in self.requests],
                              "requests_for_unknown_customers": unknown})


def load(wh: Warehouse, stats: LockStats | None = None) -> Reference:
    """Parse and validate; compare with what was first loaded (changed or vanished files are problems). `stats`:
    the caller's lock figures, which count its read of what was first loaded."""
    ref = Reference()
    raw_dir = wh.settings.raw_dir
    try:
        ref.batches = dimension.load(raw_dir)
    except dimension.DimensionError as exc:
        ref.problems.append(str(exc))
    try:
        ref.requests = deletions.load(raw_dir)
    except deletions.RequestError as exc:
        ref.problems.append(str(exc))
    with wh.reader(stats=stats) as con:
        seen_batches = {r[0]: r for r in con.execute("select batch_id, file, sha256, first_run_id "
                                                     "from raw.dimension_batches").fetchall()}
        seen_requests = {r[0]: r for r in con.execute("select request_id, file, sha256, first_run_id "
                                                      "from raw.deletion_requests").fetchall()}
    loaded = not ref.problems
    ref.problems += _unchanged("dimension batch", seen_batches, {b.batch_id: b.sha256 for b in ref.batches}, loaded,
                               "batches are never removed",
                               "deliver a correction as a new batch raw/customers/<batch_id>.json")
    ref.problems += _unchanged("deletion request", seen_requests, {r.request_id: r.sha256 for r in ref.requests},
                               loaded, "a request is never withdrawn by deleting its file",
                               "put its first bytes back; an amended request is a new file "
                               "raw/deletions/<request_id>.json")
    return ref


def _unchanged(what: str, seen: dict[str, tuple[Any, ...]], now: dict[str, str], loaded: bool, vanished_hint: str,
               changed_hint: str) -> list[str]:
    """Problems with files first loaded earlier (id -> (id, file, sha256, first run)): vanished or changed."""
    problems = []
    for key, (_, file, sha, run) in sorted(seen.items()):
        if key not in now and loaded:
            problems.append(f"{what} {file} (first loaded by run {run}) has vanished: {vanished_hint}")
        elif key in now and now[key] != sha:
            problems.append(f"{what} {file} changed since run {run} first loaded it (sha256 {sha[:12]} then, "
                            f"{now[key][:12]} now): {changed_hint}")
    return problems


DIMENSION_BATCH_COLUMNS = (("batch_id", "varchar"), ("file", "varchar"), ("sha256", "varchar"),
                           ("customers", "bigint"), ("first_run_id", "varchar"))
REQUEST_COLUMNS = (("request_id", "varchar"), ("file", "varchar"), ("sha256", "varchar"), ("requested_at", "varchar"),
                   ("reason", "varchar"), ("customer_id", "varchar"), ("line_ids", "varchar"),
                   ("first_run_id", "varchar"))
FIRST_LOADED = (("first_loaded_at", "now()"),)


def keys_in_force(wh: Warehouse) -> pd.DataFrame:
    """The keys (request_id, customer_id, line_id) of every deletion request in force: those on disk, and every one
    ever loaded (a request is never withdrawn by deleting its file). Raises deletions.RequestError, naming the file,
    when a request on disk cannot be read: it may be a new request, whose subject nothing may publish again."""
    requests = deletions.load(wh.settings.raw_dir)
    with wh.reader() as con:
        recorded = con.execute("select request_id, customer_id, line_ids from raw.deletion_requests").fetchall()
    rows = [(r, c, None) for r, c, _ in recorded if c] + \
        [(r, None, line) for r, _, lines in recorded if lines for line in json.loads(lines)]
    loaded = pd.DataFrame(rows, columns=["request_id", "customer_id", "line_id"], dtype="object")
    return pd.concat([deletions.keys(requests), loaded], ignore_index=True).drop_duplicates()


def record_first_sightings(con: duckdb.DuckDBPyConnection, ref: Reference, run_id: str) -> None:
    """Record each dimension batch and deletion request not recorded yet, as first loaded by `run_id`: one statement
    per table, in the caller's hold (a row at a time, 3,000 requests held the warehouse 6 s on every run)."""
    insert_rows(con, "raw.dimension_batches", DIMENSION_BATCH_COLUMNS,
                [(b.batch_id, str(b.path), b.sha256, len(b.customers), run_id) for b in ref.batches],
                suffix="on conflict do nothing", computed=FIRST_LOADED)
    insert_rows(con, "raw.deletion_requests", REQUEST_COLUMNS,
                [(r.request_id, str(r.path), r.sha256, r.requested_at, r.reason, r.customer_id,
                  json.dumps(list(r.line_ids)) if r.line_ids else None, run_id) for r in ref.requests],
                suffix="on conflict do nothing", computed=FIRST_LOADED)


def unknown_subjects(ref: Reference) -> list[str]:
    """Requests whose customer the dimension does not know: accepted and reported. Lines of such a customer are
    staged (tier unknown), so the request may still take lines out: a review found them told as affecting no day."""
    known = {c for b in ref.batches for c in b.customers}
    return [r.request_id for r in ref.requests if r.customer_id and r.customer_id not in known]


def identity(ref: Reference) -> dict[str, Any]:
    return {"dimension_version": ref.dimension_version, "dimension_batches": dimension.identity(ref.batches)}
