"""The change chart of a publication (rows, gmv and cost per day, before and after), as markdown for its run's
event in the UI; drawn while the publish writes."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from atlasmart_assets.warehouse.ledger import Publication

# One materialization event stays under 64 KiB: the chart is drawn coarser until its markdown fits in 48 KiB.
MAX_CHART_BYTES = 48 * 1024


ChartInput = tuple[list[str], dict[str, tuple[list[Any], list[Any]]], str, str, str]  # days, panels, title, alt, unit


def chart_input(pub: Publication) -> ChartInput:
    """What the change chart draws: rows, gmv and cost per day before and after (weekly means past a quarter)."""
    from atlasmart_assets.chart import DENSE_DAYS, weekly

    days = sorted(pub.after)
    before = [pub.before.get(d) for d in days]
    after = [pub.after[d] for d in days]
    panels = {
        "rows": ([b.rows if b else None for b in before], [a.rows for a in after]),
        "gmv": ([b.controls[3] if b else None for b in before], [a.controls[3] for a in after]),
        "cost": ([b.controls[4] if b else None for b in before], [a.controls[4] for a in after]),
    }
    alt = "rows, gmv and cost before/after"
    title, unit = f"Publication {pub.publication_id} ({pub.window}): before vs after", "day"
    if len(days) > DENSE_DAYS:
        days, panels = weekly(days, panels)
        title, unit, alt = f"{title}, mean per day of each week", "week", f"{alt}, weekly means"
    return days, panels, title, alt, unit


def draw(drawn: ChartInput) -> str | None:
    """The chart as a markdown-embedded PNG (matplotlib costs half a second to import: only changes are drawn)."""
    from atlasmart_assets import chart

    days, panels, title, alt, unit = drawn
    # base64 takes 4 bytes per 3, plus the markdown around it.
    png = chart.fitting_png(days, panels, title, max_bytes=(MAX_CHART_BYTES - len(alt) - 40) * 3 // 4, unit=unit)
    return chart.markdown_image(png, alt) if png else None


def change_chart(pub: Publication) -> str | None:
    """The change chart of a publication."""
    return draw(chart_input(pub))


class ChartAhead:
    """The change chart drawn on a thread of its own while the publish writes (`start`, given the publication as it
    will commit), not after the commit: a year's chart is a second and a half of one core (two saves of the PNG)
    while DuckDB's write ahead leaves part of a core idle. `image` uses it only if the committed publication draws
    the same chart; otherwise (or if nothing was started) it draws the committed one."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="change-chart")
        self._ahead: Future[tuple[ChartInput, str | None]] | None = None

    def start(self, preview: Publication) -> None:
        def ahead() -> tuple[ChartInput, str | None]:
            drawn = chart_input(preview)  # imports matplotlib, on this thread too
            return drawn, draw(drawn)

        if preview.changed:
            self._ahead = self._pool.submit(ahead)

    def image(self, pub: Publication) -> str | None:
        if not pub.changed:
            return None
        if self._ahead is not None:
            drawn, image = self._ahead.result()
            if drawn == chart_input(pub):
                return image
        return change_chart(pub)

    def close(self) -> None:
        """A chart still drawing for a publish that did not commit finishes on its own; nothing waits on it."""
        self._pool.shutdown(wait=False, cancel_futures=True)
