"""A correction builds only the days whose inputs changed: a day whose current version this release built from the same
landing batches and customer dimension, applying the deletion requests that name its evidence, and whose published rows
are still what its ledger row says, publishes that version again as it is. Whatever a day keeps, the result is the one a
build of every day gives (atlasmart/rederive)."""

import datetime as dt
import json

import duckdb
import pytest

from atlasmart_assets import correction, extracts, generate, unchanged
from atlasmart_assets import notices as notices_mod
from atlasmart_assets.alerts import lifecycle
from atlasmart_assets.candidates import Evidence
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.ledger import Current
from atlasmart_assets.window import Window
from atlasmart_tests import state
from atlasmart_tests.evidence_edits import customer_and_days, deletion_request, retier_first_customer

WINDOW = ("2026-09-01", "2026-09-10")
DAYS = [f"2026-09-{d:02d}" for d in range(1, 11)]
BF = {"dagster/backfill": "bf-kept", "atlasmart/reason": "kept days"}
REDERIVE = {"dagster/backfill": "bf-rederive", "atlasmart/reason": "rebuild all", "atlasmart/rederive": "check"}
# The first correction of the window on the shipped raw, replayed by the `published` fixture once per test session
# for every test set up by it. The window is one chunk: each run parses its files, never reading a loaded batch back
# by its path, so the test's own copy of the raw serves as the setup's did (not so in chunks of 3 days).
FIRST = (*WINDOW, BF)


def _build_line(instance, result) -> str:  # noqa: ANN001
    [line] = [e.user_message for e in instance.all_logs(result.run_id) if "] build:" in (e.user_message or "")]
    return line


def _run(instance, tags: dict[str, str]):  # noqa: ANN001, ANN202
    result = run_chain(instance, *WINDOW, tags)
    assert result.success, state.failure_text(result)
    return result


def _ledger(env, day: str) -> list[tuple]:  # noqa: ANN001
    return state.table_rows(env, "(select partition_date::varchar as d, seq, changed, sha256_after from "
                                 "audit.publications)", f"d = '{day}'")


def test_a_late_batch_builds_its_day_only_and_gives_what_building_every_day_gives(env, instance, published) -> None:
    published(FIRST)
    # The ledger rows are written in one statement from a frame: a first publication's "before" is NULL, not NaN.
    assert state.table_rows(env, "(select count(*) from audit.publications where rows_before is null and "
                                 "prev_publication_id is null and controls_before is null and source_high_sequence "
                                 "is not null and changed)") == [(10,)]
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 4), "B-2026-09-04-02", new=2, restate=1, retract=1)
    late = _run(instance, {**BF, "dagster/backfill": "bf-late"})
    line = _build_line(instance, late)
    assert "candidates for 1 day(s) of 10, 1 with new evidence; 9 kept as published" in line, line
    [unique] = [e for e in late.get_asset_check_evaluations()
                if e.check_name == "fct_order_lines_candidate_line_id_unique"]
    assert "9 day(s) kept as published, not built again" in unique.description, unique.description
    kept = state.content(env)
    # Every kept day has a new ledger row, unchanged, with the hash of the one before it.
    for day in DAYS:
        rows = sorted(_ledger(env, day), key=lambda r: r[1])
        assert len(rows) == 2 and rows[-1][2] == (day == "2026-09-04"), (day, rows)
        assert (rows[-1][3] == rows[0][3]) == (day != "2026-09-04"), day

    again = _run(instance, REDERIVE)
    assert "candidates for 10 day(s) of 10" in _build_line(instance, again)
    assert "every day built again (atlasmart/rederive)" in _build_line(instance, again)
    notices = "".join(p.read_text() for p in env.notices_dir.glob("*.md"))
    assert "atlasmart/rederive=check" in notices, "the change notice says why every day was built"
    assert state.content(env) == kept, "building every day gives what keeping nine of them gave"


