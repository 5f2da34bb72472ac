"""Rows of the published.csv layout as predictions: a row's setup (from its columns and the flags its note quotes),
how its quantity follows from a backend's constants, its band, and its prediction with flags."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from . import queue
from . import memory
from . import roofline as rf
from .bands import FALLBACK_BAND_PCT, Band
from .calibration import Calibration
from .kind import Kind, kind_of
from .priors import engine_kind
from .measured import METRICS, Row
from .setup import Setup
from .specs import Catalog

#: A row is a likely software bottleneck when it reaches less than this share of what its backend's
#: calibration predicts for the same shape. (Against the calibrated estimate, not a backend-wide median of
#: measured/ceiling: that median mixed dense and MoE rows, small and large models, depth and none, and flagged
#: every MoE prompt as a bottleneck.)
BOTTLENECK_SHARE = 0.5


def band_metric(r: Row) -> str:
    """The metric a row's error band is kept under."""
    if r.metric.startswith("ttft"):
        return "ttft"
    return {"decode_tps": "decode", "prefill_tps": "prefill", "output_tps": "throughput",
            "tpot_median": "tpot"}.get(r.metric, r.metric)


def row_parallel(r: Row) -> int:
    """llama-server's slots from the row's note (-np N, or its long spelling --parallel N), else one slot."""
    m = re.search(r"(?:-np|--parallel)[\s=]+(\d+)", r.raw.get("note") or "")
    return int(m.group(1)) if m else 1


def row_ubatch(r: Row) -> int:
    """llama-bench's -ub from the row's note, else llama.cpp's default."""
    m = re.search(r"-ub\s+(\d+)", r.raw.get("note") or "")
    return int(m.group(1)) if m else memory.UBATCH


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
    kind: Kind | None = None  # the kind its band is kept under (kind.py)

    @property
    def error_pct(self) -> float | None:
        if self.predicted is None or not self.row.value:
            return None
        return (self.predicted - self.row.value) / self.row.value * 100

    @property
    def deviation_pct(self) -> float | None:
        """How far the measured value lies from the prediction, in percent of the prediction: what a band printed
        "±X%" beside a prediction speaks of (error_pct, in percent of the measured value, is not: a prediction
        of 72 ms off by 86% of the measured value could have measured anything from 39 to 514 ms)."""
        if not self.predicted:
            return None
        return (self.row.value - self.predicted) / self.predicted * 100

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
                 deviation_pct=self.deviation_pct, band_pct=self.band.pct if self.band else None)
        return d


Valuer = Callable[[rf.Efficiency], tuple[float | None, float | None]]  # constants -> (ceiling, predicted)


def row_setup_args(r: Row) -> dict[str, Any]:
    """What a row's setup is made of (Setup.make's arguments): rows with the same are of one setup."""
    kv = "AUTO" if r.kv.lower() in ("auto", "") else r.kv  # an empty cell: the engine's own (a run that said none)
    parallel = row_parallel(r) if engine_kind(r.engine) == "sequential" else 1
    batching = engine_kind(r.engine) != "sequential"
    return dict(hardware=r.hardware, model=r.model, weights=r.weights, kv=kv, engine=r.engine, check=False,
                ubatch=row_ubatch(r), parallel=parallel, flash_attn=row_flash_attn(r) or batching,
                batch_tokens=row_batch_tokens(r) if batching else None,
                arrivals=row_arrivals(r) if batching else "together", era=r.build or None)


def row_setup(cat: Catalog, cal: Calibration, r: Row) -> Setup:
    return Setup.make(cat, cal, **row_setup_args(r))


def _timed(c: rf.StepCost, units: float, time: Callable[[rf.StepCost, rf.Efficiency], float]) -> Valuer:
    """A step whose work no constant changes, as a rate: ``units`` over its ceiling and over its ``time`` at the
    constants (what Estimate.rate makes of Setup.prefill and Setup.decode, without their lookups for every set of
    constants the calibration fit tries)."""
    ceiling = c.ceiling

    def v(e: rf.Efficiency) -> tuple[float | None, float | None]:
        return units / ceiling, units / time(c, e)
    return v


