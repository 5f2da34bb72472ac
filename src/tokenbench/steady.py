"""A level's steady state: the figures of its plateau beside those of its whole window, and what says a level did
not settle.

A closed loop ramps up (its streams start one by one) and drains (its last requests finish with fewer and fewer in
flight); an open loop ramps until its queue reaches the offered rate's steady number in flight, and drains after
its last arrival. Over the whole window both count as if they were the load. The plateau is the span in which the
load was what the level asked for: in flight at least ``PLATEAU_SHARE`` of the target (a closed loop's concurrency;
an open loop's median in flight while it still sends), from the first moment it got there to the last. Its
figures: output tokens that arrived inside it (each stream's chunks stamped where they arrived), over its length;
and the latencies of the requests sent inside it.

Three readings of a level's own records say it did not settle, each a finding with its remedy: latency that
drifts from its first third to its last; a tail that is a cluster of its own far from the body (a few requests
that waited for a one-time cost); a per-agent rate below half of what the level's own TPOT allows, which neither
TTFT nor pauses explain.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .distribution import Distribution
from .records import RequestRecord

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
#: In flight at least this share of the target is the plateau (the issue of a 2-stream level: 0.95 x 2 = 2).
PLATEAU_SHARE = 0.95
#: A plateau shorter than this share of the level's window is no plateau: the level was mostly ramp and drain.
PLATEAU_MIN_SHARE = 0.5
#: Median TTFT (or TPOT) of the last third this many times the first third's: the level drifted.
DRIFT_RATIO = 1.5
#: Requests a third must have for a drift to be told from noise, and the least change that counts (ms): a TTFT's,
#: and a TPOT's (a token's time is a few ms, so 1 ms is already a large change of it).
DRIFT_MIN_THIRD, DRIFT_MIN_MS, DRIFT_MIN_TPOT_MS = 5, 5.0, 1.0
#: Reads under this many ms a token apart are one read: the answer came whole, its decode unseen (``one_read``).
UNSEEN_TPOT_MS = 0.05
#: A tail cluster: the slowest requests (at most this share) at least this many times the median of the rest, and
#: at least TAIL_MIN_MS above it (a 1 ms body's 5 ms outliers are noise, not a one-time cost).
TAIL_SHARE, TAIL_RATIO, TAIL_MIN_MS = 0.1, 5.0, 20.0


@dataclass(slots=True)
class Plateau:
    """A level's figures over its plateau. ``start_s``/``end_s``: seconds from the window's start."""

    start_s: float
    end_s: float
    share: float  # of the level's window
    in_flight_target: float
    output_throughput_tps: float
    request_throughput_rps: float
    ttft_ms: Distribution
    tpot_ms: Distribution
    requests: int  # sent inside it

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["duration_s"] = self.duration_s
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plateau:
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for k in ("ttft_ms", "tpot_ms"):
            d[k] = Distribution(**d[k]) if isinstance(d.get(k), dict) else Distribution(n=0)
        return cls(**d)


def in_flight_steps(records: list[RequestRecord]) -> list[tuple[int, int]]:
    """(time, requests in flight from then on), at every send and every end."""
    events = sorted([(r.sent_ns, 1) for r in records if r.end_ns is not None] +
                    [(r.end_ns, -1) for r in records if r.end_ns is not None], key=lambda e: (e[0], e[1]))
    out, n = [], 0
    for t, d in events:
        n += d
        out.append((t, n))
    return out


def plateau(records: list[RequestRecord], concurrency: int | None, window: tuple[int, int]) -> Plateau | None:
    """The level's plateau and its figures; None where it has none (too few requests, or never at its load)."""
    measured = [r for r in records if r.phase == "measured" and r.end_ns is not None]
    if any(r.session is not None for r in measured):
        return None  # agents pause between turns: fewer in flight than agents is their load, not a ramp
    steps = in_flight_steps(measured)
    if len(measured) < 4 or not steps or window[1] <= window[0]:
        return None
    if not concurrency:
        return _open_plateau(measured, steps, window)
    target = float(concurrency)
    need = max(1, round(PLATEAU_SHARE * target))
    at = [i for i, (_, n) in enumerate(steps) if n >= need]
    if not at:
        return None
    start = steps[at[0]][0]
    end = steps[at[-1] + 1][0] if at[-1] + 1 < len(steps) else steps[at[-1]][0]
    if end <= start or (end - start) < PLATEAU_MIN_SHARE * (window[1] - window[0]):
        return None
    return _figures(measured, start, end, window, target)


