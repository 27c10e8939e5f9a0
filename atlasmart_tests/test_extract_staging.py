"""A publication writes its own extracts before its commit takes the warehouse lock, and the version it swaps in
is still the whole truth: another publication that swapped in meanwhile keeps its days, what another publisher's
prune took is written again, and a refused publication leaves no version behind."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import dagster as dg
import pytest

from atlasmart_assets import extracts, generate
from atlasmart_assets.lab import published_as_candidates, run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo
from atlasmart_assets.settings import Settings
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
    return published_as_candidates(wh, name, window,
                                   "update candidate.staged_order_lines set unit_cost = unit_cost + $d",
                                   {"d": cost_delta})


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
    index = json.loads((version / extracts.INDEX).read_text())["partitions"]
    assert index == {d: {"file": extracts.file_name(d), "sha256": hashlib.sha256(text.encode()).hexdigest()}
                     for d, text in ledger.items()}
    assert sorted(p.name for p in version.glob("partition=*.json")) == sorted(extracts.file_name(d) for d in ledger)
    return on_disk


@dataclass
class Staging:
    """What a publish did with its extracts: each write_ahead (version, whether a writer hold of the warehouse was
    open), and each day's file written while one was."""

    ahead: list[tuple[str, bool]] = field(default_factory=list)
    written_in_hold: list[str] = field(default_factory=list)


