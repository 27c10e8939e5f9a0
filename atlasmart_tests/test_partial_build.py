"""A correction that builds some days of its window (late batches landed on a few of them) plans its staged build as
one of every day: the merged lines, filtered to those days, are not the side a hash join builds where the dimension
is smaller than they are. DuckDB builds on the side it estimates smaller; its join-order pass estimated them at a few
hundred rows, and the build runs without it (candidates.joins_as_written). Found at a year's scale: a re-publish
after late batches on every third day ran out of memory at the default 1 GB limit, the merged lines of 122 days on
the build side of the merge and customer joins; the same days built without that pass peaked at 511 MiB (README: A
build of some days plans as a build of every day)."""

import datetime as dt
from pathlib import Path
from typing import Any

import duckdb

from atlasmart_assets import candidates, deletions, dimension, generate, reference
from atlasmart_assets.window import Window
from atlasmart_tests.plans import Watched, merged_scratch, operators, plan_of

START = dt.date(2026, 8, 1)
DAYS = 30
WINDOW = Window.of(START.isoformat(), (START + dt.timedelta(DAYS - 1)).isoformat())


STAGED = "create or replace table candidate.staged_order_lines as "


def _recording(con: duckdb.DuckDBPyConnection) -> tuple[Watched, list[list[dict[str, Any]]]]:
    """`con`, recording the plan of each staged build run on it as DuckDB plans it then (its settings in force)."""
    plans: list[list[dict[str, Any]]] = []

    def before(query: str, params: Any) -> None:
        if query.startswith(STAGED):
            plans.append(plan_of(con, query[len(STAGED):], params))

    return Watched(con, before), plans


def _joins(plan: list[dict[str, Any]]) -> list[str]:
    return [node["extra_info"]["Join Type"] for node in operators(plan) if "Join Type" in node.get("extra_info", {})]


def _scratch(tmp_path: Path) -> tuple[duckdb.DuckDBPyConnection, reference.Reference, list[str]]:
    """A window of synthetic days with a late batch on every third, parsed and merged into a scratch database."""
    raw = tmp_path / "raw"
    generate.write_synthetic(raw, START, DAYS, 400, 30)
    late = [(START + dt.timedelta(k)).isoformat() for k in range(0, DAYS, 3)]
    for day in late:
        generate.late_delta(raw, dt.date.fromisoformat(day), f"B-{day}-02", new=5, restate=3, retract=2)
    con = merged_scratch(tmp_path / "scratch.duckdb", raw, WINDOW)
    ref = reference.Reference()
    ref.batches = dimension.load(raw)
    ref.requests = deletions.load(raw)
    return con, ref, late


def test_a_build_of_some_days_never_puts_the_merged_lines_on_a_join_s_build_side(tmp_path: Path) -> None:
    con, ref, late = _scratch(tmp_path)
    recording, plans = _recording(con)
    candidates.build_staged(recording, ref.customers, ref.deletion_keys, WINDOW, late)  # type: ignore[arg-type]
    candidates.build_staged(recording, ref.customers, ref.deletion_keys, WINDOW)  # type: ignore[arg-type]
    some, every = (_joins(plan) for plan in plans)
    # DuckDB's RIGHT joins are those whose sides it swapped: the left input (here the merged lines) is then built.
    assert some and not [j for j in some if j.startswith("RIGHT")], some
    assert not [j for j in every if j.startswith("RIGHT")], every
    built = con.execute("select distinct partition_date::varchar from candidate.staged_order_lines").fetchall()
    assert len(built) == DAYS


def test_the_connection_orders_joins_by_its_estimates_again_after_the_build(tmp_path: Path) -> None:
    con, ref, late = _scratch(tmp_path)
    candidates.build_staged(con, ref.customers, ref.deletion_keys, WINDOW, late)
    assert con.execute("select current_setting('disabled_optimizers')").fetchone()[0] == ""
