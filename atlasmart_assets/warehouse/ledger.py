"""The ledger (audit.publications) and the versions it points at: what is published now, what each publication
changed, and the superseded versions retained for a rollback."""

from __future__ import annotations

import datetime as dt
import functools
import json
import uuid
from dataclasses import dataclass
from typing import Any, Collection

import duckdb

from atlasmart_assets import sql
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.warehouse.migrations import has_column
from atlasmart_assets.warehouse.rows import create_table, insert_rows
from atlasmart_assets.window import Window

STAGED_COLUMNS = ("partition_date", "line_id", "order_id", "customer_id", "country", "tier", "sku", "quantity",
                  "unit_price", "unit_cost", "order_time", "event_time", "source_sequence")
FACT_COLUMNS = ("partition_date", "line_id", "order_id", "customer_id", "country", "tier", "sku", "quantity",
                "unit_price", "unit_cost", "gmv", "cost", "gross_profit", "event_time", "source_sequence")
MART_COLUMNS = ("partition_date", "country", "tier", "lines", "orders", "units", "gmv", "cost", "gross_profit")


@dataclass(frozen=True)
class Layer:
    """A published table, its columns, and where its superseded rows are retained.

    A versioned layer (`store` set) keeps every version's rows in `store` under their publication id; `table` and
    `history` are views of it (the version the ledger points at, and the other retained ones). A `derived` store
    is itself a view, computed from another layer's (the fact from the staged lines, migration 008): nothing is
    written to it, and its versions come and go with that layer's. The mart is small and stays a table: its
    superseded rows are copied into `history` by the commit."""

    table: str
    columns: tuple[str, ...]
    history: str
    candidate: str
    store: str | None = None
    derived: bool = False
    kept: str | None = None  # a derived store's rows of versions it cannot compute (written before it was derived)


LAYERS = (
    Layer("staged.order_lines", STAGED_COLUMNS, "history.staged_order_lines", "candidate.staged_order_lines",
          "versions.staged_order_lines"),
    Layer("fact.fct_order_lines", FACT_COLUMNS, "history.fct_order_lines", "candidate.fct_order_lines",
          "versions.fct_order_lines", derived=True, kept="versions.fct_order_lines_unstaged"),
    Layer("mart.revenue_daily", MART_COLUMNS, "history.revenue_daily", "candidate.revenue_daily"),
)
# The stores a publish writes; the tables retention, an abandoned publish and an erasure delete versions from.
VERSIONED = tuple(layer for layer in LAYERS if layer.store and not layer.derived)
STORE_TABLES = tuple(str(layer.store) for layer in VERSIONED) + tuple(layer.kept for layer in LAYERS if layer.kept)
COPIED = tuple(layer for layer in LAYERS if not layer.store)


@dataclass(frozen=True)
class Current:
    """The publication a reader sees now for one partition."""

    partition: str
    publication_id: str
    seq: int
    rows: int
    controls: list[float]
    sha256: str
    extract_json: str
    prev_publication_id: str | None
    fingerprint: str | None = None  # of its staged lines (audit.day_versions); None for a row written before 011
    stored_as: str | None = None  # the publication whose stored rows it reads
    input_sha256: str | None = None  # of the landing batches it read (candidates.Evidence.digest)
    dimension_version: str | None = None  # of the customer dimension it joined
    code_version: str | None = None  # of the release that published it (a rollback's: not the one that built it)
    requests_applied: tuple[str, ...] = ()  # the deletion requests whose lines it left out
    kind: str | None = None  # of the publication: publish or rollback
    # The deletion requests naming a record of its evidence when it was built (audit.day_versions); None for a
    # version written before migration 014.
    requests_named: tuple[str, ...] | None = None


