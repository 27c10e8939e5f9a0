"""Deterministic raw evidence: the lab's two days, a short history, and N days x M lines for scale work."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
from pathlib import Path
from typing import Any

from atlasmart_assets import evidence

SOURCE = "atlasmart-oms"
SCHEMA_VERSION = 2
COUNTRIES = ("US", "DE", "FR", "GB", "JP")
TIERS = ("bronze", "silver", "gold")
SEQUENCE_BASE = dt.date(2026, 1, 1)

# (line, order, customer, sku, quantity, unit_price, unit_cost): the seed lab's evidence, controls
# [8, 5, 10, 690, 425, 265] and [9, 7, 11, 740, 450, 290]. L0007 is the line once published at a
# legacy cost of 40.
LAB_LINES: dict[str, list[tuple[str, str, str, str, int, float, float]]] = {
    "2026-09-20": [
        ("L0001", "O0001", "C00001", "SKU-A", 1, 100, 60),
        ("L0002", "O0001", "C00001", "SKU-B", 2, 50, 30),
        ("L0003", "O0002", "C00002", "SKU-C", 1, 120, 70),
        ("L0004", "O0003", "C00003", "SKU-A", 1, 100, 60),
        ("L0005", "O0003", "C00003", "SKU-D", 2, 40, 25),
        ("L0006", "O0004", "C00004", "SKU-E", 1, 90, 70),
        ("L0007", "O0005", "C00005", "SKU-F", 1, 60, 30),
        ("L0008", "O0005", "C00005", "SKU-G", 1, 40, 25),
    ],
    "2026-09-21": [
        ("L0009", "O0006", "C00001", "SKU-A", 1, 100, 60),
        ("L0010", "O0006", "C00001", "SKU-B", 1, 50, 30),
        ("L0011", "O0007", "C00002", "SKU-C", 1, 120, 70),
        ("L0012", "O0008", "C00006", "SKU-D", 2, 40, 25),
        ("L0013", "O0009", "C00003", "SKU-E", 1, 90, 55),
        ("L0014", "O0010", "C00004", "SKU-F", 1, 60, 30),
        ("L0015", "O0011", "C00007", "SKU-G", 1, 40, 25),
        ("L0016", "O0011", "C00007", "SKU-B", 2, 50, 30),
        ("L0017", "O0012", "C00005", "SKU-H", 1, 100, 70),
    ],
}
# A retransmission: L0004 first arrived at a superseded price; the later source sequence wins.
LAB_RETRANSMITTED = {"2026-09-20": [("L0004", 95)]}

LAB_CUSTOMERS: list[dict[str, Any]] = [
    {"customer_id": "C00001", "country": "US", "tier": "silver", "valid_from": "2026-01-01", "valid_to": "2026-09-15"},
    {"customer_id": "C00001", "country": "US", "tier": "gold", "valid_from": "2026-09-15", "valid_to": None},
    {"customer_id": "C00002", "country": "DE", "tier": "gold", "valid_from": "2026-01-01", "valid_to": None},
    {"customer_id": "C00003", "country": "FR", "tier": "bronze", "valid_from": "2026-01-01", "valid_to": "2026-09-21"},
    {"customer_id": "C00003", "country": "FR", "tier": "silver", "valid_from": "2026-09-21", "valid_to": None},
    {"customer_id": "C00004", "country": "GB", "tier": "silver", "valid_from": "2026-01-01", "valid_to": None},
    {"customer_id": "C00005", "country": "US", "tier": "bronze", "valid_from": "2026-01-01", "valid_to": None},
    {"customer_id": "C00006", "country": "JP", "tier": "gold", "valid_from": "2026-01-01", "valid_to": None},
    {"customer_id": "C00007", "country": "DE", "tier": "bronze", "valid_from": "2026-01-01", "valid_to": None},
]


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else round(float(x), 2)


def controls_of(lines: list[dict[str, Any]]) -> dict[str, int | float]:
    """Source control totals over the latest version of each line."""
    latest: dict[str, dict[str, Any]] = {}
    for line in lines:
        prev = latest.get(line["line_id"])
        if prev is None or line["source_sequence"] > prev["source_sequence"]:
            latest[line["line_id"]] = line
    rows = list(latest.values())
    gmv = sum(r["quantity"] * r["unit_price"] for r in rows)
    cost = sum(r["quantity"] * r["unit_cost"] for r in rows)
    return {
        "lines": len(rows),
        "orders": len({r["order_id"] for r in rows}),
        "units": sum(r["quantity"] for r in rows),
        "gmv": _num(round(gmv, 2)),
        "cost": _num(round(cost, 2)),
        "gross_profit": _num(round(gmv - cost, 2)),
    }


def raw_document(day: dt.date, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """A raw partition file: manifest header with the source's own controls, then the lines as received."""
    extracted = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(1, 0))
    return {
        "manifest": {
            "partition": day.isoformat(),
            "source": SOURCE,
            "schema_version": SCHEMA_VERSION,
            "extraction_batch": f"B-{day.isoformat()}-01",
            "extracted_at": extracted.isoformat() + "Z",
            "source_high_sequence": max(line["source_sequence"] for line in lines) if lines else 0,
            "records": len(lines),
            "controls": controls_of(lines),
        },
        "lines": lines,
    }