def _open_plateau(measured: list[RequestRecord], steps: list[tuple[int, int]], window: tuple[int, int]) -> Plateau | None:
    """An open loop's plateau: from one median request's time after its first send (the server filled) to one
    after its last send, so that it holds the answers to the sends between (ending at the last send left the
    last answer out: a constant 0.5/s of 128 tokens over 10 s read 48.6 tok/s where 64 were offered and served).
    Its edges are fixed by the sends, not chosen where many requests were in flight, which puts them at bursts of
    arrivals (a 4 s level at 20/s once read 21.7 requests/s over such edges; over short windows either reading
    moves by a few percent with the arrivals)."""
    e2e = [r.e2e_ns for r in measured if r.ok and r.e2e_ns is not None]
    if not e2e:
        return None
    first, last = min(r.sent_ns for r in measured), max(r.sent_ns for r in measured)
    held = int(statistics.median(e2e))
    start, end = first + held, min(last + held, window[1])
    if end <= start or (end - start) < PLATEAU_MIN_SHARE * (window[1] - window[0]):
        return None
    during = [n for t, n in steps if t <= last]  # its usual number in flight while it still sends
    return _figures(measured, start, end, window, statistics.median(during) if during else 0.0)


def decode_unseen(r: RequestRecord) -> bool:
    """Whether an answer of two tokens or more came whole in one network read, or in reads under UNSEEN_TPOT_MS a
    token apart: its stamps do not say when its tokens were made (a server that buffers its stream, or a client
    that read late)."""
    return (r.output_tokens or 0) >= 2 and bool(r.chunk_ns) and \
        r.chunk_ns[-1] - r.chunk_ns[0] < UNSEEN_TPOT_MS * NS_PER_MS * ((r.output_tokens or 2) - 1)


def _tokens_within(r: RequestRecord, start: int, end: int) -> float:
    """The output tokens of one successful request that arrived within [start, end): by its chunk stamps. A record
    kept without them spreads its tokens evenly from its first to its last (it counted none, and a plateau of
    such records read 0 tok/s); one whose answer came whole (``decode_unseen``), over its time in flight, as its
    stamps, all at its end, say nothing of when they were made: a closed loop's plateau ends at such an end, and
    a level of 8 requests at 2 read 96 of its 128 tokens over a plateau of 99.6% of its window, 25% below the
    window's rate."""
    if not (r.ok and r.output_tokens):
        return 0.0
    if r.chunk_ns and not decode_unseen(r):
        return r.output_tokens / len(r.chunk_ns) * sum(1 for t in r.chunk_ns if start <= t < end)
    if r.first_token_ns is None or r.end_ns is None:
        return 0.0
    lo, hi = (r.sent_ns if r.chunk_ns else r.first_token_ns), r.end_ns
    return r.output_tokens * (max(0, min(hi, end) - max(lo, start)) / (hi - lo) if hi > lo else float(start <= lo < end))


def _figures(measured: list[RequestRecord], start: int, end: int, window: tuple[int, int], target: float) -> Plateau:
    tokens = sum(_tokens_within(r, start, end) for r in measured)
    inside = [r for r in measured if start <= r.sent_ns < end and r.ok]
    span_s = (end - start) / NS_PER_S
    done = sum(1 for r in measured if r.ok and r.end_ns is not None and start <= r.end_ns < end)
    tpots = [(r.end_ns - r.first_token_ns) / NS_PER_MS / (r.output_tokens - 1) for r in inside
             if r.first_token_ns is not None and r.end_ns is not None and r.output_tokens and r.output_tokens > 1]
    return Plateau(start_s=(start - window[0]) / NS_PER_S, end_s=(end - window[0]) / NS_PER_S,
                   share=(end - start) / (window[1] - window[0]), in_flight_target=target,
                   output_throughput_tps=tokens / span_s, request_throughput_rps=done / span_s,
                   ttft_ms=Distribution.of([r.ttft_ns / NS_PER_MS for r in inside if r.ttft_ns is not None]),
                   tpot_ms=Distribution.of(tpots), requests=len(inside))


# ---- what says a level did not settle ------------------------------------------------------------------------------

#: ``--warmup auto``: at most this many rounds of warm-up, until one round's median TTFT is within SETTLED_RATIO of
#: the round's before, or SETTLED_MS (a timer's jitter on a fast server).
WARMUP_ROUNDS = 6
SETTLED_RATIO, SETTLED_MS = 0.2, 2.0


