"""Slack messages (Block Kit blocks plus a plain-text fallback), as pure functions
of plain values: one function per kind of message.

Every value that comes from a tag, a check, an error or a file is escaped before it reaches Slack (`&`, `<`,
`>`, so `<!channel>` cannot ping) and single-line values have their newlines collapsed (so a reason cannot
forge a status line). Nothing is cut silently: long content is split over several sections and, past Slack's
50 blocks, over several messages (the later ones post as replies in the first one's thread)."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import urllib.parse
from decimal import Decimal
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from atlasmart_assets.contract import REASON_MAX_CHARS, SHOWN_ID_CHARS, shown_id
from atlasmart_assets.extracts import CONTROL_NAMES

SECTION_CHARS = 3000
FIELD_CHARS = 2000
MAX_FIELDS = 10
MAX_CONTEXT = 10
MAX_BLOCKS = 50
# Slack refuses a message whose blocks' text adds up past about 12,000 characters (msg_blocks_too_long: it counts
# some for the blocks themselves, and has refused 11,341 counted as text_chars does): a message stays well below.
MESSAGE_CHARS = 9000
PART_HEAD_CHARS = 40
FALLBACK_CHARS = 2000
ERROR_CHARS = 2800
LINKED_DAYS = 10
NO_REASON = "(none given)"

Block = Mapping[str, Any]


@dataclass(frozen=True)
class Message:
    """One chat.postMessage: blocks for the channel, `text` for notifications and clients without blocks."""

    text: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Links:
    """The Dagster UI pages a message links to (routes as dagster-webserver 1.13 serves them)."""

    ui: str

    def _base(self) -> str:
        return self.ui.rstrip("/")

    def run(self, run_id: str) -> str:
        return f"{self._base()}/runs/{_q(run_id)}"

    def backfill(self, backfill_id: str) -> str:
        return f"{self._base()}/runs/b/{_q(backfill_id)}"

    def asset(self, asset: str, partition: str | None = None) -> str:
        """The asset's page; with a partition, its partitions tab opened on that partition."""
        path = "/".join(_q(p) for p in asset.split("/"))
        query = f"?view=partitions&partition={_q(partition)}" if partition else ""
        return f"{self._base()}/assets/{path}{query}"

    def asset_partitions(self, asset: str) -> str:
        return f"{self.asset(asset)}?view=partitions"


@dataclass(frozen=True)
class CheckFailure:
    """One failed execution of one asset check in one run (all its partitions)."""

    asset: str
    check: str
    severity: str
    blocking: bool
    failing: Sequence[str]
    window: str
    description: str
    figures: Any
    run_id: str
    backfill_id: str | None = None


@dataclass(frozen=True)
class StepError:
    """A failed step of a run: which step, the assets it computes, and its error message."""

    step: str
    assets: Sequence[str]
    message: str


@dataclass(frozen=True)
class RunFailure:
    """One run that ended in FAILURE."""

    job: str | None
    assets: Sequence[str]
    run_id: str
    window: str
    failing: Sequence[str]
    backfill_id: str | None
    reason: str | None
    errors: Sequence[StepError]


@dataclass(frozen=True)
class Backfill:
    """A correction as operators see it: what window, which assets, why and who asked."""

    backfill_id: str
    window: str
    assets: Sequence[str]
    reason: str | None
    requested_by: str | None
    tags: Mapping[str, str] = field(default_factory=dict)
    run_ids: Sequence[str] = ()


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
    # Its staged and fact lines changed though the extract's content did not (ledger.Publication.lines_changed).
    lines_changed: bool = False
    # Written afresh because its published rows differed from its ledger row (ledger.Publication.repaired).
    repaired: bool = False


@dataclass(frozen=True)
class Neighbour:
    """A partition next to the corrected window, and whether the correction left it alone."""

    partition: str
    publication_id: str | None
    sha256: str | None
    unchanged: bool


# --- escaping -------------------------------------------------------------------------------------------------

# Unicode's control, format and line/paragraph-separator characters (categories Cc, Cf, Zl, Zp, Unicode 14), but
# tab, newline, carriage return and the zero-width (non-)joiner, and the other default-ignorable characters that are
# not variation selectors (a combining grapheme joiner, Hangul and Mongolian fillers and selectors, Khmer's inherent
# vowels): none is visible. A right-to-left override in a reason (U+202E) shows the rest of a Slack line or a
# notice's line reversed, a zero-width space makes two different ids read the same. test_alerts_format holds this
# list against unicodedata.
INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2"
    "\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b\u200e-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\u3164"
    "\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")
