"""Rollback restores the previous publication of a range byte-identical, in one commit, recorded in the ledger."""

import atexit
import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import dagster as dg
import duckdb
import pytest

from atlasmart_assets import capacity, cli, generate, lab, rollback
from atlasmart_assets.definitions import defs
from atlasmart_assets.assets import day_metadata
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import publish as publish_mod
from atlasmart_assets.warehouse.publish import PublishConflict, restore_candidates
from atlasmart_assets.window import Window
from atlasmart_tests import retries, state
from atlasmart_tests.plans import Watched


def _ledger(cfg, day):
    return state.table_rows(cfg, "(select partition_date, kind, publication_id, prev_publication_id, restored_from, "
                                 "sha256_before, sha256_after, seq from audit.publications)",
                            f"partition_date = '{day}'")


def test_rollback_job_restores_previous_publication_byte_identical(env, instance, published) -> None:
    published(("2026-09-19", "2026-09-20"), ("2026-09-21", None))
    original = state.content(env)
    original_bytes = (env.published_dir / "partition=2026-09-20.json").read_bytes()
    lab.publish_legacy_incident(Warehouse())
    assert state.content(env) != original

    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance,
        run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-20", "reason": "undo the incident"}}}})

    assert result.success
    assert state.content(env) == original
    assert (env.published_dir / "partition=2026-09-20.json").read_bytes() == original_bytes
    rows = sorted(_ledger(env, "2026-09-20"), key=lambda r: r[-1])
    assert [r[1] for r in rows] == ["publish", "publish", "rollback"]
    first, incident, undo = rows
    assert undo[4] == first[2] and undo[3] == incident[2]
    assert undo[5] == incident[6] and undo[6] == first[6]


def test_repeated_rollbacks_step_back_through_history(env, instance, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    first = state.content(env)
    lab.publish_legacy_incident(Warehouse())
    incident = state.content(env)
    assert run_chain(instance, "2026-09-20", "2026-09-20", {"dagster/backfill": "bf-fix"}).success
    fixed = state.content(env)
    assert incident != first and fixed == first  # the backfill restored cost 425: the same content as the first

    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "undo the fix"]) == 0
    assert state.content(env) == incident, "one step back: the incident's version"
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "further back"]) == 0
    assert state.content(env) == first, "a second rollback steps back again, it does not re-apply the fix"
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "nothing earlier"]) == 2
    assert state.content(env) == first

    rows = sorted(_ledger(env, "2026-09-20"), key=lambda r: r[-1])
    assert [r[1] for r in rows] == ["publish", "publish", "publish", "rollback", "rollback"]
    assert rows[3][4] == rows[1][2] and rows[4][4] == rows[0][2], "restored_from names the two earlier versions"
    # A chosen publication, however far back within retention.
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "back to the incident",
                     "--to-publication", rows[1][2], "--requested-by", "ana"]) == 0
    assert state.content(env) == incident
    [chosen] = [p for p in env.notices_dir.glob("rol-*.md") if "back to the incident" in p.read_text()]
    assert "- Requested by: ana" in chosen.read_text(), "the CLI's --requested-by reaches the notice"
    assert not list(env.scratch_dir.glob("*.duckdb")), "a rollback leaves no scratch behind"


def test_rollback_refuses_partitions_without_history(env, published, capfd) -> None:
    published(("2026-09-20", None))
    before = state.snapshot(env)
    capfd.readouterr()
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "nothing to undo"]) == 2
    assert state.snapshot(env) == before
    # The terminal says why in a few lines: Dagster's engine events and the refusal's stack trace stay in the run.
    out = capfd.readouterr()
    shown = (out.out + out.err).strip().splitlines()
    assert not any(word in line for line in shown for word in ("Stack Trace", "STEP_FAILURE", "Warning")), shown
    ours = shown[next(i for i, line in enumerate(shown) if line.startswith("rollback 2026-09-20")):]
    assert len(ours) <= 3, ours  # its progress line, then the outcome (Dagster's first-use telemetry note before)
    assert "there is nothing earlier to restore" in shown[-1] and shown[-1].startswith("atlasmart rollback:"), shown


def test_a_cli_rollback_shows_its_lines_in_the_terminal_as_they_are_written(env, published, capfd,
                                                                           monkeypatch) -> None:
    """`atlasmart rollback` leaves Dagster's console log out, and shows the rollback's own lines while it runs (a
    year's takes seconds): the targets' line is on the terminal before the publish begins; the JSON is on stdout."""
    published(("2026-09-20", None))
    lab.publish_legacy_incident(Warehouse())
    seen: list[str] = []
    real_publish = rollback.publish

    def publishing(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(capfd.readouterr().err)
        return real_publish(*args, **kwargs)

    monkeypatch.setattr(rollback, "publish", publishing)
    capfd.readouterr()
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "undo the incident"]) == 0
    assert len(seen) == 1 and "rollback 2026-09-20 [1/" in seen[0] and "targets:" in seen[0], seen
    out = capfd.readouterr()
    assert json.loads(out.out)["publication_id"] and "DEBUG" not in seen[0] + out.err, out.err
    assert "events:" in out.err, out.err


ASSETS = ("staged/order_lines", "fact/fct_order_lines", "mart/revenue_daily")


_latest = state.latest


def _rollback_row(cfg, day: str) -> tuple:
    rows = sorted(_ledger(cfg, day), key=lambda r: r[-1])
    assert rows[-1][1] == "rollback"
    return rows[-1]


