"""The sweep table: its columns (those only some runs have a figure for included), its rows, the notes under it,
and its printer for a terminal or Markdown."""

from __future__ import annotations

import re
from collections.abc import Callable

from rich.console import Console

from .grace import CUT_KINDS, INTERRUPTED, LEVEL_END
from .cache_cliff import CHECK as CLIFF_CHECK
from .cells import level_label, money, ms, num
from .console import print_table
from .finding import Code
from .steady import UNSEEN_TPOT_MS
from .layout import format_markdown, md_paragraph, plural, sig
from .levels import NO_METER_NOTES, ServingLevel, Telemetry
from .replay_table import lanes_warmed, print_replays
from .session_table import print_sessions
from .slo import SloCheck, beside_limit, quantity


Column = tuple[str, Callable[[ServingLevel], str]]


def _p99_ttft(s: ServingLevel, ms: Callable[[float | None], str] = ms) -> str:
    return ms(s.ttft_ms.p99) + ("*" if s.ttft_ms.n and s.ttft_ms.n < 100 else "")


def _aggregate(s: ServingLevel, num: Callable[[float | None], str] = num) -> str:
    # over the plateau where the level had one (steady.py); an imported or predicted row without this figure has
    # 0.0 stored: not a measured zero
    return num(s.sustained_tps) if s.plateau is not None or s.output_throughput_tps or s.completed or s.failed else "—"


#: A predicted figure's significant figures: its band (±20% and wider) supports no more.
PREDICTED_FIGURES = 2


def _predicted_num(v: float | None) -> str:
    return "—" if v is None else sig(v, PREDICTED_FIGURES)


