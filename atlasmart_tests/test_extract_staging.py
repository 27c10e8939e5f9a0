"""A publication's extracts are staged before its commit takes the warehouse lock, and the version it swaps in
is still the whole truth: another publication that swapped in meanwhile keeps its days, a file lost from the staged
version is staged again, and a refused publication leaves no version behind."""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
from typing import Any, Callable, Iterator

import pytest

from atlasmart_assets import candidates, extracts, generate
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.settings import Settings
from atlasmart_assets.warehouse.connection import attach
from atlasmart_assets.warehouse.ledger import DayCandidate
from atlasmart_assets.warehouse.publish import PublishConflict, publish
from atlasmart_assets.window import Window

DAYS = ("2026-09-01", "2026-09-02", "2026-09-03")


@pytest.fixture
def three_days(env: Settings, instance: Any) -> Settings:
    for day in DAYS:
        d = dt.date.fromisoformat(day)
        generate.write_raw(env.raw_dir, d, generate.synthetic_lines(d, 300, 20))
    assert run_chain(instance, DAYS[0], DAYS[-1]).success
    return env


def _corrected(wh: Warehouse, name: str, window: Window, cost_delta: int) -> dict[str, DayCandidate]:
    """Candidates of `window` in the scratch `name`: the published lines with every unit cost raised."""
    with wh.reader() as rcon:
        attach(rcon, wh.scratch_path(name), "s")
        rcon.execute("create schema s.candidate")
        rcon.execute("create table s.candidate.staged_order_lines as select * from staged.order_lines "
                     "where partition_date between $start and $end", window.params)
        rcon.execute("detach s")
    con = wh.open_scratch(name)
    try:
        con.execute("update candidate.staged_order_lines set unit_cost = unit_cost + $d", {"d": cost_delta})
        candidates.build(con)
        return candidates.days(con, window, {})
    finally:
        con.close()


def _publish(wh: Warehouse, name: str, window: Window, after: dict[str, DayCandidate]) -> None:
    publish(wh, wh.scratch_path(name), window, RunInfo(name), "test", after, None)


def _extracts_match_ledger(cfg: Settings) -> dict[str, str]:
    """Each day's extract as a reader reads it, checked against the bytes its current ledger row recorded."""
    with Warehouse().reader() as con:
        ledger = {d.isoformat(): text for d, text in con.execute(
            "select partition_date, extract_json from audit.current_publications").fetchall()}
    version = extracts.resolve(cfg)
    assert version is not None
    on_disk = {d: (version / extracts.file_name(d)).read_text() for d in ledger if (version / extracts.file_name(d)).exists()}
    assert on_disk == ledger
    assert extracts.intact(cfg, version.name, ledger)
    return on_disk


@contextlib.contextmanager
def _spy_stage(monkeypatch: pytest.MonkeyPatch,
               after_first: Callable[[str], None] | None = None) -> Iterator[list[tuple[str, bool]]]:
    """Every extracts.stage call as (version, whether a writer hold of the warehouse was open), and after the
    first call's stage `after_first(version)` (what another publisher does before this one takes the lock)."""
    calls: list[tuple[str, bool]] = []
    held = [0]
    real_writer, real_stage = Warehouse.writer, extracts.stage

    @contextlib.contextmanager
    def writer(self: Warehouse, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_writer(self, *args, **kwargs) as con:
            held[0] += 1
            try:
                yield con
            finally:
                held[0] -= 1

    def stage(cfg: Settings, version: str, changed: dict[str, str]) -> str | None:
        calls.append((version, held[0] > 0))
        built_on = real_stage(cfg, version, changed)
        if after_first is not None and len(calls) == 1:
            after_first(version)
        return built_on

    monkeypatch.setattr(Warehouse, "writer", writer)
    monkeypatch.setattr(extracts, "stage", stage)
    yield calls


def test_extracts_are_staged_outside_the_commit_hold(three_days: Settings, instance: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    wh, window = Warehouse(), Window.of(DAYS[0], DAYS[-1])
    after = _corrected(wh, "outside", window, 1)
    with _spy_stage(monkeypatch) as calls:
        _publish(wh, "outside", window, after)
        assert run_chain(instance, DAYS[1], DAYS[1]).success  # today's load's path: one chunk, one hold
    assert len(calls) == 2 and not any(held for _, held in calls), calls
    _extracts_match_ledger(three_days)


def test_a_publication_swapped_in_meanwhile_keeps_its_days(three_days: Settings,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    wh = Warehouse()
    mine, theirs = Window.of(DAYS[0], DAYS[1]), Window.of(DAYS[2], DAYS[2])
    after, other = _corrected(wh, "mine", mine, 1), _corrected(wh, "theirs", theirs, 2)

    def another_publication(version: str) -> None:
        _publish(wh, "theirs", theirs, other)  # commits and swaps in before "mine" takes the lock

    with _spy_stage(monkeypatch, another_publication) as calls:
        _publish(wh, "mine", mine, after)
    [(first, first_held), (_, theirs_held), (again, again_held)] = calls
    assert not first_held and not theirs_held
    assert again == first and again_held  # staged again, on the version swapped in
    seen = _extracts_match_ledger(three_days)
    assert seen[DAYS[2]] == other[DAYS[2]].extract_json


def test_a_staged_version_that_lost_a_file_is_staged_again(three_days: Settings,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    wh, window = Warehouse(), Window.of(DAYS[0], DAYS[1])
    after = _corrected(wh, "lost", window, 1)

    def prune_by_another(version: str) -> None:
        # An unchanged day's hard link, gone as another publisher's prune of half-built versions takes it.
        (three_days.versions_dir / version / extracts.file_name(DAYS[2])).unlink()

    with _spy_stage(monkeypatch, prune_by_another) as calls:
        _publish(wh, "lost", window, after)
    assert [held for _, held in calls] == [False, True]
    _extracts_match_ledger(three_days)


def test_a_refused_publication_leaves_no_staged_version(three_days: Settings) -> None:
    wh, window = Warehouse(), Window.of(DAYS[0], DAYS[1])
    after = _corrected(wh, "refused", window, 1)
    versions = sorted(p.name for p in three_days.versions_dir.iterdir())
    with pytest.raises(PublishConflict):
        # What the audit compared against: nothing published yet, which is no longer so.
        publish(wh, wh.scratch_path("refused"), window, RunInfo("refused"), "test", after, {})
    assert sorted(p.name for p in three_days.versions_dir.iterdir()) == versions
    _extracts_match_ledger(three_days)
    shutil.rmtree(wh.scratch_path("refused"), ignore_errors=True)
