"""Rows, gmv and cost per partition, before and after a correction, as a PNG an operator reads at a glance.

Per figure two panels: the values before (grey, hollow) and after (blue) on each day — a day without a value is a
gap, never a 0 — and below them the change (after − before) as bars, red when it fell and green when it rose,
labelled with its numbers (`435 → 425 (−10)`), so a small correction on a large total is as visible as a big one.
A day that has no value before is marked "new". The title wraps instead of being cut."""

from __future__ import annotations

import base64
import datetime as dt
import io
import math
import textwrap

import matplotlib
from PIL import Image

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

Series = tuple[list[float | None], list[float | None]]

BEFORE, AFTER, UP, DOWN, NEW = "#8a94a0", "#2f6fde", "#2e8b57", "#c0392b", "#7d3c98"
MAX_LABELS = 12          # delta labels drawn; beyond that only the largest changes are labelled
MAX_TICKS = 31
WIDTH_MAX = 18.0       # inches: wider than a UI pane helps no one
PALETTE = 64           # colours of the saved PNG (the palette keeps it about a quarter of full colour)
DENSE_DAYS = 92        # beyond a quarter, a chart shows weekly means (a marker and a bar per day are a smear)


def _num(x: float) -> str:
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


def _signed(x: float) -> str:
    return ("+" if x > 0 else "−" if x < 0 else "±") + _num(abs(x))


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def before_after_png(days: list[str], panels: dict[str, Series], title: str,
                     labels: tuple[str, str] = ("before", "after"), dpi: int = 90) -> bytes:
    """Per figure (rows, gmv, ...): values before/after per day, then the delta per day, labelled."""
    fig = _figure(days, panels, title, labels)
    try:
        return _png(fig, dpi)
    finally:
        plt.close(fig)


def fitting_png(days: list[str], panels: dict[str, Series], title: str, max_bytes: int, dpi: int = 90,
                min_dpi: int = 30, unit: str = "day") -> bytes | None:
    """The chart at the highest resolution (from `dpi` down to `min_dpi`) whose PNG fits in max_bytes, or None.
    Drawn and laid out once; a PNG's bytes grow about with its pixels (dpi squared), so each retry aims straight at
    the budget instead of stepping down (a year's figure costs about a second per save)."""
    fig = _figure(days, panels, title, ("before", "after"), unit)
    try:
        for _ in range(5):
            png = _png(fig, dpi)
            if len(png) <= max_bytes:
                return png
            # The layout is solved in inches (fonts are in points), so it holds at every resolution: solving it again
            # for each save was about a third of a retry's time, for the same picture.
            fig.set_layout_engine("none")
            dpi = min(dpi - 1, int(dpi * math.sqrt(max_bytes / len(png)) * 0.9))
            if dpi < min_dpi:
                return None
        return None
    finally:
        plt.close(fig)


def weekly(days: list[str], panels: dict[str, Series]) -> tuple[list[str], dict[str, Series]]:
    """The mean per day of each ISO week (labelled by the week's first day in the window), so a week the window
    cuts short is not a cliff. A week's before-value is unknown if any of its days had none, so a partly new week
    is shown as new, not as a jump."""
    weeks: dict[tuple[int, int], list[int]] = {}
    for i, day in enumerate(days):
        weeks.setdefault(dt.date.fromisoformat(day).isocalendar()[:2], []).append(i)
    labels = [f"wk {days[idx[0]]}" for idx in weeks.values()]

    def mean(values: list[float | None], idx: list[int]) -> float | None:
        picked = [values[i] for i in idx]
        return None if any(v is None for v in picked) else round(sum(picked) / len(picked), 2)  # type: ignore[arg-type]

    out = {name: ([mean(b, idx) for idx in weeks.values()], [mean(a, idx) for idx in weeks.values()])
           for name, (b, a) in panels.items()}
    return labels, out


def readable(days: list[str], panels: dict[str, Series], title: str) -> tuple[list[str], dict[str, Series], str, str]:
    """The days, panels, title and unit a chart of `days` shows: beyond DENSE_DAYS, the mean per day of each week
    (and the title says so)."""
    if len(days) <= DENSE_DAYS:
        return days, panels, title, "day"
    weeks, means = weekly(days, panels)
    return weeks, means, f"{title}, mean per day of each week", "week"


def _png(fig: plt.Figure, dpi: int) -> bytes:
    """The figure as a palette PNG: a chart has a handful of colours plus their anti-aliasing, and 64 palette
    entries keep it crisp at about a quarter of the bytes of full colour (what lets a year's chart fit one event).
    The canvas's pixels are quantized as drawn: encoding a full-colour PNG first, only to decode it, took about a
    quarter of a chart's time in a profile (the same pixels, the same bytes)."""
    fig.set_dpi(dpi)
    fig.canvas.draw()
    out = io.BytesIO()
    pixels = Image.frombuffer("RGBA", fig.canvas.get_width_height(physical=True), fig.canvas.buffer_rgba())
    pixels.convert("RGB").quantize(colors=PALETTE).save(out, format="PNG", optimize=True)
    return out.getvalue()