@dataclass(frozen=True)
class DayCandidate:
    """What a correction would publish for one partition."""

    partition: str
    rows: int
    controls: list[float]
    sha256: str
    extract_json: str
    input_sha256: str | None = None
    source_high_sequence: int | None = None
    input_batches: tuple[dict[str, Any], ...] = ()
    as_of: str | None = None
    dimension_version: str | None = None
    dimension_batches: tuple[dict[str, Any], ...] = ()
    requests_applied: tuple[str, ...] = ()
    fingerprint: str | None = None  # of its staged lines: equal to the current version's, it is not stored again
    requests_named: tuple[str, ...] | None = None  # the deletion requests naming a record of its evidence


@dataclass(frozen=True)
class Publication:
    publication_id: str
    kind: str
    window: Window
    before: dict[str, Current]
    after: dict[str, DayCandidate]
    lock_hold_s: float
    # Days whose published rows differed from their ledger row (changed behind it) and were written afresh: what
    # readers of the tables saw moved, though the ledger's before and after may agree.
    repaired: tuple[str, ...] = ()

    @functools.cached_property
    def changed(self) -> list[str]:
        """The days whose extract's content changed (controls or mart rows), or that are new."""
        return [p for p, c in self.after.items() if p not in self.before or self.before[p].sha256 != c.sha256]

    @functools.cached_property
    def lines_changed(self) -> list[str]:
        """The days whose staged (and so fact) lines changed though their extract's content did not: a sku, a
        customer of the same country and tier, a time. Where a fingerprint is unknown or of another DuckDB release,
        nothing is claimed."""
        content = set(self.changed)
        return [p for p, c in self.after.items() if p not in content and fingerprints_differ(
            self.before[p].fingerprint, c.fingerprint)]


def fingerprints_differ(before: str | None, after: str | None) -> bool:
    """Whether two staged-line fingerprints (candidates.fingerprint) say the lines differ: both known, of the same
    DuckDB release, and not equal."""
    if not before or not after or before == after:
        return False
    return before.split(":", 1)[0] == after.split(":", 1)[0]


def new_publication_id(kind: str) -> str:
    return f"{kind[:3]}-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def _requests_named(con: duckdb.DuckDBPyConnection) -> str:
    """audit.day_versions' requests_named as a select reads it (alias d): a reader does not migrate, and a warehouse
    no writer has migrated since 014 has none."""
    return "d.requests_named" if has_column(con, "audit", "day_versions", "requests_named") else "null"


def repaired_column(con: duckdb.DuckDBPyConnection, alias: str = "") -> str:
    """audit.publications' repaired as a select reads it: a reader does not migrate, and a warehouse no writer has
    migrated since 015 has none."""
    return f"{alias}repaired" if has_column(con, "audit", "publications", "repaired") else "null"


def _named(value: str | None) -> tuple[str, ...] | None:
    return tuple(json.loads(value)) if value is not None else None


def current(con: duckdb.DuckDBPyConnection, window: Window) -> dict[str, Current]:
    return _currents(con, "audit.current_publications", "where partition_date between $start and $end",
                     window.params)


def published(con: duckdb.DuckDBPyConnection, versions: dict[str, str]) -> dict[str, Current]:
    """The publication `versions` names for each day, as readers saw it while it was current."""
    days = sorted(versions)
    return _currents(con, "audit.publications join (select unnest($days::date[]) as partition_date, "
                          "unnest($pubs::varchar[]) as publication_id) using (partition_date, publication_id)", "",
                     {"days": days, "pubs": [versions[d] for d in days]})


def _currents(con: duckdb.DuckDBPyConnection, source: str, where: str,
              params: dict[str, Any]) -> dict[str, Current]:
    """Ledger rows of `source` (a relation chosen by code) as Current, with their version's fingerprint."""
    rows = con.execute(
        "select partition_date, publication_id, seq, rows_after, controls_after, sha256_after, extract_json, "
        "prev_publication_id, d.fingerprint, coalesce(d.stored_as, publication_id), input_sha256, dimension_version, "
        f"code_version, requests_applied, kind, {_requests_named(con)} "
        f"from {source} left join audit.day_versions d using (partition_date, publication_id) {where}",
        params).fetchall()
    return {r[0].isoformat(): Current(r[0].isoformat(), r[1], r[2], r[3], json.loads(r[4]), *r[5:13],
                                      tuple(json.loads(r[13])) if r[13] else (), r[14], _named(r[15]))
            for r in rows}


