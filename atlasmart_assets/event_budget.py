"""What one Dagster event may carry. A check's figures name every day of its window, so over a long window they would
grow without bound: a year's backfill refused for its controls wrote 155 KB into one check event. They are cut
to a budget here, failing days kept first, and the cut is said in the figures themselves. Every budget is in the
bytes Dagster writes: its serializer escapes each non-ASCII character (6 bytes, 12 beyond the BMP), so a budget in
characters let 12,000 characters of a line id become a 179 KB event."""

from __future__ import annotations

import json
from typing import Any, Mapping

from atlasmart_assets.alerts.format import failing_partitions, is_day

FIGURES_MAX_BYTES = 16 * 1024
READABLE_MAX_BYTES = 16 * 1024
TEXT_MAX_BYTES = 2000
OMITTED = "entries_omitted"


def _size(value: Any) -> int:
    return len(json.dumps(value, default=str))


def encoded_size(text: str) -> int:
    """The bytes `text` takes in a Dagster event: its JSON string, as Dagster's serializer writes it, less quotes."""
    return len(json.dumps(text)) - 2


def cut_text(text: str, max_bytes: int = TEXT_MAX_BYTES) -> str:
    """`text` unchanged when it takes at most `max_bytes` in an event (`encoded_size`); otherwise its longest start
    that fits with a note of how many characters were left out."""
    if encoded_size(text) <= max_bytes:
        return text

    def cut(n: int) -> str:
        return text[:n] + f" … ({len(text) - n} more characters)"

    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if encoded_size(cut(mid)) <= max_bytes:
            lo = mid
        else:
            hi = mid - 1
    return cut(lo)


def _halved(value: Mapping[str, Any] | list[Any], failing: set[str], days_only: bool) -> tuple[Any, int]:
    """Half of a mapping's entries (failing days first, then in key order) or of a list's items, and how many went.
    `days_only`: only day keys may go (the top level of a check's figures also holds its totals)."""
    if isinstance(value, list):
        keep = (len(value) + 1) // 2
        return value[:keep], len(value) - keep
    droppable = {k for k in value if is_day(str(k))} if days_only else set(value)
    ranked = sorted(droppable, key=lambda k: (str(k) not in failing, str(k)))
    keep = set(ranked[:(len(ranked) + 1) // 2])
    kept = {k: v for k, v in value.items() if k in keep or k not in droppable}
    return kept, len(value) - len(kept)


def bounded_figures(figures: Any, max_bytes: int = FIGURES_MAX_BYTES) -> Any:
    """`figures` unchanged when its JSON fits in `max_bytes`; otherwise the largest of its mappings and lists (the top
    level's days, and each entry's own) is halved until it fits, and `entries_omitted` says how many entries of which
    went. Failing days are kept first, so the days a person and the alerts look for stay named."""
    if not isinstance(figures, Mapping) or _size(figures) <= max_bytes:
        return figures
    failing = set(failing_partitions(figures))
    out: dict[str, Any] = dict(figures)
    omitted: dict[str, int] = {}
    while _size({**out, OMITTED: omitted}) > max_bytes:
        candidates: list[tuple[int, str | None]] = []
        if sum(1 for k in out if is_day(str(k))) > 1:
            candidates.append((_size(out), None))
        candidates += [(_size(v), k) for k, v in out.items()
                       if isinstance(v, (Mapping, list)) and len(v) > 1]
        if not candidates:
            text = json.dumps(out, default=str)
            return {"figures_cut": cut_text(text, max_bytes // 2)}
        _, key = max(candidates, key=lambda c: c[0])
        if key is None:
            out, went = _halved(out, failing, days_only=True)
            omitted["days"] = omitted.get("days", 0) + went
        else:
            out[key], went = _halved(out[key], failing, days_only=False)
            omitted[key] = omitted.get(key, 0) + went
    return {**out, OMITTED: omitted}