def dump_raw(doc: dict[str, Any]) -> str:
    """One line of JSON per order line, so a raw file diffs and greps well."""
    body = ",\n  ".join(json.dumps(line, separators=(",", ":")) for line in doc["lines"])
    return '{\n "manifest": ' + json.dumps(doc["manifest"]) + ',\n "lines": [\n  ' + body + "\n ]\n}\n"


def write_raw(raw_dir: Path, day: dt.date, lines: list[dict[str, Any]]) -> Path:
    raw_dir.mkdir(parents=True, exist_ok=True)
    path = raw_dir / f"partition={day.isoformat()}.json"
    path.write_text(dump_raw(raw_document(day, lines)))
    return path


def _sequence(day: dt.date, i: int) -> int:
    return (day - SEQUENCE_BASE).days * 1_000_000 + i + 1


def _event_time(day: dt.date, i: int, n: int) -> str:
    seconds = (i * 86_399) // max(n, 1)
    return (dt.datetime.combine(day, dt.time()) + dt.timedelta(seconds=seconds)).isoformat() + "Z"


def lab_lines(day: str) -> list[dict[str, Any]]:
    d = dt.date.fromisoformat(day)
    base = LAB_LINES[day]
    out: list[dict[str, Any]] = []
    seq = 0
    for line_id, price in LAB_RETRANSMITTED.get(day, []):
        src = next(row for row in base if row[0] == line_id)
        out.append(_line(d, seq, len(base), src[:5] + (price, src[6])))
        seq += 1
    for row in base:
        out.append(_line(d, seq, len(base), row))
        seq += 1
    return out


def _line(day: dt.date, i: int, n: int, row: tuple[str, str, str, str, int, float, float]) -> dict[str, Any]:
    line_id, order_id, customer_id, sku, qty, price, cost = row
    return {
        "line_id": f"{day.isoformat()}-{line_id}",
        "order_id": f"{day.isoformat()}-{order_id}",
        "customer_id": customer_id,
        "sku": sku,
        "quantity": qty,
        "unit_price": _num(price),
        "unit_cost": _num(cost),
        "event_time": _event_time(day, i, n),
        "source_sequence": _sequence(day, i),
    }


def synthetic_lines(day: dt.date, n_lines: int, n_customers: int, seed: int = 7) -> list[dict[str, Any]]:
    """n_lines deterministic lines for one day (about 1 % are retransmissions of an earlier line)."""
    rng = random.Random(seed * 1_000_003 + day.toordinal())
    lines: list[dict[str, Any]] = []
    order = 0
    i = 0
    while i < n_lines:
        order += 1
        customer = f"C{rng.randint(1, n_customers):05d}"
        for _ in range(rng.randint(1, 4)):
            if i >= n_lines:
                break
            price = round(rng.uniform(5, 200), 2)
            row = (f"L{i + 1:06d}", f"O{order:06d}", customer, f"SKU-{rng.randint(1, 500):04d}",
                   rng.randint(1, 5), price, round(price * rng.uniform(0.4, 0.8), 2))
            if rng.random() < 0.01:
                lines.append(_line(day, i, n_lines, row[:5] + (round(price * 0.9, 2), row[6])))
            lines.append(_line(day, i, n_lines, row))
            i += 1
    for k, line in enumerate(lines):
        line["source_sequence"] = _sequence(day, k)
    return lines