# A ledger row's columns as a DayCandidate holds them (then the version's fingerprint and the requests that named
# its evidence), for day_candidate; {named} is _requests_named's.
CANDIDATE_COLUMNS = ("p.partition_date, p.publication_id, p.rows_after, p.controls_after, p.sha256_after, "
                     "p.extract_json, p.input_sha256, p.source_high_sequence, p.input_batches, p.as_of, "
                     "p.dimension_version, p.dimension_batches, p.requests_applied, d.fingerprint, {named}")


def candidate_columns(con: duckdb.DuckDBPyConnection) -> str:
    return CANDIDATE_COLUMNS.format(named=_requests_named(con))


def day_candidate(r: tuple[Any, ...]) -> DayCandidate:
    """A row of CANDIDATE_COLUMNS as the candidate that would publish it again."""
    return DayCandidate(r[0].isoformat(), r[2], json.loads(r[3]), r[4], r[5], r[6], r[7],
                        tuple(json.loads(r[8])) if r[8] else (), r[9], r[10],
                        tuple(json.loads(r[11])) if r[11] else (), tuple(json.loads(r[12])) if r[12] else (), r[13],
                        _named(r[14]))


def publication_candidates(con: duckdb.DuckDBPyConnection, versions: dict[str, str]) -> dict[str, DayCandidate]:
    """The publication `versions` names for each day, exactly as it was published (ledger row and fingerprint)."""
    days = sorted(versions)
    rows = con.execute(f"select {candidate_columns(con)} from audit.publications p "
                       "join (select unnest($days::date[]) as partition_date, unnest($pubs::varchar[]) as "
                       "publication_id) using (partition_date, publication_id) "
                       "left join audit.day_versions d using (partition_date, publication_id)",
                       {"days": days, "pubs": [versions[d] for d in days]}).fetchall()
    return {r[0].isoformat(): day_candidate(r) for r in rows}


def latest_publication_id(con: duckdb.DuckDBPyConnection) -> str | None:
    row = con.execute("select publication_id from audit.publications order by seq desc limit 1").fetchone()
    return row[0] if row else None


def is_committed(con: duckdb.DuckDBPyConnection, pub_id: str) -> bool:
    """The ledger holds publication `pub_id` (its commit happened)."""
    return bool(con.execute("select count(*) from audit.publications where publication_id = $p",
                            {"p": pub_id}).fetchone()[0])


def loaded_batches(con: duckdb.DuckDBPyConnection, window: Window) -> dict[tuple[str, str], dict[str, Any]]:
    """Each landing batch of the window as first loaded, with the rows raw.order_lines holds for it now and whether
    its lines' fingerprint is one this DuckDB release computes (batch_lines_fingerprints.sql)."""
    # A reader does not migrate: a warehouse no writer has migrated since 012 has no fingerprints yet (its batches are
    # parsed and loaded again, by the writer that then migrates it).
    fingerprinted = has_column(con, "raw", "batches", "lines_fingerprint")
    columns = "b.*" if fingerprinted else "b.*, cast(null as varchar) as lines_fingerprint"
    fingerprint = "b.lines_fingerprint" if fingerprinted else "cast(null as varchar)"
    cur = con.execute(
        f"select {columns}, coalesce(n.rows, 0) as loaded_rows, "
        f"coalesce(starts_with({fingerprint}, version() || ':'), false) as fingerprint_current "
        "from raw.batches b left join ("
        " select partition_date, extraction_batch, count(*) as rows from raw.order_lines"
        " where partition_date between $start and $end group by 1, 2) n"
        " on n.partition_date = b.partition_date and n.extraction_batch = b.batch_id"
        " where b.partition_date between $start and $end", window.params)
    names = [d[0] for d in cur.description]
    return {(row[0].isoformat(), row[1]): dict(zip(names, row)) for row in cur.fetchall()}


