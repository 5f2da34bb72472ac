"""BENCHMARKS.md sections: one per run, between markers, so a re-run rewrites its own section only."""

from __future__ import annotations

import re
from pathlib import Path

from ..output import format_markdown, format_sweep_markdown, md_escape
from ..results import RunResult
from .series import run_name


def _heading(r: RunResult) -> list[str]:
    """The run's name, what ran, where it came from and when, and its workload."""
    m = r.manifest
    wl = m.workload or {}
    what = ", ".join(str(x) for x in (m.model, m.weights, m.engine, m.engine_version, *m.shape_parts,
                                      f"on {m.box}" if m.box else None) if x)
    lines = [f"<!-- tokenbench:run {r.run_id} -->", f"## {md_escape(run_name(r))}", "",
             md_escape(f"{what}; {m.provenance or 'measured'} {m.started or ''}".strip())]
    if wl.get("input_len"):
        lines.append(f"workload: {wl.get('input_len')} in / {wl.get('output_len')} out tokens")
    return lines + [""]


def section(r: RunResult) -> str:
    m = r.manifest
    levels = [o.summary for o in r.outcomes]
    lines = _heading(r)
    serve = [s for s in levels if (s.test or "serve") == "serve" and (s.output_throughput_tps or s.ttft_ms.p50)]
    bench = [s for s in levels if s.test and s.test != "serve"]
    if serve:
        lines.append(format_sweep_markdown(serve, m.currency or "USD"))
    if bench:
        rows = [[s.test or "", f"{s.depth or 0:,}",
                 f"{s.pp_tps or s.tg_tps:,.1f}" + (f" ± {(s.pp_tps_sd or s.tg_tps_sd):.1f}" if (s.pp_tps_sd or s.tg_tps_sd) else "")]
                for s in bench]
        lines.append(format_markdown(["Test", "Depth", "tok/s"], rows))
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
