"""Audits of candidates against raw evidence and against what is published now. Pure: figures in, verdicts out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from atlasmart_assets.extracts import CONTROL_NAMES

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


def controls_match(check: str, asset: tuple[str, ...], candidate: dict[str, list[float]],
                   expected: dict[str, list[float]], expected_label: str) -> Audit:
    """Candidate controls equal the expected ones for every partition of the window."""
    mismatches = {}
    for day in sorted(set(candidate) | set(expected)):
        got, want = candidate.get(day), expected.get(day)
        if got is None or want is None or [float(x) for x in got] != [float(x) for x in want]:
            mismatches[day] = {"candidate": got, expected_label: want}
    text = (f"controls {list(CONTROL_NAMES)} equal {expected_label} for {len(candidate)} partitions" if not mismatches
            else f"controls differ from {expected_label}: {mismatches}")
    return Audit(check, asset, not mismatches, ERROR, text, {"mismatches": mismatches, "partitions": len(candidate)})


def row_delta(check: str, asset: tuple[str, ...], candidate: dict[str, int], published: dict[str, int],
              shrink_threshold: float) -> Audit:
    """Rows per partition vs the current publication: doubling or a shrink past the threshold is an ERROR,
    any other change a WARN, a first publication passes."""
    deltas: dict[str, dict[str, Any]] = {}
    errors: list[str] = []
    changes: list[str] = []
    for day, rows in sorted(candidate.items()):
        before = published.get(day)
        deltas[day] = {"before": before, "after": rows, "delta": None if before is None else rows - before}
        if before is None or rows == before:
            continue
        changes.append(day)
        if before > 0 and rows >= 2 * before:
            errors.append(f"{day} doubled ({before} -> {rows})")
        elif before > 0 and rows < (1 - shrink_threshold) * before:
            errors.append(f"{day} shrank by more than {shrink_threshold:.0%} ({before} -> {rows})")
    if errors:
        return Audit(check, asset, False, ERROR, "; ".join(errors), {"per_partition": deltas})
    if changes:
        return Audit(check, asset, False, WARN, f"row counts change in {changes}", {"per_partition": deltas})
    return Audit(check, asset, True, ERROR, "row counts unchanged or first publication", {"per_partition": deltas})