RAW_BATCHES_COLUMNS = (("partition_date", "date"), ("batch_id", "varchar"), ("file", "varchar"), ("sha256", "varchar"),
                       ("kind", "varchar"), ("source_high_sequence", "bigint"), ("extracted_at", "varchar"),
                       ("records", "bigint"), ("controls", "varchar"), ("first_run_id", "varchar"))


# The fingerprint of a batch without lines, as batch_lines_fingerprints.sql would write it (an SQL expression;
# raw_files.EMPTY_FINGERPRINT_END is its end).
EMPTY_FINGERPRINT = "version() || ': 0 lines, hash sum 0'"


def record_batches(con: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]], window: Window) -> None:
    """First sighting of each landing batch: the sha256 every later load must match (a batch recorded already
    keeps its first row), and the fingerprint of the lines raw.order_lines now holds for each of them (days
    `window`), which a later load that reuses them compares."""
    insert_rows(con, "raw.batches", RAW_BATCHES_COLUMNS,
                [(dt.date.fromisoformat(r["partition_date"]), r["batch_id"], r["file"], r["sha256"], r["kind"],
                  r["source_high_sequence"], r["extracted_at"], r["records"], r["controls"], r["run_id"])
                 for r in rows],
                "on conflict do nothing", computed=(("first_loaded_at", "now()"),))
    create_table(con, "recorded", (("partition_date", "date"), ("extraction_batch", "varchar")),
                 [(dt.date.fromisoformat(r["partition_date"]), r["batch_id"]) for r in rows], temp=True)
    # A batch of no lines has no group below: it is recorded as empty, never left without a fingerprint.
    con.execute(f"update raw.batches b set lines_fingerprint = {EMPTY_FINGERPRINT} from recorded r "
                "where b.partition_date = r.partition_date and b.batch_id = r.extraction_batch")
    lines = ("(select * from raw.order_lines r semi join recorded using (partition_date, extraction_batch) "
             "where r.partition_date between $start and $end)")
    con.execute(f"update raw.batches b set lines_fingerprint = f.lines_fingerprint "
                f"from ({sql.text('batch_lines_fingerprints').format(lines=lines)}) f "
                "where b.partition_date = f.partition_date and b.batch_id = f.extraction_batch", window.params)
    con.execute("drop table recorded")


# The ledger's columns a publish writes, each with its type (seq and published_at come from the database).
LEDGER_COLUMNS = (("publication_id", "varchar"), ("partition_date", "date"), ("kind", "varchar"),
                  ("run_id", "varchar"), ("backfill_id", "varchar"), ("reason", "varchar"),
                  ("fence_override", "varchar"), ("code_version", "varchar"), ("input_sha256", "varchar"),
                  ("source_high_sequence", "bigint"), ("prev_publication_id", "varchar"), ("restored_from", "varchar"),
                  ("rows_before", "bigint"), ("rows_after", "bigint"), ("controls_before", "varchar"),
                  ("controls_after", "varchar"), ("sha256_before", "varchar"), ("sha256_after", "varchar"),
                  ("changed", "boolean"), ("extract_json", "varchar"), ("input_batches", "varchar"),
                  ("as_of", "varchar"), ("accept_shrink", "varchar"), ("dimension_version", "varchar"),
                  ("dimension_batches", "varchar"), ("requests_applied", "varchar"), ("repaired", "boolean"))