def _predicted_ms(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{sig(v / 1000, PREDICTED_FIGURES)} s" if v >= 10_000 else f"{sig(v, PREDICTED_FIGURES)} ms"


def per_agent_shown(s: ServingLevel) -> float | None:
    """The per-agent rate a level's table shows (the terminal's, the Markdown's and the HTML's, as the JSON's
    ``per_agent_tps``); None where it shows "—": a replay at the recorded times has no agent count behind it (the
    open loop's requests in flight would divide the aggregate into a call's own speed, 90x it), and under one
    request in flight it would be a request's own speed, above the aggregate (``ServingLevel.per_agent_withheld``)."""
    return None if s.per_agent_withheld else s.sustained_per_agent_tps


def _tpot_line(levels: list[ServingLevel]) -> list[str]:
    """Why a level's median TPOT reads "—", once per reason with the levels it is on."""
    by_why: dict[str, list[str]] = {}
    for s in levels:
        if why := tpot_unseen(s):
            by_why.setdefault(why, []).append(level_label(s))
    return [f"[{','.join(keys)}] no median TPOT (—): {why}; the JSON keeps tpot_ms as measured"
            for why, keys in by_why.items()]


#: An open loop's median TTFT from each request's arrival this many times its TTFT from the send (and 10 ms more or
#: over) is said under the table: its requests waited to be sent, which the table's TTFT does not count.
FROM_ARRIVAL_RATIO = 1.5


def _arrival_line(levels: list[ServingLevel]) -> list[str]:
    """An open loop whose requests waited to be sent (a --max-concurrency cap, a client behind): a level capped at
    2 in flight read 33 ms TTFT in the table, 897 ms from arrival in the JSON alone."""
    out = []
    for s in levels:
        arrived, sent = s.ttft_from_arrival_ms, s.ttft_ms.p50
        if arrived is None or arrived.p50 is None or sent is None:
            continue
        if arrived.p50 >= FROM_ARRIVAL_RATIO * sent and arrived.p50 - sent >= 10:
            out.append(f"[{level_label(s)}] TTFT from each request's arrival: median {ms(arrived.p50)}, against "
                       f"{ms(sent)} from its send: requests waited to be sent (a --max-concurrency cap, or a client "
                       "behind); ttft_from_arrival_ms in the JSON")
    return out


def _per_agent_line(levels: list[ServingLevel]) -> list[str]:
    """Why a level's per-agent rate reads "—" where its open loop had under one request in flight: a sweep at
    0.5, 1 and 2/s showed "—" at the first two and a figure at the third, and said nothing of it."""
    under = [s for s in levels if s.replay is None and s.under_one_in_flight and s.sustained_per_agent_tps]
    if not under:
        return []
    keys = ",".join(level_label(s) for s in under)
    held = ", ".join(f"{s.achieved_concurrency:.2f}" for s in under)
    return [f"[{keys}] no per-agent tok/s (—): under one request in flight on average ({held}); "
            "the aggregate divided by that would be one request's own speed, above the aggregate"]


#: Answers that came whole in one read (the one_read finding) this share of a level's or more put its median TPOT
#: on one of their 0s, or halfway to one: a figure no decode stands behind.
ONE_READ_MEDIAN = 0.5


def tpot_unseen(s: ServingLevel) -> str | None:
    """Why the level's median TPOT is no decode seen, or None where it is one: half its answers or more came whole
    in one network read, or with some of them whole the rest came as fast and the median reads 0.0 ms.
    ``make demo-vllm`` printed "0.0 ms" as a figure, 12 of 16 answers whole; the JSON keeps the value as
    measured."""
    found = s.finding(Code.ONE_READ)
    if Code.ONE_READ.value not in s.flags or s.tpot_ms.p50 is None:
        return None
    if found is not None and found.observed is not None and found.observed >= ONE_READ_MEDIAN:
        return ("half its answers or more arrived whole in one network read (one_read): the median is their TPOT "
                "of 0, or halfway to it, not a decode")
    if s.tpot_ms.p50 < UNSEEN_TPOT_MS:  # it reads "0.0 ms": no decode a client could time
        return ("it reads 0.0 ms where answers arrived whole in one network read (one_read): the client timed no "
                "decode")
    return None


def tpot_shown(s: ServingLevel) -> float | None:
    """The median TPOT a level's table shows (the terminal's, the Markdown's and the HTML's); None where it shows
    "—"."""
    return None if tpot_unseen(s) else s.tpot_ms.p50


GOODPUT = "Goodput req/s"
PER_AGENT = "Per-agent tok/s"


def mixed_label(s: ServingLevel) -> str:
    """A level among both open and closed loops: "c=8" for a concurrency, as the rates are "2/s"."""
    return f"c={level_label(s)}" if s.rate is None and s.concurrency is not None else level_label(s)


def _first_column(levels: list[ServingLevel]) -> Column:
    """The levels' load: rates, agents or concurrencies; both rates and concurrencies in an imported run of open
    and closed loops (GuideLLM's profiles), where "8" under "Rate" read as 8/s."""
    if any(s.rate is not None for s in levels):
        if any(s.rate is None and s.concurrency is not None for s in levels):
            return "Load", mixed_label
        return "Rate", level_label
    return ("Agents" if any(s.session is not None for s in levels) else "Concurrency"), level_label


def _sweep_columns(levels: list[ServingLevel], currency: str, predicted: bool = False) -> list[Column]:
    """The sweep table's columns: the fixed ones, and those only some runs have a figure for; ``predicted``: its
    rates and times to the significant figures a prediction's band supports."""
    rate, time = (_predicted_num, _predicted_ms) if predicted else (num, ms)
    # imported rows at one concurrency can differ by prompt length only: say which is which
    keys = [(level_label(s), s.input_tokens_mean) for s in levels]
    cols: list[Column] = [_first_column(levels)]
    if len(set(keys)) > len({k for k, _ in keys}):
        cols.append(("Prompt tokens", lambda s: f"{s.input_tokens_mean:,.0f}" if s.input_tokens_mean else "—"))
    cols += [("Aggregate output tok/s", lambda s: _aggregate(s, rate)),
             (PER_AGENT, lambda s: rate(per_agent_shown(s))),
             ("Median TTFT", lambda s: time(s.ttft_ms.p50)), ("P99 TTFT", lambda s: _p99_ttft(s, time)),
             ("Median TPOT", lambda s: time(tpot_shown(s)))]
    if any(s.cost_per_mtok is not None for s in levels):
        cols.append((f"{currency}/M output", lambda s: money(s.cost_per_mtok)))
    if any(s.slo for s in levels):  # --slo given: its verdict and goodput per level, before the counts
        cols += [("SLO", slo_verdict), (GOODPUT, lambda s: num(s.goodput_rps, 2))]
    # published rows that give only a prefill or a decode rate: those columns, or the row would be blank
    if any((s.prefill_tps or s.decode_tps) and not (s.completed or s.failed) for s in levels):
        cols += [("Prefill tok/s", lambda s: num(s.prefill_tps)), ("Decode tok/s", lambda s: num(s.decode_tps))]
    cols += [("OK/failed", lambda s: s.ok_failed() or "—"),
             ("Flags", lambda s: ",".join(f for f in s.flags if f != "p99_estimate") or "")]
    return cols


def sweep_rows(levels: list[ServingLevel], currency: str = "USD",
               predicted: bool = False) -> tuple[list[str], list[list[str]]]:
    cols = _sweep_columns(levels, currency, predicted)
    return [h for h, _ in cols], [[cell(s) for _, cell in cols] for s in levels]


#: Notes with a line of their own under the table (the p99 asterisk, the failed requests' kinds, the interrupt).
SAID_ELSEWHERE = frozenset({Code.P99_ESTIMATE, Code.ERRORS, Code.INTERRUPTED})
#: An objective as ``SLO.describe`` writes it that is a per-request limit only (``tpot<=50ms``).
PER_REQUEST = re.compile(r"^(ttft|tpot|e2e|itl)<=")


def _missed(c: SloCheck) -> str:
    """A failed objective, its value against its limit: "ttft_p50 20.6 ms against <= 10 ms (8 of 8 over)"."""
    value = "none measured" if c.value is None else beside_limit(c.value, c.limit, c.unit)
    floor = c.unit == "tok/s" or c.name == CLIFF_CHECK  # a rate and the cached share are held from below
    rel = ">=" if floor else "<="
    basis = f" ({c.over} of {c.n} {'under' if floor else 'over'})" if c.over is not None else ""
    return f"{c.name} {value} against {rel} {quantity(c.limit, c.unit)}{basis}"


def slo_verdict(s: ServingLevel) -> str:
    if s.slo_met is None:
        return "—"
    return "pass" if s.slo_met else "FAIL"


def single_stream_lines(levels: list[ServingLevel]) -> list[str]:
    out = []
    for s in levels:
        if s.session is not None and s.session.cache == "warm":
            continue  # its prompts were mostly served from the cache: input / TTFT is no prefill rate
        decode = _decode_part(s)
        if s.concurrency == 1 and (s.prefill_tps or decode):
            parts = ([f"prefill {num(s.prefill_tps)} tok/s (input tokens / TTFT, median)"] if s.prefill_tps else []) \
                + decode
            out.append("Concurrency 1: " + ", ".join(parts))
            break
    return out


def _decode_part(s: ServingLevel) -> list[str]:
    """The single-stream decode rate, 1 / median TPOT: none where the median TPOT is withheld, and said to read
    high where some answers came whole in one read (their TPOT 0 pulls the median down): a run of 2-token answers
    printed "single-stream decode 39,716 tok/s" as a figure."""
    if s.concurrency != 1:
        return []
    if tpot_unseen(s):
        return ["no single-stream decode (its median TPOT is withheld: one_read)"]
    if not s.decode_tps:
        return []
    found = s.finding(Code.ONE_READ)
    if found is None and Code.ONE_READ.value not in s.flags:
        return [f"single-stream decode {num(s.decode_tps)} tok/s (1 / median TPOT)"]
    share = f"{found.observed:.0%} of " if found is not None and found.observed is not None else "some "
    return [f"single-stream decode {num(s.decode_tps)} tok/s (1 / median TPOT; reads high: {share}its answers "
            "came whole in one read, one_read)"]


#: Time to first text this far past the median TTFT is worth a note: tokens were streamed before their text.
HELD_BACK_NOTE_MS = 1.0


def _cliff_floor(levels: list[ServingLevel]) -> str:
    """A cache-cliff search's own objective, beside the SLO's: the floor its levels' cached share was held to."""
    floor = next((c.limit for s in levels for c in s.slo_checks if c.name == CLIFF_CHECK), None)
    return "" if floor is None else f", {CLIFF_CHECK}>={floor:.1%} (the cache-cliff search's floor)"


def notes(levels: list[ServingLevel]) -> list[str]:
    """What the table leaves to the lines under it, in order: the SLO, the p99's asterisk, the plateau, a per-agent
    rate withheld, each warning and flag with its levels, a median TPOT withheld, then each level's reasoning,
    held-back text, tool calls, server and power."""
    out = _slo_lines(levels)
    if any(s.ttft_ms.n and s.ttft_ms.n < 100 for s in levels):
        out.append("* p99 over fewer than 100 requests: an estimate from few tail samples")
    out += _plateau_line(levels) + _per_agent_line(levels) + _arrival_line(levels)
    out += _finding_lines(levels) + _tpot_line(levels)
    for s in levels:
        if s.reasoning_share is not None and s.answer_throughput_tps is not None:
            out.append(f"[{level_label(s)}] reasoning took {s.reasoning_share:.0%} of the output tokens: answers "
                       f"came at {num(s.answer_throughput_tps)} of {num(s.output_throughput_tps)} tok/s")
    for s in levels:
        text = s.time_to_first_text_ms
        if text is not None and text.p50 is not None and s.ttft_ms.p50 is not None \
                and text.p50 - s.ttft_ms.p50 >= HELD_BACK_NOTE_MS:
            out.append(f"[{level_label(s)}] first visible text at a median {ms(text.p50)}, "
                       f"{ms(text.p50 - s.ttft_ms.p50)} after the first token: the server held its text back "
                       "(a piece of a character); tools that wait for text (AIPerf, GuideLLM) call that TTFT")
    out += [line for s in levels if (line := _tool_line(s))]
    for s in levels:
        parts = _server_parts(s)
        if parts:
            out.append(f"[{level_label(s)}] server: " + ", ".join(parts))
    return out + _power_lines(levels)


def _slo_lines(levels: list[ServingLevel]) -> list[str]:
    """The SLO and how it judges, a bare per-request limit said to judge no level, and each failed level's
    missed objectives."""
    out = []
    slos = {s.slo for s in levels if s.slo}
    if slos:
        out.append(f"SLO {', '.join(sorted(slos))}{_cliff_floor(levels)}: pass when every level objective holds "
                   "(no request failed, unless errors= allows some); goodput counts the requests within every "
                   "per-request limit" + (" and at the agent_tps_pNN rate or faster"
                                          if any("agent_tps_p" in s for s in slos) else ""))
        bare = sorted({p for slo in slos for p in slo.split(",") if PER_REQUEST.match(p)})
        if bare:
            out.append(f"{', '.join(bare)}: {'a per-request limit' if len(bare) == 1 else 'per-request limits'}, "
                       "counted in goodput, never in the verdict; a percentile (e.g. "
                       f"{bare[0].split('<=')[0]}_p90) holds the level to it")
    for s in levels:
        failed = [c for c in s.slo_checks if not c.met]
        if s.slo_met is False and failed:
            out.append(f"[{level_label(s)}] SLO FAIL: " + "; ".join(_missed(c) for c in failed))
    return out


def _finding_lines(levels: list[ServingLevel]) -> list[str]:
    """Each warning, failed requests' kinds and flag the table shows, once per text with the levels it is on."""
    by_text: dict[str, list[str]] = {}
    for s in levels:
        for w in s.warnings:
            by_text.setdefault(w, []).append(level_label(s))
        if failed := {k: v for k, v in s.errors.items() if k not in CUT_KINDS}:  # the cut: a line of their own
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(failed.items()))
            by_text.setdefault(f"failed requests: {kinds}", []).append(level_label(s))
        if n := s.errors.get(INTERRUPTED, 0):
            by_text.setdefault(f"{n} cut: in flight at the interrupt, not failed by the server (the JSON "
                               "counts them in failed, as errors.interrupted)", []).append(level_label(s))
        if n := s.errors.get(LEVEL_END, 0):
            by_text.setdefault(f"{n} cut: unanswered at the level's end and its grace (--grace), cancelled (the "
                               "JSON counts them in failed, as errors.level_end)", []).append(level_label(s))
    # a flag the table shows whose finding is a note (no warning line of its own) is said too: phase_locked and
    # no_plateau were in the Flags column and in the JSON only (p99's asterisk, the failed requests and an
    # interrupt each have their line)
    for s in levels:
        for f in s.findings:
            if f.severity == "note" and f.code not in SAID_ELSEWHERE:
                by_text.setdefault(f"{f.code.value}: {f.text}", []).append(level_label(s))
    return [f"[{','.join(keys)}] {text}" for text, keys in by_text.items()]


