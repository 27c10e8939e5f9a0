"""Python rows into DuckDB in one statement. DuckDB runs an insert a row at a time (execute or executemany) as a
statement each: a year's 365 landing batches took 1.1 s of the raw append's lock hold that way, one insert from a
registered frame 15 ms."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Iterator, Sequence

import duckdb
import pandas as pd

Columns = Sequence[tuple[str, str]]  # (name, DuckDB type)

_names = itertools.count()


@contextlib.contextmanager
def typed_rows(con: duckdb.DuckDBPyConnection, columns: Columns,
               rows: Sequence[Sequence[Any]]) -> Iterator[str]:
    """A select of `rows` with each column cast to its type, for the statements run inside the block (the frame is
    registered on `con` only while the block runs). Object columns: DuckDB types each from its Python values (None
    stays NULL, not NaN), then the casts decide. Callers pass values of their column's type: a float NaN would read
    as NULL, and a column mixing large integers with floats would read as doubles."""
    name = f"_rows_{next(_names)}"
    frame = pd.DataFrame([tuple(row) for row in rows], columns=[c for c, _ in columns], dtype=object)
    con.register(name, frame)
    try:
        yield "select " + ", ".join(f"cast({c} as {t}) as {c}" for c, t in columns) + f" from {name}"
    finally:
        # A statement refused inside a transaction aborts it, and the unregister is refused too: the refusal is
        # the error to raise, and the rollback drops the registration.
        with contextlib.suppress(duckdb.TransactionException):
            con.unregister(name)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, columns: Columns, rows: Sequence[Sequence[Any]],
           suffix: str = "") -> None:
    """Insert `rows` (in `columns`' order) into `table`'s columns of those names, in one statement; `suffix` ends
    it (e.g. `on conflict do nothing`). No rows, nothing written."""
    if not rows:
        return
    names = ", ".join(c for c, _ in columns)
    with typed_rows(con, columns, rows) as select:
        con.execute(f"insert into {table} ({names}) {select} {suffix}")


def create_table(con: duckdb.DuckDBPyConnection, table: str, columns: Columns, rows: Sequence[Sequence[Any]] = (),
                 temp: bool = False) -> None:
    """(Re)create `table` with `columns` (a temp table if `temp`), holding `rows`."""
    kind = "temp table" if temp else "table"
    con.execute(f"create or replace {kind} {table} ({', '.join(f'{c} {t}' for c, t in columns)})")
    insert_rows(con, table, columns, rows)
