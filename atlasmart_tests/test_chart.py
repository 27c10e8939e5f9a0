"""The before/after chart: missing values are gaps (never 0), a small correction is labelled, the title wraps."""

import io
import math

import matplotlib.image

from atlasmart_assets import chart


def test_missing_values_are_gaps_not_zero() -> None:
    assert [math.isnan(v) for v in chart._nan([None, 3.0, None])] == [True, False, True]


def test_the_lab_correction_is_drawn_with_its_delta_labelled() -> None:
    png = chart.before_after_png(["2026-09-20"], {"rows": ([8], [8]), "gmv": ([690], [690]), "cost": ([435], [425])},
                                 "Publication pub-1 (2026-09-20): before vs after")
    image = matplotlib.image.imread(io.BytesIO(png))
    assert image.shape[0] > image.shape[1] > 400
    assert chart._num(435) == "435" and chart._signed(425 - 435) == "−10"


def test_a_long_window_with_first_publications_and_a_long_title_renders() -> None:
    days = [f"2026-08-{d:02d}" for d in range(1, 32)]
    before = [None] * 5 + [float(d) for d in range(26)]
    after = [float(d) for d in range(31)]
    after[20] = None
    png = chart.before_after_png(days, {"rows": (before, after), "cost": (before, after)}, "t " * 120)
    assert png.startswith(b"\x89PNG")


def test_a_year_of_changes_fits_one_event_and_a_short_window_keeps_full_resolution() -> None:
    """The chart of a 365-day re-publish (a change every day) fits the budget of one materialization event; a
    3-day chart is not shrunk (it fits at the first resolution)."""
    from atlasmart_assets.change_chart import MAX_CHART_BYTES

    budget = MAX_CHART_BYTES * 3 // 4 - 100
    days = [f"d{k:03d}" for k in range(365)]
    panels: dict[str, chart.Series] = {
        "rows": ([20_000.0] * 365, [20_000.0 + (k % 7 == 0) * 5 for k in range(365)]),
        "gmv": ([6e6] * 365, [6e6 + k for k in range(365)]),
        "cost": ([None] * 365, [3e6] * 365)}
    png = chart.fitting_png(days, panels, "a year", max_bytes=budget)
    assert png is not None and len(png) <= budget
    short = {"rows": ([8.0, 8.0, 8.0], [8.0, 9.0, 8.0])}
    full = chart.before_after_png(days[:3], short, "three days")
    assert chart.fitting_png(days[:3], short, "three days", max_bytes=len(full)) == full


def test_a_years_correction_changing_every_day_is_charted_by_week_within_one_event() -> None:
    """A 365-day publication in which every day's rows, gmv and cost moved: beyond a quarter the chart shows the
    mean per day of each week (53 points, not 365 smeared markers) and still fits one event's budget."""
    import datetime as dt
    import random

    from atlasmart_assets.change_chart import MAX_CHART_BYTES, change_chart
    from atlasmart_assets.warehouse.ledger import Current, DayCandidate, Publication
    from atlasmart_assets.window import Window

    rng = random.Random(7)
    days = [(dt.date(2025, 9, 22) + dt.timedelta(days=k)).isoformat() for k in range(365)]
    before, after = {}, {}
    for k, day in enumerate(days):
        rows, gmv, cost = rng.randint(19_000, 21_000), rng.uniform(5.8e6, 6.2e6), rng.uniform(3.5e6, 3.7e6)
        before[day] = Current(day, "pub-old", k, rows, [rows, 1, 1, gmv, cost, gmv - cost], "a" * 64, "{}", None)
        rows2, gmv2, cost2 = rows + rng.randint(-90, 90), gmv + rng.uniform(-9e4, 9e4), cost + rng.uniform(-9e4, 9e4)
        after[day] = DayCandidate(day, rows2, [rows2, 1, 1, gmv2, cost2, gmv2 - cost2], "b" * 64, "{}")
    pub = Publication("pub-new", "publish", Window.of(days[0], days[-1]), before, after, 0.0)
    image = change_chart(pub)
    assert image is not None, "a year's chart is attached, not dropped"
    assert len(image) <= MAX_CHART_BYTES and image.startswith("![rows, gmv and cost before/after, weekly means]")
    labels, panels = chart.weekly(days, {"rows": ([1.0] * 365, [2.0] * 365)})
    assert len(labels) == 53 and labels[0] == "wk 2025-09-22" and panels["rows"][1][-1] == 2.0, \
        "a week the window cuts short is a mean, not a cliff"


