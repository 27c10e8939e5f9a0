"""Python rows go into DuckDB in one statement, typed as their table says: NULL stays NULL, a conflict keeps the row
already there, and nothing of the frame stays registered on the connection."""

import datetime as dt
import hashlib
import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from atlasmart_assets.lab import run_chain
from atlasmart_assets.warehouse.rows import create_table, insert_rows
from atlasmart_tests import state

COLUMNS = (("day", "date"), ("name", "varchar"), ("n", "bigint"), ("money", "decimal(18, 2)"))


def _registered(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("select view_name from duckdb_views() where view_name like '_rows_%'").fetchall()]


def test_rows_are_typed_as_the_table_says_and_null_stays_null(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    create_table(con, "t", COLUMNS, [("2026-09-01", "a", 1, "12.30"), (dt.date(2026, 9, 2), None, None, None),
                                     ("2026-09-03", "c", 2**62, 0.1)])
    assert con.execute("select * from t order by day").fetchall() == [
        (dt.date(2026, 9, 1), "a", 1, Decimal("12.30")),
        (dt.date(2026, 9, 2), None, None, None),
        (dt.date(2026, 9, 3), "c", 2**62, Decimal("0.10")),
    ]
    assert con.execute("select data_type from information_schema.columns where table_name = 't' "
                       "order by ordinal_position").fetchall() == [("DATE",), ("VARCHAR",), ("BIGINT",),
                                                                    ("DECIMAL(18,2)",)]
    assert _registered(con) == []
    create_table(con, "nulls", COLUMNS, [("2026-09-01", None, None, None), ("2026-09-02", None, None, None)])
    assert con.execute("select count(*) from nulls where name is null and n is null and money is null").fetchone() \
        == (2,), "a column of None only is NULL, whatever type DuckDB would give it"
    text = "it's'); drop table t; --\x00"
    create_table(con, "texts", (("s", "varchar"),), [(text,)])
    assert con.execute("select s from texts").fetchone() == (text,) and con.execute("select count(*) from t").fetchone() \
        == (3,), "a value is data, never SQL"


def test_a_conflict_keeps_the_row_already_there_and_no_rows_change_nothing(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute("create table k (day date, name varchar, n bigint, money decimal(18, 2), primary key (day, name))")
    insert_rows(con, "k", COLUMNS, [("2026-09-01", "a", 1, 1)])
    insert_rows(con, "k", COLUMNS, [("2026-09-01", "a", 2, 2), ("2026-09-02", "a", 3, 3)], "on conflict do nothing")
    insert_rows(con, "k", COLUMNS, [])
    assert con.execute("select day, n from k order by day").fetchall() == [(dt.date(2026, 9, 1), 1),
                                                                          (dt.date(2026, 9, 2), 3)]


def test_a_refused_insert_leaves_nothing_registered(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    create_table(con, "t", COLUMNS)
    with pytest.raises(duckdb.ConversionException):
        insert_rows(con, "t", COLUMNS, [("not a date", "a", 1, 1)])
    assert _registered(con) == [] and con.execute("select count(*) from t").fetchone() == (0,)


def test_each_landing_batch_is_recorded_once_as_first_loaded(env, instance) -> None:
    window = ("2026-09-17", "2026-09-19")
    first = run_chain(instance, *window)
    assert first.success
    again = run_chain(instance, *window)
    assert again.success
    rows = state.table_rows(env, "(select partition_date, batch_id, file, sha256, kind, records, controls, "
                                 "first_run_id from raw.batches where partition_date between '2026-09-17' and "
                                 "'2026-09-19' order by 1, 2)")
    files = sorted(p for day in ("2026-09-17", "2026-09-18", "2026-09-19")
                   for p in env.raw_dir.glob(f"**/*{day}*.json"))
    assert len(rows) == len(files) >= 3
    by_file = {row[2]: row for row in rows}
    for path in files:
        day, batch, file, sha256, kind, records, controls, run_id = by_file[str(path)]
        manifest = json.loads(path.read_text())["manifest"]
        assert (day.isoformat(), batch) == (manifest["partition"], manifest["extraction_batch"])
        assert sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        assert records == manifest["records"] and isinstance(records, int)
        assert json.loads(controls) == [manifest["controls"][k] for k in
                                        ("lines", "orders", "units", "gmv", "cost", "gross_profit")]
        assert run_id == first.run_id, "a batch seen again keeps its first sighting"


def test_a_refused_insert_inside_a_transaction_raises_its_own_error(tmp_path: Path) -> None:
    """Inside a transaction a refused insert aborts it: the error raised is the refusal (a duplicate key here),
    not the aborted transaction's refusal to unregister the frame."""
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute("create table k (day date, name varchar, n bigint, money decimal(18, 2), primary key (day, name))")
    insert_rows(con, "k", COLUMNS, [("2026-09-01", "a", 1, 1)])
    con.execute("begin transaction")
    with pytest.raises(duckdb.ConstraintException, match="Duplicate key"):
        insert_rows(con, "k", COLUMNS, [("2026-09-01", "a", 2, 2)])
    con.execute("rollback")
    assert _registered(con) == [] and con.execute("select n from k").fetchall() == [(1,)]
