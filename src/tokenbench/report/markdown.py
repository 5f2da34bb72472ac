"""BENCHMARKS.md sections: one per run, between markers, so a re-run rewrites its own section only."""

from __future__ import annotations

import re
from pathlib import Path

from .. import session_view
from ..cells import level_label
from ..session_view import is_replay_run
from ..depth_table import depth_notes, depth_rows
from ..levels import ServingLevel, depth_levels, serving
from ..replay_table import BY_CALL_TITLE, bin_rows, call_rows, replay_heading, replay_lines
from ..session_table import over_time
from ..layout import format_markdown, md_escape
from ..predict.banding import one_line
from ..sweep_table import format_sweep_markdown
from ..results import RunResult
from . import facts, sessions
from .series import pricing, run_name


def _heading(r: RunResult) -> list[str]:
    """The run's name, what ran, where it came from and when, and its workload."""
    m = r.manifest
    wl = m.workload or {}
    what = ", ".join(str(x) for x in (m.model, m.weights, m.engine, m.engine_version, *m.shape_parts,
                                      f"on {m.box}" if m.box else None) if x)
    lines = [f"<!-- tokenbench:run {r.run_id} -->", f"## {md_escape(run_name(r))}", "",
             md_escape(f"{what}; {m.provenance or 'measured'} {m.started or ''}".strip())]
    if wl.get("kind") == "replay":
        lines.append(md_escape(f"workload: {replay_heading(wl)}"))
    elif said := facts.workload(r):
        lines.append(md_escape(f"workload: {said}"))
    if m.bands:  # a prediction's, as predict printed them
        lines.append(md_escape(one_line(m.bands)))
    return lines + [""]


def session_part(r: RunResult) -> list[str]:
    """An agent-session run: what the cache bought, each turn at each concurrency, each level's session time,
    and a soak's cached share and turn TTFT over its tenths."""
    lines = ["", "### Agent sessions", "", "Warm: the history re-sent for the prefix cache to serve; busted: a marker "
             "at the start of every turn, so no cache serves it. Turns are counted from 1.", ""]
    lines += [md_escape(f"- the cache's gain at {g}") for g in sessions.gains(r)]
    lines += [md_escape(f"- note: {w}") for w in session_view.warnings(r)]
    for c in session_view.concurrencies(r):
        lines += ["", f"Concurrency {c}:", "", format_markdown(*sessions.turn_table(r, c))]
    lines += ["", format_markdown(*sessions.level_table(r, pricing(r)))]
    soaks = [(s, over) for s in serving(o.summary for o in r.outcomes) if (over := over_time(s))]
    for s, over in soaks:
        lines += ["", md_escape(f"{level_label(s)}, over time:"), ""] + [md_escape(f"- {line.strip()}") for line in over]
    return lines


def replay_part(levels: list[ServingLevel]) -> list[str]:
    """A replay of recorded agents: each level's trees, cache and validity, and TTFT against context."""
    lines = ["", "### Recorded agents, replayed", ""]
    lines += [md_escape(f"- {line}") for s in levels for line in replay_lines(s)]
    for s in levels:
        if s.replay is not None and s.replay.by_context:
            lines += ["", md_escape(f"{level_label(s)}: TTFT by the context a call sent, and by the tokens prefilled:"),
                      "", format_markdown(*bin_rows(s, markdown=True))]
        if s.replay is not None and s.session is not None and any(t.n for t in s.session.turns):
            lines += ["", md_escape(f"{level_label(s)}: {BY_CALL_TITLE}:"), "", format_markdown(*call_rows(s))]
    return lines


def section(r: RunResult) -> str:
    m = r.manifest
    levels = [o.summary for o in r.outcomes]
    lines = _heading(r)
    serve = [s for s in serving(levels) if s.output_throughput_tps or s.ttft_ms.p50]
    bench = depth_levels(levels)
    if serve:
        lines.append(format_sweep_markdown(serve, m.currency or "USD", r.kind == "predict"))
    if bench:  # the rows depth and show print, flags and all: a held-back rate is '—', a doubted one flagged
        head, rows = depth_rows(r)
        lines.append(format_markdown(head[1:], [row[1:] for row in rows]))  # the model: in the line above
        lines += [md_escape(f"- {note}") for note in depth_notes(r)]
    if (said := facts.capacity_answer(r)) is not None:
        lines += ["", "### Capacity", ""] + [md_escape(x) + "\n" for x in said.sentences] + \
            [md_escape(f"- {x}") for x in said.details] + \
            ["", format_markdown(said.header, said.rows), "", md_escape(said.legend)]
    if is_replay_run(r):
        lines += replay_part(serve)
    elif session_view.is_session_run(r):
        lines += session_part(r)
    lines += ["", f"<!-- /tokenbench:run {r.run_id} -->"]
    return "\n".join(lines)


def write(path: Path, runs: list[RunResult]) -> None:
    """Append each run's section, or rewrite it in place where the file already has it."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    for r in runs:
        sec = section(r)
        pat = re.compile(rf"<!-- tokenbench:run {re.escape(r.run_id)} -->.*?<!-- /tokenbench:run {re.escape(r.run_id)} -->",
                         re.S)
        if pat.search(text):
            text = pat.sub(lambda _m: sec, text)
        else:
            text = text.rstrip("\n") + "\n\n" + sec + "\n"
    path.write_text(text)