def _publication(pub_id: str, shift: int = 0):  # noqa: ANN202
    import datetime as dt

    from atlasmart_assets.warehouse.ledger import Current, DayCandidate, Publication
    from atlasmart_assets.window import Window

    days = [(dt.date(2026, 9, 1) + dt.timedelta(days=k)).isoformat() for k in range(3)]
    before = {d: Current(d, "pub-old", k, 10, [10, 1, 1, 100.0, 50.0, 50.0], "a" * 64, "{}", None)
              for k, d in enumerate(days)}
    after = {d: DayCandidate(d, 10 + shift, [10 + shift, 1, 1, 101.0, 50.0, 51.0], "b" * 64, "{}") for d in days}
    return Publication(pub_id, "publish", Window.of(days[0], days[-1]), before, after, 0.0)


def test_a_chart_drawn_ahead_is_attached_only_if_the_commit_draws_the_same(monkeypatch) -> None:
    """The change chart is drawn on a thread of its own from the publication as it will commit; the committed
    publication takes that image only if it draws the same chart, and draws its own otherwise."""
    import dataclasses
    import threading

    from atlasmart_assets import change_chart

    drawn_on: list[tuple[str, str]] = []
    real = change_chart.draw

    def recording(drawn):  # noqa: ANN001, ANN202
        drawn_on.append((threading.current_thread().name, drawn[2]))
        return real(drawn)

    monkeypatch.setattr(change_chart, "draw", recording)
    same = change_chart.ChartAhead()
    same.start(_publication("pub-1"))
    image = same.image(_publication("pub-1"))
    same.close()
    assert image == real(change_chart.chart_input(_publication("pub-1")))
    assert [name.startswith("change-chart") for name, _ in drawn_on] == [True], drawn_on

    drawn_on.clear()
    moved = change_chart.ChartAhead()
    moved.start(_publication("pub-2"))
    image = moved.image(_publication("pub-2", shift=1))
    moved.close()
    assert image == real(change_chart.chart_input(_publication("pub-2", shift=1)))
    assert [name.startswith("change-chart") for name, _ in drawn_on] == [True, False], drawn_on

    drawn_on.clear()
    unchanged = _publication("pub-3")
    unchanged = dataclasses.replace(unchanged, after={d: dataclasses.replace(c, sha256=unchanged.before[d].sha256)
                                                      for d, c in unchanged.after.items()})
    nothing = change_chart.ChartAhead()
    nothing.start(unchanged)
    assert nothing.image(unchanged) is None and drawn_on == [], "no change, no chart"
    nothing.close()


def test_a_runs_change_chart_is_started_before_its_commit_and_names_it(env, instance, monkeypatch) -> None:
    """In a run, the chart is started when the publish begins (the ledger does not hold the publication yet), on its
    own thread, and the chart attached is the committed publication's."""
    import threading

    from atlasmart_assets import change_chart
    from atlasmart_assets.lab import run_chain
    from atlasmart_assets.resources import Warehouse

    seen: list[tuple[str, int]] = []
    titles: list[tuple[str, str]] = []
    start, draw = change_chart.ChartAhead.start, change_chart.draw

    def starting(self, preview):  # noqa: ANN001, ANN202
        with Warehouse().reader() as con:
            seen.append((preview.publication_id, con.execute(
                "select count(*) from audit.publications where publication_id = $p",
                {"p": preview.publication_id}).fetchone()[0]))
        return start(self, preview)

    def drawing(drawn):  # noqa: ANN001, ANN202
        titles.append((threading.current_thread().name, drawn[2]))
        return draw(drawn)

    monkeypatch.setattr(change_chart.ChartAhead, "start", starting)
    monkeypatch.setattr(change_chart, "draw", drawing)
    result = run_chain(instance, "2026-09-18", "2026-09-19", {"dagster/backfill": "bf-chart"})
    assert result.success
    [(pub_id, in_ledger)] = seen
    assert in_ledger == 0, "started before the commit"
    with Warehouse().reader() as con:
        assert con.execute("select count(distinct publication_id) from audit.publications where publication_id = $p",
                           {"p": pub_id}).fetchone()[0] == 1
    assert len(titles) == 1 and titles[0][0].startswith("change-chart") and pub_id in titles[0][1], titles
    marts = [m for m in result.asset_materializations_for_node("correction") if "change_chart" in m.metadata]
    assert len(marts) == 1 and marts[0].metadata["publication_id"].value == pub_id
