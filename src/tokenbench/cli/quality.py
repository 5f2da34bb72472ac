"""quality: run quality tasks on an endpoint (or the embedded engine), compare two runs, check a knob."""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from rich.console import Console

from .. import redact
from ..errors import LevelFailed, TokenbenchError, UsageError
from ..results import Manifest, RunResult
from ..servers import normalize_base_url
from ..store import RunRow, Store
from .common import (check_output, embedded_spec, emit_json, int_list, json_object, notifier, run_exit, saved,
                     seconds, tokens)
from .grammar.quality import EMBEDDED_CONTEXTS, REMOTE_CONTEXTS

if TYPE_CHECKING:
    from ..engines.embedded import Embedded
    from ..quality.agreement import AgreementVerdict
    from ..quality.items import Item
    from ..quality.parity import TaskComparison
    from ..quality.runner import QualityConfig


# --- handlers ---------------------------------------------------------------------------------------------

def _config(a: argparse.Namespace, argv: list[str], tasks: list[str]) -> QualityConfig:
    from ..quality.runner import QualityConfig

    embedded = a.url is None
    contexts_text = getattr(a, "contexts", None) or (EMBEDDED_CONTEXTS if embedded else REMOTE_CONTEXTS)
    contexts = [tokens(c, "--contexts") for c in contexts_text.split(",") if c.strip()]
    depths = int_list(getattr(a, "depths", None) or "10,50,90", "--depths") if hasattr(a, "depths") else [10, 50, 90]
    if any(d > 100 for d in depths):
        raise UsageError("--depths are percents of the context, from 1 to 100")
    extra = json_object(getattr(a, "extra_body", None), "--extra-body")
    return QualityConfig(
        url=normalize_base_url(a.url) if a.url else "", tasks=tasks, model=a.model, api=a.api,
        api_key=a.api_key or os.environ.get("OPENAI_API_KEY"), tokenizer=a.tokenizer,
        label=a.label or (f"embedded-{a.engine}" if embedded else socket.gethostname()),
        contexts=contexts, depths=depths, items=a.items, max_tokens=a.max_tokens,
        timeout_s=seconds(a.timeout, "--timeout") or 300.0, seed=a.seed, temperature=a.temperature,
        extra_body=extra, limit=getattr(a, "limit", None), command=redact.command(["tokenbench", *argv]))


