"""The one Definitions loads, and names what the contract says."""

import datetime as dt

import dagster as dg

from atlasmart_assets.definitions import defs
from atlasmart_assets.contract import LANE_TAG


def test_definitions_load_with_contract_asset_keys() -> None:
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert {"raw/order_lines", "staged/order_lines", "fact/fct_order_lines", "mart/revenue_daily"} <= keys


def test_every_partitioned_asset_is_set_based() -> None:
    for assets_def in defs.get_repository_def().asset_graph.assets_defs:
        if assets_def.partitions_def is not None and assets_def.keys and assets_def.is_materializable:
            assert assets_def.backfill_policy == dg.BackfillPolicy.single_run(), assets_def.keys


def test_lane_tag_is_on_the_schedule_not_the_job() -> None:
    repo = defs.get_repository_def()
    job = defs.resolve_job_def("atlasmart_daily")
    assert LANE_TAG not in (job.tags or {})
    schedule = repo.get_schedule_def("atlasmart_daily_schedule")
    tick = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=dt.datetime(2026, 9, 22, 2)))
    [request] = tick.run_requests
    assert request.partition_key == "2026-09-21", "the schedule materializes the newest closed day"
    assert request.tags[LANE_TAG] == "current" and request.tags["dagster/priority"] == "10"