def _assert_restored_version_shown(instance: dg.DagsterInstance, cfg, run_id: str, day: str) -> None:
    """Staged, fact and mart each show the rollback's materialization of `day`: its publication and rows, and each
    asset its own figures as a correction's events carry them: the fact its controls and the sha256 of the batches
    the restored version read, the mart the extract and its sha256 (before, all three carried the extract's sha256
    as their own)."""
    _, _, pub_id, _, restored_from, _, sha_after, _ = _rollback_row(cfg, day)
    extract = json.loads((cfg.published_dir / f"partition={day}.json").read_text())
    [(_, _, input_sha256)] = state.table_rows(cfg, "(select partition_date, publication_id, input_sha256 "
                                              "from audit.publications)",
                                         f"partition_date = '{day}' and publication_id = '{restored_from}'")
    for asset in ASSETS:
        record = _latest(instance, asset, day)
        meta = record.asset_materialization.metadata
        assert record.run_id == run_id, asset
        assert meta["publication_id"].value == pub_id and meta["restored_from"].value == restored_from
        rows = len(extract["rows"]) if asset == "mart/revenue_daily" else extract["controls"][0]
        assert meta["dagster/row_count"].value == rows, asset
        assert meta["lock_acquisitions"].value >= 3 and meta["lock_hold_max_s"].value > 0, (asset, meta)
        if asset == "mart/revenue_daily":
            assert meta["sha256"].value == sha_after == extract["sha256"]
            assert meta["extract"].value == str(cfg.published_dir / f"partition={day}.json")
            continue
        assert "sha256" not in meta, (asset, "the extract's sha256 is the mart's figure")
        if asset == "fact/fct_order_lines":
            assert input_sha256 and meta["input_sha256"].value == input_sha256
            controls = {cells[0]: cells[2] for line in meta["controls"].value.splitlines()
                        if line.startswith("| ") and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 4}
            assert controls["cost"] == "425", controls
    notice = cfg.notices_dir / f"{pub_id}.md"
    assert notice.exists() and _latest(instance, "fact/fct_order_lines", day).asset_materialization.metadata[
        "change_notice"].value == str(notice)


def test_ui_rollback_records_materializations_of_the_restored_partitions(env, instance, published) -> None:
    published(("2026-09-19", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance,
        run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-20", "reason": "undo the incident"}}}})
    assert result.success
    _assert_restored_version_shown(instance, env, result.run_id, "2026-09-20")
    # The instance holds the rollback's run alone: any materialization of 2026-09-19 in it would be the rollback's.
    outside = instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey(["fact", "fct_order_lines"]), asset_partitions=["2026-09-19"]), limit=1).records
    assert not outside, "only the window"


@pytest.fixture
def home_instance() -> Iterator[dg.DagsterInstance]:
    """An instance at DAGSTER_HOME (set for the test), the one the CLI's run goes to."""
    with dg.instance_for_test() as inst:
        yield inst


def test_cli_rollback_is_a_run_of_rollback_job_in_the_instance(env, home_instance, published, capsys) -> None:
    instance = home_instance
    published(("2026-09-19", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    capsys.readouterr()
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "undo the incident"]) == 0
    printed = json.loads(capsys.readouterr().out)
    run = instance.get_run_by_id(printed["run_id"])
    assert run is not None and run.job_name == "rollback_job" and run.is_success
    assert run.tags["atlasmart/launched_from"] == "cli"
    assert printed["restored"]["2026-09-20"]["controls"][4] == 425
    _assert_restored_version_shown(instance, env, run.run_id, "2026-09-20")
    # A refused rollback is a failed run of the same job, and the command says why.
    assert cli.main(["rollback", "--from", "2026-09-19", "--reason", "nothing earlier"]) == 2
    assert "partition 2026-09-19 shows its first publication" in capsys.readouterr().err
    failed = instance.get_runs(dg.RunsFilter(job_name="rollback_job", statuses=[dg.DagsterRunStatus.FAILURE]))
    assert len(failed) == 1


def test_a_rollback_of_several_days_puts_its_own_figures_on_the_newest_day_only(env, instance, published) -> None:
    """Each restored day's events carry that day's figures; the publication, window, notice and reason go once, on
    the newest day's (a year's rollback would otherwise repeat them 3 x 365 times)."""
    published(("2026-09-18", "2026-09-20"))
    assert run_chain(instance, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-again",
                                                            "atlasmart/rederive": "a second version"}).success
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance, run_config={"ops": {"rollback_range": {"config": {
            "start": "2026-09-18", "end": "2026-09-20", "reason": "back to the first version"}}}})
    assert result.success
    for asset in ASSETS:
        for day in ("2026-09-18", "2026-09-19", "2026-09-20"):
            record = _latest(instance, asset, day)
            meta, text = record.asset_materialization.metadata, record.asset_materialization.description
            assert record.run_id == result.run_id and meta["restored_from"].value and meta["dagster/row_count"].value
            assert ("sha256" in meta) == (asset == "mart/revenue_daily"), (asset, day)
            newest = day == "2026-09-20"
            assert ("publication_id" in meta) == newest and ("change_notice" in meta) == newest, (asset, day)
            assert ("lock_hold_max_s" in meta) == newest, (asset, day)
            assert ("back to the first version" in text) == newest, (asset, day, text)


def test_a_rollback_reason_past_its_length_is_refused_and_nothing_changes(env, published, capsys) -> None:
    published(("2026-09-19", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    before = state.snapshot(env)
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "x" * 1001]) == 2
    assert "past the 1,000 it may have" in capsys.readouterr().err
    assert state.snapshot(env) == before


def _rollback_run(instance: dg.DagsterInstance, start: str, end: str, reason: str) -> dg.ExecuteInProcessResult:
    return defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance, raise_on_error=False,
        run_config={"ops": {"rollback_range": {"config": {"start": start, "end": end, "reason": reason}}}})


def test_a_rollback_logs_each_phase_and_ends_after_its_events(env, instance, published) -> None:
    published(("2026-09-01", "2026-09-19"))
    assert run_chain(instance, "2026-09-01", "2026-09-19", {"dagster/backfill": "bf-again",
                                                            "atlasmart/rederive": "a second version"}).success
    result = _rollback_run(instance, "2026-09-01", "2026-09-19", "back to the first version")
    assert result.success
    lines = [e.user_message for e in instance.all_logs(result.run_id)
             if not e.dagster_event and " so far, " in e.user_message]
    assert [line.split("] ")[1].split(":")[0] for line in lines] == ["targets", "restore", "publish", "events",
                                                                     "events"], lines
    assert "events: writing 57 partition materializations" in lines[3], lines[3]
    assert all(line.startswith("rollback 2026-09-01..2026-09-19 [") for line in lines), lines
    assert "19 partition(s), to 1 earlier publication(s)" in lines[0], lines[0]
    assert "19 partition(s) restored, 0 of them to other content" in lines[2], lines[2]  # the same evidence twice
    assert "57 partition materializations (19 day(s) x 3 assets)" in lines[-1] and lines[-1].endswith(", done")
    assert not any(line.endswith(", done") for line in lines[:-1]), lines


