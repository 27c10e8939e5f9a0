"""Numbered schema migrations (sql/migrations/NNN_name.sql), each applied once, in order, in its own transaction."""

from __future__ import annotations

import duckdb

from atlasmart_assets import sql
from atlasmart_assets.warehouse.connection import transaction

LEDGER = "audit.schema_migrations"


def has_table(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> bool:
    return bool(con.execute("select count(*) from information_schema.tables where table_schema = $s "
                            "and table_name = $t", {"s": schema, "t": table}).fetchone()[0])


def has_column(con: duckdb.DuckDBPyConnection, schema: str, table: str, column: str) -> bool:
    """Whether the table has the column: a reader of a warehouse no writer has migrated yet may not."""
    return bool(con.execute("select count(*) from information_schema.columns where table_schema = $s "
                            "and table_name = $t and column_name = $c",
                            {"s": schema, "t": table, "c": column}).fetchone()[0])


def applied(con: duckdb.DuckDBPyConnection) -> set[int]:
    if not has_table(con, "audit", "schema_migrations"):
        return set()
    return {r[0] for r in con.execute(f"select version from {LEDGER}").fetchall()}


def pending(con: duckdb.DuckDBPyConnection) -> list[int]:
    done = applied(con)
    return [n for n, _, _ in sql.migrations() if n not in done]


def apply(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply every pending migration; returns the numbers applied. A warehouse of release 0.1 (schema_version
    table, no migration ledger) already has migration 1."""
    if not has_table(con, "audit", "schema_migrations"):
        baseline = has_table(con, "audit", "schema_version")
        con.execute("create schema if not exists audit")
        con.execute(f"create table {LEDGER} (version integer primary key, name varchar not null, "
                    "applied_at timestamp not null)")
        if baseline:
            con.execute(f"insert into {LEDGER} values (1, 'initial', now())")
    done = applied(con)
    ran = []
    for number, name, body in sql.migrations():
        if number in done:
            continue
        with transaction(con):
            con.execute(body)
            con.execute(f"insert into {LEDGER} values ($n, $name, now())", {"n": number, "name": name})
        ran.append(number)
    return ran
