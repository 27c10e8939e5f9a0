"""What a reader of the published tables waits for, on warehouses the year's bench left (or any two warehouses).

    python -m bench.readers WAREHOUSE [WAREHOUSE ...] [--repeats 7] [--day 2026-03-01] [--customer C00042]

Runs the same queries on each warehouse through a read-only connection, alternating the warehouses query by
query, and prints the median milliseconds per query and warehouse: whole year and one day of the fact, the fact by
day, one customer's staged lines. The warehouses may be of different releases (the fact stored, or computed from
the staged versions); every query reads only the published views.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import duckdb

QUERIES = {
    "fact, whole year: count(*), sum(gmv)": "select count(*), sum(gmv) from fact.fct_order_lines",
    "fact, one day: count(*), sum(gmv)": "select count(*), sum(gmv) from fact.fct_order_lines "
                                         "where partition_date = $day",
    "fact by day: sum(gmv), sum(gross_profit)": "select partition_date, sum(gmv), sum(gross_profit) "
                                                "from fact.fct_order_lines group by all",
    "staged, one customer": "select count(*), sum(quantity) from staged.order_lines where customer_id = $customer",
}


def timed(path: Path, query: str, params: dict[str, str]) -> tuple[float, list[tuple]]:
    with duckdb.connect(str(path), read_only=True) as con:
        started = time.perf_counter()
        rows = con.execute(query, {k: v for k, v in params.items() if f"${k}" in query}).fetchall()
        return (time.perf_counter() - started) * 1000, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("warehouses", nargs="+", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--day", default="2026-03-01")
    parser.add_argument("--customer", default="C00042")
    args = parser.parse_args(argv)
    params = {"day": args.day, "customer": args.customer}
    times: dict[tuple[str, Path], list[float]] = {}
    answers: dict[str, set[str]] = {}
    for _ in range(args.repeats):
        for name, query in QUERIES.items():
            for path in args.warehouses:
                ms, rows = timed(path, query, params)
                times.setdefault((name, path), []).append(ms)
                answers.setdefault(name, set()).add(repr(sorted(rows)))
    print(f"median ms of {args.repeats}, read-only connections, warehouses alternating")
    print(" | ".join(["query", *(str(p) for p in args.warehouses), "same answer"]))
    for name in QUERIES:
        cells = [f"{statistics.median(times[(name, p)]):.0f}" for p in args.warehouses]
        print(" | ".join([name, *cells, "yes" if len(answers[name]) == 1 else "NO"]))


if __name__ == "__main__":
    main()