def test_a_rollback_of_a_mistyped_window_is_refused_in_a_few_words(env, instance, published) -> None:
    """A year typed as ten (2016 for 2026): the refusal names the never-published days as ranges, so the run's
    failure events stay small (a list of 3,650 days made a 110 KB event), and nothing changes."""
    published(("2026-09-01", "2026-09-19"))
    before = state.snapshot(env)
    result = _rollback_run(instance, "2016-09-01", "2026-09-19", "typo")
    assert not result.success and state.snapshot(env) == before
    failure = next(e for e in instance.all_logs(result.run_id) if e.dagster_event
                   and e.dagster_event.event_type_value == "STEP_FAILURE")
    message = failure.dagster_event.step_failure_data.error.to_string()
    assert "partitions 2016-09-01..2026-08-31 (3652 days) were never published" in message, message
    sizes = [len(dg.serialize_value(e)) for e in instance.all_logs(result.run_id)]
    assert max(sizes) < 16 * 1024, sorted(sizes)[-3:]


def test_a_long_rollback_holds_the_warehouse_briefly_and_restores_every_day_as_it_was(env, instance, published,
                                                                                       monkeypatch) -> None:
    """A rollback copies no line (a year's copied in one hold held the warehouse 8.2 s; in chunks, 25 holds): over
    19 days in chunks of 5, the restore takes one hold for its checks and one for the mart's rows, each of its
    holds after giving way to today's load, and every day's extract and fact rows are the earlier version's, byte
    for byte. A version stored before the store recorded where (no day_versions row) owns its rows, and is pointed
    at the same way."""
    days = [f"2026-09-{k:02d}" for k in range(1, 20)]
    published((days[0], days[-1]))
    first = _extracts(env, days)
    rows_first = state.table_rows(env, "(select * from fact.fct_order_lines order by all)")
    for day in days:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-late"}).success
    assert all((env.published_dir / f"partition={d}.json").read_bytes() != b for d, b in first.items())

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "5")
    holds: list[int] = []
    writer = Warehouse.writer

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN202 - the method it wraps
        holds.append(1)
        return writer(self, *args, **kwargs)

    monkeypatch.setattr(Warehouse, "writer", counted)
    window = Window.of(days[0], days[-1])
    targets = rollback.targets(Warehouse(), window, None)
    *_, stored = restore_candidates(Warehouse(), env.scratch_dir / "probe.duckdb", window, targets)
    assert stored == targets and len(holds) == 1 + 1, "the checks in one hold, then the mart's rows in one"
    with Warehouse().writer() as con:  # the first load's versions as an older release left them
        con.execute("create temp table t as select unnest($d::date[]) as partition_date, unnest($p) as publication_id",
                    {"d": sorted(targets), "p": [targets[d] for d in sorted(targets)]})
        con.execute("delete from audit.day_versions using t where day_versions.partition_date = t.partition_date "
                    "and day_versions.publication_id = t.publication_id")
    *_, stored = restore_candidates(Warehouse(), env.scratch_dir / "probe2.duckdb", window, targets)
    assert stored == targets

    # Like a backfill's, each of its holds first gives way to today's load (none runs here: no wait).
    gave_way: list[float] = []
    real_give_way = capacity.GiveWay.__call__
    monkeypatch.setattr(capacity.GiveWay, "__call__", lambda self: gave_way.append(real_give_way(self)) or 0.0)
    assert _rollback_run(instance, days[0], days[-1], "back before the late batches").success
    assert len(gave_way) >= 3, "the restore's hold, the write ahead's and the commit's"
    assert _rows_stored_by_rollbacks(env) == 0
    assert _extracts(env, days) == first
    assert state.table_rows(env, "(select * from fact.fct_order_lines order by all)") == rows_first


def _extracts(env, days: list[str]) -> dict[str, bytes]:  # noqa: ANN001
    return {d: (env.published_dir / f"partition={d}.json").read_bytes() for d in days}


def _rows_stored_by_rollbacks(env) -> int:
    return state.table_rows(env, "(select count(*) from versions.staged_order_lines "
                                 "where publication_id like 'rol-%')")[0][0]


def _stored_as(env) -> dict[str, str]:
    return dict(state.table_rows(env, "(select partition_date::varchar, stored_as from audit.day_versions "
                                      "join audit.current_publications using (partition_date, publication_id))"))


