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
from .. import registry
from . import queue
from . import roofline as rf
from .calibration import (ANCHOR_PRIOR_WEIGHT, BAND_MIN_N, DRIFT_PRIOR, FALLBACK_BAND_PCT, PRIOR_WEIGHT, Band,
                          Calibration, Extrapolation, backend_key, backend_prior, engine_kind, era_for, family,
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
    era: str = ""  # the year of the engine builds whose constants ``eff`` holds ("": undated or priors)
    reach: Extrapolation = Extrapolation()  # how far beyond its backend's rows this prediction asks (bands widen)
    batch_tokens: int | None = None  # batching engines: tokens per step (--max-num-batched-tokens); None: default
    arrivals: queue.Arrivals = "together"  # a batching engine's closed loop: how the agents' prompts arrive
    costs: dict[tuple[Any, ...], rf.StepCost] = field(default_factory=dict)  # physical work, memoised
    fits: dict[tuple[Any, ...], rf.Fit] = field(default_factory=dict)  # memory per shape, memoised

    @classmethod
    def make(cls, cat: Catalog, cal: Calibration, hardware: str, model: str, weights: str, kv: str,
             engine: str, check: bool = True, ubatch: int = rf.UBATCH, parallel: int = 1, tp: int = 1,
             flash_attn: bool = True, era: str | None = None, batch_tokens: int | None = None,
             arrivals: queue.Arrivals = "together") -> Setup:
        """``era``: the year of the engine's build (registry.era reads a version); None: the newest the
        calibration has for this backend."""
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
        _check_tp(m, tp)
        eff = cal.efficiency(backend, era)
        newest = cal.newest_era(backend)[-4:] if eff.calibrated else ""  # the last year of the newest era
        years = int(era) - int(newest) if era and newest and era > newest else 0
        return cls(m, hw, q, engine, backend, eff, kind, ubatch=ubatch, parallel=parallel, tp=tp,
                   flash_attn=flash_attn, era=eff.era, reach=Extrapolation(years=years), batch_tokens=batch_tokens,
                   arrivals=arrivals)

    def band(self, cal: Calibration, metric: str, depth: int = 0, concurrency: int = 1,
             fallback: Band | None = None) -> Band | None:
        """The calibration's band for one of this setup's metrics (``fallback`` where it has none), widened for
        the builds, depth and concurrency it reaches beyond its backend's rows."""
        return cal.band(self.backend, metric, replace(self.reach, depth=max(depth, self.reach.depth),
                                                      concurrency=max(concurrency, self.reach.concurrency)), fallback)

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
                      arrivals=row_arrivals(r) if batching else "together", era=row_era(r) or None)


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


#: A row's band where its backend has none (no held-out row measured that metric).
FALLBACK_BAND = Band(FALLBACK_BAND_PCT, FALLBACK_BAND_PCT, 0, ("no held-out rows",))


def row_band(cal: Calibration, s: Setup, r: Row) -> Band:
    """A row's band: its backend's cross-validated one (an uncalibrated backend's is that of the held-out rows
    predicted from priors), else FALLBACK_BAND; widened for the builds, depth and concurrency it reaches."""
    b = s.band(cal, band_metric(r), r.depth, max(1, r.concurrency), FALLBACK_BAND)
    assert b is not None  # a fallback given: never None
    return b


def predict_row(cat: Catalog, cal: Calibration, r: Row) -> RowResult:
    res = RowResult(r)
    try:
        s = _row_setup(cat, cal, r)
    except UsageError as e:
        res.flags.append(f"cannot predict: {e}")
        return res
    res.backend, res.calibrated = s.backend, s.calibrated
    res.band = row_band(cal, s, r)
    v = _row_valuer(s, r, res.flags)
    if v is None:
        res.flags.append(f"cannot predict: no model for metric '{r.metric}' without lengths"
                         if r.metric in METRICS else f"cannot predict: unknown metric '{r.metric}'")
        return res
    res.ceiling, res.predicted = v(s.eff)
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
    era: str = ""  # row_era: the year of its engine build, "" when undated


def row_era(r: Row) -> str:
    """The year of the engine build a row measured: its date's, else its stated version's (registry.version_date),
    else "" (undated: it joins its backend's pooled fit, no era's)."""
    if r.era:
        return r.era
    e = registry.find(r.engine)
    d = registry.version_date(e, r.version) if e is not None and r.version else None
    return d[:4] if d else ""


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
            out.append(Fittable(r, s.backend, v, r.raw.get("source", ""), row_era(r)))
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


#: The pull toward a backend's pooled fit (all its eras) when one era's rows are fitted on their own: as strong as
#: the pull toward the prior, so an era with few rows moves the constants its rows constrain (a 2026 build's
#: per-layer cost, from decode rows) and keeps the pooled values of the rest.
ERA_PRIOR_WEIGHT = PRIOR_WEIGHT


