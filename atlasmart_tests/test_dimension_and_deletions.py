"""The corrections that reach across many days: a corrected dimension batch (stale exactly where a line's tier or
country at order time changes) and a deletion request (its subject never reaches a derived table again)."""

import datetime as dt
import hashlib
import json
from pathlib import Path

import duckdb
import pytest

from atlasmart_assets import cli, extracts, generate, plan, raw_load, stale
from atlasmart_assets.assets.graph import asset_graph
from atlasmart_assets.checks.published import published_free_of_suppressed
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_tests import state
from atlasmart_tests.evidence_edits import customer_and_days, deletion_request, retier_first_customer

HISTORY = ("2026-09-01", "2026-09-20")
NEWEST = "2026-09-21"
BF = {"dagster/backfill": "bf-ref", "atlasmart/reason": "reference correction"}


def _publish_history(published) -> None:  # noqa: ANN001
    published(HISTORY, (NEWEST, None))


def _stale(capsys) -> dict[str, list[str]]:  # noqa: ANN001
    capsys.readouterr()
    assert cli.main(["stale", "--json"]) == 0
    return {d["partition"]: d["reasons"] for d in json.loads(capsys.readouterr().out)}


def _lines(raw: Path) -> dict[str, list[dict]]:
    return {p.name[len("partition="):-len(".json")]: json.loads(p.read_text())["lines"]
            for p in sorted(raw.glob("partition=*.json"))}


def _order_times(lines: list[dict]) -> dict[str, str]:
    times: dict[str, str] = {}
    for line in lines:
        times[line["order_id"]] = min(times.get(line["order_id"], line["event_time"]), line["event_time"])
    return times


def _tier_at(versions: list[dict], customer: str, at: str) -> str | None:
    day = at[:10]
    for v in versions:
        if v["customer_id"] == customer and v["valid_from"] <= day and (v["valid_to"] is None or day < v["valid_to"]):
            return v["tier"]
    return None


def test_a_dimension_batch_makes_stale_exactly_the_days_whose_tier_changes(env, instance, published, capsys) -> None:
    _publish_history(published)
    old = json.loads((env.raw_dir / "customers.json").read_text())["customers"]
    new = [{"customer_id": "C00027", "country": "JP", "tier": "gold", "valid_from": "2026-01-01",
            "valid_to": "2026-09-11"},
           {"customer_id": "C00027", "country": "JP", "tier": "platinum", "valid_from": "2026-09-11", "valid_to": None}]
    (env.raw_dir / "customers").mkdir()
    (env.raw_dir / "customers" / "D-2026-09-25-01.json").write_text(json.dumps({"customers": new}))

    # Independently: days holding a C00027 line whose tier at order time differs between the two versions.
    expected = set()
    for day, lines in _lines(env.raw_dir).items():
        times = _order_times(lines)
        for line in lines:
            if line["customer_id"] == "C00027":
                at = times[line["order_id"]]
                if _tier_at(old, "C00027", at) != _tier_at(new, "C00027", at):
                    expected.add(day)
    stale = _stale(capsys)
    assert set(stale) == expected and expected == {"2026-09-11", "2026-09-12", "2026-09-15", "2026-09-19"}
    assert all("dimension batch D-2026-09-25-01" in r[0] for r in stale.values()), stale

    before = state.files(env.published_dir)
    content = {d: extracts.read(env, d)["sha256"] for d in (f"2026-09-{k:02d}" for k in range(1, 21))}
    result = run_chain(instance, "2026-09-11", "2026-09-19", BF)
    assert result.success
    assert _stale(capsys) == {}
    after = state.files(env.published_dir)
    for day in content:
        name = extracts.file_name(day)
        sha = extracts.read(env, day)["sha256"]
        if day in expected:
            assert sha != content[day] and "platinum" in (env.published_dir / name).read_text(), day
        elif "2026-09-11" <= day <= "2026-09-19":
            assert sha == content[day], f"{day}: content unchanged inside the window"
        else:
            assert after[name] == before[name], f"{day}: a neighbour outside the window is byte-identical"
    ledger = state.table_rows(env, "(select partition_date::varchar as d, dimension_batches, seq "
                                   "from audit.publications)", "d = '2026-09-12'")
    assert "D-2026-09-25-01" in sorted(ledger, key=lambda r: r[2])[-1][1], "the publication records its dimension"