def test_a_rollback_points_at_the_rows_the_version_store_holds_and_writes_none(env, instance, monkeypatch) -> None:
    """The version a rollback restores has its rows in the version store: the rollback's days point at them (a
    year's rollback copied 7.3 million rows into scratch and wrote them back, 8-10 s), so it writes no line, and
    every day reads byte for byte as it was. Those rows outlive the version that stored them: past retention (one
    version kept), they stay for the rollback that points at them, and a rollback back to that one reads them."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "5")
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    days = [f"2026-09-{k:02d}" for k in range(1, 13)]
    assert run_chain(instance, days[0], days[-1]).success
    first = _extracts(env, days)
    rows_first = state.table_rows(env, "(select * from fact.fct_order_lines)")
    first_stored = _stored_as(env)
    for day in days:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-late"}).success
    assert all((env.published_dir / f"partition={d}.json").read_bytes() != b for d, b in first.items())

    assert _rollback_run(instance, days[0], days[-1], "back before the late batches").success
    assert _rows_stored_by_rollbacks(env) == 0, "a rollback writes no line into the version store"
    assert _stored_as(env) == first_stored and len(first_stored) == len(days)
    assert _extracts(env, days) == first
    assert state.table_rows(env, "(select * from fact.fct_order_lines)") == rows_first

    # A later publication: the first load's is past retention (one kept before the current, the rollback's), and
    # the late batches' rows are dropped; the first load's stay, read by the rollback.
    for day in days:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-03")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-later"}).success
    assert _extracts(env, days) != first
    assert _rollback_run(instance, days[0], days[-1], "back to the rollback").success
    assert _rows_stored_by_rollbacks(env) == 0 and _stored_as(env) == first_stored
    assert _extracts(env, days) == first
    assert state.table_rows(env, "(select * from fact.fct_order_lines)") == rows_first


def test_a_rollback_to_a_version_a_publish_put_past_retention_is_refused_before_that_prune_runs(
        env, instance, monkeypatch) -> None:
    """A long publish prunes after its commit, in a hold of its own. A rollback between the two, to a version that
    commit put past retention, still found its lines, but its mart rows were gone, and the prune would drop the
    lines it then pointed at (a review's reproduction: every restored day empty). It is refused where the restore
    reads, by retention as the commit counts it, and nothing changes."""
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")  # every publish below is written ahead: its prune follows
    days = ["2026-09-18", "2026-09-19", "2026-09-20"]
    assert run_chain(instance, days[0], days[-1]).success
    [(first,)] = state.table_rows(env, "(select distinct publication_id from audit.current_publications)")
    for tag in ("02", "03"):
        for day in days:
            generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-{tag}")
        if tag == "02":
            assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-02"}).success
    deferred: list[tuple] = []
    real_prune = publish_mod._prune
    monkeypatch.setattr(publish_mod, "_prune", lambda *a: deferred.append(a))
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-03"}).success  # its prune deferred
    monkeypatch.setattr(publish_mod, "_prune", real_prune)
    assert deferred and deferred[0][1]
    before = state.snapshot(env)
    with pytest.raises(ValueError, match="past retention"):
        rollback.rollback(Warehouse(), days[0], days[-1], "back to the first load", "run-race", to_publication=first)
    assert state.snapshot(env) == before


def test_a_rollback_to_a_version_whose_fact_rows_predate_the_derived_fact_restores_them(env, capsys) -> None:
    """A release before migration 008 stored the fact's rows of each version; migrated, they are kept where the
    fact cannot be derived from staged lines. A rollback to such a version restores its fact as it was (a review
    found it published an empty fact: the rows were copied, and only staged lines are written)."""
    from atlasmart_tests.test_version_store import _release_with_stored_fact

    env.data_dir.mkdir(parents=True)
    con = _release_with_stored_fact(env.warehouse_path)
    con.execute("insert into audit.publications (seq, publication_id, partition_date, kind, published_at, changed, "
                "extract_json, rows_after) values (0, 'pub-0', '2026-09-19', 'publish', now(), true, '{}', 2)")
    con.execute("update audit.publications set prev_publication_id = 'pub-0' where publication_id = 'pub-a' "
                "and partition_date = '2026-09-19'")
    con.execute("insert into audit.version_numbers values ('pub-0', 0)")
    con.execute("insert into versions.fct_order_lines select * replace ('pub-0' as publication_id, 0 as version, "
                "gmv + 1 as gmv) from versions.fct_order_lines where partition_date = '2026-09-19'")
    con.execute("select nextval('audit.version_seq') from range(3)").fetchall()
    con.execute("select nextval('audit.publication_seq') from range(5)").fetchall()
    con.execute("update audit.publications set controls_after = '[2, 2, 6, 1, 1, 1]', sha256_after = 'x'")
    con.close()
    assert cli.main(["migrate"]) == 0
    earlier = state.table_rows(env, "(select * exclude (publication_id) from history.fct_order_lines)")
    assert len(earlier) == 2
    env.scratch_dir.mkdir(parents=True, exist_ok=True)
    rollback.rollback(Warehouse(), "2026-09-19", None, "to pub-0", "run-pre-008")
    assert state.table_rows(env, "fact.fct_order_lines", "partition_date = '2026-09-19'") == earlier


def test_a_version_past_retention_is_refused_by_the_restore_even_where_a_rollback_keeps_its_lines(
        env, instance, published, monkeypatch) -> None:
    """A version older than day_versions owns its rows; a rollback pointing at it keeps its lines past its
    retention, but not its mart rows. Rolling back to it once it is past retention is refused where the restore
    checks, before any work, as past retention (a review found it passed there and the commit refused it, naming
    a publication committed meanwhile that never was)."""
    days = ["2026-09-18", "2026-09-19"]
    # Retention set after the first load, whose cache other tests share: one version a day, it prunes nothing.
    published((days[0], days[-1]))
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    [(first,)] = state.table_rows(env, "(select distinct publication_id from audit.current_publications)")
    with Warehouse().writer() as con:  # the first load as an older release left it
        con.execute("delete from audit.day_versions where publication_id = $p", {"p": first})
    for tag in ("02", "03"):
        for day in days:
            generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-{tag}")
        assert run_chain(instance, days[0], days[-1], {"dagster/backfill": f"bf-{tag}"}).success
        if tag == "02":
            assert _rollback_run(instance, days[0], days[-1], "back to the first load").success
            assert set(_stored_as(env).values()) == {first}
    before = state.snapshot(env)
    with pytest.raises(ValueError, match="past retention"):
        rollback.rollback(Warehouse(), days[0], days[-1], "to the first load", "run-past", to_publication=first)
    assert state.snapshot(env) == before


def test_a_day_published_after_a_rollback_chose_its_targets_refuses_the_rollback(env, instance, published,
                                                                                 monkeypatch) -> None:
    """A rollback chooses its targets in one read and compares what it publishes over with what it reads next: a
    day published between the two would be rolled back past, its new version undone with nothing said (a review
    found it). It is refused, and nothing changes."""
    days = ["2026-09-18", "2026-09-19"]
    published((days[0], days[-1]))
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(days[0]), f"B-{days[0]}-02")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-02"}).success
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(days[1]), f"B-{days[1]}-03")
    real_restore = rollback.restore_candidates
    seen: list[dict] = []

    def restore_after_a_publish(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the function it wraps
        assert run_chain(instance, days[1]).success  # today's load of a day in the window, between the two reads
        seen.append(state.snapshot(env))
        return real_restore(*args, **kwargs)

    monkeypatch.setattr(rollback, "restore_candidates", restore_after_a_publish)
    with pytest.raises(PublishConflict, match="published since this rollback chose"):
        rollback.rollback(Warehouse(), days[0], days[-1], "undo bf-02", "run-moved")
    assert seen and state.snapshot(env) == seen[0]


def _stopped_cli_rollback(tmp_path, gate: str, locked: bool = False) -> tuple[str, int, str]:
    """`atlasmart rollback` of 2026-09-20 in its own process, held at `gate` (a failpoints hold) and sent SIGINT
    (Ctrl-C) there, `locked`: while this process holds the warehouse. Its run id, exit code and stderr."""
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / f"{gate}.hold").touch()
    proc = subprocess.Popen([sys.executable, "-m", "atlasmart_assets.cli", "rollback", "--from", "2026-09-20",
                             "--reason", "undo the incident"], env={**os.environ, "ATLASMART_GATE_DIR": str(gates)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not (arrived := list(gates.glob(f"*.{gate}.arrived"))):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, f"the rollback never reached {gate}"
            time.sleep(0.1)
        with contextlib.ExitStack() as stack:
            if locked:
                stack.enter_context(duckdb.connect(str(Warehouse().settings.warehouse_path)))
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return arrived[0].name.split(".")[0], proc.returncode, err


def test_a_cli_rollback_stopped_by_ctrl_c_before_its_commit_changes_nothing_and_says_so(
        env, home_instance, published, tmp_path) -> None:
    """Ctrl-C while the command works: exit 130, one line saying it was interrupted and nothing was published, the
    run failed (not left started), the scratch dropped, and the next rollback runs."""
    published(("2026-09-19", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    before = state.snapshot(env)
    run_id, code, err = _stopped_cli_rollback(tmp_path, "rollback_restored")
    last = err.strip().splitlines()[-1]
    assert code == 130 and last.startswith("atlasmart rollback: interrupted") and "nothing was published" in last, err
    assert "Traceback" not in err and run_id in last, err
    assert "publish: stopped: the run was interrupted" in err, err
    assert state.snapshot(env) == before
    assert home_instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    assert not Warehouse().scratch_path(run_id).exists()
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "undo the incident"]) == 0
    assert json.loads((env.published_dir / "partition=2026-09-20.json").read_text())["controls"][4] == 425


@pytest.mark.parametrize("gate", ["publish_committed", "rollback_committed"])
def test_a_cli_rollback_stopped_by_ctrl_c_after_its_commit_says_what_it_published(
        env, home_instance, published, tmp_path, gate: str) -> None:
    """Ctrl-C once the commit is made (before its extracts are swapped in, or while the run's events are written):
    the rollback stands, and the command names its publication instead of claiming nothing was published. Extracts
    the commit had not swapped in yet are swapped in before the command says so; a notice it had not written yet
    is said to be missing."""
    published(("2026-09-19", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    run_id, code, err = _stopped_cli_rollback(tmp_path, gate)
    last = err.strip().splitlines()[-1]
    _, _, pub_id, *_ = _rollback_row(env, "2026-09-20")
    assert code == 130 and last.startswith("atlasmart rollback: interrupted"), err
    assert f"{pub_id} was committed" in last and "nothing was published" not in last, err
    extract = json.loads((env.published_dir / "partition=2026-09-20.json").read_text())
    assert extract["controls"][4] == 425
    notice = env.notices_dir / f"{pub_id}.md"
    assert notice.exists() == (gate == "rollback_committed")
    assert ("change notice was not written" in last) == (not notice.exists()), last
    assert home_instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE


def test_a_cli_rollback_stopped_while_another_process_holds_the_warehouse_says_it_could_not_read_the_ledger(
        env, home_instance, published, tmp_path) -> None:
    """The last line's ledger read waits seconds, not the lock timeout (ATLASMART_LOCK_TIMEOUT_S, 600 s by default),
    and says what it could not read rather than guess."""
    published(("2026-09-19", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    _, code, err = _stopped_cli_rollback(tmp_path, "rollback_restored", locked=True)
    last = err.strip().splitlines()[-1]
    assert code == 130 and "could not be read (another process holds the warehouse)" in last, err
    assert "audit.publications" in last and "nothing was published" not in last, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_command_stopped_by_a_signal_exits_130_and_leaves_the_handlers_as_they_were(
        monkeypatch, capsys, signum: int) -> None:
    """Ctrl-C or SIGTERM anywhere in a command (before a rollback's run starts, say, while its definitions load):
    one line and exit 130, not a traceback; SIGTERM's handler is the caller's again afterwards."""
    before = signal.getsignal(signal.SIGTERM)

    def stopped(_args) -> int:  # noqa: ANN001
        os.kill(os.getpid(), signum)
        time.sleep(30)  # the signal interrupts the sleep
        return 0

    monkeypatch.setattr(cli, "_stale", stopped)
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's process has it
    try:
        assert cli.main(["stale"]) == 130
    finally:
        signal.signal(signal.SIGINT, interrupt)
    assert capsys.readouterr().err.strip() == "atlasmart stale: interrupted"
    assert signal.getsignal(signal.SIGTERM) is before


def test_choosing_what_to_restore_is_one_read_whatever_the_window(env, published, monkeypatch) -> None:
    """The targets of a rollback are chosen in one statement, not two point queries a day inside one hold (a year's
    rollback held the warehouse 0.41-0.44 s there, more as the ledger grows), and the choice is unchanged: each day
    one version back from what it shows, or the publication named."""
    published(("2026-09-01", "2026-09-20"), ("2026-09-18", "2026-09-20"))
    statements: list[str] = []
    reader = Warehouse.reader

    @contextlib.contextmanager
    def watched(self, *args, **kwargs):  # noqa: ANN001, ANN202 - the method it wraps
        with reader(self, *args, **kwargs) as con:
            yield Watched(con, lambda query, _: statements.append(query))

    monkeypatch.setattr(Warehouse, "reader", watched)
    window = Window.of("2026-09-01", "2026-09-20")
    with pytest.raises(ValueError, match="partition 2026-09-01 shows its first publication"):
        rollback.targets(Warehouse(), window, None)
    assert len(statements) == 1, statements
    statements.clear()
    recent = Window.of("2026-09-18", "2026-09-20")
    chosen = rollback.targets(Warehouse(), recent, None)
    assert len(statements) == 1, statements
    ledger_rows = state.table_rows(env, "(select partition_date::varchar as partition_date, publication_id, seq "
                                        "from audit.publications)",
                                   "partition_date between '2026-09-18' and '2026-09-20'")
    first = {day: pub for day, pub, seq in ledger_rows if seq == min(s for d, _, s in ledger_rows if d == day)}
    assert chosen == first, "one version back: each day's first publication"
    statements.clear()
    [named] = set(first.values())
    assert rollback.targets(Warehouse(), recent, named) == {d: named for d in recent.keys}
    with pytest.raises(ValueError, match="publication 'pub-nope' did not publish partition 2026-09-18"):
        rollback.targets(Warehouse(), recent, "pub-nope")
    assert len(statements) == 2, statements


def test_a_rollback_s_staged_events_carry_each_day_s_unresolved_customers_as_a_correction_s_do(env, instance) -> None:
    """A customer missing from the dimension: the staged events of the days it bought on count its lines as
    unresolved, after the rollback as after the correction, each day its own count as staged.order_lines shows it."""
    customers = json.loads((env.raw_dir / "customers.json").read_text())
    customers["customers"] = [c for c in customers["customers"] if c["customer_id"] != "C00003"]
    (env.raw_dir / "customers.json").write_text(json.dumps(customers))
    days = ("2026-09-18", "2026-09-19", "2026-09-20")
    assert run_chain(instance, days[0], days[-1]).success
    first = {d: _latest(instance, "staged/order_lines", d).asset_materialization.metadata for d in days}
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-again",
                                                   "atlasmart/rederive": "a second version"}).success
    result = _rollback_run(instance, days[0], days[-1], "back to the first version")
    assert result.success
    truth = dict(state.table_rows(env, "(select partition_date::varchar as d, count(*) filter (where tier = 'unknown') "
                                       "as n from staged.order_lines group by all)", "true"))
    assert any(truth.values()), truth  # the customer bought on some day of the window
    for day in days:
        record = _latest(instance, "staged/order_lines", day)
        assert record.run_id == result.run_id
        meta = record.asset_materialization.metadata
        assert meta["unresolved_customers"].value == truth.get(day, 0) == first[day]["unresolved_customers"].value, day
        assert meta["dagster/row_count"].value == first[day]["dagster/row_count"].value, day


def _rollback_job() -> dg.JobDefinition:
    return defs.resolve_job_def("rollback_job")


def test_a_retried_rollback_that_committed_before_it_failed_steps_back_once_and_writes_its_events(
        env, monkeypatch) -> None:
    """A rollback commits, then fails writing its events; re-executed from that failure (the UI's "Re-execute"), it
    must not step back a second version (a review found v3 -> v2, then v2 -> v1): it finds the publication its
    earlier attempt committed and writes that one's events."""
    day = "2026-09-20"
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, day)
        [(v2,)] = state.table_rows(env, "(select prev_publication_id from audit.current_publications "
                                        f"where partition_date = '{day}')")
        retries.fail_once(monkeypatch, day_metadata, "fact")
        config = {"ops": {"rollback_range": {"config": {"start": day, "reason": "undo the third version"}}}}
        first = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=config, raise_on_error=False)
        assert not first.success
        [(pub, restored)] = state.table_rows(env, "(select publication_id, restored_from from audit."
                                                  f"current_publications where partition_date = '{day}')")
        assert restored == v2, "the first attempt committed its rollback"
        retry = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                               reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, inst))
        assert retry.success
        now = state.table_rows(env, "(select publication_id, restored_from from audit.current_publications "
                                    f"where partition_date = '{day}')")
        assert now == [(pub, v2)], "the retry rolled nothing back again"
        for asset in ASSETS:
            record = _latest(inst, asset, day)
            assert record.run_id == retry.run_id, asset
            meta = record.asset_materialization.metadata
            assert meta["publication_id"].value == pub and meta["restored_from"].value == v2, (asset, meta)
        assert _latest(inst, "fact/fct_order_lines", day).asset_materialization.metadata["changed"].value is True


