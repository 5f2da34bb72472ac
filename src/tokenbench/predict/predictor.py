"""One entry point per question: fit, decode at depth, prefill, serving at concurrency N, rows of a file, the
calibration fit on rows, and its leave-one-source-out cross-validation."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import UsageError
from . import queue
from . import roofline as rf
from .calibration import (ANCHOR_PRIOR_WEIGHT, Band, Calibration, backend_key, backend_prior, engine_kind, family,
                          fit_constants, make_band, prior)
from .published import METRICS, Row
from .specs import Catalog, HardwareSpec, ModelSpec

#: A row is a likely software bottleneck when it reaches less than this share of what its backend's
#: calibration predicts for the same shape. (Against the calibrated estimate, not a backend-wide median of
#: measured/ceiling: that median mixed dense and MoE rows, small and large models, depth and none, and flagged
#: every MoE prompt as a bottleneck.)
BOTTLENECK_SHARE = 0.5
#: Metrics the fit uses (a p99 is a tail, not what the constants describe).
FITTED_METRICS = METRICS - {"ttft_p99"}


#: The most GPUs one box holds (an HGX/DGX board): --tp beyond it would span boxes.
MAX_TP = 8


@dataclass(slots=True)
class Setup:
    model: ModelSpec
    hw: HardwareSpec
    quant: rf.Quant
    engine: str
    backend: str
    eff: rf.Efficiency
    kind: str
    spec: rf.Spec | None = None  # speculative decoding / MTP
    ubatch: int = rf.UBATCH
    parallel: int = 1  # llama.cpp server slots (-np): that many sequences decode in one batch
    tp: int = 1  # tensor parallelism: GPUs of one box sharing every layer (vLLM/SGLang --tensor-parallel-size)
    flash_attn: bool = True  # llama.cpp -fa 1 (its default since 2025: auto); batching engines always
    batch_tokens: int | None = None  # batching engines: tokens per step (--max-num-batched-tokens); None: default
    arrivals: queue.Arrivals = "together"  # a batching engine's closed loop: how the agents' prompts arrive
    costs: dict[tuple[Any, ...], rf.StepCost] = field(default_factory=dict)  # physical work, memoised
    fits: dict[tuple[Any, ...], rf.Fit] = field(default_factory=dict)  # memory per shape, memoised

    @classmethod
    def make(cls, cat: Catalog, cal: Calibration, hardware: str, model: str, weights: str, kv: str,
             engine: str, check: bool = True, ubatch: int = rf.UBATCH, parallel: int = 1, tp: int = 1,
             flash_attn: bool = True, batch_tokens: int | None = None,
             arrivals: queue.Arrivals = "together") -> Setup:
        hw = cat.find_hardware(hardware)
        m = cat.find_model(model)
        q = rf.Quant.parse(weights, kv)
        rf.check_engine(hw, engine)
        if check:
            rf.check_combination(hw, q, engine)
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
        if tp > MAX_TP:
            raise UsageError(f"--tp {tp}: one box holds at most {MAX_TP} GPUs (tensor parallelism across boxes is "
                             "not modelled)")
        splits = [t for t in range(2, MAX_TP + 1) if not (m.heads % t or m.kv_heads % t and t % m.kv_heads)]
        if tp > 1 and tp not in splits:
            raise UsageError(f"--tp {tp} does not split {m.id}'s {m.heads} attention heads ({m.kv_heads} KV heads) "
                             "evenly, as vLLM and SGLang require: "
                             + (f"use {', '.join(map(str, splits))}" if splits else "it runs on one GPU"))
        return cls(m, hw, q, engine, backend, cal.efficiency(backend), kind, ubatch=ubatch, parallel=parallel,
                   tp=tp, flash_attn=flash_attn, batch_tokens=batch_tokens, arrivals=arrivals)

    @property
    def budget(self) -> int:
        """A batching engine's tokens per step: the one given, else the engine's default on this box."""
        return self.batch_tokens or rf.default_batch_tokens(self.engine, self.hw)

    @property
    def calibrated(self) -> bool:
        return self.eff.calibrated

    def _decode_cost(self, n: int, context: int, per_seq: int = 1) -> rf.StepCost:
        key = ("d", n, context, per_seq)
        if key not in self.costs:
            c = rf.decode_cost(self.model, self.hw, self.quant, n, context, self.backend, per_seq=per_seq,
                               flash_attn=self.flash_attn)
            self.costs[key] = rf.tensor_parallel(c, self.model, self.hw, self.tp, n * per_seq)
        return self.costs[key]

    def _decode_step(self, n: int, context: int) -> rf.Estimate:
        """Seconds per output token of a decode step of ``n`` sequences (speculative decoding included)."""
        plain = self._decode_cost(n, context)
        if self.spec is None:
            return rf.Estimate(plain.ceiling, rf.decode_time(plain, self.eff))
        verify = self._decode_cost(n, context, self.spec.gamma + 1)
        return rf.spec_decode(verify, plain, self.spec, self.eff)

    def _prefill_cost(self, tokens: int, cached: int, ubatch: int) -> rf.StepCost:
        key = ("p", tokens, cached, ubatch)
        if key not in self.costs:
            c = rf.prefill_cost(self.model, self.hw, self.quant, tokens, cached, self.backend, ubatch, self.flash_attn)
            self.costs[key] = rf.tensor_parallel(c, self.model, self.hw, self.tp, tokens)
        return self.costs[key]

    def fit(self, context: int, concurrency: int = 1) -> rf.Fit:
        """Memory only: it does not depend on the efficiency constants, so it is computed once per shape (the
        calibration fit evaluates each row thousands of times; unmemoised, this was 86% of `calibrate`)."""
        key = ("f", context, concurrency)
        if key not in self.fits:
            hw = self.hw if self.tp == 1 else replace(  # tp GPUs pool their memory (each runs the engine)
                self.hw, mem_gb=self.hw.mem_gb * self.tp,
                usable_gb=self.hw.usable_gb * self.tp if self.hw.usable_gb is not None else None)
            self.fits[key] = rf.fit(self.model, hw, self.quant, context, concurrency, self.engine, self.ubatch,
                                    self.flash_attn)
        return self.fits[key]

    def decode(self, depth: int, n: int = 1) -> rf.Estimate:
        f = self.fit(depth + 1, n)
        if not f.fits and self.kind == "sequential":
            return rf.offload_decode(self.model, self.hw, self.quant, depth, self.backend, f, self.eff,
                                     self.flash_attn)
        return self._decode_step(n, depth)

    def prefill(self, tokens: int, depth: int = 0) -> rf.Estimate:
        f = self.fit(depth + tokens, 1)
        if not f.fits and self.kind == "sequential":
            return rf.offload_prefill(self.model, self.hw, self.quant, tokens, depth, self.backend, f, self.eff,
                                      self.ubatch, self.flash_attn)
        ub = self.ubatch if self.kind == "sequential" else self.budget
        c = self._prefill_cost(tokens, depth, ub)
        return rf.Estimate(c.ceiling, rf.prefill_time(c, self.eff))

    def serve(self, n: int, prompt: int, output: int, cached: int = 0) -> rf.ServePoint:
        """A closed loop of ``n`` agents, from the memoised per-shape costs (the fit evaluates each row often).
        vLLM and SGLang through their scheduler's queue (``_serve_queue``); llama.cpp with ``parallel`` slots
        batches up to that many sequences (prompts in its micro-batches), and more agents wait for a slot. ``cached``: tokens of each prompt
        already in the prefix cache before its ``prompt`` new ones (an agent's turn): only the new ones are
        prefilled, at that depth, and decoding runs at the whole context."""
        ctx = cached + prompt + output // 2
        if self.kind == "batching":
            return self._serve_queue(n, prompt, output, cached)
        if self.parallel > 1:
            b = min(n, self.parallel)
            pf = self._prefill_cost(max(prompt, 1), cached, self.ubatch)
            p = rf.serve_point(pf, self._decode_step(b, ctx), self.eff, "batching", b, prompt, output)
            return rf.behind_slots(p, n, output)
        pf = self._prefill_cost(max(prompt, 1), cached, self.ubatch)
        return rf.serve_point(pf, self._decode_step(1, ctx), self.eff, "sequential", n, prompt, output)

    def _step_cost(self, kind: queue.StepKind, ctx: int) -> rf.StepCost:
        """The physical work of one kind of engine step: its decodes at the loop's mean context and its prompt
        chunks, as one forward pass (roofline.batch_step)."""
        key = ("s", kind, ctx)
        if key not in self.costs:
            per_seq = self.spec.gamma + 1 if self.spec else 1
            parts = [self._decode_cost(kind.decodes, ctx, per_seq)] if kind.decodes else []
            parts += [self._prefill_cost(t, c, self.budget) for t, c in kind.chunks]
            self.costs[key] = rf.batch_step(parts)
        return self.costs[key]

    def _step_times(self, kinds: tuple[queue.StepKind, ...], ctx: int) -> tuple[list[float], list[float]]:
        """Each kind of step's time, at the ceiling and estimated. With speculative decoding a decode step is
        one verification pass and its drafts (``_decode_step`` per token, times E), and prompt chunks add what
        they add to a plain step of the same decodes."""
        ceil, est = [], []
        for kind in kinds:
            c = self._step_cost(kind, ctx)
            t_c, t_e = c.ceiling, rf.prefill_time(c, self.eff)
            if self.spec is not None and kind.decodes:
                plain = self._step_cost(queue.StepKind(kind.decodes), ctx)
                d = self._decode_step(kind.decodes, ctx)
                t_c += d.ceiling * self.spec.expected - plain.ceiling
                t_e += d.estimate * self.spec.expected - rf.prefill_time(plain, self.eff)
            ceil.append(t_c)
            est.append(t_e)
        return ceil, est

    def _serve_queue(self, n: int, prompt: int, output: int, cached: int) -> rf.ServePoint:
        """vLLM / SGLang: the closed loop through their scheduler (queue.closed_loop, memoised per shape), each
        kind of step timed by the roofline with the current constants."""
        ctx = cached + prompt + output // 2
        per_step = self.spec.expected if self.spec else 1.0
        per_seq = self.spec.gamma + 1 if self.spec else 1
        loop = queue.closed_loop(n, max(prompt, 1), queue.decode_steps(output, per_step), self.budget,
                                 rf.mixes_prefill(self.engine), self.arrivals, per_seq, cached)
        p = rf.serve_queue(loop, self._step_times(loop.kinds, ctx), self._decode_step(1, ctx), n, output)
        if not output:  # prompts only: the decode rate of the batch stands for throughput
            d = self._decode_step(n, ctx)
            p.throughput = (n / d.ceiling, n / d.estimate)
            p.per_agent = (1 / d.ceiling, 1 / d.estimate)
        return p


# --- rows of the published.csv layout --------------------------------------------------------------------

def band_metric(r: Row) -> str:
    """The metric a row's error band is kept under."""
    if r.metric.startswith("ttft"):
        return "ttft"
    return {"decode_tps": "decode", "prefill_tps": "prefill", "output_tps": "throughput",
            "tpot_median": "tpot"}.get(r.metric, r.metric)


def row_parallel(r: Row) -> int:
    """llama-server's -np (parallel slots) from the row's note, else one slot."""
    m = re.search(r"-np\s+(\d+)", r.raw.get("note") or "")
    return int(m.group(1)) if m else 1


def row_ubatch(r: Row) -> int:
    """llama-bench's -ub from the row's note, else llama.cpp's default."""
    m = re.search(r"-ub\s+(\d+)", r.raw.get("note") or "")
    return int(m.group(1)) if m else rf.UBATCH


def row_batch_tokens(r: Row) -> int | None:
    """vLLM's --max-num-batched-tokens (SGLang's --chunked-prefill-size) from the row's note, else None: the
    engine's default."""
    m = re.search(r"--(?:max-num-batched-tokens|chunked-prefill-size)[\s=]+(\d+)", r.raw.get("note") or "")
    return int(m.group(1)) if m else None


def row_arrivals(r: Row) -> queue.Arrivals:
    """How a row's closed loop sends: "spread" when its note says the answers vary in length (no --ignore-eos)
    or says "arrivals spread", else together (the published.csv layout's serve rows: --ignore-eos)."""
    note = (r.raw.get("note") or "").lower()
    return "spread" if re.search(r"arrivals spread|variable output|without --ignore-eos", note) else "together"


def row_flash_attn(r: Row) -> bool:
    """llama-bench's -fa from the row's note ("-fa 0": off), else on (llama.cpp's default, auto, since 2025)."""
    return not re.search(r"-fa\s+0\b", r.raw.get("note") or "")


@dataclass(slots=True)
class RowResult:
    row: Row
    predicted: float | None = None
    ceiling: float | None = None  # the same quantity at efficiency 1
    flags: list[str] = field(default_factory=list)
    backend: str | None = None
    calibrated: bool = False
    band: Band | None = None
    split: str = "unseen"  # "fitted" when the calibration used this row, else "unseen"
    bottleneck: bool = False  # far below what its backend usually reaches: a software limit, not the hardware

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None or not self.row.value:
            return None
        return (self.predicted - self.row.value) / self.row.value * 100

    @property
    def measured_over_ceiling(self) -> float | None:
        if self.ceiling is None or not self.row.value:
            return None
        if self.row.unit == "ms":  # a time: the ceiling is the shortest possible
            return self.ceiling / self.row.value
        return self.row.value / self.ceiling

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.row.raw)
        d.update(predicted=self.predicted, ceiling=self.ceiling, error_pct=self.error_pct,
                 measured_over_ceiling=self.measured_over_ceiling, backend=self.backend, flags=self.flags,
                 calibrated=self.calibrated, split=self.split,
                 band_pct=self.band.pct if self.band else None)
        return d


