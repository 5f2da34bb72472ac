"""A batching engine's scheduler under a closed loop of N agents, step by step (what TTFT under load comes from).

vLLM V1 and SGLang run the model in *steps*. Each step has a token budget (vLLM's ``max_num_batched_tokens``,
SGLang's ``chunked_prefill_size``; ``default_batch_tokens`` says what they default to):

* vLLM V1 (vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``) schedules the running requests first, one
  token each for the decodes, and fills the rest of the budget with prompt chunks of the waiting requests in
  arrival order: a prompt longer than what is left is split, its next chunk goes in the next step. One step is
  one forward pass of that mixed batch.
* SGLang (python/sglang/srt/managers/scheduler.py, ``get_next_batch_to_run``) runs a prefill batch whenever
  prompts wait (up to ``chunked_prefill_size`` tokens of them) and the decode batch only when none does: the
  decodes pause while prompts go through (``--enable-mixed-chunk``, off by default, mixes them as vLLM does).

The closed loop: N agents each send a prompt of P tokens, wait for all O output tokens, and send again at once.
Nothing in who goes into which step depends on how long a step takes: a request finishes in the step that
makes its last token and its agent's next prompt joins the next step. So the schedule is simulated once per
shape (N, P, O, budget), in steps, and a step's *time* comes afterwards from the roofline (the caller's
``times``): the calibration fit then re-times the same schedule for every set of constants it tries (a few
microseconds per kind of step, ``evaluate``), never re-simulating. Runs of pure decode steps are skipped over
in one go, so a shape costs a few hundred loop turns.

Two starts:

* ``together`` (what ``vllm bench serve --max-concurrency N`` and ``tokenbench sweep`` do): all N prompts
  arrive at once and queue behind each other's chunks. With fixed output lengths (``ignore_eos``) the agents
  that were prefilled in the same step finish in the same step and send again together: the burst comes back
  every cycle, smaller (only the agents that finished together arrive together; the others are decoding, and
  their decodes take the first tokens of each step's budget). This lock-step is the steady state such a
  benchmark's TTFT median sees (measured H100 rows: 876 ms at N=4 for a 243 ms prompt, where prompts spread
  over the cycle would wait ~0).
* ``spread``: the agents' arrivals spread evenly over the cycle (outputs of varying length, think times, a
  request rate): a new prompt usually finds the others decoding and shares its steps with their decodes only.

Requests of the first cycle are the start (``ttft_start``: the burst, all N at once when ``together``; its
slowest request is what a p99 over a short benchmark sees); requests from the third cycle on are the steady
state (``ttft``, ``tpot``, ``throughput``). A median over a benchmark whose request count is many times N is
the steady state's.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from functools import lru_cache
from operator import mul
from typing import Literal

Arrivals = Literal["together", "spread"]
ARRIVALS: tuple[Arrivals, ...] = ("together", "spread")

#: Cycles of the loop simulated before the steady state is measured: the first, the start ...
WARM_CYCLES = 1
#: ... and the cycles measured after it. The bunches the start leaves (agents prefilled in one step finish in
#: one step and send again together) come back cycle after cycle; chunking evens them out only slowly (a
#: simulation of 12 cycles of 16 agents at 4096/512 halves the median wait by the 11th), and measured
#: fixed-length runs keep them (the H100 rows: TTFT 876 ms at N=4 for a 243 ms prompt). These are the cycles a
#: benchmark of a few requests per agent measures.
MEASURED_CYCLES = 4

#: Steps a re-sent prompt misses, counted in its TTFT: the engine starts the next step as soon as one ends, and
#: vLLM V1 (async scheduling, on by default since vllm-project/vllm PR 27614: vllm/config/scheduler.py
#: ``async_scheduling``) and SGLang (its overlap scheduler, on unless --disable-overlap-schedule) schedule step
#: k+2 while step k+1 runs; the last token of step k reaches the client, and its next prompt the engine, only
#: while k+1 runs (a round trip and the tokenising of the prompt: milliseconds, about a decode step). So it
#: joins step k+3 and waits through k+1 and k+2, which may be long prompt steps. (With one step the H100 rows'
#: TTFT came out 24-43% low at N=4-32; with two, within 10-19% either way.)
RESEND_LAG = 2
#: The most agents the closed loop simulates at once. Its time and memory grow with the square of the agents
#: (each request's span is read over every step it waited; on a 2-core AMD EPYC, at 4,096 tokens in and 512 out,
#: 1,024 agents took 0.5 s and 2,048 took 2.2 s and 0.9 GB), and past an engine's batch limit more agents only
#: queue.
MAX_AGENTS = 1024


@dataclass(frozen=True, slots=True)
class StepKind:
    """The work of one engine step: ``decodes`` sequences decoding (one token each, or 1+γ with speculative
    decoding) and prompt chunks, each (tokens, tokens of that prompt already in the cache before them); ``saves``:
    slots llama.cpp's server saves to its host prompt cache before the step (``closed_loop``'s ``slot_saves``)."""

    decodes: int
    chunks: tuple[tuple[int, int], ...] = ()
    saves: int = 0


Counts = tuple[tuple[int, int], ...]  # (index of a step kind, how many such steps)


@dataclass(frozen=True, slots=True)
class _Flat:
    """A loop's groups laid out for ``evaluate``, which the calibration fit calls for every set of constants it
    tries: every Counts of the groups (ttft, ttft_start, tpot, then cycles) one after another as its step kinds and
    their numbers of steps, each Counts a slice of them (``spans``, per group) and how many requests had it
    (``repeats``). Summed slice by slice in their order, the totals are _total's to the bit."""

    kinds: tuple[int, ...]
    steps: tuple[int, ...]
    spans: tuple[tuple[tuple[int, int], ...], ...]
    repeats: tuple[tuple[int, ...], ...]