# Re-executions with another config, which a review found restoring nothing or refused with false reasons.

def _current(env, day: str):  # noqa: ANN001, ANN202
    return state.table_rows(env, "(select partition_date::varchar as d, publication_id, prev_publication_id, "
                                 "restored_from, run_id from audit.current_publications)", f"d = '{day}'")[0][1:]


# Per test process and day: a raw and a data directory holding three published versions of the day.
_VERSIONS: dict[str, Path] = {}


def _three_versions(env, inst, day: str):  # noqa: ANN001, ANN202
    """Three versions of `day`, each of other content (a late batch with one more line), published by the backfills
    bf-v0..bf-v2: built once per test process, then copied (runs of `inst` are not needed by the tests after)."""
    if day not in _VERSIONS:
        for k in range(3):
            if k:
                generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-0{k + 1}", new=1,
                                    restate=0, retract=0, seed=k)
            assert run_chain(inst, day, day, {"dagster/backfill": f"bf-v{k}"}).success
        cache = Path(tempfile.mkdtemp(prefix="atlasmart-three-versions-"))
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        shutil.copytree(env.raw_dir, cache / "raw")
        shutil.copytree(env.data_dir, cache / "data", symlinks=True)
        _VERSIONS[day] = cache
        return
    shutil.rmtree(env.raw_dir)
    shutil.copytree(_VERSIONS[day] / "raw", env.raw_dir)
    shutil.copytree(_VERSIONS[day] / "data", env.data_dir, symlinks=True)