def write_rows(con: duckdb.DuckDBPyConnection, pub_id: str, kind: str, run: RunInfo, code_version: str,
               before: dict[str, Current], after: dict[str, DayCandidate], restored: dict[str, str],
               repaired: Collection[str] = ()) -> None:
    """One ledger row per day of `after`, in one statement from a frame: a year's 365 single-row inserts took
    0.6-0.8 s of the commit's hold, the frame 15 ms. `repaired`: the days written afresh because their published
    rows differed from their ledger row."""
    rows = []
    for partition, cand in sorted(after.items()):
        prev = before.get(partition)
        rows.append((
            pub_id, dt.date.fromisoformat(partition), kind, run.run_id, run.backfill_id, run.reason,
            run.fence_override, code_version, cand.input_sha256, cand.source_high_sequence,
            prev.publication_id if prev else None, restored.get(partition), prev.rows if prev else None, cand.rows,
            json.dumps(prev.controls) if prev else None, json.dumps(cand.controls), prev.sha256 if prev else None,
            cand.sha256, prev is None or prev.sha256 != cand.sha256, cand.extract_json,
            json.dumps(list(cand.input_batches)) if cand.input_batches else None, cand.as_of, run.accept_shrink,
            cand.dimension_version,
            json.dumps(list(cand.dimension_batches)) if cand.dimension_batches else None,
            json.dumps(list(cand.requests_applied)), partition in repaired))
    # nextval numbers the rows as they are read, not in the order by's order: they are built in partition order.
    insert_rows(con, "audit.publications", LEDGER_COLUMNS, rows, "order by partition_date",
                computed=(("seq", "nextval('audit.publication_seq')"), ("published_at", "now()")))


def reused(before: dict[str, Current], after: dict[str, DayCandidate]) -> dict[str, str]:
    """The days whose candidate's staged lines equal their current version's (same fingerprint), and the
    publication whose stored rows they will read: those rows are not written again."""
    return {p: str(before[p].stored_as) for p, c in after.items()
            if c.fingerprint is not None and p in before and before[p].fingerprint == c.fingerprint}


DAY_VERSION_COLUMNS = (("partition_date", "date"), ("publication_id", "varchar"), ("stored_as", "varchar"),
                       ("fingerprint", "varchar"), ("requests_named", "varchar"))
VERSION_COLUMNS = (("partition_date", "date"), ("publication_id", "varchar"))


def record_storage(con: duckdb.DuckDBPyConnection, pub_id: str, after: dict[str, DayCandidate],
                   reuse: dict[str, str]) -> None:
    """Where each day of `pub_id` is stored (its own rows, or the ones `reuse` names), its fingerprint and the
    deletion requests that named its evidence."""
    insert_rows(con, "audit.day_versions", DAY_VERSION_COLUMNS,
                [(dt.date.fromisoformat(p), pub_id, reuse.get(p, pub_id), c.fingerprint,
                  json.dumps(list(c.requests_named)) if c.requests_named is not None else None)
                 for p, c in sorted(after.items())])


def versions_table(con: duckdb.DuckDBPyConnection, name: str, versions: dict[str, str]) -> None:
    """A temp table (partition_date, publication_id) naming one version per partition."""
    create_table(con, name, VERSION_COLUMNS, [(dt.date.fromisoformat(p), v) for p, v in versions.items()],
                 temp=True)


def number_version(con: duckdb.DuckDBPyConnection, pub_id: str) -> int:
    """The small integer the version store files `pub_id`'s rows under (the views join on it, not on the id)."""
    return con.execute("insert into audit.version_numbers values ($p, nextval('audit.version_seq')) returning version",
                       {"p": pub_id}).fetchone()[0]


def write_version(con: duckdb.DuckDBPyConnection, layer: Layer, pub_id: str, version: int, source: str,
                  part: Window, skip: Collection[str] = ()) -> None:
    """Write `source`'s rows of `part`, but for the days in `skip` (stored already), into the layer's store under
    `pub_id` (ahead of the commit: no reader sees a version before the ledger points at it)."""
    cols = ", ".join(layer.columns)
    con.execute(f"insert into {layer.store} (publication_id, version, {cols}) select $pub, $version, {cols} "
                f"from {source} where partition_date between $start and $end "
                "and partition_date not in (select unnest($skip::date[]))",
                {"pub": pub_id, "version": version, "skip": sorted(skip), **part.params})


