"""Per-backend constants, fitted on published measurements, and how far to trust them.

    tokenbench calibrate --out src/tokenbench/data/efficiency.toml   # the shipped published*.csv

Each engine backend (llama.cpp CUDA / Vulkan / Metal / ROCm, vLLM CUDA, ...) has fourteen physical constants
(roofline.PARAM_BOUNDS): the shares of nominal bandwidth reached streaming weights, an f16 KV cache and a
block-quantized one; a fixed cost per layer per forward pass (GPU cycles: stated at 1.8 GHz, scaled by the box's
clock); the shares of the arithmetic peak reached by the
weight matmuls (and kept by dequantizing and by routed-expert ones) and by attention; the TFLOPS per watt of
TDP the arithmetic may draw; a fixed cost per routed-expert matmul; the bytes per quantized weight a separate
dequantize pass of a prompt moves; the bytes of quantized weights (K-quants, and how many times that for 32-weight
blocks) and the FLOPs multiplying them one SM gets through per cycle in ggml's CUDA kernels (roofline.sm_rates).
(TTFT under load needs no constant of its own: a batching engine's queue is simulated step by step,
predict/queue.py; calibration files that still carry the old ``burst`` share load, and it is ignored.) They are
bounded (no backend beats its hardware) and fitted on every row of every source by minimising the squared log
error (a robust soft-L1 loss, so one odd row cannot pull a constant), plus a penalty for straying from a prior (so
a backend with two rows keeps the prior for what its rows cannot tell). The prior is hierarchical: one fit on all
the rows of an engine family (every llama.cpp backend together) starts from the physical priors below, and each
backend starts from that family fit with its own literature values (LITERATURE) on top; the power constant is
the family's alone. Rows that
need hybrid offload are not fitted (they test the offload model, not the backend).

How sure a prediction is comes from leave-one-source-out cross-validation: every source is predicted by a fit
on all the others, and the residuals per backend and metric give the band a prediction shows. A backend that
no row stands behind is UNCALIBRATED: its priors (its family's fit where there is one) are shown as such.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from .. import registry
from ..errors import UsageError
from .roofline import Efficiency, PARAM_BOUNDS
from .specs import finite_number


def _with(e: Efficiency, constants: dict[str, float]) -> Efficiency:
    """``e`` with some of its float constants replaced (by name, from PARAMS)."""
    changes: dict[str, Any] = constants
    return replace(e, **changes)


#: Physical priors per backend family, and where they come from (roofline.md "Efficiency evidence").
#: llama.cpp tg128 reaches 0.59–0.66 of nominal bandwidth on RTX 3090/4090 and M3 Max, 0.38 on ROCm (7900
#: XTX); Strix Halo's BF16 GEMM reaches 36.9 of 59.4 TF (0.62). An f16 KV stream is a stream like the
#: weights'; a dequantizing (q8_0/q4_0) KV read runs well below it. roofline.md's fixed step cost, 0.5–3 ms,
#: over ~32 layers is ~15–90 µs per layer. (The generic defaults are
#: roofline.Efficiency's.) LITERATURE: what the literature says about one backend, beyond the generic
#: defaults; these values win over the family's fit a backend starts from (backend_prior).
#: deq_bytes (generic default 2.6): llama.cpp's CUDA backend as of May 2024 (ggml-cuda.cu, MMQ_MAX_BATCH_SIZE 32:
#: "max batch size to use MMQ kernels when tensor cores are available") sent every quantized matmul of more than
#: 32 tokens to a dequantize-to-F16 kernel and then cuBLAS: Q4_K_M's 0.61 bytes per weight read, 2 written, a
#: pass of its own before the GEMM. llama.cpp PR 8075 (June 2024) made its int8 MMQ kernels the default, which
#: dequantize tile by tile inside the matmul; the fit finds where between the two a backend's rows sit.
LITERATURE: dict[str, dict[str, float]] = {
    "llamacpp-rocm": {"eta_w": 0.38, "eta_kv": 0.38},
    # Metal prompt processing: llama-bench pp512 of Llama-3.2-3B Q4_K_M on an M1 Ultra 64c, 2142.6 t/s
    # (geerlingguy/ai-benchmarks#48): 2·2.82e9 FLOPs/token × 2142.6 = 12.1 TF of the 21 TF FP16 peak,
    # 0.57 (the same author's M3 Ultra 80c, geerlingguy/beowulf-ai-cluster#17: Llama 3.3 70B Q4_K_M
    # pp512 162.3 t/s, 0.68 of 32.8 TF). Both are K-quant figures, so they give the product eta_c·eta_q; with
    # no F16 figure beside them it is all put in eta_c, and Metal's dequantizing matmuls get no further
    # penalty (eta_q 1). Metal's matmul kernels dequantize each tile into threadgroup memory, with no pass of
    # their own: deq_bytes 0.
    "llamacpp-metal": {"eta_w": 0.59, "eta_kv": 0.59, "eta_c": 0.57, "eta_q": 1.0, "deq_bytes": 0.0},
    # eta_c 0.5 is already an end-to-end share of an H100 SXM's peak, measured at its TDP, throttling and all:
    # a power term on top would count the limit twice, so the prior leaves it off (the bound, 10 TF/W). Its
    # quantized kernels (Marlin, CUTLASS FP8) dequantize in registers: deq_bytes 0.
    "vllm": {"eta_w": 0.7, "eta_kv": 0.7, "t_layer": 10e-6, "eta_c": 0.5, "eta_att": 0.4, "flops_per_w": 10.0,
             "deq_bytes": 0.0},
}
PRIORS: dict[str, Efficiency] = {"default": Efficiency(), **{k: _with(Efficiency(), v) for k, v in LITERATURE.items()}}
#: The fitted constants: all of roofline.PARAM_BOUNDS.
PARAMS = tuple(PARAM_BOUNDS)
#: Weight of the pull toward the prior, per constant, against one row's squared log error.
PRIOR_WEIGHT = 0.5
#: Scale of the soft-L1 loss on log errors: rows off by more than ~20% count linearly, not squared.
LOSS_SCALE = 0.2
#: Offsets that keep log() finite for constants whose bound is 0.
_LOG_OFFSET = {"t_layer": 10e-6, "deq_bytes": 0.1}
#: Share of a backend's cross-validated deviations (measured from predicted) a band covers.
BAND_QUANTILE = 0.8
#: Fewer cross-validated residuals than this give no band.
BAND_MIN_N = 3


def backend_key(engine: str, default_backend: str) -> str:
    """The backend an engine string calibrates on a box whose default GPU backend is ``default_backend``: the
    registry's rule (each batching engine is its own backend, SGLang never borrows vLLM's fit, and an AMD box,
    ROCm or Vulkan by default, runs them on ROCm; llama.cpp's is the backend named or the box's)."""
    return registry.backend_key(engine, default_backend)


def engine_kind(engine: str) -> str:
    return registry.engine(engine).kind


def _literature_key(backend: str) -> str | None:
    """The LITERATURE entry a backend starts from: its own, else the one its engine borrows (registry.Engine
    .literature: llama-cpp-python's backends llama.cpp's of the same GPU backend, SGLang's vLLM's); None: none."""
    if backend in LITERATURE:
        return backend
    b = registry.backend(backend)
    if b is None or b.engine.literature is None:
        return None
    stem = b.engine.literature
    return next((k for k in ((f"{stem}-{b.gpu}",) if b.gpu else ()) + (stem,) if k in LITERATURE), None)


def literature(backend: str) -> dict[str, float]:
    key = _literature_key(backend)
    return LITERATURE[key] if key else {}


def prior(backend: str) -> Efficiency:
    key = _literature_key(backend)
    return PRIORS[key] if key else PRIORS["default"]


def family(backend: str) -> str:
    """The engine family a backend belongs to (registry.Engine.family): llama.cpp's backends, and
    llama-cpp-python's, share ggml's kernels."""
    return registry.family(backend)


def backend_prior(backend: str, family_fit: Efficiency | None) -> Efficiency:
    """Where a backend's fit starts: its family's fit when there is one, with the literature values PRIORS sets
    for this backend itself (those that differ from the generic defaults) kept on top."""
    if family_fit is None:
        return prior(backend)
    return _with(replace(family_fit, rows=0, calibrated=False), literature(backend))


# --- the fit ---------------------------------------------------------------------------------------------

def _to_z(name: str, v: float) -> float:
    lo, hi = PARAM_BOUNDS[name]
    p = min(max((v - lo) / (hi - lo), 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def _from_z(name: str, z: float) -> float:
    lo, hi = PARAM_BOUNDS[name]
    return lo + (hi - lo) / (1 + math.exp(-max(-40.0, min(40.0, z))))


def _glog(name: str, v: float) -> float:
    return math.log(v + _LOG_OFFSET.get(name, 0.0))


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None when singular."""
    k = len(b)
    m = [row[:] + [bv] for row, bv in zip(a, b)]
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [u - f * v for u, v in zip(m[r], m[c])]
    return [m[i][k] / m[i][i] for i in range(k)]