def _flatten(groups: tuple[tuple[tuple[Counts, int], ...], ...]) -> _Flat:
    kinds: list[int] = []
    steps: list[int] = []
    spans, repeats = [], []
    for group in groups:
        span = []
        for c, _ in group:
            first = len(kinds)
            kinds += [k for k, _ in c]
            steps += [m for _, m in c]
            span.append((first, len(kinds)))
        spans.append(tuple(span))
        repeats.append(tuple(m for _, m in group))
    return _Flat(tuple(kinds), tuple(steps), tuple(spans), tuple(repeats))


@dataclass(frozen=True, slots=True)
class Loop:
    """The simulated schedule: the kinds of step it ran, and for each group of requests the steps their times
    are made of. Each group is a list of (counts, how many requests had exactly those)."""

    kinds: tuple[StepKind, ...]
    ttft: tuple[tuple[Counts, int], ...]  # steady state: arrival to the step that finishes the prompt
    ttft_start: tuple[tuple[Counts, int], ...]  # the first request of every agent
    tpot: tuple[tuple[Counts, int], ...]  # steady state: the steps after the first token, to the last
    cycles: Counts  # every steady-state request's steps from its arrival to its last token, summed
    requests: int  # ... over this many requests
    ttft_cycles: tuple[tuple[tuple[Counts, int], ...], ...] = ()  # every cycle's requests, the first first
    flat: _Flat = field(init=False, repr=False, compare=False)  # ttft, ttft_start, tpot and cycles for evaluate

    def __post_init__(self) -> None:
        object.__setattr__(self, "flat", _flatten((self.ttft, self.ttft_start, self.tpot, ((self.cycles, 1),))))


@dataclass(slots=True)
class LoopTimes:
    """A loop's times (seconds) for one set of step times."""

    ttft: float  # median, steady state
    ttft_start: float  # median of the first cycle
    ttft_worst: float  # the slowest request, of the first cycle's burst or the steady state after it
    tpot_steps: float  # median time of a request's steps after its first token
    cycle: float  # mean time from a steady-state request's arrival to its last token: an agent's cycle


class _State:
    """The agents during a simulation: each has a prompt in the queue (``left`` tokens still to prefill) or is
    decoding (``out`` steps left), or has finished and its next prompt is on its way; ``unsaved``: its slot is
    idle and holds a state llama.cpp's server has not saved yet (counted only with ``slot_saves``)."""

    def __init__(self, n: int, prompt: int, dec_steps: int, arrivals: Arrivals, slot_saves: bool = False,
                 own_slot: bool = False) -> None:
        self.prompt, self.dec_steps = prompt, dec_steps
        self.slot_saves, self.own_slot = slot_saves, own_slot
        self.unsaved = [False] * n
        self.saves = 0  # slots saved since the last step
        self.left = [0] * n
        self.done = [0] * n
        self.out = [0] * n
        self.arrived = [0] * n
        self.first = [0] * n
        self.served = [0] * n  # requests completed
        self.queue: list[int] = []
        self.decoding: set[int] = set()  # the agents whose prompt is done and whose output is not (``out`` > 0)
        self.real = [True] * n  # False: a spread start's stand-in, decoding before the agent's first request
        for i in range(n):
            if arrivals == "spread" and i and dec_steps:
                self.out[i], self.real[i] = max(1, round(i * dec_steps / n)), False
                self.decoding.add(i)
            else:
                self.send(i, 0)

    def send(self, i: int, step: int) -> None:
        self.arrived[i] = step
        self.join(i)

    def join(self, i: int) -> None:
        """Agent i's prompt reaches the engine's queue. llama.cpp's server (``slot_saves``) launches it into a slot
        and first saves every idle slot not yet saved: the others', and its own previous one unless the prompt
        continues that slot's context (``own_slot``: an agent's next turn), which it then overwrites."""
        self.left[i], self.done[i], self.real[i] = self.prompt, 0, True
        self.queue.append(i)
        if self.slot_saves:
            self.saves += sum(self.unsaved) - (self.unsaved[i] and self.own_slot)
            self.unsaved = [False] * len(self.unsaved)