def retire(con: duckdb.DuckDBPyConnection, before: dict[str, Current], window: Window) -> None:
    """Keep the superseded mart rows of each partition under their publication id, so the change can be undone
    (a versioned layer's superseded rows stay where they are)."""
    if not before:
        return
    versions_table(con, "superseded", {c.partition: c.publication_id for c in before.values()})
    for layer in COPIED:
        cols = ", ".join(f"t.{c}" for c in layer.columns)
        con.execute(f"insert into {layer.history} select s.publication_id, {cols} from {layer.table} t "
                    "join superseded s using (partition_date) where t.partition_date between $start and $end",
                    window.params)


def _keep(con: duckdb.DuckDBPyConnection, retain: int, window: Window) -> None:
    """temp table keep: per partition of the window, its current publication and the `retain` before it, and the
    newest version of each of its `retain` + 1 newest contents (retained_versions.sql)."""
    con.execute(f"create or replace temp table keep as {_with_contents('retained_versions')}",
                {**window.params, "retain": retain + 1})


def _with_contents(name: str) -> str:
    return sql.text(name).format(contents=sql.text("version_contents"))


def restorable(con: duckdb.DuckDBPyConnection, retain: int, window: Window) -> dict[tuple[str, str], str]:
    """(day, publication id) of every superseded version of the window a rollback can restore -> the version whose
    rows it reads: itself where retention keeps it, else the newest kept version of its content
    (restorable_versions.sql)."""
    _keep(con, retain, window)
    rows = con.execute(_with_contents("restorable_versions"), window.params).fetchall()
    return {(day, pub): source for day, pub, source in rows}


def prune_history(con: duckdb.DuckDBPyConnection, retain: int, window: Window) -> set[str]:
    """Drop superseded mart rows beyond the retention setting (in the commit: they are few); returns the latest
    `retain` publication ids overall (the extract versions worth keeping on disk)."""
    _keep(con, retain, window)
    for layer in COPIED:
        con.execute(f"delete from {layer.history} h where h.partition_date between $start and $end and not exists "
                    "(select 1 from keep k where k.partition_date = h.partition_date "
                    "and k.publication_id = h.publication_id)", window.params)
    last = con.execute("select publication_id from audit.publications group by 1 order by max(seq) desc limit $n",
                       {"n": retain}).fetchall()
    return {r[0] for r in last}


def prune_versions(con: duckdb.DuckDBPyConnection, retain: int, part: Window) -> int:
    """Drop versioned rows of `part` beyond the retention setting. Only versions the ledger knows are
    considered (a publish in progress writes rows the ledger does not name yet); never the current one, so no
    reader of the published tables sees this. Returns the rows dropped."""
    _keep(con, retain, part)
    # A version past retention reads no rows from now on, even where they stay for a kept version that reads them.
    con.execute("update audit.day_versions d set stored_as = null where d.partition_date between $start and $end "
                "and d.stored_as is not null and not exists (select 1 from keep k "
                "where k.partition_date = d.partition_date and k.publication_id = d.publication_id)", part.params)
    dropped = 0
    for table in STORE_TABLES:
        dropped += con.execute(
            f"delete from {table} v where v.partition_date between $start and $end "
            "and exists (select 1 from audit.publications p where p.partition_date = v.partition_date "
            "and p.publication_id = v.publication_id) and not exists (select 1 from keep k "
            "where k.partition_date = v.partition_date and k.publication_id = v.publication_id) "
            "and not exists (select 1 from audit.day_versions d where d.partition_date = v.partition_date "
            "and d.stored_as = v.publication_id)",
            part.params).fetchone()[0]
    return dropped


def over_retention(con: duckdb.DuckDBPyConnection, retain: int, window: Window) -> set[str]:
    """The days of the window with more versions in the ledger than the current one and `retain` before it, all of
    which retention keeps: the only ones a prune has anything to drop from."""
    rows = con.execute("select partition_date from audit.publications where partition_date between $start and $end "
                       "group by 1 having count(*) > $n", {**window.params, "n": retain + 1}).fetchall()
    return {r[0].isoformat() for r in rows}


