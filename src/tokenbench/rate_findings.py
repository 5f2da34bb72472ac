"""The open loop's level rules (``--rate``): a level that offered more than the server answers, whose queue then
grew through it, and one whose output ran above the load it offered. Listed with the other rules in
``findings.LEVEL_RULES``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .finding import Code, Finding
from .layout import plural
from .steady import OVERSATURATED_TTFT_RATIO

if TYPE_CHECKING:
    from .findings import LevelFacts

#: An open loop's output rate over this multiple of the load it offered (its rate x its mean output) measured
#: its few arrivals' own speed, not the load: Poisson arrivals alone seldom run a level this far ahead.
OVER_OFFERED_RATIO = 1.25


def over_offered(f: LevelFacts) -> Finding | None:
    """An open-loop level whose output rate is well above the load it offered: the window from its first send to
    its last answer held few arrivals (one request at 0.5/s read 1,146 tok/s against 64 offered)."""
    s = f.summary
    if s.rate is None or not s.output_tokens_mean or not s.sustained_tps:
        return None
    offered = s.rate * s.output_tokens_mean
    if s.sustained_tps <= OVER_OFFERED_RATIO * offered:
        return None
    n = len(f.measured)
    more = "a longer --duration" if f.requests is None else "more requests (--requests 30 or more) or --duration"
    return Finding(Code.OVER_OFFERED, f"{s.sustained_tps:,.1f} tok/s out, above the load offered ({s.rate:g}/s x "
                   f"{s.output_tokens_mean:,.0f} tokens = {offered:,.1f} tok/s): over {plural(n, 'arrival')} the "
                   "window is those requests' own time, not the rate's", more, observed=s.sustained_tps,
                   threshold=OVER_OFFERED_RATIO * offered, unit="tok/s", n=n)


def rate_not_sustained(f: LevelFacts) -> Finding | None:
    """An open-loop level that offered more than the server answers: requests piled up in flight and TTFT grew
    with them, so the level's latencies say how long it ran, not what the box does at that rate (a level of 30/s
    on a server answering 8 a second read "had not settled", with more warm-up advised). A capacity search stops
    such a level as it runs (its own stopped_early); a sweep runs it to its end and says so."""
    s, grew = f.summary, f.grew
    if grew is None or f.stopped is not None:  # grew: an open loop's (LevelFacts), None for any other level
        return None
    answered = f" (answered {s.request_throughput_rps:,.2f}/s)" if s.request_throughput_rps else ""
    return Finding(Code.RATE_NOT_SUSTAINED, f"the server did not keep up with {s.rate:g} requests/s{answered}: "
                   f"requests in flight grew from {grew.first} to {grew.last} while TTFT rose from "
                   f"{grew.early_ms:,.0f} to {grew.late_ms:,.0f} ms through the level: its latencies say how long "
                   "it ran, not what the box does at this rate",
                   "a lower --rate, or capacity --rate to find the highest it sustains", observed=grew.last,
                   threshold=OVERSATURATED_TTFT_RATIO * max(grew.first, 1), unit="requests in flight",
                   n=len(f.ok))