@pytest.mark.parametrize("problem, versions", [
    ("overlap", [{"customer_id": "C00002", "country": "DE", "tier": "gold", "valid_from": "2026-01-01",
                  "valid_to": "2026-09-10"},
                 {"customer_id": "C00002", "country": "DE", "tier": "silver", "valid_from": "2026-09-05",
                  "valid_to": None}]),
    ("a gap", [{"customer_id": "C00002", "country": "DE", "tier": "gold", "valid_from": "2026-01-01",
                "valid_to": "2026-09-10"},
               {"customer_id": "C00002", "country": "DE", "tier": "silver", "valid_from": "2026-09-12",
                "valid_to": None}]),
])
def test_overlapping_or_gapped_versions_are_refused_naming_batch_and_customer(env, instance, published, problem,
                                                                             versions) -> None:
    _publish_history(published)
    (env.raw_dir / "customers").mkdir()
    path = env.raw_dir / "customers" / "D-bad.json"
    path.write_text(json.dumps({"customers": versions}))
    before = state.snapshot(env)
    result = run_chain(instance, "2026-09-19", "2026-09-19", BF)
    assert not result.success
    text = " ".join(e.step_failure_data.user_failure_data.description or "" for e in result.get_step_failure_events()
                    if e.step_failure_data.user_failure_data)
    assert str(path) in text and "C00002" in text and problem.split()[-1] in text, text
    assert state.snapshot(env) == before


@pytest.mark.parametrize("name, versions, problem", [
    # A number sorts with no text id: it failed the build with a TypeError naming no file (a review found it).
    ("D-2026-09-25-01", [{"customer_id": 27, "country": "JP", "tier": "gold", "valid_from": "2026-01-01",
                          "valid_to": None}], "customer_id 27 is not a text id"),
    # The first batch's id: it was refused as "customers.json changed", a file nobody touched (a review found it).
    ("customers", [{"customer_id": "C00002", "country": "DE", "tier": "platinum", "valid_from": "2026-01-01",
                    "valid_to": None}], "a later dimension batch cannot be named 'customers'"),
])
def test_a_dimension_batch_the_build_cannot_use_is_refused_naming_it_and_stale_says_so(
        env, instance, published, capsys, name, versions, problem) -> None:
    _publish_history(published)
    (env.raw_dir / "customers").mkdir()
    path = env.raw_dir / "customers" / f"{name}.json"
    path.write_text(json.dumps({"customers": versions}))
    before = state.snapshot(env)
    result = run_chain(instance, "2026-09-19", "2026-09-19", BF)
    assert not result.success
    text = state.failure_text(result)
    assert f"dimension batch {path}: {problem}" in text, text[:2000]
    assert state.snapshot(env) == before
    capsys.readouterr()
    assert cli.main(["stale", "--json"]) == 2
    assert str(path) in capsys.readouterr().err


