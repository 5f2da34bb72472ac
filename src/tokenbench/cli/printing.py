"""A run as the command that made it prints it, and `show` prints it again: a sweep's or a capacity search's
serving levels (the table or Markdown, and where the run is saved), a cold start's boots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from ..console import print_table
from ..describe import describe_run, lengths_line
from ..levels import serving
from ..money import DEFAULT_CURRENCY
from ..results import RunResult
from ..sweep_table import format_sweep_markdown, print_sweep
from .common import saved


def print_result(console: Console, res: RunResult, fmt: str, db: Path, where: str = "saved in") -> None:
    levels = serving(o.summary for o in res.outcomes)
    currency = res.manifest.currency or DEFAULT_CURRENCY
    lengths = lengths_line(res.manifest)  # lengths that vary: the distribution or the dataset each level drew
    if fmt == "markdown":
        # the model, the engine and the workload (a replay's pause cap and length scale among them) head the
        # pasted table as they head the printed one: without them its numbers read as the recorded load's
        console.print(describe_run(res.manifest) + "\n", markup=False, highlight=False, soft_wrap=True)
        if lengths:
            console.print(lengths + "\n", markup=False, highlight=False, soft_wrap=True)
        console.print(format_sweep_markdown(levels, currency, res.kind == "predict"), markup=False, highlight=False, soft_wrap=True)
        from ..report.markdown import replay_part, session_part
        from ..session_view import is_replay_run, is_session_run

        # what the table view prints under the table (each turn, each replay's bins), as the report writes it
        views = replay_part(levels) if is_replay_run(res) else session_part(res) if is_session_run(res) else []
        if views:
            console.print("\n".join(views), markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(describe_run(res.manifest), style="dim", markup=False, highlight=False)
        if lengths:
            console.print(lengths, markup=False, highlight=False)
        print_sweep(console, levels, currency, f"{res.predicted_mark} (not measured)" if res.predicted_mark else None,
                    res.kind == "predict")
    saved(console, res, db, fmt, where)


def boot_rows(boots: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """A cold start's boots: the first is the cold one (nothing cached)."""
    rows = [[str(b["n"]) + (" (cold)" if b["n"] == 1 else ""), f"{b['healthy_s']:.2f} s",
             f"{b['first_token_s']:.2f} s" if b.get("first_token_s") is not None else "—"] for b in boots]
    return ["Boot", "Start -> healthy", "Start -> first token"], rows


def print_boots(console: Console, res: RunResult, fmt: str = "table") -> None:
    """A cold start as coldstart prints it and show prints it again: the model and engine, the boots, the first
    against the later ones."""
    from ..coldstart import boot_summary

    boots = res.manifest.boots or []
    console.print(describe_run(res.manifest), style="dim", markup=False, highlight=False)
    print_table(console, *boot_rows(boots), fmt)
    line = boot_summary(boots)
    if line:
        console.print(line, markup=False, highlight=False)
