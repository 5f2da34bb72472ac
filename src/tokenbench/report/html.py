"""One self-contained HTML file, laid out as the published write-ups are: the runs side by side (what ran,
the machine, its state and the flags), each pair compared row by row with the ratio, the winner, the
crossovers and the cost beside the speed, agent sessions turn by turn (warm beside busted), the interactive
plots, then each run's levels.

Nothing is fetched: the styles, plotly.js and the figures are all inline. Every name from a result is
escaped. A script checks, once the plots are drawn, that each one rendered and that every measured point
is drawn inside its plot and under no PREDICTED marker, and writes what it found on the figure
(``data-series``, ``data-measured-visible``) for a browser, or a test, to read.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from .. import __version__, session_view
from ..bootstrap import RESAMPLES
from ..guard_results import FAIL
from ..compare.levels import TIE, CompareRow, ratio_cell, ratio_head
from ..pricing import output_rate
from ..cells import level_label
from ..levels import LevelSummary, ServingLevel, of_depth, of_serving, serving
from ..results import RunResult
from ..sweep_table import notes as sweep_notes, per_agent_shown, tpot_unseen
from . import comparison, facts, figures, sessions, style
from .document import Report
from .series import Plot, is_predicted, pricing, run_name
from ..layout import plural

BOOT_SCRIPT = """
(function () {
  function rect(el) { return el.getBoundingClientRect(); }
  function centre(b) { return [b.left + b.width / 2, b.top + b.height / 2]; }
  function within(b, c) { return c[0] >= b.left - 1 && c[0] <= b.right + 1 && c[1] >= b.top - 1 && c[1] <= b.bottom + 1; }
  function check(fig, gd) {
    var area = rect(gd.querySelector('.nsewdrag'));
    var full = gd._fullData || [];
    var all = gd.querySelectorAll('.scatterlayer .trace');
    var per = gd.data.map(function (t, i) {
      var uid = full[i] && full[i].uid;
      var g = (uid && gd.querySelector('.scatterlayer .trace' + CSS.escape(uid))) || all[i];
      var shown = g && getComputedStyle(g).opacity !== '0' && getComputedStyle(g).visibility !== 'hidden';
      var boxes = g && shown ? Array.prototype.map.call(g.querySelectorAll('path.point'), rect) : [];
      return {run: t.meta.run, measured: t.meta.measured, expected: t.x.length,
              boxes: boxes.filter(function (b) { return b.width > 0 && b.height > 0; })};
    });
    var expected = 0, visible = 0, drawn = 0;
    per.forEach(function (s, i) {
      drawn += s.boxes.length;
      s.visible = s.boxes.filter(function (b) {
        var c = centre(b);
        if (!within(area, c)) return false;
        for (var j = i + 1; j < per.length; j++) {
          if (!per[j].measured && per[j].boxes.some(function (p) { return within(p, c); })) return false;
        }
        return true;
      }).length;
      if (s.measured) { expected += s.expected; visible += s.visible; }
    });
    fig.setAttribute('data-series', JSON.stringify(per.map(function (s) {
      return {run: s.run, measured: s.measured, expected: s.expected, drawn: s.boxes.length, visible: s.visible};
    })));
    fig.setAttribute('data-rendered-points', String(drawn));
    fig.setAttribute('data-measured-visible', visible + '/' + expected);
  }
  function boot() {
    var pending = [];
    document.querySelectorAll('figure.plot').forEach(function (fig) {
      var gd = fig.querySelector('.chart');
      if (typeof Plotly === 'undefined') { fig.setAttribute('data-error', 'plotly.js missing'); return; }
      var s = JSON.parse(fig.querySelector('script.spec').textContent);
      pending.push(Plotly.newPlot(gd, s.data, s.layout, s.config).then(
        function () { check(fig, gd); },
        function (e) { fig.setAttribute('data-error', String(e)); }));
    });
    Promise.all(pending).then(function () { document.body.setAttribute('data-ready', '1'); });
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot); else boot();
})();
"""

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 0.9em; }
th, td { border: 1px solid #d6d6d6; padding: 0.3em 0.6em; text-align: right; vertical-align: top; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
td:first-child { white-space: nowrap; }
table.sides td { text-align: left; max-width: 30em; }
table.sides th.run, table.cmp th.run { border-top: 5px solid var(--c); }
tr.group th { background: #f4f4f4; text-align: left; }
td.win { font-weight: 600; color: var(--c); } td.tie { color: #666; }
td.cheaper { font-weight: 600; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; border-radius: 2px; background: var(--c);
          vertical-align: -0.1em; margin-right: 0.35em; }
.predicted { color: #8a4b00; font-weight: 600; }
.dirty { color: #b00020; font-weight: 600; }
.callout { border-left: 4px solid #888; background: #f7f7f7; padding: 0.4em 0.8em; margin: 0.4em 0; }
.callout.crossover { border-color: #0072B2; background: #eef5fb; }
.callout.quality { border-color: #009E73; background: #eefaf5; }
.callout.warn { border-color: #c77700; background: #fff6e8; }
.meta { color: #555; font-size: 0.9em; }
.plots { display: grid; grid-template-columns: repeat(auto-fit, minmax(540px, 1fr)); gap: 1em; }
figure.plot { margin: 0; border: 1px solid #e3e3e3; border-radius: 4px; padding: 0.3em; }
figure.plot figcaption { font-size: 0.85em; color: #555; padding: 0 0.5em 0.3em; }
.chart { min-height: 460px; }
"""


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _swatch(i: int) -> str:
    return f'<span class="swatch" style="--c:{style.colour(i)}"></span>'