@dataclass(slots=True)
class Fit:
    """Constants per backend, the newest era's (what a prediction uses unless told a version), every era's, the
    usual measured/ceiling ratios, and the families' prior fits."""

    effs: dict[str, rf.Efficiency]
    usual: dict[str, dict[str, float]]
    families: dict[str, rf.Efficiency]
    eras: dict[str, dict[str, rf.Efficiency]]


#: An era's constants rest on rows of at least this many boxes: with fewer, a year's rows cannot tell the
#: bandwidth share from the per-layer cost, so the year joins the one before it (the oldest, the one after).
ERA_MIN_BOXES = 3


def _eras(its: list[Fittable]) -> list[tuple[str, set[str]]]:
    """The eras of a backend's dated rows: consecutive years grouped until each group's rows span ERA_MIN_BOXES
    boxes, named "2025" or "2025-2026", each with its years."""
    boxes: dict[str, set[str]] = {}
    for it in its:
        if it.era:
            boxes.setdefault(it.era, set()).add(it.row.hardware)
    groups: list[list[str]] = []
    for year in sorted(boxes):
        last = groups[-1] if groups else None
        if last is not None and len(set().union(*(boxes[y] for y in last))) < ERA_MIN_BOXES:
            last.append(year)
        else:
            groups.append([year])
    if len(groups) > 1 and len(set().union(*(boxes[y] for y in groups[-1]))) < ERA_MIN_BOXES:
        tail = groups.pop()  # the newest years, too few boxes alone: with the era before them
        groups[-1] += tail
    return [(g[0] if len(g) == 1 else f"{g[0]}-{g[-1]}", set(g)) for g in groups]


def _era_fits(backend: str, pooled: rf.Efficiency, its: list[Fittable],
              fixed: frozenset[str]) -> dict[str, rf.Efficiency]:
    """One fit per era (years of the engine's builds, see _eras) of a backend's published rows, each starting from
    the pooled fit of all of them: old and new builds are never one constant. One era, or none dated: the pooled
    fit is it."""
    eras = _eras(its)
    if len(eras) < 2:
        name = eras[0][0] if eras else ""
        return {name: replace(pooled, era=name)}
    out = {}
    for era, years in eras:
        mine = [it for it in its if it.era in years]
        fitted = fit_constants([_residual(it) for it in mine], pooled, prior_weight=ERA_PRIOR_WEIGHT, fixed=fixed)
        srcs = ", ".join(sorted({it.source for it in mine}))
        out[era] = replace(fitted, rows=len(mine), era=era, source=f"fitted on {len(mine)} published rows of {era} "
                           f"builds from {srcs}, pulled toward the fit on all {len(its)} rows of {backend}")
    return out


def _fit_backends(items: list[Fittable]) -> Fit:
    by: dict[str, list[Fittable]] = {}
    for it in items:
        by.setdefault(it.backend, []).append(it)
    fam = _family_priors(items)
    effs, usual, eras = {}, {}, {}
    for backend, its in sorted(by.items()):
        own = [it for it in its if it.source.startswith(RUN_SOURCE)]
        pub = [it for it in its if not it.source.startswith(RUN_SOURCE)]
        start = backend_prior(backend, fam.get(family(backend)))
        fixed = FAMILY_CONSTANTS if family(backend) in fam else frozenset()
        pooled = fit_constants([_residual(it) for it in pub], start, fixed=fixed) if pub else start
        srcs = sorted({it.source for it in pub})
        pooled = rf.Efficiency(**{n: getattr(pooled, n) for n in rf.PARAM_BOUNDS}, rows=len(pub), calibrated=True,
                               source=f"fitted on {len(pub)} published rows from {', '.join(srcs)}")
        per = _era_fits(backend, pooled, pub, fixed) if pub else {}
        if own:
            _anchor(per, own, pooled, len(pub))
        newest = max(per, key=lambda k: k[:4])
        eras[backend] = per
        effs[backend] = per[newest]
        usual[backend] = _usual(its, per, effs[backend])
    return Fit(effs, usual, fam, eras)


def _anchor(per: dict[str, rf.Efficiency], own: list[Fittable], pooled: rf.Efficiency, published: int) -> None:
    """The user's own runs anchor their backend on their box: refit on them alone, pulled toward the published fit
    of their builds' era (the newest the data has, when theirs is newer or undated), so what they measured moves
    the constants it constrains and leaves the others. The result is their era's constants."""
    newest = max(per, key=lambda k: k[:4]) if per else ""
    year = max((it.era for it in own), default="")
    era = era_for(per, year) if year else newest
    base = per[era] if era else per.get(newest, pooled)
    if era is None or (year and year > era[-4:]):  # their builds are newer than any published row's
        era = year
    anchored = fit_constants([_residual(it) for it in own], base, prior_weight=ANCHOR_PRIOR_WEIGHT)
    mine = ", ".join(sorted({it.source for it in own}))
    per[era] = replace(anchored, rows=base.rows + len(own), calibrated=True, era=era,
                       source=f"fitted on {published} published rows, then anchored on {len(own)} measurements of "
                              f"your own ({mine})")


