"""Each audit passes on good data and fails on a crafted candidate; a failed audit publishes nothing."""
import contextlib

import json
import os
import threading
import time

import dagster as dg
import duckdb
import pytest

from atlasmart_assets import audits, candidates, capacity, correction
from atlasmart_assets.checks.published import CHECKED, FACT_UNIQUE, MART_MATCHES, published_checks
from atlasmart_assets.correction import (
    CANDIDATE_UNIQUE,
    CONTROLS_MATCH_RAW,
    MART_MATCHES_FACT,
    ROW_DELTA,
    STAGED_UNIQUE,
    UNIQUE_ACROSS_DAYS,
    correct,
)
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo, RunScope
from atlasmart_assets.warehouse import connection
from atlasmart_assets.warehouse.publish import PublishConflict
from atlasmart_assets.window import Window
from atlasmart_tests import state
from atlasmart_tests.current_runs import running_current_run, until_written

DAY = "2026-09-19"


def test_row_count_unchanged_is_one_property() -> None:
    first = audits.row_count_unchanged("c", ("a",), {"d": 10}, {})
    same = audits.row_count_unchanged("c", ("a",), {"d": 10}, {"d": 10})
    grew = audits.row_count_unchanged("c", ("a",), {"d": 11}, {"d": 10})
    assert first.passed and same.passed
    assert not grew.passed and grew.severity == audits.WARN and not grew.blocks


def test_row_delta_within_bounds_is_one_property() -> None:
    def bounded(after: int, before: int | None, accept: str | None = None) -> audits.Audit:
        return audits.row_delta_within_bounds("c", ("a",), {"d": after}, {"d": before} if before else {}, 0.2, accept)

    assert bounded(10, None).passed and bounded(11, 10).passed and bounded(9, 10).passed
    assert bounded(11, 10).severity == audits.ERROR, "a change within bounds passes the ERROR check"
    assert bounded(20, 10).blocks and "doubled" in bounded(20, 10).description
    assert bounded(7, 10).blocks and "shrank" in bounded(7, 10).description
    assert "atlasmart/accept_shrink" in bounded(7, 10).description
    accepted = bounded(7, 10, "source retracted 3 test orders")
    assert accepted.passed and "source retracted" in accepted.description
    assert bounded(20, 10, "any reason").blocks, "accepting a shrink never accepts a doubling"
    # A day that doubles with landing batches its version did not read grew as its source says (controls_match
    # checks it against the latest batch's controls); with the same batches a doubling is the build's own.
    grew = audits.row_delta_within_bounds("c", ("a",), {"d": 20, "e": 20}, {"d": 10, "e": 10}, 0.2,
                                          new_batches={"d"})
    assert grew.blocks and "e doubled" in grew.description and "d doubled" not in grew.description, grew.description
    grew = audits.row_delta_within_bounds("c", ("a",), {"d": 20, "e": 7}, {"d": 10, "e": 10}, 0.2, "retracted",
                                          new_batches={"d"})
    assert grew.passed and "grew with landing batches" in grew.description and "shrink accepted" in grew.description
    assert grew.figures["grew_with_new_landing_batches"] == ["d"] and grew.figures["accepted_shrink"] == "retracted"


CRAFTS = {
    "duplicated_staged_line": ("insert into candidate.staged_order_lines select * from candidate.staged_order_lines "
                               "limit 1", {STAGED_UNIQUE, CANDIDATE_UNIQUE}),
    "doubled_partition": ("insert into candidate.staged_order_lines select * replace (line_id || '-copy' as line_id) "
                          "from candidate.staged_order_lines", {ROW_DELTA}),
    "shrunk_partition": ("delete from candidate.staged_order_lines where line_id in (select line_id from "
                         "candidate.staged_order_lines order by line_id limit 6)", {ROW_DELTA}),
    "control_mismatch": ("update candidate.staged_order_lines set quantity = quantity + 1 where line_id = "
                         "(select min(line_id) from candidate.staged_order_lines)", {CONTROLS_MATCH_RAW}),
    # A line id the published 2026-09-18 holds, outside the candidate's window.
    "line_id_published_on_another_day": ("update candidate.staged_order_lines set line_id = '2026-09-18-L000001' "
                                         "where line_id = (select min(line_id) from candidate.staged_order_lines)",
                                         {UNIQUE_ACROSS_DAYS}),
}