def _run_head(i: int, r: RunResult) -> str:
    cls = "run predicted" if is_predicted(r) else "run"
    return f'<th class="{cls}" style="--c:{style.colour(i)}">{_swatch(i)}{_e(run_name(r))}</th>'


def _sides(runs: list[RunResult], price: float | None, currency: str | None) -> str:
    cells = [facts.facts(r, price, currency) for r in runs]
    out = ['<table class="sides"><tr><th></th>' + "".join(_run_head(i, r) for i, r in enumerate(runs)) + "</tr>"]
    for key in facts.ROWS:
        if not any(key in c for c in cells):
            continue
        tds = []
        for c in cells:
            v = c.get(key, "—")
            cls = ' class="dirty"' if key == "Machine state" and v.startswith("DIRTY") else \
                ' class="predicted"' if v.startswith("PREDICTED") else ""
            tds.append(f"<td{cls}>{_e(v)}</td>")
        out.append(f"<tr><th class=\"text\">{_e(key)}</th>{''.join(tds)}</tr>")
    out.append("</table>")
    return "\n".join(out)


def _callouts(p: comparison.Pair, a: RunResult, b: RunResult, quality: dict[tuple[str, str], list[str]]) -> list[str]:
    """What a pair's table cannot say: notes, the boxes' quality, crossovers, and the effective time per task."""
    c = p.cmp
    parts = [f'<p class="callout warn">Note: {_e(w)}</p>' for w in c.warnings]
    parts += [f'<p class="callout quality"><b>Quality:</b> {_e(line)}</p>'
              for line in quality.get((a.run_id, b.run_id), [])]
    parts += [f'<p class="callout crossover"><b>Crossover:</b> {_e(x)}</p>' for x in c.crossovers]
    if c.effective:
        parts.append(f'<p class="callout">{comparison.AGENTS} agents × {comparison.TOKENS} output tokens each: '
                     + _e("; ".join(c.effective)) + "</p>")
    return parts


