"""The one Definitions loads, and names what the contract says."""

import datetime as dt
import shutil
from pathlib import Path

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


def test_every_asset_and_check_describes_itself() -> None:
    """Description, kind and owner on every asset; a description on every check (whose asset has kind and owner);
    a table name and column schema on every table."""
    graph = defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        name = key.to_user_string()
        assert node.description and "Grain:" in node.description, name
        assert node.kinds, name
        assert node.owners == ["team:data-platform"], name  # the observed landing batches too
        assert isinstance(node.metadata.get("dagster/column_schema"), dg.TableSchema), name
        if node.is_materializable:
            assert "duckdb" in node.kinds and node.metadata["dagster/table_name"] == name.replace("/", "."), name
    assert graph.asset_check_keys
    for check in graph.asset_check_keys:
        spec = graph.get_check_spec(check)
        assert spec.description and len(spec.description) > 30, check
        assert graph.get(check.asset_key).kinds and graph.get(check.asset_key).owners, check
    described = [*defs.jobs, *defs.sensors, *defs.schedules]
    assert all(d.description for d in described), [d.name for d in described if not d.description]


def test_dg_checks_and_lists_the_definitions() -> None:
    """`dg` sees the project ([tool.dg] in pyproject.toml) and loads the one Definitions."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    venv = Path(sys.executable).parent.parent
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    dg_cli = str(venv / "bin" / "dg")
    checked = subprocess.run([dg_cli, "check", "defs"], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and "All definitions loaded successfully" in checked.stdout, checked.stderr
    listed = subprocess.run([dg_cli, "list", "defs", "--json"], cwd=root, env=env, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "fact/fct_order_lines" in listed.stdout and "atlasmart_newest_partition_catch_up" in listed.stdout


def test_the_backfill_policy_setting_gives_dagsters_default_or_refuses_a_typo() -> None:
    """ATLASMART_BACKFILL_POLICY=per_partition (the bench's comparison) leaves the partitioned assets on Dagster's
    default of one run per partition; an unknown value is refused naming the variable."""
    import pytest

    from atlasmart_assets.assets.common import backfill_policy

    assert backfill_policy("single_run") == dg.BackfillPolicy.single_run()
    assert backfill_policy("per_partition") is None
    with pytest.raises(ValueError, match="ATLASMART_BACKFILL_POLICY='per-day'"):
        backfill_policy("per-day")


def test_the_shipped_instance_has_the_two_lanes_and_no_first_visit_prompt(tmp_path) -> None:
    """The repo's dagster.yaml, loaded as Dagster loads it: the backfill lane 1, the current lane 2, the queue read
    every second, and no newsletter modal over the operator's first page (it swallowed a click in the UI test)."""
    shutil.copy(Path(__file__).resolve().parent.parent / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.nux_enabled is False
        limits = instance.get_settings("concurrency")["runs"]["tag_concurrency_limits"]
        assert {"key": "dagster/backfill", "limit": 1} in limits
        assert {"key": "atlasmart/lane", "value": "current", "limit": 2} in limits
        assert instance.run_coordinator.dequeue_interval_seconds == 1  # not Dagster's 5 s


def test_each_tables_column_schema_is_the_tables_columns(env, instance) -> None:  # noqa: ANN001
    """The column schema the UI shows for each table is the table's columns, in order (a review found raw's
    missing `op`, the column that marks a retraction)."""
    import duckdb

    from atlasmart_assets.lab import run_chain
    assert run_chain(instance, "2026-09-20").success
    graph = defs.resolve_asset_graph()
    with duckdb.connect(str(env.warehouse_path), read_only=True) as con:
        for key in graph.get_all_asset_keys():
            table = graph.get(key).metadata.get("dagster/table_name")
            if table:
                declared = [c.name for c in graph.get(key).metadata["dagster/column_schema"].columns]
                real = [row[0] for row in con.execute(f"describe {table}").fetchall()]
                assert declared == real, (table, declared, real)


def test_a_check_is_labelled_blocking_exactly_when_its_failure_refuses_the_publish() -> None:
    """The WARN-only check (rows changed: a change for a person to read) is not labelled blocking in the UI; every
    other correction check is (a review found the WARN one labelled blocking)."""
    from atlasmart_assets import correction
    graph = defs.resolve_asset_graph()
    blocking = {k.name: graph.get_check_spec(k).blocking for k in graph.asset_check_keys if k.name in correction.CHECKS}
    assert blocking == {name: name != correction.ROW_COUNT_UNCHANGED for name in correction.CHECKS}