def row_valuer(s: Setup, r: Row, notes: list[str]) -> Valuer | None:
    """How a row's quantity follows from a backend's constants, in the row's unit."""
    n = max(1, r.concurrency)
    if r.metric == "prefill_tps":
        t = r.input_len or 512
        if (pc := s.plain_prefill(t, r.depth)) is not None:  # its work fixed: only its time is the constants'
            return _timed(pc, t, rf.prefill_time)

        def v(e: rf.Efficiency) -> tuple[float | None, float | None]:
            s.eff = e
            return s.prefill(t, r.depth).rate(t)
        return v
    if r.metric == "decode_tps":
        ctx = r.depth + (r.output_len // 2 if r.test.startswith("tg") else 0)
        if (dc := s.plain_decode(ctx)) is not None:
            return _timed(dc, 1.0, rf.decode_time)

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
            p = s.serve_once(n, prompt, output)
            if r.metric == "output_tps":
                return p.throughput
            if r.metric == "tpot_median":
                return p.tpot_s.ceiling * 1000, p.tpot_s.estimate * 1000
            if r.metric == "ttft_median":
                return p.ttft_s.ceiling * 1000, p.ttft_s.estimate * 1000
            if p.ttft_worst_s is not None:  # batching: the slowest prompt, of the start's burst or after it
                return p.ttft_worst_s.ceiling * 1000, p.ttft_worst_s.estimate * 1000
            # p99 of a closed loop: near the worst case, a request behind every other prefill
            pf = s.prefill(prompt)
            return (pf.ceiling + p.tpot_s.ceiling) * 1000, (n * pf.estimate + p.tpot_s.estimate) * 1000
        return v
    return None


#: A row's band where its backend has none (no held-out row measured that metric).
FALLBACK_BAND = Band(FALLBACK_BAND_PCT, FALLBACK_BAND_PCT, 0, ("no held-out rows",), borrowed=True)


def context(r: Row) -> int:
    """The deepest context a row's attention reached: its depth, prompt and output together (a pp4096 at depth 0
    reaches 4096 tokens, as a tg128 at depth 3968 does)."""
    return r.depth + r.input_len + r.output_len


def row_band(cal: Calibration, s: Setup, r: Row) -> Band:
    """A row's band: its backend's cross-validated one (an uncalibrated backend's is that of the held-out rows
    predicted from priors), else FALLBACK_BAND; widened for the builds, context and concurrency it reaches."""
    b = s.band(cal, band_metric(r), context(r), max(1, r.concurrency), FALLBACK_BAND)
    assert b is not None  # a fallback given: never None
    return b


def predict_row(cat: Catalog, cal: Calibration, r: Row) -> RowResult:
    res = RowResult(r)
    try:
        s = row_setup(cat, cal, r)
    except UsageError as e:
        res.flags.append(f"cannot predict: {e}")
        return res
    res.backend, res.calibrated = s.backend, s.calibrated
    res.kind = kind_of(s.backend, s.hw, s.model, max(1, r.concurrency))
    res.band = row_band(cal, s, r)
    v = row_valuer(s, r, res.flags)
    if v is None:
        res.flags.append(f"cannot predict: no model for metric '{r.metric}' without lengths"
                         if r.metric in METRICS else f"cannot predict: unknown metric '{r.metric}'")
        return res
    res.ceiling, res.predicted = v(s.eff)
    if not s.calibrated:
        res.flags.append(f"UNCALIBRATED: no measurements of {s.backend}; priors only")
    n = max(1, r.concurrency)
    f = s.fit(context(r) + 1, n)
    if not f.fits and f.gpu_layers is not None:
        res.flags.append(f"hybrid offload: {f.gpu_layers} of {s.model.layers} layers fit on the GPU")
    elif not f.fits:
        res.flags.append(f"does not fit: {f.total_gb:.1f} GiB by fit's count, of {f.usable_gb:.1f} GiB usable")
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