def settled(before: list[RequestRecord], last: list[RequestRecord]) -> bool:
    """Whether the last warm-up round's median TTFT is within SETTLED_RATIO of the round's before it (every
    earlier warm-up request counts as before: the last round of them)."""
    def median(rs: list[RequestRecord]) -> float | None:
        v = [r.ttft_ns for r in rs if r.ok and r.ttft_ns is not None]
        return statistics.median(v) if v else None

    a, b = median(before[-len(last):] if last else []), median(last)
    return a is not None and b is not None and abs(b - a) <= max(SETTLED_RATIO * a, SETTLED_MS * NS_PER_MS)

def drift(records: list[RequestRecord]) -> tuple[str, float, float] | None:
    """The latency (TTFT, else TPOT) whose median in the last third of the level, by send time, is DRIFT_RATIO
    times the first third's or more (or as much less): (which, first, last) in ms; None where it held."""
    ok = sorted((r for r in records if r.phase == "measured" and r.ok), key=lambda r: r.sent_ns)
    third = len(ok) // 3
    if third < DRIFT_MIN_THIRD:
        return None
    # TPOT, not end-to-end time: a trace's or a dataset's output lengths vary through a level, and its later
    # requests' longer answers read as drift of E2E (a Mooncake trace's: 61 to 93 ms at an unchanged TTFT)
    reads: tuple[tuple[str, Callable[[RequestRecord], float | None], float], ...] = (
        ("TTFT", lambda r: r.ttft_ns, DRIFT_MIN_MS), ("TPOT", _tpot_ns, DRIFT_MIN_TPOT_MS))
    for name, value, least in reads:
        first = [v / NS_PER_MS for r in ok[:third] if (v := value(r)) is not None]
        last = [v / NS_PER_MS for r in ok[-third:] if (v := value(r)) is not None]
        if len(first) < DRIFT_MIN_THIRD or len(last) < DRIFT_MIN_THIRD:
            continue
        a, b = statistics.median(first), statistics.median(last)
        if a > 0 and b > 0 and max(a, b) / min(a, b) >= DRIFT_RATIO and abs(b - a) >= least:
            return name, a, b
    return None


#: An open-loop level is over-saturated when, over at least this many finished requests, the last third's median
#: TTFT is OVERSATURATED_TTFT_RATIO times the first third's and the requests in flight grew as much, by at least
#: OVERSATURATED_MIN_GROWTH: the queue grows without bound, so its TTFT says how long the level ran, not the box.
OVERSATURATED_MIN_DONE = 12
OVERSATURATED_TTFT_RATIO = 2.0
OVERSATURATED_MIN_GROWTH = 4


@dataclass(frozen=True, slots=True)
class QueueGrowth:
    """An open-loop level whose queue grew through it: the requests in flight as its first and last thirds were
    sent (each third's median), and those thirds' median TTFTs in ms."""

    first: int
    last: int
    early_ms: float
    late_ms: float


def thirds_ttft_ms(done: list[RequestRecord]) -> tuple[float, float]:
    """The median TTFT in ms of the first and the last third of ``done``: finished requests in the order sent."""
    third = len(done) // 3
    return (statistics.median(r.ttft_ns or 0 for r in done[:third]) / NS_PER_MS,
            statistics.median(r.ttft_ns or 0 for r in done[-third:]) / NS_PER_MS)


def oversaturated(first: int, last: int, early_ms: float, late_ms: float) -> bool:
    """The over-saturation rule, on the requests in flight and the median TTFT of a level's first and last thirds:
    both grew OVERSATURATED_TTFT_RATIO times, the requests in flight by OVERSATURATED_MIN_GROWTH or more."""
    return late_ms >= OVERSATURATED_TTFT_RATIO * max(early_ms, 1e-3) and \
        last >= OVERSATURATED_TTFT_RATIO * max(first, 1) and last - first >= OVERSATURATED_MIN_GROWTH


def queue_growth(records: list[RequestRecord]) -> QueueGrowth | None:
    """Over-saturation read from a level's records after it ran, by the rule a capacity search applies while it
    runs (capacity.LevelStop): None where the queue held."""
    measured = [r for r in records if r.phase == "measured" and r.sent_ns]
    done = sorted((r for r in measured if r.ok and r.ttft_ns is not None), key=lambda r: r.sent_ns)
    if len(done) < OVERSATURATED_MIN_DONE:
        return None
    sends = sorted(r.sent_ns for r in measured)
    ends = sorted(r.end_ns for r in measured if r.end_ns is not None)

    def in_flight(at: int) -> int:
        return bisect_right(sends, at) - bisect_right(ends, at)

    third = len(done) // 3
    early, late = thirds_ttft_ms(done)
    first = round(statistics.median(in_flight(r.sent_ns) for r in done[:third]))
    last = round(statistics.median(in_flight(r.sent_ns) for r in done[-third:]))
    return QueueGrowth(first, last, early, late) if oversaturated(first, last, early, late) else None