def test_a_rollback_re_executed_with_another_target_restores_that_target(env, monkeypatch) -> None:
    """A rollback commits (v3 -> v2), fails writing its events, and is re-executed with another config (to v1):
    that is another rollback, which restores v1 (a review found the retry took the first attempt's commit for its
    own and restored nothing, reporting success)."""
    day = "2026-09-20"
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, day)
        v3, v2 = _current(env, day)[:2]
        v1 = state.table_rows(env, "(select partition_date::varchar as d, prev_publication_id, publication_id "
                                   "from audit.publications)", f"d = '{day}' and publication_id = '{v2}'")[0][1]
        retries.fail_once(monkeypatch, day_metadata, "fact")
        config = {"ops": {"rollback_range": {"config": {"start": day, "reason": "undo v3"}}}}
        first = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=config, raise_on_error=False)
        assert not first.success and _current(env, day)[2] == v2
        config_v1 = {"ops": {"rollback_range": {"config": {"start": day, "reason": "back to v1",
                                                           "to_publication": v1}}}}
        retry = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=config_v1, raise_on_error=False,
                               reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, inst))
        assert inst.get_run_by_id(retry.run_id).run_config == config_v1
        assert retry.success and _current(env, day)[2] == v1, (retry.success, _current(env, day), v1, v2)


