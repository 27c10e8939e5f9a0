"""A hold's work grows with its lines, not its days: a long correction cuts its chunks by ATLASMART_CHUNK_LINES as
well as by ATLASMART_CHUNK_DAYS, so a month of heavy days is appended, read back and written ahead in holds of
bounded size (one commit of 31 days x 200,000 lines held the warehouse 2.8 s), and a short window of heavy days is
read back rather than parsed again. The tests shrink the line budget to two of the shipped evidence's days."""

import datetime as dt
import inspect
import json
import random
import re

import duckdb
import pytest

from atlasmart_assets import candidates, capacity, generate, raw_load, settings, unchanged
from atlasmart_assets.checks import published as published_checks
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse import publish as publish_module
from atlasmart_assets.window import Window, chunks
from atlasmart_tests import state
from atlasmart_tests.evidence_edits import deletion_request

WINDOW = ("2026-09-01", "2026-09-10")
BF = {"dagster/backfill": "bf-chunk-lines"}
BUDGET = 30  # lines: the shipped days hold 12 records each, so two days a chunk
CHUNK = re.compile(r"chunk (\d+)/(\d+) \((\S+?)(?:\.\.(\S+))?\)")


@pytest.mark.parametrize("seed", range(20))
def test_chunks_hold_at_most_their_days_and_lines_and_cover_the_days_in_order(seed: int) -> None:
    rng = random.Random(seed)
    days = Window.of("2026-01-01", "2026-12-31").keys[:rng.randint(0, 120)]
    lines = {d: rng.choice([0, 1, 5, 40, 400]) for d in days if rng.random() < 0.9}
    most_days, most_lines = rng.randint(1, 40), rng.randint(1, 500)
    parts = chunks(days, most_days, lines, most_lines)
    assert [d for part in parts for d in part] == days, "every day once, in order"
    for part in parts:
        assert 1 <= len(part) <= most_days
        weight = sum(lines.get(d, 0) for d in part)
        assert weight <= most_lines or len(part) == 1, (part, weight)
    for before, after in zip(parts, parts[1:]):
        joined = before + after[:1]
        assert len(joined) > most_days or sum(lines.get(d, 0) for d in joined) > most_lines, \
            "a chunk ends only where the next day would not fit"


def test_a_day_heavier_than_the_budget_is_a_chunk_of_its_own() -> None:
    days = Window.of("2026-09-01", "2026-09-05").keys
    heavy = {d: 10 for d in days} | {days[2]: 1_000}
    assert chunks(days, 31, heavy, 25) == [days[0:2], [days[2]], days[3:5]]
    assert chunks(days, 31) == [days], "without lines, by days alone"
    assert Window.of(*WINDOW).split(31, {d: 12 for d in Window.of(*WINDOW).keys}, BUDGET) == [
        Window.of(d, e) for d, e in (("2026-09-01", "2026-09-02"), ("2026-09-03", "2026-09-04"),
                                     ("2026-09-05", "2026-09-06"), ("2026-09-07", "2026-09-08"),
                                     ("2026-09-09", "2026-09-10"))]


def _logs(instance, result, phase: str) -> list[str]:  # noqa: ANN001
    return [e.user_message for e in instance.all_logs(result.run_id)
            if e.user_message and f"] {phase}: chunk" in e.user_message]


def _chunk_days(lines: list[str]) -> list[list[str]]:
    out = []
    for line in lines:
        _, _, start, end = CHUNK.search(line).groups()
        out.append(Window.of(start, end).keys)
    return out


def _per_day(cfg: settings.Settings, table: str) -> dict[str, int]:
    con = duckdb.connect(str(cfg.warehouse_path), read_only=True)
    try:
        return {d.isoformat(): n for d, n in con.execute(
            f"select partition_date, count(*) from {table} group by 1").fetchall()}
    finally:
        con.close()


def test_a_window_of_one_chunk_by_days_is_appended_and_written_ahead_a_chunk_of_lines_at_a_time(
        env, instance, monkeypatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", str(BUDGET))
    result = run_chain(instance, *WINDOW, BF)
    assert result.success, state.failure_text(result)
    cfg = settings.load()
    raw, fact = _per_day(cfg, "raw.order_lines"), _per_day(cfg, "fact.fct_order_lines")
    appended, written = _chunk_days(_logs(instance, result, "append")), _chunk_days(_logs(instance, result, "publish"))
    for parts, lines in ((appended, raw), (written, fact)):
        assert len(parts) > 1, "ten days are one chunk by days, several by lines"
        assert [d for part in parts for d in part] == Window.of(*WINDOW).keys
        assert all(sum(lines[d] for d in part) <= BUDGET or len(part) == 1 for part in parts), (parts, lines)
    chunked = state.content(cfg)

    # The published checks read the window a chunk of the ledger's lines at a time too, and still pass.
    read: list[Window] = []
    real = candidates.controls

    def spy(con, relation, window, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if relation == "fact.fct_order_lines":
            read.append(window)
        return real(con, relation, window, *args, **kwargs)

    monkeypatch.setattr(candidates, "controls", spy)
    assert all(a.passed for a in published_checks.published_checks(Warehouse(), Window.of(*WINDOW)))
    assert len(read) > 1 and [d for part in read for d in part.keys] == Window.of(*WINDOW).keys
    assert all(sum(fact[d] for d in part.keys) <= BUDGET or len(part.keys) == 1 for part in read), read
    monkeypatch.setattr(candidates, "controls", real)
    monkeypatch.delenv("ATLASMART_CHUNK_LINES")

    # The same evidence in one chunk (the default budget) publishes the same content: only the holds differ.
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "whole"))
    whole = run_chain(instance, *WINDOW, {"dagster/backfill": "bf-whole"})
    assert whole.success, state.failure_text(whole)
    assert not _logs(instance, whole, "publish"), "ten light days are one chunk: published in the commit's hold"
    assert state.content(settings.load()) == chunked