def _winner(p: comparison.Pair, r: CompareRow) -> str:
    """The faster side where the interval excludes 1, else "not significant"; a row with no interval says that
    the 5% rule decided it (compare.levels.verdict's words, with the run's name and colour)."""
    best = r.winner()
    if best == 0:
        said = "not significant" if r.interval is not None else "≈ tie (within the predicted bands)" \
            if r.band is not None else f"— ({_e(r.rule)})" if r.thin else f"≈ tie (within {TIE - 1:.0%}, no interval)"
        return f'<td class="text tie">{said}</td>'
    side = p.a if best == 1 else p.b
    name = p.cmp.a if best == 1 else p.cmp.b
    rule = "" if r.interval is not None else f" ({_e(r.rule)}, no interval)"
    return (f'<td class="text win" style="--c:{style.colour(side)}">{_swatch(side)}{_e(name)} '
            f"{r.factor():.2f}× {'faster' if r.higher_better else 'lower'}{rule}</td>")


def _cost_cells(p: comparison.Pair, r: CompareRow) -> list[str]:
    """Each side's cost per million output tokens at the row's rate; the cheaper one marked (same currency)."""
    ca, cb = p.cost(r)
    same = bool(p.price_a and p.price_b and p.price_a.currency == p.price_b.currency)
    cells = []
    for v, pr, other in ((ca, p.price_a, cb), (cb, p.price_b, ca)):
        if v is None or pr is None:
            cells.append("<td>—</td>" if r.metric not in comparison.OUTPUT_RATES else "<td>no price</td>")
            continue
        cls = ' class="cheaper"' if same and other is not None and v < other else ""
        cells.append(f"<td{cls}>{_e(style.number(v))} {_e(pr.currency)}/M</td>")
    return cells


def _table(head: list[str], rows: list[list[str]], text_cols: int = 1) -> str:
    """A plain table of text cells: the first ``text_cols`` columns left-aligned, the numbers right."""
    def cls(k: int) -> str:
        return TEXT if k < text_cols else ""

    out = ["<table><tr>" + "".join(f"<th{cls(k)}>{_e(h)}</th>" for k, h in enumerate(head)) + "</tr>"]
    out += ["<tr>" + "".join(f"<td{cls(k)}>{_e(c)}</td>" for k, c in enumerate(row)) + "</tr>" for row in rows]
    out.append("</table>")
    return "\n".join(out)


def _pair_sessions(p: comparison.Pair, runs: list[RunResult]) -> list[str]:
    """Two agent-session runs turn by turn at each concurrency both ran: TTFT p50 against context, warm and
    busted on each side (compare's session view, every turn)."""
    from ..compare.sessions import compare_sessions, session_level_table, session_turn_table
    from ..errors import UsageError

    try:
        sc = compare_sessions(runs[p.a], runs[p.b])
    except UsageError as e:
        return [f'<p class="meta">{_e(e)}.</p>']
    a, b = run_name(runs[p.a]), run_name(runs[p.b])

    def named(head: list[str]) -> list[str]:  # "A warm" -> "h100 warm": a page has room for the names
        return [f"{a}{h[1:]}" if h.startswith("A ") else f"{b}{h[1:]}" if h.startswith("B ") else h for h in head]

    parts = []
    for block in sc.blocks:
        head, rows = session_turn_table(block, every=True)
        parts.append(f"<h4>Agent sessions at concurrency {block.concurrency}: each turn's TTFT p50 (s)</h4>")
        parts.append(_table(named(head), rows))
        head, rows = session_level_table(block)
        parts.append(_table(named(head), rows))
        parts += [f'<p class="callout"><b>The cache\'s gain</b> on {_e(g)}</p>' for g in block.gains]
    return parts