@pytest.mark.parametrize("rederive", [False, True])
def test_a_day_whose_published_rows_differ_from_its_ledger_is_built_again(env, instance, published, rederive) -> None:
    published(FIRST)
    before = state.content(env)
    with Warehouse().writer() as con:
        # Behind the ledger's back: one stored staged line (so the published fact too) and one mart row.
        con.execute("update versions.staged_order_lines set quantity = quantity + 1 where rowid = "
                    "(select min(rowid) from versions.staged_order_lines where partition_date = '2026-09-03')")
        con.execute("update mart.revenue_daily set gmv = gmv + 1 where partition_date = '2026-09-07' and rowid = "
                    "(select min(rowid) from mart.revenue_daily where partition_date = '2026-09-07')")
    assert state.content(env) != before
    repaired = _run(instance, {**(REDERIVE if rederive else BF), "dagster/backfill": "bf-repair"})
    line = _build_line(instance, repaired)
    if rederive:
        assert "candidates for 10 day(s) of 10" in line and "differing from their ledger: 2026-09-03" in line, line
    else:
        assert "candidates for 2 day(s) of 10" in line and "8 kept as published" in line, line
        assert "differing from their ledger: 2026-09-03, 2026-09-07" in line, line
    assert state.content(env) == before, "built again from the evidence, the two days are what they were"
    # What readers of the tables saw moved back: the days' events say so, though their ledger rows agree (a review
    # found them saying `changed: False`).
    events = _fact_events(instance, repaired.run_id)
    for day in (["2026-09-03"] if rederive else ["2026-09-03", "2026-09-07"]):
        assert events[day]["changed"] is True and "differed from its ledger row" in events[day]["repaired"], events[day]
    assert "repaired" not in events["2026-09-04"] and events["2026-09-04"]["changed"] is False, events
    newest = events["2026-09-10"]
    assert newest["repaired_partitions"] == (1 if rederive else 2), newest
    # The ledger marks them, so the change notice and Slack tell them too (before, only the events did).
    fixed = ["2026-09-03"] if rederive else ["2026-09-03", "2026-09-07"]
    assert sorted(d for d, in state.table_rows(env, "(select partition_date::varchar as d from audit.publications "
                                                    "where repaired and backfill_id = 'bf-repair')")) == fixed
    notice = (env.notices_dir / "bf-repair.md").read_text()
    assert f"; repaired: {', '.join(fixed)} (their published rows differed" in notice, notice
    rows = {line.split("]")[0].lstrip("| ["): line for line in notice.splitlines() if line.startswith("| [2026-09-")}
    assert [d for d, line in sorted(rows.items()) if "(repaired)" in line] == fixed, rows
    changes = lifecycle.ledger_changes(Warehouse(), "backfill_id", "bf-repair", "publish")
    assert sorted(c.partition for c in changes if c.repaired) == fixed


def _fact_events(instance, run_id: str) -> dict[str, dict]:  # noqa: ANN001
    out = {}
    for e in instance.all_logs(run_id):
        if e.dagster_event and e.dagster_event.event_type_value == "ASSET_MATERIALIZATION":
            m = e.dagster_event.event_specific_data.materialization
            if list(m.asset_key.path) == ["fact", "fct_order_lines"]:
                out[m.partition] = {k: v.value for k, v in m.metadata.items()}
    return out


def test_a_built_day_repeating_a_line_id_of_a_kept_day_is_refused(env, instance, published) -> None:
    published(FIRST)
    shown = state.snapshot(env)
    other = json.loads((env.raw_dir / "partition=2026-09-05.json").read_text())["lines"][0]
    day = dt.date(2026, 9, 4)
    high = max(b.source_high_sequence for b in generate.read_batches(env.raw_dir, day))
    generate.write_batch(env.raw_dir, day, "B-2026-09-04-02", [
        {**other, "event_time": "2026-09-04T12:00:00Z", "order_id": "2026-09-04-OREPEAT", "source_sequence": high + 1}])
    result = run_chain(instance, *WINDOW, {**BF, "dagster/backfill": "bf-repeat"})
    assert not result.success
    assert "9 kept as published" in _build_line(instance, result)
    [audit] = [e for e in result.get_asset_check_evaluations()
               if e.check_name == "fct_order_lines_line_id_unique_across_days"]
    assert not audit.passed and other["line_id"] in audit.description, audit.description
    assert state.snapshot(env) == shown, "refused: nothing moved"