def test_a_rollback_re_executed_with_a_wider_window_is_another_rollback(env, monkeypatch) -> None:
    """A rollback of one day commits, fails writing its events, and is re-executed over two days: another
    rollback, never refused with "published since" for a day nothing published (a review found that refusal)."""
    with dg.instance_for_test() as inst:
        for k, bf in enumerate(("bf-a", "bf-b")):
            if k:
                for d in ("2026-09-19", "2026-09-20"):
                    generate.late_delta(env.raw_dir, dt.date.fromisoformat(d), f"B-{d}-02", new=1, restate=0,
                                        retract=0)
            assert run_chain(inst, "2026-09-19", "2026-09-20", {"dagster/backfill": bf}).success
        seq_before = state.table_rows(env, "(select max(seq) as s from audit.publications)", "true")
        retries.fail_once(monkeypatch, day_metadata, "fact")
        config = {"ops": {"rollback_range": {"config": {"start": "2026-09-20", "reason": "undo"}}}}
        first = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=config, raise_on_error=False)
        assert not first.success
        wider = {"ops": {"rollback_range": {"config": {"start": "2026-09-19", "end": "2026-09-20",
                                                       "reason": "undo both"}}}}
        retry = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=wider, raise_on_error=False,
                               reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, inst))
        text = " ".join(state.failure_causes(retry))
        published_since = state.table_rows(env, "(select partition_date::varchar as d, seq from audit.publications)",
                                           "d = '2026-09-19' and seq > " + str(seq_before[0][0]))
        assert published_since == []
        assert "2026-09-19 (1 day) were published since" not in text, text
        # Another rollback: 2026-09-20 shows its first publication (the first attempt restored it).
        assert "partition 2026-09-20 shows its first publication" in text, text


def _v1(env, v2: str) -> str:  # noqa: ANN001
    return state.table_rows(env, "(select partition_date::varchar as d, prev_publication_id, publication_id "
                                 "from audit.publications)", f"publication_id = '{v2}'")[0][1]


def _rollbacks(env) -> int:  # noqa: ANN001
    return state.table_rows(env, "(select count(distinct publication_id) as n from audit.publications "
                                 "where kind = 'rollback')")[0][0]


@pytest.mark.parametrize("edited", [{"reason": "undo v3 (retry)"}, {"end": "2026-09-20"}, {"end": None}],
                         ids=["reason", "end", "null"])
def test_a_rollback_re_executed_with_the_same_window_and_target_written_otherwise_steps_back_once(
        env, monkeypatch, edited) -> None:
    """Another reason, or the end written out or null: the same rollback, which its retry finds committed (a review
    found whole run configs compared, and the retry stepping back a second version)."""
    day = "2026-09-20"
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, day)
        v2 = _current(env, day)[1]
        retries.fail_once(monkeypatch, day_metadata, "fact")
        config = {"start": day, "reason": "undo v3"}
        first = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                               run_config={"ops": {"rollback_range": {"config": config}}})
        assert not first.success and _current(env, day)[2] == v2
        retry = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                               run_config={"ops": {"rollback_range": {"config": {**config, **edited}}}},
                               reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, inst))
        assert retry.success and (_rollbacks(env), _current(env, day)[2]) == (1, v2)


def test_a_succeeded_retry_of_a_rollback_re_executed_is_another_rollback_and_announced_each_time(
        env, monkeypatch) -> None:
    """A1 commits (v3 -> v2) and fails; A2, its retry, writes A1's events and succeeds; A3 re-executes A2: a run
    that succeeded settled its attempts, so A3 steps back once more (v1). The lifecycle sensor announces A2 with A1's
    restored days, and A3 with its own (a review found A3 restoring nothing, and A2 announced as "Rolled back
    nothing")."""
    from atlasmart_assets.alerts import lifecycle
    from atlasmart_assets.alerts.slack import AtlasSlack

    day = "2026-09-20"
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, day)
        v2 = _current(env, day)[1]
        v1 = _v1(env, v2)
        retries.fail_once(monkeypatch, day_metadata, "fact")
        config = {"ops": {"rollback_range": {"config": {"start": day, "reason": "undo"}}}}
        a1 = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=config, raise_on_error=False)
        a2 = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                            reexecution_options=dg.ReexecutionOptions.from_failure(a1.run_id, inst))
        assert not a1.success and a2.success and _current(env, day)[2] == v2
        a3 = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                            reexecution_options=dg.ReexecutionOptions(parent_run_id=a2.run_id))
        assert a3.success and _current(env, day)[2] == v1 and _rollbacks(env) == 2
        slack = AtlasSlack(token="xoxb-test", ui_base_url="http://ui.test")
        context = dg.build_sensor_context(instance=inst, definitions=defs,
                                          resources={"slack": slack, "warehouse": Warehouse()})
        done = {"backfills": {f"bf-v{k}": {"ts": None, "done": True} for k in range(3)}}  # announced before
        told = {n.key: " ".join(m.text for m in n.messages) for n in lifecycle._notices(context, slack, done)}
        assert set(told) == {f"rollback:{a2.run_id}", f"rollback:{a3.run_id}"}, told
        assert all("Rolled back nothing" not in text and day in text for text in told.values()), told


def test_a_rollback_reaching_the_newest_partition_from_an_earlier_day_is_fenced(env, instance, published,
                                                                               capsys) -> None:
    """The newest partition is the current lane's: a rollback of 2026-09-20..21 is refused before anything moves,
    as a backfill's window is, unless it carries an override reason (then recorded in the ledger); the newest day
    alone may be rolled back. A review found a rollback moved the newest partition with no override."""
    published(("2026-09-20", None), ("2026-09-21", None),
              ("2026-09-20", "2026-09-20", {"dagster/backfill": "bf-again"}), ("2026-09-21", None))
    assert run_chain(instance, "2026-09-21").success
    before = state.snapshot(env)
    capsys.readouterr()
    assert cli.main(["rollback", "--from", "2026-09-20", "--to", "2026-09-21", "--reason", "undo"]) == 2
    err = capsys.readouterr().err
    assert "Refused: rollback over 2026-09-20..2026-09-21 includes 2026-09-21" in err and "--fence-override" in err, err
    assert state.snapshot(env) == before
    assert cli.main(["rollback", "--from", "2026-09-20", "--to", "2026-09-21", "--reason", "undo",
                     "--fence-override", "today's load was wrong too"]) == 0
    assert [r[0] for r in state.table_rows(env, "(select fence_override, kind from audit.publications)",
                                           "kind = 'rollback'")] == ["today's load was wrong too"] * 2
    assert cli.main(["rollback", "--from", "2026-09-21", "--reason", "the newest alone"]) == 0