def _power_lines(levels: list[ServingLevel]) -> list[str]:
    """Each level whose power figure is partial, or missing for a reason other than having no meter to read (a
    meter or an agent that stopped answering mid-run), and why: the J/token of part of a level read as whole, and
    the next level's figure went missing, without a word."""
    out: list[str] = []
    for s in levels:
        t = s.telemetry or Telemetry()
        if t.power_source is not None and t.power_partial:
            out.append(f"[{level_label(s)}] power partial: {t.power_note or 'its source stopped within the level'}")
        elif t.power_source is None and t.power_note and not t.power_note.startswith(NO_METER_NOTES):
            out.append(f"[{level_label(s)}] no power figure: {t.power_note}")
        elif t.power_source is None and t.power_note and (t.power_note.startswith(NO_METER_NOTES[1])
                                                          or "--idle-power" in t.power_note):
            # no meter where one was asked for (an agent on the server host, --idle-power): said once, for all
            if (line := f"no power figure: {t.power_note}") not in out:
                out.append(line)
    return out


def _plateau_line(levels: list[ServingLevel]) -> list[str]:
    """What the table's throughput columns count: each level's plateau, and how much of its window that is."""
    shares = ", ".join(f"{level_label(s)}: {s.plateau.share:.0%}" for s in levels if s.plateau is not None)
    if not shares:
        return []
    closed = all(s.concurrency for s in levels if s.plateau is not None)
    # the shares are the plateau's part of the window, not of the load: "in flight at least 95% of its load
    # (4: 91% ...)" read as a level that fell short of its own rule
    what = "the span with at least 95% of its load in flight" if closed else "its load held, ramp and drain left out"
    return [f"tok/s over each level's plateau ({what}), which took {shares} of its window; over the "
            "whole window, ramp and drain included, in the JSON (output_throughput_tps)"]


