"""The change notice of a publication, written by the publish itself right after the swap, with or without Slack or
a daemon: `$ATLASMART_DATA_DIR/notices/<backfill id, else publication id>.md`.

It names every republished day with rows and controls before → after, the neighbouring days proven unchanged, and
the saved extracts consumers must refresh. The neighbours' proof: their publication and hash as the ledger held
them before the correction's first ledger row (the ledger is append-only, so that value is frozen), compared after
the swap with the ledger now and with the sha256 of the extract bytes readers get (`published/partition=D.json`).

Reading (`collect`) and formatting (`markdown`, a pure function of plain values) are apart; the lifecycle sensor
links the file and, should it be missing (a crash between the swap and the notice), writes it with `write_for`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import duckdb

from atlasmart_assets import sql
from atlasmart_assets.alerts import format as fmt
from atlasmart_assets.extracts import file_name
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.settings import Settings
from atlasmart_assets.warehouse.ledger import fingerprints_differ, repaired_column

UI_BASE_URL_ENV = "ATLASMART_UI_BASE_URL"
DEFAULT_UI_BASE_URL = "http://localhost:3000"
SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}\Z")
PUBLISHED_ASSET = "mart/revenue_daily"
_COLUMNS = ("seq, partition_date, publication_id, kind, published_at, run_id, backfill_id, reason, fence_override, "
            "code_version, input_sha256, source_high_sequence, rows_before, rows_after, controls_before, "
            "controls_after, sha256_before, sha256_after, changed, restored_from, prev_publication_id, input_batches, "
            "dimension_version, requests_applied")


# What a repaired day is, in the notice's words.
REPAIRED = ("their published rows differed from their ledger rows, changed behind them, and were written afresh from "
            "the evidence: what readers saw moved, beyond any change the ledger's before and after show")


def notice_name(identifier: str) -> str:
    """A file name for a notice: the backfill or publication id when it is a safe name, else a digest of it
    (an id comes from a tag, and a tag like `../../x/evil` must never become a path)."""
    if SAFE_NAME.match(identifier) and not identifier.startswith("."):
        return f"{identifier}.md"
    return f"id-{hashlib.sha256(identifier.encode()).hexdigest()[:16]}.md"


def notice_path(cfg: Settings, identifier: str) -> Path:
    return cfg.notices_dir / notice_name(identifier)


@dataclass(frozen=True)
class NeighbourProof:
    """A day next to the corrected window: as frozen before the correction, and as readers get it after."""

    partition: str
    before_publication: str | None
    before_sha256: str | None
    after_publication: str | None
    after_sha256: str | None
    expected_extract_sha256: str | None
    extract_sha256: str | None

    @property
    def unchanged(self) -> bool:
        return (self.before_publication == self.after_publication and self.before_sha256 == self.after_sha256
                and self.expected_extract_sha256 == self.extract_sha256)


@dataclass(frozen=True)
class Notice:
    """Everything a change notice says, as plain values."""

    name: str
    kind: str
    backfill_id: str | None
    publication_ids: Sequence[str]
    run_ids: Sequence[str]
    published_at: str
    reason: str | None
    requested_by: str | None
    fence_override: str | None
    code_version: str
    changes: Sequence[fmt.PartitionChange]
    neighbours: Sequence[NeighbourProof]
    inputs: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    ui_base_url: str = DEFAULT_UI_BASE_URL

    @property
    def window(self) -> str:
        return fmt.window_label([c.partition for c in self.changes])

    @property
    def refresh(self) -> list[fmt.PartitionChange]:
        """The days whose published content changed: saved copies of these extracts are stale."""
        return [c for c in self.changes if c.changed]


# --- reading --------------------------------------------------------------------------------------------------

def _sha(text: str | None) -> str | None:
    return hashlib.sha256(text.encode()).hexdigest() if text is not None else None


def _file_sha(cfg: Settings, partition: str) -> str | None:
    path = cfg.published_dir / file_name(partition)
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _neighbours(con: duckdb.DuckDBPyConnection, cfg: Settings, days: Sequence[str], first_seq: int,
                corrected: set[str]) -> list[NeighbourProof]:
    if not days:
        return []
    lo, hi = dt.date.fromisoformat(min(days)), dt.date.fromisoformat(max(days))
    out = []
    for day in (lo - dt.timedelta(days=1), hi + dt.timedelta(days=1)):
        if day.isoformat() in corrected:
            continue
        frozen = con.execute(
            "select publication_id, sha256_after, extract_json from audit.publications where partition_date = $d "
            "and seq < $seq order by seq desc limit 1", {"d": day, "seq": first_seq}).fetchone()
        now = con.execute("select publication_id, sha256_after from audit.current_publications "
                          "where partition_date = $d", {"d": day}).fetchone()
        out.append(NeighbourProof(day.isoformat(), frozen[0] if frozen else None, frozen[1] if frozen else None,
                                  now[0] if now else None, now[1] if now else None,
                                  _sha(frozen[2]) if frozen else None, _file_sha(cfg, day.isoformat())))
    return out


def _previous_batches(con: duckdb.DuckDBPyConnection, replaced: Mapping[str, str]) -> dict[str, set[str]]:
    """Per day, the landing batches the publication it replaced read (`replaced`: the one before the notice's first
    publication of the day), to say which batches the correction added."""
    if not replaced:
        return {}
    days = sorted(replaced)
    rows = con.execute("select p.partition_date::varchar, p.input_batches from audit.publications p join (select "
                       "unnest($days::date[]) as partition_date, unnest($pubs::varchar[]) as publication_id) "
                       "using (partition_date, publication_id)",
                       {"days": days, "pubs": [replaced[d] for d in days]}).fetchall()
    return {d: {b["batch"] for b in json.loads(batches)} for d, batches in rows if batches}


def _evidence(row: tuple[Any, ...]) -> dict[str, Any]:
    """What a day's publication read, from its ledger row (_COLUMNS): every run's days of a backfill, not only those
    of the run that writes the notice (a backfill of several runs rewrites one notice)."""
    return {"input_batches": json.loads(row[21]) if row[21] else (), "dimension_version": row[22],
            "requests_applied": json.loads(row[23]) if row[23] else (), "input_sha256": row[10],
            "source_high_sequence": row[11]}


# Request ids named per day in a notice: requests accumulate, and a year's notice listing 3,000 on each day was 12 MB.
REQUESTS_SHOWN = 10


def _some(requests: Sequence[str]) -> str:
    """The first REQUESTS_SHOWN request ids, and how many more (the day's ledger row and extract list every one)."""
    shown = ", ".join(requests[:REQUESTS_SHOWN])
    more = len(requests) - REQUESTS_SHOWN
    return shown + (f" and {more:,} more (all in the day's ledger row and extract: requests_applied)" if more > 0
                    else "")


def _inputs(evidence: Mapping[str, Mapping[str, Any]], previous: Mapping[str, set[str]]) -> dict[str, str]:
    """What each day read: its landing batches (those new since the day's previous publication marked "added"), the
    dimension version and the deletion requests applied."""
    out: dict[str, str] = {}
    for day, ev in sorted(evidence.items()):
        batches = ev["input_batches"]
        if batches:
            seen = previous.get(day)
            out[day] = "; ".join(
                f"{b.get('batch', '?')} (sha256 {str(b.get('sha256', ''))[:12]}, high sequence "
                f"{b.get('source_high_sequence', '?')}){' — added' if seen is not None and b.get('batch') not in seen else ''}"
                for b in batches)
            if ev["dimension_version"]:
                out[day] += f"; dimension version {ev['dimension_version']}"
            if ev["requests_applied"]:
                out[day] += f"; deletion requests applied: {_some(list(ev['requests_applied']))}"
        elif ev["input_sha256"]:
            out[day] = f"raw sha256 {ev['input_sha256'][:12]}, source high sequence {ev['source_high_sequence']}"
    return out


def collect(con: duckdb.DuckDBPyConnection, cfg: Settings, publication_id: str, backfill_id: str | None = None,
            tags: Mapping[str, str] | None = None,
            requested_by: str | None = None, also: Mapping[str, Sequence[str]] | None = None) -> Notice | None:
    """The notice of one publication (with, per day, the publications `also` names: a retried run's earlier
    attempts' it walked back through), or of every publication of `backfill_id` (its file is named after the
    backfill, and a re-executed backfill's notice covers all it published). None if the ledger holds none."""
    also = also or {}
    where, value = (("p.backfill_id = $v", backfill_id) if backfill_id else
                    ("list_contains($v, p.publication_id)",
                     sorted({publication_id, *(p for pubs in also.values() for p in pubs)})))
    columns = f"{_COLUMNS}, {repaired_column(con, 'p.')}"
    rows = [r for r in con.execute(f"select {columns} from audit.publications as p where {where} order by seq",
                                   {"v": value}).fetchall()
            if backfill_id or r[2] == publication_id or r[2] in also.get(r[1].isoformat(), ())]
    if not rows:
        return None
    latest: dict[str, tuple[Any, ...]] = {}
    first: dict[str, tuple[Any, ...]] = {}
    repaired: set[str] = set()
    for r in rows:
        day = r[1].isoformat()
        first.setdefault(day, r)
        latest[day] = r
        if r[24]:
            repaired.add(day)
    prints = {row[0]: row[2:] for row in con.execute(sql.text("notice_fingerprints").format(where=where),
                                                      {"v": value}).fetchall()}
    changes = []
    for day in sorted(latest):
        r, f = latest[day], first[day]
        # Across several publications of one backfill: before = before its first, after = after its last.
        changes.append(fmt.PartitionChange(
            partition=day, publication_id=r[2], kind=r[3], rows_before=f[12], rows_after=r[13],
            controls_before=json.loads(f[14]) if f[14] else None, controls_after=json.loads(r[15]),
            sha256_before=f[16], sha256_after=r[17], changed=f[16] != r[17], restored_from=r[19],
            repaired=day in repaired,
            lines_changed=f[16] == r[17] and fingerprints_differ(prints.get(f[0], (None, None))[1],
                                                                 prints.get(r[0], (None, None))[0])))
    last = rows[-1]
    return Notice(
        name=notice_name(backfill_id or publication_id), kind=last[3], backfill_id=backfill_id,
        publication_ids=list(dict.fromkeys(r[2] for r in rows)), run_ids=list(dict.fromkeys(r[5] for r in rows)),
        published_at=f"{last[4]:%Y-%m-%d %H:%M:%S} UTC" if last[4] else "", reason=last[7],
        requested_by=requested_by, fence_override=last[8], code_version=last[9],
        changes=changes, neighbours=_neighbours(con, cfg, sorted(latest), rows[0][0], set(latest)),
        inputs=_inputs({d: _evidence(r) for d, r in latest.items()},
                       _previous_batches(con, {d: r[20] for d, r in first.items() if r[20]})),
        tags=dict(tags or {}),
        ui_base_url=os.environ.get(UI_BASE_URL_ENV, DEFAULT_UI_BASE_URL))


# --- formatting (pure) ----------------------------------------------------------------------------------------

def _controls(c: Sequence[float] | None) -> str:
    return "—" if c is None else ", ".join(f"{n} {fmt.num(x)}" for n, x in zip(fmt.CONTROL_NAMES, c))


def _proof(n: NeighbourProof) -> str:
    if n.before_publication is None and n.after_publication is None:
        return f"- {fmt.md(n.partition)}: unchanged (never published, before or after)"
    if n.unchanged:
        return (f"- {fmt.md(n.partition)}: **unchanged** — publication {fmt.md(n.after_publication)}, content sha256 "
                f"`{(n.after_sha256 or '')[:16]}` before and after; extract bytes sha256 "
                f"`{(n.extract_sha256 or '')[:16]}` = the bytes that publication wrote")
    return (f"- {fmt.md(n.partition)}: **CHANGED** — before: publication {fmt.md(n.before_publication or 'none')} "
            f"sha256 `{(n.before_sha256 or '—')[:16]}`; after: publication {fmt.md(n.after_publication or 'none')} "
            f"sha256 `{(n.after_sha256 or '—')[:16]}`; extract bytes sha256 `{(n.extract_sha256 or '—')[:16]}` "
            f"(expected `{(n.expected_extract_sha256 or '—')[:16]}`)")


def markdown(n: Notice) -> str:
    """The notice as markdown: what, why and who; every day before → after; neighbours; extracts to refresh."""
    links = fmt.Links(n.ui_base_url)
    what = ("Rollback" if n.kind == "rollback" else "Correction") if n.backfill_id or n.kind == "rollback" \
        else "Publication"
    title = f"backfill {fmt.md(n.backfill_id)}" if n.backfill_id else f"publication {fmt.md(n.publication_ids[-1])}"
    changed = [c.partition for c in n.refresh]
    lines = [c.partition for c in n.changes if c.lines_changed]
    repaired = [c.partition for c in n.changes if c.repaired]
    who = fmt.md(n.requested_by) if n.requested_by else "no user tag"
    head = [
        f"# {what} notice — {title}",
        "",
        f"- Window: {fmt.md(n.window)}",
        *([f"- Backfill: <{links.backfill(n.backfill_id)}>"] if n.backfill_id else []),
        "- Run(s): " + ", ".join(f"<{links.run(r)}>" for r in n.run_ids),
        f"- Publication(s): {', '.join(fmt.md(p) for p in n.publication_ids)} ({fmt.md(n.kind)}), "
        f"committed {fmt.md(n.published_at)}, code {fmt.md(n.code_version)}",
        f"- Reason: {fmt.md(n.reason) if n.reason else fmt.NO_REASON}",
        f"- Requested by: {who}",
        *([f"- Fence override: {fmt.md(n.fence_override)}"] if n.fence_override else []),
        *([f"- Tags: {', '.join(f'{fmt.md(k)}={fmt.md(v)}' for k, v in sorted(n.tags.items()))}"] if n.tags else []),
        f"- Days republished: {len(n.changes)}; content changed: {fmt.md(fmt.window_text(changed)) or 'none'}"
        + (f"; lines changed, content the same: {fmt.md(fmt.window_text(lines))} (their staged and fact rows differ: a "
           "sku, a customer of the same country and tier, a time; their controls and mart rows do not)"
           if lines else "")
        + (f"; repaired: {fmt.md(fmt.window_text(repaired))} ({REPAIRED})" if repaired else ""),
        "",
        "## Days, before → after",
        "",
        "| day | rows | controls that moved | controls before | controls after | content sha256 | publication |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in n.changes:
        moved = ", ".join(fmt.control_deltas(c.controls_before, c.controls_after)) if c.changed else "none"
        sha = (f"{(c.sha256_before or '—')[:12]} → {c.sha256_after[:12]}" if c.changed
               else f"unchanged {c.sha256_after[:12]}" + (" (lines changed)" if c.lines_changed else ""))
        sha += " (repaired)" if c.repaired else ""
        restored = f" (restores {fmt.md(c.restored_from)})" if c.restored_from else ""
        head.append(f"| [{fmt.md(c.partition)}]({links.asset(PUBLISHED_ASSET, c.partition)}) "
                    f"| {fmt.delta(c.rows_before, c.rows_after)} | {moved} "
                    f"| {_controls(c.controls_before)} | {_controls(c.controls_after)} | {sha} "
                    f"| {fmt.md(c.publication_id)}{restored} |")
    body = ["", "## Neighbouring days", "",
            "Frozen: each neighbour's publication and hash as the ledger held them before this "
            f"{'rollback' if n.kind == 'rollback' else 'correction'}; compared after the swap with the ledger and with "
            "the bytes of `published/partition=D.json`.", ""]
    body += [_proof(p) for p in n.neighbours] or ["- none (the window has no neighbour)"]
    body += ["", "## Saved extracts to refresh", ""]
    if n.refresh:
        body.append("Consumers holding a saved copy of these files must fetch them again:")
        body.append("")
        body += [f"- `published/{file_name(c.partition)}`: sha256 {(c.sha256_before or 'none (new day)')[:16]} → "
                 f"{c.sha256_after[:16]}" for c in n.refresh]
    else:
        body.append("None: every republished day kept its content (same sha256); saved extracts stay valid.")
    if n.inputs:
        body += ["", "## Input evidence", ""]
        body += [f"- {fmt.md(day)}: {fmt.md(text)}" for day, text in sorted(n.inputs.items())]
    return "\n".join(head + body) + "\n"


# --- writing --------------------------------------------------------------------------------------------------

def _write_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def write_for(con: duckdb.DuckDBPyConnection, cfg: Settings, publication_id: str, backfill_id: str | None = None,
              tags: Mapping[str, str] | None = None,
              requested_by: str | None = None, also: Mapping[str, Sequence[str]] | None = None) -> Path | None:
    """Collect and write the notice of a publication (or of its backfill); None if the ledger holds no row."""
    notice = collect(con, cfg, publication_id, backfill_id, tags, requested_by, also)
    return _write_file(cfg.notices_dir / notice.name, markdown(notice)) if notice else None


def write(cfg: Settings, con: duckdb.DuckDBPyConnection, publication_id: str, run: RunInfo,
          also: Mapping[str, Sequence[str]] | None = None) -> Path | None:
    """The publish's one call, after the swap: the notice of this publication, named after its backfill if any;
    `also`: the earlier publications it covers too (a retried run's attempts', by the run after its publish)."""
    return write_for(con, cfg, publication_id, run.backfill_id, dict(run.tags), run.requested_by, also)
