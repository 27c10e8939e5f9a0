"""In a window longer than one chunk, a day whose every landing batch is already loaded from a byte-identical file
is profiled where it is loaded (its lines read a chunk at a time into memory), not copied into the run's scratch:
every raw audit still runs on its lines, and a correction copies only the days it builds. Whatever is copied, a
correction publishes what building every day from the parsed files gives. The tests use chunks of 3 days, so their
10-day window is a long one."""

import datetime as dt

import pytest

from atlasmart_assets import generate, raw_load
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state
from atlasmart_tests.evidence_edits import customer_and_days, deletion_request, retier_first_customer

WINDOW = ("2026-09-01", "2026-09-10")
DAYS = [f"2026-09-{d:02d}" for d in range(1, 11)]
BF = {"dagster/backfill": "bf-in-place", "atlasmart/reason": "in place"}
REDERIVE = {"dagster/backfill": "bf-rederive", "atlasmart/reason": "rebuild all", "atlasmart/rederive": "check"}


@pytest.fixture
def copied(monkeypatch) -> list[list[str]]:  # noqa: ANN001
    """The days of each read-back into a run's scratch, in order (the raw step's, then the correction's)."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    calls: list[list[str]] = []
    real = raw_load.read_back

    def spy(wh, run_id, days, stats, give_way, lines=None) -> None:  # noqa: ANN001
        calls.append(sorted(days))
        real(wh, run_id, days, stats, give_way, lines)

    monkeypatch.setattr(raw_load, "read_back", spy)
    return calls


def _line(instance, result, phase: str) -> str:  # noqa: ANN001
    [line] = [e.user_message for e in instance.all_logs(result.run_id) if f"] {phase}:" in (e.user_message or "")]
    return line


def _run(instance, tags: dict[str, str]):  # noqa: ANN001, ANN202
    result = run_chain(instance, *WINDOW, tags)
    assert result.success, state.failure_text(result)
    return result


def _rederived(instance, env) -> dict:  # noqa: ANN001
    """What building every day from the evidence gives (the raw step copies every loaded day for it)."""
    _run(instance, {**REDERIVE, "dagster/backfill": "bf-rederive-check"})
    return state.content(env)


def test_a_republish_copies_no_loaded_line_and_counts_every_record_of_the_days(env, instance, copied) -> None:
    """Profiled where they are loaded, the days are copied nowhere, and the raw step's figures per day (records,
    controls, batches) are those a parse of the files gives."""
    first = _run(instance, BF)
    content = state.content(env)
    copied.clear()
    again = _run(instance, {**BF, "dagster/backfill": "bf-again"})
    parse = _line(instance, again, "parse")
    assert "0 parsed, 10 already loaded" in parse and "(10 day(s) of them read where they are loaded, not copied)" \
        in parse, parse
    assert all(days == [] for days in copied), f"no loaded line copied into the scratch: {copied}"
    assert state.content(env) == content, "profiled in place, the same evidence publishes the same content"
    assert _line(instance, again, "profile").split(";")[0] == _line(instance, first, "profile").split(";")[0]

    def figures(result) -> dict:  # noqa: ANN001
        out = {}
        for m in result.asset_materializations_for_node("raw__order_lines"):
            meta = m.metadata
            out[m.partition] = (meta["dagster/row_count"].value, str(meta["controls"].value))
        return out

    assert figures(again) == figures(first) and len(figures(first)) == 10


def test_a_rederive_copies_every_loaded_day_in_its_raw_step(env, instance, copied) -> None:
    _run(instance, BF)
    content = state.content(env)
    copied.clear()
    again = _run(instance, REDERIVE)
    assert "not copied" not in _line(instance, again, "parse")
    assert copied[0] == DAYS and all(days == [] for days in copied[1:]), copied
    assert state.content(env) == content


def test_a_late_batch_copies_its_day_only_and_publishes_what_building_every_day_gives(env, instance,
                                                                                      copied) -> None:
    _run(instance, BF)
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 4), "B-2026-09-04-02", new=2, restate=1, retract=1)
    copied.clear()
    late = _run(instance, {**BF, "dagster/backfill": "bf-late"})
    assert "1 parsed, 10 already loaded" in _line(instance, late, "parse")
    assert "(9 day(s) of them read where they are loaded, not copied)" in _line(instance, late, "parse")
    assert copied == [["2026-09-04"]], "the day of the new batch is merged with its loaded batch in the scratch"
    assert "candidates for 1 day(s) of 10, 1 with new evidence; 9 kept as published" in _line(instance, late, "build")
    published = state.content(env)
    assert _rederived(instance, env) == published


def test_a_deletion_request_copies_and_builds_the_days_holding_its_subject(env, instance, copied) -> None:
    """The days whose loaded lines name the request's subject are found in the warehouse, then copied and built;
    the others stay where they are, kept as published."""
    _run(instance, BF)
    subject, holding = customer_and_days(env.raw_dir, DAYS, "2026-09-03")
    assert 0 < len(holding) < len(DAYS)
    deletion_request(env.raw_dir, "DR-0100", "erasure request", customer_id=subject)
    copied.clear()
    applied = _run(instance, {**BF, "dagster/backfill": "bf-erase"})
    assert f"candidates for {len(holding)} day(s) of 10" in _line(instance, applied, "build")
    assert copied[0] == [] and [d for days in copied[1:] for d in days] == holding, copied
    assert state.table_rows(env, "fact.fct_order_lines", f"customer_id = '{subject}'") == []
    published = state.content(env)
    assert _rederived(instance, env) == published


def test_days_read_where_they_are_loaded_between_two_late_batches_are_not_copied_with_them(env, instance,
                                                                                          copied) -> None:
    """The raw step copies the days of two late batches in one chunk (2026-09-02 and 09-06); the loaded days between
    them stay where they are. A deletion request whose subject is on such a day then copies that day once, for its
    build: before, the chunk's read took every reused batch of its span (09-02..09-06), the request's day was
    copied again, and its doubled lines refused the run ("the warehouse's copy of its lines differs")."""
    _run(instance, BF)
    for day in (2, 6):
        generate.late_delta(env.raw_dir, dt.date(2026, 9, day), f"B-2026-09-0{day}-02", new=1, restate=0, retract=0)
    subject, holding = customer_and_days(env.raw_dir, DAYS, "2026-09-04")
    assert "2026-09-04" in holding
    deletion_request(env.raw_dir, "DR-0101", "erasure request", customer_id=subject)
    copied.clear()
    applied = _run(instance, {**BF, "dagster/backfill": "bf-late-erase"})
    assert copied[0] == ["2026-09-02", "2026-09-06"], copied
    assert "(8 day(s) of them read where they are loaded, not copied)" in _line(instance, applied, "parse")
    assert state.table_rows(env, "fact.fct_order_lines", f"customer_id = '{subject}'") == []
    published = state.content(env)
    assert _rederived(instance, env) == published


def test_a_new_dimension_version_copies_every_day_in_its_raw_step(env, instance, copied) -> None:
    """No day can be kept under a new dimension version: the raw step copies every loaded day for the build rather
    than profile it in place and have the correction read it again."""
    _run(instance, BF)
    retier_first_customer(env.raw_dir)
    copied.clear()
    dimension = _run(instance, {**BF, "dagster/backfill": "bf-dimension"})
    assert "not copied" not in _line(instance, dimension, "parse")
    assert "candidates for 10 day(s) of 10" in _line(instance, dimension, "build")
    assert copied[0] == DAYS and all(days == [] for days in copied[1:]), copied
    published = state.content(env)
    assert _rederived(instance, env) == published


def test_a_new_release_copies_every_day_for_its_build(env, instance, copied, monkeypatch) -> None:
    """A release the raw step does not know of (the correction's code version changed under it): every day is
    profiled in place, then built, so the correction copies every one of them."""
    from atlasmart_assets import correction

    _run(instance, BF)
    monkeypatch.setattr(correction, "CODE_VERSION", "9.9.9+another-release")
    copied.clear()
    release = _run(instance, {**BF, "dagster/backfill": "bf-release"})
    assert "(10 day(s) of them read where they are loaded, not copied)" in _line(instance, release, "parse")
    assert "candidates for 10 day(s) of 10" in _line(instance, release, "build")
    assert copied[0] == [] and sorted(d for days in copied[1:] for d in days) == DAYS, copied
    published = state.content(env)
    assert _rederived(instance, env) == published


def test_a_day_whose_published_rows_differ_is_copied_and_built_again(env, instance, copied) -> None:
    from atlasmart_assets.resources import Warehouse

    _run(instance, BF)
    before = state.content(env)
    with Warehouse().writer() as con:
        con.execute("update versions.staged_order_lines set quantity = quantity + 1 where rowid = "
                    "(select min(rowid) from versions.staged_order_lines where partition_date = '2026-09-03')")
    copied.clear()
    repaired = _run(instance, {**BF, "dagster/backfill": "bf-repair"})
    assert "candidates for 1 day(s) of 10" in _line(instance, repaired, "build")
    assert [d for days in copied for d in days] == ["2026-09-03"], copied
    assert state.content(env) == before, "built again from the evidence, the day is what it was"


def test_each_chunk_keeps_writers_out_only_while_its_lines_are_read(env, instance, copied, monkeypatch) -> None:
    """A chunk's lines are read under a read-only attach of the warehouse (a writer of another process is kept out,
    as by a read-back); they are profiled after the detach, with the warehouse free."""
    from atlasmart_assets import raw_files
    from atlasmart_tests.test_raw_read_back import _writer_can_open

    _run(instance, BF)
    content = state.content(env)
    during, profiling = [], []
    real_hold, real_measure = raw_load.preemptible_hold, raw_files.measure

    def probing_hold(open_hold, path, body, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        def probed(con):  # noqa: ANN001, ANN202
            body(con)
            during.append(_writer_can_open(path))
        real_hold(open_hold, path, probed, *args, **kwargs)

    def probing_measure(con, **kwargs):  # noqa: ANN001, ANN003, ANN202
        profiling.append(_writer_can_open(env.warehouse_path))
        return real_measure(con, **kwargs)

    monkeypatch.setattr(raw_load, "preemptible_hold", probing_hold)
    monkeypatch.setattr(raw_files, "measure", probing_measure)
    _run(instance, {**BF, "dagster/backfill": "bf-probe"})
    assert during == [False] * 4, "10 days in chunks of 3: a writer is kept out while each of the 4 chunks is read"
    assert profiling[:4] == [True] * 4, "and the warehouse is free while each chunk is profiled"
    assert state.content(env) == content


def test_a_line_changed_between_the_raw_step_and_the_corrections_copy_is_refused(env, instance, monkeypatch,
                                                                                copied) -> None:
    """The raw step compares a day's lines where they are loaded; the correction copies them again to build the
    day (a deletion request names its customer), later: a line changed in between, the day's controls unchanged
    (an order moved to another customer), is refused naming the batch file and day, and nothing published moves."""
    from atlasmart_assets.resources import Warehouse

    _run(instance, BF)
    subject, holding = customer_and_days(env.raw_dir, DAYS, "2026-09-03")
    deletion_request(env.raw_dir, "DR-0101", "erasure request", customer_id=subject)
    day = holding[0]
    before = state.snapshot(env)
    real = raw_load.copy_uncopied

    def change_then_copy(wh, run_id, uncopied, days, *args):  # noqa: ANN001, ANN002, ANN202
        with Warehouse().writer() as con:
            order = con.execute("select max(order_id) from raw.order_lines where partition_date = $d "
                                "and customer_id <> $c", {"d": day, "c": subject}).fetchone()[0]
            con.execute("update raw.order_lines set customer_id = 'C-MOVED' where partition_date = $d "
                        "and order_id = $o", {"d": day, "o": order})
        return real(wh, run_id, uncopied, days, *args)

    monkeypatch.setattr(raw_load, "copy_uncopied", change_then_copy)
    result = run_chain(instance, *WINDOW, {**BF, "dagster/backfill": "bf-changed-between"})
    text = " ".join(state.failure_causes(result))
    assert not result.success and f"raw partition {day}" in text, text
    assert "the warehouse's copy of its lines differs" in text, text
    assert state.snapshot(env) == before, "nothing published moved"


def test_a_batch_without_lines_is_read_back_like_any_other(env, instance, copied) -> None:
    """An empty landing batch is evidence too: loaded once, it is fingerprinted as empty and read back (or profiled
    where it is loaded) from then on, never parsed and loaded again on every run."""
    generate.write_batch(env.raw_dir, dt.date(2026, 9, 4), "B-2026-09-04-empty", [])
    _run(instance, BF)
    again = _run(instance, {**BF, "dagster/backfill": "bf-again"})
    assert "11 batch file(s): 0 parsed, 11 already loaded" in _line(instance, again, "parse")
    assert "0 new batch(es) appended" in _line(instance, again, "append")


def test_a_warehouse_from_before_the_fingerprints_loads_its_batches_again_once(env, instance, copied) -> None:
    """A warehouse no writer has migrated since the fingerprints (migration 012): the raw step's first read does not
    fail on the missing column; the batches are parsed and loaded again by the writer that migrates it, and read
    back from the next run on; what is published does not change."""
    from atlasmart_assets.resources import Warehouse

    _run(instance, BF)
    content = state.content(env)
    with Warehouse().writer() as con:
        con.execute("alter table raw.batches drop column lines_fingerprint")
        con.execute("delete from audit.schema_migrations where version = 12")
    upgraded = _run(instance, {**BF, "dagster/backfill": "bf-upgraded"})
    assert "10 parsed, 0 already loaded" in _line(instance, upgraded, "parse")
    assert state.content(env) == content
    again = _run(instance, {**BF, "dagster/backfill": "bf-again"})
    assert "0 parsed, 10 already loaded" in _line(instance, again, "parse")