def _tool_line(s: ServingLevel) -> str | None:
    """When the level's answers called tools: how long the first call took to start, beside TTFT."""
    tool = s.time_to_first_tool_ms
    if tool is None or not tool.n or tool.p50 is None:
        return None
    return (f"[{level_label(s)}] first tool call at a median {ms(tool.p50)} (p90 {ms(tool.p90)}) after the request, "
            f"in {tool.n} of {s.completed} requests (TTFT {ms(s.ttft_ms.p50)})")


def _server_parts(s: ServingLevel) -> list[str]:
    """What the server said of a level: its /metrics (and power), and what its responses said of its cache."""
    t = s.telemetry or Telemetry()
    parts: list[str] = []
    if t.kv_cache_usage_max is not None and t.running_max == 0 and s.completed:
        # a level shorter than the sampling interval: its samples saw the server idle, not its peak
        parts.append(f"peak KV cache not seen (no /metrics sample of {t.samples or 0} caught a request running; "
                     "--metrics-interval samples more often)")
    elif t.kv_cache_usage_max is not None:
        # two figures: a small pool's use under 1% (0.12% of a 1 GiB vLLM pool) read "0%", as if nothing was held
        parts.append(f"peak KV cache {sig(t.kv_cache_usage_max * 100)}%")
    if t.waiting_max:
        parts.append(f"up to {plural(round(t.waiting_max), 'request')} waiting")
    if t.spec_acceptance_rate is not None:
        mal = t.spec_mean_acceptance_length
        parts.append(f"speculative acceptance {t.spec_acceptance_rate:.2f}"
                     + (f" (mean acceptance length {mal:.2f})" if mal else ""))
    if t.prefix_cache_hit_rate is not None:
        lanes = " (the lanes' warm-up calls too)" if lanes_warmed(s) else ""
        parts.append(f"prefix-cache hits {t.prefix_cache_hit_rate:.0%}{lanes}")
    if t.cached_by_tier:  # where the cached tokens came from: the device, or a tier beyond it
        parts.append("cached tokens by tier: " + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(t.cached_by_tier.items())))
    if s.cached_share:  # the responses' own count (usage or timings), beside the server's /metrics
        parts.append(f"{s.cached_share:.0%} of prompt tokens served from its cache ({s.cached_source})")
    if t.j_per_output_token is not None:
        idle = (f", {t.power_above_idle_share:.0%} of it above the idle {t.idle_power_w:.0f} W"
                if t.power_above_idle_share is not None and t.idle_power_w is not None else "")
        parts.append(f"{t.j_per_output_token:.2f} J/token, {t.output_tokens_per_watt or 0:.2f} tok/s per W"
                     + (f" ({t.power_measures})" if t.power_measures else "") + idle
                     + (" (partial: see below)" if t.power_partial else ""))
    return parts


