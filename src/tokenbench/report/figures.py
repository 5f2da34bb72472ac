"""Interactive plots: Plotly figure specifications built from a ``Plot``, drawn in the page by plotly.js,
which the report inlines (no CDN): hover for the value and its unit, zoom, a legend that hides or shows a
run, a camera button that saves the plot as a slide-sized PNG.

Plotly reads names as a little HTML (``<b>``, ``<a href>``), so every name from a result is escaped here
and shown as text; the JSON is escaped again where it sits inside the page's ``<script>``.
"""

from __future__ import annotations

import html
import json
from typing import Any

from ..errors import UsageError
from . import style
from .series import Plot


def plotly_js() -> str:
    """The plotly.js bundle that the Python package ships, to inline into the page."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise UsageError("the HTML report needs Plotly: pip install 'tokenbench[report]'") from None
    # no "</script>" may end the inline script early
    return str(get_plotlyjs()).replace("</script", "<\\/script")


def _e(s: str) -> str:
    # Plotly turns &amp; &lt; &gt; back into text, but shows &quot; as typed: quotes stay as they are (no tag
    # can open without a "<")
    return html.escape(s, quote=False)


def spec(plot: Plot) -> dict[str, Any]:
    data = []
    for line in plot.drawn():
        c = style.colour(line.run)
        measured = not line.predicted
        text = line.labels if line.labels is not None else [plot.x_text(x) for x in line.xs]
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": _e(line.name),
            "x": line.xs, "y": line.ys, "text": [_e(t) for t in text],
            "hovertemplate": f"<b>%{{fullData.name}}</b><br>%{{text}}<br>%{{y:,.4~g}} {_e(plot.unit)}<extra></extra>",
            "line": {"color": c, "dash": style.dash(line.predicted, line.secondary), "width": 3 if measured else 2},
            "marker": {"color": c, "size": 10 if measured else 9,
                       "symbol": style.marker(line.predicted, line.cache, line.run), "line": {"color": c, "width": 2}},
            "opacity": 1.0 if measured else 0.8,
            "legendgroup": f"run-{line.run}",
            "legendrank": 100 + 10 * line.run + 2 * (line.cache == "busted") + line.secondary,
            "meta": {"run": line.run, "measured": measured},
        })
    tickvals, ticktext = plot.ticks()
    xaxis: dict[str, Any] = {"title": {"text": _e(plot.xlabel)}, "tickvals": tickvals, "ticktext": ticktext,
                             "type": "log" if plot.logx else "linear", "gridcolor": "#e6e6e6", "zeroline": False}
    logy = plot.logy
    yaxis: dict[str, Any] = {"title": {"text": _e(plot.ylabel + (" (log scale)" if logy else ""))},
                             "type": "log" if logy else "linear", "gridcolor": "#e6e6e6", "zeroline": False}
    if logy:
        ticks = style.log_ticks(y for line in plot.lines for y in line.ys)
        yaxis.update(tickvals=ticks, ticktext=[f"{t:,g}" for t in ticks])
    else:
        yaxis["rangemode"] = "tozero"
    layout = {
        "title": {"text": _e(plot.title), "x": 0.01, "xanchor": "left"},
        "xaxis": xaxis, "yaxis": yaxis, "hovermode": "closest",
        "legend": {"orientation": "h", "y": -0.22, "x": 0, "xanchor": "left", "yanchor": "top"},
        "margin": {"l": 70, "r": 45, "t": 50, "b": 40}, "height": 460,
        "modebar": {"orientation": "v"},  # at the right edge, clear of the title
        "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 13, "color": "#222"},
    }
    width, height = style.SLIDE_PX
    config = {"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"],
              "toImageButtonOptions": {"format": "png", "width": width, "height": height, "filename": plot.id}}
    return {"data": data, "layout": layout, "config": config}


def script_json(obj: Any) -> str:
    """JSON that can sit inside a <script> element: no "<", ">" or "&" for the HTML parser to see."""
    return (json.dumps(obj, allow_nan=False).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))
