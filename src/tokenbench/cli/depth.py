"""``tokenbench depth``: decode and prefill at context depths, through a server or llama-bench; its table (``show``
prints it too)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket

from rich.console import Console

from .. import redact
from ..engines.embedded import running
from ..errors import TokenbenchError, UsageError
from ..console import print_table
from ..depth_table import depth_notes, depth_rows
from ..reader import load_result
from ..servers import normalize_base_url
from ..guard import snapshot_before
from ..store import Store
from . import interrupts
from .common import (LLAMA_BENCH_FLAGS, check_output, embedded_spec, guard_config, guard_targets, llama_options,
                     notifier, run_exit, saved, tokens, write_json)


def _llama_bench(a: argparse.Namespace, depths: list[int], console: Console, err: Console) -> int:
    from ..engines.llamabench import LlamaBenchConfig, run_llama_bench

    # the guard before llama-bench, as before an HTTP depth run: --guard strict refuses a dirty bench
    snap = asyncio.run(snapshot_before(a.guard, guard_config(a.guard_config), set(), "before llama-bench"))
    cfg = LlamaBenchConfig(a.llama_bench, a.model_file, depths, a.pp, a.tg, a.repetitions, llama_options(a),
                           a.model_size, a.quant, a.label, snap)
    store = Store(a.db)
    res = load_result(store, run_llama_bench(cfg, store, notifier(err)))
    print_table(console, *depth_rows(res), a.format)
    for line in depth_notes(res):  # what a flag says, as the HTTP run prints it (a dirty bench: which checks)
        console.print(line, style="yellow", markup=False, highlight=False)
    saved(console, res, store.path, a.format)
    if a.json:
        write_json(a.json, res)
    return 0


def _depths(a: argparse.Namespace) -> list[int]:
    """The depths asked for, each once, after the options that apply to one mode only were checked."""
    if a.llama_bench and a.url:  # llama-bench runs here, on a model file: --url only changed the default depths
        raise UsageError("--llama-bench runs llama-bench on this machine; --url measures a server over HTTP: drop one")
    given = [flag for key, flag in LLAMA_BENCH_FLAGS.items() if getattr(a, key) is not None] + \
        (["--model-file"] if a.model_file is not None else [])
    if a.url and given:  # the server was started with its own: these would be recorded and not applied
        raise UsageError(f"{', '.join(given)}: set on the server you started, not over HTTP; they apply to "
                         "--llama-bench or the embedded engine (without --url)")
    if a.depths is not None and not a.depths.strip(" ,"):
        raise UsageError("--depths is empty: give tokens of context, e.g. --depths 0,8k,32k")
    depths = [tokens(d, "--depths", zero=True)
              for d in (a.depths or ("0,1k,4k" if not a.url else "0,8k,32k")).split(",") if d.strip()]
    if len(set(depths)) < len(depths):  # the same prompts again, served from the prompt cache: an impossible rate
        twice = sorted({d for d in depths if depths.count(d) > 1})
        raise UsageError(f"--depths gives {', '.join(map(str, twice))} twice: each depth once, and --repetitions "
                         "for more passes")
    return depths


def cmd_depth(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    from ..depth import DepthConfig, run_depth

    check_output(a.json, "--json")
    depths = _depths(a)
    if a.tg < 2:  # before any engine starts: tg is timed from the first token to the last
        raise UsageError(f"--tg {a.tg}: give at least 2 tokens (tg is timed from the first token to the last)")
    if a.llama_bench:
        return _llama_bench(a, depths, console, err)
    cfg = DepthConfig(url=normalize_base_url(a.url) if a.url else "", depths=depths, pp=a.pp, tg=a.tg,
                      repetitions=a.repetitions, model=a.model, api_key=a.api_key or os.environ.get("OPENAI_API_KEY"),
                      tokenizer=a.tokenizer, label=a.label, seed=a.seed, command=redact.command(["tokenbench", *argv]),
                      metrics=not a.no_metrics, guard=a.guard, guard_config=guard_config(a.guard_config),
                      target_pids=guard_targets(a.url))
    store = Store(a.db)
    note = notifier(err)
    with running(embedded_spec(a), cfg, note) as engine, interrupts.held() as ctrl_c:
        cfg.label = cfg.label or (f"embedded-{a.engine}" if engine is not None else socket.gethostname())
        try:
            res = ctrl_c.run(run_depth(cfg, store, note))
        except TokenbenchError as e:  # an interrupt or an error after the run was stored: the depths it finished
            if e.result is not None:
                if e.result.outcomes:
                    print_table(console, *depth_rows(e.result), a.format)
                    for line in depth_notes(e.result):  # a depth cut short says how many repetitions it ran
                        console.print(line, style="yellow", markup=False, highlight=False)
                if a.json:
                    write_json(a.json, e.result)
            raise
        print_table(console, *depth_rows(res), a.format)
        for line in depth_notes(res):  # each warning once, with the rows it concerns, as show prints them
            console.print(line, style="yellow", markup=False, highlight=False)
        saved(console, res, store.path, a.format)
        if a.json:
            write_json(a.json, res)  # the result in hand: what show --json reads back
    return run_exit(res)  # partial where a depth did not fit the server's context