def format_sweep_markdown(levels: list[ServingLevel], currency: str = "USD", predicted: bool = False) -> str:
    header, rows = sweep_rows(levels, currency, predicted)
    parts = [format_markdown(header, rows)]
    # each note a paragraph of its own: lines one under the other would render as one, and a note's leading "*"
    # (the p99 footnote) as a bullet
    parts += [x for line in single_stream_lines(levels) + notes(levels) for x in ("", md_paragraph(line))]
    return "\n".join(parts)


def print_sweep(console: Console, levels: list[ServingLevel], currency: str, title: str | None = None,
                predicted: bool = False) -> None:
    header, rows = sweep_rows(levels, currency, predicted)
    # what every level shares said once above the table; the flags under it where they do not fit in it; goodput,
    # then the per-agent rate (the aggregate over the concurrency) left out before the table becomes a block per
    # level (an SLO's verdict that varies takes a column at 80; a published import's prompt lengths and its
    # prefill- or decode-only rows take three)
    spare = [(header.index(GOODPUT), f"{GOODPUT} (requests a second within the SLO's per-request limits) left out "
              "at this width: --format markdown and --json have it")] if GOODPUT in header else []
    spare.append((header.index(PER_AGENT), f"{PER_AGENT} (the aggregate over the concurrency) left out at this "
                  "width: --format markdown and --json have it"))
    print_table(console, header, rows, title=title, numeric=True, keep=(0,), aside=len(header) - 1, spare=spare,
                per_row={header.index("OK/failed"): "a level"})
    if any(s.replay is not None for s in levels):
        print_replays(console, levels)
    elif any(s.session is not None for s in levels):
        print_sessions(console, levels)
    for line in single_stream_lines(levels):
        console.print(line)
    for line in notes(levels):
        console.print(line, style="yellow", markup=False, highlight=False)
