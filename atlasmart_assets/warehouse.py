"""The only module that writes the warehouse: connections, window replacement, the publish transaction, the ledger.

DuckDB allows one writing process per file, so every connection here is short: heavy work happens in a
run-private scratch database and the warehouse lock is held only to copy a window in or out.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import duckdb

from atlasmart_assets import extracts, sql
from atlasmart_assets.failpoints import failpoint
from atlasmart_assets.settings import Settings
from atlasmart_assets.window import RunInfo, Window

FACT_COLUMNS = ("partition_date, line_id, order_id, customer_id, country, tier, sku, quantity, unit_price, unit_cost, "
                "gmv, cost, gross_profit, event_time, source_sequence")
MART_COLUMNS = "partition_date, country, tier, lines, orders, units, gmv, cost, gross_profit"


class PublishConflict(RuntimeError):
    """The current publication of a partition moved between the audit and the publish."""


@dataclass
class LockStats:
    """How long this process waited for and held the warehouse lock (the evidence for lane isolation)."""

    waits: list[float] = field(default_factory=list)
    holds: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, float]:
        return {
            "lock_acquisitions": len(self.holds),
            "lock_wait_max_s": round(max(self.waits, default=0.0), 3),
            "lock_hold_max_s": round(max(self.holds, default=0.0), 3),
            "lock_hold_total_s": round(sum(self.holds), 3),
        }

    def reset(self) -> None:
        self.waits.clear()
        self.holds.clear()


LOCK_STATS = LockStats()


_THREADS: list[int | None] = [None]


def limit_threads(threads: int | None) -> None:
    """Cap DuckDB threads for the rest of this process (a backfill run leaves cores to the current lane)."""
    _THREADS[0] = threads


def _duckdb_config(cfg: Settings, capped: bool = False) -> dict[str, str]:
    # A window of any length streams through a bounded buffer pool (spilling to disk), so memory stays flat
    # in the number of days; insertion order is never relied on (every read that needs order says so).
    config = {"memory_limit": cfg.duckdb_memory_limit, "preserve_insertion_order": "false"}
    if capped and _THREADS[0]:
        config["threads"] = str(_THREADS[0])
    return config


def _is_lock_error(exc: duckdb.Error) -> bool:
    return "lock" in str(exc).lower()


@contextlib.contextmanager
def connect(cfg: Settings, stats: LockStats = LOCK_STATS) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short read-write connection; waits (never fails) while another process holds the file, up to the timeout."""
    cfg.data_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    delay = 0.05
    while True:
        try:
            con = duckdb.connect(str(cfg.warehouse_path), config=_duckdb_config(cfg))
            break
        except duckdb.Error as exc:
            if not _is_lock_error(exc) or time.monotonic() - started > cfg.lock_timeout_s:
                raise
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)
    acquired = time.monotonic()
    stats.waits.append(acquired - started)
    try:
        _ensure_schema(con)
        reconcile_extracts(con, cfg)
        yield con
    finally:
        con.close()
        stats.holds.append(time.monotonic() - acquired)