@dataclass(frozen=True)
class Pending:
    """A publish that wrote rows ahead of its commit."""

    publication_id: str
    run_id: str
    window: Window
    abandoned: bool
    lines: dict[str, int] | None = None  # the lines it wrote ahead of each day (None: not recorded, or damaged)


def pending_versions(con: duckdb.DuckDBPyConnection) -> dict[str, Pending]:
    rows = con.execute("select publication_id, run_id, window_start, window_end, abandoned_at is not null, "
                       "day_lines from audit.pending_versions").fetchall()
    out = {}
    for pub_id, run_id, start, end, abandoned, day_lines in rows:
        window = Window(start, end)
        out[pub_id] = Pending(pub_id, run_id, window, abandoned, _day_lines(window, day_lines))
    return out


def _day_lines(window: Window, day_lines: list[int | None] | None) -> dict[str, int] | None:
    """A pending record's lines by day; None (drop by days, as for records from before migration 013) unless the
    list has one count per day of the window: a damaged record must never stop the collection of abandoned rows."""
    keys = window.keys
    if day_lines is None or len(day_lines) != len(keys) or any(n is None or n < 0 for n in day_lines):
        return None
    return dict(zip(keys, day_lines))


def may_write(con: duckdb.DuckDBPyConnection, pub_id: str) -> bool:
    """Whether `pub_id` is still a pending publish nobody marked abandoned."""
    pending = pending_versions(con).get(pub_id)
    return pending is not None and not pending.abandoned


def mark_abandoned(con: duckdb.DuckDBPyConnection, pub_ids: list[str]) -> None:
    con.execute("update audit.pending_versions set abandoned_at = now() where publication_id in (select unnest($ids)) "
                "and abandoned_at is null", {"ids": pub_ids})


def drop_version_rows(con: duckdb.DuckDBPyConnection, pub_id: str, part: Window) -> None:
    """Remove the written-ahead rows of `part` of a publication that never committed."""
    for table in STORE_TABLES:
        con.execute(f"delete from {table} where publication_id = $p and partition_date between $start and $end "
                    "and publication_id not in (select publication_id from audit.publications)",
                    {"p": pub_id, **part.params})


def forget_pending(con: duckdb.DuckDBPyConnection, pub_id: str) -> None:
    """The last step of dropping an abandoned publish: its number and its pending record."""
    con.execute("delete from audit.version_numbers where publication_id = $p "
                "and publication_id not in (select publication_id from audit.publications)", {"p": pub_id})
    con.execute("delete from audit.pending_versions where publication_id = $p", {"p": pub_id})


def erase_earlier_versions(con: duckdb.DuckDBPyConnection, pub_id: str, days: dict[str, list[str]]) -> None:
    """A publication applying a deletion request to a day: no retained prior version of that day may hold the
    subject, so the day's other versions are dropped and the ledger's earlier extract bytes erased (the ledger rows
    stay: who, when, why, hashes). Rolling back past this publication is then refused.
    One statement per table for all the days: this runs inside the commit's hold, which a statement per day made
    grow with the window (a year's request about 3-4.5 s of it)."""
    if not days:
        return
    erased = sorted(days.items())
    params = {"pub": pub_id, "days": [dt.date.fromisoformat(day) for day, _ in erased]}
    for table in STORE_TABLES:
        con.execute(f"delete from {table} as stored where partition_date in (select unnest($days::date[])) "
                    "and publication_id <> $pub and not exists (select 1 from audit.day_versions as v "
                    "where v.partition_date = stored.partition_date and v.publication_id = $pub "
                    "and coalesce(v.stored_as, $pub) = stored.publication_id)", params)
    for layer in COPIED:
        con.execute(f"delete from {layer.history} where partition_date in (select unnest($days::date[]))",
                    {"days": params["days"]})
    con.execute("update audit.publications as p set extract_json = e.text "
                "from (select unnest($days::date[]) as d, unnest($texts::varchar[]) as text) as e "
                "where p.partition_date = e.d and p.publication_id <> $pub",
                {**params, "texts": [json.dumps({"erased": True, "by_requests": requests}) for _, requests in erased]})
