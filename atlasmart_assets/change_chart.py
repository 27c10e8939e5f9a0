"""A publication's change chart: rows, gmv and cost before and after, as one markdown image that fits its event."""

from __future__ import annotations

from atlasmart_assets import chart
from atlasmart_assets.warehouse.ledger import Publication

# One materialization event stays under 64 KiB: the chart is drawn coarser until its markdown fits in 48 KiB.
MAX_CHART_BYTES = 48 * 1024


def change_chart(pub: Publication) -> str | None:
    """`pub`'s chart as a markdown-embedded PNG (beyond a quarter, the mean per day of each week), or None when no
    day changed (only changes are drawn) or no resolution fits."""
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
    days, panels, title, unit = chart.readable(days, panels, f"Publication {pub.publication_id} ({pub.window}): "
                                                             "before vs after")
    alt = "rows, gmv and cost before/after" + (", weekly means" if unit == "week" else "")
    # base64 takes 4 bytes per 3, plus the markdown around it.
    png = chart.fitting_png(days, panels, title, max_bytes=(MAX_CHART_BYTES - len(alt) - 40) * 3 // 4, unit=unit)
    return chart.markdown_image(png, alt) if png else None
