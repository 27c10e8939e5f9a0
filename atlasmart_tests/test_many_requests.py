"""Deletion requests accumulate and are never withdrawn, so what a run does with them must not grow as lines x requests
or hold the warehouse a statement per request. Found by a review at a year's scale: 3,000 requests on record made
the staged build's join on `customer_id = ... or line_id = ...` a nested loop that ran out of memory, and recording
them a row at a time held the warehouse 6 s in every run, today's load's included."""

import datetime as dt
import json
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from atlasmart_assets import candidates, deletions, dimension, generate, reference, sql
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.window import Window
from atlasmart_tests.evidence_edits import deletion_request
from atlasmart_tests.plans import Watched, merged_scratch, operators, plan_of

START = dt.date(2026, 8, 1)
WINDOW = Window.of(START.isoformat(), (START + dt.timedelta(days=5)).isoformat())
# DuckDB's joins that pair every row of one side with every row of the other (a condition that is not an equality).
LOOPS = ("NESTED_LOOP_JOIN", "BLOCKWISE_NL_JOIN", "CROSS_PRODUCT", "PIECEWISE_MERGE_JOIN")


def _plan(con: duckdb.DuckDBPyConnection, query: str, params: dict[str, Any] | None = None) -> list[str]:
    return [node.get("name", "") for node in operators(plan_of(con, query, params))]


def _scratch(tmp_path: Path) -> tuple[duckdb.DuckDBPyConnection, pd.DataFrame]:
    """Six synthetic days merged into a scratch database, and deletion keys naming two customers and a few lines:
    one of them a line of a named customer (named twice), one a line no day holds."""
    raw = tmp_path / "raw"
    generate.write_synthetic(raw, START, 6, 300, 25)
    con = merged_scratch(tmp_path / "scratch.duckdb", raw, WINDOW)
    customers = [r[0] for r in con.execute("select distinct customer_id from candidate.merged_lines order by 1 "
                                           "limit 2").fetchall()]
    of_first = con.execute("select line_id from candidate.merged_lines where customer_id = $c order by line_id limit 1",
                           {"c": customers[0]}).fetchone()[0]
    others = [r[0] for r in con.execute("select line_id from candidate.merged_lines where customer_id not in "
                                        "(select unnest($c)) order by line_id limit 3", {"c": customers}).fetchall()]
    deletion_request(raw, "DR-0001", customer_id=customers[0])
    deletion_request(raw, "DR-0002", customer_id=customers[1])
    deletion_request(raw, "DR-0003", line_ids=[of_first, others[0], "no-such-line"])
    deletion_request(raw, "DR-0004", line_ids=others[1:])
    keys = deletions.keys(deletions.load(raw))
    candidates.build_staged(con, dimension.effective(dimension.load(raw)), keys, WINDOW)
    candidates.build(con)
    return con, keys


def test_what_a_build_reads_of_deletion_requests_it_joins_by_equality(tmp_path: Path) -> None:
    con, keys = _scratch(tmp_path)
    params = WINDOW.params
    candidates.suppressed(con, WINDOW, {WINDOW.keys[0]: ["DR-0001"]})  # leaves applied_requests behind
    for name, query in (("suppressed_lines", sql.text("suppressed_lines").format(days="true")),
                        ("newly_suppressed", sql.text("newly_suppressed")),
                        ("suppressed_key_counts", sql.text("suppressed_key_counts"))):
        plan = _plan(con, query, params)
        assert "HASH_JOIN" in plan and not set(plan) & set(LOOPS), (name, plan)
    # The published history's scan (the stale check and the daily scan of every published day).
    con.execute("create schema published")
    con.execute("create view published.order_lines as select * from candidate.staged_order_lines")
    con.register("deletion_keys_in_force", keys)
    plan = _plan(con, sql.text("suppressed_published"))
    assert "HASH_JOIN" in plan and not set(plan) & set(LOOPS), plan


