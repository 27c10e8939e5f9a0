"""A separate reader process: polls mart totals and the extracts' totals until told to stop."""

import json
import sys
import time
from pathlib import Path

import duckdb

if __name__ == "__main__":
    data_dir, out, stop = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    seen: list[dict] = []
    while not stop.exists():
        try:
            with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
                total = con.execute("select sum(cost) from mart.revenue_daily").fetchone()[0]
            seen.append({"mart_cost": float(total)})
        except duckdb.Error:
            pass
        costs = [json.loads(p.read_text())["controls"][4] for p in sorted((data_dir / "published").glob("partition=*.json"))]
        seen.append({"extract_cost": sum(costs)})
        time.sleep(0.005)
    out.write_text(json.dumps(seen))