def _ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Apply ddl.sql once per version of it: re-running it on every connection would write the catalog each time."""
    version = sql.fingerprint("ddl")
    applied = con.execute("select count(*) from information_schema.tables "
                          "where table_schema = 'audit' and table_name = 'schema_version'").fetchone()[0]
    if applied and con.execute("select count(*) from audit.schema_version where version = $v",
                               {"v": version}).fetchone()[0]:
        return
    con.execute(sql.text("ddl"))
    con.execute("create table if not exists audit.schema_version (version varchar, applied_at timestamp)")
    con.execute("insert into audit.schema_version values ($v, now())", {"v": version})


def scratch_path(cfg: Settings, run_id: str) -> Path:
    return cfg.scratch_dir / f"{run_id}.duckdb"


def prune_scratch(cfg: Settings, max_age_s: float) -> None:
    """Scratch of finished or crashed runs (a failed run's scratch is kept a while for inspection)."""
    if cfg.scratch_dir.exists():
        cutoff = time.time() - max_age_s
        for path in cfg.scratch_dir.glob("*.duckdb*"):
            if path.stat().st_mtime < cutoff:
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def drop_scratch(cfg: Settings, run_id: str) -> None:
    """Remove a run's scratch database with its WAL and spill directory."""
    base = scratch_path(cfg, run_id)
    for path in (base, base.with_name(base.name + ".wal"), base.with_name(base.name + ".tmp")):
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def open_scratch(cfg: Settings, run_id: str) -> duckdb.DuckDBPyConnection:
    """The run's private candidate database: no reader looks here and no other run writes it."""
    cfg.scratch_dir.mkdir(parents=True, exist_ok=True)
    # Only scratch work is capped: while a run holds the warehouse lock it should finish as fast as it can.
    return duckdb.connect(str(scratch_path(cfg, run_id)), config=_duckdb_config(cfg, capped=True))


def _attach(con: duckdb.DuckDBPyConnection, path: Path, alias: str = "s") -> None:
    con.execute(f"attach '{path}' as {alias}")


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    con.execute("begin transaction")
    try:
        yield con
    except BaseException:
        con.execute("rollback")
        raise
    con.execute("commit")


def copy_out(cfg: Settings, scratch: Path, table: str, window: Window, as_name: str) -> int:
    """Copy a window of a warehouse table into the scratch database; returns the rows copied."""
    with connect(cfg) as con:
        _attach(con, scratch)
        con.execute(f"create or replace table s.{as_name} as select * from {table} "
                    "where partition_date between $start and $end", window.params)
        return con.execute(f"select count(*) from s.{as_name}").fetchone()[0]


def replace_window(cfg: Settings, scratch: Path, table: str, source: str, window: Window, columns: str = "*") -> None:
    """Delete the window and insert the scratch rows in one transaction: a re-run never appends."""
    with connect(cfg) as con:
        _attach(con, scratch)
        with transaction(con):
            con.execute(f"delete from {table} where partition_date between $start and $end", window.params)
            con.execute(f"insert into {table} select {columns} from s.{source} "
                        "where partition_date between $start and $end", window.params)


def raw_manifests(cfg: Settings, window: Window) -> dict[str, dict[str, Any]]:
    """First-seen manifest of each loaded partition, with the rows raw.order_lines holds for it now."""
    with connect(cfg) as con:
        cur = con.execute(
            "select m.*, coalesce(n.rows, 0) as loaded_rows from raw.manifests m left join ("
            " select partition_date, count(*) as rows from raw.order_lines"
            " where partition_date between $start and $end group by 1) n using (partition_date)"
            " where m.partition_date between $start and $end", window.params)
        names = [d[0] for d in cur.description]
        return {row[0].isoformat(): dict(zip(names, row)) for row in cur.fetchall()}


def record_manifests(con: duckdb.DuckDBPyConnection, rows: list[dict[str, Any]]) -> None:
    """First sighting of each raw file: the sha256 every later load must match."""
    for r in rows:
        con.execute(
            "insert into raw.manifests values ($partition_date, $file, $sha256, $source, $schema_version, "
            "$extraction_batch, $extracted_at, $source_high_sequence, $records, $controls, now(), $run_id) "
            "on conflict do nothing", r)


def load_raw(cfg: Settings, scratch: Path, partitions: list[str], manifests: list[dict[str, Any]]) -> None:
    """Replace raw.order_lines for `partitions` and record first-seen manifests, in one transaction."""
    if not partitions:
        return
    with connect(cfg) as con:
        _attach(con, scratch)
        con.execute("create or replace temp table loading (partition_date date)")
        con.executemany("insert into loading values (?)", [(dt.date.fromisoformat(p),) for p in partitions])
        with transaction(con):
            con.execute("delete from raw.order_lines where partition_date in (select partition_date from loading)")
            con.execute(
                "insert into raw.order_lines select partition_date, line_id, order_id, customer_id, sku, quantity, "
                "unit_price, unit_cost, event_time, source_sequence, extraction_batch from s.raw_lines "
                "where partition_date in (select partition_date from loading)")
            record_manifests(con, manifests)


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


def _current(con: duckdb.DuckDBPyConnection, window: Window) -> dict[str, Current]:
    rows = con.execute(
        "select partition_date, publication_id, seq, rows_after, controls_after, sha256_after, extract_json, "
        "prev_publication_id from audit.current_publications where partition_date between $start and $end",
        window.params).fetchall()
    return {r[0].isoformat(): Current(r[0].isoformat(), r[1], r[2], r[3], json.loads(r[4]), r[5], r[6], r[7])
            for r in rows}


def current(cfg: Settings, window: Window) -> dict[str, Current]:
    with connect(cfg) as con:
        return _current(con, window)


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


@dataclass(frozen=True)
class Publication:
    publication_id: str
    kind: str
    window: Window
    before: dict[str, Current]
    after: dict[str, DayCandidate]
    lock_hold_s: float

    @property
    def changed(self) -> list[str]:
        return [p for p, c in self.after.items() if p not in self.before or self.before[p].sha256 != c.sha256]


def new_publication_id(kind: str) -> str:
    return f"{kind[:3]}-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


def _ledger_rows(con: duckdb.DuckDBPyConnection, pub_id: str, kind: str, run: RunInfo, code_version: str,
                 before: dict[str, Current], after: dict[str, DayCandidate], restored: dict[str, str]) -> None:
    for partition, cand in sorted(after.items()):
        prev = before.get(partition)
        con.execute(
            "insert into audit.publications values (nextval('audit.publication_seq'), $pub, $partition, $kind, "
            "now(), $run_id, $backfill_id, $reason, $override, $code, $input_sha, $high_seq, $prev, $restored, "
            "$rows_before, $rows_after, $controls_before, $controls_after, $sha_before, $sha_after, $changed, $extract)",
            {
                "pub": pub_id, "partition": dt.date.fromisoformat(partition), "kind": kind,
                "run_id": run.run_id, "backfill_id": run.backfill_id, "reason": run.reason,
                "override": run.fence_override, "code": code_version, "input_sha": cand.input_sha256,
                "high_seq": cand.source_high_sequence, "prev": prev.publication_id if prev else None,
                "restored": restored.get(partition),
                "rows_before": prev.rows if prev else None, "rows_after": cand.rows,
                "controls_before": json.dumps(prev.controls) if prev else None,
                "controls_after": json.dumps(cand.controls),
                "sha_before": prev.sha256 if prev else None, "sha_after": cand.sha256,
                "changed": prev is None or prev.sha256 != cand.sha256, "extract": cand.extract_json,
            })


def _versions_table(con: duckdb.DuckDBPyConnection, name: str, versions: dict[str, str]) -> None:
    """A temp table (partition_date, publication_id) naming one version per partition."""
    con.execute(f"create or replace temp table {name} (partition_date date, publication_id varchar)")
    con.executemany(f"insert into {name} values (?, ?)",
                    [(dt.date.fromisoformat(p), v) for p, v in versions.items()])


def _retire(con: duckdb.DuckDBPyConnection, before: dict[str, Current], window: Window) -> None:
    """Keep the superseded rows of each partition under their publication id, so the change can be undone."""
    if not before:
        return
    _versions_table(con, "superseded", {c.partition: c.publication_id for c in before.values()})
    con.execute(f"insert into history.fct_order_lines select s.publication_id, {', '.join('f.' + c.strip() for c in FACT_COLUMNS.split(','))} "
                "from fact.fct_order_lines f join superseded s using (partition_date) "
                "where f.partition_date between $start and $end", window.params)
    con.execute(f"insert into history.revenue_daily select s.publication_id, {', '.join('m.' + c.strip() for c in MART_COLUMNS.split(','))} "
                "from mart.revenue_daily m join superseded s using (partition_date) "
                "where m.partition_date between $start and $end", window.params)


def _prune_history(con: duckdb.DuckDBPyConnection, retain: int, window: Window) -> set[str]:
    """Drop superseded rows beyond the retention setting; returns the latest `retain` publication ids overall
    (the extract versions worth keeping on disk)."""
    con.execute(
        "create or replace temp table keep as select partition_date, publication_id from ("
        " select partition_date, publication_id, row_number() over (partition by partition_date order by seq desc) as n"
        " from audit.publications where partition_date between $start and $end) where n <= $retain",
        {**window.params, "retain": retain + 1})
    for table in ("history.fct_order_lines", "history.revenue_daily"):
        con.execute(f"delete from {table} h where h.partition_date between $start and $end and not exists "
                    "(select 1 from keep k where k.partition_date = h.partition_date "
                    "and k.publication_id = h.publication_id)", window.params)
    last = con.execute("select publication_id from audit.publications group by 1 order by max(seq) desc limit $n",
                       {"n": retain}).fetchall()
    return {r[0] for r in last}


def reconcile_extracts(con: duckdb.DuckDBPyConnection, cfg: Settings) -> None:
    """After a crash between commit and swap, point `published` at the version the ledger committed."""
    row = con.execute("select publication_id from audit.publications order by seq desc limit 1").fetchone()
    if row and extracts.current_version(cfg) != row[0] and (cfg.versions_dir / row[0]).is_dir():
        extracts.swap(cfg, row[0])


def publish(cfg: Settings, scratch: Path, window: Window, run: RunInfo, code_version: str,
            after: dict[str, DayCandidate], expected: dict[str, Current] | None = None,
            kind: str = "publish", fact_source: str = "fct_candidate", mart_source: str = "mart_candidate",
            restored: dict[str, str] | None = None) -> Publication:
    """Replace fact and mart for the whole window, record ledger and prior version, in ONE transaction;
    then swap the extracts in. `expected` is what the audit compared against: if another publisher moved a
    partition since, nothing is written."""
    pub_id = new_publication_id(kind)
    with connect(cfg) as con:
        acquired = time.monotonic()
        before = _current(con, window)
        if expected is not None:
            moved = sorted(p for p in set(before) | set(expected)
                           if (before.get(p) and before[p].seq) != (expected.get(p) and expected[p].seq))
            if moved:
                raise PublishConflict(f"partitions {moved} were republished since this run audited them; "
                                      "nothing was written, re-run to audit against the new publication")
        extracts.stage(cfg, pub_id, {p: c.extract_json for p, c in after.items()})
        failpoint("staged_extracts")
        _attach(con, scratch)
        with transaction(con):
            _retire(con, before, window)
            for table, source, columns in (("fact.fct_order_lines", fact_source, FACT_COLUMNS),
                                           ("mart.revenue_daily", mart_source, MART_COLUMNS)):
                con.execute(f"delete from {table} where partition_date between $start and $end", window.params)
                con.execute(f"insert into {table} select {columns} from s.{source} "
                            "where partition_date between $start and $end", window.params)
                failpoint(f"wrote_{table}")
            _ledger_rows(con, pub_id, kind, run, code_version, before, after, restored or {})
            con.execute("delete from audit.corrections_in_progress where partition_date between $start and $end",
                        window.params)
            keep = _prune_history(con, cfg.retain_versions, window)
        failpoint("committed")
        extracts.swap(cfg, pub_id)
        failpoint("swapped")
        extracts.prune(cfg, keep | {pub_id})
        return Publication(pub_id, kind, window, before, after, time.monotonic() - acquired)


def restore_candidates(cfg: Settings, scratch: Path, window: Window) -> tuple[dict[str, DayCandidate], dict[str, str], dict[str, Current]]:
    """The version each partition's current publication superseded, copied into scratch as candidates."""
    with connect(cfg) as con:
        now = _current(con, window)
        missing = sorted(p for p in window.keys if p not in now or not now[p].prev_publication_id)
        if missing:
            raise ValueError(f"cannot roll back {window}: partitions {missing} have no earlier publication")
        targets = {p: now[p].prev_publication_id for p in window.keys}
        _versions_table(con, "targets", targets)
        rows = con.execute(
            "select partition_date, publication_id, rows_after, controls_after, sha256_after, extract_json, "
            "input_sha256, source_high_sequence from audit.publications join targets using (partition_date, publication_id)"
        ).fetchall()
        found = {r[0].isoformat(): r for r in rows}
        retained = {r[0].isoformat() for r in con.execute(
            "select distinct partition_date from history.fct_order_lines join targets using (partition_date, publication_id)"
        ).fetchall()}
        gone = sorted(p for p in targets if found[p][2] and p not in retained)
        if gone:
            raise ValueError(f"cannot roll back {window}: the earlier versions of {gone} are past retention")
        _attach(con, scratch)
        for src, dst in (("history.fct_order_lines", "fct_restore"), ("history.revenue_daily", "mart_restore")):
            con.execute(f"create or replace table s.{dst} as select h.* exclude (publication_id) from {src} h "
                        "join targets using (partition_date, publication_id)")
        after = {p: DayCandidate(p, r[2], json.loads(r[3]), r[4], r[5], r[6], r[7]) for p, r in found.items()}
        return after, targets, now


def mark_in_progress(cfg: Settings, window: Window, run: RunInfo) -> None:
    """Tell readers this window is being corrected (mart.revenue_daily_v.correction_in_progress)."""
    with connect(cfg) as con:
        con.execute("insert into audit.corrections_in_progress select d::date, $backfill, $run_id, $reason, now() "
                    "from generate_series($start::timestamp, $end::timestamp, interval 1 day) as g(d) "
                    "on conflict do nothing",
                    {**window.params, "backfill": run.backfill_id, "run_id": run.run_id, "reason": run.reason})


def clear_in_progress(cfg: Settings, run_id: str) -> None:
    with connect(cfg) as con:
        con.execute("delete from audit.corrections_in_progress where run_id = $run_id", {"run_id": run_id})
