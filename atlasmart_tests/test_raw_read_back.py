"""In a window longer than one chunk, a batch already loaded from a byte-identical file is read back from the
warehouse instead of parsed again (a year's re-publish parses nothing): the read-back lines equal the parsed ones,
every audit still runs on them, and anything that differs from what was loaded is parsed again. The tests use
chunks of 3 days, so their 10-day window is a long one."""

import datetime as dt
import json
import os
import re
import shutil
from typing import Callable

import dagster as dg
import duckdb
import pytest

from atlasmart_assets import generate, raw_files, raw_load, settings, sql
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse.connection import LockStats, attach
from atlasmart_assets.window import Window
from atlasmart_tests import state

WINDOW = ("2026-09-01", "2026-09-10")
BF = {"dagster/backfill": "bf-read-back"}
CHUNKS = ("ATLASMART_CHUNK_DAYS", "ATLASMART_CHUNK_LINES")


@pytest.fixture(scope="session")
def loaded_cache(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {"raw": tmp_path_factory.mktemp("read-back") / "raw"}


@pytest.fixture
def window_loaded(env: settings.Settings, monkeypatch: pytest.MonkeyPatch, loaded_cache: dict,
                  tmp_path_factory: pytest.TempPathFactory) -> Callable[[], settings.Settings]:
    """`window_loaded()` gives the test the state one run of the daily job over WINDOW leaves on the shipped raw,
    under the chunk settings in force, and returns the settings to use. The warehouse finds a loaded batch by its
    file's path, which the `published` fixture's raw does not share: here the run and every test use one raw path,
    copied afresh from the shipped raw for each test. The run executes once per process; tests get a copy of its
    data dir. The test's instance holds no record of it."""
    raw = loaded_cache["raw"]

    def fresh_raw() -> None:
        shutil.rmtree(raw, ignore_errors=True)
        shutil.copytree(env.raw_dir, raw)  # env's pristine copy: copy2 keeps each file's bytes and mtime

    def load() -> settings.Settings:
        from atlasmart_assets.lab import run_chain

        key = tuple(os.environ.get(name) for name in CHUNKS)
        if key not in loaded_cache:
            fresh_raw()
            data = tmp_path_factory.mktemp("read-back-data") / "data"
            with pytest.MonkeyPatch.context() as mp, dg.DagsterInstance.ephemeral() as inst:
                mp.setenv("ATLASMART_RAW_DIR", str(raw))
                mp.setenv("ATLASMART_DATA_DIR", str(data))
                assert run_chain(inst, *WINDOW).success
            loaded_cache[key] = data
        fresh_raw()
        shutil.copytree(loaded_cache[key], env.data_dir, symlinks=True)
        monkeypatch.setenv("ATLASMART_RAW_DIR", str(raw))
        return settings.load()
    return load


def _logs(instance, result) -> list[str]:  # noqa: ANN001
    return [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]


def _parse_line(instance, result) -> str:  # noqa: ANN001
    [line] = [m for m in _logs(instance, result) if "] parse:" in m]
    return line


def _profile_line(instance, result) -> str:  # noqa: ANN001
    [line] = [m for m in _logs(instance, result) if "] profile:" in m]
    return line


def _build_line(instance, result) -> str:  # noqa: ANN001
    [line] = [m for m in _logs(instance, result) if "] build:" in m]
    return line


def _raw_lines(wh: Warehouse, run_id: str) -> list[tuple]:
    con = wh.open_scratch(run_id)
    try:
        return con.execute("select * from candidate.raw_lines order by all").fetchall()
    finally:
        con.close()


def test_read_back_lines_equal_the_parsed_lines(window_loaded) -> None:
    env = window_loaded()
    wh, window = Warehouse(), Window.of(*WINDOW)
    with wh.reader() as con:
        loaded = {str(s["file"]): s for s in ledger.loaded_batches(con, window).values()}
    con = wh.open_scratch("parsed")
    try:
        parsed_files = raw_files.load_window(con, env.raw_dir, window)
    finally:
        con.close()
    con = wh.open_scratch("read-back")
    try:
        files = raw_files.load_window(con, env.raw_dir, window, loaded)
    finally:
        con.close()
    reused = [f for f in files if f.read_back]
    assert not any(f.read_back for f in parsed_files) and len(reused) == len(files) == len(parsed_files) == 10
    assert _raw_lines(wh, "read-back") == [], "nothing was parsed"
    raw_load.read_back(wh, "read-back", [f.partition for f in reused], LockStats(), None)
    parsed = _raw_lines(wh, "parsed")
    assert len(parsed) > 0 and _raw_lines(wh, "read-back") == parsed, "the same records, column for column"
    assert [(f.partition, f.batch_id, f.sha256, f.kind, f.high_sequence, f.controls, f.manifest["records"],
             f.manifest.get("extracted_at")) for f in files] == \
        [(f.partition, f.batch_id, f.sha256, f.kind, f.high_sequence, f.controls, f.manifest["records"],
          f.manifest.get("extracted_at")) for f in parsed_files], "the same manifests"


def test_the_scratch_table_has_the_parsed_columns(env) -> None:
    con = duckdb.connect()
    try:
        con.execute("create schema candidate")
        con.execute(sql.text("raw_lines_table"))
        table = con.execute("describe candidate.raw_lines").fetchall()
        parsed = con.execute(f"describe {sql.text('raw_lines')}",
                             raw_files.read_params([raw_files.path_for(env.raw_dir, WINDOW[0])])).fetchall()
    finally:
        con.close()
    assert [r[:2] for r in table] == [r[:2] for r in parsed]


def test_a_rerun_parses_only_what_is_new(env, instance, monkeypatch) -> None:
    from atlasmart_assets.lab import run_chain

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    first = run_chain(instance, *WINDOW)
    assert first.success and "10 batch file(s): 10 parsed, 0 already loaded" in _parse_line(instance, first)
    content = state.content(env)
    again = run_chain(instance, *WINDOW, BF)
    assert again.success, state.failure_text(again)
    assert "10 batch file(s): 0 parsed, 10 already loaded" in _parse_line(instance, again)
    assert state.content(env) == content, "read back, the same evidence publishes the same content"
    assert "s to go" in _profile_line(instance, first), "a first load appends every batch after its profile"
    # Only the step's events are left (a twentieth of it), never a first load's append (a third): what remains is
    # estimated at a fifteenth of the time so far, whatever the machine's speed.
    line = _profile_line(instance, again)
    so_far, to_go = (float(x) for x in re.search(r"; ([\d.]+) s so far, .*about (\d+) s to go$", line).groups())
    assert to_go <= round(so_far / 15 + 0.5), f"nothing left to append, yet: {line}"
    assert "candidates for 10 day(s) of 10, 10 with new evidence;" in _build_line(instance, first)
    assert "candidates for 0 day(s) of 10, 0 with new evidence; 10 kept as published" in _build_line(instance, again), \
        "the same evidence, dimension and release: no day is built again, none written again"

    day = dt.date.fromisoformat("2026-09-04")
    generate.late_delta(env.raw_dir, day, "B-2026-09-04-02", new=2, restate=1, retract=1)
    late = run_chain(instance, *WINDOW, {**BF, "dagster/backfill": "bf-late"})
    assert late.success, state.failure_text(late)
    assert "11 batch file(s): 1 parsed, 10 already loaded" in _parse_line(instance, late)
    assert "candidates for 1 day(s) of 10, 1 with new evidence; 9 kept as published" in _build_line(instance, late)
    [(n,)] = state.table_rows(env, "(select count(*) from raw.order_lines where extraction_batch = 'B-2026-09-04-02')")
    assert n == 4, "the new batch was appended"


def test_a_batch_missing_lines_in_the_warehouse_is_parsed_and_loaded_again(window_loaded, instance,
                                                                          monkeypatch) -> None:
    from atlasmart_assets.lab import run_chain

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    with Warehouse().writer() as con:
        records = con.execute("select count(*) from raw.order_lines where partition_date = '2026-09-05'").fetchone()[0]
        con.execute("delete from raw.order_lines where partition_date = '2026-09-05' and line_id in "
                    "(select line_id from raw.order_lines where partition_date = '2026-09-05' limit 3)")
    again = run_chain(instance, *WINDOW, BF)
    assert again.success, state.failure_text(again)
    assert "10 batch file(s): 1 parsed, 9 already loaded" in _parse_line(instance, again)
    [(n,)] = state.table_rows(env, "(select count(*) from raw.order_lines where partition_date = '2026-09-05')")
    assert n == records, "the batch's lines are whole again"


def test_every_audit_runs_on_read_back_lines(window_loaded, instance, monkeypatch) -> None:
    """A loaded line changed in the warehouse (its batch file unchanged) no longer gives the manifest's controls:
    read back, it is refused as a parsed file would be, and nothing published moves."""
    from atlasmart_assets.lab import run_chain

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    with Warehouse().writer() as con:
        con.execute("update raw.order_lines set unit_price = unit_price + 1 where partition_date = '2026-09-06' "
                    "and line_id = (select min(line_id) from raw.order_lines where partition_date = '2026-09-06')")
    before = state.snapshot(env)
    result = run_chain(instance, *WINDOW, BF)
    text = state.failure_text(result)
    assert not result.success and "raw_order_lines_match_manifest" in text and "2026-09-06" in text, text
    assert "the warehouse's copy" in text, "the finding says the warehouse's copy differs, not the file"
    assert state.snapshot(env) == before


def test_a_new_batch_with_stale_controls_beside_read_back_lines_is_blamed_not_the_warehouse(window_loaded, instance,
                                                                                             monkeypatch) -> None:
    """A late batch whose manifest repeats the day's earlier controls is refused; the finding says the read-back
    lines are as they were loaded and names the batch parsed now, rather than blaming the warehouse's copy."""
    from atlasmart_assets.lab import run_chain

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    day = dt.date(2026, 9, 6)
    first = env.raw_dir / f"partition={day.isoformat()}.json"
    path = generate.late_delta(env.raw_dir, day, "B-2026-09-06-STALE", new=1, restate=0, retract=0)
    doc = json.loads(path.read_text())
    doc["manifest"]["controls"] = json.loads(first.read_text())["manifest"]["controls"]
    path.write_text(generate.dump_raw(doc))
    before = state.snapshot(env)
    result = run_chain(instance, *WINDOW, BF)
    text = state.failure_text(result)
    assert not result.success and "raw_order_lines_match_manifest" in text and "B-2026-09-06-STALE" in text, text
    assert "unchanged since they were loaded" in text and "parsed now: B-2026-09-06-STALE" in text, text
    assert "the warehouse's copy" not in text, text
    assert state.snapshot(env) == before


def _move_an_order(day: str) -> tuple[str, str]:
    """One whole order of `day` moved to another customer in raw.order_lines (its batch file unchanged): the day's
    six controls do not move. Returns the order and the customer it was given."""
    with Warehouse().writer() as con:
        order, = con.execute("select min(order_id) from raw.order_lines where partition_date = $d",
                             {"d": day}).fetchone()
        other, = con.execute("select max(customer_id) from raw.order_lines where partition_date = $d "
                             "and order_id <> $o", {"d": day, "o": order}).fetchone()
        con.execute("update raw.order_lines set customer_id = $c where partition_date = $d and order_id = $o",
                    {"c": other, "d": day, "o": order})
    return order, other


@pytest.mark.parametrize("late", [False, True], ids=["kept", "rebuilt"])
def test_a_loaded_line_changed_where_the_controls_do_not_move_is_refused_then_loaded_again(window_loaded, instance,
                                                                                         monkeypatch, late) -> None:
    """Read-back lines are compared with what was loaded from their file, line by line, not only by the day's
    controls: an order moved to another customer in raw.order_lines is refused (with a late batch that day too,
    where it would have been built from the changed copy), nothing published moves, and once the batch's lines are
    deleted as the finding says, the next run loads it again from its file and publishes what the file says."""
    from atlasmart_assets.lab import run_chain

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    published = state.content(env)
    day = "2026-09-06"
    order, other = _move_an_order(day)
    if late:
        generate.write_batch(env.raw_dir, dt.date.fromisoformat(day), "B-late", [])
    before = state.snapshot(env)
    result = run_chain(instance, *WINDOW, BF)
    text = state.failure_text(result)
    assert not result.success and "raw_order_lines_match_manifest" in text and day in text, text
    assert "the warehouse's copy of its lines differs" in text, text
    assert state.snapshot(env) == before
    with Warehouse().writer() as con:
        con.execute("delete from raw.order_lines where partition_date = $d and extraction_batch = "
                    "(select batch_id from raw.batches where partition_date = $d order by first_loaded_at limit 1)",
                    {"d": day})
    result = run_chain(instance, *WINDOW, BF)
    assert result.success, state.failure_text(result)
    with Warehouse().reader() as con:
        assert con.execute("select count(*) from fact.fct_order_lines where order_id = $o and customer_id = $c",
                           {"o": order, "c": other}).fetchone()[0] == 0, "published as the file says"
    if not late:
        assert state.content(env) == published


def test_a_batch_loaded_before_its_lines_were_fingerprinted_is_loaded_again_once(window_loaded, instance,
                                                                                 monkeypatch) -> None:
    """A warehouse from before the fingerprints (or from another DuckDB release) cannot vouch for its loaded lines:
    each such batch is parsed and loaded again from its file, which records its fingerprint, and is read back from
    the next run on."""
    from atlasmart_assets.lab import run_chain

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    content = state.content(env)
    with Warehouse().writer() as con:
        con.execute("update raw.batches set lines_fingerprint = null where partition_date = '2026-09-02'")
        con.execute("update raw.batches set lines_fingerprint = 'v0.0.1: ' || lines_fingerprint "
                    "where partition_date = '2026-09-03'")
    result = run_chain(instance, *WINDOW, BF)
    assert result.success, state.failure_text(result)
    assert re.search(r"\b2 parsed, 8 already loaded", _parse_line(instance, result)), _parse_line(instance, result)
    with Warehouse().reader() as con:
        assert con.execute("select count(*) from raw.batches where not starts_with(lines_fingerprint, version())"
                           " or lines_fingerprint is null").fetchone()[0] == 0
    assert state.content(env) == content
    again = run_chain(instance, *WINDOW, BF)
    assert re.search(r"\b0 parsed, 10 already loaded", _parse_line(instance, again)), _parse_line(instance, again)


def test_a_correction_without_its_raw_step_reads_the_evidence_back_a_chunk_at_a_time(window_loaded,
                                                                                    monkeypatch) -> None:
    """A run of the correction alone (no raw step parsed into its scratch) reads the window's loaded lines back
    in one short read per chunk of days, and publishes what the whole chain published."""
    from atlasmart_assets.correction import correct
    from atlasmart_assets.scope import RunInfo, RunScope

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    content = state.content(env)
    wh = Warehouse()
    reads, chunk_reads = [], []
    real_reader, real_attach = Warehouse.reader, raw_load.attached_hold

    def counting_reader(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        reads.append(1)
        return real_reader(self, *args, **kwargs)

    def counting_attach(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        chunk_reads.append(1)
        return real_attach(*args, **kwargs)

    monkeypatch.setattr(Warehouse, "reader", counting_reader)
    monkeypatch.setattr(raw_load, "attached_hold", counting_attach)
    scope = RunScope(Window.of(*WINDOW), RunInfo("correction-alone", "bf-alone"), "backfill", "2026-09-21", None)
    outcome = correct(wh, scope, lambda _: True)
    assert outcome.publication is not None, [a.description for a in outcome.refused]
    assert reads, "the current publication is read"
    assert len(chunk_reads) == 4, "then 10 days of lines, read back in chunks of 3: four short reads"
    assert state.content(env) == content


def test_a_correction_without_its_raw_step_refuses_lines_changed_since_they_were_loaded(window_loaded,
                                                                                        monkeypatch) -> None:
    """The correction run alone builds from the lines it reads back, which no raw audit looked at: an order moved
    to another customer in raw.order_lines (the day's controls unchanged) is refused naming its batch file and day,
    with atlasmart/rederive too (every day built), and nothing published moves."""
    from atlasmart_assets.correction import correct
    from atlasmart_assets.scope import RunInfo, RunScope

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    _move_an_order("2026-09-04")
    before = state.snapshot(env)
    run = RunInfo("correction-alone", "bf-alone", rederive="every day")
    with pytest.raises(raw_files.RawInputError, match="2026-09-04.*the warehouse's copy of its lines differs") as exc:
        correct(Warehouse(), RunScope(Window.of(*WINDOW), run, "backfill", "2026-09-21", None), lambda _: True)
    assert exc.value.path == env.raw_dir / "partition=2026-09-04.json"
    assert state.snapshot(env) == before


def test_a_correction_alone_over_days_whose_raw_is_not_loaded_says_to_select_raw(env, instance) -> None:
    """A fresh deployment has loaded raw for its newest day only: a run of the correction alone over history is
    refused by its controls audit, which names the days without raw and says to materialize raw/order_lines."""
    from atlasmart_assets.correction import CONTROLS_MATCH_RAW, correct
    from atlasmart_assets.lab import run_chain
    from atlasmart_assets.scope import RunInfo, RunScope

    assert run_chain(instance, WINDOW[1], WINDOW[1]).success
    before = state.snapshot(env)
    scope = RunScope(Window.of(*WINDOW), RunInfo("correction-alone", "bf-alone"), "backfill", "2026-09-21", None)
    outcome = correct(Warehouse(), scope, lambda _: True)
    assert outcome.publication is None
    [controls] = [a for a in outcome.refused if a.check == CONTROLS_MATCH_RAW]
    assert controls.description.startswith("9 partition(s) have no raw_manifest_less_suppressed (2026-09-01, "), \
        controls.description
    assert "materialize raw/order_lines for them in the same run" in controls.description
    assert state.snapshot(env) == before


def test_a_window_of_one_chunk_parses_its_files(window_loaded, instance) -> None:
    """Today's load (and any window of one chunk) parses its loaded files again rather than take the warehouse
    lock once more to read them back."""
    from atlasmart_assets.lab import run_chain

    window_loaded()
    again = run_chain(instance, *WINDOW, BF)
    assert again.success and "10 batch file(s): 10 parsed, 0 already loaded" in _parse_line(instance, again)
    newest = run_chain(instance, "2026-09-21")
    assert newest.success and "1 batch file(s): 1 parsed" in _parse_line(instance, newest)
    again = run_chain(instance, "2026-09-21")
    assert again.success and "1 batch file(s): 1 parsed, 0 already loaded" in _parse_line(instance, again)


def test_a_long_read_back_gives_its_chunks_up_to_processes_waiting_on_the_warehouse(window_loaded, instance,
                                                                                   monkeypatch) -> None:
    """With a process announcing that it waits on the warehouse throughout, each chunk of a long read of loaded lines
    (a re-run profiles them where they are loaded) is given up PREEMPT_MAX times (the rows it read rolled back), then
    held to its end: the re-run publishes the same content from each line read once."""
    from atlasmart_assets.lab import run_chain
    from atlasmart_assets.warehouse import connection
    from atlasmart_tests.waiters import StandingWaiter

    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    env = window_loaded()
    content = state.content(env)
    monkeypatch.setattr(connection, "HANDOVER_MAX_S", 0.05)  # the announcer never takes the lock
    waiter = StandingWaiter(env.warehouse_path)
    waiter.start()
    try:
        result = run_chain(instance, *WINDOW, BF)
    finally:
        waiter.stop()
    assert result.success, state.failure_text(result)
    assert "0 parsed, 10 already loaded" in _parse_line(instance, result)
    [record] = [r for r in instance.fetch_materializations(dg.AssetKey(["raw", "order_lines"]), limit=100).records
                if r.partition_key == WINDOW[1] and r.run_id == result.run_id]
    assert record.asset_materialization.metadata["holds_given_up"].value == 4 * connection.PREEMPT_MAX, "10 days in chunks of 3: 4 chunks, each given up PREEMPT_MAX times"
    assert state.content(env) == content, "each line read back once: the same content"


def _writer_can_open(path) -> bool:  # noqa: ANN001
    """Whether another process can open the warehouse read-write right now (DuckDB's file lock)."""
    import subprocess
    import sys

    probe = ("import duckdb, sys\n"
             "try:\n    duckdb.connect(sys.argv[1]).close()\nexcept duckdb.IOException:\n    sys.exit(3)\n")
    return subprocess.run([sys.executable, "-c", probe, str(path)], check=False).returncode == 0


def test_a_read_back_keeps_writers_out_during_each_chunk_and_lets_them_in_between(window_loaded,
                                                                                   monkeypatch) -> None:
    """Each chunk's read-only attach of the warehouse keeps another process's writer out while the chunk is read
    (as a read-only connection did), and its detach lets one in before the next chunk."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "3")
    window_loaded()
    wh = Warehouse()
    con = wh.open_scratch("locks")
    try:
        con.execute(sql.text("raw_lines_table"))
        con.execute("create or replace table candidate.reused_batches (partition_date date, batch_id varchar, "
                    "file varchar)")
    finally:
        con.close()
    with wh.reader() as rcon:
        attach(rcon, wh.scratch_path("locks"), "s")
        rcon.execute("insert into s.candidate.reused_batches select partition_date, batch_id, file from raw.batches")
        rcon.execute("detach s")
    during, between = [], []
    real_hold = raw_load.preemptible_hold

    def probing_hold(open_hold, path, body, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        def probed(con):  # noqa: ANN001, ANN202
            body(con)
            during.append(_writer_can_open(path))
        real_hold(open_hold, path, probed, *args, **kwargs)
        between.append(_writer_can_open(path))

    monkeypatch.setattr(raw_load, "preemptible_hold", probing_hold)
    raw_load.read_back(wh, "locks", Window.of(*WINDOW).keys, LockStats(), None)
    assert during == [False] * 4, "10 days in chunks of 3: a writer is kept out during each of the 4 chunks"
    assert between == [True] * 4, "and let in after each"
    assert len(_raw_lines(wh, "locks")) == len(_raw_lines_of_warehouse(wh)), "every loaded line read back"


def _raw_lines_of_warehouse(wh: Warehouse) -> list[tuple]:
    with wh.reader() as con:
        return con.execute("select * from raw.order_lines").fetchall()


def test_a_day_has_new_evidence_when_its_batches_or_dimension_differ_or_it_was_never_published() -> None:
    from atlasmart_assets import candidates, correction

    def batch(sha: str) -> dict:
        return {"batch": f"B-{sha}", "kind": "full", "source_high_sequence": 1, "sha256": sha, "extracted_at": None}

    evidence = {d: candidates.Evidence((batch(d[-2:]),), []) for d in ("2026-09-01", "2026-09-02", "2026-09-03")}
    current = {d: ledger.Current(d, "pub", 1, 0, [], "", "", None, input_sha256=evidence[d].digest,
                                 dimension_version="dim-1") for d in ("2026-09-01", "2026-09-02")}
    days = ["2026-09-01", "2026-09-02", "2026-09-03"]
    assert correction._new_evidence(current, evidence, "dim-1", days) == ["2026-09-03"]
    assert correction._new_evidence(current, evidence, "dim-2", days) == days, "a new dimension version"
    evidence["2026-09-02"] = candidates.Evidence((batch("02"), batch("late")), [])
    assert correction._new_evidence(current, evidence, "dim-1", days) == ["2026-09-02", "2026-09-03"]
