"""One entry point per question: fit, decode at depth, prefill, serving at concurrency N, rows of a file."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from . import roofline as rf
from .calibration import Calibration, backend_key, calibrate, engine_kind
from .published import Row
from .specs import Catalog, HardwareSpec, ModelSpec

#: A row is a likely software bottleneck when it reaches less than this share of its backend's usual
#: measured/ceiling ratio.
BOTTLENECK_SHARE = 0.5


@dataclass(slots=True)
class Setup:
    model: ModelSpec
    hw: HardwareSpec
    quant: rf.Quant
    engine: str
    backend: str
    eff: rf.Efficiency
    kind: str
    spec_speedup: float = 1.0

    @classmethod
    def make(cls, cat: Catalog, cal: Calibration, hardware: str, model: str, weights: str, kv: str,
             engine: str, check: bool = True) -> Setup:
        hw = cat.find_hardware(hardware)
        m = cat.find_model(model)
        q = rf.Quant.parse(weights, kv)
        if check:
            rf.check_combination(hw, q, engine)
        backend = backend_key(engine, hw.default_backend)
        return cls(m, hw, q, engine, backend, cal.efficiency(backend), engine_kind(engine))

    def fit(self, context: int, concurrency: int = 1) -> rf.Fit:
        return rf.fit(self.model, self.hw, self.quant, context, concurrency, self.engine)

    def decode(self, depth: int, n: int = 1) -> rf.Estimate:
        f = self.fit(depth + 1, n)
        if not f.fits and self.kind == "sequential":
            return rf.offload_decode(self.model, self.hw, self.quant, depth, self.backend, f, self.eff)
        c = rf.decode_cost(self.model, self.hw, self.quant, n, depth, self.backend)
        return rf.Estimate(c.ceiling / self.spec_speedup, rf.decode_time(c, self.eff) / self.spec_speedup)

    def prefill(self, tokens: int, depth: int = 0) -> rf.Estimate:
        f = self.fit(depth + tokens, 1)
        if not f.fits and self.kind == "sequential":
            return rf.offload_prefill(self.model, self.hw, self.quant, tokens, depth, self.backend, f, self.eff)
        c = rf.prefill_cost(self.model, self.hw, self.quant, tokens, depth, self.backend)
        return rf.Estimate(c.ceiling, rf.prefill_time(c, self.eff))

    def serve(self, n: int, prompt: int, output: int) -> rf.ServePoint:
        return rf.serve_point(self.model, self.hw, self.quant, self.backend, self.eff, self.kind,  # type: ignore[arg-type]
                              n, prompt, output, self.spec_speedup)


# --- rows of the published.csv layout --------------------------------------------------------------------

@dataclass(slots=True)
class RowResult:
    row: Row
    predicted: float | None = None
    ceiling: float | None = None  # the same quantity at efficiency 1
    flags: list[str] = field(default_factory=list)
    backend: str | None = None

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
                 measured_over_ceiling=self.measured_over_ceiling, backend=self.backend, flags=self.flags)
        return d


def _row_setup(cat: Catalog, cal: Calibration, r: Row) -> Setup:
    kv = "AUTO" if r.kv.lower() == "auto" else r.kv
    return Setup.make(cat, cal, r.hardware, r.model, r.weights, kv, r.engine, check=False)


def predict_row(cat: Catalog, cal: Calibration, r: Row) -> RowResult:
    res = RowResult(r)
    try:
        s = _row_setup(cat, cal, r)
    except UsageError as e:
        res.flags.append(f"cannot predict: {e}")
        return res
    res.backend = s.backend
    n = max(1, r.concurrency)
    if r.metric == "prefill_tps":
        t = r.input_len or 512
        e = s.prefill(t, r.depth)
        res.ceiling, res.predicted = e.rate(t)
    elif r.metric == "decode_tps":
        ctx = r.depth + (r.output_len // 2 if r.test.startswith("tg") else 0)
        e = s.decode(ctx)
        res.ceiling, res.predicted = e.rate()
    elif r.metric in ("output_tps", "ttft_median", "ttft_p99", "tpot_median"):
        prompt, output = r.input_len, r.output_len
        if not prompt and not output:
            res.flags.append("lengths unknown: predicted as pure decode at a short context")
            d = s.decode(256, n) if s.kind == "batching" else s.decode(256)
            rate = (n / d.ceiling, n / d.estimate) if s.kind == "batching" else d.rate()
            res.ceiling, res.predicted = rate if r.metric == "output_tps" else (None, None)
        else:
            p = s.serve(n, prompt, output)
            if r.metric == "output_tps":
                res.ceiling, res.predicted = p.throughput
            elif r.metric == "tpot_median":
                res.ceiling, res.predicted = p.tpot_s.ceiling * 1000, p.tpot_s.estimate * 1000
            elif r.metric == "ttft_median":
                res.ceiling, res.predicted = p.ttft_s.ceiling * 1000, p.ttft_s.estimate * 1000
            else:  # p99 of a closed loop: near the worst case, a request behind every other prefill
                pf = s.prefill(prompt)
                res.ceiling = (n * pf.ceiling + p.tpot_s.ceiling) * 1000
                res.predicted = (n * pf.estimate + p.tpot_s.estimate) * 1000
    else:
        res.flags.append(f"cannot predict: unknown metric '{r.metric}'")
        return res
    f = s.fit(r.depth + r.input_len + r.output_len + 1, n)
    if not f.fits:
        res.flags.append(f"hybrid offload: {f.gpu_layers} of {s.model.layers} layers fit on the GPU")
    usual = cal.usual_ratio.get(s.backend, {}).get(r.group)
    ratio = res.measured_over_ceiling
    if usual and ratio is not None and ratio < BOTTLENECK_SHARE * usual:
        res.flags.append(
            f"likely software bottleneck: measured is {ratio:.0%} of the ceiling where {s.backend} usually "
            f"reaches {usual:.0%} on {r.group}; not a hardware limit"
        )
    return res


def calibration_work(cat: Catalog, cal: Calibration):  # type: ignore[no-untyped-def]
    """What calibration fits for a row: (backend, group, features, measured time, ceiling time)."""

    def work(r: Row) -> tuple[str, str, list[float], float, float] | None:
        try:
            s = _row_setup(cat, cal, r)
        except UsageError:
            return None
        if not s.fit(r.depth + r.input_len + r.output_len + 1).fits:
            return None
        if r.metric == "decode_tps":
            ctx = r.depth + (r.output_len // 2 if r.test.startswith("tg") else 0)
            c = rf.decode_cost(s.model, s.hw, s.quant, 1, ctx, s.backend)
            return s.backend, "decode", [c.t_weights, c.t_kv], 1 / r.value, c.ceiling
        if r.metric == "prefill_tps" or (r.metric == "ttft_median" and r.concurrency == 1 and r.input_len):
            t = r.input_len or 512
            c = rf.prefill_cost(s.model, s.hw, s.quant, t, r.depth, s.backend)
            measured = t / r.value if r.metric == "prefill_tps" else r.value / 1000
            feats = [c.t_compute - c.t_attention, c.t_attention, c.t_weights + c.t_kv]
            return s.backend, "prefill", feats, measured, c.ceiling
        return None

    return work


def fit_calibration(cat: Catalog, rows: list[Row], command: str) -> Calibration:
    return calibrate(rows, calibration_work(cat, Calibration({}, {})), command)


@dataclass(slots=True)
class AgainstReport:
    results: list[RowResult]
    summary: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.results], "summary": self.summary}


def _mape(results: list[RowResult]) -> dict[str, Any]:
    errs = [abs(r.error_pct) for r in results if r.error_pct is not None]
    return {"n": len(errs), "median_abs_error_pct": statistics.median(errs) if errs else None}


def faster_box_check(results: list[RowResult], min_ratio: float = 1.5) -> dict[str, Any]:
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
                if any(f.startswith(("likely software", "cannot")) for f in a.flags + b.flags):
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
    return {"pairs": pairs, "right": right, "wrong": wrong}


def against(cat: Catalog, cal: Calibration, rows: list[Row]) -> AgainstReport:
    """Predict every row. The summary splits rows calibration fitted ("train") from rows it never saw
    ("holdout": held-out models, and metrics that are never fitted, such as serving under load)."""
    results = [predict_row(cat, cal, r) for r in rows]
    work = calibration_work(cat, cal)
    fitted = {id(r) for r in results if r.row.model not in cal.holdout_models and work(r.row) is not None}
    summary: dict[str, Any] = {}
    for split, keep in (("train", lambda r: id(r) in fitted),
                        ("holdout", lambda r: id(r) not in fitted),
                        ("all", lambda r: True)):
        sel = [r for r in results if keep(r)]
        summary[split] = {
            g: _mape([r for r in sel if r.row.group == g]) for g in ("decode", "prefill", "serve")
        }
        summary[split]["serve_throughput"] = _mape([r for r in sel if r.row.metric == "output_tps"])
    summary["faster_box"] = faster_box_check(results)
    summary["flagged"] = sum(1 for r in results if any(f.startswith("likely software") for f in r.flags))
    summary["unpredicted"] = sum(1 for r in results if r.predicted is None)
    return AgainstReport(results, summary)