Evaluator = Callable[[Efficiency], float]  # a row's log(predicted / measured) under some constants


#: The pull toward the published fit when the user's own runs anchor a backend (calibrate --runs): weaker, so
#: their box's measurements decide what they constrain, and the published fit holds only the rest.
ANCHOR_PRIOR_WEIGHT = 0.05


def _normal_equations(residuals: Callable[[list[float]], tuple[list[float], list[float]]], z: list[float],
                      rs: list[float], pr: list[float], wts: list[float],
                      h: float) -> tuple[list[list[float]], list[float]]:
    """JᵀJ and Jᵀr of the weighted residuals at ``z``, the Jacobian by forward differences of step ``h``."""
    res = [w * r for w, r in zip(wts, rs)] + pr
    jac_cols = []
    for j in range(len(z)):
        zj = z[:]
        zj[j] += h
        rj, pj = residuals(zj)
        jac_cols.append([(w * (a - b)) / h for w, a, b in zip(wts, rj, rs)] + [(a - b) / h for a, b in zip(pj, pr)])
    k = len(z)
    jtj = [[sum(x * y for x, y in zip(jac_cols[i], jac_cols[j])) for j in range(k)] for i in range(k)]
    jtr = [sum(x * y for x, y in zip(jac_cols[i], res)) for i in range(k)]
    return jtj, jtr


