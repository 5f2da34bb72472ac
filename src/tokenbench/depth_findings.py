"""What a level's repetitions and a depth run's steps cannot say by themselves: throughput that varies between
repetitions, a depth rate whose spread is half its mean, a context that was not warm, the server's timings against
the client's, a rate above the server's own, a depth that does not fit the slot. Each a ``findings.Finding``, its
threshold a named constant here."""

from __future__ import annotations

from collections.abc import Sequence

from .finding import Code, Finding
from .layout import sig
from .levels import DepthLevel

#: Throughput varying this much (coefficient of variation) between repetitions: the bench is noisy (pyperf
#: warns when the standard deviation is at least 10% of the mean).
UNSTABLE_REPETITION_CV = 0.10
#: Depth: the pp step re-processed the context when it took more than this share of the fill's time while the
#: depth is much longer than pp (a warm prefix makes it far shorter).
COLD_SHARE = 0.5
#: Depth: the pp step found its context warm when the server took at least this share of the depth from its cache.
WARM_SHARE = 0.9
#: What keeps a depth's context warm between its fill and its pp step.
COLD_REMEDY = "vLLM: --enable-prefix-caching; llama.cpp: one client per slot"
#: Depth: server timings and the client's clock may disagree by this much before it is flagged.
TIMINGS_TOLERANCE = 0.25
#: Depth: a rate whose standard deviation is above this share of its mean is no measurement (the depth rule;
#: pyperf warns at 10%, llama-bench prints whatever it got).
UNSTABLE_SD_SHARE = 0.5
#: Depth: the client's tg may read a little above the server's (it cannot see the server's first step), never more.
SERVER_TG_MARGIN = 0.10


def unstable_repetitions(cv: float | None, n: int) -> Finding | None:
    """Throughput that varies between repetitions of one level (``UNSTABLE_REPETITION_CV``)."""
    if cv is None or cv < UNSTABLE_REPETITION_CV:
        return None
    return Finding(Code.UNSTABLE, f"throughput varies {cv:.0%} between repetitions: the bench is noisy",
                   observed=cv, threshold=UNSTABLE_REPETITION_CV, unit="cv", n=n)


def unstable_depth_rate(kind: str, mean: float | None, sd: float | None, reps: list[float]) -> Finding | None:
    """A depth pp or tg rate whose spread is over ``UNSTABLE_SD_SHARE`` of its mean."""
    if not mean or sd is None or sd <= UNSTABLE_SD_SHARE * mean:
        return None
    over = (f"over {len(reps)} repetitions ({', '.join(f'{v:,.1f}' for v in reps)} tok/s)" if reps else
            f"(± {sig(sd, 2)} tok/s, as its file states)")  # an import: its spread, not its repetitions
    return Finding(Code.UNSTABLE, f"{kind} varies {sd / mean:.0%} of its mean {over}: not a measurement",
                   "quiet the machine, raise --repetitions or --tg" if reps else
                   "quiet the machine and measure again, with more repetitions", sd / mean, UNSTABLE_SD_SHARE,
                   "sd/mean", len(reps))


