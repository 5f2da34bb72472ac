"""The calibration fit: a backend's constants from the rows it can use, per era of engine builds and pulled toward
its family's, anchored on the user's own runs, with bands from leave-one-source-out residuals."""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat
from multiprocessing import get_context
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from . import roofline as rf
from .bands import ARCH_KEY, BAND_MIN_N, DRIFT_PRIOR, ERA_MIN_BOXES, KIND_MIN_ROWS, MOE_KEY, YEAR_KEY, make_band
from .calibration import Calibration, era_for
from .kind import Kind
from .priors import backend_prior, family, prior
from .solver import ANCHOR_PRIOR_WEIGHT, PRIOR_WEIGHT, fit_constants
from .measured import METRICS, Row
from .rows import RowResult, Valuer, band_metric, context, predict_row, row_setup, row_setup_args, row_valuer
from .setup import Setup
from .specs import Catalog

#: Metrics the fit uses (a p99 is a tail, not what the constants describe).
FITTED_METRICS = METRICS - {"ttft_p99"}


@dataclass(slots=True)
class Fittable:
    row: Row
    backend: str
    value: Valuer
    source: str
    era: str = ""  # Row.era: the year of its engine build, "" when undated
    arch: str = ""  # HardwareSpec.arch of its box: the hardware generation
    moe: bool = False  # a mixture-of-experts model


def fittable_rows(cat: Catalog, rows: list[Row], why: Counter[str] | None = None) -> list[Fittable]:
    """Rows the fit can use: a known box, model, format and engine, a fitted metric, and no hybrid offload. Rows
    of one setup share it (its memoised costs, and one closed loop per set of constants: Setup.serve_once).
    ``why``: counts, by reason, the rows it cannot use."""
    out = []
    blank = Calibration({}, {})
    setups: dict[tuple[tuple[str, Any], ...], Setup | str] = {}
    left: Counter[str] = why if why is not None else Counter()
    for r in rows:
        if r.metric not in FITTED_METRICS or r.value <= 0:
            left[f"a metric the fit does not read ({r.metric})" if r.value > 0 else "a value of 0 or less"] += 1
            continue
        key = tuple(row_setup_args(r).items())
        if key not in setups:
            try:
                setups[key] = row_setup(cat, blank, r)
            except UsageError as e:
                setups[key] = str(e)
        s = setups[key]
        if isinstance(s, str) or not s.fit(context(r) + 1, max(1, r.concurrency)).fits:
            left[s if isinstance(s, str) else f"{r.model} does not fit {r.hardware} at its context"] += 1
            continue
        v = row_valuer(s, r, [])
        if v is not None:
            out.append(Fittable(r, s.backend, v, r.raw.get("source", ""), r.era, s.hw.arch, s.model.experts > 0))
        else:
            left["a test the fit does not read"] += 1
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
class BackendFit:
    """Constants per backend, the newest era's (what a prediction uses unless told a version), every era's, the
    usual measured/ceiling ratios, and the families' prior fits."""

    effs: dict[str, rf.Efficiency]
    usual: dict[str, dict[str, float]]
    families: dict[str, rf.Efficiency]
    eras: dict[str, dict[str, rf.Efficiency]]


def _year_boxes(its: list[Fittable]) -> dict[str, set[str]]:
    """The boxes a backend's dated rows measured, per year of builds."""
    boxes: dict[str, set[str]] = {}
    for it in its:
        if it.era:
            boxes.setdefault(it.era, set()).add(it.row.hardware)
    return boxes


def _eras(its: list[Fittable]) -> list[tuple[str, set[str]]]:
    """The eras of a backend's dated rows: consecutive years grouped until each group's rows span ERA_MIN_BOXES
    boxes, named "2025" or "2025-2026", each with its years."""
    boxes = _year_boxes(its)
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


def _fit_backends(items: list[Fittable]) -> BackendFit:
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
    return BackendFit(effs, usual, fam, eras)


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
    """Per backend, the deepest context (rows.context: depth, prompt and output) and the highest concurrency its
    fitted rows measured, how many of them each hardware generation has (``arch_`` + HardwareSpec.arch), how
    many boxes each year of builds has rows of (``boxes_`` + year), and how many are of MoE models (MOE_KEY)."""
    out: dict[str, dict[str, int]] = {}
    by: dict[str, list[Fittable]] = {}
    for it in items:
        r = out.setdefault(it.backend, {"max_depth": 0, "max_concurrency": 1, MOE_KEY: 0})
        r[MOE_KEY] += it.moe
        r["max_depth"] = max(r["max_depth"], context(it.row))
        r["max_concurrency"] = max(r["max_concurrency"], it.row.concurrency)
        if it.arch:
            r[ARCH_KEY + it.arch] = r.get(ARCH_KEY + it.arch, 0) + 1
        by.setdefault(it.backend, []).append(it)
    for backend, its in by.items():  # the count that decides its eras (_eras), so a thin year widens its band
        out[backend].update({YEAR_KEY + year: len(hw) for year, hw in _year_boxes(its).items()})
    return out


def _drift(fit: BackendFit, items: list[Fittable]) -> float:
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