def _tpot_ns(r: RequestRecord) -> float | None:
    """A request's time per output token after its first (ns); None for an answer of fewer than 2 tokens."""
    n = r.output_tokens or 0
    if r.first_token_ns is None or r.end_ns is None or n < 2:
        return None
    return (r.end_ns - r.first_token_ns) / (n - 1)


def tail_cluster(values_ms: list[float]) -> tuple[int, float, float] | None:
    """The slowest few values (at most TAIL_SHARE of them) far above the rest: (how many, their smallest, the
    median of the rest); None where the tail belongs to the body."""
    v = sorted(values_ms)
    if len(v) < 10:
        return None
    body = statistics.median(v)
    far = [x for x in v if x >= TAIL_RATIO * max(body, 1e-3) and x - body >= TAIL_MIN_MS]
    if not far or len(far) > TAIL_SHARE * len(v):
        return None
    rest = v[: len(v) - len(far)]
    gap = far[0] / max(rest[-1], 1e-3) if rest else 0.0
    return (len(far), far[0], statistics.median(rest)) if gap >= 2.0 else None


def stagger_window(records: list[RequestRecord]) -> float:
    """``--phase staggered``: the span a closed loop's first sends are spread over, seconds: the warm-up requests'
    median send-to-last-byte time (a tenth of a second without a warm-up)."""
    e2e = [r.e2e_ns for r in records if r.phase == "warmup" and r.ok and r.e2e_ns is not None]
    return statistics.median(e2e) / NS_PER_S if e2e else 0.1


# ---- a closed loop's waves ----------------------------------------------------------------------------------------

#: Waves of a level that phase-locked: at least this many waves, two wave sizes each this often, and the median TTFT
#: of one size this many times another's.
PHASE_MIN_WAVES, PHASE_MIN_EACH, PHASE_TTFT_RATIO = 6, 3, 1.5


@dataclass(slots=True)
class WaveSize:
    size: int  # requests sent within one server step of the wave's first
    waves: int
    ttft_ms_p50: float | None


@dataclass(slots=True)
class Waves:
    """How a closed loop's requests arrived: in waves of requests sent within one server step (``step_ms``, the
    level's median TPOT) of each other, each size with its median TTFT. ``phase_locked``: the loop fell into a split
    it kept (say, one request alone and three together, level after level), so a request's TTFT says which wave it
    landed in as much as what the server does."""

    step_ms: float
    by_size: list[WaveSize]
    phase_locked: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Waves:
        sizes = [WaveSize(**{k: v for k, v in x.items() if k in WaveSize.__dataclass_fields__})
                 for x in d.get("by_size") or [] if isinstance(x, dict)]
        return cls(float(d.get("step_ms") or 0.0), sizes, bool(d.get("phase_locked")))


def _grouped(sent: list[RequestRecord], step_ms: float) -> list[list[RequestRecord]]:
    """Requests in send order, grouped: each with the group whose first it was sent within ``step_ms`` of."""
    groups: list[list[RequestRecord]] = []
    for r in sent:
        if groups and r.sent_ns - groups[-1][0].sent_ns <= step_ms * NS_PER_MS:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def waves(records: list[RequestRecord], concurrency: int | None, step_ms: float | None) -> Waves | None:
    """A closed loop's waves (None for one stream, an open loop, or too few requests)."""
    sent = sorted((r for r in records if r.phase == "measured" and r.ok), key=lambda r: r.sent_ns)
    if not concurrency or concurrency < 2 or len(sent) < 2 * concurrency or not step_ms:
        return None
    groups = _grouped(sent, step_ms)
    by: dict[int, list[list[RequestRecord]]] = {}
    for g in groups:
        by.setdefault(len(g), []).append(g)
    sizes = []
    for size in sorted(by):
        ttfts = [r.ttft_ns / NS_PER_MS for g in by[size] for r in g if r.ttft_ns is not None]
        sizes.append(WaveSize(size, len(by[size]), statistics.median(ttfts) if ttfts else None))
    common = [s for s in sizes if s.waves >= PHASE_MIN_EACH and s.ttft_ms_p50]
    locked = len(groups) >= PHASE_MIN_WAVES and len(common) >= 2 and \
        max(s.ttft_ms_p50 or 0 for s in common) >= PHASE_TTFT_RATIO * min(s.ttft_ms_p50 or 0 for s in common)
    return Waves(step_ms, sizes, locked)
