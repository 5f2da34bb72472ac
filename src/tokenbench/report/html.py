"""One self-contained HTML file: a summary table per run and inline SVG plots (no scripts or styles fetched)."""

from __future__ import annotations

import html
import json

from ..sweep import RunResult
from .series import Plot, is_predicted, run_name

# Counts the drawn points of every plot when the page loads, so a browser (and the tests) can see that
# each plot has data: every series is an SVG group "series-N" whose markers are <use> or <path> elements.
CHECK_SCRIPT = """
document.addEventListener('DOMContentLoaded', function () {
  document.querySelectorAll('figure.plot').forEach(function (f) {
    var n = 0;
    f.querySelectorAll('g[id^="series-"]').forEach(function (g) { n += g.querySelectorAll('use, path').length; });
    f.setAttribute('data-rendered-points', String(n));
  });
  document.body.setAttribute('data-ready', '1');
});
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.predicted { color: #8a4b00; font-weight: bold; }
figure.plot { margin: 1em 0; }
figure.plot svg { max-width: 100%; height: auto; }
.meta { color: #555; font-size: 0.9em; }
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _table(res: RunResult) -> str:
    rows = []
    for o in res.outcomes:
        s = o.summary
        cells = [s.test or "serve", s.depth or 0, s.concurrency or (f"{s.rate:g}/s" if s.rate else ""),
                 f"{s.output_throughput_tps:,.1f}" if s.output_throughput_tps else "",
                 f"{s.per_agent_tps:,.1f}" if s.per_agent_tps else "",
                 f"{s.ttft_ms.p50:,.0f}" if s.ttft_ms.p50 else "", f"{s.ttft_ms.p99:,.0f}" if s.ttft_ms.p99 else "",
                 f"{s.tpot_ms.p50:.1f}" if s.tpot_ms.p50 else "",
                 f"{s.pp_tps:,.1f}" if s.pp_tps else "", f"{s.tg_tps:,.1f}" if s.tg_tps else "",
                 ", ".join(s.flags)]
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    head = ["Test", "Depth", "Concurrency", "Aggregate tok/s", "Per-agent tok/s", "TTFT p50 ms", "TTFT p99 ms",
            "TPOT p50 ms", "pp tok/s", "tg tok/s", "Flags"]
    return "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>"


def render(runs: list[RunResult], plots: list[tuple[Plot, str]], title: str = "tokenbench report") -> str:
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{STYLE}</style>",
        f"<script>{CHECK_SCRIPT}</script></head><body>",
        f"<h1>{_e(title)}</h1>",
    ]
    for r in runs:
        m = r.manifest
        cls = ' class="predicted"' if is_predicted(r) else ""
        parts.append(f"<h2{cls}>{_e(run_name(r))}</h2>")
        meta = {k: m.get(k) for k in ("model", "weights", "engine", "engine_version", "hardware", "endpoint",
                                      "provenance", "started") if m.get(k)}
        parts.append(f'<p class="meta">{_e(json.dumps(meta))} — run {_e(r.run_id)}</p>')
        parts.append(_table(r))
    parts.append("<h2>Plots</h2><p class=\"meta\">Dashed lines are PREDICTED, solid lines measured.</p>")
    for plot, svg_text in plots:
        parts.append(f'<figure class="plot" id="{_e(plot.id)}" data-points="{plot.points}">{svg_text}'
                     f"<figcaption>{_e(plot.title)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)