def _sessions(runs: list[RunResult], price: float | None, currency: str | None) -> list[str]:
    """Each agent-session run: what the cache bought, each turn's TTFT against its context at each concurrency
    (warm beside busted), and each level's session time, cache share, throughput and cost."""
    parts = []
    for i, r in enumerate(runs):
        if not session_view.is_session_run(r):
            continue
        parts.append(f"<h3>{_swatch(i)}{_e(run_name(r))}</h3>")
        parts += [f'<p class="callout warn">Note: {_e(w)}</p>' for w in session_view.warnings(r)]
        parts += [f'<p class="callout"><b>The cache\'s gain</b> at {_e(g)}</p>' for g in sessions.gains(r)]
        for c in session_view.concurrencies(r):
            parts.append(f"<h4>Concurrency {c}: each turn</h4>")
            parts.append(_table(*sessions.turn_table(r, c)))
        parts.append("<h4>Each level</h4>")
        parts.append(_table(*sessions.level_table(r, pricing(r, price, currency))))
    if not parts:
        return []
    return ['<section id="sessions"><h2>Agent sessions</h2>',
            '<p class="meta">Each turn re-sends the whole conversation. Warm: the history re-sent as it is, for the '
            "server's prefix cache to serve. Busted: a marker at the start of every turn, so no cache serves it: "
            "the baseline that says what the cache bought. Turns are counted from 1; times are medians (p50) unless "
            "named. The cost of a session is the price of the hours its level held the box over the sessions it "
            "finished.</p>", *parts, "</section>"]


def _replays(runs: list[RunResult]) -> list[str]:
    """Each replay of recorded agents: its levels' trees, cache and validity in words, and TTFT against the
    context each call sent (its calls are a recording's, not the turns of one session)."""
    from ..replay_table import bin_rows, replay_lines

    parts = []
    for i, r in enumerate(runs):
        if not session_view.is_replay_run(r):
            continue
        parts.append(f"<h3>{_swatch(i)}{_e(run_name(r))}</h3>")
        for s in serving(o.summary for o in r.outcomes):
            parts += [f"<p>{_e(line)}</p>" for line in replay_lines(s)]
            if s.replay is not None and s.replay.by_context:
                parts.append(f"<h4>{_e(level_label(s))}: TTFT by the context a call sent, and by the tokens "
                             "prefilled</h4>")
                parts.append(_table(*bin_rows(s, markdown=True)))
    if not parts:
        return []
    return ['<section id="replays"><h2>Recorded agents, replayed</h2>', *parts, "</section>"]


def _pair(p: comparison.Pair, runs: list[RunResult], quality: dict[tuple[str, str], list[str]]) -> str:
    c = p.cmp
    a, b = runs[p.a], runs[p.b]
    parts = [f"<h3>{_swatch(p.a)}{_e(run_name(a))} vs {_swatch(p.b)}{_e(run_name(b))}</h3>",
             *_callouts(p, a, b, quality)]
    cost_head = ""
    if p.priced:
        cost_head = "".join(f'<th class="run" style="--c:{style.colour(i)}">{_e(run_name(r))}<br>'
                            f'{_e(pr.currency if pr else "")} per M output tokens</th>'
                            for i, r, pr in ((p.a, a, p.price_a), (p.b, b, p.price_b)))
    head = (f'<table class="cmp"><tr><th>Operating point</th>{_run_head(p.a, a)}{_run_head(p.b, b)}'
            f"<th>{_e(ratio_head(c.rows))}</th><th class=\"text\">Winner</th>{cost_head}</tr>")
    rows = [head]
    ncols = 5 + (2 if p.priced else 0)
    prompts = len({r.input_len for r in c.rows if r.test == "serve"})
    for metric, unit, group in p.groups():
        better = "higher" if group[0].higher_better else "lower"
        rows.append(f'<tr class="group"><th colspan="{ncols}">{_e(metric)} ({_e(unit)}, {better} is better)</th></tr>')
        for r in group:
            cells = [f'<td class="text">{_e(comparison.point(r, prompts))}</td>',
                     f"<td>{_e(style.number(r.a))} {_e(unit)}</td>", f"<td>{_e(style.number(r.b))} {_e(unit)}</td>",
                     f"<td>{_e(ratio_cell(r, '×'))}</td>", _winner(p, r), *(_cost_cells(p, r) if p.priced else [])]
            rows.append("<tr>" + "".join(cells) + "</tr>")
    rows.append("</table>")
    if session_view.is_session_run(a) and session_view.is_session_run(b):
        rows += _pair_sessions(p, runs)
    return "\n".join(parts + rows)