def test_a_deletion_request_builds_the_days_holding_its_subject(env, instance, published) -> None:
    published(FIRST)
    subject, holding = customer_and_days(env.raw_dir, DAYS, "2026-09-03")
    assert 0 < len(holding) < len(DAYS)
    deletion_request(env.raw_dir, "DR-0100", "erasure request", customer_id=subject)
    applied = _run(instance, {**BF, "dagster/backfill": "bf-erase"})
    line = _build_line(instance, applied)
    assert f"candidates for {len(holding)} day(s) of 10" in line, (holding, line)
    assert state.table_rows(env, "fact.fct_order_lines", f"customer_id = '{subject}'") == []
    for day in holding:
        assert extracts.read(env, day)["input"]["requests_applied"] == ["DR-0100"], day
    # Applied, the request keeps those days as published: the next correction builds none of them (before, every
    # later correction built them again), and gives what building every day gives.
    content = state.content(env)
    again = _run(instance, {**BF, "dagster/backfill": "bf-erase-again"})
    assert "candidates for 0 day(s) of 10, 0 with new evidence; 10 kept as published" in \
        _build_line(instance, again), _build_line(instance, again)
    assert state.content(env) == content
    _run(instance, REDERIVE)
    assert state.content(env) == content
    # A second request naming the same subject builds those days again (it was not in force for their versions).
    deletion_request(env.raw_dir, "DR-0101", "erasure request, again", customer_id=subject)
    second = _run(instance, {**BF, "dagster/backfill": "bf-erase-second"})
    assert f"candidates for {len(holding)} day(s) of 10" in _build_line(instance, second)
    assert state.content(env) == content, "the subject's lines were out already"
    # It takes no line out (the first request is credited with them), yet it was in force for the build: the next
    # correction keeps those days (before, every later correction built them again).
    third = _run(instance, {**BF, "dagster/backfill": "bf-erase-third"})
    assert "candidates for 0 day(s) of 10, 0 with new evidence; 10 kept as published" in \
        _build_line(instance, third), _build_line(instance, third)
    for day in holding:
        assert extracts.read(env, day)["input"]["requests_applied"] == ["DR-0100"], day
    _run(instance, REDERIVE)
    assert state.content(env) == content


def test_a_day_emptied_by_retractions_is_kept_as_published_by_the_next_correction(env, instance, published) -> None:
    published(FIRST)
    emptied = dt.date(2026, 9, 4)
    generate.late_delta(env.raw_dir, emptied, "B-2026-09-04-02", new=0, restate=0, retract=10**6)
    applied = _run(instance, {**BF, "dagster/backfill": "bf-empty", "atlasmart/accept_shrink": "all retracted"})
    assert "candidates for 1 day(s) of 10, 1 with new evidence" in _build_line(instance, applied)
    assert state.table_rows(env, "fact.fct_order_lines", f"partition_date = '{emptied}'") == []
    content = state.content(env)
    # A day without lines has a fingerprint too (before, it had none and every correction built it again).
    again = _run(instance, {**BF, "dagster/backfill": "bf-empty-again"})
    assert "candidates for 0 day(s) of 10, 0 with new evidence; 10 kept as published" in \
        _build_line(instance, again), _build_line(instance, again)
    assert state.content(env) == content
    assert extracts.read(env, emptied.isoformat())["rows"] == []
    _run(instance, REDERIVE)
    assert state.content(env) == content, "building every day gives what keeping the empty day gave"


def test_a_new_dimension_version_or_release_builds_every_day(env, instance, published, monkeypatch) -> None:
    published(FIRST)
    retier_first_customer(env.raw_dir)
    dimension = _run(instance, {**BF, "dagster/backfill": "bf-dimension"})
    assert "candidates for 10 day(s) of 10" in _build_line(instance, dimension)
    monkeypatch.setattr(correction, "CODE_VERSION", "9.9.9+another-release")
    release = _run(instance, {**BF, "dagster/backfill": "bf-release"})
    assert "candidates for 10 day(s) of 10" in _build_line(instance, release)