Valuer = Callable[[rf.Efficiency], tuple[float | None, float | None]]  # constants -> (ceiling, predicted)


def _row_setup(cat: Catalog, cal: Calibration, r: Row) -> Setup:
    kv = "AUTO" if r.kv.lower() == "auto" else r.kv
    parallel = row_parallel(r) if engine_kind(r.engine) == "sequential" else 1
    batching = engine_kind(r.engine) != "sequential"
    return Setup.make(cat, cal, r.hardware, r.model, r.weights, kv, r.engine, check=False, ubatch=row_ubatch(r),
                      parallel=parallel, flash_attn=row_flash_attn(r) or batching,
                      batch_tokens=row_batch_tokens(r) if batching else None,
                      arrivals=row_arrivals(r) if batching else "together")


def _row_valuer(s: Setup, r: Row, notes: list[str]) -> Valuer | None:
    """How a row's quantity follows from a backend's constants, in the row's unit."""
    n = max(1, r.concurrency)
    if r.metric == "prefill_tps":
        t = r.input_len or 512

        def v(e: rf.Efficiency) -> tuple[float | None, float | None]:
            s.eff = e
            return s.prefill(t, r.depth).rate(t)
        return v
    if r.metric == "decode_tps":
        ctx = r.depth + (r.output_len // 2 if r.test.startswith("tg") else 0)

        def v(e: rf.Efficiency) -> tuple[float | None, float | None]:
            s.eff = e
            return s.decode(ctx).rate()
        return v
    if r.metric in ("output_tps", "ttft_median", "ttft_p99", "tpot_median"):
        prompt, output = r.input_len, r.output_len
        if not prompt and not output:
            notes.append("lengths unknown: predicted as pure decode at a short context")
            if r.metric != "output_tps":
                return None

            def v(e: rf.Efficiency) -> tuple[float | None, float | None]:
                s.eff = e
                d = s.decode(256, n) if s.kind == "batching" else s.decode(256)
                return (n / d.ceiling, n / d.estimate) if s.kind == "batching" else d.rate()
            return v

        def v(e: rf.Efficiency) -> tuple[float | None, float | None]:
            s.eff = e
            p = s.serve(n, prompt, output)
            if r.metric == "output_tps":
                return p.throughput
            if r.metric == "tpot_median":
                return p.tpot_s.ceiling * 1000, p.tpot_s.estimate * 1000
            if r.metric == "ttft_median":
                return p.ttft_s.ceiling * 1000, p.ttft_s.estimate * 1000
            if p.ttft_worst_s is not None:  # batching: the slowest prompt of the start's burst
                return p.ttft_worst_s.ceiling * 1000, p.ttft_worst_s.estimate * 1000
            # p99 of a closed loop: near the worst case, a request behind every other prefill
            pf = s.prefill(prompt)
            return (pf.ceiling + p.tpot_s.ceiling) * 1000, (n * pf.estimate + p.tpot_s.estimate) * 1000
        return v
    return None


def predict_row(cat: Catalog, cal: Calibration, r: Row) -> RowResult:
    res = RowResult(r)
    try:
        s = _row_setup(cat, cal, r)
    except UsageError as e:
        res.flags.append(f"cannot predict: {e}")
        return res
    res.backend, res.calibrated = s.backend, s.calibrated
    res.band = cal.band(s.backend, band_metric(r))
    v = _row_valuer(s, r, res.flags)
    if v is None:
        res.flags.append(f"cannot predict: no model for metric '{r.metric}' without lengths"
                         if r.metric in METRICS else f"cannot predict: unknown metric '{r.metric}'")
        return res
    res.ceiling, res.predicted = v(cal.efficiency(s.backend))
    if not s.calibrated:
        res.flags.append(f"UNCALIBRATED: no measurements of {s.backend}; priors only")
    n = max(1, r.concurrency)
    f = s.fit(r.depth + r.input_len + r.output_len + 1, n)
    if not f.fits:
        res.flags.append(f"hybrid offload: {f.gpu_layers} of {s.model.layers} layers fit on the GPU")
    ratio = res.measured_over_ceiling
    if ratio is not None and ratio > 1.0:
        res.flags.append(f"beats its physical ceiling ({ratio:.2f}x): a wrong spec, shape or format")
    if s.calibrated and res.predicted and r.value > 0:
        share = res.predicted / r.value if r.unit == "ms" else r.value / res.predicted
        if share < BOTTLENECK_SHARE:
            res.bottleneck = True
            reached = f" ({ratio:.0%} of the ceiling)" if ratio is not None else ""
            res.flags.append(
                f"likely software bottleneck: measured is {share:.0%} of what {s.backend}'s calibration predicts "
                f"for this shape{reached}; not a hardware limit"
            )
    return res


# --- calibration -----------------------------------------------------------------------------------------

@dataclass(slots=True)
class Fittable:
    row: Row
    backend: str
    value: Valuer
    source: str


def fittable_rows(cat: Catalog, rows: list[Row]) -> list[Fittable]:
    """Rows the fit can use: a known box, model, format and engine, a fitted metric, and no hybrid offload."""
    out = []
    blank = Calibration({}, {})
    for r in rows:
        if r.metric not in FITTED_METRICS or r.value <= 0:
            continue
        try:
            s = _row_setup(cat, blank, r)
        except UsageError:
            continue
        if not s.fit(r.depth + r.input_len + r.output_len + 1, max(1, r.concurrency)).fits:
            continue
        v = _row_valuer(s, r, [])
        if v is not None:
            out.append(Fittable(r, s.backend, v, r.raw.get("source", "")))
    return out


#: Source names of rows from the user's own stored runs (``calibrate --runs``).
RUN_SOURCE = "run:"


def _residual(it: Fittable) -> Callable[[rf.Efficiency], float]:
    def f(e: rf.Efficiency) -> float:
        pred = it.value(e)[1]
        if not pred or pred <= 0:
            return 0.0
        return math.log(pred / it.row.value)  # ms or tok/s alike: a log error
    return f


#: Constants fitted once per engine family and held there by its backends: the power term needs boxes whose
#: TDP:peak ratios differ (GeForce 0.4-0.7 TF/W of peak, low-TDP pro cards and H100 PCIe 1-2), which one
#: backend's rows rarely span, so per backend it trades off freely against eta_c.
FAMILY_CONSTANTS = frozenset({"flops_per_w"})


def _family_priors(items: list[Fittable]) -> dict[str, rf.Efficiency]:
    """Priors per engine family, fitted on the published rows of all its backends together: a llama.cpp backend
    with few rows (Metal, Vulkan) then starts from what ggml's kernels reach on the others, not from generic
    defaults, and keeps the literature values PRIORS sets for it on top (hierarchical shrinkage)."""
    fams: dict[str, list[Fittable]] = {}
    for it in items:
        if not it.source.startswith(RUN_SOURCE):
            fams.setdefault(family(it.backend), []).append(it)
    return {f: fit_constants([_residual(it) for it in its], prior(f)) for f, its in sorted(fams.items())
            if len({it.backend for it in its}) > 1}


def _fit_backends(items: list[Fittable]) -> tuple[dict[str, rf.Efficiency], dict[str, dict[str, float]],
                                                  dict[str, rf.Efficiency]]:
    by: dict[str, list[Fittable]] = {}
    for it in items:
        by.setdefault(it.backend, []).append(it)
    fam = _family_priors(items)
    effs, usual = {}, {}
    for backend, its in sorted(by.items()):
        own = [it for it in its if it.source.startswith(RUN_SOURCE)]
        published = len(its) - len(own)
        residual = _residual
        start = backend_prior(backend, fam.get(family(backend)))
        pub = [it for it in its if not it.source.startswith(RUN_SOURCE)]
        fixed = FAMILY_CONSTANTS if family(backend) in fam else frozenset()
        fitted = fit_constants([residual(it) for it in pub], start, fixed=fixed) if pub else start
        if own:
            # the user's own runs anchor their backend on their box: refit on them alone, pulled toward the
            # published fit, so what they measured moves the constants it constrains and leaves the others
            fitted = fit_constants([residual(it) for it in own], fitted, prior_weight=ANCHOR_PRIOR_WEIGHT)
        srcs = sorted({it.source for it in its})
        source = f"fitted on {len(its)} published rows from {', '.join(srcs)}" if not own else \
            f"fitted on {published} published rows, then anchored on {len(own)} measurements of your own " \
            f"({', '.join(s for s in srcs if s.startswith(RUN_SOURCE))})"
        effs[backend] = rf.Efficiency(**{n: getattr(fitted, n) for n in rf.PARAM_BOUNDS}, rows=len(its),
                                      calibrated=True, source=source)
        groups: dict[str, list[float]] = {}
        for it in its:
            c = it.value(effs[backend])[0]
            if c:
                groups.setdefault(it.row.group, []).append(c / it.row.value if it.row.unit == "ms" else it.row.value / c)
        usual[backend] = {g: statistics.median(v) for g, v in groups.items()}
    return effs, usual, fam


def cross_validate(cat: Catalog, rows: list[Row]) -> list[RowResult]:
    """Leave one source out: every source's rows predicted by a fit on all the other sources. Each fold builds
    its own fittable rows from the rows it keeps, so nothing the full fit built (setups, memoised costs, the
    constants its valuers were last evaluated at) reaches a fold."""
    sources = sorted({r.raw.get("source", "") for r in rows})
    out: list[RowResult] = []
    for src in sources:
        kept = [r for r in rows if r.raw.get("source", "") != src]
        effs, usual, fam = _fit_backends(fittable_rows(cat, kept))
        cal = Calibration(effs, usual, origin=f"all sources but {src}", families=fam)
        out += [predict_row(cat, cal, r) for r in rows if r.raw.get("source", "") == src]
    return out


def fit_calibration(cat: Catalog, rows: list[Row], command: str, bands: bool = True) -> Calibration:
    items = fittable_rows(cat, rows)
    effs, usual, fam = _fit_backends(items)
    srcs: dict[str, set[str]] = {}
    for it in items:
        srcs.setdefault(it.backend, set()).add(it.source)
    cal = Calibration(effs, usual, {}, {k: sorted(v) for k, v in srcs.items()}, command, origin="fitted",
                      families=fam)
    if bands:
        errs: dict[str, dict[str, list[float]]] = {}
        for res in cross_validate(cat, rows):
            if res.backend and res.error_pct is not None:
                errs.setdefault(res.backend, {}).setdefault(band_metric(res.row), []).append(res.error_pct)
        for backend, per in errs.items():
            for metric, e in per.items():
                b = make_band(e)
                if b is not None:
                    cal.bands.setdefault(backend, {})[metric] = b
    return cal


# --- accuracy --------------------------------------------------------------------------------------------

@dataclass(slots=True)
class AgainstReport:
    results: list[RowResult]
    summary: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.results], "summary": self.summary}


