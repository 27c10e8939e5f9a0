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


def test_a_chart_saved_again_to_fit_its_budget_is_laid_out_once(monkeypatch) -> None:
    """A chart too large at the first resolution is saved again smaller; its layout (in inches) is not solved again
    for each save, and the smaller save is still a whole chart of the same proportions."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    layouts, saves = [], []
    solve, save = ConstrainedLayoutEngine.execute, chart._png
    monkeypatch.setattr(ConstrainedLayoutEngine, "execute", lambda self, fig: layouts.append(1) or solve(self, fig))
    monkeypatch.setattr(chart, "_png", lambda fig, dpi: saves.append(dpi) or save(fig, dpi))
    days = [f"2026-08-{d:02d}" for d in range(1, 20)]
    panels: dict[str, chart.Series] = {name: ([1000.0 + (d * 7919 % 13) for d in range(19)],
                                              [1000.0 + (d * 104729 % 11) for d in range(19)])
                                       for name in ("rows", "gmv", "cost")}
    first = chart.before_after_png(days, panels, "t")
    layouts.clear(), saves.clear()
    png = chart.fitting_png(days, panels, "t", max_bytes=len(first) * 2 // 3)
    assert png is not None and len(png) <= len(first) * 2 // 3
    assert len(saves) >= 2 and saves[-1] < saves[0], saves
    assert len(layouts) == 1, f"{len(layouts)} layouts for {len(saves)} saves"
    small, full = (matplotlib.image.imread(io.BytesIO(p)).shape for p in (png, first))
    assert small[0] < full[0] and abs(small[0] / small[1] - full[0] / full[1]) < 0.02
