"""Message text for every alert, as pure functions of plain values: one function per kind of message."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

MAX_BLOCK_CHARS = 2500


@dataclass(frozen=True)
class CheckFailure:
    """One failed execution of one asset check in one run (all its partitions)."""

    asset: str
    check: str
    severity: str
    blocking: bool
    partitions: str
    description: str
    figures: Any
    run_id: str
    run_url: str


@dataclass(frozen=True)
class RunFailure:
    """One run that ended in FAILURE."""

    job: str
    run_id: str
    run_url: str
    partitions: str
    backfill_id: str | None
    reason: str | None
    errors: Sequence[str]


@dataclass(frozen=True)
class Backfill:
    """A correction as operators see it: what window, which assets, why and who asked."""

    backfill_id: str
    window: str
    assets: Sequence[str]
    reason: str | None
    requested_by: str | None
    tags: Mapping[str, str] = field(default_factory=dict)
    run_urls: Sequence[str] = ()


@dataclass(frozen=True)
class PartitionChange:
    """One partition's publication by a correction: the ledger row, before and after."""

    partition: str
    publication_id: str
    kind: str
    rows_before: int | None
    rows_after: int
    controls_before: list[float] | None
    controls_after: list[float]
    sha256_before: str | None
    sha256_after: str
    changed: bool
    restored_from: str | None = None


@dataclass(frozen=True)
class Neighbour:
    """A partition next to the corrected window, and whether the correction left it alone."""

    partition: str
    publication_id: str | None
    sha256: str | None
    unchanged: bool


def _block(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=1, sort_keys=True, default=str)
    if len(text) > MAX_BLOCK_CHARS:
        text = text[:MAX_BLOCK_CHARS] + "\n… (truncated)"
    return f"```{text}```"


def _link(url: str, run_id: str) -> str:
    return f"<{url}|{run_id}>"


def check_failure(f: CheckFailure) -> str:
    icon = ":red_circle:" if f.severity == "ERROR" else ":warning:"
    blocking = "blocking" if f.blocking else "non-blocking"
    lines = [
        f"{icon} *Check failed* `{f.check}` on `{f.asset}` — severity *{f.severity}* ({blocking})",
        f"*Partition(s):* {f.partitions or 'unpartitioned'}",
    ]
    if f.description:
        lines.append(f"*What:* {f.description[:1000]}")
    if f.figures is not None:
        lines.append("*Figures:*\n" + _block(f.figures))
    lines.append(f"*Run:* {_link(f.run_url, f.run_id)}")
    return "\n".join(lines)


def run_failure(f: RunFailure) -> str:
    lines = [f":x: *Run failed* `{f.job}` — partition(s) {f.partitions or 'none'}"]
    if f.backfill_id:
        lines.append(f"*Backfill:* `{f.backfill_id}`" + (f" — reason: {f.reason}" if f.reason else ""))
    if f.errors:
        lines.append("*Errors:*\n" + _block("\n".join(e[:800] for e in f.errors)))
    lines.append(f"*Run:* {_link(f.run_url, f.run_id)}")
    return "\n".join(lines)


def _who(b: Backfill) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in sorted(b.tags.items()))
    who = b.requested_by or "unknown"
    return who + (f" (tags: {extra})" if extra else "")


def backfill_started(b: Backfill) -> str:
    return "\n".join([
        f":construction: *Correction in progress* — backfill `{b.backfill_id}` over *{b.window}*",
        f"*Assets:* {', '.join(f'`{a}`' for a in b.assets) or 'all selected'}",
        f"*Reason:* {b.reason or '(none given)'}",
        f"*Requested by:* {_who(b)}",
        "Readers see `correction_in_progress` on mart.revenue_daily_v for these days until it publishes.",
    ])


def backfill_failed(b: Backfill, status: str) -> str:
    lines = [f":x: *Correction failed* — backfill `{b.backfill_id}` over *{b.window}* ended {status}; "
             "nothing of a failed run was published (the previous publication stays current)",
             f"*Reason:* {b.reason or '(none given)'}"]
    lines += [f"*Run:* {u}" for u in b.run_urls]
    return "\n".join(lines)


def _controls(c: list[float] | None) -> str:
    return "—" if c is None else "[" + ", ".join(f"{x:g}" for x in c) + "]"


def _rows(before: int | None, after: int) -> str:
    if before is None:
        return f"— → {after} (first publication)"
    return f"{before} → {after} ({after - before:+d})"


def change_table(changes: Sequence[PartitionChange], neighbours: Sequence[Neighbour]) -> str:
    """The change notice body in markdown: per partition before → after, then the neighbours left alone."""
    lines = ["| partition | rows before → after | controls before | controls after | hash | publication |",
             "|---|---|---|---|---|---|"]
    for c in changes:
        hash_text = (f"changed {(c.sha256_before or '—')[:12]} → {c.sha256_after[:12]}" if c.changed
                     else f"unchanged {c.sha256_after[:12]}")
        lines.append(f"| {c.partition} | {_rows(c.rows_before, c.rows_after)} | {_controls(c.controls_before)} "
                     f"| {_controls(c.controls_after)} | {hash_text} | {c.publication_id} |")
    if neighbours:
        lines += ["", "Neighbouring partitions:", ""]
        for n in neighbours:
            state = "unchanged" if n.unchanged else "CHANGED by this correction"
            pub = f"publication {n.publication_id}, sha256 {(n.sha256 or '')[:12]}" if n.publication_id else "never published"
            lines.append(f"- {n.partition}: {state} ({pub})")
    return "\n".join(lines)


def change_notice_markdown(b: Backfill, changes: Sequence[PartitionChange], neighbours: Sequence[Neighbour]) -> str:
    changed = [c.partition for c in changes if c.changed]
    return "\n".join([
        f"# Change notice — backfill {b.backfill_id}",
        "",
        f"- Window: {b.window}",
        f"- Assets: {', '.join(b.assets) or 'all selected'}",
        f"- Reason: {b.reason or '(none given)'}",
        f"- Requested by: {_who(b)}",
        f"- Partitions republished: {len(changes)}; content changed: {', '.join(changed) or 'none'}",
        "",
        change_table(changes, neighbours),
        "",
    ])


def backfill_published(b: Backfill, changes: Sequence[PartitionChange], neighbours: Sequence[Neighbour],
                       notice_path: str) -> str:
    changed = [c.partition for c in changes if c.changed]
    if not changes:
        head = f":white_check_mark: *Correction finished* — backfill `{b.backfill_id}` over *{b.window}* published nothing"
        return "\n".join([head, f"*Reason:* {b.reason or '(none given)'}"])
    return "\n".join([
        f":white_check_mark: *Correction published* — backfill `{b.backfill_id}` over *{b.window}*: "
        f"{len(changes)} partition(s) republished, content changed in {len(changed)} ({', '.join(changed) or 'none'})",
        f"*Reason:* {b.reason or '(none given)'} — *requested by:* {_who(b)}",
        _block(change_table(changes, neighbours)),
        f"Change notice: `{notice_path}`",
    ])


def rolled_back(run_id: str, run_url: str, reason: str | None, changes: Sequence[PartitionChange],
                undone_backfills: Sequence[str]) -> str:
    window = ", ".join(c.partition for c in changes) or "nothing"
    undone = ", ".join(f"`{b}`" for b in undone_backfills) or "an earlier publication"
    return "\n".join([
        f":rewind: *Rolled back* {window} — undoes {undone}; the previous publication is current again",
        f"*Reason:* {reason or '(none given)'}",
        _block(change_table(changes, [])),
        f"*Run:* {_link(run_url, run_id)}",
    ])