def test_a_deletion_request_is_applied_everywhere_and_nothing_brings_it_back(env, instance, published, capsys) -> None:
    _publish_history(published)
    subject = "C00004"
    raw_lines = _lines(env.raw_dir)
    days = sorted(d for d, lines in raw_lines.items() if any(x["customer_id"] == subject for x in lines))
    assert days == ["2026-09-03", "2026-09-18", "2026-09-19", "2026-09-20", NEWEST]
    deletion_request(env.raw_dir, "DR-0001", customer_id=subject)
    deletion_request(env.raw_dir, "DR-0002", customer_id="C99999")  # unknown to the dimension: accepted
    stale = _stale(capsys)
    assert set(stale) == set(days) and all("deletion request DR-0001" in r[0] for r in stale.values())

    result = run_chain(instance, "2026-09-03", "2026-09-20", BF)
    assert result.success
    [reference] = [e for e in result.get_asset_check_evaluations()
                   if e.check_name == "staged_order_lines_reference_data_valid"]
    assert reference.passed and "DR-0002 name(s) a customer the dimension does not know" in reference.description
    assert "affecting no day" not in reference.description, "its lines, if any, are suppressed like any other"
    assert run_chain(instance, NEWEST).success, "the current lane applies the request to the newest day"
    assert _stale(capsys) == {}
    for table in ("staged.order_lines", "fact.fct_order_lines", "history.staged_order_lines",
                  "history.fct_order_lines"):
        assert state.table_rows(env, table, f"customer_id = '{subject}'") == [], table
    for day in days:
        # Controls reconciled explicitly: the latest batch's controls minus the suppressed lines.
        manifest = json.loads((env.raw_dir / f"partition={day}.json").read_text())["manifest"]["controls"]
        gone = [x for x in raw_lines[day] if x["customer_id"] == subject]
        latest = {x["line_id"]: x for x in sorted(gone, key=lambda x: x["source_sequence"])}
        published = extracts.read(env, day)
        assert published["controls"][0] == manifest["lines"] - len(latest), day
        assert published["controls"][3] == pytest.approx(
            manifest["gmv"] - sum(x["quantity"] * x["unit_price"] for x in latest.values())), day
        assert published["input"]["requests_applied"] == ["DR-0001"], day
        assert len(list(env.data_dir.joinpath("published_versions").iterdir())) == 1, "no older extract version"

    # A rollback never restores them: refused for the days the request was applied to.
    assert cli.main(["rollback", "--from", "2026-09-18", "--to", "2026-09-19", "--reason", "try"]) == 2
    assert state.table_rows(env, "fact.fct_order_lines", f"customer_id = '{subject}'") == []
    # A rebuild from raw keeps them out.
    assert run_chain(instance, "2026-09-03", "2026-09-20", {**BF, "dagster/backfill": "bf-rebuild"}).success
    assert state.table_rows(env, "fact.fct_order_lines", f"customer_id = '{subject}'") == []
    ledger = state.table_rows(env, "(select partition_date::varchar as d, requests_applied, seq from "
                                   "audit.publications)", "d = '2026-09-19'")
    assert json.loads(sorted(ledger, key=lambda r: r[2])[-1][1]) == ["DR-0001"]


@pytest.mark.parametrize("body, problem", [
    ({"requested_at": "x", "reason": "y", "customer_id": "C1"}, "lacks request_id"),
    ({"request_id": "DR-9", "requested_at": "x", "reason": "y"}, "exactly one subject"),
    ({"request_id": "DR-9", "requested_at": "x", "reason": "y", "customer_id": "C1", "line_ids": ["a"]},
     "exactly one subject"),
])
def test_a_malformed_request_is_refused_and_nothing_moves(env, instance, published, body, problem) -> None:
    _publish_history(published)
    (env.raw_dir / "deletions").mkdir()
    (env.raw_dir / "deletions" / "DR-9.json").write_text(json.dumps(body))
    before = state.snapshot(env)
    result = run_chain(instance, "2026-09-19", "2026-09-19", BF)
    assert not result.success
    text = " ".join(e.step_failure_data.user_failure_data.description or "" for e in result.get_step_failure_events()
                    if e.step_failure_data.user_failure_data)
    assert "DR-9.json" in text and problem in text, text
    assert state.snapshot(env) == before


def test_a_changed_dimension_batch_or_a_withdrawn_request_is_refused(env, instance, published) -> None:
    published(("2026-09-18", "2026-09-19"))
    path = deletion_request(env.raw_dir, "DR-0003", line_ids=["2026-09-19-L000001"])
    assert run_chain(instance, "2026-09-19", "2026-09-19", BF).success  # the request is now loaded evidence
    before = state.snapshot(env)
    path.unlink()
    withdrawn = run_chain(instance, "2026-09-19", "2026-09-19", {**BF, "dagster/backfill": "bf-withdrawn"})
    assert not withdrawn.success
    deletion_request(env.raw_dir, "DR-0003", line_ids=["2026-09-19-L000001"])
    customers = env.raw_dir / "customers.json"
    customers.write_text(customers.read_text().replace('"gold"', '"GOLD"', 1))
    edited = run_chain(instance, "2026-09-19", "2026-09-19", {**BF, "dagster/backfill": "bf-edited"})
    assert not edited.success
    texts = [" ".join(e.step_failure_data.user_failure_data.description or "" for e in r.get_step_failure_events()
                      if e.step_failure_data.user_failure_data) for r in (withdrawn, edited)]
    assert "DR-0003.json" in texts[0] and "has vanished" in texts[0], texts[0]
    assert "customers.json" in texts[1] and "changed since run" in texts[1], texts[1]
    assert state.snapshot(env) == before