def fit_constants(rows: Sequence[Evaluator], start: Efficiency, iterations: int = 40,
                  prior_weight: float = PRIOR_WEIGHT, fixed: frozenset[str] = frozenset()) -> Efficiency:
    """Levenberg–Marquardt on the constants (bounded through a logistic map), minimising the soft-L1 loss
    of each row's log error plus PRIOR_WEIGHT·(log θ − log θ_prior)² per constant."""
    names = tuple(n for n in PARAMS if n not in fixed)
    z = [_to_z(n, getattr(start, n)) for n in names]
    g0 = [_glog(n, getattr(start, n)) for n in names]
    wp = math.sqrt(prior_weight)

    def residuals(zs: list[float]) -> tuple[list[float], list[float]]:
        eff = _with(start, {n: _from_z(n, v) for n, v in zip(names, zs)})
        rs = [f(eff) for f in rows]
        prior_r = [wp * (_glog(n, getattr(eff, n)) - g) for n, g in zip(names, g0)]
        return rs, prior_r

    def loss(rs: list[float], pr: list[float]) -> float:
        s2 = LOSS_SCALE**2
        return sum(2 * s2 * (math.sqrt(1 + r * r / s2) - 1) for r in rs) + sum(p * p for p in pr)

    rs, pr = residuals(z)
    cur = loss(rs, pr)
    lam = 1e-2
    h = 1e-4
    for _ in range(iterations):
        # IRLS weights of the soft-L1 loss, then a damped Gauss–Newton step on the weighted residuals
        wts = [1 / math.sqrt(math.sqrt(1 + r * r / LOSS_SCALE**2)) for r in rs]
        jtj, jtr = _normal_equations(residuals, z, rs, pr, wts, h)
        k = len(names)
        improved = False
        for _ in range(8):
            a = [[jtj[i][j] + (lam * (jtj[i][i] + 1e-9) if i == j else 0.0) for j in range(k)] for i in range(k)]
            step = _solve(a, [-v for v in jtr])
            if step is None:
                lam *= 10
                continue
            zn = [v + s for v, s in zip(z, step)]
            rn, pn = residuals(zn)
            new = loss(rn, pn)
            if new < cur:
                z, rs, pr = zn, rn, pn
                improved = cur - new > 1e-10 * (1 + cur)
                cur = new
                lam = max(lam / 3, 1e-7)
                break
            lam *= 10
        if not improved:
            break
    return _with(start, {n: _from_z(n, v) for n, v in zip(names, z)})


