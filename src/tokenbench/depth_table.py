"""A depth run's table, as llama-bench prints its pp and tg rows: what ``depth`` and ``show`` print and the Markdown
report posts, from one row builder, so a flag is never left off one of them."""

from __future__ import annotations

from .layout import sig
from .levels import DepthLevel
from .results import RunResult
from .sweep_table import PREDICTED_FIGURES


def depth_notes(res: RunResult) -> list[str]:
    """The warnings of pp/tg rows, each once, with the rows it concerns (the Flags column names them)."""
    by_text: dict[str, list[str]] = {}
    for o in res.outcomes:
        for w in o.summary.warnings:
            by_text.setdefault(w, []).append(f"{o.summary.test} @ d{o.summary.depth}")
    return [f"[{', '.join(rows)}] {text}" for text, rows in by_text.items()]


def depth_rows(res: RunResult) -> tuple[list[str], list[list[str]]]:
    """pp/tg per depth, as llama-bench prints them; flags on the row they concern, never below the table only; a
    Concurrency column where a row ran more than one request at once (llama-benchy's ``(c2)``)."""
    predicted = res.predicted_mark is not None
    levels = [o.summary for o in res.outcomes if isinstance(o.summary, DepthLevel)]
    concurrent = any((s.concurrency or 1) > 1 for s in levels)
    head = ["Model", "Test", "Depth", *(["Concurrency"] if concurrent else []),
            f"t/s ({res.predicted_mark})" if predicted else "t/s", "Flags"]
    rows = []
    for s in levels:
        v, sd = (s.pp_tps, s.pp_tps_sd) if s.pp_tps is not None else (s.tg_tps, s.tg_tps_sd)
        # no spread where one repetition ran (llama-bench writes ± 0.00 for it); a prediction to the figures its
        # band supports
        value = "—" if v is None else sig(v, PREDICTED_FIGURES) if predicted else f"{v:,.2f}" if sd is None else \
            f"{v:,.2f} ± {sd:,.2f}"
        rows.append([res.manifest.model or "", f"{s.test} @ d{s.depth}", f"{s.depth or 0:,}",
                     *([str(s.concurrency or 1)] if concurrent else []), value,
                     ",".join(f for f in s.flags if f != "p99_estimate")])
    if not any(r[-1] for r in rows):
        head.pop()
        rows = [r[:-1] for r in rows]
    return head, rows