def test_the_equality_joins_find_what_a_join_on_either_key_finds(tmp_path: Path) -> None:
    con, keys = _scratch(tmp_path)
    params = WINDOW.params
    either = "(m.customer_id = k.customer_id or m.line_id = k.line_id)"
    expected = con.execute(
        "select m.partition_date, m.line_id, min(k.request_id) from candidate.merged_lines m "
        "join candidate.deletion_keys k "
        f"on {either} where m.partition_date between $start and $end group by all order by all", params).fetchall()
    got = con.execute("select partition_date, line_id, request_id from candidate.suppressed_lines order by all"
                      ).fetchall()
    assert got == expected and len({r[2] for r in got}) == 4, got
    # Per day, the suppressed lines no request the day's current version applied names (counted back by the
    # row-delta audit), against the join on either key, line by line, for several sets of applied requests.
    requests_of = {}
    for day, line_id, request_id in con.execute(
            "select s.partition_date::varchar, s.line_id, k.request_id from candidate.suppressed_lines s join "
            f"candidate.deletion_keys k on {either.replace('m.', 's.')}").fetchall():
        requests_of.setdefault((day, line_id), set()).add(request_id)
    assert sum(1 for r in requests_of.values() if len(r) == 2) == 1  # the line named by its customer and its id
    days = sorted({d for d, _ in requests_of})
    for applied in ({}, {d: ["DR-0001"] for d in days}, {d: ["DR-0003"] for d in days},
                    {days[0]: ["DR-0001", "DR-0002", "DR-0003", "DR-0004"], days[1]: ["DR-0004"]}):
        got = {d: x["newly"] for d, x in candidates.suppressed(con, WINDOW, applied).items()}
        expected = {d: sum(1 for (day, _), r in requests_of.items() if day == d and not r & set(applied.get(d, ())))
                    for d in days}
        assert got == expected, (applied, got, expected)
    # The fact candidate holds none of them: the audit's count is of nothing.
    assert con.execute(sql.text("suppressed_key_counts"), params).fetchall() == []
    con.execute("create schema published")
    con.execute("create view published.order_lines as select * from candidate.merged_lines")
    con.register("deletion_keys_in_force", keys)
    held = con.execute(sql.text("suppressed_published")).fetchall()
    assert held == con.execute(
        "select m.partition_date, k.request_id, count(distinct m.line_id) from published.order_lines m join "
        f"deletion_keys_in_force k on {either} group by all order by all").fetchall()


def _recorded(wh: Warehouse, ref: reference.Reference, run_id: str) -> int:
    """How many statements recording `ref`'s first sightings runs."""
    statements: list[str] = []
    with wh.writer() as con:
        watched = Watched(con, lambda query, _: statements.append(query))
        reference.record_first_sightings(watched, ref, run_id)  # type: ignore[arg-type]
    return len(statements)


def test_recording_requests_takes_the_same_statements_for_one_or_hundreds(env, tmp_path: Path) -> None:  # noqa: ANN001
    wh = Warehouse()
    deletion_request(env.raw_dir, "DR-0001", customer_id="C00001")
    one = _recorded(wh, reference.load(wh), "run-1")
    for k in range(2, 402):
        deletion_request(env.raw_dir, f"DR-{k:04d}", line_ids=[f"L-{k}", f"L-{k}-b"])
    many = _recorded(wh, reference.load(wh), "run-2")
    assert one == many, (one, many)
    again = _recorded(wh, reference.load(wh), "run-3")
    assert again == one
    with wh.reader() as con:
        rows = con.execute("select request_id, first_run_id, customer_id, line_ids from raw.deletion_requests "
                           "order by request_id").fetchall()
        batches = con.execute("select first_run_id, customers > 0 from raw.dimension_batches").fetchall()
    assert len(rows) == 401
    # First sightings are kept: a later run records nothing over them.
    assert rows[0] == ("DR-0001", "run-1", "C00001", None)
    assert rows[1] == ("DR-0002", "run-2", None, json.dumps(["L-2", "L-2-b"]))
    assert {r[1] for r in rows[1:]} == {"run-2"}
    assert batches == [("run-1", True)]
