"""The seed lab: controls, the incident, a one-day backfill that leaves the current day byte-identical."""

from atlasmart_assets import extracts, lab
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state

LAB_20 = [8, 5, 10, 690, 425, 265]
LAB_21 = [9, 7, 11, 740, 450, 290]


def test_lab_acceptance_summary(env, instance) -> None:
    summary = lab.run(instance)
    assert summary["incident_controls"] == [8, 5, 10, 690, 435, 255]
    assert summary["historical_controls"] == LAB_20
    assert summary["current_controls"] == LAB_21
    assert summary["current_hash_unchanged_after_backfill"] is True


def test_rerun_single_and_ranged_is_idempotent(env, instance, published) -> None:
    published(("2026-09-20", None), ("2026-09-21", None))
    first = state.snapshot(env)
    rows_20 = state.table_rows(env, "fact.fct_order_lines", "partition_date = '2026-09-20'")
    assert run_chain(instance, "2026-09-20").success
    assert run_chain(instance, "2026-09-19", "2026-09-20").success
    assert state.table_rows(env, "fact.fct_order_lines", "partition_date = '2026-09-20'") == rows_20
    again = state.snapshot(env)
    assert again["extracts"]["partition=2026-09-21.json"] == first["extracts"]["partition=2026-09-21.json"]
    assert again["extracts"]["partition=2026-09-20.json"] == first["extracts"]["partition=2026-09-20.json"]
    assert extracts.read(env, "2026-09-20")["controls"] == LAB_20
    assert extracts.read(env, "2026-09-21")["controls"] == LAB_21
    raw_count = state.table_rows(env, "raw.order_lines", "partition_date = '2026-09-20'")
    assert len(raw_count) == 9, "raw keeps every record as received, once"