def test_a_short_window_of_heavy_days_is_read_back_not_parsed_again(env, instance, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", str(BUDGET))
    first = run_chain(instance, *WINDOW, BF)
    assert first.success, state.failure_text(first)
    content = state.content(settings.load())
    again = run_chain(instance, *WINDOW, {"dagster/backfill": "bf-again"})
    assert again.success, state.failure_text(again)
    [parse] = [e.user_message for e in instance.all_logs(again.run_id) if "] parse:" in (e.user_message or "")]
    assert "0 parsed, 10 already loaded" in parse, parse
    assert state.content(settings.load()) == content


def _fact_lines(cfg: settings.Settings) -> dict[str, int]:
    return _per_day(cfg, "fact.fct_order_lines")


def test_the_check_of_the_days_a_republish_keeps_reads_a_chunk_of_lines_at_a_time(env, instance, published,
                                                                                 monkeypatch) -> None:
    """A re-publish reads each kept day's published lines to check them against its ledger: ten days of one chunk by
    days were read in the ledger's one hold, whatever their lines."""
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", str(BUDGET))
    published((*WINDOW, BF))
    fact = _fact_lines(settings.load())
    copied: list[list[str]] = []
    real = unchanged.copy_published

    def spy(con, days, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        copied.append(list(days))
        return real(con, days, *args, **kwargs)

    monkeypatch.setattr(unchanged, "copy_published", spy)
    again = run_chain(instance, *WINDOW, {"dagster/backfill": "bf-kept"})
    assert again.success, state.failure_text(again)
    assert len(copied) > 1 and sorted(d for part in copied for d in part) == Window.of(*WINDOW).keys, copied
    assert all(sum(fact[d] for d in part) <= BUDGET or len(part) == 1 for part in copied), copied


@pytest.mark.parametrize("case", ["by-its-run", "collected-after-a-kill", "damaged-record"])
def test_an_abandoned_write_ahead_is_dropped_a_chunk_of_its_lines_at_a_time(env, instance, monkeypatch,
                                                                           case: str) -> None:
    """A publish that fails after writing ahead drops what it wrote in holds no longer than those that wrote it; a
    run killed there cannot, and the next correction's collection does, by the lines its pending record keeps (by
    days where the record's lines are damaged: nothing may stop a collection)."""
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", str(BUDGET))
    written: list[list[str]] = []
    dropped: list[list[str]] = []
    real_write, real_drop = ledger.write_version, ledger.drop_version_rows

    def write(con, layer, pub_id, version, source, part, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if layer is ledger.VERSIONED[0]:
            written.append(part.keys)
        return real_write(con, layer, pub_id, version, source, part, *args, **kwargs)

    def drop(con, pub_id, part):  # noqa: ANN001, ANN202
        dropped.append(part.keys)
        return real_drop(con, pub_id, part)

    def fail(name: str) -> None:
        if name == "wrote_versions":
            raise RuntimeError("the publish stops after its write-ahead")

    monkeypatch.setattr(ledger, "write_version", write)
    monkeypatch.setattr(ledger, "drop_version_rows", drop)
    monkeypatch.setattr(publish_module, "failpoint", fail)
    killed = case != "by-its-run"
    if killed:
        monkeypatch.setattr(publish_module, "_abandon", lambda *args: None)  # a killed run drops nothing itself
    # One day over the budget: the chunks then depend on which day each weight belongs to.
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 3), "B-2026-09-03-02", new=20, restate=0, retract=0)
    result = run_chain(instance, *WINDOW, BF)
    assert not result.success
    assert ["2026-09-03"] in written and len(written) > 2, written
    if killed:
        assert dropped == []
        if case == "damaged-record":
            with Warehouse().writer() as con:
                con.execute("update audit.pending_versions set day_lines = list_concat([null::bigint], day_lines[3:])")
        assert len(publish_module.collect_abandoned(Warehouse(), lambda run_id: True)) == 1
    assert dropped == ([Window.of(*WINDOW).keys] if case == "damaged-record" else written), (written, dropped)
    con = duckdb.connect(str(settings.load().warehouse_path), read_only=True)
    try:
        assert con.execute("select count(*) from audit.pending_versions").fetchone()[0] == 0
        assert con.execute("select count(*) from versions.staged_order_lines where publication_id not in "
                           "(select publication_id from audit.publications)").fetchone()[0] == 0
    finally:
        con.close()


def test_a_backfill_check_of_one_chunk_does_not_wait_for_todays_load(env, instance, published, monkeypatch) -> None:
    """Only a read of more than one chunk gives way before each: the ledger read that sizes the chunks does not."""
    published((*WINDOW, BF))
    waited: list[str] = []

    def give_way() -> float:
        waited.append("give way")
        return 0.0

    assert all(a.passed for a in published_checks.published_checks(Warehouse(), Window.of(*WINDOW), give_way))
    assert waited == []
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", str(BUDGET))
    assert all(a.passed for a in published_checks.published_checks(Warehouse(), Window.of(*WINDOW), give_way))
    assert waited == ["give way"] * 5


def test_the_search_for_requested_lines_where_they_are_loaded_reads_a_chunk_of_lines_at_a_time(env, instance,
                                                                                               monkeypatch) -> None:
    """With a deletion request in force, a re-publish looks for its lines among the days profiled where they are
    loaded: by lines, as the profile read them, not the ten days in one hold."""
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", str(BUDGET))
    assert run_chain(instance, *WINDOW, BF).success
    line = json.loads((env.raw_dir / "partition=2026-09-05.json").read_text())["lines"][0]["line_id"]
    deletion_request(env.raw_dir, "DR-chunks", line_ids=[line])
    searched: list[int] = []
    real = raw_load.short_reads

    def spy(wh, con, days, stats, give_way, read, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if read.__qualname__.startswith("requested_loaded_days"):
            searched.append(len(wh.settings.chunks(days, kwargs.get("lines"))))
        return real(wh, con, days, stats, give_way, read, *args, **kwargs)

    monkeypatch.setattr(raw_load, "short_reads", spy)
    again = run_chain(instance, *WINDOW, {"dagster/backfill": "bf-requested"})
    assert again.success, state.failure_text(again)
    assert searched and all(n > 1 for n in searched), searched


def test_retention_after_an_unchanged_republish_drops_a_chunk_of_lines_at_a_time(env, instance, monkeypatch) -> None:
    """A re-publish that writes nothing still lets earlier versions go past retention: their rows are dropped a
    chunk of the days' lines at a time after the commit, not all in the commit's hold (it weighed only what it
    wrote, nothing)."""
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", str(BUDGET))
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    assert run_chain(instance, *WINDOW, BF).success
    for day in Window.of(*WINDOW).keys:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02", new=1, restate=1, retract=0)
    late = run_chain(instance, *WINDOW, {"dagster/backfill": "bf-late"})
    assert late.success, state.failure_text(late)
    fact = _fact_lines(settings.load())
    pruned: list[list[str]] = []
    real = ledger.prune_versions

    def spy(con, retain, part):  # noqa: ANN001, ANN202
        pruned.append(part.keys)
        return real(con, retain, part)

    monkeypatch.setattr(ledger, "prune_versions", spy)
    again = run_chain(instance, *WINDOW, {"dagster/backfill": "bf-unchanged"})
    assert again.success, state.failure_text(again)
    assert pruned and all(sum(fact[d] for d in part) <= BUDGET or len(part) == 1 for part in pruned), pruned


def test_the_cross_day_search_gives_way_exactly_when_the_publish_is_a_long_one(env, instance, monkeypatch) -> None:
    """Restated lines make the window's raw records twice its published lines: the search for its line ids weighed
    the records and gave way as a long backfill's hold does, while the publish, weighing its lines, took one hold."""
    monkeypatch.setenv("ATLASMART_CHUNK_LINES", "150")  # 240 records, 120 lines
    for day in Window.of(*WINDOW).keys:
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(day), f"B-{day}-02", new=0, restate=12, retract=0)
    callers: list[str] = []
    real = capacity.GiveWay.__call__

    def spy(self):  # noqa: ANN001, ANN202
        callers.append(inspect.stack()[1].function)
        return real(self)

    monkeypatch.setattr(capacity.GiveWay, "__call__", spy)
    result = run_chain(instance, *WINDOW, BF)
    assert result.success, state.failure_text(result)
    assert sum(_per_day(settings.load(), "fact.fct_order_lines").values()) <= 150 < sum(
        _per_day(settings.load(), "raw.order_lines").values()), "the window is one chunk of lines, two of records"
    assert ("_line_id_repeats" in callers) == bool(_logs(instance, result, "publish")), callers