def error_stats(results: list[RowResult]) -> dict[str, Any]:
    errs = [abs(r.error_pct) for r in results if r.error_pct is not None]
    return {"n": len(errs), "median_abs_error_pct": statistics.median(errs) if errs else None,
            "within_25_pct": sum(e <= 25 for e in errs) / len(errs) if errs else None}


def faster_box_check(results: list[RowResult], min_ratio: float = 1.2) -> dict[str, Any]:
    """Pairs of rows measuring the same thing on two boxes: is the faster one predicted faster?"""
    key = lambda r: (r.row.model, r.row.weights, r.row.test, r.row.depth, r.row.concurrency,  # noqa: E731
                     r.row.input_len, r.row.output_len, r.row.metric)
    groups: dict[tuple[Any, ...], list[RowResult]] = {}
    for r in results:
        if r.predicted is not None:
            groups.setdefault(key(r), []).append(r)
    pairs, right, wrong = 0, 0, []
    for items in groups.values():
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                a, b = items[i], items[j]
                if a.row.hardware == b.row.hardware:
                    continue
                meas = a.row.value / b.row.value
                if max(meas, 1 / meas) < min_ratio:
                    continue
                pred = (a.predicted or 0) / (b.predicted or 1)
                pairs += 1
                if (meas > 1) == (pred > 1):
                    right += 1
                else:
                    wrong.append(f"{a.row.model} {a.row.metric} {a.row.hardware} vs {b.row.hardware}")
    return {"pairs": pairs, "right": right, "wrong": wrong, "min_ratio": min_ratio}