def synthetic_customers(n_customers: int, start: dt.date, days: int, seed: int = 7) -> list[dict[str, Any]]:
    """SCD2 versions: every customer has a country; about a third change tier once inside the range."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    since = dt.date(start.year, 1, 1).isoformat()
    for c in range(1, n_customers + 1):
        cid, country = f"C{c:05d}", rng.choice(COUNTRIES)
        tier = rng.choice(TIERS)
        if rng.random() < 0.33 and days > 1:
            change = (start + dt.timedelta(days=rng.randint(1, days - 1))).isoformat()
            new_tier = rng.choice([t for t in TIERS if t != tier])
            out.append({"customer_id": cid, "country": country, "tier": tier, "valid_from": since, "valid_to": change})
            out.append({"customer_id": cid, "country": country, "tier": new_tier, "valid_from": change, "valid_to": None})
        else:
            out.append({"customer_id": cid, "country": country, "tier": tier, "valid_from": since, "valid_to": None})
    return out


def write_customers(raw_dir: Path, customers: list[dict[str, Any]]) -> Path:
    raw_dir.mkdir(parents=True, exist_ok=True)
    path = raw_dir / "customers.json"
    body = ",\n  ".join(json.dumps(c, separators=(",", ":")) for c in customers)
    path.write_text('{\n "schema_version": 1,\n "customers": [\n  ' + body + "\n ]\n}\n")
    return path


def write_shipped(raw_dir: Path) -> list[Path]:
    """The repository's raw/: history 2026-09-01..19 (12 lines a day) plus the lab's two days."""
    history_customers = synthetic_customers(40, dt.date(2026, 9, 1), 21)
    lab_ids = {c["customer_id"] for c in LAB_CUSTOMERS}
    customers = LAB_CUSTOMERS + [c for c in history_customers if c["customer_id"] not in lab_ids]
    paths = [write_customers(raw_dir, customers)]
    for k in range(19):
        day = dt.date(2026, 9, 1) + dt.timedelta(days=k)
        paths.append(write_raw(raw_dir, day, synthetic_lines(day, 12, 40)))
    for day in LAB_LINES:
        paths.append(write_raw(raw_dir, dt.date.fromisoformat(day), lab_lines(day)))
    return paths


def read_batches(raw_dir: Path, day: dt.date) -> list[evidence.Batch]:
    """The day's landing batches as they are on disk (the first flat file, then raw/partition=D/*.json)."""
    paths = [raw_dir / f"partition={day.isoformat()}.json",
             *sorted((raw_dir / f"partition={day.isoformat()}").glob("*.json"))]
    out = []
    for k, path in enumerate(p for p in paths if p.is_file()):
        doc = json.loads(path.read_text())
        m = doc["manifest"]
        out.append(evidence.Batch(m["extraction_batch"], "snapshot" if k == 0 else m.get("kind", "delta"),
                                  m["source_high_sequence"], doc["lines"]))
    return sorted(out, key=lambda b: b.source_high_sequence)


def write_batch(raw_dir: Path, day: dt.date, batch_id: str, lines: list[dict[str, Any]], kind: str = "delta",
                extracted_at: str | None = None) -> Path:
    """A later landing batch raw/partition=D/<batch_id>.json: records = its lines, controls = the whole day as of
    this batch (merged with every earlier batch on disk), source_high_sequence = its highest sequence."""
    earlier = read_batches(raw_dir, day)
    high = max([line["source_sequence"] for line in lines] + [b.source_high_sequence for b in earlier])
    merged = evidence.merge([*earlier, evidence.Batch(batch_id, kind, high, lines)])
    extracted = extracted_at or (dt.datetime.combine(day + dt.timedelta(days=2 + len(earlier)), dt.time(1, 0))
                                 .isoformat() + "Z")
    doc = {"manifest": {"partition": day.isoformat(), "source": SOURCE, "schema_version": SCHEMA_VERSION,
                        "extraction_batch": batch_id, "kind": kind, "extracted_at": extracted,
                        "source_high_sequence": high, "records": len(lines),
                        "controls": controls_of([r for r in merged.values()])}, "lines": lines}
    path = raw_dir / f"partition={day.isoformat()}" / f"{batch_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_raw(doc))
    return path