def _fold(cat: Catalog, kept: list[Row], held: list[Row], key: str, bands: bool) -> list[RowResult]:
    """One fold: the held-out rows predicted by a fit on the kept ones. bands=True: the fold with bands of its own,
    cross-validated on its kept rows alone (nested), so whether a held-out row falls inside its band is never
    decided by that row's own source."""
    cal = fit_calibration(cat, kept, "", bands=True) if bands else _calibration(cat, kept, "")
    cal.origin = f"all but {key}"
    return [predict_row(cat, cal, r) for r in held]


def _in_a_fold() -> None:
    global _FOLD_PROCESS
    _FOLD_PROCESS = True


#: True in a process that fits a fold: its own folds (bands=True nests them) run one after another there.
_FOLD_PROCESS = False


def fold_processes(folds: int) -> int:
    """Processes to fit ``folds`` folds in: one per core this process may use, at most one per fold. The fit is
    pure Python, so threads would take turns; the folds are independent, so each process's result is what one
    process fitting them in turn gets, to the bit."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 1 if _FOLD_PROCESS else max(1, min(folds, cores))


def cross_validate(cat: Catalog, rows: list[Row], bands: bool = False, fold: Callable[[Row], str] = _source,
                   meanwhile: Callable[[], object] = lambda: None) -> list[RowResult]:
    """Leave one source out (``fold``: what a fold leaves out): every source's rows predicted by a fit on all the
    other sources, the folds fitted side by side on the cores there are (``fold_processes``). Each fold builds
    its own fittable rows from the rows it keeps, so nothing the full fit built (setups, memoised costs, the
    constants its valuers were last evaluated at) reaches a fold. ``meanwhile`` runs in this process while the
    folds' processes start and fit (first, where there are none)."""
    keys = sorted({fold(r) for r in rows})
    kept = [[r for r in rows if fold(r) != key] for key in keys]
    held = [[r for r in rows if fold(r) == key] for key in keys]
    procs = fold_processes(len(keys))
    if procs == 1:
        meanwhile()
        parts = list(map(_fold, repeat(cat), kept, held, keys, repeat(bands)))
    else:
        # spawned, not forked: a fork copies whatever lock another thread of this process held at that moment
        with ProcessPoolExecutor(procs, mp_context=get_context("spawn"), initializer=_in_a_fold) as pool:
            folds = pool.map(_fold, repeat(cat), kept, held, keys, repeat(bands))  # every fold submitted
            try:
                meanwhile()
            except BaseException:
                pool.shutdown(cancel_futures=True)  # what has not started will not
                raise
            parts = list(folds)
    return [res for part in parts for res in part]


def fit_calibration(cat: Catalog, rows: list[Row], command: str, bands: bool = True) -> Calibration:
    """The fit on every row, and (``bands``) its bands: leave-one-source-out residuals per backend and metric.
    Rows of a single source are held out a box at a time instead (each box predicted by a fit on the others). The
    fit on every row runs while the folds' processes start and fit theirs (``cross_validate``'s ``meanwhile``)."""
    if not bands:
        return _calibration(cat, rows, "fitted", command)
    fold = _source if len({_source(r) for r in rows}) > 1 else (lambda r: r.hardware)
    full: list[Calibration] = []
    held_out = cross_validate(cat, rows, fold=fold,
                              meanwhile=lambda: full.append(_calibration(cat, rows, "fitted", command)))
    cal = full[0]
    devs: dict[str, dict[str, list[float]]] = {}
    kinds: dict[str, dict[str, list[float]]] = {}
    for res in held_out:
        if res.backend and res.deviation_pct is not None:
            devs.setdefault(res.backend, {}).setdefault(band_metric(res.row), []).append(res.deviation_pct)
            if res.kind is not None:
                kinds.setdefault(res.kind.key, {}).setdefault(band_metric(res.row), []).append(res.deviation_pct)
    for backend, per in devs.items():
        for metric, e in per.items():
            b = make_band(e)
            if b is not None:
                cal.bands.setdefault(backend, {})[metric] = b
    for key, per in kinds.items():
        for metric, e in per.items():
            if len(e) >= KIND_MIN_ROWS and (b := make_band(e)) is not None:
                cal.kind_bands.setdefault(key, {})[metric] = b
    cal.borrow = borrow_factor(kinds, cal)
    return cal


def borrow_factor(kinds: dict[str, dict[str, list[float]]], cal: Calibration) -> float:
    """How much wider than the widest neighbour's band a kind's own held-out rows fell, pooled over the kinds that
    have a band of their own (the share of the borrowed band that BAND_QUANTILE of their rows stayed within; at
    least 1): a borrowed band is scaled by it, so borrowing is tested on the kinds that need not borrow."""
    ratios: list[float] = []
    for key, per in kinds.items():
        for metric, e in per.items():
            if len(e) < KIND_MIN_ROWS:
                continue
            widest = cal.neighbour_band(Kind.parse(key), metric)
            if widest is not None and widest[1].pct > 0:
                ratios += [abs(x) / widest[1].pct * 100 for x in e]
    b = make_band(ratios) if len(ratios) >= KIND_MIN_ROWS else None
    return max(1.0, b.pct / 100) if b is not None else 1.0