# --- the calibration file --------------------------------------------------------------------------------

@dataclass(slots=True)
class Band:
    """How far held-out measurements of one backend and metric lay from their predictions (RowResult.deviation_pct,
    in percent of the prediction, so "p ±X%" reads as printed: measured between p(1 − X) and p(1 + X)):
    BAND_QUANTILE of them within ``pct``, half within ``median_pct``; a band widened for extrapolation says why in
    ``widened``."""

    pct: float
    median_pct: float
    n: int
    widened: tuple[str, ...] = ()

    @property
    def wide(self) -> bool:
        """Over WIDE_BAND_PCT: flagged wherever it is printed."""
        return self.pct > WIDE_BAND_PCT


#: How far a prediction may drift per year of engine builds newer than any row its backend was fitted on, as a log
#: error, when the data cannot tell (no backend with rows of two eras): llama.cpp CUDA decode was 30-45% faster in
#: 2025-2026 builds than the 2024 builds' fit predicts (llama.cpp's CUDA scoreboard, discussion 15013, and
#: llama-bench on one H100 SXM, h100-lcpp in data/published-current.csv), about a year apart: log(1.35). The
#: shipped data and the split by time's pre-2025 side both hold CUDA and Metal rows of 2023 and 2024 builds, so
#: both measure their drift ([meta] drift, fitting._drift) and this prior is only a user's data's fallback.
DRIFT_PRIOR = math.log(1.35)
#: Widening per doubling of context (depth, prompt and output) beyond the deepest a backend's rows reached (log
#: error), and per doubling of concurrency beyond its highest: what the model does there no row has checked.
DEPTH_TERM = 0.10
CONCURRENCY_TERM = 0.15
#: A backend fitted on fewer rows than this: its constants rest on few boxes; its band widens by FEW_ROWS_TERM. So
#: does a box of a hardware generation (HardwareSpec.arch) its backend has fewer rows of: a backend's kernels are
#: built and tuned per instruction set, and llama.cpp's 2025 scoreboard puts the RTX 5090 (sm_120, 6 rows) 31%
#: above a prediction whose constants rest mostly on sm_80-sm_90 rows.
FEW_ROWS = 12
FEW_ROWS_TERM = math.log(1.25)
#: Calibration.reach's keys counting a backend's rows per hardware generation ("arch_sm_90") and the boxes its rows
#: of one year of builds measured ("boxes_2026").
ARCH_KEY = "arch_"
YEAR_KEY = "boxes_"
#: An era's constants rest on rows of at least this many boxes: with fewer, a year's rows cannot tell the
#: bandwidth share from the per-layer cost, so the year joins the one before it (the oldest, the one after), and a
#: prediction for that year's builds widens by FEW_ROWS_TERM: its constants are partly another year's (llama.cpp
#: CUDA's 2026 builds, rows of h100-lcpp's H100 and h200-lcpp's H200 alone, decode 25% above the 2025-2026
#: constants on the H100).
ERA_MIN_BOXES = 3
#: The band of a backend and metric no held-out row measured (a fit with no cross-validated residual for it):
#: about what rows predicted from priors alone miss by, held out (llama.cpp ROCm decode 44%, Vulkan prompts at
#: depth 93% in the split by time); wide on purpose, and said as such ("no held-out rows").
FALLBACK_BAND_PCT = 60.0
#: A band wider than this (percent) is flagged "wide" wherever it is printed: a spread over half the estimate, which
#: the project's rule for published numbers flags (a measured rate's spread over half its mean is "unstable"). The
#: estimate then gives an order of magnitude, not a value; past 100% a "±" read around it would reach below zero.
WIDE_BAND_PCT = 50.0


