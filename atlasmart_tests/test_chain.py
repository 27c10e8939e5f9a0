"""A ranged run equals the union of single-day runs; SCD2 keeps the tier valid at order time."""

import json

from atlasmart_assets import settings
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state

TABLES = ("raw.order_lines", "staged.order_lines", "fact.fct_order_lines", "mart.revenue_daily")


def test_ranged_run_equals_union_of_single_days(env, instance, published, tmp_path, monkeypatch) -> None:
    # Three days (a first, a middle and a last day of the range, the last one restating a line) in one chunk: the
    # ranged run is a cached one that other tests share, on the same shipped raw the single days read.
    days = ("2026-09-18", "2026-09-19", "2026-09-20")
    published((days[0], days[-1]))
    ranged = {t: state.table_rows(env, t) for t in TABLES}
    ranged_extracts = state.files(env.published_dir)

    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "singles"))
    singles_cfg = settings.load()
    for day in days:
        assert run_chain(instance, day).success
    for table in TABLES:
        assert state.table_rows(singles_cfg, table) == ranged[table], table
    assert state.files(singles_cfg.published_dir) == ranged_extracts
    # 12 lines on each day but 2026-09-20, whose file restates one of its 9 records: the manifests say how many.
    lines = [json.loads((env.raw_dir / f"partition={day}.json").read_text())["manifest"]["controls"]["lines"]
             for day in days]
    assert lines == [12, 12, 8] and len(ranged["fact.fct_order_lines"]) == sum(lines)


def _tier_of(cfg, line_id: str) -> str:
    [row] = state.table_rows(cfg, "fact.fct_order_lines", f"line_id = '{line_id}'")
    return row[5]


def test_rebuilding_an_old_partition_keeps_the_tier_valid_then(env, instance, published) -> None:
    published(("2026-09-20", None))
    assert _tier_of(env, "2026-09-20-L0004") == "bronze"  # C00003 was bronze until 2026-09-21
    # The dimension gains a version: C00003 moves again, to gold, from 2026-09-25 — delivered as a new dimension
    # batch that replaces C00003's whole history (the first batch is immutable evidence).
    doc = json.loads((env.raw_dir / "customers.json").read_text())
    history = [v for v in doc["customers"] if v["customer_id"] == "C00003"]
    for version in history:
        if version["valid_to"] is None:
            version["valid_to"] = "2026-09-25"
    history.append({"customer_id": "C00003", "country": "FR", "tier": "gold", "valid_from": "2026-09-25",
                    "valid_to": None})
    (env.raw_dir / "customers").mkdir()
    (env.raw_dir / "customers" / "D-2026-09-25-01.json").write_text(json.dumps({"customers": history}))
    assert run_chain(instance, "2026-09-20", "2026-09-21", {"dagster/backfill": "bf-scd2",
                                                             "atlasmart/fence_override": "test: rebuild both days"}).success
    assert _tier_of(env, "2026-09-20-L0004") == "bronze"
    assert _tier_of(env, "2026-09-21-L0013") == "silver"  # silver from 2026-09-21 until 2026-09-25
    overrides = state.table_rows(env, "(select partition_date::varchar as d, fence_override, backfill_id "
                                      "from audit.publications)", "backfill_id = 'bf-scd2'")
    assert overrides == [("2026-09-20", "test: rebuild both days", "bf-scd2"),
                         ("2026-09-21", "test: rebuild both days", "bf-scd2")], "the override is in the ledger"


def test_nothing_but_the_window_moves(env, instance, published) -> None:
    published(("2026-09-18", None), ("2026-09-19", None), ("2026-09-20", None))
    outside = state.table_rows(env, "fact.fct_order_lines", "partition_date <> '2026-09-19'")
    files_before = state.files(env.published_dir)
    assert run_chain(instance, "2026-09-19", "2026-09-19", {"dagster/backfill": "bf-one-day"}).success
    assert state.table_rows(env, "fact.fct_order_lines", "partition_date <> '2026-09-19'") == outside
    assert state.files(env.published_dir) == files_before


def test_a_ranged_run_reaching_the_newest_day_is_fenced_without_a_backfill_tag(env, instance) -> None:
    result = run_chain(instance, "2026-09-20", "2026-09-21")
    assert not result.success
    assert not (env.published_dir / "partition=2026-09-21.json").exists()
    assert run_chain(instance, "2026-09-21").success, "the newest day alone is the current lane's to publish"
    assert run_chain(instance, "2026-09-20", "2026-09-21", {"atlasmart/fence_override": "deliberate"}).success


def test_raw_is_appended_in_chunks_of_days_each_its_own_transaction(env, instance, tmp_path, monkeypatch) -> None:
    """A long first load appends raw a chunk of days per warehouse transaction (short holds): with chunks of two
    days, five days take three appends, and the warehouse holds what one transaction would have written."""
    import dagster as dg

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "2")
    first = run_chain(instance, "2026-09-15", "2026-09-19")
    assert first.success
    chunked = state.table_rows(env, "raw.order_lines")
    batches = state.table_rows(env, "(select partition_date, batch_id, records from raw.batches)")
    def writers(run_id: str) -> int:
        [event] = [r for r in instance.fetch_materializations(dg.AssetKey(["raw", "order_lines"]), limit=10).records
                   if r.run_id == run_id and "lock_acquisitions" in r.asset_materialization.metadata]
        return int(event.asset_materialization.metadata["lock_acquisitions"].value)

    monkeypatch.delenv("ATLASMART_CHUNK_DAYS")
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "one"))
    one = settings.load()
    result = run_chain(instance, "2026-09-15", "2026-09-19")
    assert result.success
    assert writers(first.run_id) - writers(result.run_id) == 2, "three appends instead of one"
    assert state.table_rows(one, "raw.order_lines") == chunked
    assert state.table_rows(one, "(select partition_date, batch_id, records from raw.batches)") == batches
