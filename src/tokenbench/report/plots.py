"""Plots as slide-sized PNGs (``report --png DIR``), drawn with Matplotlib's Agg backend in the same colours,
line styles, scales and ticks as the page's interactive plots (``style.py``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from . import style
from .series import Plot

DPI = 150
#: Room above the highest point on a linear axis from 0, as a share of that point: a marker's half fits.
MARGIN = 0.06


def _figure(plot: Plot):  # type: ignore[no-untyped-def]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FixedLocator, NullLocator
    except ImportError:
        raise UsageError("PNG plots need Matplotlib: pip install 'tokenbench[report]'") from None
    plt.rcParams["text.parse_math"] = False  # "$5/h vs $7/h" is a label, not mathtext ("$x^$" used to crash)
    w, h = style.SLIDE_PX
    fig, ax = plt.subplots(figsize=(w / DPI, h / DPI), dpi=DPI, layout="constrained")  # room for the legend
    drawn = plot.drawn()
    for z, line in enumerate(drawn):  # PREDICTED first, measured on top
        c = style.colour(line.run)
        measured = not line.predicted
        shape = style.MPL_MARKER[style.marker(False, line.cache, line.run)]
        ax.plot(line.xs, line.ys, color=c, linestyle=style.MPL_DASH[style.dash(line.predicted, line.secondary)],
                linewidth=2.5 if measured else 1.8, marker=shape, markersize=7 if measured else 6,
                markerfacecolor=c if measured else "white", markeredgecolor=c, markeredgewidth=1.5,
                alpha=1.0 if measured else 0.8, label=line.name, zorder=(3 if measured else 2) + z / 100)
    if plot.logx and all(x > 0 for line in plot.lines for x in line.xs):
        ax.set_xscale("log", base=2 if plot.axis == "concurrency" else 10)
    vals, texts = plot.ticks()
    left, right = ax.get_xlim()  # 1-2-5 ticks may reach past the data: they must not widen the axis
    ax.xaxis.set_major_locator(FixedLocator(vals))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels(texts)
    ax.set_xlim(left, right)
    if plot.logy:
        ax.set_yscale("log")
        ticks = style.log_ticks(y for line in plot.lines for y in line.ys)
        lo, hi = ax.get_ylim()
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_yticklabels([f"{t:,g}" for t in ticks])
        ax.set_ylim(lo, hi)
    else:
        # Matplotlib's margin is 5% of the data's own span, none where values lie close: the top marker was cut
        top = max((y for line in plot.lines for y in line.ys), default=0.0)
        ax.set_ylim(0, max(ax.get_ylim()[1], top * (1 + MARGIN)) if top > 0 else None)
    ax.set_title(plot.title, loc="left", fontsize=15)
    ax.set_xlabel(plot.xlabel, fontsize=12)
    ax.set_ylabel(plot.ylabel + (" (log scale)" if plot.logy else ""), fontsize=12)
    ax.grid(True, which="major", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(handles)), key=lambda k: (drawn[k].run, drawn[k].cache == "busted", drawn[k].pct or ""))
    ax.legend([handles[k] for k in order], [labels[k] for k in order], fontsize=10, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig, plt


def png(plot: Plot, path: Path) -> None:
    fig, plt = _figure(plot)
    fig.savefig(path, format="png", dpi=DPI)
    plt.close(fig)
