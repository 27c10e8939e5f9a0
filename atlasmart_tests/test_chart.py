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
    from atlasmart_assets.assets.correction import MAX_CHART_BYTES

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