def test_a_day_whose_request_is_applied_is_re_published_without_reading_as_doubled(env, instance, published) -> None:
    """A request takes 7 of a day's 12 lines; the backfill after it publishes 5. A later re-publish of the window
    that builds the day again (atlasmart/rederive; a plain one keeps it as published now) compares 5 lines with 5,
    not 5 + 7 suppressed = 12 with 5, which read as doubled and refused the day for ever (the tag accepts a shrink,
    never a doubling)."""
    window, day = ("2026-09-01", "2026-09-10"), "2026-09-05"
    published((*window, {"dagster/backfill": "bf-1"}))
    lines = json.loads((env.raw_dir / f"partition={day}.json").read_text())["lines"]
    deletion_request(env.raw_dir, "DR-many", line_ids=[x["line_id"] for x in lines[:7]])
    first = run_chain(instance, *window, {"dagster/backfill": "bf-2"})
    assert first.success, state.failure_text(first)
    again = run_chain(instance, *window, {"dagster/backfill": "bf-3", "atlasmart/rederive": "build it again"})
    assert again.success, state.failure_text(again)
    [delta] = [e for e in again.get_asset_check_evaluations() if e.check_name == "fct_order_lines_row_delta_within_bounds"]
    figures = delta.metadata["figures"].value["per_partition"][day]
    assert figures == {"before": len(lines) - 7, "after": len(lines) - 7, "delta": 0}, figures
    # The first re-publish after the request counts its 7 lines back: a recorded decision, not a shrink.
    [applied] = [e for e in first.get_asset_check_evaluations() if e.check_name == "fct_order_lines_row_delta_within_bounds"]
    assert applied.metadata["figures"].value["per_partition"][day]["after"] == len(lines)


def test_a_second_request_for_lines_already_left_out_is_no_new_suppression(env, instance, published) -> None:
    """The subject files twice: a second request names the 7 lines the day's current version already left out,
    and its id sorts before the applied one. Its lines are not counted back (5 + 7 read as doubled from 5)."""
    window, day = ("2026-09-01", "2026-09-10"), "2026-09-05"
    published((*window, {"dagster/backfill": "bf-1"}))
    lines = json.loads((env.raw_dir / f"partition={day}.json").read_text())["lines"]
    deletion_request(env.raw_dir, "DR-many", line_ids=[x["line_id"] for x in lines[:7]])
    assert run_chain(instance, *window, {"dagster/backfill": "bf-2"}).success
    deletion_request(env.raw_dir, "DR-again", line_ids=[x["line_id"] for x in lines[:7]])
    again = run_chain(instance, *window, {"dagster/backfill": "bf-3"})
    assert again.success, state.failure_text(again)
    [delta] = [e for e in again.get_asset_check_evaluations() if e.check_name == "fct_order_lines_row_delta_within_bounds"]
    assert delta.metadata["figures"].value["per_partition"][day]["after"] == len(lines) - 7


# Three of the history's 12-line days a chunk: by days, or by the lines the ledger records for each.
@pytest.mark.parametrize("chunks", [{"ATLASMART_CHUNK_DAYS": "3"}, {"ATLASMART_CHUNK_LINES": "36"}],
                         ids=["by-days", "by-lines"])
def test_reads_of_published_history_hold_the_warehouse_a_chunk_of_days_at_a_time(env, published, monkeypatch,
                                                                                  tmp_path, chunks) -> None:
    """The stale check, the daily scan for suppressed lines and a plan's comparison read years of published lines:
    each reads a chunk of days (ATLASMART_CHUNK_DAYS, ATLASMART_CHUNK_LINES) per hold, and between two the warehouse
    is free for today's load to write. What they find is what one read of everything finds."""
    _publish_history(published)
    subject, _ = customer_and_days(env.raw_dir, ["2026-09-19"], "2026-09-19")
    deletion_request(env.raw_dir, "DR-0001", customer_id=subject)
    retier_first_customer(env.raw_dir)

    def read_all() -> tuple:
        found = published_free_of_suppressed(Warehouse())
        impact = plan.make(Warehouse(), asset_graph(), "2026-09-02", "2026-09-19").impact
        return [d.as_dict() for d in stale.stale_days(Warehouse())], found.description, found.figures, impact

    whole = read_all()
    assert whole[0] and whole[2]["held"], "the history has stale days and suppressed lines to find"
    for name, value in chunks.items():
        monkeypatch.setenv(name, value)
    writable: list[bool] = []

    def hand_over(path: Path) -> None:
        with duckdb.connect(str(path)) as con:  # today's load's writer: it opens now, nothing holds the file
            con.execute("create or replace table main.handed_over as select 1 as n")
            con.execute("drop table main.handed_over")
        writable.append(True)

    monkeypatch.setattr(raw_load, "hand_over", hand_over)  # the chunked reads are raw_load.short_reads
    assert read_all() == whole
    # 21 published days in 7 chunks: the stale check and the scan hand over 6 times each; the plan's 18 days in 6
    # chunks, 5 times for its comparison and 5 for its own stale check.
    assert len(writable) == 6 + 6 + 5 + 5, len(writable)


