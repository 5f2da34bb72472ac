"""One prediction's setup: a box, a model in a weight and KV format, an engine and its fitted constants, and what
it answers: decode at a depth, a prompt's prefill, and a closed loop of agents (through the scheduler model for
vLLM, SGLang and llama.cpp's server slots). Its physical costs and memory fits are memoised per shape: the
calibration fit evaluates each row thousands of times."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from .. import registry
from ..errors import UsageError
from . import queue
from . import formats, memory, offload, parallelism, serving, speculation
from . import roofline as rf
from .bands import Band, Extrapolation, widen
from .calibration import Calibration
from .kind import Kind, kind_of
from .priors import backend_key, engine_kind
from .specs import Catalog, HardwareSpec, ModelSpec

#: The metrics speculative decoding moves: a band on them widens by its gain (Setup.band).
SPEC_METRICS = ("decode", "tpot", "throughput")
#: The most GPUs one box holds (an HGX/DGX board): --tp beyond it would span boxes.
MAX_TP = 8


def default_slots(s: Setup, context: int, build: str = "") -> int:
    """llama.cpp's server slots where none are given: its own default in builds of ``build`` ("YYYY-MM"; "": the
    newest; registry.Engine.default_slots), fewer where the box's memory holds fewer sequences of ``context``
    tokens; 1 on an engine that batches by itself or serves one stream."""
    if s.kind != "sequential":
        return 1
    want = registry.engine(s.engine).default_slots(build)
    return next((k for k in range(want, 1, -1) if s.fit(context, k).fits), 1)


def usual_setup(hw: HardwareSpec) -> tuple[str, str, str]:
    """The engine, weights and KV cache format people run on such a box, which fit, predict and recommend take
    when none is given: vLLM with FP8 weights and an fp8 cache on a GPU with FP8 arithmetic, else BF16 with the
    model's dtype; llama.cpp on the box's own backend with Q4_K_M and a q8_0 cache on unified-memory boxes (Strix
    Halo, DGX Spark, Apple silicon), where vLLM is rarely run and no row measures it."""
    if hw.kind == "gpu":
        return ("vllm", "FP8", "FP8") if hw.has_fp8 else ("vllm", "BF16", "AUTO")
    return (f"llama.cpp {hw.default_backend}", "Q4_K_M", "Q8_0")


@dataclass(slots=True)
class Setup:
    model: ModelSpec
    hw: HardwareSpec
    quant: formats.Quant
    engine: str
    backend: str
    eff: rf.Efficiency
    kind: str
    spec: speculation.Spec | None = None  # speculative decoding / MTP
    ubatch: int = memory.UBATCH
    parallel: int = 1  # llama.cpp server slots (-np): that many sequences decode in one batch
    tp: int = 1  # tensor parallelism: GPUs of one box sharing every layer (vLLM/SGLang --tensor-parallel-size)
    flash_attn: bool = True  # llama.cpp -fa 1 (its default since 2025: auto); batching engines always
    era: str = ""  # the year of the engine builds whose constants ``eff`` holds ("": undated or priors)
    reach: Extrapolation = Extrapolation()  # how far beyond its backend's rows this prediction asks (bands widen)
    batch_tokens: int | None = None  # batching engines: tokens per step (--max-num-batched-tokens); None: default
    arrivals: queue.Arrivals = "together"  # a batching engine's closed loop: how the agents' prompts arrive
    prompt_cache: bool = True  # llama.cpp's server: its host prompt cache (--cache-ram), on by default
    mmq: bool = True  # ggml's CUDA backend multiplies quantized prompts with MMQ (registry.Engine.mmq_since)
    costs: dict[tuple[Any, ...], rf.StepCost] = field(default_factory=dict)  # physical work, memoised
    fits: dict[tuple[Any, ...], memory.Fit] = field(default_factory=dict)  # memory per shape, memoised
    #: (id of a loop, mean context) -> the loop (held, so its id is never another's), the speculative decoding it
    #: was timed with, each kind of its steps' work and its times at the ceiling
    ceilings: dict[tuple[int, int], tuple[queue.Loop, speculation.Spec | None, list[rf.StepCost], queue.LoopTimes]] \
        = field(default_factory=dict)
    #: (agents, prompt, output) -> the constants it was last served with (serve_once), and what they served
    served: dict[tuple[int, int, int], tuple[rf.Efficiency, serving.ServePoint]] = field(default_factory=dict)

    @classmethod
    def make(cls, cat: Catalog, cal: Calibration, hardware: str, model: str, weights: str, kv: str,
             engine: str, check: bool = True, ubatch: int = memory.UBATCH, parallel: int = 1, tp: int = 1,
             flash_attn: bool = True, era: str | None = None, batch_tokens: int | None = None,
             arrivals: queue.Arrivals = "together", prompt_cache: bool = True) -> Setup:
        """``era``: the date of the engine's build, its year or month ("2025", "2025-06": registry.build_date
        reads a version); its year picks the constants, its month the kernels some builds run (registry.Engine
        .mmq); None: the newest the calibration has for this backend. ``prompt_cache``: llama.cpp's server with its host prompt cache (--cache-ram, on by default), whose saves
        each request waits for (serving.slot_save)."""
        hw = cat.find_hardware(hardware)
        m = cat.find_model(model)
        q = formats.Quant.parse(weights, kv)
        formats.check_engine(hw, engine)
        if check:
            formats.check_combination(hw, q, engine)
        backend = backend_key(engine, hw.default_backend)
        kind = engine_kind(engine)
        if parallel > 1 and kind != "sequential":
            raise UsageError(f"--parallel is llama.cpp's -np (server slots); {engine} batches by itself")
        if tp > 1 and kind == "sequential":
            raise UsageError(f"--tp is tensor parallelism as vLLM and SGLang run it; {engine} splits a model by "
                             "layers across GPUs (-sm layer), which adds no speed to one stream")
        if tp > 1 and hw.kind != "gpu":
            raise UsageError(f"{hw.id} is one {hw.kind}, not a box of GPUs: --tp needs discrete GPUs")
        if not flash_attn and kind != "sequential":
            raise UsageError(f"--flash-attn off is llama.cpp's -fa 0; {engine} always runs flash-attention kernels")
        if not flash_attn and q.kv_quantized:
            raise UsageError(f"llama.cpp needs flash attention for a quantized V cache ({q.kv.lower()}): use "
                             "--flash-attn on, or --kv f16")
        if (batch_tokens is not None or arrivals != "together") and kind == "sequential":
            raise UsageError(f"--max-num-batched-tokens and --arrivals describe vLLM's and SGLang's scheduler; "
                             f"{engine} prefills in micro-batches of --ubatch, one stream or --parallel slots")
        if batch_tokens is not None and batch_tokens < 1:
            raise UsageError(f"--max-num-batched-tokens {batch_tokens}: give a positive number of tokens")
        _check_tp(m, tp)
        year = era[:4] if era else None
        eff = cal.efficiency(backend, year)
        mmq = registry.engine(engine).mmq(era or eff.era[-4:])
        return cls(m, hw, q, engine, backend, eff, kind, ubatch=ubatch, parallel=parallel, tp=tp,
                   flash_attn=flash_attn, era=eff.era, batch_tokens=batch_tokens, arrivals=arrivals,
                   prompt_cache=prompt_cache, mmq=mmq, reach=_extrapolation(cal, backend, eff, hw, year))

    def with_slots(self, slots: int) -> Setup:
        """The same setup with llama.cpp's server running ``slots`` slots (its memo of costs and fits anew)."""
        return replace(self, parallel=slots, costs={}, fits={}, ceilings={}, served={})

    def band(self, cal: Calibration, metric: str, depth: int | None = None, concurrency: int | None = None,
             fallback: Band | None = None) -> Band | None:
        """The calibration's band for one of this setup's metrics (``fallback`` where it has none), widened for
        the builds, depth and concurrency it reaches beyond its backend's rows: those of one operating point where
        ``depth`` and ``concurrency`` are given (a cell's band is its own, whatever else the table holds), else
        the furthest the prediction reaches (``reach``: what the note under a table names)."""
        reach = self.reach if depth is None and concurrency is None else replace(
            self.reach, depth=depth or 0, concurrency=concurrency or 1)
        b = cal.band(self.backend, metric, reach, fallback, self.kind_of(reach.concurrency))
        if b is None or self.spec is None or metric not in SPEC_METRICS:
            return b
        # no row measured speculative decoding: its gain is the acceptance given, anywhere from none to all of it
        gain = speculation.spec_speedup(self.spec.alpha, self.spec.gamma, self.spec.draft_cost)
        return widen(b, [(math.log(max(gain, 1.0)), f"speculative decoding's x{gain:.2f}, which no row measured")])

    def kind_of(self, concurrency: int) -> Kind:
        """The kind of this prediction at ``concurrency`` sequences, which its band is kept under (kind.py)."""
        return kind_of(self.backend, self.hw, self.model, concurrency)

    @property
    def budget(self) -> int:
        """Tokens per step: the one given, else the engine's default on this box (llama.cpp's server: n_batch)."""
        return self.batch_tokens or serving.default_batch_tokens(self.engine, self.hw)

    @property
    def pass_tokens(self) -> int:
        """The most prompt tokens one forward pass takes: llama.cpp's micro-batch (-ub), a batching engine's
        budget per step (its chunks)."""
        return self.ubatch if self.kind == "sequential" else self.budget

    @property
    def calibrated(self) -> bool:
        return self.eff.calibrated

    def _decode_cost(self, n: int, context: int, per_seq: int = 1) -> rf.StepCost:
        key = ("d", n, context, per_seq)
        if key not in self.costs:
            c = rf.decode_cost(self.model, self.hw, self.quant, n, context, self.backend, per_seq=per_seq,
                               flash_attn=self.flash_attn, mmq=self.mmq)
            self.costs[key] = parallelism.tensor_parallel(c, self.model, self.hw, self.tp, n * per_seq)
        return self.costs[key]

    def _decode_step(self, n: int, context: int) -> rf.Estimate:
        """Seconds per output token of a decode step of ``n`` sequences (speculative decoding included)."""
        plain = self._decode_cost(n, context)
        if self.spec is None:
            return rf.Estimate(plain.ceiling, rf.decode_time(plain, self.eff))
        verify = self._decode_cost(n, context, self.spec.gamma + 1)
        return speculation.spec_decode(verify, plain, self.spec, self.eff)

    def _prefill_cost(self, tokens: int, cached: int, ubatch: int) -> rf.StepCost:
        key = ("p", tokens, cached, ubatch)
        if key not in self.costs:
            c = rf.prefill_cost(self.model, self.hw, self.quant, tokens, cached, self.backend, ubatch, self.flash_attn,
                                self.mmq)
            self.costs[key] = parallelism.tensor_parallel(c, self.model, self.hw, self.tp, tokens)
        return self.costs[key]

    def fit(self, context: int, concurrency: int = 1) -> memory.Fit:
        """Memory only: it does not depend on the efficiency constants, so it is computed once per shape (the
        calibration fit evaluates each row thousands of times; unmemoised, this was 86% of `calibrate`)."""
        key = ("f", context, concurrency)
        if key not in self.fits:
            self.fits[key] = self.fit_as(self.quant, context, concurrency)
        return self.fits[key]

    def held(self, agents: int) -> int:
        """The sequences the engine holds in memory for ``agents`` at once: a batching engine all of them,
        llama.cpp's server its slots (more agents wait in its queue, holding no cache)."""
        return agents if self.kind == "batching" else min(agents, self.parallel)

    def serve_held(self, n: int, prompt: int, output: int) -> tuple[serving.ServePoint | None, int]:
        """``serve`` where the box's memory holds it, and the sequences it runs at once. A batching engine whose
        KV cache holds fewer than ``n`` requests' contexts (and at least one) runs as many as it holds and queues
        the rest, as vLLM's scheduler does (``behind_slots``, as llama.cpp's slots); None, 0: not one fits.
        ``serve(n)`` runs first, whatever fits: it refuses more agents than the loop simulates."""
        ctx = prompt + output
        p = self.serve(n, prompt, output)
        if self.fit(ctx, self.held(n)).fits:
            return p, self.held(n)
        at_once = self.fit(ctx, 1).max_concurrency if self.kind == "batching" else 0
        if at_once < 1:
            return None, 0
        return serving.behind_slots(self.serve(at_once, prompt, output), n, output), at_once

    def fit_as(self, quant: formats.Quant, context: int, concurrency: int = 1) -> memory.Fit:
        """The memory of this setup with ``quant`` for its own formats (what another KV cache would hold), not
        memoised."""
        hw = self.hw if self.tp == 1 else replace(  # tp GPUs pool their memory (each runs the engine)
            self.hw, mem_gb=self.hw.mem_gb * self.tp,
            usable_gb=self.hw.usable_gb * self.tp if self.hw.usable_gb is not None else None)
        return memory.fit(self.model, hw, quant, context, concurrency, self.engine, self.ubatch, self.flash_attn)

    def decode(self, depth: int, n: int = 1) -> rf.Estimate:
        f = self.fit(depth + 1, n)
        if not f.fits and self.kind == "sequential":
            return offload.offload_decode(self.model, self.hw, self.quant, depth, self.backend, f, self.eff,
                                          self.flash_attn, self.mmq)
        return self._decode_step(n, depth)

    def plain_decode(self, depth: int) -> rf.StepCost | None:
        """The work of the step ``decode`` times for one sequence, which no constant changes (the calibration fit's
        rows take it once and time it for every set of constants they are asked of); None where the constants
        decide more than its time: hybrid offload (where the layers run), speculative decoding (its drafts)."""
        if self.spec is not None or (not self.fit(depth + 1, 1).fits and self.kind == "sequential"):
            return None
        return self._decode_cost(1, depth)

    def plain_prefill(self, tokens: int, depth: int = 0) -> rf.StepCost | None:
        """The work ``prefill`` times (as ``plain_decode``); None where the prompt runs in hybrid offload."""
        if not self.fit(depth + tokens, 1).fits and self.kind == "sequential":
            return None
        return self._prefill_cost(tokens, depth, self.pass_tokens)

    def prefill(self, tokens: int, depth: int = 0) -> rf.Estimate:
        c = self.plain_prefill(tokens, depth)
        if c is None:
            return offload.offload_prefill(self.model, self.hw, self.quant, tokens, depth, self.backend,
                                           self.fit(depth + tokens, 1), self.eff, self.ubatch, self.flash_attn,
                                           self.mmq)
        return rf.Estimate(c.ceiling, rf.prefill_time(c, self.eff))

    def serve(self, n: int, prompt: int, output: int, cached: int = 0) -> serving.ServePoint:
        """A closed loop of ``n`` agents, from the memoised per-shape costs (the fit evaluates each row often).
        vLLM and SGLang through their scheduler's queue (``_serve_queue``); llama.cpp's server with ``parallel``
        slots through the same queue, as its loop schedules them (each step the slots' decodes, then their prompts
        up to n_batch tokens, in micro-batches of -ub), and more agents wait for a slot. ``cached``: tokens of
        each prompt already in the prefix cache before its ``prompt`` new ones (an agent's turn): only the new
        ones are prefilled, at that depth, and decoding runs at the whole context."""
        ctx = cached + prompt + output // 2
        if self.kind == "batching":
            return self._serve_queue(n, prompt, output, cached)
        if self.parallel > 1:
            return serving.behind_slots(self._serve_queue(min(n, self.parallel), prompt, output, cached), n, output)
        pf = self._prefill_cost(max(prompt, 1), cached, self.ubatch)
        return serving.one_stream(pf, self._decode_step(1, ctx), self.eff, n, prompt, output,
                                  self.slot_save(cached + prompt + output))

    def serve_once(self, n: int, prompt: int, output: int) -> serving.ServePoint:
        """``serve``, once per set of constants (``eff``, which is frozen: the same object, the same constants):
        the rows of one run on one setup (its TTFT, TPOT and throughput) each ask it of every set the calibration
        fit tries. The point is shared by whoever asks: read it, do not change it."""
        hit = self.served.get((n, prompt, output))
        if hit is None or hit[0] is not self.eff:
            hit = self.served[n, prompt, output] = (self.eff, self.serve(n, prompt, output))
        return hit[1]

    def slot_state_bytes(self, context: int) -> float:
        """A sequence's state at ``context`` tokens, as llama.cpp's server saves a slot: its KV cache and recurrent
        state."""
        return memory.kv_bytes(self.model, self.quant, context) + memory.state_bytes(self.model)

    def slot_save(self, context: int) -> float:
        """Seconds llama.cpp's server takes to save a finished request's slot (``context`` tokens) to its host
        prompt cache (serving.slot_save); 0 with the cache off (--cache-ram 0) and for other engines."""
        return serving.slot_save(self.engine, self.slot_state_bytes(context)) if self.prompt_cache else 0.0

    def _step_cost(self, kind: queue.StepKind, ctx: int) -> rf.StepCost:
        """The physical work of one kind of engine step: its decodes at the loop's mean context and its prompt
        chunks, as one forward pass (roofline.batch_step)."""
        key = ("s", kind, ctx)
        if key not in self.costs:
            per_seq = self.spec.gamma + 1 if self.spec else 1
            parts = [self._decode_cost(kind.decodes, ctx, per_seq)] if kind.decodes else []
            pass_tokens = self.pass_tokens
            parts += [self._prefill_cost(t, c, pass_tokens) for t, c in kind.chunks]
            # llama.cpp runs the step's batch in micro-batches of -ub tokens; a batching engine's is one pass
            tokens = kind.decodes * per_seq + sum(t for t, _ in kind.chunks)
            passes = math.ceil(tokens / max(1, self.ubatch)) if self.kind == "sequential" else 0
            self.costs[key] = serving.batch_step(parts, passes)
        return self.costs[key]

    def _timed_loop(self, loop: queue.Loop, ctx: int) -> tuple[list[rf.StepCost], queue.LoopTimes]:
        """Each kind of the loop's steps' work and the loop's times at the ceiling: at the nominal peaks, which no
        constant moves, so once per loop (``ceilings``; the calibration fit re-times a loop for every set of
        constants it tries). With speculative decoding a decode step is one verification pass and its drafts
        (``_decode_step`` per token, times E), and prompt chunks add what they add to a plain step of the same
        decodes."""
        hit = self.ceilings.get((id(loop), ctx))
        if hit is not None and hit[0] is loop and hit[1] is self.spec:
            return hit[2], hit[3]
        costs = [self._step_cost(kind, ctx) for kind in loop.kinds]
        ceil = []
        for kind, c in zip(loop.kinds, costs):
            t_c = c.ceiling
            if self.spec is not None and kind.decodes:
                plain = self._step_cost(queue.StepKind(kind.decodes), ctx)
                t_c += self._decode_step(kind.decodes, ctx).ceiling * self.spec.expected - plain.ceiling
            ceil.append(t_c)
        times = queue.evaluate(loop, ceil)
        self.ceilings[id(loop), ctx] = (loop, self.spec, costs, times)
        return costs, times

    def _step_estimates(self, kinds: tuple[queue.StepKind, ...], costs: list[rf.StepCost], ctx: int,
                        save: float = 0.0) -> list[float]:
        """Each kind of step's estimated time, with the constants (as ``_timed_loop``; ``costs``: their work).
        ``save``: seconds per slot saved before the step (StepKind.saves: llama.cpp's server saving idle slots to
        its host prompt cache, slot_save); a software cost, not in the ceiling."""
        est = []
        for kind, c in zip(kinds, costs):
            t_e = rf.prefill_time(c, self.eff)
            if self.spec is not None and kind.decodes:
                plain = self._step_cost(queue.StepKind(kind.decodes), ctx)
                t_e += self._decode_step(kind.decodes, ctx).estimate * self.spec.expected - rf.prefill_time(plain,
                                                                                                            self.eff)
            est.append(t_e + kind.saves * save)  # llama.cpp's server saving idle slots before the step
        return est

    def _serve_queue(self, n: int, prompt: int, output: int, cached: int) -> serving.ServePoint:
        """vLLM, SGLang, llama.cpp's server slots: the closed loop through their scheduler (queue.closed_loop,
        memoised per shape), each kind of step timed by the roofline with the current constants."""
        if n > queue.MAX_AGENTS:
            raise UsageError(f"{n:,} agents: a prediction simulates every agent through {self.engine}'s scheduler, "
                             f"{queue.MAX_AGENTS:,} at most (past an engine's batch limit more agents only queue): "
                             f"ask for {queue.MAX_AGENTS} or fewer")
        ctx = cached + prompt + output // 2
        per_step = self.spec.expected if self.spec else 1.0
        per_seq = self.spec.gamma + 1 if self.spec else 1
        save = self.slot_save(cached + prompt + output)
        loop = queue.closed_loop(n, max(prompt, 1), queue.decode_steps(output, per_step), self.budget,
                                 serving.mixes_prefill(self.engine), self.arrivals, per_seq, cached,
                                 serving.resend_lag(self.engine), save > 0)
        costs, ceiling = self._timed_loop(loop, ctx)
        p = serving.serve_queue(ceiling, queue.evaluate(loop, self._step_estimates(loop.kinds, costs, ctx, save)),
                                self._decode_step(1, ctx), n, output)
        if not output:  # prompts only: the decode rate of the batch stands for throughput
            d = self._decode_step(n, ctx)
            p.throughput = (n / d.ceiling, n / d.estimate)
            p.per_agent = (1 / d.ceiling, 1 / d.estimate)
        return p


