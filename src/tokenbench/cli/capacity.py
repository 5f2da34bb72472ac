"""``tokenbench capacity``: the most agents (or requests/s) a box serves within an SLO, found by search
(capacity.py), every level it ran stored as a sweep's are."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rich.console import Console

from ..cache_cliff import vllm_pool
from ..capacity import SURE_LEGEND, CapacityAnswer, CapacitySearch, SearchSpec, answer, mark_levels
from ..capacity_text import answer_lines, headline, verdict_table
from ..engines.embedded import MIN_CONTEXT, running
from ..errors import LevelFailed, RunInterrupted, TokenbenchError, UsageError
from ..slo import SLO
from ..console import print_hanging, print_table
from ..layout import md_paragraph
from ..results import RunResult
from ..servers import root_url
from ..store import Store
from ..kinds.sessions import SessionsKind
from ..sweep import SweepConfig, run_sweep
from . import interrupts
from .common import check_output, embedded_spec, emit_json, int_list, notifier, seconds
from .options import SERVE_PARALLEL
from .printing import print_result
from .sweep import EMBEDDED_DEFAULTS, RichReporter, embedded_ctx, load_config
from .workloads import workload_kind

DEFAULT_RANGE = "1:16"


def _range(text: str, flag: str) -> tuple[float, float]:
    low, sep, high = text.partition(":")
    try:
        lo, hi = float(low), float(high) if sep else float(low)
    except ValueError:
        raise UsageError(f"{flag} {text}: give the range as LOW:HIGH, e.g. {flag} 1:64") from None
    return lo, hi


def search_spec(a: argparse.Namespace) -> SearchSpec:
    """The search the options ask for: its axis and range, resolution and budget."""
    if a.rate and a.concurrency:
        raise UsageError("give --concurrency LOW:HIGH or --rate LOW:HIGH, not both")
    axis = "rate" if a.rate else "concurrency"
    flag = f"--{axis}"
    lo, hi = _range(a.rate or a.concurrency or DEFAULT_RANGE, flag)
    try:
        return SearchSpec(axis, lo, hi, a.resolution, seconds(a.budget, "--budget", ("m", "h")) if a.budget else None,  # type: ignore[arg-type]
                          a.arrival, a.max_concurrency)
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None


def _slo(text: str) -> SLO:
    try:
        slo = SLO.parse(text)
    except ValueError as e:
        raise UsageError(f"--slo: {e}") from None
    bare = [m for m in slo.per_request_ms if not any(k[0] == m for k in slo.percentile_ms)]
    if bare:
        raise UsageError(f"--slo: a capacity needs a level objective; {bare[0]}= limits each request only: write "
                         f"it with a percentile, e.g. {bare[0]}_p90=...")
    return slo


def capacity_config(a: argparse.Namespace, argv: list[str], spec: SearchSpec, slo: SLO) -> SweepConfig:
    """The sweep a search runs: the workload as it runs one level per value (``for_search``), the range's top as
    its one configured level (what the engine must hold), 32 requests a level unless --requests says."""
    d: dict[str, Any] = {**(EMBEDDED_DEFAULTS if a.url is None else {}), "requests": 32}
    kind = workload_kind(a, argv, d, search=True).for_search()
    if a.cache_cliff is not None:
        assert isinstance(kind, SessionsKind)  # cache_search_options made it so
        kind = kind.for_cache_search()
    conc = [int(spec.high)] if spec.axis == "concurrency" else int_list(str(d.get("concurrency", "1")), "--concurrency")
    rates = [spec.high] if spec.axis == "rate" else []
    return load_config(a, argv, kind, d, (conc, rates), a.requests or d["requests"], slo)


def cache_search_options(a: argparse.Namespace, spec: SearchSpec) -> SearchSpec:
    """--cache-cliff: a search over live agent sessions, one per agent (so --sessions is the range's top), held
    to the cached share as well as --slo."""
    if a.cache_cliff is None:
        return spec
    if spec.axis != "concurrency":
        raise UsageError("--cache-cliff grows live agent sessions: give --concurrency LOW:HIGH, not --rate")
    if getattr(a, "trace", None) is not None or a.dataset is not None:
        raise UsageError("--cache-cliff runs agent sessions of its own: drop --trace and --dataset")
    if a.sessions is not None:
        raise UsageError("--cache-cliff runs one session per agent, --concurrency LOW:HIGH sets how many: "
                         "drop --sessions")
    a.sessions = int(spec.high)
    try:
        return replace(spec, cache_drop=a.cache_cliff)
    except ValueError as e:
        raise UsageError(f"--cache-cliff: {e}") from None


def kv_pool(base_url: str, api_key: str | None) -> dict[str, Any] | None:
    """The engine's KV pool where its /metrics says (vLLM), read once before a cache search; llama.cpp's is its
    slots, which every run's manifest holds already."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(root_url(base_url) + "/metrics",
                                 headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            text = r.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None
    pool = vllm_pool(text)
    return pool.to_dict() if pool is not None else None


def _tiers(a: argparse.Namespace) -> list[float | None]:
    """The per-agent speeds to search at (one search each), or one search with --slo alone."""
    if not a.tiers:
        return [None]
    try:
        tiers = [float(t) for t in a.tiers.split(",") if t.strip()]
    except ValueError:
        tiers = []
    if not tiers or any(not (t > 0) for t in tiers):
        raise UsageError(f"--tiers {a.tiers}: give per-agent speeds in tok/s, e.g. --tiers 20,60")
    return list(tiers)


def cmd_capacity(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    check_output(a.json, "--json")
    spec = cache_search_options(a, search_spec(a))
    tiers = _tiers(a)
    slos = [_slo(a.slo + (f",agent_tps_p90={t:g}" if t is not None else "")) for t in tiers]
    cfgs = [capacity_config(a, argv, spec, slo) for slo in slos]
    if len(tiers) > 1:  # a run per tier, each its own label: under one, runs could not tell them apart, nor show one
        for cfg, tier in zip(cfgs, tiers):
            cfg.label = f"{cfg.label}-{tier:g}tps"
    # levels of agents keeping their cache (sessions, replays) are searched as such
    spec = replace(spec, sessions=cfgs[0].levels()[0].cache is not None)
    try:  # an objective the workload cannot measure (a session's time without sessions) is refused before any run
        slos[0].check_workload(spec.sessions)
    except ValueError as e:
        raise UsageError(f"--slo: {e}") from None
    store = Store(a.db)
    embedded = embedded_spec(a)
    results: list[RunResult] = []
    with running(embedded, cfgs[0], notifier(err), parallel=_engine_parallel(a, spec),
                 ctx=embedded_ctx(cfgs[0]) if embedded else MIN_CONTEXT) as engine, interrupts.held() as ctrl_c:
        for cfg in cfgs[1:]:
            if engine is not None:
                embedded_ctx(cfg)
                engine.configure(cfg)
        pool = kv_pool(cfgs[0].url, cfgs[0].api_key) if spec.cache_drop is not None else None
        for k, (cfg, slo) in enumerate(zip(cfgs, slos)):
            try:
                results.append(_search(a, cfg, CapacitySearch(spec, slo, kv_pool=pool), store, console, err,
                                       engine.alive if engine else None, ctrl_c))
            except TokenbenchError:
                if k + 1 < len(tiers):  # the tiers after this one: never searched, and said so
                    err.print(f"not searched: {', '.join(f'{t:g} tok/s each' for t in tiers[k + 1:])} (the search "
                              f"at {tiers[k]:g} tok/s each ended the command)", markup=False, highlight=False)
                raise
        if len(results) > 1:
            _print_tiers(console, tiers, results)
        if a.json:
            emit_json(a.json, capacity_json(results[0]) if len(results) == 1 else
                      {"tiers": [{"tok_s": t, **capacity_json(r)} for t, r in zip(tiers, results)]})
    bad = [r for r in results if r.status != "complete"]
    for res in bad:
        print(f"tokenbench: run {res.status}: {res.error}", file=sys.stderr)
    return LevelFailed.exit_code if bad else 0


def _engine_parallel(a: argparse.Namespace, spec: SearchSpec) -> int:
    """The embedded engine's slots: the range's top at once, so that its batch is not what the search finds; but a
    cache-cliff search measures its cache as it is served: slots grown with the agents would keep every session."""
    if spec.cache_drop is not None:
        return SERVE_PARALLEL
    return int(spec.high) if spec.axis == "concurrency" else (a.max_concurrency or 16)


def _print_tiers(console: Console, tiers: list[float | None], results: list[RunResult]) -> None:
    """Each tier's answer on a line, with the label its run is stored under."""
    console.print("")
    for tier, res in zip(tiers, results):
        found = answer(res)
        console.print(f"at {tier:g} tok/s each ({res.manifest.label}): " + (headline(found) if found else "no verdict"),
                      markup=False, highlight=False)


def _search(a: argparse.Namespace, cfg: SweepConfig, search: CapacitySearch, store: Store, console: Console,
            err: Console, alive: Callable[[], bool] | None, ctrl_c: interrupts.Interrupts) -> RunResult:
    """One search, its levels and answer shown (and, when it ended early, what it found before)."""
    reporter = RichReporter(err, enabled=not a.quiet)
    try:
        try:
            res = ctrl_c.run(run_sweep(cfg, store, reporter, alive=alive, plan=search))
        finally:
            reporter.close()
    except TokenbenchError as e:  # interrupted or failed after levels were stored: what they found is shown
        if e.result is not None and (e.result.outcomes or isinstance(e, RunInterrupted)):
            mark_levels(e.result)
            _show(console, e.result, a.format, store)
            if a.json:
                emit_json(a.json, capacity_json(e.result))
        raise
    mark_levels(res)
    _show(console, res, a.format, store)
    return res


def capacity_json(res: RunResult) -> dict[str, object]:
    """A capacity run's JSON: the run's, and the search's answer (``capacity``), as ``capacity --json`` and
    ``show RUN --json`` write it."""
    found = answer(res)
    return {**res.to_json(), "capacity": found.to_dict() if found is not None else None}


def _show(console: Console, res: RunResult, fmt: str, store: Store) -> None:
    """The levels, in the order of their value (the order the search ran them in is their index), then the answer."""
    res.sort_by_value()
    print_result(console, res, fmt, store.path)
    found = answer(res)
    if found is not None:
        print_capacity(console, found, fmt)


def print_capacity(console: Console, found: CapacityAnswer, fmt: str = "table") -> None:
    """The answer: its sentence (and the cliff's), the lines under it, the levels' verdicts and what "Sure"
    means. In Markdown each sentence is a paragraph, the lines under it a list, the table set apart."""
    md = fmt == "markdown"
    sentences, details = answer_lines(found)
    console.print("")
    for line in sentences:
        console.print(md_paragraph(line) + "\n" if md else line, markup=False, highlight=False)
    for line in details:
        if md:
            console.print(f"- {md_paragraph(line)}", markup=False, highlight=False, soft_wrap=True)
        else:
            print_hanging(console, "  " + line)
    header, rows = verdict_table(found)
    if md:  # a table after a list needs a blank line, and so does a paragraph after a table
        console.print("")
    print_table(console, header, rows, fmt, numeric=True)
    if md:
        console.print("")
    console.print(SURE_LEGEND, style="dim", markup=False, highlight=False)
