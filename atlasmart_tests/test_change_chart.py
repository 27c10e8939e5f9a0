"""The change chart is drawn while the publish writes: from the publication the correction announces once its
audits pass, and used only if the publication shows what was drawn."""

import datetime as dt

from atlasmart_assets import change_chart, raw_load
from atlasmart_assets.change_chart import DrawnAhead
from atlasmart_assets.correction import correct
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.scope import RunInfo, RunScope
from atlasmart_assets.warehouse.ledger import Current, DayCandidate, Publication
from atlasmart_assets.window import Window


def _scope(run_id: str, start: str, end: str) -> RunScope:
    return RunScope(Window.of(start, end), RunInfo(run_id, f"bf-{run_id}"), "backfill", "2026-09-21", None)


def _publication(shift: int = 0, pub_id: str = "pub-new") -> Publication:
    days = [(dt.date(2026, 9, 1) + dt.timedelta(days=k)).isoformat() for k in range(5)]
    before = {d: Current(d, "pub-old", k, 100 + k + shift, [100 + k + shift, 1, 1, 50.0, 20.0, 30.0], "a" * 64, "{}",
                         None) for k, d in enumerate(days)}
    after = {d: DayCandidate(d, 101 + k, [101 + k, 1, 1, 51.0, 20.0, 31.0], "b" * 64, "{}") for k, d in enumerate(days)}
    return Publication(pub_id, "publish", Window.of(days[0], days[-1]), before, after, 0.0)


def test_a_correction_announces_its_publication_before_it_publishes_and_only_then(env, instance) -> None:
    wh = Warehouse()
    scope = _scope("chart-ahead", "2026-09-01", "2026-09-03")
    assert not any(a.blocks for a in raw_load.load(wh, scope).audits)
    seen: list[tuple[Publication, int]] = []

    def announced(preview: Publication) -> None:
        with wh.reader() as con:
            rows = con.execute("select count(*) from audit.publications where publication_id = $p",
                               {"p": preview.publication_id}).fetchone()[0]
        seen.append((preview, rows))

    outcome = correct(wh, scope, lambda _: True, on_publishing=announced)
    pub = outcome.publication
    assert pub is not None, [a.description for a in outcome.refused]
    [(preview, rows_then)] = seen
    assert rows_then == 0, "announced before its commit"
    assert preview.publication_id == pub.publication_id, "the publication announced is the one made"
    spec = change_chart.inputs(pub)
    assert spec is not None and change_chart.inputs(preview) == spec, "it shows what the publication changed"

    refused: list[Publication] = []
    scope = _scope("chart-refused", "2026-09-04", "2026-09-04")
    assert not any(a.blocks for a in raw_load.load(wh, scope).audits)
    outcome = correct(wh, scope, lambda _: True, on_publishing=refused.append,
                      adjust_staged=lambda con: con.execute("delete from candidate.staged_order_lines"))
    assert outcome.refused and outcome.publication is None and refused == [], "a refusal announces nothing"


def test_the_chart_drawn_ahead_is_used_only_for_the_publication_it_shows(monkeypatch) -> None:
    drawn: list[change_chart.ChartInputs | None] = []
    real_draw = change_chart.draw

    def counted(spec: change_chart.ChartInputs | None) -> str | None:
        drawn.append(spec)
        return real_draw(spec)

    monkeypatch.setattr(change_chart, "draw", counted)
    pub = _publication()
    with DrawnAhead() as ahead:
        ahead.start(pub)
        image = ahead.image(pub)
    assert image is not None and image == real_draw(change_chart.inputs(pub))
    assert drawn == [change_chart.inputs(pub)], "drawn once, beside the publish, not again after it"

    drawn.clear()
    moved = _publication(shift=7)  # another publisher moved the days' figures between the audit and the commit
    with DrawnAhead() as ahead:
        ahead.start(pub)
        image = ahead.image(moved)
    assert image == real_draw(change_chart.inputs(moved)), "the publication's own figures, not the preview's"
    assert drawn == [change_chart.inputs(pub), change_chart.inputs(moved)]

    drawn.clear()
    with DrawnAhead() as ahead:
        image = ahead.image(pub)
    assert image == real_draw(change_chart.inputs(pub)) and len(drawn) == 1, "nothing announced: drawn after"
    unchanged = Publication("pub-same", "publish", pub.window, pub.before,
                            {d: DayCandidate(d, c.rows, c.controls, c.sha256, "{}") for d, c in pub.before.items()},
                            0.0)
    drawn.clear()
    with DrawnAhead() as ahead:
        ahead.start(unchanged)
        assert ahead.image(unchanged) is None and drawn == [None], "no day changed: nothing is drawn"


def test_a_backfills_chart_is_drawn_at_its_scratch_works_lower_priority(monkeypatch) -> None:
    import os

    import pytest

    from atlasmart_assets import capacity

    if not capacity.LOWERS:
        pytest.skip("per-thread niceness is Linux's")
    seen: list[int] = []
    real_draw = change_chart.draw

    def noting(spec: change_chart.ChartInputs | None) -> str | None:
        seen.append(os.getpriority(os.PRIO_PROCESS, 0))
        return real_draw(spec)

    monkeypatch.setattr(change_chart, "draw", noting)
    caller = os.getpriority(os.PRIO_PROCESS, 0)
    target = capacity.niceness_of(10)
    pub = _publication()
    with DrawnAhead(target) as ahead:
        ahead.start(pub)
        assert ahead.image(pub) is not None
    assert seen == [target] and target > caller, "drawn on the lowered thread"
    assert os.getpriority(os.PRIO_PROCESS, 0) == caller, "the step's own priority never changes"
    seen.clear()
    with DrawnAhead() as ahead:  # today's load: the step's own priority
        ahead.start(pub)
        ahead.image(pub)
    assert seen == [caller]