def test_a_rolled_back_day_is_built_again_by_the_next_correction(env, instance, monkeypatch) -> None:
    """The version a rollback restores may come from another release (the rollback's ledger row names its own):
    the next correction builds the day with this release, as it would have without the rollback."""
    from atlasmart_assets import cli

    release = correction.CODE_VERSION
    monkeypatch.setattr(correction, "CODE_VERSION", "0.1.0+an-earlier-release")
    _run(instance, BF)
    monkeypatch.setattr(correction, "CODE_VERSION", release)
    rebuilt = _run(instance, {**BF, "dagster/backfill": "bf-this-release"})
    assert "candidates for 10 day(s) of 10" in _build_line(instance, rebuilt), "another release built them"
    assert cli.main(["rollback", "--from", "2026-09-03", "--to", "2026-09-04", "--reason", "undo"]) == 0
    again = _run(instance, {**BF, "dagster/backfill": "bf-after-rollback"})
    line = _build_line(instance, again)
    assert "candidates for 2 day(s) of 10" in line and "8 kept as published" in line, line


def _current(day: str, **changes) -> Current:  # noqa: ANN003
    base = {"fingerprint": f"duckdb {duckdb.__version__}: 1 lines, hash sum 1", "stored_as": "pub-1", "input_sha256": None,
            "dimension_version": "dim-1", "code_version": "code-1", "requests_applied": (), "kind": "publish"}
    return Current(day, "pub-1", 1, 1, [1, 1, 1, 1, 1, 0], "0" * 64, "{}", None, **{**base, **changes})


@pytest.mark.parametrize("change, kept", [
    ({}, True),
    ({"code_version": "code-0"}, False),
    ({"dimension_version": "dim-0"}, False),
    ({"input_sha256": "another batch set"}, False),
    ({"requests_applied": ("DR-1",)}, False),
    ({"fingerprint": None}, False),
    ({"stored_as": None}, False),
    ({"kind": "rollback"}, False),
    ({"fingerprint": "duckdb 0.0.1: 1 lines, hash sum 1"}, False),
])
def test_a_day_is_kept_only_when_every_input_is_the_one_its_version_read(change, kept) -> None:
    ev = Evidence(({"batch": "B-1", "sha256": "a" * 64, "source_high_sequence": 1, "kind": "snapshot",
                    "extracted_at": None},), [1, 1, 1, 1, 1, 0])
    now = _current("2026-09-01", **{"input_sha256": ev.digest, **change})
    assert unchanged.eligible({"2026-09-01": now}, {"2026-09-01": ev}, "dim-1", "code-1", {},
                              ["2026-09-01"]) == (["2026-09-01"] if kept else [])
    assert unchanged.eligible({"2026-09-01": now}, {"2026-09-01": ev}, "dim-1", "code-1", {"2026-09-01": {"DR-2"}},
                              ["2026-09-01"]) == [], "a deletion request its version did not apply names a record"
    assert unchanged.eligible({}, {"2026-09-01": ev}, "dim-1", "code-1", {}, ["2026-09-01"]) == [], \
        "never published"


@pytest.mark.parametrize("applied, built_with, named, kept", [
    # A version written before the requests naming its evidence were recorded: compared by the ones it applied.
    ((), None, {}, True),
    (("DR-1",), None, {"DR-1"}, True),
    (("DR-1", "DR-2"), None, {"DR-2", "DR-1"}, True),
    (("DR-1",), None, {"DR-1", "DR-2"}, False),
    (("DR-1",), None, set(), False),
    ((), None, {"DR-1"}, False),
    # Since: by the requests that named its evidence when it was built, whatever each took out of it. A second
    # request for a subject the first took out, or a request naming only a retracted record, applies to no line.
    (("DR-1",), ("DR-1", "DR-2"), {"DR-1", "DR-2"}, True),
    ((), ("DR-1",), {"DR-1"}, True),
    ((), (), {}, True),
    (("DR-1",), ("DR-1",), {"DR-1", "DR-2"}, False),
    ((), (), {"DR-1"}, False),
])
def test_a_day_is_kept_only_when_the_requests_that_named_it_when_built_name_it_now(applied, built_with, named,
                                                                                  kept) -> None:
    ev = Evidence(({"batch": "B-1", "sha256": "a" * 64, "source_high_sequence": 1, "kind": "snapshot",
                    "extracted_at": None},), [1, 1, 1, 1, 1, 0])
    now = _current("2026-09-01", input_sha256=ev.digest, requests_applied=applied, requests_named=built_with)
    requested = {"2026-09-01": named} if named else {}
    assert unchanged.eligible({"2026-09-01": now}, {"2026-09-01": ev}, "dim-1", "code-1", requested,
                              ["2026-09-01"]) == (["2026-09-01"] if kept else [])
    assert unchanged.eligible({"2026-09-01": now}, {"2026-09-01": ev}, "dim-1", "code-1", None,
                              ["2026-09-01"]) == ["2026-09-01"], "the raw step, before requests are looked at"