def _holds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the writer holds of the warehouse open now: the list's one element."""
    held = [0]
    real_writer = Warehouse.writer

    @contextlib.contextmanager
    def writer(self: Warehouse, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with real_writer(self, *args, **kwargs) as con:
            held[0] += 1
            try:
                yield con
            finally:
                held[0] -= 1

    monkeypatch.setattr(Warehouse, "writer", writer)
    return held


@contextlib.contextmanager
def _spy(monkeypatch: pytest.MonkeyPatch, after_first: Callable[[str], None] | None = None) -> Iterator[Staging]:
    """Watch the extracts' writes; after the first write_ahead, `after_first(version)`: what another publisher does
    before this one takes the lock."""
    seen = Staging()
    held = _holds(monkeypatch)
    real_ahead, real_write = extracts.write_ahead, extracts._write

    def write_ahead(cfg: Settings, version: str, changed: dict[str, str]) -> None:
        seen.ahead.append((version, held[0] > 0))
        real_ahead(cfg, version, changed)
        if after_first is not None and len(seen.ahead) == 1:
            after_first(version)

    def write(path: Path, text: str) -> None:
        if held[0] and path.name != extracts.INDEX:
            seen.written_in_hold.append(path.name)
        real_write(path, text)

    monkeypatch.setattr(extracts, "write_ahead", write_ahead)
    monkeypatch.setattr(extracts, "_write", write)
    yield seen


def test_extracts_are_written_outside_the_commit_hold(three_days: Settings, instance: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    wh, window = Warehouse(), Window.of(DAYS[0], DAYS[-1])
    after = _corrected(wh, "outside", window, 1)
    with _spy(monkeypatch) as seen:
        _publish(wh, "outside", window, after)
        assert run_chain(instance, DAYS[1], DAYS[1]).success  # today's load's path: one chunk, one hold
    assert len(seen.ahead) == 2 and not any(held for _, held in seen.ahead), seen
    assert seen.written_in_hold == []
    _extracts_match_ledger(three_days)


def test_a_publication_swapped_in_meanwhile_keeps_its_days(three_days: Settings,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    wh = Warehouse()
    mine, theirs = Window.of(DAYS[0], DAYS[1]), Window.of(DAYS[2], DAYS[2])
    after, other = _corrected(wh, "mine", mine, 1), _corrected(wh, "theirs", theirs, 2)

    def another_publication(version: str) -> None:
        _publish(wh, "theirs", theirs, other)  # commits and swaps in before "mine" takes the lock

    with _spy(monkeypatch, another_publication) as seen:
        _publish(wh, "mine", mine, after)
    assert len(seen.ahead) == 2 and seen.written_in_hold == []
    seen_files = _extracts_match_ledger(three_days)
    assert seen_files[DAYS[2]] == other[DAYS[2]].extract_json
    assert {seen_files[d] for d in DAYS[:2]} == {after[d].extract_json for d in DAYS[:2]}


@pytest.mark.parametrize("taken", ["a file", "the directory"])
def test_what_another_publishers_prune_took_is_written_again(three_days: Settings, monkeypatch: pytest.MonkeyPatch,
                                                             taken: str) -> None:
    wh, window = Warehouse(), Window.of(DAYS[0], DAYS[1])
    after = _corrected(wh, "lost", window, 1)

    def prune_by_another(version: str) -> None:
        target = three_days.versions_dir / version
        if taken == "a file":
            (target / extracts.file_name(DAYS[0])).unlink()
        else:
            shutil.rmtree(target)

    with _spy(monkeypatch, prune_by_another) as seen:
        _publish(wh, "lost", window, after)
    lost = [extracts.file_name(DAYS[0])] if taken == "a file" else [extracts.file_name(d) for d in DAYS[:2]]
    assert sorted(seen.written_in_hold) == sorted(lost)
    seen_files = _extracts_match_ledger(three_days)
    assert seen_files[DAYS[0]] == after[DAYS[0]].extract_json


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


def test_superseded_versions_are_removed_after_the_commit_hold_unless_an_erasure_needs_them_gone_in_it(
        env: Settings, instance: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Removing a superseded extract version (a link per published day) grows with the published history: a
    publish does it after its hold (a review measured 173 ms of a one-day hold at 730 published days). Only an
    erasure removes them in the hold, so that no earlier version holding the erased lines outlives its commit."""
    from atlasmart_tests import evidence_edits

    monkeypatch.setenv("ATLASMART_VERSION_GRACE_S", "0")
    for day in DAYS:
        d = dt.date.fromisoformat(day)
        generate.write_raw(env.raw_dir, d, generate.synthetic_lines(d, 300, 20))
    held, pruned = _holds(monkeypatch), []
    real_prune = extracts.prune

    def prune(cfg: Settings, keep: set[str], immediately: bool = False, superseded: bool | None = None,
              **kwargs: Any) -> None:
        pruned.append((immediately, superseded, held[0] > 0))
        real_prune(cfg, keep, immediately, superseded, **kwargs)

    monkeypatch.setattr(extracts, "prune", prune)
    assert run_chain(instance, DAYS[0], DAYS[-1]).success
    assert run_chain(instance, DAYS[0], DAYS[-1], {"dagster/backfill": "bf-2", "atlasmart/rederive": "again"}).success
    assert (False, True, False) in pruned, pruned
    assert all(not in_hold for _, superseded, in_hold in pruned if superseded is not False), pruned
    wh = Warehouse()
    with wh.reader() as con:
        current = con.execute("select distinct publication_id from audit.current_publications").fetchall()
    assert sorted(p.name for p in env.versions_dir.iterdir()) != [] and extracts.resolve(env).name in {
        c[0] for c in current}
    pruned.clear()
    customer = json.loads((env.raw_dir / f"partition={DAYS[0]}.json").read_text())["lines"][0]["customer_id"]
    evidence_edits.deletion_request(env.raw_dir, "DR-1", customer_id=customer)
    assert run_chain(instance, DAYS[0], DAYS[-1], {"dagster/backfill": "bf-erase",
                                                   "atlasmart/accept_shrink": "erasure"}).success
    assert (True, None, True) in pruned, pruned
    assert [p.name for p in env.versions_dir.iterdir()] == [extracts.resolve(env).name], "only the current survives"


def test_a_prune_after_its_hold_leaves_what_later_publications_superseded_to_their_judgement(env, instance, published,
                                                                                            monkeypatch) -> None:
    """Grace 0. Publisher A judges what to keep in its hold and prunes after it; B and C commit in between, C's
    swap superseding B's version, one of the last 10 that B's and C's prunes keep: A's prune leaves it, superseded
    after A judged (a review found A's stale judgement deleting it)."""
    from atlasmart_assets import extracts as ext

    day = "2026-09-19"
    # A first publication supersedes no version: the grace cannot change what it leaves, only A's, B's and C's prunes.
    published((day, "2026-09-20"))
    monkeypatch.setenv("ATLASMART_VERSION_GRACE_S", "0")
    real, state_ = ext.prune, {"nested": False, "ids": []}

    def prune(cfg, keep, immediately=False, superseded=None, **kw):  # noqa: ANN001, ANN202
        if superseded is True and not state_["nested"] and not state_["ids"]:
            state_["nested"] = True
            try:
                with dg.DagsterInstance.ephemeral() as other:
                    for k in ("b", "c"):
                        assert run_chain(other, day, day, {"dagster/backfill": f"bf-{k}",
                                                           "atlasmart/rederive": k}).success
                        state_["ids"].append(ext.current_version(cfg))
            finally:
                state_["nested"] = False
        return real(cfg, keep, immediately, superseded, **kw)

    monkeypatch.setattr(ext, "prune", prune)
    assert run_chain(instance, day, day, {"dagster/backfill": "bf-a", "atlasmart/rederive": "a"}).success
    v_b, v_c = state_["ids"]
    assert ext.current_version(env) == v_c
    names = {p.name for p in env.versions_dir.iterdir()}
    assert v_b in names, (sorted(names), v_b)
