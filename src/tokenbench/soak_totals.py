"""What a soak keeps of the turns it has let go. A soak (``sweep --sessions N --duration 1h``) that kept every
turn's record to its end grew the client by 1.8-4.2 KiB a turn (benchmarks/soak_memory.py). Here each session
that has ended is folded into running figures as it ends, and its records can be let go:

- counts and sums exactly (requests, errors, tokens, cached tokens, busy time, each tenth of the run's turns);
- latencies as ``Sketch``es: count, mean, spread, least and most exactly, percentiles to ``RESOLUTION_MS`` or to
  0.05% of the value, whichever is more (a TTFT p99 of 1,500 ms read to 0.5 ms), in memory bounded by the range of
  the values, not their number.

``Keeper`` does it for a soak's level (``sessions.SessionLevel``, past ``sessions.KEEP_TURNS``): ``fold`` takes each
ended session's measured records, a uniform sample of the sessions stays in the level's records, the rest go to
the store at once, and ``apply`` makes the summary over the sample stand for every turn the soak sent."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .distribution import Sketch
from .levels import ServingLevel
from .metrics import cached_counts
from .records import RequestRecord
from .slo import SLO, request_itls_ms, request_meets, request_tpot_ms
from .soak import WINDOWS, SoakWindow

NS_PER_MS = 1_000_000

#: The latencies timed from a request's send besides TTFT and E2E: (the sketch's name, the record's stamp).
SINCE_SENT = (("ttfb", "first_byte_ns"), ("answer", "first_answer_ns"), ("text", "first_text_ns"),
              ("tool", "first_tool_ns"))

@dataclass(slots=True)
class Window:
    """One tenth of a soak: its successful turns, what their server said it served from its cache, their TTFT."""

    turns: int = 0
    cached: int = 0
    prompt: int = 0  # prompt tokens of the turns whose server said how many it served from its cache
    ttft: Sketch = field(default_factory=Sketch)


@dataclass(slots=True)
class Folded:
    """A soak's ended sessions, folded (``fold``)."""

    start_ns: int  # the soak's first send: its tenths count from it
    width_ns: int  # a tenth's length
    completed: int = 0
    failed: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    input_tokens: int = 0
    inputs: int = 0  # successful requests that said their input tokens
    output_tokens: int = 0
    outputs: int = 0
    output_min: int | None = None
    output_max: int | None = None
    chunks: int = 0
    reasoning: int = 0  # reasoning tokens, of the output tokens
    good: int = 0  # successful requests within every per-request limit of the SLO (goodput)
    busy_ns: int = 0
    cached: int = 0
    prompt_said: int = 0
    sessions: int = 0
    sessions_whole: int = 0  # every turn answered and not cut
    turns: int = 0
    #: the cached share's standard error, each session one sample: the sums its delta method needs
    share_sums: list[float] = field(default_factory=lambda: [0.0] * 6)  # n, Σc, Σp, Σc², Σcp, Σp²
    latency: dict[str, Sketch] = field(default_factory=dict)
    session_s: Sketch = field(default_factory=Sketch)
    windows: list[Window] = field(default_factory=list)

    def sketch(self, name: str) -> Sketch:
        return self.latency.setdefault(name, Sketch())


def _one(f: Folded, r: RequestRecord, slo: SLO | None) -> None:
    """One measured request into the totals and sketches."""
    if r.e2e_ns is not None:  # a failed request held its place in flight too
        f.busy_ns += r.e2e_ns
    if not r.ok:
        if r.error_kind is not None:
            f.errors[r.error_kind] += 1
        f.failed += 1
        return
    f.completed += 1
    if r.input_tokens is not None:
        f.input_tokens += r.input_tokens
        f.inputs += 1
    if r.output_tokens is not None:
        f.output_tokens += r.output_tokens
        f.outputs += 1
        f.output_min = r.output_tokens if f.output_min is None else min(f.output_min, r.output_tokens)
        f.output_max = r.output_tokens if f.output_max is None else max(f.output_max, r.output_tokens)
    f.chunks += len(r.chunk_ns)
    f.reasoning += r.reasoning_tokens or 0
    if slo is not None and request_meets(r, slo):
        f.good += 1
    if r.e2e_ns is not None:
        f.sketch("e2e").add(r.e2e_ns / NS_PER_MS)
    for name, at in SINCE_SENT:
        if (t := getattr(r, at)) is not None:
            f.sketch(name).add((t - r.sent_ns) / NS_PER_MS)
    if r.ttft_ns is not None:
        f.sketch("ttft").add(r.ttft_ns / NS_PER_MS)
    if (tpot := request_tpot_ms(r)) is not None:
        f.sketch("tpot").add(tpot)
    for gap in request_itls_ms(r):
        f.sketch("itl").add(gap)
    if r.said_cached:
        f.cached += r.cached_tokens or 0
        f.prompt_said += r.input_tokens or 0
    _windowed(f, r)


