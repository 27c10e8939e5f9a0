"""The one publish transaction (staged + fact + mart + ledger + history + flags), rollback's restore, and the
recovery of the extracts after a crash between the commit and the symlink swap."""

from __future__ import annotations

import json
import time
from pathlib import Path

import duckdb

from atlasmart_assets import extracts, notices
from atlasmart_assets.failpoints import failpoint
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.connection import LockStats, attach, hand_over, transaction
from atlasmart_assets.warehouse.ledger import Current, DayCandidate, Publication
from atlasmart_assets.window import Window


class PublishConflict(RuntimeError):
    """The current publication of a partition moved between the audit and the publish."""


def recover_extracts(wh: Warehouse, con: duckdb.DuckDBPyConnection) -> bool:
    """After a crash between commit and swap, point `published` at the version the ledger committed (the ledger
    is the commit point). Returns whether it moved anything."""
    cfg = wh.settings
    latest = ledger.latest_publication_id(con)
    if latest and extracts.current_version(cfg) != latest and (cfg.versions_dir / latest).is_dir():
        extracts.swap(cfg, latest)
        return True
    return False


def publish(wh: Warehouse, scratch: Path, window: Window, run: RunInfo, code_version: str,
            after: dict[str, DayCandidate], expected: dict[str, Current] | None, *, kind: str = "publish",
            sources: dict[str, str] | None = None, restored: dict[str, str] | None = None,
            stats: LockStats | None = None) -> Publication:
    """Replace staged, fact and mart for the whole window and record the ledger and the prior version, in ONE
    transaction; then swap the extracts in. `expected` is what the audit compared against: if another publisher
    moved a partition since, nothing is written. `sources` maps each published table to its scratch relation."""
    cfg = wh.settings
    sources = sources or {layer.table: layer.candidate for layer in ledger.LAYERS}
    pub_id = ledger.new_publication_id(kind)
    if expected:
        # The versions this publish supersedes go to history first, in their own transaction: the commit's lock
        # hold (what the current lane may wait on) then holds no copy. If the commit never happens, the copy
        # stays recorded and the next publish reuses it.
        with wh.writer(stats) as con, transaction(con):
            ledger.precopy(con, window, run.run_id)
        failpoint("precopied_history")
        hand_over()
    with wh.writer(stats) as con:
        acquired = time.monotonic()
        recover_extracts(wh, con)
        before = ledger.current(con, window)
        if expected is not None:
            moved = sorted(p for p in set(before) | set(expected)
                           if (before.get(p) and before[p].seq) != (expected.get(p) and expected[p].seq))
            if moved:
                raise PublishConflict(f"partitions {moved} were republished since this run audited them; "
                                      "nothing was written, re-run to audit against the new publication")
        extracts.stage(cfg, pub_id, {p: c.extract_json for p, c in after.items()})
        failpoint("staged_extracts")
        attach(con, scratch, "s")
        with transaction(con):
            ledger.retire(con, before, window)
            for layer in ledger.LAYERS:
                if layer.table not in sources:
                    continue
                cols = ", ".join(layer.columns)
                con.execute(f"delete from {layer.table} where partition_date between $start and $end", window.params)
                con.execute(f"insert into {layer.table} select {cols} from s.{sources[layer.table]} "
                            "where partition_date between $start and $end", window.params)
                failpoint(f"wrote_{layer.table}")
            ledger.write_rows(con, pub_id, kind, run, code_version, before, after, restored or {})
            applied = ledger.requests_already_applied(con, before)
            erase = {d: sorted(set(c.requests_applied) - applied.get(d, set())) for d, c in after.items()
                     if set(c.requests_applied) - applied.get(d, set())}
            if erase:
                ledger.erase_earlier_versions(con, pub_id, erase)
            con.execute("delete from audit.corrections_in_progress where run_id = $run_id", {"run_id": run.run_id})
            keep = ledger.prune_history(con, cfg.retain_versions, window)
        failpoint("committed")
        extracts.swap(cfg, pub_id)
        failpoint("swapped")
        notices.write(cfg, con, pub_id, run, after)
        # Earlier extract versions hold the erased days' old figures: only the current one survives an erasure.
        extracts.prune(cfg, {pub_id} if erase else keep | {pub_id}, immediately=bool(erase))
        return Publication(pub_id, kind, window, before, after, time.monotonic() - acquired)


def restore_candidates(wh: Warehouse, scratch: Path, window: Window,
                       targets: dict[str, str] | None = None) -> tuple[dict[str, DayCandidate], dict[str, str], dict[str, Current]]:
    """The versions named by `targets` (default: the one each partition's current publication superseded),
    copied into scratch as candidates."""
    with wh.writer() as con:
        now = ledger.current(con, window)
        if targets is None:
            missing = sorted(p for p in window.keys if p not in now or not now[p].prev_publication_id)
            if missing:
                raise ValueError(f"cannot roll back {window}: partitions {missing} have no earlier publication")
            targets = {p: now[p].prev_publication_id for p in window.keys}
        ledger.versions_table(con, "targets", targets)
        rows = con.execute(
            "select partition_date, publication_id, rows_after, controls_after, sha256_after, extract_json, "
            "input_sha256, source_high_sequence, input_batches, as_of, dimension_version, dimension_batches, "
            "requests_applied from audit.publications "
            "join targets using (partition_date, publication_id)"
        ).fetchall()
        found = {r[0].isoformat(): r for r in rows}
        unknown = sorted(p for p in targets if p not in found)
        if unknown:
            raise ValueError(f"cannot roll back {window}: no publication {targets[unknown[0]]} of {unknown}")
        erased = sorted(p for p, r in found.items() if r[5] and r[5].startswith('{"erased"'))
        if erased:
            raise ValueError(f"cannot roll back {window}: the earlier versions of {erased} were erased when a deletion "
                             "request was applied to them (a rollback never brings suppressed rows back)")
        retained = {r[0].isoformat() for r in con.execute(
            "select distinct partition_date from history.fct_order_lines join targets using (partition_date, publication_id)"
        ).fetchall()}
        gone = sorted(p for p in targets if found[p][2] and p not in retained)
        if gone:
            raise ValueError(f"cannot roll back {window}: the earlier versions of {gone} are past retention")
        attach(con, scratch, "s")
        con.execute("create schema if not exists s.candidate")
        for layer in ledger.LAYERS:
            con.execute(f"create or replace table s.{layer.candidate} as select h.* exclude (publication_id) "
                        f"from {layer.history} h join targets using (partition_date, publication_id)")
        after = {p: DayCandidate(p, r[2], json.loads(r[3]), r[4], r[5], r[6], r[7],
                                 tuple(json.loads(r[8])) if r[8] else (), r[9], r[10],
                                 tuple(json.loads(r[11])) if r[11] else (), tuple(json.loads(r[12])) if r[12] else ())
                 for p, r in found.items()}
        return after, targets, now
