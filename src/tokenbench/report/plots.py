"""Plots as SVG (for the HTML report) and PNG (for export), drawn with Matplotlib's Agg backend."""

from __future__ import annotations

import io
from pathlib import Path

from ..errors import UsageError
from .series import Plot


def _figure(plot: Plot):  # type: ignore[no-untyped-def]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("plots need Matplotlib: pip install 'tokenbench[report]'") from None
    plt.rcParams["svg.fonttype"] = "path"  # text as paths: no markup from result names reaches the SVG
    plt.rcParams["text.parse_math"] = False  # "$5/h vs $7/h" is a label, not mathtext ("$x^$" used to crash)
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    for i, line in enumerate(plot.lines):
        (h,) = ax.plot(line.xs, line.ys, marker="o", linestyle="--" if line.predicted else "-", label=line.name)
        h.set_gid(f"series-{i}")
    if plot.logx and all(x > 0 for line in plot.lines for x in line.xs):
        ax.set_xscale("log", base=2)
        ticks = sorted({x for line in plot.lines for x in line.xs})
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.set_title(plot.title)
    ax.set_xlabel(plot.xlabel)
    ax.set_ylabel(plot.ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig, plt


def svg(plot: Plot) -> str:
    fig, plt = _figure(plot)
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def png(plot: Plot, path: Path) -> None:
    fig, plt = _figure(plot)
    fig.savefig(path, format="png")
    plt.close(fig)