def _scope(run_id: str, window: Window, backfill: str | None = None) -> RunScope:
    return RunScope(window, RunInfo(run_id, backfill), "backfill" if backfill else "other", "2026-09-21", None)


def _craft(sql_text: str):  # noqa: ANN202
    return lambda con: con.execute(sql_text)


@pytest.mark.parametrize("craft", sorted(CRAFTS))
def test_crafted_candidate_fails_its_audit_and_publishes_nothing(env, published, craft) -> None:
    published(("2026-09-18", "2026-09-20"))
    before = state.snapshot(env)
    run_id = f"crafted-{craft}"
    outcome = correct(Warehouse(), _scope(run_id, Window.of(DAY), "bf-crafted"), lambda _: True,
                      adjust_staged=_craft(CRAFTS[craft][0]))

    failed = {a.check for a in outcome.audits if a.blocks}
    assert CRAFTS[craft][1] <= failed, outcome.audits
    assert outcome.publication is None
    # Staged, fact, mart, the ledger and the extracts: byte-identical after a refused fact-level audit.
    assert state.snapshot(env) == before
    with Warehouse().reader() as con:
        assert con.execute("select count(*) from audit.corrections_in_progress").fetchone()[0] == 0


def test_a_line_id_on_two_days_of_the_window_is_refused_naming_both(env, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    before = state.snapshot(env)
    craft = ("update candidate.staged_order_lines set line_id = '2026-09-18-L000002' where line_id = "
             "'2026-09-19-L000003'")
    outcome = correct(Warehouse(), _scope("crafted-window", Window.of("2026-09-18", "2026-09-20"), "bf-crafted"),
                      lambda _: True, adjust_staged=_craft(craft))
    [audit] = [a for a in outcome.audits if a.check == UNIQUE_ACROSS_DAYS]
    assert not audit.passed and audit.blocks and outcome.publication is None
    assert audit.figures["line_ids_on_other_days"] == {"2026-09-18": ["2026-09-18-L000002"],
                                                        "2026-09-19": ["2026-09-18-L000002"]}
    assert state.snapshot(env) == before


def test_repeated_line_ids_are_counted_per_day_for_each_audit(env, published) -> None:
    """One pass finds every repeated line id: each day's count of lines repeating one of its line ids (staged and
    fact; a line without a line id counts too), and a line id on two days, even where it also repeats within a
    day."""
    published(("2026-09-18", "2026-09-20"))
    craft = ("insert into candidate.staged_order_lines select * from candidate.staged_order_lines "
             "where line_id = '2026-09-19-L000003'; "
             "insert into candidate.staged_order_lines select * from candidate.staged_order_lines "
             "where line_id = '2026-09-19-L000003'; "  # 4 copies: 3 repeats
             "insert into candidate.staged_order_lines select * replace (date '2026-09-18' as partition_date) "
             "from candidate.staged_order_lines where line_id in ('2026-09-20-L0002', '2026-09-19-L000007'); "
             "insert into candidate.staged_order_lines select * from candidate.staged_order_lines "
             "where line_id = '2026-09-19-L000007' and partition_date = '2026-09-19'; "  # and 1 more
             # A line without a line id repeats none, yet is no unique line: counted, as count(distinct) counts it.
             "insert into candidate.staged_order_lines select * replace (null as line_id) "
             "from candidate.staged_order_lines where line_id = '2026-09-18-L000004'")
    outcome = correct(Warehouse(), _scope("crafted-repeats", Window.of("2026-09-18", "2026-09-20"), "bf-crafted"),
                      lambda _: True, adjust_staged=_craft(craft))
    by_check = {a.check: a for a in outcome.audits}
    for check in (STAGED_UNIQUE, CANDIDATE_UNIQUE):
        assert by_check[check].blocks
        assert by_check[check].figures["duplicate_line_ids"] == {"2026-09-18": 1, "2026-09-19": 4,
                                                                 "2026-09-20": 0}
    assert by_check[UNIQUE_ACROSS_DAYS].figures["line_ids_on_other_days"] == {
        "2026-09-18": ["2026-09-19-L000007", "2026-09-20-L0002"],
        "2026-09-19": ["2026-09-19-L000007", "2026-09-19-L000007"],
        "2026-09-20": ["2026-09-20-L0002"]}
    assert outcome.publication is None


class _RecordedGiveWay:
    def __init__(self, events: list[str]) -> None:
        self.events = events

    def __call__(self) -> float:
        self.events.append("give way")
        return 0.0

    def busy(self, unreadable: bool = False) -> bool:
        return False


# A window of several chunks, by days or by lines (the days hold 12 lines each): a long backfill's holds give way.
@pytest.mark.parametrize("chunks", [{"ATLASMART_CHUNK_DAYS": "1"}, {"ATLASMART_CHUNK_LINES": "13"}],
                         ids=["by-days", "by-lines"])
def test_the_cross_day_line_id_pass_is_scratch_work_after_a_hold_that_gives_way(env, published, instance, tmp_path,
                                                                                monkeypatch, chunks) -> None:
    """A backfill's search of the published fact for its line ids is a warehouse hold like any other: taken after
    giving way to today's load. The pass over the window's line ids that follows (a year's 7.3 M) is scratch work,
    in the paused, lowered child, not in the step's own process beside today's load."""
    published(("2026-09-18", "2026-09-20"))
    for name, value in chunks.items():
        monkeypatch.setenv(name, value)
    events: list[str] = []
    real_wait = connection.waiting_on_lock
    monkeypatch.setattr(connection, "waiting_on_lock", lambda *a, **k: events.append("lock") or real_wait(*a, **k))
    real_hold = correction.attached_hold

    @contextlib.contextmanager
    def hold(*args, **kwargs):  # noqa: ANN202
        events.append("cross-day hold")
        with real_hold(*args, **kwargs) as con:
            yield con

    monkeypatch.setattr(correction, "attached_hold", hold)
    pids = tmp_path / "pids"
    real_pass = correction._repeats_in_scratch

    def recorded_pass(*args):  # noqa: ANN202
        with pids.open("a") as fh:
            fh.write(f"{os.getpid()}\n")
        return real_pass(*args)

    monkeypatch.setattr(correction, "_repeats_in_scratch", recorded_pass)
    craft = CRAFTS["line_id_published_on_another_day"][0]
    window = Window.of(DAY, "2026-09-20")
    outcome = correct(Warehouse(), _scope("repeats-lowered", window, "bf-lowered"), lambda _: True,
                      adjust_staged=_craft(craft), give_way=_RecordedGiveWay(events),
                      lowered=capacity.Lowered(0, instance, 1, max_pause_s=60))
    at = events.index("cross-day hold")
    assert events[at - 1] == "give way" and events[at + 1] == "lock", events
    assert [int(pid) for pid in pids.read_text().split()] != [os.getpid()], "the pass ran in the step's process"
    across = {a.check: a for a in outcome.audits}[UNIQUE_ACROSS_DAYS]
    assert across.blocks and across.figures["line_ids_on_other_days"] == {DAY: ["2026-09-18-L000001"]}
    assert outcome.publication is None


def test_good_candidate_passes_every_audit(env, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    outcome = correct(Warehouse(), _scope("good", Window.of(DAY)), lambda _: True)
    assert all(a.passed for a in outcome.audits), outcome.audits
    assert {a.check for a in outcome.audits} >= {STAGED_UNIQUE, CANDIDATE_UNIQUE, MART_MATCHES_FACT}
    assert outcome.publication is not None and outcome.publication.changed == []


def _check(result, name):
    [evaluation] = [e for e in result.get_asset_check_evaluations() if e.check_name == name]
    return evaluation


def test_old_shape_file_fails_required_fields(env, instance, published) -> None:
    published(("2026-09-18", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    doc = json.loads(path.read_text())
    doc["manifest"]["schema_version"] = 1
    for line in doc["lines"]:
        line["cost"] = line.pop("unit_cost")  # the old payload named it differently
    path.write_text(json.dumps(doc))
    result = run_chain(instance, DAY)
    assert not result.success
    evaluation = _check(result, "raw_order_lines_required_fields_present")
    assert not evaluation.passed and "lack unit_cost" in evaluation.description
    assert state.snapshot(env) == before


def test_mutated_raw_fails_loudly(env, instance, published) -> None:
    published((DAY, None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    path.write_text(path.read_text().replace('"records"', ' "records"'))  # same data, different bytes
    result = run_chain(instance, DAY)
    assert not result.success
    evaluation = _check(result, "raw_order_lines_sha256_unchanged")
    assert not evaluation.passed and "never rewritten in place" in evaluation.description
    assert state.snapshot(env) == before
    # The run's log ends the step's progress with the refusal, not with an estimate of work that will not happen.
    [last] = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message.startswith("raw ")
              and "] profile:" in e.user_message and "refused by" in e.user_message]
    assert "raw_order_lines_sha256_unchanged" in last and last.endswith("ended"), last


@pytest.mark.parametrize("chunk_days", [31, 1])
def test_published_checks_catch_another_writer(env, published, monkeypatch, chunk_days) -> None:
    """Also when the checks read the window a chunk at a time (a year's check does, to keep today's load in)."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", str(chunk_days))
    published(("2026-09-18", "2026-09-20"))
    window = Window.of("2026-09-18", "2026-09-20")
    wh = Warehouse()
    assert all(a.passed for a in published_checks(wh, window))
    with wh.writer() as con:
        # Another writer adds a row to the version the ledger points at (the published fact is a view of it).
        con.execute("insert into versions.staged_order_lines select * from versions.staged_order_lines "
                    "semi join audit.current_publications using (partition_date, publication_id) "
                    "where partition_date = '2026-09-19' limit 1")
        con.execute("update mart.revenue_daily set gmv = gmv + 1 where partition_date = '2026-09-20'")
    dup, drift = published_checks(wh, window)
    assert (dup.check, drift.check) == (FACT_UNIQUE, MART_MATCHES)
    assert dup.blocks and dup.figures["duplicate_line_ids"]["2026-09-19"] == 1
    assert drift.blocks and "2026-09-20" in drift.figures["mismatches"]


def _check_only(*checks: str):
    """The daily job with no asset, only the named published checks (the UI's "Execute" on a check)."""
    from atlasmart_assets.definitions import defs  # loading it runs recovery: under the test's env, not at import

    keys = {dg.AssetCheckKey(dg.AssetKey(list(CHECKED[c])), c) for c in checks}
    return defs.resolve_job_def("atlasmart_daily").get_subset(asset_selection=set(), asset_check_selection=keys)


def test_the_published_checks_are_one_step_and_either_runs_alone(env, instance, published, monkeypatch) -> None:
    """Both published checks come from one step that reads the published fact once per chunk for both, and each
    can still be run on its own (a check-only run from the UI): it then reads only what it needs."""
    result = run_chain(instance, DAY)
    assert result.success
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert evaluations[FACT_UNIQUE].passed and evaluations[MART_MATCHES].passed
    steps = {e.step_key for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
             and e.event_specific_data.check_name in (FACT_UNIQUE, MART_MATCHES)}
    assert steps == {"published_tables_checks"}

    reads: list[tuple[str, str | None]] = []
    controls = candidates.controls
    monkeypatch.setattr(candidates, "controls", lambda con, relation, *a, **k: reads.append((relation, k.get("query")))
                        or controls(con, relation, *a, **k))
    fact, mart = "fact.fct_order_lines", "mart.revenue_daily"
    for checks, expected in (((FACT_UNIQUE, MART_MATCHES), [(fact, "published_fact_figures"), (mart, None)]),
                             ((FACT_UNIQUE,), [(fact, "fact_duplicates")]),
                             ((MART_MATCHES,), [(fact, "fact_controls"), (mart, None)])):
        reads.clear()
        got = _check_only(*checks).execute_in_process(partition_key=DAY, instance=instance, raise_on_error=False)
        assert got.success
        assert sorted(e.check_name for e in got.get_asset_check_evaluations()) == sorted(checks)
        assert all(e.passed for e in got.get_asset_check_evaluations())
        assert reads == expected, checks


def test_a_published_check_that_can_read_reports_when_the_other_cannot(env, instance, published,
                                                                         monkeypatch) -> None:
    """The mart cannot be read (not a lock: a broken table, say): the step fails, naming that error, and the
    uniqueness check, whose fact can still be read, reports all the same."""
    published((DAY, None))
    controls = candidates.controls

    def broken_mart(con, relation, *args, **kwargs):
        if relation == "mart.revenue_daily":
            raise duckdb.CatalogException("Catalog Error: Table with name revenue_daily does not exist!")
        return controls(con, relation, *args, **kwargs)

    monkeypatch.setattr(candidates, "controls", broken_mart)
    got = _check_only(FACT_UNIQUE, MART_MATCHES).execute_in_process(partition_key=DAY, instance=instance,
                                                                     raise_on_error=False)
    assert not got.success
    [evaluation] = got.get_asset_check_evaluations()
    assert evaluation.check_name == FACT_UNIQUE and evaluation.passed
    [failure] = [e for e in got.all_events if e.event_type_value == "STEP_FAILURE"]
    error = failure.step_failure_data.error
    assert "revenue_daily does not exist" in error.message + (error.cause.message if error.cause else "")


def test_the_published_fact_figures_are_the_controls_and_the_duplicates_in_one_pass(env, published) -> None:
    """published_fact_figures.sql gives, per day, exactly fact_controls.sql's figures and fact_duplicates.sql's
    count: a control added to one and not the other fails here, not as a mismatch on every published day."""
    published(("2026-09-18", "2026-09-20"))
    window = Window.of("2026-09-18", "2026-09-20")
    with Warehouse().writer() as con:
        # A repeated line (as another writer would leave it), so the duplicates are not all zero.
        con.execute("insert into versions.staged_order_lines select * from versions.staged_order_lines "
                    "semi join audit.current_publications using (partition_date, publication_id) "
                    "where partition_date = '2026-09-19' limit 1")
    with Warehouse().reader() as con:
        both = candidates.controls(con, "fact.fct_order_lines", window, query="published_fact_figures")
        figures = candidates.controls(con, "fact.fct_order_lines", window)
        duplicates = candidates.controls(con, "fact.fct_order_lines", window, query="fact_duplicates")
    assert set(both) == set(window.keys)
    assert both == {d: {**figures[d], **duplicates[d]} for d in window.keys}
    assert both["2026-09-19"]["duplicate_line_ids"] == 1


def test_a_backfills_published_checks_read_no_chunk_while_todays_load_runs(env, published, instance,
                                                                             monkeypatch) -> None:
    """A year's published checks read a chunk at a time; a backfill's read none while a current-lane run is queued
    or running (they would take the cores today's load works on), and read them all once it has ended."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")
    published(("2026-09-18", "2026-09-20"))
    reads: list[float] = []
    controls = candidates.controls

    def timed(*args, **kwargs):
        reads.append(time.monotonic())
        return controls(*args, **kwargs)

    monkeypatch.setattr(candidates, "controls", timed)
    run = running_current_run(instance)
    ended: list[float] = []

    def end() -> None:
        ended.append(time.monotonic())
        until_written(lambda: instance.report_run_failed(run))

    timer = threading.Timer(1.0, end)
    timer.start()
    try:
        window, wh = Window.of("2026-09-18", "2026-09-20"), Warehouse()
        verdicts = published_checks(wh, window, capacity.GiveWay(instance, max_s=60))
    finally:
        timer.join()
    assert all(v.passed for v in verdicts)
    # One read of the fact and one of the mart per chunk: the two checks share the fact's.
    assert len(verdicts) == 2 and len(reads) == 3 * 2 and ended and min(reads) > ended[0], \
        "a chunk was read while today's run ran"


HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
open(sys.argv[2], 'w').write('held')
time.sleep(30)
"""


def test_a_published_check_that_cannot_read_reports_it_and_fails_nothing(env, published, tmp_path,
                                                                         monkeypatch) -> None:
    import subprocess
    import sys
    import time

    from atlasmart_assets.checks.published import _guarded

    published((DAY, None))
    monkeypatch.setenv("ATLASMART_LOCK_TIMEOUT_S", "1")
    marker = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(env.warehouse_path), str(marker)])
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        wh = Warehouse()
        verdicts = _guarded(CHECKED, wh, lambda: published_checks(wh, Window.of(DAY)))
    finally:
        holder.kill()
        holder.wait()
    assert [v.check for v in verdicts] == list(CHECKED)
    for verdict in verdicts:
        assert not verdict.passed and verdict.severity == audits.WARN and not verdict.blocks
        assert "not evaluated" in verdict.description and "stands" in verdict.description


def test_a_doubled_day_is_not_told_to_accept_a_shrink() -> None:
    """The tag atlasmart/accept_shrink accepts a shrink, never a doubling: the refusal names it only for a shrink."""
    from atlasmart_assets.audits import row_delta_within_bounds
    doubled = row_delta_within_bounds("c", ("fact", "x"), {"2026-09-05": 12}, {"2026-09-05": 5}, 0.5)
    shrank = row_delta_within_bounds("c", ("fact", "x"), {"2026-09-05": 1}, {"2026-09-05": 5}, 0.5)
    assert not doubled.passed and "accept_shrink" not in doubled.description, doubled.description
    assert not shrank.passed and "atlasmart/accept_shrink" in shrank.description, shrank.description


def test_a_line_id_another_run_published_on_another_day_since_the_audit_refuses_the_commit(env, published,
                                                                                           monkeypatch) -> None:
    """The lanes let today's load commit while a backfill is between its audit and its commit. Each run's cross-day
    audit saw the other's day as it was before: if both add one line id, the second commit refuses (a line on two
    days would be counted twice in the fact, the mart and the extracts, and no later audit compares two days that
    are both kept as published)."""
    published(("2026-09-18", "2026-09-20"))
    wh = Warehouse()
    with wh.reader() as con:
        [(late,)] = con.execute("select min(line_id) from fact.fct_order_lines "
                                "where partition_date = '2026-09-20'").fetchall()
        [(ours,)] = con.execute("select min(line_id) from fact.fct_order_lines "
                                "where partition_date = '2026-09-18'").fetchall()
    shared = "LINE-ON-TWO-DAYS"
    real = correction.publish
    other: list = []

    def today_commits_first(*args, **kwargs):  # noqa: ANN002,ANN003,ANN202
        if not other:  # the backfill has audited; today's load runs and commits before its commit
            monkeypatch.setattr(correction, "publish", real)
            other.append(correct(wh, _scope("today-first", Window.of("2026-09-20")), lambda _: True,
                                 adjust_staged=_craft(f"update candidate.staged_order_lines set line_id = '{shared}' "
                                                      f"where line_id = '{late}'")))
            monkeypatch.setattr(correction, "publish", today_commits_first)
        return real(*args, **kwargs)

    monkeypatch.setattr(correction, "publish", today_commits_first)
    with pytest.raises(PublishConflict, match=f"{shared}.*2026-09-20"):
        correct(wh, _scope("backfill-second", Window.of("2026-09-18", "2026-09-19"), "bf-second"), lambda _: True,
                adjust_staged=_craft(f"update candidate.staged_order_lines set line_id = '{shared}' "
                                     f"where line_id = '{ours}'"))
    assert other[0].publication is not None and not other[0].refused, "today's load audited clean and committed"
    with wh.reader() as con:
        assert con.execute("select partition_date::varchar from fact.fct_order_lines where line_id = $l",
                           {"l": shared}).fetchall() == [("2026-09-20",)], "the line is on one day only"
        assert con.execute("select count(*) from audit.corrections_in_progress").fetchone()[0] == 0
