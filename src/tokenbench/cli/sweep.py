"""``tokenbench sweep``: its options read into a ``SweepConfig``, the embedded engine started where no --url is
given, the run, and the tables it prints (``show`` and ``capacity`` print them too)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .. import draws, redact
from ..cost import DEFAULT_CURRENCY
from ..dataset import load as load_dataset
from ..draws import Draw
from ..engines.embedded import MIN_CONTEXT, running
from ..errors import LevelFailed, RunInterrupted, TokenbenchError, UsageError
from ..levels import ServingLevel, serving
from ..slo import SLO
from ..describe import describe_run, lengths_line
from ..sweep_table import format_sweep_markdown, print_sweep
from ..records import RequestRecord
from ..results import RunResult
from ..servers import normalize_base_url
from ..sessions import SessionPlan
from ..store import Store
from ..sweep import SweepConfig, run_sweep
from ..trace import Trace, load_trace
from ..workers import parse_workers
from ..workload import resolve_shape
from .common import check_output, embedded_spec, float_list, guard_config, guard_targets, int_list, json_object, notifier, seconds, write_json
from .options import POSITIVE, POSITIVE_INT, add_load, add_output, add_workload


EMBEDDED_DEFAULTS: dict[str, Any] = {"concurrency": "1,2,4,8", "requests": 16, "input_len": 128, "output_len": 64}


class RichReporter:
    """Progress on stderr: a live bar on a terminal; piped into a file or a CI log, one line per level as it
    finishes (a bar there printed nothing until the end: 6 minutes of silence in one run)."""

    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self.live = console.is_terminal
        self.progress: Progress | None = None
        self.task: Any = None
        self.description = ""
        self.t0 = time.monotonic()
        self.level_t0 = self.t0
        self.total: int | None = None
        self.duration_s: float | None = None
        self.done = 0

    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None:
        if not self.enabled:
            return
        self.description, self.level_t0 = description, time.monotonic()
        self.total, self.duration_s, self.done = total, duration_s, 0
        if not self.live:
            return
        if self.progress is None:
            # a level bounded by time fills its bar with time (it read "54/?"); one bounded by a count, with
            # requests; both say how long is left
            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[count]}"),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                console=self.console,
            )
            self.progress.start()
        self.task = self.progress.add_task(description, total=duration_s if total is None else total,
                                           info="", count=self._count())

    def _count(self) -> str:
        if self.total is None and self.duration_s:
            return f"{self.done} requests, {time.monotonic() - self.level_t0:.0f}/{self.duration_s:g} s"
        return f"{self.done}/{self.total}" if self.total else f"{self.done} requests"

    def request_done(self, record: RequestRecord) -> None:
        self.done += 1
        if self.progress is not None and self.task is not None:
            if self.total is None and self.duration_s:
                self.progress.update(self.task, completed=min(time.monotonic() - self.level_t0, self.duration_s),
                                     count=self._count())
            else:
                self.progress.update(self.task, advance=1, count=self._count())

    def level_end(self, summary: ServingLevel) -> None:
        info = f"{summary.output_throughput_tps:.1f} tok/s, TTFT p50 {summary.ttft_ms.p50 or 0:.0f} ms"
        if summary.failed:
            info += f", {summary.failed} failed"
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, info=info)
        elif self.enabled and not self.live:
            now = time.monotonic()
            flags = f" [{', '.join(summary.flags)}]" if summary.flags else ""
            self.console.print(f"{self.description}: {info}, {summary.completed} ok{flags} "
                               f"({now - self.level_t0:.1f} s; {now - self.t0:.0f} s elapsed)",
                               markup=False, highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, style="dim", markup=False, highlight=False)

    def warn(self, text: str) -> None:
        self.console.print(text, style="yellow", markup=False, highlight=False)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _draw(text: str | None, what: str, unit: str = "tokens") -> Draw | None:
    try:
        return draws.parse(text, what, unit) if text is not None else None
    except draws.DrawError as e:
        raise UsageError(str(e)) from None


def _lengths(a: argparse.Namespace, d: dict[str, Any]) -> tuple[Draw, Draw]:
    """(input, output) tokens per request, each a number or a distribution drawn per request: the embedded
    defaults, a --shape, or the lengths given (one given beside a --shape replaces the shape's)."""
    given_in, given_out = _draw(a.input_len, "--input-len"), _draw(a.output_len, "--output-len")
    if a.dataset is not None and (given_in is not None or a.shape is not None or a.prefix_len):
        raise UsageError("--dataset's prompts are its own: drop --input-len, --shape and --prefix-len "
                         "(--output-len gives the items without a length theirs)")
    if a.shape is None and given_in is None and given_out is None and d:
        base = int(d["input_len"]), int(d["output_len"])
    else:
        base = resolve_shape(a.shape, None, None)
    ins, outs = given_in or Draw.fixed(base[0]), given_out or Draw.fixed(base[1])
    if a.prefix_len < 0 or a.prefix_len >= max(ins.minimum(), 1) and a.prefix_len:
        raise UsageError(f"--prefix-len must be between 0 and the shortest input length ({ins.minimum():g})")
    return ins, outs


def _requests(a: argparse.Namespace, d: dict[str, Any], duration: float | None) -> int | None:
    """Requests per level: as given, else the default unless a --duration bounds the level instead."""
    requests = a.requests
    if requests is None and duration is None:
        requests = int(d.get("requests", 32))
    if requests is not None and requests < 1:
        raise UsageError("--requests must be at least 1")
    if a.repetitions < 1:
        raise UsageError("--repetitions must be at least 1")
    return requests


def _slo(text: str | None) -> SLO | None:
    try:
        return SLO.parse(text) if text else None
    except ValueError as e:
        raise UsageError(f"--slo: {e}") from None


#: The options that shape sessions: given without --sessions they would be ignored, so they are refused.
SESSION_OPTIONS = ("--turns", "--shared-prefix", "--tool-len", "--think-time", "--max-context", "--on-cap",
                   "--no-baseline")


def _session_plan(a: argparse.Namespace, argv: list[str], task: Draw, output: Draw,
                  dataset: bool) -> SessionPlan | None:
    """The agent-session workload ``--sessions`` asks for, or None; refuses what it cannot be combined with."""
    given = {w.split("=", 1)[0] for w in argv if w.startswith("--")}
    if a.sessions is None:
        if stray := [f for f in SESSION_OPTIONS if f in given]:
            raise UsageError(f"{', '.join(stray)} shape agent sessions: add --sessions N, or drop them")
        return None
    clash = [f for f in ("--rate", "--requests", "--duration", "--prefix-len", "--ray", "--dataset", "--shape")
             if f in given or (f == "--dataset" and dataset)]
    if clash:
        raise UsageError(f"--sessions runs whole sessions, closed loop over agents: drop {', '.join(clash)} "
                         "(--shared-prefix sets the shared system prompt)")
    if "--api" in given and a.api != "chat":
        raise UsageError("--sessions sends chat conversations: drop --api completions")
    if a.workers not in ("auto", "1"):
        raise UsageError("--sessions runs in one process (each turn waits for the answer before it): drop --workers")
    agents = int_list(a.concurrency, "--concurrency") if a.concurrency else [a.sessions]
    if max(agents) > a.sessions:
        raise UsageError(f"--sessions {a.sessions} gives {max(agents)} agents nothing to do: run at least as many "
                         "sessions as agents")
    plan = SessionPlan(
        sessions=a.sessions, turns=a.turns, shared_prefix=a.shared_prefix, task=task,
        tool=_draw(a.tool_len, "--tool-len") or Draw.fixed(128), output=output,
        think=_draw(a.think_time, "--think-time", "s") or Draw.fixed(0, "s"), max_context=a.max_context,
        on_cap=a.on_cap, baseline=not a.no_baseline)
    if plan.max_context is not None and plan.max_context < plan.first_turn():
        raise UsageError(f"--max-context {plan.max_context}: a first turn alone can need {plan.first_turn()} tokens "
                         "(the shared prompt, the longest task and answer): raise it")
    return plan


#: What a trace says itself (its requests' lengths and times): the options that would say it again.
TRACE_EXCLUSIVE = ("concurrency", "rate", "dataset", "sessions", "input_len", "output_len", "shape", "prefix_len")


def _trace(a: argparse.Namespace) -> Trace | None:
    """--trace's file, read and checked (trace.load_trace), after refusing the options that cannot go with it."""
    if a.trace is None:
        return None
    given = [f"--{k.replace('_', '-')}" for k in TRACE_EXCLUSIVE if getattr(a, k, None)]
    if given:
        raise UsageError(f"--trace sets every request's length and send time: drop {', '.join(given)}")
    if a.repetitions > 1 or a.ray or parse_workers(a.workers) not in (None, 1):
        raise UsageError("--trace is replayed once, by one process: drop --repetitions, --workers and --ray")
    return load_trace(a.trace, a.trace_block)


def sweep_config(a: argparse.Namespace, argv: list[str]) -> SweepConfig:
    embedded = a.url is None
    d: dict[str, Any] = dict(EMBEDDED_DEFAULTS) if embedded else {}
    trace = _trace(a)
    ins, outs = _lengths(a, d)
    dataset = load_dataset(a.dataset, a.api) if a.dataset is not None else None
    plan = _session_plan(a, argv, ins, outs, dataset is not None)
    if plan is not None:
        d["concurrency"] = str(plan.sessions)
    if a.rate and a.concurrency:
        raise UsageError("give --concurrency or --rate, not both")
    extra = json_object(a.extra_body, "--extra-body")
    duration = seconds(a.duration, "--duration")
    requests = a.requests if trace else _requests(a, d, duration)  # a trace: all of it unless --requests
    slo = _slo(a.slo)
    return SweepConfig(
        url=normalize_base_url(a.url) if a.url else "",
        model=a.model,
        api="chat" if plan is not None else a.api,
        api_key=a.api_key or os.environ.get("OPENAI_API_KEY"),
        concurrency=int_list(a.concurrency or str(d.get("concurrency", "1")), "--concurrency"),
        rates=float_list(a.rate, "--rate") if a.rate else [],
        arrival=a.arrival,
        max_concurrency=a.max_concurrency,
        requests=requests,
        duration_s=duration,
        warmup=a.warmup,
        repetitions=a.repetitions,
        timeout_s=seconds(a.timeout, "--timeout") or 600.0,
        stall_timeout_s=seconds(a.stall_timeout, "--stall-timeout") or 60.0,
        # a distribution's largest: what a slot must hold; each request draws its own (input_draw, output_draw); for
        # sessions, a first turn's (the warm-up's length: its plan draws the rest)
        input_len=int(ins.maximum()) + (plan.shared_prefix if plan is not None else 0),
        output_len=int(outs.maximum()),
        input_draw=None if ins.is_fixed or plan is not None else ins,
        output_draw=None if outs.is_fixed or plan is not None else outs,
        dataset=dataset,
        shape=a.shape,
        prefix_len=a.prefix_len,
        tokenizer=a.tokenizer,
        label=a.label or (f"embedded-{a.engine}" if embedded else socket.gethostname()),
        price_per_hour=a.price_per_hour,
        currency=a.currency,
        slo=slo,
        seed=a.seed,
        guard=a.guard,
        guard_config=guard_config(a.guard_config),
        target_pids=guard_targets(a.url),
        metrics_interval_s=None if a.no_metrics else seconds(a.metrics_interval, "--metrics-interval"),
        max_error_rate=a.max_error_rate,
        workers=1 if plan is not None else parse_workers(a.workers),
        sessions=plan,
        ray=a.ray,
        temperature=a.temperature,
        fixed_output=not a.no_fixed_output,
        extra_body=extra,
        command=redact.command(["tokenbench", *argv]),
        trace=trace,
        trace_speed=a.trace_speed,
    )


def print_result(console: Console, res: RunResult, fmt: str, db: Path) -> None:
    levels = serving(o.summary for o in res.outcomes)
    currency = res.manifest.currency or DEFAULT_CURRENCY
    lengths = lengths_line(res.manifest)  # lengths that vary: the distribution or the dataset each level drew
    if fmt == "markdown":
        if lengths:
            console.print(lengths + "\n", markup=False, highlight=False, soft_wrap=True)
        console.print(format_sweep_markdown(levels, currency), markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(describe_run(res.manifest), style="dim", markup=False, highlight=False)
        if lengths:
            console.print(lengths, markup=False, highlight=False)
        print_sweep(console, levels, currency, f"{res.predicted_mark} (not measured)" if res.predicted_mark else None)
    saved(console, res, db, fmt)


def saved(console: Console, res: RunResult, db: Path, fmt: str) -> None:
    """Where the run is. Markdown output is not wrapped (it is pasted, and its notes are whole lines too), so its
    path stays whole; a table keeps to the terminal's width."""
    console.print(f"run {res.run_id} ({res.status}) saved in {db}", style="dim", markup=False, highlight=False,
                  soft_wrap=fmt == "markdown")


def embedded_tokens(cfg: SweepConfig) -> int:
    """The tokens the embedded engine's slot must hold for ``cfg``'s longest request. A dataset's bound (its bytes)
    is capped at what the embedded models can hold: a longer item fails on its own, as it would on any server."""
    from ..engines import tiny

    longest = cfg.longest_request()
    return min(longest, int(tiny.CONFIG["max_position_embeddings"]) - 64) if cfg.dataset is not None else longest


def embedded_ctx(cfg: SweepConfig) -> int:
    """Each slot of the embedded engine holds one request, its prompt and output: a session's longest turn, up to
    what the embedded model was trained for; a session plan without a cap is capped there."""
    from ..engines.embedded import slot_context
    from ..engines.tiny import CONFIG

    limit = int(CONFIG["max_position_embeddings"])
    if cfg.sessions is None:
        return slot_context(embedded_tokens(cfg))
    ctx = min(limit, slot_context(cfg.sessions.longest_context()))
    if cfg.sessions.max_context is None:
        cfg.sessions = replace(cfg.sessions, max_context=ctx - 64 - int(cfg.sessions.output.maximum()))
    elif cfg.sessions.max_context > ctx:
        raise UsageError(f"--max-context {cfg.sessions.max_context}: the embedded model holds {limit} tokens")
    return ctx


def cmd_sweep(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    check_output(a.json, "--json")
    cfg = sweep_config(a, argv)
    store = Store(a.db)
    reporter = RichReporter(err, enabled=not a.quiet)
    spec = embedded_spec(a)
    with running(spec, cfg, notifier(err), parallel=max(cfg.concurrency or [1]),
                 ctx=embedded_ctx(cfg) if spec else MIN_CONTEXT) as engine:
        try:
            try:
                res = asyncio.run(run_sweep(cfg, store, reporter, alive=engine.alive if engine else None))
            finally:
                reporter.close()
        except TokenbenchError as e:  # an interrupt or an error after the run was stored: this sweep's run, never
            if e.result is not None:  # another's, as the runner closed it (an interrupted one is shown even empty)
                if e.result.outcomes or isinstance(e, RunInterrupted):
                    print_result(console, e.result, a.format, store.path)
                if a.json:
                    write_json(a.json, e.result)
            raise
    print_result(console, res, a.format, store.path)
    if a.json:
        write_json(a.json, res)  # the result in hand: what show --json reads back
    if res.status != "complete":
        # the levels are kept and shown, marked; the exit code tells a script or CI that the run failed
        print(f"tokenbench: run {res.status}: {res.error}", file=sys.stderr)
        return LevelFailed.exit_code
    return 0


def add_sweep_parser(sub: Any) -> None:
    """``tokenbench sweep``'s options."""
    s = sub.add_parser("sweep", help="load-test an OpenAI-compatible endpoint over concurrency or rate levels")
    add_workload(s)
    add_load(s, search=False)
    g = s.add_argument_group("trace replay (one open-loop level at the trace's own times and lengths)")
    g.add_argument("--trace", metavar="FILE",
                   help="replay this trace: Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids "
                        "of shared prompt blocks) or CSV with the header timestamp,input_length,output_length; "
                        "--requests N replays its first N")
    g.add_argument("--trace-speed", type=POSITIVE, default=1.0, help="replay this many times as fast (2: twice)")
    g.add_argument("--trace-block", type=POSITIVE_INT, default=512,
                   help="prompt tokens per hash id (default 512, as Mooncake's traces)")
    add_output(s)