# The joiners are kept where scripts and emoji use them, between two characters beyond ASCII (`ana\u200dana` reads
# `anaana`).
LOOSE_JOINER = re.compile("(?<![^\x00-\x7f])[\u200c\u200d]|[\u200c\u200d](?![^\x00-\x7f])")


def _code_point(match: re.Match[str]) -> str:
    return f"[U+{ord(match.group()):04X}]"


def visible(value: object) -> str:
    """The text with every invisible character (INVISIBLE, LOOSE_JOINER) shown as its code point, `[U+202E]`."""
    return LOOSE_JOINER.sub(_code_point, INVISIBLE.sub(_code_point, str(value)))


def esc(value: object) -> str:
    """Text safe inside Slack mrkdwn: invisible characters shown (visible), and the three control characters
    escaped as Slack requires."""
    return visible(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def one_line(value: object) -> str:
    """A single-line field: whitespace (newlines included) collapsed, then escaped."""
    return esc(" ".join(str(value).split()))


def tag_value(value: object) -> str:
    """A reason, who asked or a tag as one line, cut past REASON_MAX_CHARS: a run is refused with a longer one, but
    its "in progress" message goes out before. Figures and descriptions are never cut (one_line)."""
    text = " ".join(str(value).split())
    if len(text) > REASON_MAX_CHARS:
        text = f"{text[:REASON_MAX_CHARS]}… ({len(text):,} characters)"
    return esc(text)


def _code(value: object) -> str:
    # A value must not close the code block it is shown in.
    return esc(value).replace("```", "ʼʼʼ")


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#~!])")


def md(value: object) -> str:
    """A single-line markdown value: newlines collapsed and markdown/HTML characters backslash-escaped, so it
    can neither start a heading or list item nor break out of a table cell; invisible characters shown (visible)."""
    return _MD_SPECIAL.sub(r"\\\1", visible(" ".join(str(value).split()))).replace("&", "&amp;")


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def link(url: str, label: str) -> str:
    """A Slack link; the label is one escaped line (a tag's newline cannot start a line of its own), the URL
    carries no `<`, `>` or `|` (its parts are percent-encoded)."""
    return f"<{url}|{one_line(label)}>"


def backfill_link(links: Links, backfill_id: str) -> str:
    """A backfill's id linked to its page; an id set by hand past SHOWN_ID_CHARS is shown cut, with no link (its URL
    would take a section past Slack's 3,000 characters)."""
    if len(backfill_id) > SHOWN_ID_CHARS:
        return one_line(shown_id(backfill_id))
    return link(links.backfill(backfill_id), backfill_id)


def backfill_url(links: Links, backfill_id: str) -> str:
    """A plain-text message's address of a backfill's page, or its id cut (as backfill_link)."""
    return one_line(shown_id(backfill_id)) if len(backfill_id) > SHOWN_ID_CHARS else links.backfill(backfill_id)


# --- values ---------------------------------------------------------------------------------------------------

def _date(key: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(key)
    except ValueError:
        return None


def is_day(key: object) -> bool:
    return isinstance(key, str) and len(key) == 10 and _date(key) is not None


RANGES_SHOWN = 12


def day_ranges(keys: Iterable[str]) -> list[tuple[str, str]]:
    """Sorted, de-duplicated keys grouped into inclusive runs of consecutive days (other keys stand alone)."""
    ranges: list[tuple[str, str]] = []
    for key in sorted(set(keys)):
        if ranges and is_day(key) and is_day(ranges[-1][1]) and \
                _date(key) == _date(ranges[-1][1]) + dt.timedelta(days=1):  # type: ignore[operator]
            ranges[-1] = (ranges[-1][0], key)
        else:
            ranges.append((key, key))
    return ranges


def _range_texts(keys: Iterable[str]) -> list[str]:
    return [a if a == b else f"{a}..{b}" for a, b in day_ranges(keys)]


def window_text(keys: Iterable[str]) -> str:
    """Partition keys as ranges: '2026-09-01..2026-09-03, 2026-09-06' ('' for none)."""
    return ", ".join(_range_texts(keys))


def short_window(keys: Iterable[str], limit: int = RANGES_SHOWN) -> str:
    """window_text for a message's line: a scattered window (hundreds of single days) shows its first ranges and
    its last, and how many there are, so the line stays within Slack's limits; the UI has the whole window."""
    ranges = _range_texts(keys)
    if len(ranges) <= limit:
        return ", ".join(ranges)
    return f"{', '.join(ranges[:limit - 1])}, …, {ranges[-1]} ({len(ranges)} ranges)"


def window_label(keys: Sequence[str]) -> str:
    """The window and its size: '2026-09-01..2026-09-17 (17 days)'."""
    n = len(set(keys))
    return f"{short_window(keys)} ({n} day{'s' if n != 1 else ''})" if n else ""


def num(x: float | int | None) -> str:
    if x is None:
        return "—"
    value = round(float(x), 4)
    if value.is_integer():
        return str(int(value))
    # The shortest text that reads back as the value: a fixed four decimals showed a large amount's binary error
    # (611182914115.32 as 611182914115.3199).
    text = repr(value)
    return text if "e" not in text else f"{value:.4f}".rstrip("0").rstrip(".")


def signed(d: float | int) -> str:
    """'+10', '-2.5', '±0'."""
    d = round(float(d), 4)
    return ("+" if d > 0 else ("±" if d == 0 else "-")) + num(abs(d))


def difference(after: float | int, before: float | int) -> float:
    """after - before in decimal, from each value as it reads: two large amounts' float difference carries their
    binary error (686433675453.56 - 686433675450.49 is 3.0701 in floats)."""
    a, b = float(after), float(before)
    if not (math.isfinite(a) and math.isfinite(b)):
        return a - b
    return float(Decimal(repr(a)) - Decimal(repr(b)))


def delta(before: float | int | None, after: float | int) -> str:
    """'690 → 700 (+10)'; a first value is 'new 700'."""
    if before is None:
        return f"new {num(after)}"
    return f"{num(before)} → {num(after)} ({signed(difference(after, before))})"


def control_deltas(before: Sequence[float] | None, after: Sequence[float],
                   names: Sequence[str] = CONTROL_NAMES) -> list[str]:
    """Each control that differs, named and with its delta ('gmv 690 → 700 (+10)'); all of them when there is
    no before."""
    labels = list(names) if len(names) == len(after) else [f"control{i}" for i in range(len(after))]
    if before is None or len(before) != len(after):
        return [f"{n} {num(a)}" for n, a in zip(labels, after)]
    return [f"{n} {delta(b, a)}" for n, b, a in zip(labels, before, after) if float(b) != float(a)]


def summary(description: str) -> str:
    """The sentence of a check description before the figures it embeds (the figures are shown on their own)."""
    cut = min((i for i in (description.find(": {"), description.find(": [")) if i >= 0), default=-1)
    return description[:cut] if cut > 0 else description


def failing_partitions(figures: Any) -> list[str]:
    """The days a check's figures single out: mismatched days, days with duplicates, days whose row count moved,
    days keyed at the top (raw problems). Empty when the figures name none."""
    if not isinstance(figures, Mapping):
        return []
    days: set[str] = {k for k in figures if is_day(k)}
    mismatches = figures.get("mismatches")
    if isinstance(mismatches, Mapping):
        days |= {k for k in mismatches if is_day(k)}
    dupes = figures.get("duplicate_line_ids")
    if isinstance(dupes, Mapping):
        days |= {k for k, v in dupes.items() if is_day(k) and v}
    per = figures.get("per_partition")
    if isinstance(per, Mapping):
        days |= {k for k, v in per.items() if is_day(k) and isinstance(v, Mapping) and v.get("delta")}
    return sorted(days)


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "), default=str)


def figure_lines(figures: Any, line: Callable[[object], str] = one_line) -> list[str]:
    """Figures as one escaped line per day or per key, readable without JSON (controls named, with deltas). `line`
    escapes each for where it is shown: Slack's mrkdwn (`one_line`), or the UI's markdown (`md`), where a line id
    holding `![x](url)` would otherwise show a remote image in the check's view."""
    if figures is None:
        return []
    if not isinstance(figures, Mapping):
        return [line(_compact(figures))]
    lines: list[str] = []
    for key, value in sorted(figures.items(), key=lambda kv: str(kv[0])):
        if key == "mismatches" and isinstance(value, Mapping):
            for day, m in sorted(value.items()):
                lines.append(line(f"{day}: {_mismatch(m)}"))
        elif key == "per_partition" and isinstance(value, Mapping):
            moved = {d: v for d, v in value.items() if isinstance(v, Mapping) and v.get("delta")}
            for day, v in sorted(moved.items()):
                lines.append(line(f"{day}: rows {delta(v.get('before'), v.get('after'))}"))
            first = sorted(d for d, v in value.items() if isinstance(v, Mapping) and v.get("before") is None)
            same = len(value) - len(moved) - len(first)
            if first:
                lines.append(line(f"first publication: {short_window(first)}"))
            if same:
                lines.append(f"rows unchanged on {same} other day(s)")
        elif key == "duplicate_line_ids" and isinstance(value, Mapping):
            bad = {d: n for d, n in value.items() if n}
            lines += [line(f"{d}: {n} duplicate line_id(s)") for d, n in sorted(bad.items())]
            if len(value) > len(bad):
                lines.append(f"no duplicates on {len(value) - len(bad)} other day(s)")
        else:
            lines.append(line(f"{key}: {_compact(value)}"))
    return lines


def _mismatch(m: Any) -> str:
    if not isinstance(m, Mapping) or "candidate" not in m or len(m) != 2:
        return _compact(m)
    label = next(k for k in m if k != "candidate")
    got, want = m["candidate"], m[label]
    if isinstance(got, list) and isinstance(want, list):
        diffs = control_deltas(want, got)
        return f"{label} → candidate: " + (", ".join(diffs) or "equal")
    return f"candidate {_compact(got)}, {label} {_compact(want)}"


def visible_tags(tags: Mapping[str, str], hidden: Iterable[str] = ()) -> dict[str, str]:
    """Tags an operator set: Dagster's own (`dagster/…`, `.dagster/…`) and the named ones left out."""
    skip = set(hidden)
    return {k: v for k, v in sorted(tags.items())
            if not k.startswith(("dagster/", ".dagster/")) and k not in skip}


def requested_by(user: str | None, reason: str | None) -> str:
    """Who asked: the user tag when there is one, else the reason the request carries."""
    if user:
        return tag_value(user)
    return f"no user tag — reason: {tag_value(reason)}" if reason else "no user tag, no reason"


# --- blocks ---------------------------------------------------------------------------------------------------

def _section(text: str) -> Block:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _context(parts: Sequence[str]) -> list[Block]:
    return [{"type": "context", "elements": [{"type": "mrkdwn", "text": p} for p in parts[i:i + MAX_CONTEXT]]}
            for i in range(0, len(parts), MAX_CONTEXT)]


def _fields(pairs: Sequence[tuple[str, str]]) -> list[Block]:
    """Label/value pairs as section fields; a value too long for a field becomes sections of its own."""
    blocks: list[Block] = []
    fields: list[Block] = []
    for label, value in pairs:
        text = f"*{label}*\n{value}"
        if len(text) <= FIELD_CHARS:
            fields.append({"type": "mrkdwn", "text": text})
            continue
        blocks += _sections([f"*{label}*", *_split(value, SECTION_CHARS - 50)])
    out = [{"type": "section", "fields": fields[i:i + MAX_FIELDS]} for i in range(0, len(fields), MAX_FIELDS)]
    return out + blocks


def _split(line: str, limit: int) -> list[str]:
    """A line cut into pieces of at most `limit` characters, never inside an `&…;` escape."""
    pieces: list[str] = []
    while len(line) > limit:
        cut = limit
        amp = line.rfind("&", max(0, cut - 6), cut)
        if amp >= 0 and ";" not in line[amp:cut]:
            cut = amp
        pieces.append(line[:cut])
        line = line[cut:]
    return pieces + [line]


def _sections(lines: Sequence[str], code: bool = False, head: str = "") -> list[Block]:
    """Lines packed into as few sections as fit in Slack's 3000 characters each; none is dropped."""
    wrap = 8 if code else 0
    limit = SECTION_CHARS - wrap - len(head) - 1
    chunks: list[list[str]] = [[]]
    size = 0
    for line in (p for ln in lines for p in _split(ln, limit)):
        if chunks[-1] and size + len(line) + 1 > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(line)
        size += len(line) + 1
    out = []
    for i, chunk in enumerate(c for c in chunks if c):
        body = "\n".join(chunk)
        body = f"```{body}```" if code else body
        out.append(_section(f"{head}\n{body}" if head and i == 0 else body))
    return out


# How a fallback text cut to FALLBACK_CHARS ends (delivery takes it off when Slack refused the blocks it points to).
IN_THE_BLOCKS = " … (full message in the blocks)"


def _plain(lines: Sequence[str]) -> str:
    text = "\n".join(lines)
    return text if len(text) <= FALLBACK_CHARS else text[:FALLBACK_CHARS - 40] + IN_THE_BLOCKS


def text_chars(blocks: Any) -> int:
    """Every text string in blocks, summed: what Slack's limit on one message's blocks counts."""
    if isinstance(blocks, Mapping):
        return sum(len(v) if k == "text" and isinstance(v, str) else text_chars(v) for k, v in blocks.items())
    if isinstance(blocks, (list, tuple)):
        return sum(text_chars(b) for b in blocks)
    return 0


def _messages(fallback: Sequence[str], blocks: Sequence[Block]) -> list[Message]:
    """The blocks over as many messages as Slack's limits need (MAX_BLOCKS blocks, MESSAGE_CHARS of text in all
    of them); the later ones say they continue."""
    groups: list[list[Block]] = [[]]
    size = 0
    for block in blocks:
        chars = text_chars(block)
        room = MAX_BLOCKS if len(groups) == 1 else MAX_BLOCKS - 1  # a later part opens with "(part i of n)"
        if groups[-1] and (len(groups[-1]) >= room or size + chars > MESSAGE_CHARS - PART_HEAD_CHARS):
            groups.append([])
            size = 0
        groups[-1].append(block)
        size += chars
    if len(groups) == 1:
        return [Message(_plain(fallback), tuple(blocks))]
    n = len(groups)
    head = fallback[0] if fallback else ""
    out = [Message(_plain([*fallback, f"(part 1 of {n}; the rest follows in the thread)"]), tuple(groups[0]))]
    for i, part in enumerate(groups[1:], start=2):
        out.append(Message(_plain([f"(part {i} of {n}) {head}"]), (_section(f"_(part {i} of {n})_"), *part)))
    return out


def _days_linked(days: Sequence[str], asset: str, links: Links) -> str:
    if not days:
        return ""
    if len(days) <= LINKED_DAYS:
        return ", ".join(link(links.asset(asset, d), d) for d in days)
    return f"{esc(short_window(days))} ({len(days)} days; {link(links.asset_partitions(asset), 'partitions')})"


# --- messages -------------------------------------------------------------------------------------------------

def check_failure(f: CheckFailure, links: Links) -> list[Message]:
    icon = ":red_circle:" if f.severity == "ERROR" else ":warning:"
    blocking = "blocking" if f.blocking else "non-blocking"
    what = one_line(summary(f.description)) if f.description else ""
    head = (f"{icon} *Check failed* `{esc(f.check)}` on {link(links.asset(f.asset), f.asset)} — "
            f"*{esc(f.severity)}* ({blocking})")
    pairs = [("Failing partition(s)", _days_linked(f.failing, f.asset, links) or esc(f.window or "unpartitioned")),
             ("Run window", esc(f.window or "unpartitioned")), ("Run", link(links.run(f.run_id), f.run_id[:8]))]
    if f.backfill_id:
        pairs.append(("Backfill", backfill_link(links, f.backfill_id)))
    blocks: list[Block] = [_section(head), *_fields(pairs)]
    if what:
        blocks += _sections([f"*What:* {what}"])
    figures = figure_lines(f.figures)
    if figures:
        blocks += _sections(figures, head="*Figures:*")
    fallback = [f"Check failed: {esc(f.check)} on {esc(f.asset)} — {esc(f.severity)} ({blocking}); "
                f"partitions {esc(short_window(f.failing) or f.window or 'unpartitioned')}",
                *([f"What: {what}"] if what else []), f"Run: {links.run(f.run_id)}"]
    return _messages(fallback, blocks)


def run_failure(f: RunFailure, links: Links) -> list[Message]:
    assets = ", ".join(f"`{esc(a)}`" for a in f.assets) or "(no assets)"
    job = f" (job `{esc(f.job)}`)" if f.job else ""
    where = next((e.assets[0] for e in f.errors if e.assets), f.assets[0] if f.assets else "")
    failing = _days_linked(f.failing, where, links) if f.failing and where else ""
    pairs = [("Failing partition(s)", failing or esc(f.window or "none")), ("Run window", esc(f.window or "none")),
             ("Run", link(links.run(f.run_id), f.run_id[:8]))]
    if f.backfill_id:
        pairs.append(("Backfill", backfill_link(links, f.backfill_id)))
        pairs.append(("Reason", tag_value(f.reason) if f.reason else NO_REASON))
    blocks: list[Block] = [_section(f":x: *Run failed* — {assets}{job}"), *_fields(pairs)]
    for e in f.errors:
        step = f"*Step* `{esc(e.step)}`" + (f" ({', '.join(esc(a) for a in e.assets)})" if e.assets else "")
        message = _code(e.message.strip())
        if len(message) > ERROR_CHARS:
            message = message[:ERROR_CHARS] + f"\n… {len(message) - ERROR_CHARS} more characters in the run's log"
        blocks += _sections(message.splitlines() or [""], code=True, head=step)
    fallback = [f"Run failed: {', '.join(esc(a) for a in f.assets) or esc(f.job or '')}; partitions "
                f"{esc(short_window(f.failing) or f.window or 'none')}", f"Run: {links.run(f.run_id)}"]
    return _messages(fallback, blocks)


def _backfill_pairs(b: Backfill) -> list[tuple[str, str]]:
    pairs = [("Assets", ", ".join(f"`{esc(a)}`" for a in b.assets) or "all selected"),
             ("Reason", tag_value(b.reason) if b.reason else NO_REASON),
             ("Requested by", requested_by(b.requested_by, b.reason))]
    if b.tags:
        pairs.append(("Tags", ", ".join(tag_value(f"{k}={v}") for k, v in sorted(b.tags.items()))))
    return pairs


def _backfill_link(b: Backfill, links: Links) -> str:
    return "backfill " + backfill_link(links, b.backfill_id)


def backfill_started(b: Backfill, links: Links, readers_view: str) -> list[Message]:
    head = f":construction: *Correction in progress* — {_backfill_link(b, links)} over *{esc(b.window)}*"
    blocks = [_section(head), *_fields(_backfill_pairs(b)),
              *_context([f"Readers see `correction_in_progress` on `{esc(readers_view)}` for these days until it "
                         "publishes. Follow-ups of this backfill are replies in this thread."])]
    fallback = [f"Correction in progress — backfill {one_line(shown_id(b.backfill_id))} over {esc(b.window)}",
                f"Reason: {tag_value(b.reason) if b.reason else NO_REASON}",
                f"Requested by: {requested_by(b.requested_by, b.reason)}"]
    return _messages(fallback, blocks)


def backfill_failed(b: Backfill, status: str, links: Links,
                    published: Sequence[PartitionChange] = ()) -> list[Message]:
    """A backfill that ended failed. If a run committed before something after the commit failed (a check that
    could not read, a crash before the swap), the message says what was published and that it stands."""
    pubs = sorted({esc(c.publication_id) for c in published})
    if published:
        # A backfill of a run per day has a publication per day: the head counts them, the list follows it.
        named = f"publication {pubs[0]}" if len(pubs) == 1 else f"{len(pubs)} publications (listed below)"
        head = (f":warning: *Correction published, then failed* — {_backfill_link(b, links)} over *{esc(b.window)}* "
                f"ended {esc(status)} after its commit: {named} of {len(published)} partition(s) "
                f"({esc(short_window(c.partition for c in published))}) stand and readers see them; what failed came "
                "after the commit (see the run)")
    else:
        head = (f":x: *Correction failed* — {_backfill_link(b, links)} over *{esc(b.window)}* ended {esc(status)}; "
                "nothing of a failed run was published (the previous publication stays current)")
    runs = [link(links.run(r), r[:8]) for r in b.run_ids]
    pairs = [("Reason", tag_value(b.reason) if b.reason else NO_REASON), ("Requested by", requested_by(b.requested_by, b.reason))]
    blocks = [_section(head), *_fields(pairs), *(_sections(pubs, head="*Publications that stand:*")
                                                 if len(pubs) > 1 else []),
              *_repaired([c.partition for c in published if c.repaired]),
              *(_sections([f"*Runs:* {', '.join(runs)}"]) if runs else [])]
    fallback = [("Correction published, then failed" if published else "Correction failed") +
                f" — backfill {one_line(shown_id(b.backfill_id))} over {esc(b.window)} ended {esc(status)}",
                f"Backfill: {backfill_url(links, b.backfill_id)}"]
    return _messages(fallback, blocks)


def _hash(c: PartitionChange) -> str:
    return (f"hash {(c.sha256_before or '—')[:12]} → {c.sha256_after[:12]}" if c.changed
            else f"hash unchanged {c.sha256_after[:12]}")


def _rows(before: int | None, after: int) -> str:
    return f"rows {delta(before, after)}"


def change_line(c: PartitionChange, asset: str, links: Links) -> str:
    """One changed day for Slack: linked day, rows, the controls that moved (named, with deltas), hash."""
    controls = control_deltas(c.controls_before, c.controls_after)
    parts = [_rows(c.rows_before, c.rows_after), ", ".join(controls) or "controls unchanged", _hash(c)]
    if c.restored_from:
        parts.append(f"restored from {esc(c.restored_from)}")
    return f"• {link(links.asset(asset, c.partition), c.partition)}: " + "; ".join(esc(p) for p in parts)


def _neighbour_text(n: Neighbour) -> str:
    state = "unchanged" if n.unchanged else "CHANGED by this correction"
    pub = f"publication {n.publication_id}" if n.publication_id else "never published"
    return f"{n.partition} {state} ({pub})"


def _notice_line(notice: str) -> str:
    if notice.startswith(("http://", "https://")):
        return f"*Change notice:* {link(notice, notice.rsplit('/', 1)[-1])}"
    return f"*Change notice:* `{_code(notice)}`"


def _repaired(days: Sequence[str]) -> list[Block]:
    return _sections([f"*Repaired:* {len(days)} day(s): {esc(short_window(days))}: their published rows differed from "
                      "the ledger (changed behind it) and were written afresh from the evidence"]) if days else []


def backfill_published(b: Backfill, changes: Sequence[PartitionChange], neighbours: Sequence[Neighbour],
                       notice: str, asset: str, links: Links) -> list[Message]:
    changed = [c for c in changes if c.changed]
    same = [c.partition for c in changes if not c.changed]
    if not changes:
        head = f":white_check_mark: *Correction finished* — {_backfill_link(b, links)} over *{esc(b.window)}* published nothing"
        return _messages([f"Correction finished — backfill {one_line(shown_id(b.backfill_id))} published nothing"],
                         [_section(head), *_fields(_backfill_pairs(b)[1:3])])
    head = (f":white_check_mark: *Correction published* — {_backfill_link(b, links)} over *{esc(b.window)}*: "
            f"{len(changes)} partition(s) republished, content changed in {len(changed)}")
    blocks: list[Block] = [_section(head), *_fields(_backfill_pairs(b)[1:3])]
    if changed:
        blocks += _sections([change_line(c, asset, links) for c in changed], head=f"*Changed ({len(changed)}):*")
    if same:
        blocks += _sections([f"*Content unchanged (same hash):* {len(same)} day(s): {esc(short_window(same))}"])
    repaired = [c.partition for c in changes if c.repaired]
    blocks += _repaired(repaired)
    if neighbours:
        blocks += _sections(["*Neighbouring partitions:* " + "; ".join(esc(_neighbour_text(n)) for n in neighbours)])
    if notice:
        blocks += _context([_notice_line(notice)])
    fallback = [f"Correction published — backfill {one_line(shown_id(b.backfill_id))} over {esc(b.window)}: "
                f"{len(changes)} partition(s) republished, content changed in {len(changed)} "
                f"({esc(short_window(c.partition for c in changed)) or 'none'})"
                + (f"; repaired {esc(short_window(repaired))}" if repaired else ""),
                *([f"Change notice: {esc(notice)}"] if notice else [])]
    return _messages(fallback, blocks)


# The backfills a rollback's head names; more are listed in sections of their own.
UNDONE_NAMED = 5


def rolled_back(run_id: str, reason: str | None, changes: Sequence[PartitionChange], undone: Sequence[str],
                asset: str, links: Links, notice: str = "", user: str | None = None) -> list[Message]:
    window = short_window(c.partition for c in changes) or "nothing"
    # A rollback over a quarter of days each backfilled alone undoes each backfill: the head names a few.
    listed = len(undone) > UNDONE_NAMED
    undone_text = (f"{len(undone)} backfills (listed below)" if listed else
                   ", ".join(backfill_link(links, b) for b in undone) or "an earlier publication")
    head = (f":rewind: *Rolled back* {esc(window)} — undoes {undone_text}; the previous publication is current "
            "again")
    blocks: list[Block] = [_section(head), *_fields([("Reason", tag_value(reason) if reason else NO_REASON),
                                                     ("Requested by", requested_by(user, reason)),
                                                     ("Run", link(links.run(run_id), run_id[:8]))])]
    if listed:
        blocks += _sections([backfill_link(links, b) for b in undone], head="*Undoes:*")
    if changes:
        blocks += _sections([change_line(c, asset, links) for c in changes], head="*Restored:*")
    if notice:
        blocks += _context([_notice_line(notice)])
    undone_plain = (f"{len(undone)} backfills" if listed else
                    ", ".join(one_line(b) for b in undone) or "an earlier publication")
    fallback = [f"Rolled back {esc(window)} — undoes {undone_plain}",
                f"Reason: {tag_value(reason) if reason else NO_REASON}", f"Requested by: {requested_by(user, reason)}",
                f"Run: {links.run(run_id)}"]
    return _messages(fallback, blocks)


# --- the current lane saturated by a backfill; correction flags left behind -----------------------------------

@dataclass(frozen=True)
class SaturationBreach:
    """One current-lane run over one objective while the backfill ran."""

    run_id: str
    metric: str  # "queue_wait" or "duration"
    observed_s: float
    objective_s: float
    status: str


@dataclass(frozen=True)
class Saturation:
    """A saturation incident as recorded against a backfill (audit.saturation_incidents)."""

    incident_id: str
    backfill_id: str
    window: str
    detected_at: str
    breaches: Sequence[SaturationBreach]
    backfill_run_ids: Sequence[str]
    backfill_runs_in_progress: int
    backfill_lane_limit: int | None
    runs_in_progress: int
    max_concurrent_runs: int | None


_METRIC = {"queue_wait": "queue wait", "duration": "duration"}


def _seconds(x: float) -> str:
    return f"{num(x)} s"


def breach_line(b: SaturationBreach, links: Links | None = None) -> str:
    """'abcd1234: duration 45.2 s > objective 0.001 s (STARTED)' — the run linked when links are given."""
    run = link(links.run(b.run_id), b.run_id[:8]) if links else esc(b.run_id[:8])
    return (f"{run}: {_METRIC.get(b.metric, esc(b.metric))} {_seconds(b.observed_s)} > objective "
            f"{_seconds(b.objective_s)} ({esc(b.status)})")


def _limit(value: int | None) -> str:
    return "no limit" if value is None else str(value)


def saturation_incident(s: Saturation, links: Links) -> list[Message]:
    runs = sorted({b.run_id for b in s.breaches})
    head = (f":rotating_light: *Current lane saturated* during backfill {backfill_link(links, s.backfill_id)}"
            f"{' over *' + esc(s.window) + '*' if s.window else ''}: {len(runs)} current-lane run(s) missed the "
            "objective while it ran")
    pairs = [("Backfill runs in progress", f"{s.backfill_runs_in_progress} (backfill lane limit "
                                           f"{_limit(s.backfill_lane_limit)})"),
             ("All runs in progress", f"{s.runs_in_progress} of {_limit(s.max_concurrent_runs)} (max_concurrent_runs)"),
             ("Detected", esc(s.detected_at)), ("Incident", f"`{esc(s.incident_id)}`")]
    if s.backfill_run_ids:
        pairs.append(("Backfill run(s)", ", ".join(link(links.run(r), r[:8]) for r in s.backfill_run_ids)))
    blocks: list[Block] = [_section(head), *_fields(pairs),
                           *_sections([f"• {breach_line(b, links)}" for b in s.breaches], head="*Missed:*"),
                           *_context(["Recorded against the backfill in `audit.saturation_incidents` (the SLO report "
                                      "lists incidents per backfill). Cap the backfill lane (`dagster/backfill` limit "
                                      "in dagster.yaml) or run the backfill outside the current load's window; "
                                      "today's load is late while nothing fails."])]
    fallback = [f"Current lane saturated during backfill {one_line(shown_id(s.backfill_id))}"
                f"{' over ' + esc(s.window) if s.window else ''}: "
                + "; ".join(breach_line(b) for b in s.breaches),
                f"Backfill: {backfill_url(links, s.backfill_id)}"]
    return _messages(fallback, blocks)


@dataclass(frozen=True)
class StaleFlag:
    """Correction flags one run left behind: its days, when it set them, and what the instance knows of it."""

    run_id: str
    backfill_id: str | None
    reason: str | None
    days: Sequence[str]
    since: str
    age_s: float
    run_status: str | None  # None: the run is unknown to this Dagster instance
    bound_s: float


def _age(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600} h {s % 3600 // 60} min" if s >= 3600 else f"{s // 60} min"


def stale_flags(f: StaleFlag, view: str, asset: str, links: Links) -> list[Message]:
    status = esc(f.run_status) if f.run_status else "unknown to this Dagster instance"
    head = (f":warning: *Correction flag left behind* — {len(f.days)} day(s) *{esc(short_window(f.days))}* "
            f"still show `correction_in_progress` on `{esc(view)}`, {_age(f.age_s)} after run "
            f"{link(links.run(f.run_id), f.run_id[:8])} set them; that run is {status}")
    pairs = [("Days", _days_linked(list(f.days), asset, links)), ("Run", f"{link(links.run(f.run_id), f.run_id[:8])} "
                                                                      f"({status})"),
             ("Flagged since", f"{esc(f.since)} ({_age(f.age_s)})"), ("Bound", f"{_age(f.bound_s)} "
                                                                        "(ATLASMART_FLAG_ALERT_AFTER_S)")]
    if f.backfill_id:
        pairs.append(("Backfill", backfill_link(links, f.backfill_id)))
    pairs.append(("Reason", tag_value(f.reason) if f.reason else NO_REASON))
    blocks: list[Block] = [_section(head), *_fields(pairs),
                           *_sections(["Nothing is correcting these days: readers see a correction in progress that is "
                                       "not happening. The sensor `atlasmart_clear_correction_flags` clears the flags "
                                       "of ended runs on each tick and has not: check that it is running and that its "
                                       "ticks succeed (a tick fails while another process holds the warehouse). The "
                                       "next run of the daily job also clears them when it starts."])]
    fallback = [f"Correction flag left behind — {esc(short_window(f.days))} still flagged {_age(f.age_s)} after run "
                f"{esc(f.run_id)} ({status}) set it", f"Run: {links.run(f.run_id)}"]
    return _messages(fallback, blocks)