def era_for(eras: Iterable[str], year: str) -> str | None:
    """The era (named "2025" or "2025-2026": the years of builds one fit stands for) that builds of ``year`` fall
    in: the newest one starting at or before it; None when every era starts after it."""
    older = [k for k in eras if k and k[:4] <= year[:4]]
    return max(older, key=lambda k: k[:4]) if older else None


@dataclass(frozen=True, slots=True)
class Extrapolation:
    """How far a prediction reaches beyond its backend's rows: years of builds newer than the newest era it was
    fitted on (negative: older than the oldest), the deepest context it asks for (depth, prompt and output:
    rows.context), its concurrency, its box's hardware generation and the year of builds it was asked for (none: the
    newest era's constants, for that era's builds as a whole)."""

    years: int = 0
    depth: int = 0  # tokens of context
    concurrency: int = 1
    arch: str = ""  # the box's hardware generation (HardwareSpec.arch); "" unknown
    year: str = ""  # the year of the builds it was asked for (--engine-version, a row's date); "" not asked


def _counted(reach: dict[str, int], key: str) -> bool:
    """Whether a backend's reach counts its rows by ``key`` (a calibration file of an older tokenbench does not)."""
    return any(k.startswith(key) for k in reach)


def widen(b: Band, terms: list[tuple[float, str]]) -> Band:
    """A band with extra log-error terms added in quadrature (independent sources of error), each named."""
    terms = [(t, why) for t, why in terms if t > 0]
    if not terms:
        return b
    z = math.sqrt(math.log1p(b.pct / 100) ** 2 + sum(t * t for t, _ in terms))
    return Band(math.expm1(z) * 100, b.median_pct, b.n, b.widened + tuple(why for _, why in terms))