def _tasks(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError("--tasks is empty: e.g. --tasks niah,agreement")
    if len(set(names)) < len(names):
        raise UsageError(f"--tasks '{text}' names a task twice")
    return names


def _embedded(a: argparse.Namespace, cfg: QualityConfig, err: Console) -> AbstractContextManager[Embedded | None]:
    """The embedded engine for a run without --url, sized for its longest prompt; stopped on exit."""
    from ..engines.embedded import MIN_CONTEXT, running, slot_context

    spec = embedded_spec(a)
    longest = (max(cfg.contexts) if "niah" in cfg.tasks else 1024) if spec else 0
    if spec and "niah" in cfg.tasks:
        _fits_the_embedded_model(longest, cfg.max_tokens)
    return running(spec, cfg, notifier(err), parallel=1,
                   ctx=slot_context(longest + cfg.max_tokens, margin=256) if spec else MIN_CONTEXT)


#: Tokens a needle cell needs beside its haystack: the answer's and the prompt's own (a BOS, a chat template).
TEMPLATE_TOKENS = 64


def _fits_the_embedded_model(context: int, max_tokens: int) -> None:
    """The embedded model reads at most its trained context: a needle cell larger than that was sent and refused
    by the server (llama-server caps a slot at it: "8193 tokens exceeds the available context size (8192)")."""
    from ..engines.tiny import CONFIG

    limit = int(CONFIG["max_position_embeddings"])
    if context + max_tokens + TEMPLATE_TOKENS > limit:
        raise UsageError(f"--contexts {context:,}: the embedded model reads at most {limit:,} tokens, and a needle "
                         f"cell needs its context, {max_tokens:,} to answer (--max-tokens) and {TEMPLATE_TOKENS} for "
                         f"the template: give contexts up to {limit - max_tokens - TEMPLATE_TOKENS:,} tokens, or "
                         "--url a server of a longer model")


def cmd_quality(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    check_output(getattr(a, "json", None), "--json")
    if a.quality_command == "compare":
        return _compare(a, console)
    if a.quality_command == "knob":
        return _knob(a, argv, console, err)
    from ..quality.runner import check_tasks, run_quality

    tasks = _tasks(a.tasks)
    check_tasks(tasks)  # a name lm-eval does not know is refused before the embedded engine starts
    cfg = _config(a, argv, tasks)
    store = Store(a.db)
    try:
        with _embedded(a, cfg, err):
            res = run_quality(cfg, store, notifier(err))
    except TokenbenchError as e:  # an interrupt or an error after the run was stored: what it finished, shown
        if e.result is not None:
            print_quality_run(console, e.result, store, a.format)
            if a.json:
                emit_json(a.json, e.result.to_json())
        raise
    print_quality_run(console, res, store, a.format)
    if a.json:
        emit_json(a.json, res.to_json())
    return run_exit(res)


def _count(tokens: int | None) -> str:
    """A token count as the progress lines write it (65,518); a dash where none was said (a server that failed
    the item counted nothing)."""
    return "—" if tokens is None else f"{tokens:,}"


def _s(ms: float | None) -> str:
    return "—" if ms is None else f"{ms / 1000:.2f} s"


def print_quality_run(console: Console, res: RunResult, store: Store, fmt: str, where: str = "saved in") -> None:
    """A quality run's tasks (its manifest's ``summary``), its needle grid and where it is saved: after the run,
    after an interrupt or an error, and by `show` (``where``: "from")."""
    _print_tasks(console, res.manifest.summary or {}, res.items, fmt)
    saved(console, res, store.path, fmt, where)


def _print_tasks(console: Console, summary: dict[str, Any], items: list[Item], fmt: str) -> None:
    from ..console import print_table

    rows = []
    for task, t in summary.items():
        score = "—" if t["score"] is None or task == "agreement" else f"{100 * t['score']:.1f}"
        rows.append([task, str(t["items"]), str(t["pass"]), str(t["fail"]), str(t["timeout"]), str(t["error"]),
                     score, _s(t["latency_ms_median"])])
    print_table(console, ["Task", "Items", "Pass", "Fail", "Timeout", "Error", "Score", "Median time"], rows, fmt)
    niah = [it for it in items if it.task == "niah"]
    if niah:
        depths = sorted({it.detail["depth"] for it in niah})
        grid: dict[int, dict[int, Item]] = {}
        for it in niah:
            grid.setdefault(it.detail["context"], {})[it.detail["depth"]] = it
        head = ["Context", *[f"{d}%" for d in depths], "Prompt tokens sent / counted by the server"]
        body = []
        for ctx, cells in grid.items():
            row = [f"{ctx:,}"]
            for d in depths:
                cell = cells.get(d)
                row.append("—" if cell is None else f"{cell.status} {_s(cell.latency_ms)}")
            sent = [f"{_count(c.expected_prompt_tokens)}/{_count(c.prompt_tokens)}"
                    + ("" if c.detail.get("usage_check") in ("ok", "absent") else f" {c.detail['usage_check']}")
                    for c in cells.values()]
            row.append(", ".join(sent))
            body.append(row)
        print_table(console, head, body, fmt, title="needle in a haystack: pass/fail/timeout and time per cell")
        if any(c.detail.get("usage_check") == "truncated" for c in niah):
            console.print("the server counted fewer prompt tokens than were sent: it truncated the context, so a "
                          "failed cell may never have seen its needle", style="yellow", markup=False)


def _compare(a: argparse.Namespace, console: Console) -> int:
    from ..console import print_table
    from ..quality.parity import compare_runs, overall

    store = Store(a.db, readonly=True)
    ra, rb, cmp, floor = compare_runs(store, a.a, a.b, a.latest, a.floor)
    la, lb = ra.label or ra.id, rb.label or rb.id
    if la == lb:
        la, lb = ra.id, rb.id
    line = overall(cmp, la, lb)
    if not line.judged:  # nothing to judge by: a refusal, not a verdict
        raise UsageError(f"runs {la} and {lb}: {line.text}")
    ma, mb = Manifest.from_dict(ra.manifest), Manifest.from_dict(rb.manifest)
    for w in quality_warnings(ra, rb, ma, mb, la, lb):
        console.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    console.print(f"A: {la} ({ra.id}, {ma.engine or '?'}, {ma.model})\n"
                  f"B: {lb} ({rb.id}, {mb.engine or '?'}, {mb.model})",
                  style="dim", markup=False, highlight=False)
    md = a.format == "markdown"  # a paragraph whole (a wrapped line is two), a line after a table a blank apart
    console.print(f"verdict: {line.text}" + ("\n" if md else ""), style=None if line.same else "bold", markup=False,
                  highlight=False, soft_wrap=md)
    rows = _score_rows(cmp, la, lb)
    if rows:
        print_table(console, ["Task", "Items", "A", "B", "A-B points [95% CI]", "p", "Score verdict",
                             "Items for ±2 pts"],
                    rows, a.format)
    agree = _agreement_rows(cmp)
    if agree:
        if rows and a.format == "markdown":
            console.print()
        print_table(console, ["Task", "Pairs", "Identical outputs", "95% CI", "First difference (median)",
                              "Output length", "Floor", "p", "Output verdict"], agree, a.format,
                    title="agreement of outputs")
        console.print(("\n" if md else "") + floor.describe({ra.id: la, rb.id: lb}), style="dim", markup=False,
                      highlight=False, soft_wrap=md)
    for tc in cmp:
        for n in tc.notes:
            console.print(f"{tc.task}: {n}", style="yellow", markup=False, highlight=False, soft_wrap=md)
    if a.json:
        emit_json(a.json, {"a": {"run_id": ra.id, "label": ra.label}, "b": {"run_id": rb.id, "label": rb.label},
                           "verdict": line.to_dict(),
                           "floor": {"runs": list(floor.runs) if floor.runs else None, "given": floor.given,
                                     "text": floor.describe({ra.id: la, rb.id: lb})},
                           "tasks": [tc.to_dict() for tc in cmp]})
    return 0


def _score_rows(cmp: list[TaskComparison], la: str, lb: str) -> list[list[str]]:
    """Each task with scores: its items, both scores, the difference with its interval, p, the verdict and the
    items a 2-point difference would need."""
    rows = []
    for tc in cmp:
        s = tc.scores
        if s is None:
            continue
        timeouts = f" ({tc.timeouts[0]}/{tc.timeouts[1]} timeouts)" if any(tc.timeouts) else ""
        rows.append([tc.task, str(s.n), f"{s.mean_a * 100:.1f}", f"{s.mean_b * 100:.1f}",
                     f"{s.diff_points:+.1f} [{s.ci_points[0]:+.1f}, {s.ci_points[1]:+.1f}]", f"{s.p_value:.3g}",
                     s.verdict_for(la, lb) + timeouts, f"{s.items_needed:,}" if s.items_needed else "—"])
    return rows


def _agreement_rows(cmp: list[TaskComparison]) -> list[list[str]]:
    """Each task with paired outputs: the pairs, those identical, their interval, the first difference, the
    outputs' length, and the floor's cells."""
    return [[tc.task, str(g.n), f"{g.identical} ({g.share:.0%})",
             f"{100 * g.interval[0]:.0f}-{100 * g.interval[1]:.0f}%",
             "—" if g.first_diff_median is None else f"{g.first_diff_median:g} {g.unit}",
             f"{g.mean_length:.0f} {g.unit}", *_floor_cells(tc.agreement_verdict)]
            for tc in cmp if (g := tc.agreement) is not None]


def quality_warnings(ra: RunRow, rb: RunRow, ma: Manifest, mb: Manifest, la: str, lb: str) -> list[str]:
    """What the verdict below cannot say of the boxes alone: two models or weight formats (a difference is then
    theirs as much as the boxes'), a run that did not finish (only the items both answered are compared)."""
    from ..compare.sides import model_warnings

    out = model_warnings(ma, mb, "a difference below is the models' as much as the boxes'")
    out += [f"{name} is {r.status}, not complete: only the items both runs finished are compared (the rest are "
            "named as left out below)" for name, r in ((la, ra), (lb, rb)) if r.status != "complete"]
    return out


def _floor_cells(v: AgreementVerdict | None) -> list[str]:
    """The agreement table's floor (outputs identical when the same host ran twice, or "assumed all"), p and
    verdict."""
    if v is None or v.p_value is None:
        return ["—", "—", "no floor (sampled)" if v is not None else "—"]
    same = "assumed all" if v.assumed else f"{v.floor_n - v.floor_differ} of {v.floor_n}"
    return [same, f"{v.p_value:.3g}", v.verdict]


def _knob(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    from ..console import print_hanging, print_table
    from ..quality import knob
    from ..quality.runner import run_knob

    if len(a.param) > 1:  # a second one took the first's place, unsaid
        raise UsageError(f"give one --param (got {len(a.param)}: {', '.join(p.split('=')[0] for p in a.param)}): "
                         "a knob check tests one parameter at a time; run it once for each")
    name, values = knob.parse_param(a.param[0])
    cfg = _config(a, argv, ["knob"])
    store = Store(a.db)
    with _embedded(a, cfg, err):
        res = run_knob(cfg, name, values, store, notifier(err))
    fx = knob.effects(name, values, res.items)
    rows = []
    for i, e in enumerate(fx):
        what = json.dumps(e.value) + (" (repeat: the noise)" if i == 1 else " (baseline)" if i == 0 else "")
        rows.append([what, str(e.n), "—" if i == 0 else f"{e.changed}", "—" if e.p_value is None else f"{e.p_value:.3g}",
                     "—" if e.output_tokens_mean is None else f"{e.output_tokens_mean:.1f}",
                     "—" if e.reasoning_tokens_mean is None else f"{e.reasoning_tokens_mean:.1f}", str(e.failed)])
    print_table(console, [name, "Prompts", "Outputs changed", "p vs noise", "Output tokens", "Reasoning tokens",
                          "Failed"], rows)
    text = knob.finding(name, fx)
    print_hanging(console, text)  # between words at the terminal's width: a log's tools read the JSON's
    saved(console, res, store.path)
    if a.json:
        doc = res.to_json()
        doc["knob"] = {"param": name, "values": values, "effects": [e.to_dict() for e in fx], "finding": text}
        emit_json(a.json, doc)
    if not fx or fx[0].n == 0:  # no prompt answered by the baseline and its repeat: nothing to measure against
        print(f"tokenbench: run {res.status}: the knob could not be measured: {res.error or 'no baseline output'}",
              file=sys.stderr)
        return LevelFailed.exit_code
    return 0  # a value the server refuses is the knob's answer (the finding says so), not a failed run
