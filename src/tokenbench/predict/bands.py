"""How far to trust a prediction: the band held-out measurements of a backend and metric lay within (``Band``,
from leave-one-source-out residuals: ``make_band``), and how it widens where a prediction reaches beyond the rows
its backend was fitted on (``Extrapolation``: newer or older builds, deeper context, higher concurrency, another
hardware generation, few rows; ``widen``)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

#: Share of a backend's cross-validated deviations (measured from predicted) a band covers.
BAND_QUANTILE = 0.8
#: Fewer cross-validated residuals than this give no band.
BAND_MIN_N = 3


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
    #: another kind's band (or the backend's), taken because this kind had too few held-out rows: it states at least
    #: BAND_QUANTILE, not BAND_QUANTILE (the widest neighbour's, widened for what no row of this kind measured)
    borrowed: bool = False

    @property
    def wide(self) -> bool:
        """Over WIDE_BAND_PCT: flagged wherever it is printed."""
        return self.pct > WIDE_BAND_PCT


#: How far a prediction may drift per year of engine builds newer than any row its backend was fitted on, as a log
#: error, when the data cannot tell (no backend with rows of two eras): llama.cpp CUDA decode was 30-45% faster in
#: 2025-2026 builds than the 2024 builds' fit predicts (llama.cpp's CUDA scoreboard, discussion 15013, and
#: llama-bench on one H100 SXM, h100-lcpp in data/published-current.csv), about a year apart: log(1.35). The
#: shipped data and the split by time's pre-2025 side both hold CUDA and Metal rows of 2023 and 2024 builds, so
#: both measure their drift ([meta] drift, fitting._drift), and it is the least a year of builds newer than any row
#: widens by (``drift_per_year``): the shipped rows' 2023 and 2024 eras drift about 6% a year, far under what the
#: 2025 builds brought, and a split by time widened by that alone held 33% of the 2025 consumer-GPU rows (4 of 12)
#: within bands stated for 80%.
DRIFT_PRIOR = math.log(1.35)


def drift_per_year(measured: float) -> float:
    """The log error a year of builds newer (or older) than any row adds: what the data measured, at least
    DRIFT_PRIOR."""
    return max(measured, DRIFT_PRIOR)
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
#: A kind of row (kind.py: backend, box class, one stream or under load, dense or MoE) has a band of its own from
#: this many held-out rows of one metric on; with fewer it borrows the widest band of the kinds one step from it.
#: Chosen on nested residuals of the shipped rows (each fold's bands from the other sources alone), leave one source
#: out and the split by time: from 20 every kind of 10 held-out rows or more covered within 10 points of 80% (its
#: own band) or at least 70% (a borrowed one) in both; from 12, Apple's Metal rows covered 90.4% held out (47 of
#: 52), from 10 Strix Halo's Vulkan MoE rows 70% (32 of 46): a quantile of fewer rows moves with each source.
KIND_MIN_ROWS = 20
#: A borrowed band is widened by this log error, for what no held-out row of its own kind measured: on those nested
#: residuals log(1.25) left the A30's MoE rows (another box class's dense band borrowed) at 64%, log(1.35) at 71%.
BORROW_TERM = math.log(1.35)
#: A MoE model predicted by a backend fitted on dense models only widens by this log error: a fit on the shipped
#: rows' dense models alone predicted their 120 MoE rows within 56% for 80% of them, against 25% with the MoE rows
#: in the fit; 0.38 is the difference in quadrature (expert routing, per-expert kernels, which dense rows never ran).
MOE_TERM = 0.38
#: Calibration.reach's key counting a backend's rows of MoE models.
MOE_KEY = "moe_rows"
#: A band wider than this (percent) is flagged "wide" wherever it is printed: a spread over half the estimate, which
#: the project's rule for published numbers flags (a measured rate's spread over half its mean is "unstable"). The
#: estimate then gives an order of magnitude, not a value; past 100% a "±" read around it would reach below zero.
WIDE_BAND_PCT = 50.0


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


def counts_rows_by(reach: dict[str, int], key: str) -> bool:
    """Whether a backend's reach counts its rows by ``key`` (a calibration file of an older tokenbench does not)."""
    return any(k.startswith(key) for k in reach)


def widen(b: Band, terms: list[tuple[float, str]]) -> Band:
    """A band with extra log-error terms added in quadrature (independent sources of error), each named."""
    terms = [(t, why) for t, why in terms if t > 0]
    if not terms:
        return b
    z = math.sqrt(math.log1p(b.pct / 100) ** 2 + sum(t * t for t, _ in terms))
    return Band(math.expm1(z) * 100, b.median_pct, b.n, b.widened + tuple(why for _, why in terms), b.borrowed)


def make_band(deviations_pct: list[float]) -> Band | None:
    """The band of held-out rows' deviations (RowResult.deviation_pct); None with fewer than BAND_MIN_N."""
    if len(deviations_pct) < BAND_MIN_N:
        return None
    e = sorted(abs(x) for x in deviations_pct)
    idx = min(len(e) - 1, math.ceil(BAND_QUANTILE * len(e)) - 1)
    return Band(e[idx], statistics.median(e), len(e))


