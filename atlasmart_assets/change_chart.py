"""A publication's change chart (rows, gmv and cost before and after), drawn beside the publish's writes: the
audited candidates say what it will show before the publish starts, and a year's chart takes about a second of
one core, which the publish's DuckDB writes leave partly free."""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from types import TracebackType

from atlasmart_assets import capacity, chart
from atlasmart_assets.warehouse.ledger import Publication

# One materialization event stays under 64 KiB: the chart is drawn coarser until its markdown fits in 48 KiB.
MAX_CHART_BYTES = 48 * 1024

Values = tuple[float | None, ...]


@dataclass(frozen=True)
class ChartInputs:
    """Everything a change chart shows: two charts of equal inputs are the same picture."""

    days: tuple[str, ...]
    panels: tuple[tuple[str, Values, Values], ...]
    title: str
    unit: str
    alt: str


def inputs(pub: Publication) -> ChartInputs | None:
    """What `pub`'s chart shows (beyond a quarter, the mean per day of each week), or None when no day changed
    (only changes are drawn)."""
    if not pub.changed:
        return None
    days = sorted(pub.after)
    before = [pub.before.get(d) for d in days]
    after = [pub.after[d] for d in days]
    panels: dict[str, chart.Series] = {
        "rows": ([b.rows if b else None for b in before], [a.rows for a in after]),
        "gmv": ([b.controls[3] if b else None for b in before], [a.controls[3] for a in after]),
        "cost": ([b.controls[4] if b else None for b in before], [a.controls[4] for a in after]),
    }
    alt = "rows, gmv and cost before/after"
    title, unit = f"Publication {pub.publication_id} ({pub.window}): before vs after", "day"
    if len(days) > chart.DENSE_DAYS:
        days, panels = chart.weekly(days, panels)
        title, unit, alt = f"{title}, mean per day of each week", "week", f"{alt}, weekly means"
    return ChartInputs(tuple(days), tuple((name, tuple(b), tuple(a)) for name, (b, a) in panels.items()),
                       title, unit, alt)


def draw(spec: ChartInputs | None) -> str | None:
    """The chart as a markdown-embedded PNG that fits one event, or None (nothing changed, or no resolution fits)."""
    if spec is None:
        return None
    panels = {name: (list(b), list(a)) for name, b, a in spec.panels}
    # base64 takes 4 bytes per 3, plus the markdown around it.
    png = chart.fitting_png(list(spec.days), panels, spec.title,
                            max_bytes=(MAX_CHART_BYTES - len(spec.alt) - 40) * 3 // 4, unit=spec.unit)
    return chart.markdown_image(png, spec.alt) if png else None


def change_chart(pub: Publication) -> str | None:
    """`pub`'s change chart, drawn now."""
    return draw(inputs(pub))


def _lowered(niceness: int) -> None:
    with contextlib.suppress(OSError):  # a chart drawn at the step's own priority is no failure
        os.setpriority(os.PRIO_PROCESS, 0, niceness)  # on Linux, the calling thread's own


class DrawnAhead:
    """Draws the chart of the publication a correction announces (`start`, before its publish) on one thread,
    while the publish writes; `image(pub)` then takes it if the publication shows what was drawn, and draws again
    otherwise. Leaving the block waits for the thread, so no drawing outlives the step (or meets a fork). A
    backfill's thread runs at its scratch work's `niceness`: it draws while the publish may be waiting for today's
    load, which must not lose a core to it."""

    def __init__(self, niceness: int = 0) -> None:
        lowers = niceness > 0 and capacity.LOWERS
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="change-chart",
                                        initializer=_lowered if lowers else None, initargs=(niceness,) if lowers else ())
        self._ahead: tuple[ChartInputs, Future[str | None]] | None = None

    def __enter__(self) -> DrawnAhead:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._pool.shutdown(wait=True)

    def start(self, preview: Publication) -> None:
        try:
            spec = inputs(preview)
            if spec is not None:
                self._ahead = (spec, self._pool.submit(draw, spec))
        except Exception:  # noqa: BLE001 - never the publish's problem: image() draws again and reports it
            self._ahead = None

    def image(self, pub: Publication) -> str | None:
        spec = inputs(pub)
        if self._ahead is not None:
            drawing, done = self._ahead
            if drawing == spec:
                return done.result()
            wait([done])  # pyplot is not thread-safe: one chart at a time
        return draw(spec)
