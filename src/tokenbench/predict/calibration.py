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
a backend with two rows keeps the prior for what its rows cannot tell; ``solver.py``). The prior is hierarchical:
one fit on all the rows of an engine family (every llama.cpp backend together) starts from the physical priors
(``priors.py``), and each backend starts from that family fit with its own literature values (LITERATURE) on top;
the power constant is the family's alone. Rows that need hybrid offload are not fitted (they test the offload
model, not the backend); which rows a fit uses, and per era of builds, is ``fitting.py``'s.

How sure a prediction is comes from leave-one-source-out cross-validation: every source is predicted by a fit
on all the others, and the residuals per backend and metric give the band a prediction shows, widened where it
reaches beyond its rows (``bands.py``). A backend that no row stands behind is UNCALIBRATED: its priors (its
family's fit where there is one) are shown as such.

This module holds the result, ``Calibration``: the constants per backend, era and family, the bands and the reach
of the rows behind them, looked up for a prediction and read and written as the TOML file tokenbench ships.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..layout import plural
from .bands import (ARCH_KEY, BORROW_TERM, CONCURRENCY_TERM, DEPTH_TERM, DRIFT_PRIOR, ERA_MIN_BOXES, FEW_ROWS,
                    FEW_ROWS_TERM, MOE_KEY, MOE_TERM, YEAR_KEY, Band, Extrapolation, counts_rows_by,
                    drift_per_year, widen)
from .kind import Kind
from .priors import backend_prior, family, prior
from .roofline import Efficiency, PARAM_BOUNDS
from ..jsontext import finite_number


def era_for(eras: Iterable[str], year: str) -> str | None:
    """The era (named "2025" or "2025-2026": the years of builds one fit stands for) that builds of ``year`` fall
    in: the newest one starting at or before it; None when every era starts after it."""
    older = [k for k in eras if k and k[:4] <= year[:4]]
    return max(older, key=lambda k: k[:4]) if older else None


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
    #: kind.Kind.key -> metric -> band, for the kinds of KIND_MIN_ROWS held-out rows or more (kind.py)
    kind_bands: dict[str, dict[str, Band]] = field(default_factory=dict)
    borrow: float = 1.0  # a borrowed band's scale (fitting.borrow_factor)

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
             fallback: Band | None = None, kind: Kind | None = None) -> Band | None:
        """The cross-validated band of a backend's metric (``fallback`` where there is none), widened for what
        ``reach`` asks beyond its rows. With ``kind`` (and a calibration that keeps bands per kind) its kind's band
        (``kind_band``), widened for the builds, context and concurrency beyond the backend's rows and for a MoE
        model its backend saw none of: the kind's own held-out rows already hold what the box and the thin data
        cost."""
        if kind is not None and self.kind_bands:
            b = self.kind_band(kind, metric, fallback)
            if b is None or reach is None:
                return b
            return widen(b, self.extrapolation_terms(backend, metric, reach, thin=False) + self.moe_terms(kind))
        b = self.bands.get(backend, {}).get(metric) or fallback
        if b is None or reach is None:
            return b
        return widen(b, self.extrapolation_terms(backend, metric, reach))

    def neighbour_band(self, kind: Kind, metric: str, steps: int = 1) -> tuple[Kind, Band] | None:
        """The widest band of the kinds ``steps`` steps from ``kind`` (another backend, box class, operating point
        or model class) that have one of their own, and which kind it is."""
        near = [(k, b) for key, per in self.kind_bands.items() if (b := per.get(metric)) is not None
                and (k := Kind.parse(key)).step(kind) == steps]
        return max(near, key=lambda kb: kb[1].pct, default=None)

    def band_source(self, kind: Kind, metric: str) -> tuple[str, Band, bool] | None:
        """Whose held-out rows a kind's band comes from, their band, and whether it is borrowed: the kind's own
        (KIND_MIN_ROWS rows or more), else the widest of the kinds one step from it, else its backend's, else the
        widest of its engine family's backends, else the widest of the kinds two steps from it (a MoE model on a
        backend whose rows of that metric are all of dense models: another backend's, of dense models); None where
        none has one."""
        own = self.kind_bands.get(kind.key, {}).get(metric)
        if own is not None:
            return kind.words(), own, False
        near = self.neighbour_band(kind, metric)
        if near is not None:
            return near[0].words(), near[1], True
        if (b := self.bands.get(kind.backend, {}).get(metric)) is not None:
            return kind.backend, b, True
        kin = [(bk, b) for bk, per in self.bands.items() if family(bk) == family(kind.backend)
               and (b := per.get(metric)) is not None]
        if kin:
            bk, b = max(kin, key=lambda x: x[1].pct)
            return bk, b, True
        far = self.neighbour_band(kind, metric, steps=2)
        return (far[0].words(), far[1], True) if far is not None else None

    def kind_band(self, kind: Kind, metric: str, fallback: Band | None = None) -> Band | None:
        """``kind``'s band (``band_source``); a borrowed one scaled by ``borrow`` and widened by BORROW_TERM for
        what no held-out row of its own kind measured, and marked borrowed; else ``fallback``."""
        found = self.band_source(kind, metric)
        if found is None:
            return fallback
        whose, b, borrowed = found
        if not borrowed:
            return b
        return widen(Band(b.pct * self.borrow, b.median_pct, b.n, (), True),
                     [(BORROW_TERM, f"too few rows of {kind.words()} of its own: {whose}'s band, borrowed")])

    def moe_terms(self, kind: Kind) -> list[tuple[float, str]]:
        """A MoE model predicted by a backend whose fitted rows are all of dense models (a calibration that counts
        them: MOE_KEY)."""
        r = self.reach.get(kind.backend) or {}
        if kind.model != "moe" or r.get(MOE_KEY, 1) > 0:
            return []
        return [(MOE_TERM, f"a MoE model, and {kind.backend} fitted on dense models only")]

    def _family_reach(self, backend: str) -> dict[str, int]:
        """An uncalibrated backend's reach: that of the rows of its family's other backends (its priors' data)."""
        fam = [r for b, r in self.reach.items() if family(b) == family(backend)]
        return {k: max(r.get(k, 0) for r in fam) for k in ("max_depth", "max_concurrency")} if fam else {}

    def extrapolation_terms(self, backend: str, metric: str, reach: Extrapolation,
                            thin: bool = True) -> list[tuple[float, str]]:
        """Log-error terms for a prediction beyond a backend's rows, each with its reason: builds newer or older than
        any row, a context or concurrency beyond them, a hardware generation with few rows; ``thin``: also for a
        backend or a year of builds with few rows (what a kind's band, its own or borrowed, already holds: on the
        shipped rows held out, widening a kind's band for them too covered Apple's rows 92% where it states 80%)."""
        terms = []
        per_year = drift_per_year(self.drift)
        if reach.years > 0:
            terms.append((per_year * reach.years, f"engine builds {plural(reach.years, 'year')} newer than any row "
                                                  f"({self.newest_era(backend) or 'undated'})"))
        elif reach.years < 0:
            terms.append((per_year * -reach.years, f"engine builds {plural(-reach.years, 'year')} older than any row "
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
        if thin and e is not None and e.rows < FEW_ROWS:
            terms.append((FEW_ROWS_TERM, f"fitted on {plural(e.rows, 'row')}"))
        elif (e is not None and reach.arch and counts_rows_by(r, ARCH_KEY)
              and r.get(ARCH_KEY + reach.arch, 0) < FEW_ROWS):
            terms.append((FEW_ROWS_TERM, f"{plural(r.get(ARCH_KEY + reach.arch, 0), 'row')} of {reach.arch} boxes"))
        if (thin and e is not None and reach.years == 0 and reach.year and counts_rows_by(r, YEAR_KEY)
                and r.get(YEAR_KEY + reach.year, 0) < ERA_MIN_BOXES):
            terms.append((FEW_ROWS_TERM, f"{reach.year} builds measured on {plural(r.get(YEAR_KEY + reach.year, 0), 'box', 'boxes')}"))
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
            " year of builds measured; moe_rows: its rows of MoE models; [meta] drift: log error per year of builds newer"
            " than any row; borrow: a borrowed band's scale.",
            "# [kinds.\"BACKEND/BOX/POINT/MODEL\"]: the bands of a kind of row (box class, one stream or under load, dense or"
            " MoE) with enough held-out rows of its own; a kind with fewer borrows its neighbours'.",
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
        lines += ["[meta]", f"drift = {self.drift:.4g}", f"borrow = {self.borrow:.4g}", ""]
        for key, by_metric in sorted(self.kind_bands.items()):  # bands per kind of row (kind.py)
            lines.append(f'[kinds."{key}"]')
            lines += [f"band_{metric} = [{kb.pct:.4g}, {kb.median_pct:.4g}, {kb.n}]"
                      for metric, kb in sorted(by_metric.items())]
            lines.append("")
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
            drift, borrow = DRIFT_PRIOR, 1.0
            kinds: dict[str, dict[str, Band]] = {}
            for name, t in data.items():
                if name == "family":
                    families = {f: Efficiency(**{k: v for k, v in _numbers(f"family.{f}", tf).items()
                                                 if k in PARAM_BOUNDS}) for f, tf in t.items()}
                    continue
                if name == "meta":
                    drift, borrow = float(t.get("drift", DRIFT_PRIOR)), float(t.get("borrow", 1.0))
                    continue
                if name == "kinds":
                    kinds = {k: _bands(tk) for k, tk in t.items() if len(k.split("/")) == 4}
                    continue
                if name == "eras":
                    eras = _read_eras(t)
                    continue
                if name == "uncalibrated":
                    bands.update({b: _bands(tb) for b, tb in t.items()})
                    continue
                _numbers(name, t)
                backends[name] = Efficiency(**{k: v for k, v in t.items() if k in names})
                usual[name] = {k[len("usual_"):]: v for k, v in t.items() if k.startswith("usual_")}
                bands[name] = _bands(t)
                sources[name] = list(t.get("sources", []))
                reach[name] = {k: int(v) for k, v in t.items()
                               if k in ("max_depth", "max_concurrency", MOE_KEY) or k.startswith((ARCH_KEY, YEAR_KEY))}
        except (tomllib.TOMLDecodeError, TypeError, AttributeError, ValueError) as e:
            raise UsageError(f"calibration {origin} is not a file tokenbench calibrate wrote ({e})") from None
        for name, newest in backends.items():  # the backend's own section is its newest era
            eras.setdefault(name, {})[newest.era] = newest
        return cls(backends, usual, bands, sources, origin=origin, families=families, eras=eras, reach=reach,
                   drift=drift, kind_bands=kinds, borrow=borrow)

    @classmethod
    def packaged(cls) -> Calibration:
        return cls.from_toml(resources.files("tokenbench").joinpath("data/efficiency.toml").read_text())


def _bands(t: dict[str, Any]) -> dict[str, Band]:
    """A section's ``band_METRIC = [pct, median, n]`` entries."""
    return {k[len("band_"):]: Band(*v) for k, v in t.items() if k.startswith("band_")}


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


def write(cal: Calibration, out: Path) -> None:
    out.write_text(cal.to_toml())