def late_delta(raw_dir: Path, day: dt.date, batch_id: str, new: int = 1, restate: int = 1, retract: int = 1,
               seed: int = 11) -> Path:
    """A delta batch for a day already on disk: `new` late lines, `restate` re-stated lines (new price, higher
    sequence) and `retract` retractions (`"op": "delete"`) of existing lines."""
    rng = random.Random(seed * 7919 + day.toordinal())
    alive = sorted(evidence.merge(read_batches(raw_dir, day)).values(), key=lambda r: r["line_id"])
    high = max(b.source_high_sequence for b in read_batches(raw_dir, day))
    lines: list[dict[str, Any]] = []
    for k in range(new):
        template = alive[k % len(alive)]
        # One late order of one customer: an order never spans customers (the mart counts orders per group).
        lines.append({**template, "line_id": f"{day.isoformat()}-LATE-{batch_id}-{k + 1:04d}",
                      "customer_id": alive[0]["customer_id"], "order_id": f"{day.isoformat()}-OLATE-{batch_id}",
                      "source_sequence": high + len(lines) + 1})
    for line in rng.sample(alive, min(restate + retract, len(alive)))[:restate]:
        lines.append({**line, "unit_price": _num(round(float(line["unit_price"]) + 1, 2)),
                      "source_sequence": high + len(lines) + 1})
    restated = {line["line_id"] for line in lines}
    for line in [r for r in alive if r["line_id"] not in restated][-retract:] if retract else []:
        lines.append({"op": "delete", "line_id": line["line_id"], "source_sequence": high + len(lines) + 1})
    return write_batch(raw_dir, day, batch_id, lines, "delta")


def late_snapshot(raw_dir: Path, day: dt.date, batch_id: str, drop: int = 1) -> Path:
    """A snapshot re-extraction of the whole day that leaves out its last `drop` lines (they are retracted)."""
    alive = sorted(evidence.merge(read_batches(raw_dir, day)).values(), key=lambda r: r["line_id"])
    high = max(b.source_high_sequence for b in read_batches(raw_dir, day))
    kept = alive[:len(alive) - drop] if drop else alive
    lines = [{**line, "source_sequence": high + k + 1} for k, line in enumerate(kept)]
    return write_batch(raw_dir, day, batch_id, lines, "snapshot")


def write_synthetic(raw_dir: Path, start: dt.date, days: int, lines_per_day: int, customers: int) -> None:
    """N days x M lines of synthetic raw evidence, plus a matching customer dimension."""
    write_customers(raw_dir, synthetic_customers(customers, start, days))
    for k in range(days):
        day = start + dt.timedelta(days=k)
        write_raw(raw_dir, day, synthetic_lines(day, lines_per_day, customers))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw-dir", type=Path, required=True)
    parser.add_argument("--shipped", action="store_true", help="write the repository's lab fixture")
    parser.add_argument("--start", type=dt.date.fromisoformat, default=dt.date(2025, 9, 22))
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--customers", type=int, default=5_000)
    parser.add_argument("--late-delta", metavar="BATCH_ID", help="write a later delta batch for --start "
                        "(with --new/--restate/--retract lines)")
    parser.add_argument("--late-snapshot", metavar="BATCH_ID", help="write a later snapshot batch for --start "
                        "that drops --retract lines")
    parser.add_argument("--new", type=int, default=1)
    parser.add_argument("--restate", type=int, default=1)
    parser.add_argument("--retract", type=int, default=1)
    args = parser.parse_args(argv)
    if args.late_delta or args.late_snapshot:
        path = (late_delta(args.raw_dir, args.start, args.late_delta, args.new, args.restate, args.retract)
                if args.late_delta else late_snapshot(args.raw_dir, args.start, args.late_snapshot, args.retract))
        print(path)
    elif args.shipped:
        write_shipped(args.raw_dir)
    else:
        write_synthetic(args.raw_dir, args.start, args.days, args.lines, args.customers)


if __name__ == "__main__":
    main()