TEXT = ' class="text"'
Column = tuple[str, Callable[[LevelSummary], str | None]]


def _said(v: float | None) -> str | None:
    """A figure as the table prints it; None (an empty cell) where there is none, or it is 0."""
    return style.number(v) if v else None


def _p99(s: ServingLevel) -> str | None:
    """A level's TTFT p99, marked "*" over fewer than 100 requests, as the terminal's table marks it and the note
    under it says."""
    said = _said(s.ttft_ms.p99)
    return said + ("*" if s.ttft_ms.n and s.ttft_ms.n < 100 else "") if said else None


def _pm(v: float | None, sd: float | None) -> str | None:
    if not v:
        return None
    return style.number(v) + (f" ± {style.number(sd)}" if sd else "")


def _levels(r: RunResult, price: float | None, currency: str | None) -> str:
    pr = pricing(r, price, currency)
    cols: list[Column] = [
        ("Level", facts.level_name),
        # over each level's plateau where it held its load, as the terminal's table and the cost column
        ("Aggregate output (tok/s)", of_serving(lambda s: _said(s.sustained_tps))),
        ("Per-agent (tok/s)", of_serving(lambda s: _said(per_agent_shown(s)))),
        ("TTFT p50 (ms)", of_serving(lambda s: _said(s.ttft_ms.p50))),
        ("TTFT p99 (ms)", of_serving(_p99)),
        # "—" where the table withholds it (answers whole in one read), as the terminal's table says it
        ("TPOT p50 (ms)", of_serving(lambda s: "—" if tpot_unseen(s) else _said(s.tpot_ms.p50))),
        ("Prefill pp (tok/s)", of_depth(lambda s: _pm(s.pp_tps, s.pp_tps_sd))),
        ("Decode tg (tok/s)", of_depth(lambda s: _pm(s.tg_tps, s.tg_tps_sd))),
        (f"Cost ({pr.currency if pr else ''}/M output tokens)",
         lambda s: _said(pr.per_mtok(output_rate(s))) if pr else None),
        ("OK / failed (requests)", lambda s: s.ok_failed(" / ")),
        ("Flags", lambda s: ", ".join(s.flags) or None),
    ]
    levels = [o.summary for o in r.outcomes]
    table = [[get(s) for _, get in cols] for s in levels]
    keep = [k for k in range(len(cols)) if k == 0 or any(row[k] for row in table)]
    out = ["<table><tr>" + "".join(f"<th{TEXT if cols[k][0] in ('Level', 'Flags') else ''}>{_e(cols[k][0])}</th>"
                                   for k in keep) + "</tr>"]
    for row in table:
        out.append("<tr>" + "".join(f"<td{TEXT if cols[k][0] in ('Level', 'Flags') else ''}>{_e(row[k] or '')}</td>"
                                    for k in keep) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _guard(g: facts.GuardState) -> str:
    if not g.problems:
        return ""
    out = ['<table><tr><th class="text">Check</th><th class="text">Status</th><th class="text">Observed</th>'
           '<th class="text">Threshold</th><th class="text">Advice</th><th class="text">First seen</th>'
           "<th>Snapshots</th></tr>"]
    for where, name, status, observed, threshold, advice, n in g.problems:
        cls = "dirty" if status == FAIL else ""
        out.append(f'<tr><td>{_e(name)}</td><td class="text {cls}">{_e(status)}</td><td class="text">{_e(observed)}</td>'
                   f'<td class="text">{_e(threshold)}</td><td class="text">{_e(advice)}</td>'
                   f'<td class="text">{_e(where)}</td><td>{n} of {g.recorded}</td></tr>')
    out.append("</table>")
    return "\n".join(out)


def _figure(plot: Plot) -> str:
    return (f'<figure class="plot" id="{_e(plot.id)}" data-points="{plot.points}" '
            f'data-measured-points="{plot.measured_points}"><div class="chart"></div>'
            f'<script type="application/json" class="spec">{figures.script_json(figures.spec(plot))}</script>'
            f"<figcaption>{_e(plot.title)}: {_e(plot.ylabel)} against {_e(plot.xlabel)}"
            f"{'; log scale' if plot.logy else ''}.</figcaption></figure>")


def render(rep: Report) -> str:
    """The page: every value it shows comes from ``rep`` (document.report)."""
    runs, plots, price_per_hour, currency, title = rep.runs, rep.plots, rep.price_per_hour, rep.currency, rep.title
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{plural(len(runs), "run")}, written {rep.written} by tokenbench '
        f"{_e(__version__)}. Each run keeps its colour in every table and plot. Measured: solid lines, filled "
        "markers, drawn on top. PREDICTED: dashed lines, open markers. p50 solid, p99 dotted.</p>",
        '<section id="sides"><h2>The runs side by side</h2>', _sides(runs, price_per_hour, currency), "</section>",
    ]
    pairs, apart = rep.pairs, rep.apart
    if pairs or apart:
        parts.append('<section id="comparison"><h2>Comparison</h2>')
        parts.append(f'<p class="meta">A/B is the first run\'s value over the second\'s, with its 95% interval: a '
                     f"seeded bootstrap ({RESAMPLES:,} resamples) over each level's requests, or over its "
                     "repetitions where it was repeated. A run is named faster only where the interval excludes 1; "
                     "elsewhere the difference is not significant. A row with no interval (a side without samples: "
                     f"an import, a prediction) says so, and there a ratio within {TIE - 1:.0%} is a tie: a rule of "
                     "thumb, not a test. Cost per million output tokens is priced at each row's output rate.</p>")
        parts += [_pair(p, runs, rep.quality) for p in pairs]
        parts += [f'<p class="meta">{_e(x)}.</p>' for x in apart]
        parts.append("</section>")
    parts += _sessions(runs, price_per_hour, currency)
    parts += _replays(runs)
    if plots:
        w, h = style.SLIDE_PX
        parts.append('<section id="plots"><h2>Plots</h2>')
        parts.append(f'<p class="meta">Hover for values, drag to zoom (double-click resets), click a legend entry '
                     f"to hide or show a series; the camera button saves a {w}×{h} px PNG.</p>")
        parts.append('<div class="plots">' + "".join(_figure(p) for p in plots) + "</div></section>")
    parts.append('<section id="runs"><h2>Each run</h2>')
    for i, r in enumerate(runs):
        cls = ' class="predicted"' if is_predicted(r) else ""
        parts.append(f"<h3{cls}>{_swatch(i)}{_e(run_name(r))}</h3>")
        parts.append(f'<p class="meta">run {_e(r.run_id)}; {_e(facts.source(r))}; status {_e(r.status)}</p>')
        parts.append(_levels(r, price_per_hour, currency))
        if (said := facts.capacity_answer(r)) is not None:  # a capacity search: its answer, as the command said it
            parts += [f"<p><strong>{_e(x)}</strong></p>" for x in said.sentences]
            parts.append("<ul>" + "".join(f"<li>{_e(x)}</li>" for x in said.details) + "</ul>")
            parts += [_table(said.header, said.rows, text_cols=len(said.header)),
                      f'<p class="meta">{_e(said.legend)}</p>']
        g = facts.guard_state(r)
        guard = _guard(g)
        if guard:
            parts.append(f"<p>Machine state: {_e(g.summary())}</p>{guard}")
        # a serving run's notes as the terminal prints them under its table: each with its levels, a median TPOT
        # withheld and why, the servers' own figures; another kind's warnings as they are
        serve = serving(o.summary for o in r.outcomes)
        notes = sweep_notes(serve) if serve else list(dict.fromkeys(w for o in r.outcomes for w in o.summary.warnings))
        if notes:
            parts.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    parts.append("</section>")
    if plots:
        parts.append(f"<script>{figures.plotly_js()}</script>")
    parts.append(f"<script>{BOOT_SCRIPT}</script></body></html>")
    return "\n".join(parts)
