"""Python rows into DuckDB in one statement. DuckDB runs an insert a row at a time (execute or executemany) as a
statement each: a year's 365 landing batches took 1.1 s of the raw append's lock hold that way, one insert from a
registered frame 15 ms."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Sequence

import duckdb
import pandas as pd

Columns = Sequence[tuple[str, str]]  # (name, DuckDB type)

_names = itertools.count()


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, columns: Columns, rows: Sequence[Sequence[Any]],
                suffix: str = "", computed: Sequence[tuple[str, str]] = ()) -> None:
    """Insert `rows` (in `columns`' order) into `table`'s columns of those names, in one statement, each value cast
    to its column's type; `computed` adds (column, SQL expression) pairs (e.g. `now()`), `suffix` ends the statement
    (e.g. `on conflict do nothing`, `order by ...`). No rows, nothing written.

    The rows are a frame registered on `con` for the statement only. Object columns: DuckDB types each from its
    Python values (None stays NULL, not NaN), then the casts decide. Callers pass values of their column's type: a
    float NaN would read as NULL, and a column mixing large integers with floats would read as doubles."""
    if not rows:
        return
    name = f"_rows_{next(_names)}"
    con.register(name, pd.DataFrame([tuple(row) for row in rows], columns=[c for c, _ in columns], dtype=object))
    try:
        names = ", ".join([c for c, _ in columns] + [c for c, _ in computed])
        values = ", ".join([f"cast({c} as {t})" for c, t in columns] + [expr for _, expr in computed])
        con.execute(f"insert into {table} ({names}) select {values} from {name} {suffix}")
    finally:
        # A statement refused inside a transaction aborts it, and the unregister is refused too: the refusal is
        # the error to raise, and the rollback drops the registration.
        with contextlib.suppress(duckdb.TransactionException):
            con.unregister(name)


def create_table(con: duckdb.DuckDBPyConnection, table: str, columns: Columns, rows: Sequence[Sequence[Any]] = (),
                 temp: bool = False) -> None:
    """(Re)create `table` with `columns` (a temp table if `temp`), holding `rows`."""
    kind = "temp table" if temp else "table"
    con.execute(f"create or replace {kind} {table} ({', '.join(f'{c} {t}' for c, t in columns)})")
    insert_rows(con, table, columns, rows)
