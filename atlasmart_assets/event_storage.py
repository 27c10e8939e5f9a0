"""Dagster's run-sharded SQLite event log, storing a batch of asset events in one transaction per shard.

A ranged run of a year writes about 1,460 planned events and 1,460 materializations. Dagster already
hands such events over in batches (`DAGSTER_EVENT_BATCH_SIZE`), but its SQLite storage stores a batch
one event at a time, each with its own SQLAlchemy engine, connection and commit on the run's shard and
again on the index shard: 10–14 ms an event on this project's machine (`python -m bench.event_storage`),
about 60 s of a year's ranged run. This storage keeps Dagster's files, tables and semantics (same rows, same ids per shard,
same asset index) and changes only how a batch reaches them, and how a planned check's rows (one per partition of
the run) are inserted.
"""

import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg
import dagster._check as check
from dagster._config import Field, StringSource
from dagster._core.definitions.asset_checks.asset_check_evaluation import AssetCheckEvaluationPlanned
from dagster._core.events import (
    ASSET_CHECK_EVENTS,
    ASSET_EVENTS,
    BATCH_WRITABLE_EVENTS,
    DagsterEventBatchMetadata,
    generate_event_batch_id,
)
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from dagster._core.storage.event_log.schema import AssetCheckExecutionsTable, SqlEventLogStorageTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData, serialize_value
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"
# `python -m bench.event_storage --events 1000`: batches of 1,000 held the index's write lock up to 362 ms, which
# today's run waits through to store an event of its own; batches of 250, 72 ms, at the same cost an event.
DEFAULT_BATCH_SIZE = "250"
# Engines are cached per shard; the webserver reads many runs' shards, so the cache is bounded.
MAX_CACHED_ENGINES = 64


class BatchingSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` with batched writes, for `event_log_storage` in dagster.yaml.

    Opening it turns on Dagster's batching of asset events (`DAGSTER_EVENT_BATCH_SIZE`) in the process,
    unless the environment already sets it (`0` turns batching off).
    """

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        self._engines: dict[str, Engine] = {}
        self._engines_lock = threading.Lock()
        self._known_tables: set[str] = set()
        self._inst_data = inst_data
        # Without base_dir, the files go where Dagster's default storage keeps them for the instance this
        # storage is registered with, so an existing instance keeps its history; the instance is known only then.
        if base_dir is not None:
            super().__init__(base_dir, inst_data=inst_data)
        os.environ.setdefault(BATCH_SIZE_ENV, DEFAULT_BATCH_SIZE)

    def register_instance(self, instance: Any) -> None:
        if not hasattr(self, "_base_dir"):
            super().__init__(os.path.join(instance.root_directory, "history", "runs", ""), inst_data=self._inst_data)
        super().register_instance(instance)

    @classmethod
    def config_type(cls) -> Mapping[str, Field]:
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "BatchingSqliteEventLogStorage":
        return cls(base_dir=config_value.get("base_dir"), inst_data=inst_data)

    def _engine(self, shard: str) -> Engine:
        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is None:
                if len(self._engines) >= MAX_CACHED_ENGINES:
                    self._engines.pop(next(iter(self._engines))).dispose()
                engine = create_engine(
                    self.conn_string_for_shard(shard),
                    poolclass=NullPool,
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
                )
                self._engines[shard] = engine
            return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            check.str_param(shard, "shard")
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                with conn.begin():
                    yield conn

    def has_table(self, table_name: str) -> bool:
        # Dagster asks this for every asset event; a table, once there, stays.
        if table_name in self._known_tables:
            return True
        found = super().has_table(table_name)
        if found:
            self._known_tables.add(table_name)
        return found

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        check.sequence_param(events, "events", of_type=EventLogEntry)
        if not events:
            return
        if len({event.run_id for event in events}) != 1 or not all(
            event.is_dagster_event and event.get_dagster_event().event_type in BATCH_WRITABLE_EVENTS
            for event in events
        ):
            super().store_event_batch(events)
            return

        rows = [self._event_to_row(event) for event in events]  # each event serialized once, for both shards
        with self.run_connection(events[0].run_id) as conn:
            conn.execute(SqlEventLogStorageTable.insert(), rows)
        # The run's file holds the batch now. Should the index fail, Dagster would store the whole batch again
        # event by event (its fallback for a failed batch), doubling it in the run's file: mirror what is left
        # one event at a time instead, as Dagster's store_event does, and let only that error through.
        try:
            event_ids = self._mirror_in_index(events, rows)
        except Exception as exc:  # noqa: BLE001 - any storage error; the one-by-one path below raises its own
            sys.stderr.write(f"Storing a batch of {len(events)} events in the index failed ({exc}); "
                             "storing them one by one\n")
            event_ids = []
            for event, row in zip(events, rows):
                with self.index_transaction() as conn:
                    event_ids += self._index_rows(conn, [event], [row])
        for event, event_id in zip(events, event_ids):
            if event.dagster_event_type in ASSET_CHECK_EVENTS:
                self.store_asset_check_event(event, event_id)

    def _mirror_in_index(self, events: Sequence[EventLogEntry], rows: Sequence[dict[str, Any]]) -> list[int]:
        """The index's copy of the batch in one transaction; the events' ids."""
        with self.index_transaction() as conn:
            return self._index_rows(conn, events, rows)

    def _index_rows(self, conn: Connection, events: Sequence[EventLogEntry],
                    rows: Sequence[dict[str, Any]]) -> list[int]:
        """What SqliteEventLogStorage.store_event writes to the index for these events: each event's copy, the
        asset events' tags and their asset key rows; the events' ids."""
        event_ids: list[int] = []
        insert = SqlEventLogStorageTable.insert()  # one statement, compiled once, for every row
        for row in rows:
            result = conn.execute(insert, row)
            event_ids.append(check.not_none(result.inserted_primary_key)[0])
        asset_events = [(event, event_id) for event, event_id in zip(events, event_ids)
                        if event.dagster_event_type in ASSET_EVENTS]
        if asset_events:
            self._store_asset_event_tags(conn, [e for e, _ in asset_events], [i for _, i in asset_events])
        # Each event overwrites its asset key row's columns for its kind (materialization, planned,
        # observation), so the newest of each kind and key, applied in order, leaves the same row.
        newest: dict[tuple[str, str], int] = {}
        for position, (event, _) in enumerate(asset_events):
            dagster_event = event.get_dagster_event()
            newest[(check.not_none(dagster_event.asset_key).to_string(), dagster_event.event_type_value)] = position
        for position in sorted(newest.values()):
            self._store_asset_event(conn, *asset_events[position])
        return event_ids

    def _store_asset_check_evaluation_planned(self, event: EventLogEntry, event_id: int | None) -> None:
        """Dagster's rows for a planned check, one per partition of the run, inserted as one executemany, with the
        planned event itself on the last of them only (the newest, which Dagster's unfiltered readers take as the
        check's latest execution); the others keep the event's storage id, and show no step key when read per day.
        Dagster serializes the same event into every row: for a year's backfill, 19 checks × 365 days of about
        1.5 KB, 10.8 MB of the index per run (it also compiles a single INSERT holding all their values: 4.2 s of
        the 7.7 s a year's events took to store, under cProfile). A planned row's event gives only its step key;
        its status, run and partition are the row's own."""
        planned = check.inst(check.not_none(event.dagster_event).event_specific_data, AssetCheckEvaluationPlanned)
        partition_keys = (planned.partitions_subset.get_partition_keys() if planned.partitions_subset
                          else [None])
        row = {"asset_key": planned.asset_key.to_string(), "check_name": planned.check_name, "run_id": event.run_id,
               "execution_status": AssetCheckExecutionRecordStatus.PLANNED.value, "evaluation_event": None,
               "evaluation_event_timestamp": self._event_insert_timestamp(event),
               "evaluation_event_storage_id": event_id}
        rows = [{**row, "partition": key} for key in partition_keys]
        rows[-1]["evaluation_event"] = serialize_value(event)
        with self.index_connection() as conn:
            conn.execute(AssetCheckExecutionsTable.insert(), rows)


def batched(context: dg.OpExecutionContext,
            materializations: Sequence[dg.AssetMaterialization]) -> Iterator[dg.DagsterEvent]:
    """An op's materializations as one batch, as Dagster hands over an asset's partitions: yielded one by one as
    `AssetMaterialization`s, each is stored on its own (a year's rollback: 1,095 events in 8.8 s of its 18 s); as a
    batch, in one transaction per shard (0.8 s). The step's own context builds each event, as Dagster does for a
    yielded materialization (an API Dagster keeps for framework code: dagster is pinned in constraints.txt)."""
    step = context.get_step_execution_context()
    batch_id = generate_event_batch_id()
    last = len(materializations) - 1
    for i, materialization in enumerate(materializations):
        yield dg.DagsterEvent.asset_materialization(step, materialization,
                                                    DagsterEventBatchMetadata(batch_id, i == last))