def context_not_warm(depth: int, pp: int, steps: Sequence[tuple[float | None, float, int | None]]) -> Finding | None:
    """Depth: (fill_s, pp_s, cached tokens the server said) per repetition; the pp step re-processed the context.
    Where the server says how many of the prompt's tokens it took from its cache (llama.cpp's ``cache_n``), that
    decides: under WARM_SHARE of the depth is cold. Else the time (``COLD_SHARE`` of the fill's), which misreads a
    warm context at depth 4 x pp on a model whose attention dominates (a ratio near 0.5, warm: 110 ms against a
    215 ms fill, the server's cache_n the whole depth)."""
    if depth < 4 * pp or not any(fill for fill, _, _ in steps):
        return None
    said = [cached for fill, _, cached in steps if fill and cached is not None]
    if said:
        cached = next((c for c in said if c < WARM_SHARE * depth), None)
        if cached is None:
            return None
        return Finding(Code.CONTEXT_NOT_WARM,
                       f"the server took {cached:,} of the {depth:,}-token context from its cache for the pp step: it "
                       "did not keep it warm, so pp includes the depth's prefill", COLD_REMEDY,
                       cached / depth, WARM_SHARE, "cached share of the depth", len(steps))
    cold = [(fill or 0.0, pp_s) for fill, pp_s, _ in steps if fill and pp_s > COLD_SHARE * fill]
    if not cold:
        return None
    fill_s, pp_s = cold[0]
    return Finding(Code.CONTEXT_NOT_WARM,
                   f"the pp step took {pp_s * 1000:.0f} ms against {fill_s * 1000:.0f} ms to fill the {depth}-token "
                   "context: the server did not keep it warm, so pp includes the depth's prefill", COLD_REMEDY,
                   pp_s / fill_s, COLD_SHARE, "pp time / fill time", len(steps))


def timings_disagree(server_pp: float, client_pp: float) -> Finding | None:
    """Depth: the server's prefill rate and the client's differ by more than ``TIMINGS_TOLERANCE``."""
    off = abs(server_pp - client_pp) / client_pp
    if off <= TIMINGS_TOLERANCE:
        return None
    return Finding(Code.TIMINGS_DISAGREE,
                   f"the server's timings say {server_pp:,.0f} tok/s prefill, the client measured {client_pp:,.0f}: "
                   "network or queueing time is in the client's figure", observed=off, threshold=TIMINGS_TOLERANCE,
                   unit="relative difference")


def exceeds_server_timings(client_tg: float, server_tg: float) -> Finding | None:
    """Depth: the client's tg above what the server's own timings allow (``SERVER_TG_MARGIN``)."""
    if client_tg <= server_tg * (1 + SERVER_TG_MARGIN):
        return None
    return Finding(Code.EXCEEDS_SERVER_TIMINGS,
                   f"the client timed tg at {client_tg:,.1f} tok/s, faster than the server's own timings allow "
                   f"({server_tg:,.1f} tok/s): chunks were held back and sent together", "not published",
                   client_tg, server_tg * (1 + SERVER_TG_MARGIN), "tok/s")


def exceeds_context(depth: int, pp: int, tg: int, slot_ctx: int, advice: str) -> Finding:
    """Depth: a depth that does not fit the context the server gives a request, kept as skipped. ``advice``: the
    server's way to give more (its adapter's ``more_context``)."""
    return Finding(Code.EXCEEDS_CONTEXT,
                   f"depth {depth} + pp {pp} + tg {tg} does not fit the {slot_ctx} tokens of context the server "
                   "gives a request",
                   f"not run ({advice})", depth + pp + tg, slot_ctx, "tokens")


def decode_past_prefill(levels: Sequence[DepthLevel]) -> list[tuple[DepthLevel, Finding]]:
    """tg rates above every pp rate the run measured at the same depth and concurrency: a box decodes one token a
    step and prefills many in one, so such a decode rate is no measurement (a tool's first tg at 103,549 tok/s
    beside pp at 6,668). Each tg level with the finding it takes."""
    pp: dict[tuple[int, int], float] = {}
    for s in levels:
        if s.pp_tps:
            key = (s.depth or 0, s.concurrency or 1)
            pp[key] = max(pp.get(key, s.pp_tps), s.pp_tps)
    out = []
    for s in levels:
        fastest = pp.get((s.depth or 0, s.concurrency or 1))
        if s.tg_tps and fastest and s.tg_tps > fastest:
            out.append((s, Finding(Code.DECODE_PAST_PREFILL,
                                   f"tg at {s.tg_tps:,.1f} tok/s is above every prefill rate this run measured at "
                                   f"the same depth and concurrency (at most {fastest:,.1f} tok/s): no box decodes "
                                   "faster than it prefills", "leave this row out; measure again", s.tg_tps, fastest,
                                   "tok/s")))
    return out