def _check_tp(m: ModelSpec, tp: int) -> None:
    """--tp within one box, and splitting the model's heads evenly, as vLLM and SGLang require."""
    if tp > MAX_TP:
        raise UsageError(f"--tp {tp}: one box holds at most {MAX_TP} GPUs (tensor parallelism across boxes is "
                         "not modelled)")
    splits = [t for t in range(2, MAX_TP + 1) if not (m.heads % t or m.kv_heads % t and t % m.kv_heads)]
    if tp > 1 and tp not in splits:
        raise UsageError(f"--tp {tp} does not split {m.id}'s {m.heads} attention heads ({m.kv_heads} KV heads) "
                         "evenly, as vLLM and SGLang require: "
                         + (f"use {', '.join(map(str, splits))}" if splits else "it runs on one GPU"))


def _extrapolation(cal: Calibration, backend: str, eff: rf.Efficiency, hw: HardwareSpec,
                   era: str | None) -> Extrapolation:
    """How far a prediction with ``eff`` on ``hw`` for builds of ``era`` (None: the newest era's) reaches beyond
    its backend's rows, before its depth and concurrency are known: the years of builds past the eras fitted
    (newer > 0, older < 0), the box's hardware generation and the year of builds asked for."""
    newest = cal.newest_era(backend)[-4:] if eff.calibrated else ""  # the last year of the newest era
    oldest = cal.oldest_era(backend)[:4] if eff.calibrated else ""  # the first year of the oldest era
    years = 0
    if era and newest and era > newest:
        years = int(era) - int(newest)
    elif era and oldest and era[:4] < oldest:
        years = int(era[:4]) - int(oldest)
    return Extrapolation(years=years, arch=hw.arch, year=(era or "")[:4])