def _retract_subject(env, instance, subject: str, day: str) -> None:  # noqa: ANN001
    """The source retracts the subject's lines of `day` (a late delta), and the day is published again without
    them: its earlier version, kept for rollback, still holds them."""
    first = json.loads((env.raw_dir / f"partition={day}.json").read_text())
    high = first["manifest"]["source_high_sequence"]
    retracted = [x["line_id"] for x in first["lines"] if x["customer_id"] == subject]
    generate.write_batch(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02",
                         [{"op": "delete", "line_id": line, "source_sequence": high + k + 1}
                          for k, line in enumerate(retracted)])
    assert run_chain(instance, day, day, {**BF, "dagster/backfill": "bf-retraction",
                                          "atlasmart/accept_shrink": "the source retracted the order"}).success
    assert state.table_rows(env, "history.fct_order_lines", f"customer_id = '{subject}' and partition_date = '{day}'")


def test_a_request_for_lines_the_source_retracted_earlier_is_stale_where_a_kept_version_holds_them(
        env, instance, published, capsys) -> None:
    """A request for a subject whose lines of a day only a version kept for rollback holds (the source retracted
    them before the request came): `stale` lists that day too, and the backfill of what it lists erases the kept
    version, so a rollback cannot publish the subject again. A review found `stale` read the current version only:
    the day was never built under the request, and its rollback published the subject's four lines again."""
    published(("2026-09-17", "2026-09-20"), (NEWEST, None))
    subject, day = "C00004", "2026-09-18"
    _retract_subject(env, instance, subject, day)
    deletion_request(env.raw_dir, "DR-0001", customer_id=subject)
    stale_now = _stale(capsys)
    assert sorted(stale_now) == ["2026-09-18", "2026-09-19", "2026-09-20", "2026-09-21"], stale_now
    assert stale_now[day] == ["deletion request DR-0001: a version kept for rollback holds 4 line(s)"]
    assert run_chain(instance, "2026-09-18", "2026-09-20", {**BF, "dagster/backfill": "bf-erase"}).success
    assert run_chain(instance, NEWEST).success
    assert _stale(capsys) == {}, "the request is applied wherever stale said"
    assert state.table_rows(env, "history.fct_order_lines", f"customer_id = '{subject}'") == []
    assert cli.main(["rollback", "--from", day, "--to", day, "--reason", "undo the retraction"]) == 2
    assert state.table_rows(env, "fact.fct_order_lines", f"customer_id = '{subject}'") == []


def test_a_rollback_to_a_version_holding_a_requested_subject_is_refused_naming_the_request(
        env, instance, published, capsys) -> None:
    """Before any build applied the request to the day, a rollback to its kept version holding the subject is
    refused, naming the day and the request, and nothing published changes."""
    published(("2026-09-17", "2026-09-20"), (NEWEST, None))
    subject, day = "C00004", "2026-09-18"
    _retract_subject(env, instance, subject, day)
    deletion_request(env.raw_dir, "DR-0001", customer_id=subject)
    before = state.snapshot(env)
    capsys.readouterr()
    assert cli.main(["rollback", "--from", day, "--to", day, "--reason", "undo the retraction"]) == 2
    err = capsys.readouterr().err
    assert "2026-09-18" in err and "'DR-0001'" in err and "Backfill these days first" in err, err
    assert state.snapshot(env) == before


