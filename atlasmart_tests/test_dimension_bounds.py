"""A dimension version's bounds are instants: a date is its midnight (UTC), a time carries its zone, and the join is
at the order's time (issues 2 and 14; a review's cases, 2026-12-07: bounds were cut to their date)."""

import json

import pytest

from atlasmart_assets import cli, dimension
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state

HISTORY = ("2026-09-17", "2026-09-20")
NEWEST = "2026-09-21"


def _publish_history(published) -> None:  # noqa: ANN001
    published(HISTORY, (NEWEST, None))


def _write_dimension_batch(env, name: str, versions: list[dict]) -> None:  # noqa: ANN001
    (env.raw_dir / "customers").mkdir(exist_ok=True)
    (env.raw_dir / "customers" / f"{name}.json").write_text(json.dumps({"schema_version": 1, "customers": versions}))


def _c00002_line(env, day: str) -> dict:  # noqa: ANN001
    lines = json.loads((env.raw_dir / f"partition={day}.json").read_text())["lines"]
    [line] = [x for x in lines if x["customer_id"] == "C00002"]
    return line


# Issue 2 (and the README's table): staged is "joined to the customer dimension version valid at the order's time —
# SCD type 2 with valid_from/valid_to"; issue 14: "the published days holding a line whose customer's version *at
# order time* changed". dimension.py reads each bound as its first 10 characters, so a version that starts at noon
# is in force from midnight.
def test_a_dimension_version_starting_at_noon_does_not_retier_a_morning_order(env, instance, published,
                                                                             capsys) -> None:
    _publish_history(published)
    day = "2026-09-20"
    line = _c00002_line(env, day)
    assert line["event_time"] < f"{day}T12:00:00Z", "the shipped order of C00002 on 2026-09-20 is before noon"
    _write_dimension_batch(env, "D-noon", [
        {"customer_id": "C00002", "country": "DE", "tier": "gold", "valid_from": "2026-01-01",
         "valid_to": f"{day}T12:00:00Z"},
        {"customer_id": "C00002", "country": "DE", "tier": "platinum", "valid_from": f"{day}T12:00:00Z",
         "valid_to": None}])
    capsys.readouterr()
    assert cli.main(["stale", "--json"]) == 0
    out = capsys.readouterr()
    stale = {d["partition"]: d["reasons"] for d in json.loads(out.out)}
    assert day not in stale, ("the 08:59 order's customer was gold at order time under both batches: nothing of "
                              f"{day} changes tier, yet stale says {stale.get(day)}")

    result = run_chain(instance, day, day, {"dagster/backfill": "bf-noon", "atlasmart/reason": "noon tier change"})
    assert result.success, state.failure_text(result)
    [tier] = {r[0] for r in state.table_rows(env, "(select tier, line_id from staged.order_lines)",
                                             f"line_id = '{line['line_id']}'")}
    assert tier == "gold", f"an order placed at {line['event_time']} was joined to the version that starts at noon"


# Issue 14: "Per customer, versions must neither overlap nor leave a gap after the first valid_from: refused with an
# error naming batch and customer." A six-hour gap (or overlap) inside one day is accepted.
@pytest.mark.parametrize("first_ends, second_starts", [
    ("2026-09-20T06:00:00Z", "2026-09-20T12:00:00Z"),  # a gap of six hours
    ("2026-09-20T18:00:00Z", "2026-09-20T12:00:00Z"),  # an overlap of six hours
])
def test_versions_that_gap_or_overlap_within_a_day_are_refused_naming_batch_and_customer(
        env, first_ends, second_starts) -> None:
    _write_dimension_batch(env, "D-intraday", [
        {"customer_id": "C00002", "country": "DE", "tier": "gold", "valid_from": "2026-01-01",
         "valid_to": first_ends},
        {"customer_id": "C00002", "country": "DE", "tier": "platinum", "valid_from": second_starts,
         "valid_to": None}])
    with pytest.raises(dimension.DimensionError) as refused:
        dimension.load(env.raw_dir)
    assert "D-intraday" in str(refused.value) and "C00002" in str(refused.value)


@pytest.mark.parametrize("bound", ["2026-09-20garbage", "2026-09-20T12:00:00", "20260920", 20260920, "2026-09-20 12:00Z"])
def test_a_bound_that_is_neither_a_date_nor_a_time_with_its_zone_is_refused_naming_batch_and_customer(env,
                                                                                                      bound) -> None:
    _write_dimension_batch(env, "D-odd", [
        {"customer_id": "C00002", "country": "DE", "tier": "gold", "valid_from": "2026-01-01", "valid_to": bound},
        {"customer_id": "C00002", "country": "DE", "tier": "platinum", "valid_from": bound, "valid_to": None}])
    with pytest.raises(dimension.DimensionError) as refused:
        dimension.load(env.raw_dir)
    assert "D-odd" in str(refused.value) and "C00002" in str(refused.value) and "with its zone" in str(refused.value)


def test_a_time_with_another_zone_is_the_same_instant_in_utc(env) -> None:
    """+02:00 at 14:00 is 12:00 UTC: it meets a version ending at 12:00Z without a gap or an overlap."""
    _write_dimension_batch(env, "D-zone", [
        {"customer_id": "C00002", "country": "DE", "tier": "gold", "valid_from": "2026-01-01",
         "valid_to": "2026-09-20T12:00:00Z"},
        {"customer_id": "C00002", "country": "DE", "tier": "platinum", "valid_from": "2026-09-20T14:00:00+02:00",
         "valid_to": None}])
    versions = dimension.effective(dimension.load(env.raw_dir))
    starts = versions[versions.customer_id == "C00002"].valid_from.astype(str).tolist()
    assert starts == ["2026-01-01 00:00:00", "2026-09-20 12:00:00"], starts

