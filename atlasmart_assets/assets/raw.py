"""raw.order_lines: the day's evidence verified (sha256, manifest, shape) and loaded as received."""


import re
from typing import Any, Iterator

import dagster as dg
from dagster._core.definitions.external_asset import create_external_asset_from_source_asset

from atlasmart_assets import capacity, failpoints, pausable, raw_files, raw_load, unchanged
from atlasmart_assets.alerts.format import md
from atlasmart_assets.assets.common import (
    BACKFILL_POLICY,
    CODE_VERSION,
    KINDS,
    StepCapacity,
    check_result,
    refuse,
    step_capacity,
)
from atlasmart_assets.contract import CONTROL_NAMES, OWNERS, RAW_CUSTOMERS, RAW_ORDER_LINES
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.progress import Progress
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunScope, scope_of_context
from atlasmart_assets.settings import load as load_settings
from atlasmart_assets.assets.schemas import CUSTOMERS_SCHEMA, RAW_SCHEMA

# A day's batches shown in its event: a year's backfill writes 365 of these events, and a day may hold hundreds of
# batches (hourly deltas); the whole list is in raw.batches and the publication's input_batches.
# A year of days with several batches each, ids at their longest: 4.98 MB of event log with five shown, 4.88 MB with
# three (test_run_metadata's projection; the budget is 5 MB).
SHOWN_BATCHES = 3
# A batch id may be 128 characters: each shown one is cut to this many, so that ids do not grow a year's events
# (three shown ids of 128 characters a day would add about 0.1 MB to a 365-day backfill's event log).
SHOWN_ID_CHARS = 40


def _shown_id(batch: str) -> str:
    """The id, or its start and its end around '…' (ids often differ only at the end: ...-T01, ...-T02)."""
    if len(batch) <= SHOWN_ID_CHARS:
        return batch
    tail = SHOWN_ID_CHARS // 3
    return batch[:SHOWN_ID_CHARS - tail - 1] + "…" + batch[-tail:]


# The fraction of a second of an ISO 8601 time, written with a point or, as ISO 8601 also allows, a comma.
FRACTION = re.compile(r"(?<=:\d\d)[.,]\d+")


def shown_time(stamp: str) -> str:
    """An extraction time to the second, with its offset: it may carry any number of fraction digits (64 characters
    at most), which would grow a year's events past its budget; raw.batches keeps it whole."""
    return FRACTION.sub("", str(stamp), count=1)


def _batch_line(b: dict[str, Any]) -> str:
    return (f"- `{_shown_id(b['batch'])}` ({b['kind']}, high sequence {b['source_high_sequence']}"
            + (f", extracted {md(shown_time(b['extracted_at']))}" if b.get("extracted_at") else "")
            + f", sha256 `{b['sha256'][:12]}`)")


def batches_md(batches: list[dict[str, Any]]) -> str:
    """The day's batches in sequence order, one line each (high sequence, extraction time, sha256). Past
    SHOWN_BATCHES: the first, a line saying how many are left out, and the latest ones (the newest is the one the
    day reconciles to)."""
    if len(batches) <= SHOWN_BATCHES:
        return "\n".join(_batch_line(b) for b in batches)
    return "\n".join([_batch_line(batches[0]),
                      f"- … {len(batches) - SHOWN_BATCHES} more batch(es), every one in raw.batches",
                      *(_batch_line(b) for b in batches[1 - SHOWN_BATCHES:])])


@dg.observable_source_asset(
    key=["raw", "landing_batches"], group_name="raw", partitions_def=daily_partitions,
    required_resource_keys={"warehouse"}, tags={"dagster/kind/json": ""},
    metadata={"dagster/column_schema": dg.TableSchema(columns=[
        dg.TableColumn("partition", "date", "The day."),
        dg.TableColumn("batch", "file", "raw/partition=D.json (first) or raw/partition=D/<extraction_batch>.json"),
    ])},
    description="The landing batches on disk (raw/partition=D.json and raw/partition=D/*.json). Grain: one data "
                "version per day, from its batch set; a new batch gives the day a new version, so the UI marks its "
                "downstream partitions 'upstream changed'.",
)
def _landing_batches(context: dg.AssetExecutionContext) -> dg.DataVersionsByPartition:
    """The days whose batch set on disk is not the version last observed: Dagster logs one observation per
    partition returned, and every day every ten minutes grew the event log by about 0.5 MB a tick for a year of
    raw files with nothing new (an unchanged day keeps its last observation, which staleness reads)."""
    raw_dir = context.resources.warehouse.settings.raw_dir
    on_disk = {day: version for day in daily_partitions.get_partition_keys()
               for version in [raw_files.batch_set_version(raw_dir, day)] if version}
    seen = observed_versions(context.instance, context.asset_key, set(on_disk))
    return dg.DataVersionsByPartition({day: v for day, v in on_disk.items() if seen.get(day) != v})