def _windowed(f: Folded, r: RequestRecord) -> None:
    """A successful turn into its tenth of the soak, by when it was sent."""
    k = max(0, int((r.sent_ns - f.start_ns) // max(1, f.width_ns)))
    while len(f.windows) <= k:
        f.windows.append(Window())
    w = f.windows[k]
    w.turns += 1
    if r.said_cached:
        w.cached += r.cached_tokens or 0
        w.prompt += r.input_tokens or 0
    if r.ttft_ns:
        w.ttft.add(r.ttft_ns / NS_PER_MS)


def fold(f: Folded, session: list[RequestRecord], cut: bool, slo: SLO | None = None) -> None:
    """One ended session's measured records into ``f``; ``cut``: a soak's end or an interrupt cut it short (its
    turns count, its time does not); ``slo``: the run's, whose per-request limits goodput counts."""
    measured = [r for r in session if r.phase == "measured"]
    if not measured:
        return
    f.sessions += 1
    f.turns += len(measured)
    for r in measured:
        _one(f, r, slo)
    c, p = cached_counts([r for r in measured if r.ok])
    if p:  # the server said, for some turn of the session
        for i, v in enumerate((1, c, p, c * c, c * p, p * p)):
            f.share_sums[i] += v
    if not cut and all(r.ok for r in measured):
        f.sessions_whole += 1
        f.session_s.add((max(r.end_ns or r.sent_ns for r in measured) - min(r.sent_ns for r in measured)) / 1e9)


def cached_share_se(f: Folded) -> float | None:
    """As ``metrics.cached_share_se`` over the folded sessions: sqrt(Σ(c_i - R p_i)² / (n (n - 1))) / mean(p_i),
    from the running sums."""
    n, sc, sp, scc, scp, spp = f.share_sums
    if n < 2 or not sp:
        return None
    share = sc / sp
    spread = max(0.0, scc - 2 * share * scp + share * share * spp) / (n - 1)
    return math.sqrt(spread / n) / (sp / n)


def windows(f: Folded, n: int) -> list[SoakWindow]:
    """The soak's ``n`` tenths (``metrics.soak_windows``) from the folded turns: a turn sent past the last tenth's
    end (a soak's grace) counts in the last, as there."""
    width_s = f.width_ns / 1e9
    out = [Window() for _ in range(n)]
    for k, w in enumerate(f.windows):
        into = out[min(k, n - 1)]
        into.turns += w.turns
        into.cached += w.cached
        into.prompt += w.prompt
        into.ttft.merge(w.ttft)
    return [SoakWindow(i * width_s, (i + 1) * width_s, w.turns, w.cached / w.prompt if w.prompt else None,
                       w.ttft.tally.percentile(50) if w.ttft.n else None) for i, w in enumerate(out)]


def apply(f: Folded, summary: ServingLevel) -> None:
    """The level's summary, computed over the records it kept, made to stand for every turn the soak sent: its
    counts, sums and rates from the totals, its latencies from the sketches (``summary.duration_s`` is the
    soak's window, as before). What stays the sample's: the per-turn rows, the error split, the objectives'
    verdicts and the findings."""
    d = summary.duration_s
    summary.completed, summary.failed, summary.errors = f.completed, f.failed, dict(f.errors)
    summary.total_input_tokens, summary.total_output_tokens = f.input_tokens, f.output_tokens
    summary.input_tokens_mean = f.input_tokens / f.inputs if f.inputs else None
    summary.output_tokens_mean = f.output_tokens / f.outputs if f.outputs else None
    summary.output_tokens_min, summary.output_tokens_max = f.output_min, f.output_max
    summary.output_throughput_tps = f.output_tokens / d
    summary.request_throughput_rps = f.completed / d
    summary.tokens_per_chunk_mean = f.output_tokens / f.chunks if f.chunks else None
    summary.achieved_concurrency = f.busy_ns / 1e9 / d if d else None
    summary.cached_share = f.cached / f.prompt_said if f.prompt_said else None
    summary.plateau = None  # its rate is over the whole soak (an hour's ramp and drain are seconds of it)
    if summary.goodput_rps is not None:
        summary.goodput_rps = f.good / d
    if f.reasoning and f.completed:
        summary.reasoning_tokens_mean = f.reasoning / f.completed
        summary.reasoning_share = min(1.0, f.reasoning / f.output_tokens) if f.output_tokens else None
        if summary.reasoning_share is not None:
            summary.answer_throughput_tps = summary.output_throughput_tps * (1 - summary.reasoning_share)
    sk = f.sketch
    summary.ttft_ms, summary.tpot_ms = sk("ttft").distribution(), sk("tpot").distribution()
    summary.itl_ms, summary.e2e_ms, summary.ttfb_ms = sk("itl").distribution(), sk("e2e").distribution(), \
        sk("ttfb").distribution()
    summary.time_to_first_answer_ms, summary.time_to_first_text_ms = sk("answer").distribution(), \
        sk("text").distribution()
    summary.time_to_first_tool_ms = sk("tool").distribution()
    s = summary.session
    if s is not None:
        s.sessions, s.sessions_finished = f.sessions, f.sessions_whole
        s.turns_per_session = f.turns / f.sessions if f.sessions else None
        s.session_s = f.session_s.distribution()
        s.cached_share, s.cached_share_se = summary.cached_share, cached_share_se(f)
        s.over_time = windows(f, WINDOWS)


#: Records a bounded soak lets go of at once, at least: each letting-go rewrites the level's list.
COMPACT_AT = 512


class Keeper:
    """A soak's records, held to a bound. Each session that ends is folded into ``folded`` at once, then kept or
    let go as a uniform sample of the ended sessions keeps at most ``keep`` of them (reservoir sampling, seeded:
    every ended session is equally likely to stay). The records of a session let go are handed to ``spill`` (the
    store's requests table: nothing measured is lost) and taken out of the level's ``records``, in batches.
    Sessions still running stay whole. ``finish`` at the level's end folds those and says whether any was let
    go: the summary over what stayed then needs ``apply``."""

    def __init__(self, records: list[RequestRecord], keep: int, window: tuple[int, int], seed: str,
                 spill: Callable[[list[RequestRecord]], None], slo: SLO | None = None) -> None:
        self.records, self.keep, self.spill, self.slo = records, keep, spill, slo
        self.folded = Folded(start_ns=window[0], width_ns=max(1, window[1] // WINDOWS))
        self._rng = random.Random(f"{seed}/kept")
        self._held: dict[int, list[RequestRecord]] = {}  # each session's records, while they are in ``records``
        self._kept: list[int] = []  # ended sessions kept: the sample
        self._offered = 0  # ended sessions offered to the sample
        self._going: list[RequestRecord] = []  # let go, still in ``records``
        self.let_go = 0

    def add(self, rec: RequestRecord) -> None:
        """A turn as it is sent."""
        if rec.session is not None:
            self._held.setdefault(rec.session, []).append(rec)

    def ended(self, session: int, cut: bool) -> None:
        """A session that will send no more turns: folded, then kept in the sample or let go."""
        if session not in self._held:
            return
        fold(self.folded, self._held[session], cut, self.slo)
        self._offered += 1
        if len(self._kept) < self.keep:
            self._kept.append(session)
            return
        j = self._rng.randrange(self._offered)
        if j < self.keep:
            session, self._kept[j] = self._kept[j], session
        self._let_go(session)

    def _let_go(self, session: int) -> None:
        self._going.extend(self._held.pop(session))
        self.let_go += 1
        if len(self._going) >= max(COMPACT_AT, len(self.records) // 4):
            self._compact()

    def _compact(self) -> None:
        if not self._going:
            return
        self.spill(self._going)
        gone = {id(r) for r in self._going}
        self.records[:] = [r for r in self.records if id(r) not in gone]
        self._going = []

    def finish(self, cut: frozenset[int]) -> bool:
        """The level has ended: the sessions that never ended (those its end or an interrupt cut) folded, what was
        let go out of ``records``. Whether any session was let go."""
        kept = set(self._kept)
        for session, rs in self._held.items():
            if session not in kept:
                fold(self.folded, rs, session in cut, self.slo)
        self._held = {k: v for k, v in self._held.items() if k in kept}
        self._compact()
        return self.let_go > 0

    def kept_sessions(self) -> int:
        return len({r.session for r in self.records if r.session is not None and r.phase == "measured"})