def test_a_malformed_request_makes_stale_fail_naming_it_never_say_nothing_is_stale(env, published, capsys) -> None:
    """One malformed request beside a valid one: `stale` cannot judge any day against the requests, so it says so,
    naming the file, and exits 2, still listing what the landing batches tell; the plan says so too. A review found
    it printed `[]` (exit 0): "nothing is stale" while a valid request was pending on four published days."""
    published(("2026-09-17", "2026-09-20"), (NEWEST, None))
    deletion_request(env.raw_dir, "DR-0001", customer_id="C00004")
    assert sorted(_stale(capsys)) == ["2026-09-18", "2026-09-19", "2026-09-20", "2026-09-21"]
    bad = env.raw_dir / "deletions" / "DR-9.json"
    bad.write_text(json.dumps({"request_id": "DR-9", "reason": "y"}))
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 17), "B-2026-09-17-02", new=1, restate=0, retract=0)
    capsys.readouterr()
    assert cli.main(["stale", "--json"]) == 2
    out = capsys.readouterr()
    assert [d["partition"] for d in json.loads(out.out)] == ["2026-09-17"], "the landing batches' verdict stands"
    assert "DR-9.json" in out.err and "cannot be read" in out.err, out.err
    assert cli.main(["stale"]) == 2
    assert "no published day is stale" not in capsys.readouterr().out
    shown = plan.markdown(plan.make(Warehouse(), asset_graph(), "2026-09-17", "2026-09-18", with_impact=False))
    assert "Stale days not judged in full" in shown and "DR-9.json" in shown, shown


@pytest.mark.parametrize("unreadable", ["another request malformed", "the request's file deleted"])
def test_a_rollback_never_publishes_a_requested_subject_while_the_requests_cannot_be_read(
        env, instance, published, capsys, unreadable: str) -> None:
    """The refusal holds when a request file cannot be read (refused: it may be a new request) or was deleted after
    it was loaded (a request is never withdrawn: its keys are read from the warehouse). A review found both
    rollbacks published the subject's lines again: the refusal read only the requests that parsed on disk."""
    published(("2026-09-17", "2026-09-20"), (NEWEST, None))
    subject, day = "C00004", "2026-09-18"
    _retract_subject(env, instance, subject, day)
    deletion_request(env.raw_dir, "DR-0001", customer_id=subject)
    if unreadable == "another request malformed":  # lacks requested_at
        (env.raw_dir / "deletions" / "DR-0002.json").write_text(
            json.dumps({"request_id": "DR-0002", "reason": "y", "customer_id": "C00005"}))
    else:
        assert run_chain(instance, NEWEST).success  # loads DR-0001
        (env.raw_dir / "deletions" / "DR-0001.json").unlink()
    capsys.readouterr()
    assert cli.main(["rollback", "--from", day, "--to", day, "--reason", "undo the retraction"]) == 2
    err = capsys.readouterr().err
    assert ("DR-0002.json" in err and "fix the file first" in err) if unreadable.startswith("another") else \
        "'DR-0001'" in err, err
    assert state.table_rows(env, "fact.fct_order_lines", f"customer_id = '{subject}' and partition_date = '{day}'") == []