# Dagster 1.13's observable_source_asset takes no owners, and only a SourceAsset's observation may return
# DataVersionsByPartition (the multi-asset form cannot). Definitions turns every SourceAsset into this same
# external AssetsDefinition; converting it here lets its spec name the owner like every other asset.
landing_batches = dg.map_asset_specs(lambda spec: spec.replace_attributes(owners=OWNERS),
                                     [create_external_asset_from_source_asset(_landing_batches)])[0]


# An observation's data version, as Dagster tags it (dagster._core.definitions.data_version.DATA_VERSION_TAG).
DATA_VERSION_TAG = "dagster/data_version"
PAGE = 1000


def observed_versions(instance: dg.DagsterInstance, key: dg.AssetKey, days: set[str]) -> dict[str, str]:
    """The latest observed data version of each of `days` that has one: the newest page of the asset's
    observations, then the latest of each day not on it, one day at a time (a query of at most one record each).
    Never the whole history: an instance that observed every day every ten minutes holds millions, and a day never
    observed yet (a new day, every day) would otherwise be looked for through all of them."""
    found: dict[str, str] = {}
    for record in instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key), limit=PAGE).records:
        obs = record.asset_observation
        if obs is not None and obs.partition in days and obs.partition not in found:
            found[obs.partition] = obs.tags.get(DATA_VERSION_TAG, "")
    for day in sorted(days - set(found)):
        latest = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key, asset_partitions=[day]), limit=1)
        for record in latest.records:
            if record.asset_observation is not None:
                found[day] = record.asset_observation.tags.get(DATA_VERSION_TAG, "")
    return found


customers = dg.AssetSpec(
    key=list(RAW_CUSTOMERS), group_name="raw", kinds={"json"}, owners=OWNERS,
    description="SCD2 customer dimension (raw/customers.json). Grain: one row per customer version, "
                "valid_from inclusive, valid_to exclusive.",
    metadata={"dagster/column_schema": CUSTOMERS_SCHEMA,
              "file": dg.MetadataValue.path(str(load_settings().raw_dir / "customers.json"))},
)


@dg.asset(
    key=list(RAW_ORDER_LINES), group_name="raw", partitions_def=daily_partitions, backfill_policy=BACKFILL_POLICY,
    code_version=CODE_VERSION, kinds=KINDS, owners=OWNERS, deps=[landing_batches],
    check_specs=[dg.AssetCheckSpec(name, asset=list(RAW_ORDER_LINES), blocking=True, description=text)
                 for name, text in raw_load.CHECKS.items()],
    metadata={"dagster/table_name": "raw.order_lines", "dagster/column_schema": RAW_SCHEMA},
    description="Order lines as received. Grain: one row per record received; raw files are verified and never "
                "modified.",
)
def raw_order_lines(context: dg.AssetExecutionContext,
                    warehouse: Warehouse) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    scope = scope_of_context(context)
    failpoints.gate(context.op_def.name, scope.run.run_id)
    scope.enforce_fence()
    cap = step_capacity(context, warehouse, scope)
    progress = Progress(pausable.relayed(context.log.info), f"raw {scope.window}",
                        raw_load.PHASES + (raw_load.EVENTS_PHASE,))
    with progress.stopping():  # the events phase too: a run stopped while Dagster writes them says so
        yield from _load_and_report(context, warehouse, scope, cap, progress)


def _load_and_report(context: dg.AssetExecutionContext, warehouse: Warehouse, scope: RunScope, cap: StepCapacity,
                     progress: Progress) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    """Audit and append the window's batches, then its check results and each day's materialization."""
    loaded = raw_load.load(warehouse, scope, cap.threads, log=context.log.info, give_way=cap.give_way,
                           lowered=cap.lowered,
                           keepable=lambda files: unchanged.keepable(warehouse, scope.window, files),
                           progress=progress)
    if not any(a.blocks for a in loaded.audits):
        progress.writing_events(f"{len(loaded.audits)} check results and {len(loaded.figures):,} partition "
                                "materialization(s)")
    yield from (check_result(a) for a in loaded.audits)
    refuse(str(scope.window), loaded.audits)
    for day, fig in sorted(loaded.figures.items()):
        context.add_asset_metadata({
            "dagster/row_count": int(fig["records"]),
            "controls": dg.MetadataValue.json(dict(zip(CONTROL_NAMES, fig["controls"]))),
            "batches": dg.MetadataValue.md(batches_md(fig["batches"])),
        }, partition_key=day)
    # The run's own figures once, on the newest day's event (not copied into every partition's event).
    context.add_asset_metadata({
        "window": str(scope.window),
        "partitions_loaded": len(loaded.loaded),
        "batches_read": len(loaded.files),
        "code_version": CODE_VERSION,
        "cpu_niceness": cap.niceness,
        "cores_yielded_s": capacity.yielded_s(cap.lowered),
        "scratch_paused_s": capacity.paused_s(cap.lowered),
        **loaded.stats.figures(),
    }, partition_key=max(scope.window.keys))
    yield dg.MaterializeResult()
    # Runs once Dagster has written the events of the result yielded.
    progress.done("events", f"{len(loaded.figures):,} partition materialization(s), "
                            f"{len(loaded.audits)} check results")