def test_a_kept_day_the_publish_would_not_point_at_its_stored_rows_publishes_nothing(env, instance, published,
                                                                                    monkeypatch) -> None:
    published(FIRST)
    shown = state.snapshot(env)
    monkeypatch.setattr(ledger, "reused", lambda before, after: {})  # as if no day's stored rows could be read
    result = run_chain(instance, *WINDOW, {**BF, "dagster/backfill": "bf-unstored"})
    assert not result.success
    causes = state.failure_causes(result)
    assert any("kept as published but the publish would not read" in c for c in causes), causes
    assert state.snapshot(env) == shown, "no kept day was published empty"


def test_a_one_day_run_decides_in_its_first_read_and_repairs_a_changed_day(env, instance) -> None:
    """Today's load (a window of one chunk) reads what the decision needs in the read it takes anyway."""
    newest = "2026-09-21"
    assert run_chain(instance, newest).success
    content = state.content(env)
    again = run_chain(instance, newest)
    assert again.success and "candidates for 0 day(s) of 1, 0 with new evidence; 1 kept as published" in \
        _build_line(instance, again)
    assert state.content(env) == content
    with Warehouse().writer() as con:
        con.execute("update versions.staged_order_lines set unit_cost = unit_cost + 1 where rowid = "
                    f"(select max(rowid) from versions.staged_order_lines where partition_date = '{newest}')")
    repaired = run_chain(instance, newest)
    line = _build_line(instance, repaired)
    assert repaired.success and "candidates for 1 day(s) of 1" in line and f"ledger: {newest}" in line, line
    assert state.content(env) == content


def test_a_reader_of_a_warehouse_not_migrated_to_015_tells_no_day_repaired(env, published) -> None:
    """Readers do not migrate: a warehouse no writer has migrated since migration 015 has no `repaired` in its
    ledger, and its notice and Slack changes read without it."""
    published(FIRST)
    with Warehouse().writer() as con:
        con.execute("alter table audit.publications drop column repaired")
        con.execute("delete from audit.schema_migrations where version = 15")
        [pub] = con.execute("select distinct publication_id from audit.publications").fetchone()
    with Warehouse().reader() as con:
        notice = notices_mod.collect(con, env, pub, backfill_id="bf-kept")
    assert notice is not None and len(notice.changes) == 10 and not any(c.repaired for c in notice.changes)
    changes = lifecycle.ledger_changes(Warehouse(), "backfill_id", "bf-kept", "publish")
    assert len(changes) == 10 and not any(c.repaired for c in changes)


def test_a_warehouse_from_before_the_requests_named_keeps_its_days_by_the_requests_applied(env, instance,
                                                                                           published) -> None:
    """A warehouse no writer has migrated since migration 014: a reader reads its ledger without the column, a
    version from before is compared by the requests it applied, and the next publish records the requests named."""
    published(FIRST)
    content = state.content(env)
    with Warehouse().writer() as con:
        con.execute("alter table audit.day_versions drop column requests_named")
        con.execute("delete from audit.schema_migrations where version = 14")
    with Warehouse().reader() as con:
        now = ledger.current(con, Window.of(*WINDOW))
    assert len(now) == 10 and all(c.requests_named is None for c in now.values())
    upgraded = _run(instance, {**BF, "dagster/backfill": "bf-upgraded"})
    assert "candidates for 0 day(s) of 10, 0 with new evidence; 10 kept as published" in \
        _build_line(instance, upgraded), _build_line(instance, upgraded)
    assert state.content(env) == content
    with Warehouse().reader() as con:
        assert all(c.requests_named == () for c in ledger.current(con, Window.of(*WINDOW)).values())
