"""A box in a buyer's ranking: what it is asked to serve (``Workload``), its figures and where they come from
(``Candidate``: measured, or PREDICTED with a band), how it stands against the SLOs (met, missed, or unknown where
no figure stands behind one) and its price. ``recommend`` ranks them; ``boxes`` predicts the catalog's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .layout import apart, plural
from .money import DEFAULT_CURRENCY
from .pricing import Pricing
from .slo import duration_text

if TYPE_CHECKING:
    from .predict.session import SessionShape
    from .predict.banding import Span


@dataclass(slots=True)
class Workload:
    """What the boxes are ranked for: ``agents`` agents sending ``input_len``/``output_len`` requests, or agent
    sessions (``sessions``: their shape, the prefix cache on), under the SLOs given; llama.cpp's slots (``parallel``,
    None: its own default where memory holds them)."""

    model: str
    agents: int
    input_len: int
    output_len: int
    ttft_p99_ms: float | None = None
    tpot_ms: float | None = None
    currency: str = DEFAULT_CURRENCY
    sessions: SessionShape | None = None
    parallel: int | None = None

    @property
    def slo_given(self) -> bool:
        return self.ttft_p99_ms is not None or self.tpot_ms is not None


@dataclass(slots=True)
class SloMiss:
    """One SLO a box missed: its (predicted or measured) value against the limit. ``bound``: the value is a bound
    below the figure the SLO names (a run with a median TTFT and no p99: the p99 is at least the median)."""

    slo: str  # "TTFT p99" | "TPOT"
    value_ms: float
    limit_ms: float
    bound: bool = False

    @property
    def relative(self) -> float:
        """How far over the limit, as a share of it (0.3: 30% over)."""
        return self.value_ms / self.limit_ms - 1


@dataclass(slots=True)
class Candidate:
    box: str
    setup: str  # engine and weights (and llama.cpp's slots)
    source: str  # measured | predicted
    throughput: float | None = None
    ttft_p99_ms: float | None = None
    tpot_ms: float | None = None
    cost_per_mtok: float | None = None
    excluded: str | None = None
    reason: str | None = None  # what kind of reason excluded it, the key the table groups exclusions by
    notes: list[str] = field(default_factory=list)
    misses: list[SloMiss] = field(default_factory=list)  # every SLO it missed, the worst first
    memory_gb: tuple[float, float] | None = None  # (needed, usable) when it does not fit
    # capacity mode: the most agents it serves within the SLOs, whether that is only a lower bound (every agent
    # count tried met them), its price per agent-hour there, and the boxes a team of Workload.agents needs
    capacity: int | None = None
    at_least: bool = False
    cost_per_agent_hour: float | None = None
    boxes: int | None = None
    kv: str = ""  # predicted: the KV cache format it assumes (fp8, auto: the model's dtype, q8_0); measured: ""
    ttft_p50_ms: float | None = None  # the median TTFT, where known: a p99 is never below it
    unknown: list[str] = field(default_factory=list)  # SLOs no figure of it stands behind, each with why
    priced: bool = False  # the user gave its price (--price, --owned): always listed, whatever its verdict
    calibrated: bool = True  # predicted: some measurement of its backend stands behind the estimate
    bands: dict[str, float] = field(default_factory=dict)  # predicted: metric -> band, % of the estimate
    #: predicted: metric -> the figure's physical limit (throughput's ceiling in tok/s, TTFT p99's and TPOT's floor
    #: in ms), where its band's fast end is held
    limits: dict[str, float] = field(default_factory=dict)
    session_s: float | None = None  # sessions: one session's time at its capacity (or at ``agents``)
    stored: bool = False  # a stored run (--runs: measured, imported or a saved prediction), not a catalog box
    #: predicted capacity: the agents served were its figures at the slow end of their bands, and at the fast end
    #: (and whether every count searched met them there)
    capacity_band: tuple[int, int, bool] | None = None
    #: a stored run measured with a model of another name than the one ranked: that model's name
    other_model: str | None = None
    #: predicted: the agents its figures are at (its capacity, or one agent where it serves none, or those asked)
    at_agents: int | None = None

    def exclude(self, reason: str, message: str) -> None:
        """Out of the ranking for the first reason found: a box that does not fit is not also 'no price'."""
        if self.excluded is None:
            self.reason, self.excluded = reason, message

    def memory_text(self) -> str:
        """What a box that does not fit needs against what it has, in the decimals that tell them apart: "needs
        24.2 GiB of 24.0 GiB"."""
        assert self.memory_gb is not None
        need, usable = apart(*self.memory_gb)
        return f"needs {need} GiB of {usable} GiB"

    @property
    def mark(self) -> str:
        """How its figures' source is named: measured, PREDICTED, or PREDICTED, UNCALIBRATED."""
        if self.source != "predicted":
            return self.source
        return "PREDICTED" if self.calibrated else "PREDICTED, UNCALIBRATED"


