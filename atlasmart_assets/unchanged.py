"""The days a correction need not build again. A day's current version was built by this release from the same
landing batches and the same customer dimension, no deletion request names a record of its evidence, and its
published rows and mart rows are still the ones its ledger row describes: building it again would give the same
rows, controls and extract bytes. Such a day publishes its current version again as it is (a new ledger row, no
line written); every other day of the window is built and audited."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Collection

import duckdb
import pandas as pd

from atlasmart_assets import candidates, sql
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.connection import GiveWay, LockStats, attach
from atlasmart_assets.warehouse.ledger import Current, DayCandidate
from atlasmart_assets.window import Window


@dataclass(frozen=True)
class Kept:
    """The days published again as they are: what each publishes (its current ledger row), its staged figures
    (rows, unresolved_customers), and the days that qualified by their inputs but whose published rows differ from
    their ledger row (they are built again, which repairs them)."""

    days: dict[str, DayCandidate] = field(default_factory=dict)
    staged: dict[str, dict[str, int]] = field(default_factory=dict)
    differ: tuple[str, ...] = ()


def eligible(current: dict[str, Current], evidence: dict[str, candidates.Evidence], dimension_version: str | None,
             code_version: str, requested: Collection[str], keys: Collection[str]) -> list[str]:
    """The days of `keys` whose current version read what a build now would: the same landing batches (ordered
    sha256s), customer dimension version and release, no deletion request applied then and none naming a record
    of the day now (`requested`), and rows stored with a fingerprint to check them by. A rolled-back day is never
    kept: the version it restored may have been built by another release than the rollback's."""
    out = []
    for day in sorted(keys):
        now, ev = current.get(day), evidence.get(day)
        if (now is not None and ev is not None and now.fingerprint and now.stored_as and now.kind == "publish"
                and now.code_version == code_version and now.dimension_version == dimension_version
                and now.input_sha256 == ev.digest and not now.requests_applied and day not in requested):
            out.append(day)
    return out


def requested_days(con: duckdb.DuckDBPyConnection, deletion_keys: pd.DataFrame, window: Window) -> set[str]:
    """The days of the run's scratch evidence (candidate.raw_lines) with a record, winning or not, whose customer or
    line id a deletion request names: such a day is always built (the build decides what the request takes out)."""
    if deletion_keys.empty:
        return set()
    con.register("requested_keys", deletion_keys)
    try:
        rows = con.execute(sql.text("requested_days"), window.params).fetchall()
    finally:
        con.unregister("requested_keys")
    return {r[0].isoformat() for r in rows}


def verify(wh: Warehouse, run_id: str, window: Window, days: list[str], stats: LockStats,
           give_way: GiveWay | None) -> Kept:
    """One short read of the warehouse: the current ledger rows of `days`, their published staged lines' figures
    (a year's took 0.4 s) and their mart rows, copied into the run's scratch (candidate.kept_revenue_daily, which the
    build adds to its mart candidate). A day is kept if its published lines have the fingerprint and count its
    ledger row recorded and its mart rows are its extract's."""
    if not days:
        return Kept()
    if give_way is not None:
        stats.gave_way.append(give_way())
    with wh.reader(stats=stats) as con:
        found = ledger.current_candidates(con, days)
        figures = candidates.controls(con, "staged.order_lines", window, kind="staged")
        attach(con, wh.scratch_path(run_id), "s")
        cols = ", ".join(ledger.MART_COLUMNS)
        con.execute(f"create or replace table s.candidate.kept_revenue_daily as select {cols} from mart.revenue_daily "
                    "where partition_date between $start and $end and partition_date in (select unnest($days::date[]))",
                    {**window.params, "days": days})
        mart = candidates.mart_rows(con, "s.candidate.kept_revenue_daily", window)
        con.execute("detach s")
    kept, differ = {}, []
    for day in days:
        cand, fig = found.get(day), figures.get(day)
        if (cand is not None and fig is not None and cand.fingerprint == candidates.fingerprint(fig)
                and int(fig["lines"]) == cand.rows and mart.get(day) == json.loads(cand.extract_json).get("rows")):
            kept[day] = cand
        else:
            differ.append(day)
    staged = {d: {"rows": int(figures[d]["lines"]), "unresolved_customers": int(figures[d]["unresolved_customers"])}
              for d in kept}
    return Kept(kept, staged, tuple(differ))