def _step(s: _State, budget: int, mixed: bool, per_seq: int, cached: int) -> tuple[StepKind, int, list[int]]:
    """The next step (or run of identical decode steps): its kind, how many steps, and the prompts it finishes."""
    dec = s.decoding
    if not s.queue:
        return StepKind(len(dec)), min(s.out[i] for i in dec), []
    room = budget - (len(dec) * per_seq if mixed else 0)
    chunks, finished = [], []
    for i in s.queue:
        if room <= 0:
            break
        t = min(s.left[i], room)
        chunks.append((t, cached + s.done[i]))
        s.done[i] += t
        s.left[i] -= t
        room -= t
        if not s.left[i]:
            finished.append(i)
    saves, s.saves = s.saves, 0
    return StepKind(len(dec) if mixed or not chunks else 0, tuple(chunks), saves), 1, finished


@lru_cache(maxsize=4096)
def closed_loop(n: int, prompt: int, dec_steps: int, budget: int, mixed: bool = True,
                arrivals: Arrivals = "together", per_seq: int = 1, cached: int = 0, lag: int = RESEND_LAG,
                slot_saves: bool = False) -> Loop:
    """Simulate ``n`` agents sending ``prompt``-token prompts (after ``cached`` tokens already in the prefix
    cache) that each take ``dec_steps`` decode steps after the first token, on an engine with ``budget`` tokens
    per step; ``mixed``: prompt chunks ride along with the decodes (vLLM), else a step holding prompts holds
    nothing else (SGLang's default). Each decoding sequence takes ``per_seq`` tokens of the budget (1+γ when
    speculative decoding verifies γ drafted tokens); an agent's next prompt misses ``lag`` steps (RESEND_LAG).
    ``slot_saves``: count the slots llama.cpp's server saves to its host prompt cache as each prompt arrives
    (StepKind.saves; with ``cached`` tokens, an agent's next turn continues its own slot). Memoised: a schedule
    does not depend on the constants."""
    s = _State(n, max(1, prompt), max(0, dec_steps), arrivals, slot_saves, cached > 0)
    kinds: dict[StepKind, int] = {}
    runs: list[tuple[int, int, int, int, int]] = []  # (first step, steps, kind, decodes per step, first tokens)
    done: list[tuple[int, int, int, int, int]] = []  # (agent, request number, arrival, first token, last step)
    k = 0
    target = WARM_CYCLES + MEASURED_CYCLES
    sent: list[tuple[int, int]] = []  # (agent, steps its next prompt still misses) for prompts on their way
    least = 0  # min(s.served), read again as requests end
    while least < target:
        if not (s.queue or s.decoding):  # nothing runs: the engine takes the prompts as they come
            for i, _ in sent:
                s.send(i, k)
            sent = []
        kind, steps, finished = _step(s, budget, mixed, per_seq, cached)
        if sent:
            steps = 1
        runs.append((k, steps, kinds.setdefault(kind, len(kinds)), kind.decodes, len(finished)))
        last = k + steps - 1
        waiting = [i for i, m in sent if m <= 1]
        sent = [(i, m - 1) for i, m in sent if m > 1]
        ending = []
        if kind.decodes:
            for i in s.decoding:
                s.out[i] -= steps
                if not s.out[i]:
                    ending.append(i)
            s.decoding.difference_update(ending)
        for i in finished:
            s.queue.remove(i)
            s.first[i], s.out[i] = last, s.dec_steps
            if s.dec_steps:
                s.decoding.add(i)
            else:
                ending.append(i)
        for i in waiting:
            s.join(i)
        for i in sorted(ending):
            if s.real[i]:
                done.append((i, s.served[i], s.arrived[i], s.first[i], last))
                s.served[i] += 1
            s.arrived[i] = last + 1  # sent as the next step starts: its time counts from there
            s.unsaved[i] = s.slot_saves  # its slot is idle, holding the state this request left
            sent.append((i, lag))
        if ending:
            least = min(s.served)
        k = last + 1
    return _summarise(tuple(kinds), runs, done)


