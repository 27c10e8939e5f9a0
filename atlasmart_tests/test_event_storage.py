"""The shipped event log storage: the same records as Dagster's own SQLite storage, written a batch at a time.

Each test runs the real daily job over the shipped raw evidence twice, on two on-disk instances that differ only
in `event_log_storage`: Dagster's default and the repo's dagster.yaml. What the UI, sensors and staleness read
from the event log must come out the same; the repo's storage must reach SQLite far fewer times.
"""

import os
import re
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy

from atlasmart_assets import event_storage
from atlasmart_assets.definitions import defs
from atlasmart_assets.lab import run_chain
from bench.event_storage import materializations

REPO_YAML = Path(__file__).resolve().parent.parent / "dagster.yaml"
START, END = "2026-09-01", "2026-09-10"


def _home(path: Path, shipped: bool) -> Path:
    """A DAGSTER_HOME holding the repo's dagster.yaml, or the same without its `event_log_storage` block."""
    path.mkdir()
    text = REPO_YAML.read_text()
    if not shipped:
        text = re.sub(r"(?m)^event_log_storage:\n(^  .*\n)+", "", text)
        assert not re.search(r"(?m)^event_log_storage:", text)
    (path / "dagster.yaml").write_text(text)
    return path


@pytest.fixture
def homes(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield _home(tmp_path / "stock-home", shipped=False), _home(tmp_path / "shipped-home", shipped=True)


class Connections:
    """Counts how often a storage opens a connection to one of its SQLite files."""

    def __init__(self, storage: Any) -> None:
        self.count = 0
        inner = storage._connect

        def counted(shard: str):  # type: ignore[no-untyped-def]
            self.count += 1
            return inner(shard)

        storage._connect = counted


def _asset_keys() -> list[dg.AssetKey]:
    return sorted(defs.resolve_all_asset_keys(), key=lambda k: k.to_user_string())


def _view(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    """What Dagster's readers take from the event log, with storage ids and timestamps left out."""
    storage = instance.event_log_storage
    view: dict[str, Any] = {}
    records = storage.get_records_for_run(run_id, limit=100_000).records
    view["run events"] = Counter(r.event_log_entry.dagster_event_type for r in records)
    for key in _asset_keys():
        name = key.to_user_string()
        materializations = instance.fetch_materializations(key, limit=10_000).records
        view[f"{name} materialized"] = sorted(instance.get_materialized_partitions(key))
        view[f"{name} metadata"] = sorted(
            (r.partition_key or "", sorted((k, repr(v)) for k, v in r.asset_materialization.metadata.items()
                                           if not _varies(k)))
            for r in materializations)
        view[f"{name} newest first"] = [r.partition_key for r in materializations]
        view[f"{name} indexed tags"] = sorted(sorted(t.items()) for t in storage.get_event_tags_for_asset(key))
        view[f"{name} failed or in progress"] = {
            partition: (attempt_run == run_id, storage_id) for partition, (attempt_run, storage_id) in
            storage.get_latest_asset_partition_materialization_attempts_without_materializations(key).items()}
        records_by_key = instance.get_asset_records([key])
        view[f"{name} asset record"] = [
            (r.asset_entry.last_run_id == run_id,
             r.asset_entry.last_materialization_record and r.asset_entry.last_materialization_record.partition_key)
            for r in records_by_key]
    for check in defs.resolve_asset_graph().asset_check_keys:
        history = storage.get_asset_check_execution_history(check, limit=10)
        view[f"check {check.to_user_string()}"] = [(h.status.value, h.run_id == run_id) for h in history]
    # Every row of the check executions (a planned check has one per partition of the run), ids left out; a
    # planned row's serialized event is counted apart (PLANNED_BYTES): the shipped storage keeps it once per check.
    with storage.index_connection() as conn:
        view["check execution rows"] = Counter(conn.execute(sqlalchemy.text(
            "select asset_key, check_name, partition, execution_status, run_id = :run, "
            "execution_status = 'PLANNED' or evaluation_event is not null, "
            "evaluation_event_storage_id is not null from asset_check_executions"), {"run": run_id}).fetchall())
        view[PLANNED_BYTES] = conn.execute(sqlalchemy.text(
            "select count(*), count(evaluation_event), coalesce(sum(length(evaluation_event)), 0) "
            "from asset_check_executions where execution_status = 'PLANNED'")).fetchone()
    return view


PLANNED_BYTES = "planned check rows, those holding their event, and its bytes"


RUN_OWN_METADATA = {"backfill_id", "publication_id", "change_notice", "change_chart", "lock_acquisitions"}


def _varies(key: str) -> bool:
    """Metadata that differs between two runs of the same evidence: the run's own ids and notice, and timings."""
    return key in RUN_OWN_METADATA or key.endswith("_s")


def _run_twice(env: Any, homes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
               raw_damage: Any = None) -> tuple[dict, dict, int, int, int]:
    results = []
    if raw_damage is not None:
        raw_damage()
    for home in homes:
        shutil.rmtree(env.data_dir, ignore_errors=True)
        # Dagster's default (no batching) for its own storage; the shipped storage turns batching on itself.
        monkeypatch.delenv(event_storage.BATCH_SIZE_ENV, raising=False)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            connections = Connections(instance.event_log_storage)
            result = run_chain(instance, START, END)
            asset_events = sum(1 for r in instance.event_log_storage.get_records_for_run(
                result.run_id, limit=100_000).records if r.event_log_entry.dagster_event_type in {
                    dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED})
            results.append((result.success, _view(instance, result.run_id), connections.count, asset_events))
    (stock_ok, stock, stock_conns, stock_events), (ok, shipped, conns, events) = results
    assert stock_ok == ok
    # Dagster serializes a planned check's event into the row of each partition of the run; the shipped storage
    # into one row a check (a year's backfill: 10.8 MB of the index against about 30 KB).
    (rows, with_event, size), (stock_rows, stock_with_event, stock_size) = shipped.pop(PLANNED_BYTES), \
        stock.pop(PLANNED_BYTES)
    checks = len({(r[0], r[1]) for r in stock["check execution rows"] if r[3] == "PLANNED"})
    assert (rows, stock_with_event) == (stock_rows, stock_rows) and with_event == checks, (rows, with_event, checks)
    assert rows > 2 * checks and size * (rows / checks) <= 1.5 * stock_size, (size, stock_size, rows, checks)
    return stock, shipped, stock_conns, conns, events


def test_the_shipped_instance_stores_events_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(event_storage.BATCH_SIZE_ENV, raising=False)
    with dg.DagsterInstance.from_config(str(_home(tmp_path / "home", shipped=True))) as instance:
        assert isinstance(instance.event_log_storage, event_storage.BatchingSqliteEventLogStorage)
        # Where Dagster's default storage keeps the files, so an existing instance keeps its history.
        assert Path(instance.event_log_storage._base_dir) == tmp_path / "home" / "history" / "runs"
        assert os.environ[event_storage.BATCH_SIZE_ENV] == event_storage.DEFAULT_BATCH_SIZE


def test_a_batch_the_index_refuses_is_stored_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Should the index fail after the run's file took the batch, the rest is mirrored event by event: had the
    error reached Dagster, it would store the whole batch again, one event at a time, doubling it in the run's file."""
    storage = event_storage.BatchingSqliteEventLogStorage(str(tmp_path / "runs"))
    events = materializations(30, "run-1")

    def locked(*_: Any) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(storage, "_mirror_in_index", locked)
    storage.store_event_batch(events)
    assert len(storage.get_records_for_run("run-1", limit=100).records) == 30
    key = dg.AssetKey(["fact", "fct_order_lines"])
    assert sorted(storage.get_materialized_partitions(key)) == sorted(e.dagster_event.partition for e in events)
    stored = storage.fetch_materializations(key, limit=100).records
    assert len(stored) == 30
    assert storage.get_asset_records([key])[0].asset_entry.last_materialization_record.partition_key == "2025-01-30"


def test_a_ranged_run_reads_back_as_with_dagsters_own_storage_in_a_fraction_of_the_writes(env, homes, monkeypatch) -> None:
    stock, shipped, stock_conns, conns, asset_events = _run_twice(env, homes, monkeypatch)
    assert shipped["fact/fct_order_lines materialized"] == [f"2026-09-{d:02d}" for d in range(1, 11)]
    assert shipped == stock
    # Dagster's own storage opens two connections per planned event and materialization (the run's shard, the
    # index); this one two per batch of them. Every other event costs both the same.
    assert asset_events == 2 * 4 * 10
    assert stock_conns - conns >= 1.5 * asset_events, (conns, stock_conns, asset_events)


def test_a_refused_run_marks_its_partitions_failed_as_dagsters_own_storage_does(env, homes, monkeypatch) -> None:
    """The planned events are written in one batch; a step that then fails leaves the same failed partitions."""
    def damage() -> None:
        path = env.raw_dir / "partition=2026-09-05.json"
        path.write_text(path.read_text()[:-40])

    stock, shipped, _, _, _ = _run_twice(env, homes, monkeypatch, damage)
    assert "2026-09-05" in shipped["raw/order_lines failed or in progress"], shipped
    assert shipped == stock


def test_a_rollbacks_materializations_are_stored_as_one_batch(env, tmp_path: Path, monkeypatch) -> None:
    """The rollback job's materializations (a day x three assets) reach the shipped storage as batches, as a ranged
    asset run's do, not one event (and two SQLite connections) each: a year's 1,095 took 8.8 s one by one. What
    the UI reads back is each restored partition, with its own metadata."""
    monkeypatch.delenv(event_storage.BATCH_SIZE_ENV, raising=False)
    with dg.DagsterInstance.from_config(str(_home(tmp_path / "home", shipped=True))) as instance:
        assert run_chain(instance, START, END).success
        assert run_chain(instance, START, END, {"dagster/backfill": "bf-rederive", "atlasmart/rederive": "r"}).success
        storage = instance.event_log_storage
        alone: list[str] = []
        batches: list[list[str]] = []
        store_event, store_event_batch = storage.store_event, storage.store_event_batch

        def one(event):  # type: ignore[no-untyped-def]
            alone.append(event.dagster_event_type.value if event.dagster_event_type else "log")
            return store_event(event)

        def batch(events):  # type: ignore[no-untyped-def]
            batches.append([e.dagster_event_type.value for e in events])
            return store_event_batch(events)

        monkeypatch.setattr(storage, "store_event", one)
        monkeypatch.setattr(storage, "store_event_batch", batch)
        result = defs.resolve_job_def("rollback_job").execute_in_process(
            instance=instance, run_config={"ops": {"rollback_range": {"config": {
                "start": START, "end": END, "reason": "batched"}}}})
        assert result.success
        assert "ASSET_MATERIALIZATION" not in alone, Counter(alone)
        assert sum(len(b) for b in batches) == 3 * 10 and all(set(b) == {"ASSET_MATERIALIZATION"} for b in batches)
        key = dg.AssetKey(["fact", "fct_order_lines"])
        records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, storage_ids=None),
                                                  limit=100).records
        mine = [r for r in records if r.run_id == result.run_id]
        assert sorted(r.partition_key for r in mine) == [f"2026-09-{d:02d}" for d in range(1, 11)]
        assert all(r.asset_materialization.metadata["restored_from"] for r in mine)
