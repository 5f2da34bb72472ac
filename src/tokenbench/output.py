"""The tables the published write-ups print, as rows of strings, rendered for a terminal or Markdown.
``format_*`` functions return text so what users see is testable."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table

from .metrics import LevelSummary

if TYPE_CHECKING:
    from .results import Manifest


def _num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 100:
        return f"{v:.0f} ms"
    return f"{v:.1f} ms"


def level_label(s: LevelSummary) -> str:
    if s.rate is not None:
        return f"{s.rate:g}/s"
    return str(s.concurrency) if s.concurrency is not None else "trace"  # a trace sent all at once


Column = tuple[str, Callable[[LevelSummary], str]]


def _p99_ttft(s: LevelSummary) -> str:
    return _ms(s.ttft_ms.p99) + ("*" if s.ttft_ms.n and s.ttft_ms.n < 100 else "")


def _aggregate(s: LevelSummary) -> str:
    # an imported or predicted row without this figure has 0.0 stored: not a measured zero
    return _num(s.output_throughput_tps) if s.output_throughput_tps or s.completed or s.failed else "—"


def _sweep_columns(levels: list[LevelSummary], currency: str) -> list[Column]:
    """The sweep table's columns: the fixed ones, and those only some runs have a figure for."""
    # imported rows at one concurrency can differ by prompt length only: say which is which
    keys = [(level_label(s), s.input_tokens_mean) for s in levels]
    cols: list[Column] = [("Rate" if any(s.rate is not None for s in levels) else "Concurrency", level_label)]
    if len(set(keys)) > len({k for k, _ in keys}):
        cols.append(("Prompt tokens", lambda s: f"{s.input_tokens_mean:,.0f}" if s.input_tokens_mean else "—"))
    cols += [("Aggregate output tok/s", _aggregate), ("Per-agent tok/s", lambda s: _num(s.per_agent_tps)),
             ("Median TTFT", lambda s: _ms(s.ttft_ms.p50)), ("P99 TTFT", _p99_ttft),
             ("Median TPOT", lambda s: _ms(s.tpot_ms.p50))]
    if any(s.cost_per_mtok is not None for s in levels):
        cols.append((f"{currency}/M output", lambda s: _num(s.cost_per_mtok, 2) if s.cost_per_mtok is not None else "—"))
    if any(s.slo for s in levels):  # --slo given: its verdict and goodput per level, before the counts
        cols += [("SLO", slo_verdict), ("Goodput req/s", lambda s: _num(s.goodput_rps, 2))]
    # published rows that give only a prefill or a decode rate: those columns, or the row would be blank
    if any((s.prefill_tps or s.decode_tps) and not (s.completed or s.failed) for s in levels):
        cols += [("Prefill tok/s", lambda s: _num(s.prefill_tps)), ("Decode tok/s", lambda s: _num(s.decode_tps))]
    cols += [("OK/failed", lambda s: f"{s.completed}/{s.failed}" if s.completed or s.failed else "—"),
             ("Flags", lambda s: ",".join(f for f in s.flags if f != "p99_estimate") or "")]
    return cols


def sweep_rows(levels: list[LevelSummary], currency: str = "USD") -> tuple[list[str], list[list[str]]]:
    cols = _sweep_columns(levels, currency)
    return [h for h, _ in cols], [[cell(s) for _, cell in cols] for s in levels]


def slo_verdict(s: LevelSummary) -> str:
    if s.slo_met is None:
        return "—"
    return "pass" if s.slo_met else "FAIL"


def single_stream_lines(levels: list[LevelSummary]) -> list[str]:
    out = []
    for s in levels:
        if s.concurrency == 1 and (s.prefill_tps or s.decode_tps):
            parts = ([f"prefill {_num(s.prefill_tps)} tok/s (input tokens / TTFT, median)"] if s.prefill_tps else []) \
                + ([f"single-stream decode {_num(s.decode_tps)} tok/s (1 / median TPOT)"] if s.decode_tps else [])
            out.append("Concurrency 1: " + ", ".join(parts))
            break
    return out


def notes(levels: list[LevelSummary]) -> list[str]:
    out = []
    slos = {s.slo for s in levels if s.slo}
    if slos:
        out.append(f"SLO {', '.join(sorted(slos))}: pass when every percentile limit holds and no request failed; "
                   "goodput counts the requests within every per-request limit")
    if any(s.ttft_ms.n and s.ttft_ms.n < 100 for s in levels):
        out.append("* p99 over fewer than 100 requests: an estimate from few tail samples")
    by_text: dict[str, list[str]] = {}
    for s in levels:
        for w in s.warnings:
            by_text.setdefault(w, []).append(level_label(s))
        if s.errors:
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(s.errors.items()))
            by_text.setdefault(f"failed requests: {kinds}", []).append(level_label(s))
    out += [f"[{','.join(keys)}] {text}" for text, keys in by_text.items()]
    for s in levels:
        if s.reasoning_share is not None and s.answer_throughput_tps is not None:
            out.append(f"[{level_label(s)}] reasoning took {s.reasoning_share:.0%} of the output tokens: answers "
                       f"came at {_num(s.answer_throughput_tps)} of {_num(s.output_throughput_tps)} tok/s")
    for s in levels:
        parts = _server_parts(s)
        if parts:
            out.append(f"[{level_label(s)}] server: " + ", ".join(parts))
    return out