def _counts(runs: list[tuple[int, int, int, int, int]], starts: list[int], a: int, b: int) -> Counts:
    """Step kinds over steps a..b (inclusive). The runs tile the steps from 0 without a gap, so every run from the
    one holding ``a`` to the one holding ``b`` counts whole, less what the first has before ``a`` and the last
    after ``b``."""
    if a > b:
        return ()
    j, end = max(0, bisect.bisect_right(starts, a) - 1), bisect.bisect_right(starts, b)
    out: dict[int, int] = {}
    for r in range(j, end):
        _, steps, kind, _, _ = runs[r]
        out[kind] = out.get(kind, 0) + steps
    first, _, kind, _, _ = runs[j]
    out[kind] -= a - first
    first, steps, kind, _, _ = runs[end - 1]
    out[kind] -= max(0, first + steps - 1 - b)
    return tuple(sorted(out.items()))


def _group(items: list[Counts]) -> tuple[tuple[Counts, int], ...]:
    seen: dict[Counts, int] = {}
    for c in items:
        seen[c] = seen.get(c, 0) + 1
    return tuple(seen.items())


def _summarise(kinds: tuple[StepKind, ...], runs: list[tuple[int, int, int, int, int]],
               done: list[tuple[int, int, int, int, int]]) -> Loop:
    starts = [r[0] for r in runs]
    seen: dict[tuple[int, int], Counts] = {}

    def counts(a: int, b: int) -> Counts:  # a request's span is read for its TTFT, its cycle and its start
        if (a, b) not in seen:
            seen[a, b] = _counts(runs, starts, a, b)
        return seen[a, b]

    steady = [d for d in done if d[1] >= WARM_CYCLES]
    ttft = _group([counts(a, f) for _, _, a, f, _ in steady])
    start = _group([counts(a, f) for _, num, a, f, _ in done if num == 0])
    tpot = _group([counts(f + 1, e) for _, _, _, f, e in steady])
    cycles = tuple(_group([counts(a, f) for _, num, a, f, _ in done if num == c])
                   for c in range(WARM_CYCLES + MEASURED_CYCLES))
    total = _covered(runs, [(a, e) for _, _, a, _, e in steady])
    return Loop(kinds, ttft, start, tpot, total, len(steady), cycles)


def _covered(runs: list[tuple[int, int, int, int, int]], spans: list[tuple[int, int]]) -> Counts:
    """Step kinds over every span (steps a..e inclusive), summed: ``_counts`` of each, added, in one sweep of the
    runs that carries how many spans cover each stretch of steps (a span's steps are read once, not once a span:
    the spans of many agents overlap)."""
    delta: dict[int, int] = {}
    for a, e in spans:
        delta[a] = delta.get(a, 0) + 1
        delta[e + 1] = delta.get(e + 1, 0) - 1
    cuts = sorted(delta)
    total: dict[int, int] = {}
    covering, c = 0, 0
    for first, steps, kind, _, _ in runs:
        at, end = first, first + steps
        while c < len(cuts) and cuts[c] < end:
            total[kind] = total.get(kind, 0) + covering * (cuts[c] - at)
            at, covering, c = cuts[c], covering + delta[cuts[c]], c + 1
        total[kind] = total.get(kind, 0) + covering * (end - at)
    return tuple(sorted((kind, m) for kind, m in total.items() if m))


def _median(totals: list[float], repeats: tuple[int, ...]) -> float:
    """The median of a group's times (``totals``), each counted as often as it occurred (``repeats``); the mean of
    the middle two when their number is even, as numpy's (what vllm bench serve reports)."""
    vals = sorted(zip(totals, repeats))
    total = sum(repeats)
    if not total:
        return 0.0
    lo, hi = (total - 1) // 2, total // 2
    seen, low = 0, 0.0
    for v, m in vals:
        if seen <= lo < seen + m:
            low = v
        if hi < seen + m:
            return sum((low, v)) / 2
        seen += m
    return 0.0


def evaluate(loop: Loop, times: list[float]) -> LoopTimes:
    """The loop's times, given each step kind's time (``times[i]`` for ``loop.kinds[i]``): every request's steps
    multiplied out at once (``Loop.flat``), then summed request by request."""
    f = loop.flat
    parts = list(map(mul, map(times.__getitem__, f.kinds), f.steps))
    ttft, start, tpot, cycles = ([sum(parts[a:b]) for a, b in spans] for spans in f.spans)
    return LoopTimes(_median(ttft, f.repeats[0]), _median(start, f.repeats[1]), max(start + ttft, default=0.0),
                     _median(tpot, f.repeats[2]) if loop.tpot else 0.0,
                     cycles[0] / loop.requests if loop.requests else 0.0)


def decode_steps(output: int, tokens_per_step: float = 1.0) -> int:
    """Decode steps after the first token (which the step finishing the prompt makes): O−1 tokens at
    ``tokens_per_step`` per step (E with speculative decoding)."""
    return max(0, math.ceil((output - 1) / tokens_per_step)) if output > 1 else 0
