"""Rows and gmv per partition, before and after a correction, as a PNG an operator reads at a glance."""

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


Series = tuple[list[float | None], list[float]]


def before_after_png(days: list[str], panels: dict[str, Series], title: str, dpi: int = 90) -> bytes:
    """One panel per figure (rows, gmv, ...) with bars for now/before and after per partition."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(min(16.0, max(6.0, 0.5 * len(days) + 2)), 2.6 * len(panels)), sharex=True)
    x = range(len(days))
    width = 0.4
    for ax, (label, (now, after)) in zip(axes, panels.items()):
        ax.bar([i - width / 2 for i in x], [v or 0 for v in now], width, label="published now", color="#9aa5b1")
        ax.bar([i + width / 2 for i in x], after, width, label="after correction", color="#2f6fde")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(title, fontsize=10)
    step = max(1, len(days) // 30)
    axes[-1].set_xticks(list(x)[::step])
    axes[-1].set_xticklabels(days[::step], rotation=60, ha="right", fontsize=7)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    return buf.getvalue()


def markdown_image(png: bytes, alt: str) -> str:
    """Inline the PNG in markdown metadata, so the Dagster UI shows it without a file server."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