#: Why a run's TTFT p99 is not known, by what the run is.
NO_P99 = "the run stored no TTFT p99"
NO_P99_PREDICTED = "a stored prediction keeps the median TTFT, not its p99"


def judge(c: Candidate, w: Workload, why_unknown: str = NO_P99) -> None:
    """Every SLO the candidate misses (worst first), or cannot be judged on (``unknown``: no figure for it, and
    no bound that already misses); out of the ranking for the first miss, TTFT before TPOT, else for an unknown."""
    c.misses.clear()
    c.unknown.clear()
    for slo, value, limit in (("TTFT p99", c.ttft_p99_ms, w.ttft_p99_ms), ("TPOT", c.tpot_ms, w.tpot_ms)):
        if limit is None:
            continue
        if value is not None:
            if value > limit:
                c.misses.append(SloMiss(slo, value, limit))
        elif slo == "TTFT p99" and c.ttft_p50_ms is not None and c.ttft_p50_ms > limit:
            c.misses.append(SloMiss(slo, c.ttft_p50_ms, limit, bound=True))  # a p99 is never below the median
        else:
            c.unknown.append(f"{slo} unknown: {why_unknown if slo == 'TTFT p99' else 'the run stored no TPOT'}")
    if c.misses:
        m = c.misses[0]

        def ms(v: float) -> str:
            return f"{v:,.0f} ms" if m.slo == "TTFT p99" else f"{v:.1f} ms"

        said = f"its median alone is {ms(m.value_ms)}" if m.bound else ms(m.value_ms)
        c.exclude(f"misses {m.slo}", f"misses {m.slo}: {said} > {ms(m.limit_ms)}")
    elif c.unknown:
        c.exclude("SLO unknown", "; ".join(c.unknown))
    c.misses.sort(key=lambda m: -m.relative)


def meets(c: Candidate, w: Workload) -> bool | None:
    """Whether the candidate's current figures meet every SLO given: None where a figure is missing and no bound
    decides it (a verdict that cannot be said is never a pass). The same rules as ``judge``."""
    unknown = False
    for value, limit, floor in ((c.ttft_p99_ms, w.ttft_p99_ms, c.ttft_p50_ms), (c.tpot_ms, w.tpot_ms, None)):
        if limit is None:
            continue
        if value is not None and value > limit or value is None and floor is not None and floor > limit:
            return False
        unknown = unknown or value is None
    return None if unknown else True


def price(c: Candidate, pricing: Pricing | None, agents: int) -> None:
    """The candidate priced: per million output tokens at its throughput, and at a capacity per agent-hour and in
    boxes for ``agents``."""
    import math

    if pricing is None:
        return
    c.cost_per_mtok = pricing.per_mtok(c.throughput)
    if c.capacity:
        c.cost_per_agent_hour = pricing.effective_hourly() / c.capacity
        c.boxes = math.ceil(agents / c.capacity)


def figure_span(c: Candidate, metric: str) -> Span | None:
    """A predicted figure's band, its fast end held at the figure's physical limit (``limits``: a rate's ceiling,
    a time's floor); None without a band. Its ``text()`` is the band as printed."""
    from .predict.banding import span

    b = c.bands.get(metric)
    if b is None:
        return None
    figure = {"throughput": c.throughput, "ttft": c.ttft_p99_ms or c.ttft_p50_ms, "tpot": c.tpot_ms}[metric]
    return span(b, figure, c.limits.get(metric), metric == "throughput")


def figures_text(c: Candidate, currency: str) -> str:
    """A candidate's figures in one line, each with its unit and (predicted) band: what a priced box shows when it
    is out of the ranking."""
    def band(metric: str) -> str:
        sp = figure_span(c, metric)
        return f" {sp.text()}" if sp is not None else ""

    parts = []
    if c.capacity is not None:
        parts.append(f"{'>=' if c.at_least else ''}{c.capacity} agents")
    elif c.at_agents is not None:  # a box that serves none within the SLOs is said at the count it was read at
        parts.append(f"at {plural(c.at_agents, 'agent')}")
    if c.throughput:
        parts.append(f"{c.throughput:,.0f} tok/s{band('throughput')}")
    if c.ttft_p99_ms is not None:
        parts.append(f"TTFT p99 {duration_text(c.ttft_p99_ms)}{band('ttft')}")
    elif c.ttft_p50_ms is not None:
        parts.append(f"TTFT p50 {duration_text(c.ttft_p50_ms)}{band('ttft')}")
    if c.tpot_ms is not None:
        parts.append(f"TPOT {c.tpot_ms:.1f} ms{band('tpot')}")
    if c.session_s is not None:
        parts.append(f"session {duration_text(c.session_s * 1000)}")
    if c.cost_per_agent_hour:
        parts.append(f"{currency} {c.cost_per_agent_hour:.3f}/agent-hour")
    if c.cost_per_mtok:
        parts.append(f"{currency} {c.cost_per_mtok:.2f}/M output")
    return ", ".join(parts) or "no figures"