@dataclass(slots=True)
class Calibration:
    backends: dict[str, Efficiency]
    usual_ratio: dict[str, dict[str, float]]  # backend -> group -> median measured/ceiling of fitted rows
    bands: dict[str, dict[str, Band]] = field(default_factory=dict)  # backend -> metric -> band
    sources: dict[str, list[str]] = field(default_factory=dict)  # backend -> sources of its fitted rows
    command: str = ""
    origin: str = "packaged"
    families: dict[str, Efficiency] = field(default_factory=dict)  # engine family -> fit on all its backends
    eras: dict[str, dict[str, Efficiency]] = field(default_factory=dict)  # backend -> year of builds -> constants
    reach: dict[str, dict[str, int]] = field(default_factory=dict)  # backend -> max_depth (context), max_concurrency
    drift: float = DRIFT_PRIOR  # log error per year of builds beyond the newest era (DRIFT_PRIOR)

    def newest_era(self, backend: str) -> str:
        """The newest year of builds a backend was fitted on ("" when undated or uncalibrated)."""
        return max(self.eras.get(backend, {}), key=lambda k: k[:4],
                   default=self.backends[backend].era if backend in self.backends else "")

    def oldest_era(self, backend: str) -> str:
        """The oldest era of builds a backend was fitted on ("" when undated or uncalibrated)."""
        return min(self.eras.get(backend, {}), key=lambda k: k[:4], default=self.newest_era(backend))

    def efficiency(self, backend: str, era: str | None = None) -> Efficiency:
        """The fitted constants, or UNCALIBRATED priors: the family's fit on its other backends where there is one
        (llama.cpp's backends share ggml's kernels), else the physical priors; never another backend's own fit.
        ``era``: the year of the engine's build; its constants are those of the newest era fitted at or before
        it (the oldest for an older one); None: the newest the data supports."""
        per = self.eras.get(backend, {})
        if era and per:
            return per[era_for(per, era) or min(per, key=lambda k: k[:4])]
        if backend in self.backends:
            return self.backends[backend]
        fam = self.families.get(family(backend))
        if fam is not None:
            return replace(backend_prior(backend, fam), source=f"UNCALIBRATED: no measurements of {backend} behind "
                           f"this calibration; priors fitted on the other {family(backend)} backends")
        return replace(prior(backend), source=f"UNCALIBRATED: no measurements of {backend} behind this "
                                              "calibration; physical priors only")

    def band(self, backend: str, metric: str, reach: Extrapolation | None = None,
             fallback: Band | None = None) -> Band | None:
        """The cross-validated band of a backend's metric (``fallback`` where there is none), widened for what
        ``reach`` asks beyond its rows."""
        b = self.bands.get(backend, {}).get(metric) or fallback
        if b is None or reach is None:
            return b
        return widen(b, self.extrapolation_terms(backend, metric, reach))

    def _family_reach(self, backend: str) -> dict[str, int]:
        """An uncalibrated backend's reach: that of the rows of its family's other backends (its priors' data)."""
        fam = [r for b, r in self.reach.items() if family(b) == family(backend)]
        return {k: max(r.get(k, 0) for r in fam) for k in ("max_depth", "max_concurrency")} if fam else {}

    def extrapolation_terms(self, backend: str, metric: str, reach: Extrapolation) -> list[tuple[float, str]]:
        """Log-error terms for a prediction beyond a backend's rows, each with its reason."""
        terms = []
        if reach.years > 0:
            terms.append((self.drift * reach.years, f"engine builds {reach.years} year(s) newer than any row "
                                                     f"({self.newest_era(backend) or 'undated'})"))
        elif reach.years < 0:
            terms.append((self.drift * -reach.years, f"engine builds {-reach.years} year(s) older than any row "
                                                      f"({self.oldest_era(backend) or 'undated'})"))
        r = self.reach.get(backend) or self._family_reach(backend)
        deepest, widest = r.get("max_depth"), r.get("max_concurrency")
        if deepest is not None and reach.depth > max(deepest, 1024):
            terms.append((DEPTH_TERM * math.log2(reach.depth / max(deepest, 1024)),
                          f"context {reach.depth:,} tokens beyond the deepest row's ({deepest:,})"))
        if widest is not None and metric in ("ttft", "throughput", "tpot") and reach.concurrency > max(widest, 1):
            terms.append((CONCURRENCY_TERM * math.log2(reach.concurrency / max(widest, 1)),
                          f"concurrency {reach.concurrency} beyond the highest row ({widest})"))
        e = self.backends.get(backend)
        if e is not None and e.rows < FEW_ROWS:
            terms.append((FEW_ROWS_TERM, f"fitted on {e.rows} rows"))
        elif e is not None and reach.arch and _counted(r, ARCH_KEY) and r.get(ARCH_KEY + reach.arch, 0) < FEW_ROWS:
            terms.append((FEW_ROWS_TERM, f"{r.get(ARCH_KEY + reach.arch, 0)} rows of {reach.arch} boxes"))
        if (e is not None and reach.years == 0 and reach.year and _counted(r, YEAR_KEY)
                and r.get(YEAR_KEY + reach.year, 0) < ERA_MIN_BOXES):
            terms.append((FEW_ROWS_TERM, f"{reach.year} builds measured on {r.get(YEAR_KEY + reach.year, 0)} box(es)"))
        return terms

    def to_toml(self) -> str:
        lines = [
            "# Per-backend constants fitted on published measurements. Do not edit by hand: re-run",
            f"#   {self.command}",
            "# arith = (t_matmul + t_routed*(1/eta_moe - 1))/(eta_c*eta_q if quantized) + t_att/eta_att"
            " + fp16_flops/(TDP*flops_per_w)",
            "# ggml CUDA, block-quantized weights: matmul = max(matmul, moe*t_mmq/sm_flops) (MMQ builds),"
            " weights = max(t_weights/eta_w, t_unpack/(sm_bytes*(sm_simple for 32-weight blocks)));"
            " t_mmq, t_unpack: FLOPs, bytes over SMs x clock",
            "# decode:  t = max(weights + t_kv/eta_kv + t_kvq/eta_kvq, arith) + layers*t_layer*cyc",
            "# prefill: t = max(arith, weight reads/eta_w + KV/eta_kv) + passes*layers*t_layer*cyc"
            " + expert_gemms*t_expert + passes*dense_quantized_weights*deq_bytes/(bw*eta_w) (before MMQ)",
            "# cyc = 1.8 GHz / the box's boost clock: t_layer is GPU cycles, stated at 1.8 GHz.",
            "# [family.*]: one fit on all backends of an engine family, the prior each of them starts from.",
            "# TTFT under closed-loop load: vLLM's/SGLang's scheduler simulated step by step (predict/queue.py),"
            " each step timed as above.",
            "# usual_*: median measured/ceiling of the fitted rows, for the software-bottleneck flag.",
            "# band_*: how far (% of the prediction) 80% of the held-out rows measured from their leave-one-source-"
            "out prediction, median, n.",
            "# era: the year of the engine builds the section's constants were fitted on (the newest the data has);"
            " [eras.*]: older years'.",
            "# max_depth, max_concurrency: the reach of the backend's rows (max_depth: the deepest context, depth +"
            " prompt + output); arch_*: its rows per hardware generation; boxes_*: the boxes its rows of each"
            " year of builds measured; [meta] drift: log error per year of builds newer than any row.",
            "",
        ]
        for name, e in sorted(self.backends.items()):
            lines.append(f"[{name}]")
            for f in fields(Efficiency):
                v = getattr(e, f.name)
                if isinstance(v, bool):
                    lines.append(f"{f.name} = {'true' if v else 'false'}")
                elif isinstance(v, str):
                    lines.append(f'{f.name} = "{v}"')
                else:
                    lines.append(f"{f.name} = {v:.6g}")
            lines.append("sources = [" + ", ".join(f'"{s}"' for s in self.sources.get(name, [])) + "]")
            lines += [f"{k} = {v}" for k, v in sorted(self.reach.get(name, {}).items())]
            for g, r in sorted(self.usual_ratio.get(name, {}).items()):
                lines.append(f"usual_{g} = {r:.4g}")
            for metric, b in sorted(self.bands.get(name, {}).items()):
                lines.append(f"band_{metric} = [{b.pct:.4g}, {b.median_pct:.4g}, {b.n}]")
            lines.append("")
        for name, per in sorted(self.eras.items()):
            for era, e in sorted(per.items()):
                if era and e is not self.backends.get(name):  # the newest era is the backend's own section
                    lines.append(f'[eras.{name}."{era}"]')
                    lines += [f"{n} = {getattr(e, n):.6g}" for n in PARAM_BOUNDS]
                    lines += [f"rows = {e.rows}", f'source = "{e.source}"', ""]
        lines += ["[meta]", f"drift = {self.drift:.4g}", ""]
        for name, e in sorted(self.families.items()):
            lines.append(f"[family.{name}]")
            lines += [f"{n} = {getattr(e, n):.6g}" for n in PARAM_BOUNDS]
            lines.append("")
        # bands of backends no row calibrates (their held-out rows were predicted from priors)
        for name in sorted(set(self.bands) - set(self.backends)):
            lines.append(f"[uncalibrated.{name}]")
            for metric, b in sorted(self.bands[name].items()):
                lines.append(f"band_{metric} = [{b.pct:.4g}, {b.median_pct:.4g}, {b.n}]")
            lines.append("")
        return "\n".join(lines)

    @classmethod
    def from_toml(cls, text: str, origin: str = "packaged") -> Calibration:
        try:
            data: dict[str, Any] = tomllib.loads(text)
            backends, usual, bands, sources = {}, {}, {}, {}
            names = {f.name for f in fields(Efficiency)}
            families = {}
            eras: dict[str, dict[str, Efficiency]] = {}
            reach: dict[str, dict[str, int]] = {}
            drift = DRIFT_PRIOR
            for name, t in data.items():
                if name == "family":
                    families = {f: Efficiency(**{k: v for k, v in _numbers(f"family.{f}", tf).items()
                                                 if k in PARAM_BOUNDS}) for f, tf in t.items()}
                    continue
                if name == "meta":
                    drift = float(t.get("drift", DRIFT_PRIOR))
                    continue
                if name == "eras":
                    eras = _read_eras(t)
                    continue
                if name == "uncalibrated":
                    for b, tb in t.items():
                        bands[b] = {k[len("band_"):]: Band(*v) for k, v in tb.items() if k.startswith("band_")}
                    continue
                _numbers(name, t)
                backends[name] = Efficiency(**{k: v for k, v in t.items() if k in names})
                usual[name] = {k[len("usual_"):]: v for k, v in t.items() if k.startswith("usual_")}
                bands[name] = {k[len("band_"):]: Band(*v) for k, v in t.items() if k.startswith("band_")}
                sources[name] = list(t.get("sources", []))
                reach[name] = {k: int(v) for k, v in t.items()
                               if k in ("max_depth", "max_concurrency") or k.startswith((ARCH_KEY, YEAR_KEY))}
        except (tomllib.TOMLDecodeError, TypeError, AttributeError, ValueError) as e:
            raise UsageError(f"calibration {origin} is not a file tokenbench calibrate wrote ({e})") from None
        for name, newest in backends.items():  # the backend's own section is its newest era
            eras.setdefault(name, {})[newest.era] = newest
        return cls(backends, usual, bands, sources, origin=origin, families=families, eras=eras, reach=reach,
                   drift=drift)

    @classmethod
    def packaged(cls) -> Calibration:
        return cls.from_toml(resources.files("tokenbench").joinpath("data/efficiency.toml").read_text())


