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