def _figure(days: list[str], panels: dict[str, Series], title: str, labels: tuple[str, str],
            unit: str = "day") -> plt.Figure:
    n = len(days)
    width = min(WIDTH_MAX, max(7.0, 0.42 * n + 3))
    fig = plt.figure(figsize=(width, 3.3 * len(panels) + 0.9), layout="constrained")
    grid = fig.add_gridspec(2 * len(panels), 1, height_ratios=[2.2, 1.1] * len(panels))
    x = list(range(n))
    step = max(1, math.ceil(n / MAX_TICKS))
    first = None
    for k, (label, (before, after)) in enumerate(panels.items()):
        ax = fig.add_subplot(grid[2 * k], sharex=first)
        first = first or ax
        dax = fig.add_subplot(grid[2 * k + 1], sharex=first)
        b, a = _nan(before), _nan(after)
        # Values: lines break at a missing day (NaN), markers show every known value.
        ax.plot(x, b, color=BEFORE, linestyle="--", marker="o", markerfacecolor="white", markersize=7,
                linewidth=1.2, label=labels[0])
        ax.plot(x, a, color=AFTER, marker="o", markersize=4.5, linewidth=1.6, label=labels[1])
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(labelbottom=False)
        ax.margins(y=0.25)
        # Delta: only days with both values; "new" where there was nothing before.
        deltas = [(i, ai - bi) for i, (bi, ai) in enumerate(zip(b, a)) if not (math.isnan(bi) or math.isnan(ai))]
        changed = [(i, d) for i, d in deltas if round(d, 6) != 0]
        dax.bar([i for i, _ in changed], [d for _, d in changed], width=0.6,
                color=[UP if d > 0 else DOWN for _, d in changed])
        dax.axhline(0, color="#444444", linewidth=0.8)
        dax.set_ylabel(f"Δ {label}")
        dax.grid(axis="y", alpha=0.3)
        span = max((abs(d) for _, d in changed), default=1.0)
        dax.set_ylim(-span * 1.9, span * 1.9)
        labelled = {i for i, _ in sorted(changed, key=lambda t: -abs(t[1]))[:MAX_LABELS]}
        # Labels sit on the other side of the zero line from their bar, so no label leaves the panel.
        for i, d in changed:
            if i in labelled:
                dax.annotate(f"{_num(b[i])} → {_num(a[i])}\n({_signed(d)})", (i, 0), xytext=(0, -3 if d > 0 else 3),
                             textcoords="offset points", ha="center", va="top" if d > 0 else "bottom", fontsize=7.5,
                             color=UP if d > 0 else DOWN)
        new = [i for i, (bi, ai) in enumerate(zip(b, a)) if math.isnan(bi) and not math.isnan(ai)]
        gone = [i for i, ai in enumerate(a) if math.isnan(ai)]
        # Each new or valueless day is marked while they are few; past MAX_LABELS the summary counts them.
        for marks, text, color in ((new, "new", NEW), (gone, "no value", BEFORE)):
            for i in marks if len(marks) <= MAX_LABELS else ():
                dax.annotate(text, (i, 0), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom",
                             fontsize=7, color=color)
        unchanged = len(deltas) - len(changed)
        summary = (f"{len(changed)} {unit}(s) changed" + (f", {unchanged} unchanged" if unchanged else "")
                   if changed else "no change" + (f" on {unchanged} {unit}(s)" if unchanged else ""))
        summary += f"; {len(new)} new" if new else ""
        dax.text(0.005, 0.97, summary, transform=dax.transAxes, fontsize=7.5, va="top", color="#444444")
        if k < len(panels) - 1:
            dax.tick_params(labelbottom=False)
        if k == 0:
            ax.legend(loc="upper right", fontsize=8, frameon=False)
    last = fig.axes[-1]
    pad = max(0.0, (4 - n) / 2)  # a day or two stay narrow instead of filling the width
    last.set_xlim(-0.6 - pad, n - 0.4 + pad)
    last.set_xticks(x[::step])
    last.set_xticklabels(days[::step], rotation=60 if n > 6 else 0, ha="right" if n > 6 else "center", fontsize=7.5)
    fig.suptitle(textwrap.fill(title, width=max(40, int(width * 11))), fontsize=10.5)
    return fig


def markdown_image(png: bytes, alt: str) -> str:
    """Inline the PNG in markdown metadata, so the Dagster UI shows it without a file server."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
