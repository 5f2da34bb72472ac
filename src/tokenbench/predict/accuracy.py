"""How far predictions fall from measured rows: error statistics, the faster-box check, and ``predict --against``."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..layout import figure
from .calibration import Calibration
from .fitting import fittable_rows
from .measured import Row
from .rows import RowResult, band_metric, predict_row
from .specs import Catalog


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
    def key(r: RowResult) -> tuple[Any, ...]:
        return (r.row.model, r.row.weights, r.row.test, r.row.depth, r.row.concurrency, r.row.input_len,
                r.row.output_len, r.row.metric)

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


@dataclass(slots=True)
class BeforeAfter:
    """The same rows predicted by two calibrations: the packaged one (before) and the user's (after)."""

    before: AgainstReport
    after: AgainstReport
    origin: str  # where the after calibration came from

    def to_json(self) -> dict[str, Any]:
        return {"calibration": self.origin, "before": self.before.to_json(), "after": self.after.to_json()}


def before_after(cat: Catalog, before: Calibration, after: Calibration, rows: list[Row]) -> BeforeAfter:
    return BeforeAfter(against(cat, before, rows), against(cat, after, rows), after.origin)


def before_after_table(ba: BeforeAfter) -> tuple[list[str], list[list[str]]]:
    """Each row measured, then predicted before and after, with each prediction's error (percent of measured)."""
    head = ["Host", "Model", "Test", "Depth", "Conc.", "Metric", "Measured", "Before", "Error %", "After",
            "Error %"]
    rows = []
    for b, a in zip(ba.before.results, ba.after.results):
        r = b.row
        rows.append([r.raw.get("host", r.hardware), r.model, r.test, str(r.depth), str(r.concurrency), r.metric,
                     f"{figure(r.value)} {r.unit}", figure(b.predicted), figure(b.error_pct, 0), figure(a.predicted),
                     figure(a.error_pct, 0)])
    return head, rows


def before_after_lines(ba: BeforeAfter) -> list[str]:
    """Median absolute error per group of rows, before and after, and what moved."""
    out = []
    for name, rep in (("before (packaged calibration)", ba.before), (f"after ({ba.origin})", ba.after)):
        parts = [f"{g} {d['median_abs_error_pct']:.1f}% (n={d['n']})" for g in ("decode", "prefill", "serve",
                                                                                  "serve_throughput")
                 if (d := rep.summary["all"][g])["n"]]
        out.append(f"median |error| {name}: " + (", ".join(parts) or "no row predicted"))
    closer = sum(1 for b, a in zip(ba.before.results, ba.after.results)
                 if b.error_pct is not None and a.error_pct is not None and abs(a.error_pct) < abs(b.error_pct))
    n = sum(1 for b in ba.before.results if b.error_pct is not None)
    out.append(f"{closer} of {n} rows predicted closer after")
    return out