def _server_parts(s: LevelSummary) -> list[str]:
    """What the server said of a level: its /metrics (and power), and what its responses said of its cache."""
    t = s.telemetry or {}
    parts: list[str] = []
    if t.get("kv_cache_usage_max") is not None:
        parts.append(f"peak KV cache {t['kv_cache_usage_max']:.0%}")
    if t.get("waiting_max"):
        parts.append(f"up to {t['waiting_max']:.0f} requests waiting")
    if t.get("spec_acceptance_rate") is not None:
        mal = t.get("spec_mean_acceptance_length")
        parts.append(f"speculative acceptance {t['spec_acceptance_rate']:.2f}"
                     + (f" (mean acceptance length {mal:.2f})" if mal else ""))
    if t.get("prefix_cache_hit_rate") is not None:
        parts.append(f"prefix-cache hits {t['prefix_cache_hit_rate']:.0%}")
    if s.cached_share:  # the responses' own count (usage or timings), beside the server's /metrics
        parts.append(f"{s.cached_share:.0%} of prompt tokens served from its cache ({s.cached_source})")
    if t.get("j_per_output_token") is not None:
        parts.append(f"{t['j_per_output_token']:.2f} J/token, {t.get('output_tokens_per_watt') or 0:.2f} tok/s per W")
    return parts


def md_escape(text: str) -> str:
    """Untrusted text (a model name, a label) made inert in Markdown: no HTML, no table breaks, and no line break
    (a newline in a label used to start a heading of its own)."""
    text = " ".join(text.splitlines())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def format_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def format_sweep_markdown(levels: list[LevelSummary], currency: str = "USD") -> str:
    header, rows = sweep_rows(levels, currency)
    parts = [format_markdown(header, rows)]
    extra = single_stream_lines(levels) + notes(levels)
    if extra:
        parts += ["", *extra]
    return "\n".join(parts)


def fits(console: Console, header: list[str], rows: list[list[str]]) -> bool:
    """Whether the table fits the console's width with every cell whole (Rich would cut cells to "…")."""
    widths = [max([len(h)] + [len(r[i]) for r in rows if i < len(r)]) for i, h in enumerate(header)]
    return sum(widths) + 3 * len(widths) + 2 <= console.width


def print_vertical(console: Console, header: list[str], rows: list[list[str]], title: str | None = None) -> None:
    """A table too wide for the terminal, one block per row, every value whole: never a cut number or flag. A long
    value (a flag's sentence) wraps between words under its own column."""
    if title:
        console.print(title, markup=False, highlight=False)
    width = max(len(h) for h in header[1:]) if len(header) > 1 else 0
    beside = width + 4 <= console.width // 2  # else (a long run label names a column) each value goes under it
    indent = " " * (width + 4 if beside else 4)
    for r in rows:
        console.print(f"{header[0]} {r[0]}", style="bold", markup=False, highlight=False)
        for h, v in zip(header[1:], r[1:]):
            if v:
                lines = textwrap.wrap(v, max(20, console.width - len(indent)), break_long_words=False,
                                      break_on_hyphens=False) or [v]
                head = f"  {h:<{width}}  " if beside else f"  {h}\n{indent}"
                console.print(head + f"\n{indent}".join(lines), markup=False, highlight=False, soft_wrap=True)


def print_sweep(console: Console, levels: list[LevelSummary], currency: str, title: str | None = None) -> None:
    print_table(console, *sweep_rows(levels, currency), title=title, numeric=True)
    for line in single_stream_lines(levels):
        console.print(line)
    for line in notes(levels):
        console.print(line, style="yellow", markup=False, highlight=False)


def describe_run(manifest: Manifest) -> str:
    wl = manifest.workload or {}
    parts = [
        f"model {manifest.model or 'unknown'}",
        f"engine {manifest.engine or 'unknown'}" + (f" {manifest.engine_version}" if manifest.engine_version else ""),
    ]
    # facts an imported or predicted run does not have are left out, never printed as "None"
    trace = wl.get("trace")
    if isinstance(trace, dict):  # a trace replay: its lengths are per request
        parts.append(f"trace {trace.get('path')}: {trace.get('requests')} requests over {trace.get('replay_s')} s "
                     f"(x{trace.get('speed')}), ideal cached share {trace.get('ideal_cached_share', 0):.0%}")
    elif wl.get("input_len") is not None and wl.get("output_len") is not None:
        parts.append(f"{wl['input_len']} in / {wl['output_len']} out tokens" + (f" ({wl['shape']})" if wl.get("shape") else ""))
    if wl.get("api"):
        parts.append(f"{wl['api']} API")
    if manifest.tokenizer:
        parts.append(f"tokenizer: {manifest.tokenizer}")
    emb = manifest.embedded
    if emb:
        parts.append(f"embedded {emb.get('engine')} engine, healthy after {emb.get('startup_s', 0):.1f} s (cold start)")
    return "; ".join(parts)


def print_table(console: Console, header: list[str], rows: list[list[str]], fmt: str = "table",
                title: str | None = None, numeric: bool = False) -> None:
    """Any (header, rows) table, for a terminal or as Markdown; one block per row when it is too wide.
    ``numeric``: the middle columns are numbers, right-aligned and never wrapped (the sweep table)."""
    if fmt == "markdown":
        console.print(format_markdown(header, rows), markup=False, highlight=False, soft_wrap=True)
        return
    if not fits(console, header, rows):
        print_vertical(console, header, rows, title)
        return
    t = Table(title=title, box=box.SIMPLE_HEAVY)
    last = len(header) - 1
    for i, h in enumerate(header):
        if numeric:
            t.add_column(h, justify="left" if i in (0, last) else "right", no_wrap=i < last)
        else:
            t.add_column(h, overflow="fold")
    for r in rows:
        t.add_row(*r)
    console.print(t)