@pytest.mark.parametrize("flag", ["--fence-override", "--requested-by"])
def test_a_rollback_whose_override_or_who_asked_is_too_long_to_record_is_refused_before_anything_moves(
        env, published, capsys, flag) -> None:
    """A rollback's override and who asked go into every restored day's ledger row and its notice, as a backfill's
    do: past REASON_MAX_CHARS it is refused before anything moves (a review found 260,003 characters stored twice)."""
    from atlasmart_assets.contract import REASON_MAX_CHARS
    published(("2026-09-20", None), ("2026-09-21", None),
              ("2026-09-20", "2026-09-20", {"dagster/backfill": "bf-again"}), ("2026-09-21", None))
    before = state.snapshot(env)
    value = "see incident " * 20_000 + "end"
    capsys.readouterr()
    code = cli.main(["rollback", "--from", "2026-09-20", "--to", "2026-09-21", "--reason", "undo",
                     "--fence-override", value if flag == "--fence-override" else "today's load was wrong too",
                     *([flag, value] if flag == "--requested-by" else [])])
    err = capsys.readouterr().err
    assert code == 2 and f"past the {REASON_MAX_CHARS:,}" in err, err
    assert state.snapshot(env) == before


def test_re_runs_with_nothing_new_keep_the_version_before_a_correction_within_reach(env, instance, published,
                                                                                     monkeypatch) -> None:
    """A re-run that keeps every day as published is a version with its predecessor's content. Counted as versions
    alone, three such re-runs at ATLASMART_RETAIN_VERSIONS=1 put the version before a correction past a rollback's
    reach (a review found ten did at the default). Retention also keeps the newest version of each of the newest
    contents, so the version the correction replaced stays restorable; and a day never holds more than twice the
    versions it did."""
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    days = ["2026-09-18", "2026-09-19"]
    published((days[0], days[-1]))
    before = _extracts(env, days)
    [(first,)] = state.table_rows(env, "(select distinct publication_id from audit.current_publications)")
    for day in days:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-late"}).success
    corrected = _extracts(env, days)
    assert corrected != before
    for k in range(3):
        assert run_chain(instance, days[0], days[-1], {"dagster/backfill": f"bf-again-{k}"}).success
        assert _extracts(env, days) == corrected
    readable = state.table_rows(env, "(select partition_date, count(*) from audit.ledger_versions group by 1)")
    assert readable and all(n <= 2 * 2 for _, n in readable), readable

    assert cli.main(["rollback", "--from", days[0], "--to", days[-1], "--reason", "back before the correction",
                     "--to-publication", first]) == 0, "the version before the correction is within reach, by name"
    assert _extracts(env, days) == before
    assert cli.main(["rollback", "--from", days[0], "--to", days[-1], "--reason", "back to the newest re-run",
                     "--to-publication", _newest(env, days[0], kind="publish")]) == 0
    assert _extracts(env, days) == corrected


def _newest(env, day: str, kind: str) -> str:  # noqa: ANN001
    """The newest publication of `kind` of the day."""
    [(pub,)] = state.table_rows(env, f"(select arg_max(publication_id, seq) from audit.publications "
                                     f"where partition_date = '{day}' and kind = '{kind}')")
    return pub


def test_a_version_retention_let_go_is_restored_from_a_kept_version_of_its_content(env, instance, published,
                                                                                    monkeypatch) -> None:
    """The first load, two re-runs that kept it, then a correction: at ATLASMART_RETAIN_VERSIONS=1 the first load's
    own version is let go (the correction and the newest re-run are kept), but its content is not. A rollback to
    it by name reads the kept re-run's rows and mart figures, writes no line, and records the version named."""
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    days = ["2026-09-18", "2026-09-19"]
    published((days[0], days[-1]))
    before = _extracts(env, days)
    rows_before = state.table_rows(env, "(select * from fact.fct_order_lines)")
    [(first,)] = state.table_rows(env, "(select distinct publication_id from audit.current_publications)")
    for k in range(2):
        assert run_chain(instance, days[0], days[-1], {"dagster/backfill": f"bf-again-{k}"}).success
    for day in days:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-late"}).success
    assert _extracts(env, days) != before
    assert state.table_rows(env, "history.fct_order_lines", f"publication_id = '{first}'") == [], \
        "the first load's own version is past retention"

    assert cli.main(["rollback", "--from", days[0], "--to", days[-1], "--reason", "back to the first load",
                     "--to-publication", first]) == 0
    assert _extracts(env, days) == before
    assert state.table_rows(env, "(select * from fact.fct_order_lines)") == rows_before
    assert _rows_stored_by_rollbacks(env) == 0, "a rollback writes no line into the version store"
    restored_from = {r[4] for d in days for r in _ledger(env, d) if r[1] == "rollback"}
    assert restored_from == {first}, "restored_from: the one named"


@pytest.mark.parametrize("named", ["first load", "re-run", "re-run, of another DuckDB release"])
def test_mart_rows_changed_behind_the_ledger_are_never_restored(env, instance, published, monkeypatch,
                                                                named: str) -> None:
    """A mart changed behind the ledger while a re-run is current goes into history as it is when a correction
    supersedes it. A rollback to that re-run, or to the first load whose own rows retention let go (restored from
    the re-run's, of the same content), would publish those figures under an extract saying otherwise (a review
    did: the figures plus 1,000), whatever release stored the version. Refused, and nothing changes."""
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    days = ["2026-09-18", "2026-09-19"]
    published((days[0], days[-1]))
    [(first,)] = state.table_rows(env, "(select distinct publication_id from audit.current_publications)")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-again"}).success
    rerun = _newest(env, days[0], kind="publish")
    with duckdb.connect(str(env.warehouse_path)) as con:
        con.execute(f"update mart.revenue_daily set gmv = gmv + 1000 where partition_date = '{days[0]}'")
        if "another" in named:  # stored before a DuckDB upgrade: its fingerprint names the release before
            con.execute("update audit.day_versions set fingerprint = replace(fingerprint, 'duckdb ', 'duckdb 0.')")
    for day in days:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02")
    assert run_chain(instance, days[0], days[-1], {"dagster/backfill": "bf-late"}).success
    snapshot = state.snapshot(env)
    target = first if named == "first load" else rerun
    with pytest.raises(ValueError, match=f"mart rows kept of the versions to restore of {days[0]} .*differ from what "
                                         "their extracts published"):
        rollback.rollback(Warehouse(), days[0], days[-1], "back", "run-tampered", to_publication=target)
    assert state.snapshot(env) == snapshot
