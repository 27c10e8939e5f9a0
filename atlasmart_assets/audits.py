"""Audits of candidates against raw evidence and against what is published now. Pure: figures in, verdicts out."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Collection

from atlasmart_assets.contract import CONTROL_NAMES

ERROR = "ERROR"
WARN = "WARN"


@dataclass(frozen=True)
class Audit:
    """The verdict of one property over a window; per-partition figures travel in `figures`."""

    check: str
    asset: tuple[str, ...]
    passed: bool
    severity: str = ERROR
    description: str = ""
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def blocks(self) -> bool:
        return not self.passed and self.severity == ERROR


def unique_keys(check: str, asset: tuple[str, ...], duplicates: dict[str, int]) -> Audit:
    """Business key line_id is unique per partition."""
    bad = {d: n for d, n in duplicates.items() if n}
    text = "line_id unique in every partition" if not bad else f"duplicate line_ids: {bad}"
    return Audit(check, asset, not bad, ERROR, text, {"duplicate_line_ids": duplicates})


def unique_across_days(check: str, asset: tuple[str, ...], collisions: dict[str, list[str]]) -> Audit:
    """A line_id belongs to one day: none of the candidate's appears on another day."""
    bad = {d: ids for d, ids in collisions.items() if ids}
    text = ("no line_id appears on two days" if not bad else
            "line_ids on more than one day (the same line would be counted twice): " +
            "; ".join(f"{d}: {', '.join(ids[:5])}" for d, ids in sorted(bad.items())))
    return Audit(check, asset, not bad, ERROR, text, {"line_ids_on_other_days": bad})


def no_suppressed_keys(check: str, asset: tuple[str, ...], counts: dict[str, int]) -> Audit:
    """No line of a deletion request's subject is in the candidate."""
    bad = {d: n for d, n in counts.items() if n}
    text = "no line of a deletion request's subject" if not bad else f"lines of a suppressed subject: {bad}"
    return Audit(check, asset, not bad, ERROR, text, {"suppressed_lines_present": bad})


def controls_match(check: str, asset: tuple[str, ...], candidate: dict[str, list[float]],
                   expected: dict[str, list[float]], expected_label: str,
                   extra: dict[str, Any] | None = None, when_missing: str = "") -> Audit:
    """Candidate controls equal the expected ones for every partition of the window. `when_missing`: what the
    operator does about partitions that have no expected controls at all, said first."""
    mismatches = {}
    for day in sorted(set(candidate) | set(expected)):
        got, want = candidate.get(day), expected.get(day)
        if got is None or want is None or [float(x) for x in got] != [float(x) for x in want]:
            mismatches[day] = {"candidate": got, expected_label: want}
    missing = [d for d in sorted(mismatches) if expected.get(d) is None]
    first = (f"{len(missing)} partition(s) have no {expected_label} ({', '.join(missing[:5])}"
             f"{', …' if len(missing) > 5 else ''}): {when_missing}; " if missing and when_missing else "")
    text = (f"controls {list(CONTROL_NAMES)} equal {expected_label} for {len(candidate)} partitions" if not mismatches
            else f"{first}controls differ from {expected_label}: {mismatches}")
    return Audit(check, asset, not mismatches, ERROR, text,
                 {"mismatches": mismatches, "partitions": len(candidate), **(extra or {})})


# Split orders an audit's description names (its figures name up to SPLIT_ORDERS_KEPT).
SPLIT_ORDERS_SHOWN = 3
SPLIT_ORDERS_KEPT = 50