def _usual(its: list[Fittable], per: dict[str, rf.Efficiency], newest: rf.Efficiency) -> dict[str, float]:
    """Median measured/ceiling per group of a backend's rows, each at its own era's constants."""
    groups: dict[str, list[float]] = {}
    for it in its:
        c = it.value(per.get(era_for(per, it.era) or "", newest) if it.era else newest)[0]
        if c:
            groups.setdefault(it.row.group, []).append(c / it.row.value if it.row.unit == "ms" else it.row.value / c)
    return {g: statistics.median(v) for g, v in groups.items()}


def _reach(items: list[Fittable]) -> dict[str, dict[str, int]]:
    """Per backend, the deepest context and the highest concurrency its fitted rows measured."""
    out: dict[str, dict[str, int]] = {}
    for it in items:
        r = out.setdefault(it.backend, {"max_depth": 0, "max_concurrency": 1})
        r["max_depth"] = max(r["max_depth"], it.row.depth)
        r["max_concurrency"] = max(r["max_concurrency"], it.row.concurrency)
    return out


def _drift(fit: Fit, items: list[Fittable]) -> float:
    """The log error per year a fit on older builds makes on newer ones, where a backend has rows of two eras: each
    newer era's rows predicted by the era before it, against their own era's fit; DRIFT_PRIOR where none has."""
    per_year = []
    for it in items:
        per = fit.eras.get(it.backend, {})
        mine = era_for(per, it.era) if it.era else None
        older = [e for e in per if mine and e[:4] < mine[:4]]
        if not mine or not older:
            continue
        prev = max(older, key=lambda k: k[:4])
        own, old = it.value(per[mine])[1], it.value(per[prev])[1]
        if own and old and own > 0 and old > 0:
            per_year.append(abs(math.log(own / old)) / max(1, int(it.era) - int(prev[-4:])))
    return statistics.median(per_year) if len(per_year) >= BAND_MIN_N else DRIFT_PRIOR


def _calibration(cat: Catalog, rows: list[Row], origin: str, command: str = "") -> Calibration:
    """The fit of ``rows`` as a calibration, without bands (fit_calibration adds them)."""
    items = fittable_rows(cat, rows)
    fit = _fit_backends(items)
    srcs: dict[str, set[str]] = {}
    for it in items:
        srcs.setdefault(it.backend, set()).add(it.source)
    cal = Calibration(fit.effs, fit.usual, {}, {k: sorted(v) for k, v in srcs.items()}, command, origin=origin,
                      families=fit.families, eras=fit.eras, reach=_reach(items), drift=_drift(fit, items))
    return cal


def _source(r: Row) -> str:
    return r.raw.get("source", "")


def cross_validate(cat: Catalog, rows: list[Row], bands: bool = False,
                   fold: Callable[[Row], str] = _source) -> list[RowResult]:
    """Leave one source out (``fold``: what a fold leaves out): every source's rows predicted by a fit on all the
    other sources. Each fold builds its own fittable rows from the rows it keeps, so nothing the full fit built
    (setups, memoised costs, the constants its valuers were last evaluated at) reaches a fold."""
    out: list[RowResult] = []
    for key in sorted({fold(r) for r in rows}):
        kept = [r for r in rows if fold(r) != key]
        # bands=True: each fold with bands of its own, cross-validated on its kept rows alone (nested), so
        # whether a held-out row falls inside its band is never decided by that row's own source
        cal = fit_calibration(cat, kept, "", bands=True) if bands else _calibration(cat, kept, "")
        cal.origin = f"all but {key}"
        out += [predict_row(cat, cal, r) for r in rows if fold(r) == key]
    return out


def fit_calibration(cat: Catalog, rows: list[Row], command: str, bands: bool = True) -> Calibration:
    """The fit on every row, and (``bands``) its bands: leave-one-source-out residuals per backend and metric.
    Rows of a single source are held out a box at a time instead (each box predicted by a fit on the others)."""
    cal = _calibration(cat, rows, "fitted", command)
    if not bands:
        return cal
    fold = _source if len({_source(r) for r in rows}) > 1 else (lambda r: r.hardware)
    errs: dict[str, dict[str, list[float]]] = {}
    for res in cross_validate(cat, rows, fold=fold):
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