def _read_eras(t: dict[str, Any]) -> dict[str, dict[str, Efficiency]]:
    """The [eras.BACKEND."YEARS"] sections: each older era's constants, rows and source."""
    names = {f.name for f in fields(Efficiency)}
    return {b: {era: Efficiency(**{k: v for k, v in _numbers(f"eras.{b}.{era}", tv).items() if k in names},
                                era=era, calibrated=True) for era, tv in te.items()} for b, te in t.items()}


def _numbers(section: str, t: dict[str, Any]) -> dict[str, Any]:
    """A section of a calibration file, its constants checked: each a finite number (a hand edit can make one
    a string, which would fail deep inside a prediction)."""
    for k in PARAM_BOUNDS:
        v = t.get(k, 0.0)
        if not finite_number(v):
            raise ValueError(f"[{section}] {k} = {repr(v)[:40]} is not a number")
    return t


def make_band(deviations_pct: list[float]) -> Band | None:
    """The band of held-out rows' deviations (RowResult.deviation_pct); None with fewer than BAND_MIN_N."""
    if len(deviations_pct) < BAND_MIN_N:
        return None
    e = sorted(abs(x) for x in deviations_pct)
    idx = min(len(e) - 1, math.ceil(BAND_QUANTILE * len(e)) - 1)
    return Band(e[idx], statistics.median(e), len(e))


def write(cal: Calibration, out: Path) -> None:
    out.write_text(cal.to_toml())