def explained_by_split_orders(audit: Audit, split: list[tuple[str, str, list[str], list[str]]]) -> Audit:
    """A failed mart-against-fact audit with what explains it, said first: the orders whose lines fall in more than
    one of the mart's groups (day, order, its customers, the batch files its lines came from)."""
    if not split:
        return audit
    shown = "; ".join(f"order {order} of {day} has lines of customers {', '.join(customers)}, in "
                      f"{' and '.join(files) or 'no batch file found'}"
                      for day, order, customers, files in split[:SPLIT_ORDERS_SHOWN])
    more = f"; and {len(split) - SPLIT_ORDERS_SHOWN} more such order(s)" if len(split) > SPLIT_ORDERS_SHOWN else ""
    # The orders first: a step's failure keeps the first 500 bytes of this.
    text = (f"{shown}{more}: an order belongs to one customer (the mart counts it in each of its customers' country x "
            f"tier groups, the fact once); the source must send its lines under one customer, in a new batch. "
            f"{audit.description}")
    kept = [{"partition": day, "order_id": order, "customers": customers, "files": files}
            for day, order, customers, files in split[:SPLIT_ORDERS_KEPT]]
    return replace(audit, description=text, figures={**audit.figures, "split_orders": kept,
                                                     "split_orders_total": len(split)})


def _deltas(candidate: dict[str, int], published: dict[str, int]) -> dict[str, dict[str, Any]]:
    return {day: {"before": published.get(day), "after": rows,
                  "delta": None if published.get(day) is None else rows - published[day]}
            for day, rows in sorted(candidate.items())}


def row_count_unchanged(check: str, asset: tuple[str, ...], candidate: dict[str, int],
                        published: dict[str, int]) -> Audit:
    """WARN when any partition's row count differs from its current publication (a first publication passes)."""
    deltas = _deltas(candidate, published)
    changed = [d for d, f in deltas.items() if f["before"] is not None and f["delta"] != 0]
    if changed:
        return Audit(check, asset, False, WARN, f"row counts change in {changed}", {"per_partition": deltas})
    return Audit(check, asset, True, WARN, "row counts unchanged or first publication", {"per_partition": deltas})


def row_delta_within_bounds(check: str, asset: tuple[str, ...], candidate: dict[str, int], published: dict[str, int],
                            shrink_threshold: float, accepted_shrink: str | None = None,
                            new_batches: Collection[str] = ()) -> Audit:
    """ERROR when a partition doubles, or shrinks by more than the threshold unless the run accepted the shrink. A
    day that doubles with landing batches its current version did not read (`new_batches`) grew as its source
    says: its controls are the latest batch's, which controls_match checks and blocks on. Refused, such a day (the
    newest day's first hourly batch, then the rest of the day) could never be published again: no tag accepts a
    doubling, and a first publication cannot be rolled back (a review found it)."""
    deltas = _deltas(candidate, published)
    errors: list[str] = []
    accepted: list[str] = []
    grew: list[str] = []
    for day, f in deltas.items():
        before, rows = f["before"], f["after"]
        if not before:
            continue
        if rows >= 2 * before:
            (grew if day in new_batches else errors).append(f"{day} doubled ({before} -> {rows})")
        elif rows < (1 - shrink_threshold) * before:
            text = f"{day} shrank by more than {shrink_threshold:.0%} ({before} -> {rows})"
            (accepted if accepted_shrink else errors).append(text)
    figures: dict[str, Any] = {"per_partition": deltas, "shrink_threshold": shrink_threshold}
    if grew:
        figures["grew_with_new_landing_batches"] = [g.split(" ", 1)[0] for g in grew]
    if errors:
        # The tag accepts a shrink, never a doubling: it is named only where it would help.
        shrank = any("shrank" in e for e in errors)
        hint = "" if accepted_shrink or not shrank else (" — a deliberate shrink is published only with the tag "
                                                         "atlasmart/accept_shrink=<reason>")
        return Audit(check, asset, False, ERROR, "; ".join(errors) + hint, figures)
    said = ([f"shrink accepted ({accepted_shrink}): " + "; ".join(accepted)] if accepted else []) + (
        ["grew with landing batches its current version did not read, to their own controls: " + "; ".join(grew)]
        if grew else [])
    if accepted:
        figures["accepted_shrink"] = accepted_shrink
    if said:
        return Audit(check, asset, True, ERROR, "; ".join(said), figures)
    return Audit(check, asset, True, ERROR, "no partition doubled or shrank beyond the threshold", figures)