def accuracy(results: list[RowResult]) -> dict[str, Any]:
    """Per metric, overall and per backend: median absolute error, share within 25%, n."""
    out: dict[str, Any] = {}
    for r in results:
        if r.error_pct is None:
            continue
        m = band_metric(r.row)
        out.setdefault(m, {}).setdefault("all", []).append(r)
        out[m].setdefault(r.backend or "?", []).append(r)
    return {m: {b: error_stats(rs) for b, rs in sorted(per.items())} for m, per in out.items()}


def against(cat: Catalog, cal: Calibration, rows: list[Row]) -> AgainstReport:
    """Predict every row. A row is "fitted" only when the calibration in use was fitted on its source and
    the fit could use it; every other row is "unseen"."""
    results = [predict_row(cat, cal, r) for r in rows]
    fit_ids = {id(it.row) for it in fittable_rows(cat, rows)}
    for res in results:
        srcs = cal.sources.get(res.backend or "", [])
        if id(res.row) in fit_ids and res.row.raw.get("source", "") in srcs:
            res.split = "fitted"
    summary: dict[str, Any] = {}
    for split in ("fitted", "unseen", "all"):
        sel = [r for r in results if split == "all" or r.split == split]
        summary[split] = {g: error_stats([r for r in sel if r.row.group == g]) for g in ("decode", "prefill", "serve")}
        summary[split]["serve_throughput"] = error_stats([r for r in sel if r.row.metric == "output_tps"])
    summary["faster_box"] = faster_box_check(results)
    summary["flagged"] = sum(1 for r in results if r.bottleneck)
    summary["unpredicted"] = sum(1 for r in results if r.predicted is None)
    return AgainstReport(results, summary)