@pytest.mark.parametrize("folder", ["deletions", "customers"])
def test_an_entry_of_the_reference_folders_that_cannot_be_read_is_refused_naming_it(env, instance, published, capsys,
                                                                                     folder) -> None:
    """A directory where a deletion request or a dimension batch should be (a file without read permission is
    alike for a user who is not root): refused by the reference check, the stale list and the rollback, naming the
    file, nothing published moved. Until 2026-12-07 each met a bare IsADirectoryError (a review found it)."""
    published(HISTORY, (NEWEST, None))
    (env.raw_dir / folder).mkdir(exist_ok=True)
    bad = env.raw_dir / folder / "X-dir.json"
    bad.mkdir()
    before = state.snapshot(env)
    capsys.readouterr()
    assert cli.main(["stale", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: cannot be read: Is a directory" in err and "Traceback" not in err, err
    result = run_chain(instance, "2026-09-18", "2026-09-18", BF)
    assert not result.success
    [check] = [e for e in result.get_asset_check_evaluations()
               if e.check_name == "staged_order_lines_reference_data_valid"]
    assert not check.passed and str(bad) in (check.description or ""), check.description
    assert cli.main(["rollback", "--from", "2026-09-18", "--reason", "undo"]) == 2
    assert str(bad) in capsys.readouterr().err
    assert state.snapshot(env) == before


@pytest.mark.parametrize("name", ["DR-0007.JSON", "DR-0007.json.bak"])
def test_a_deletion_request_not_named_as_one_is_refused_not_passed_over(env, instance, published, capsys,
                                                                        name) -> None:
    """An erasure saved under another name (DR-0007.JSON) was passed over in silence, and its subject's lines
    published (a review found it): every entry of raw/deletions/ is a request named <request_id>.json."""
    published(HISTORY, (NEWEST, None))
    path = deletion_request(env.raw_dir, "DR-0007", customer_id="C00004")
    path = path.rename(path.with_name(name))
    capsys.readouterr()
    assert cli.main(["stale", "--json"]) == 2
    assert str(path) in capsys.readouterr().err
    result = run_chain(instance, "2026-09-18", "2026-09-18", BF)
    assert not result.success
    said = [state.failure_text(result), *(e.description or "" for e in result.get_asset_check_evaluations()
                                           if not e.passed)]
    assert any(str(path) in text for text in said), said


@pytest.mark.parametrize("request_first", [False, True])
def test_a_rollback_never_publishes_lines_a_late_batch_moved_to_a_requesting_customer(env, instance, published, capsys,
                                                                                      request_first) -> None:
    """A late batch moves an order's lines to C00039, whose deletion request lands with it (or was applied before
    it): the build leaves them out, as C00039's. The version before holds them under their former customer, which no
    key of the request names: a review found the rollback publishing them again. The commit that leaves them out
    erases that version, so the rollback is refused and the lines stay out."""
    published(HISTORY, (NEWEST, None))
    day, subject = "2026-09-10", "C00039"
    doc = json.loads((env.raw_dir / f"partition={day}.json").read_text())
    order = [x for x in doc["lines"] if x["order_id"] == doc["lines"][0]["order_id"]]
    assert all(x["customer_id"] != subject for x in doc["lines"])
    high = doc["manifest"]["source_high_sequence"]
    if request_first:
        deletion_request(env.raw_dir, "DR-0039", customer_id=subject)
        assert run_chain(instance, *HISTORY, {**BF, "dagster/backfill": "bf-request"}).success
    generate.write_batch(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02",
                         [{**x, "customer_id": subject, "source_sequence": high + k + 1} for k, x in enumerate(order)])
    if not request_first:
        deletion_request(env.raw_dir, "DR-0039", customer_id=subject)
    assert run_chain(instance, day, day, {**BF, "dagster/backfill": "bf-moved"}).success
    moved = ", ".join(f"'{x['line_id']}'" for x in order)
    for table in ("fact.fct_order_lines", "history.fct_order_lines", "history.staged_order_lines"):
        assert state.table_rows(env, table, f"line_id in ({moved})") == [], table
    before = state.snapshot(env)
    capsys.readouterr()
    assert cli.main(["rollback", "--from", day, "--reason", "undo the late batch"]) == 2
    assert "erased" in capsys.readouterr().err
    assert state.snapshot(env) == before


def test_a_request_changed_since_it_was_loaded_is_refused_saying_what_was_loaded_and_what_to_do(
        env, instance, published) -> None:
    """Every run is refused while an applied request's file differs from what was loaded, today's load too: the
    refusal names both sha256s and the way out (until 2026-12-07 it named neither, a review)."""
    published(HISTORY, (NEWEST, None))
    path = deletion_request(env.raw_dir, "DR-0001", customer_id="C00004")
    assert run_chain(instance, *HISTORY, {**BF, "dagster/backfill": "bf-apply"}).success
    [(first,)] = state.table_rows(env, "(select sha256 from raw.deletion_requests)")
    path.write_text(json.dumps(json.loads(path.read_text()), indent=2))  # the same request in other bytes
    result = run_chain(instance, NEWEST)
    assert not result.success
    said = " ".join([state.failure_text(result), *(e.description or "" for e in result.get_asset_check_evaluations())])
    now = hashlib.sha256(path.read_bytes()).hexdigest()
    assert f"sha256 {first[:12]} then, {now[:12]} now" in said and "put its first bytes back" in said, said
