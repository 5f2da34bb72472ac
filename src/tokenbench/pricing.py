"""What a million output tokens cost at an operating point, rented or owned, against an API price.

Rented: price_per_hour / (tokens/s · 3600) · 10⁶, and a box rented around the clock but busy only some hours
a day costs that much more per token. Owned: the purchase spread over its service life plus power draw times
the electricity price, per hour used. These reproduce the figures the h100-dense write-up published (its rows are in data/published.csv):
EUR 1.79/hour at 75, 441, 684, 1284 tok/s -> EUR 6.63, 1.13, 0.73, 0.39 per million output tokens.

An agent-session level is also priced per finished session (``cost_per_session``): the hours the
level held the box, shared by the sessions it finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .cells import level_label
from .errors import UsageError
from .finding import Code
from .money import DEFAULT_CURRENCY
from .levels import DepthLevel, LevelSummary, ServingLevel, serving

if TYPE_CHECKING:
    from .results import Manifest

HOURS_PER_YEAR = 365 * 24


def cost_per_mtok(price_per_hour: float | None, tokens_per_s: float | None) -> float | None:
    """Price per million tokens at a sustained rate: price_per_hour / (tps * 3600) * 1e6. The one definition of
    the number; everything else reaches it through ``Pricing``."""
    if price_per_hour is None or not tokens_per_s:
        return None
    return price_per_hour / (tokens_per_s * 3600.0) * 1e6


def cost_per_session(price_per_hour: float | None, box_s: float | None, sessions_finished: int) -> float | None:
    """Price of one finished agent session: price_per_hour x box_s / 3600 / sessions_finished, where ``box_s`` is
    the level's measured window (``LevelSummary.duration_s``: the seconds its sessions held the box) and
    ``sessions_finished`` the sessions whose every turn succeeded in it. At concurrency N with sessions back to
    back, the window is about session time x sessions finished / N, so this is about price x session time / N:
    the box-hours of one session when N share the box. A failed or unfinished session's time is paid by the
    finished ones. The one definition of the number; everything else reaches it through ``Pricing``."""
    if price_per_hour is None or not box_s or sessions_finished <= 0:
        return None
    return price_per_hour * box_s / 3600.0 / sessions_finished


@dataclass(slots=True, frozen=True)
class Pricing:
    """An hourly price in ``currency``: rented, or owned (purchase, life, power)."""

    currency: str = DEFAULT_CURRENCY
    price_per_hour: float | None = None
    busy_hours_per_day: float = 24.0
    purchase: float | None = None
    life_years: float = 3.0
    watts: float = 0.0
    kwh_price: float = 0.0
    hours_per_day: float = 24.0  # owned: hours a day the box does this work
    #: owned, priced at each level's own measured draw, not ``watts`` (for_level): what that draw covers, as the
    #: meter said ("whole box", "GPU board"); "" where ``watts`` is the draw
    measures: str = ""

    def __post_init__(self) -> None:
        if (self.price_per_hour is None) == (self.purchase is None):
            raise UsageError("give a rental price (--price-per-hour) or an owned box (--owned --purchase PRICE)")
        for name in ("busy_hours_per_day", "hours_per_day"):
            v = getattr(self, name)
            if not 0 < v <= 24:  # named as the option is (--busy-hours, --hours-per-day)
                flag = "--busy-hours" if name == "busy_hours_per_day" else "--hours-per-day"
                raise UsageError(f"{flag} must be above 0 and at most 24 (hours a day), got {v:g}")
        if self.life_years <= 0:
            raise UsageError("--life-years must be positive")

    @property
    def owned(self) -> bool:
        return self.purchase is not None

    def effective_hourly(self) -> float:
        """The cost of one hour of useful work."""
        if self.price_per_hour is not None:
            return self.price_per_hour * 24.0 / self.busy_hours_per_day
        assert self.purchase is not None
        capital = self.purchase / (self.life_years * 365 * self.hours_per_day)
        power = self.watts / 1000.0 * self.kwh_price
        return capital + power

    def for_level(self, s: LevelSummary) -> Pricing:
        """The price of the hours of level ``s``: where ``measures`` says so, at the draw its meter read."""
        w = s.telemetry.gpu_power_w_mean if self.measures and isinstance(s, ServingLevel) and s.telemetry else None
        return replace(self, watts=w) if w is not None else self

    def per_mtok(self, tokens_per_s: float | None) -> float | None:
        return cost_per_mtok(self.effective_hourly(), tokens_per_s)

    def per_session(self, box_s: float | None, sessions_finished: int) -> float | None:
        return cost_per_session(self.effective_hourly(), box_s, sessions_finished)

    @classmethod
    def rented(cls, price_per_hour: float | None, currency: str | None = None) -> Pricing | None:
        """A rental price per hour (None: no price, or a price of 0)."""
        if not price_per_hour:
            return None
        return cls(currency=str(currency or DEFAULT_CURRENCY), price_per_hour=float(price_per_hour))

    @classmethod
    def of_run(cls, manifest: Manifest, price_per_hour: float | None = None,
               currency: str | None = None) -> Pricing | None:
        """A run's rental price as recorded in its manifest, unless one is given (a report's --price-per-hour)."""
        price = price_per_hour if price_per_hour is not None else run_price(manifest)
        return cls.rented(price, currency or manifest.currency)

    def describe(self) -> str:
        if self.price_per_hour is not None:
            busy = "" if self.busy_hours_per_day == 24 else f", busy {self.busy_hours_per_day:g} h/day"
            return f"rented at {self.price_per_hour:g} {self.currency}/hour{busy}"
        if self.measures:  # the hourly price differs level by level
            return (f"owned: {self.purchase:g} {self.currency} over {self.life_years:g} years at "
                    f"{self.hours_per_day:g} h/day, the watts each level measured ({self.measures}) "
                    f"at {self.kwh_price:g} {self.currency}/kWh")
        return (f"owned: {self.purchase:g} {self.currency} over {self.life_years:g} years at "
                f"{self.hours_per_day:g} h/day, {self.watts:g} W at {self.kwh_price:g} {self.currency}/kWh "
                f"= {self.effective_hourly():.3f} {self.currency}/hour")


def run_price(manifest: Manifest) -> float | None:
    """The run's price per hour, as recorded (a positive number, or nothing)."""
    p = manifest.price_per_hour
    return float(p) if p is not None and p > 0 else None


def level_cost(price_per_hour: float | None, currency: str | None, tokens_per_s: float | None) -> float | None:
    """A level's ``cost_per_mtok`` as stored in its summary: its run's rental price at its output rate."""
    pricing = Pricing.rented(price_per_hour, currency)
    return pricing.per_mtok(tokens_per_s) if pricing else None


def api_in(currency: str, api_price: float | None, api_currency: str | None, exchange_rate: float | None) -> float | None:
    """An API's price per million tokens in ``currency``; ``exchange_rate`` is units of ``currency`` per unit
    of ``api_currency``."""
    if api_price is None:
        return None
    if not api_currency or api_currency.upper() == currency.upper():
        return api_price
    if exchange_rate is None:
        raise UsageError(
            f"the API price is in {api_currency} and the box in {currency}: pass --exchange-rate "
            f"({currency} per 1 {api_currency})"
        )
    return api_price * exchange_rate


def effective_serving_s(agents: int, tokens: int, tokens_per_s: float) -> float:
    """How long ``agents`` requests of ``tokens`` output tokens take at an aggregate rate."""
    return agents * tokens / tokens_per_s


def output_rate(s: LevelSummary) -> float | None:
    """The output tokens per second a level sustains: the rate its cost is priced at (a serving level's aggregate
    throughput over its plateau, as the sweep table shows it, else a single-stream decode rate, else a depth
    run's tg)."""
    if isinstance(s, DepthLevel):
        return s.tg_tps or None
    assert isinstance(s, ServingLevel)
    return s.sustained_tps or s.decode_tps or None


def _load(s: LevelSummary, trace: str | None) -> str:
    """The load a level ran at: its concurrency, else the sweep table's name of it (an open loop's rate, a replay
    "open loop"), or the trace it replayed (a trace level has no concurrency, and its rate is the trace's own)."""
    if trace:
        return trace
    if s.concurrency is not None:
        return f"c={s.concurrency}"
    return level_label(s) if isinstance(s, ServingLevel) else "open loop"


def operating_point(s: LevelSummary, trace: str | None = None) -> str:
    """A level as the cost table names it: test, load (concurrency, rate or ``trace``: the trace a trace run
    replayed), depth and prompt length; a session level's cache mode in place of its prompt length (its prompts
    grow turn by turn)."""
    if isinstance(s, ServingLevel) and s.session is not None:
        return f"{s.test or 'serve'} c={s.concurrency} {s.session.cache}"
    return (f"{s.test or 'serve'} {_load(s, trace)}" + (f" depth={s.depth}" if s.depth else "")
            + (f" prompt={s.input_tokens_mean:.0f}" if s.input_tokens_mean else ""))


@dataclass(slots=True, frozen=True)
class CostPoint:
    """One operating point priced: the names of ``cost --json``'s points."""

    operating_point: str
    output_tps: float
    cost_per_mtok: float | None
    api_cost_per_mtok: float | None = None

    def vs_api(self) -> str | None:
        """"3.2x cheaper" or "1.5x dearer" than the API, or None without both prices."""
        return vs_api(self.cost_per_mtok, self.api_cost_per_mtok)


def vs_api(cost: float | None, api: float | None) -> str | None:
    """"3.2x cheaper" or "1.5x dearer" than the API, "the same price" within half a percent, or None without both
    prices."""
    if api is None or not cost:
        return None
    cheaper = cost < api
    ratio = api / cost if cheaper else cost / api
    said = f"{ratio:.2f}" if ratio < 1.1 else f"{ratio:.1f}"  # 13.34 against 12.88 is 1.04x, not "1.0x dearer"
    if said == "1.00":
        return "the same price"
    return f"{said}x cheaper" if cheaper else f"{said}x dearer"


def cost_points(pricing: Pricing, levels: Sequence[LevelSummary], api: float | None = None,
                trace: str | None = None) -> list[CostPoint]:
    """Every level with an output rate, priced by ``pricing``, beside the API's price per million tokens;
    ``trace``: a trace run's trace, which names its level."""
    return [CostPoint(operating_point(s, trace), rate, pricing.for_level(s).per_mtok(rate), api) for s in levels
            if (rate := output_rate(s))]


@dataclass(slots=True, frozen=True)
class SessionCostPoint:
    """One agent-session level priced: per finished session and per million output tokens (``cost --json``'s
    ``sessions``)."""

    concurrency: int | None
    cache: str  # warm or busted
    sessions: int
    sessions_finished: int
    session_p50_s: float | None
    box_hours: float  # the level's measured window: the hours its sessions held the box
    cost_per_session: float | None
    output_tps: float | None
    cost_per_mtok: float | None
    api_cost_per_mtok: float | None = None
    slo_met: bool | None = None  # the level's SLO verdict, where it had one (a capacity search's levels)
    #: a predicted warm level of more agents than the box's cache keeps warm: its rate assumes every one does
    past_cache_cliff: bool = False

    @property
    def level(self) -> str:
        return f"{self.concurrency} {self.cache}" + ("*" if self.past_cache_cliff else "")

    def vs_api(self) -> str | None:
        return vs_api(self.cost_per_mtok, self.api_cost_per_mtok)


def session_cost_points(pricing: Pricing, levels: Sequence[LevelSummary], api: float | None = None) -> list[SessionCostPoint]:
    """Every agent-session level priced by ``pricing``: per finished session (``cost_per_session``) and per
    million output tokens at the level's output rate, warm and busted alike, by agents (a search ran them in the
    order it chose: 1, 2, 4, 8, 6, 5)."""
    out = []
    for s in sorted(serving(levels), key=lambda s: s.concurrency or 0):
        st = s.session
        if st is None:
            continue
        rate, priced = output_rate(s), pricing.for_level(s)
        out.append(SessionCostPoint(s.concurrency, st.cache, st.sessions, st.sessions_finished, st.session_s.p50,
                                    s.duration_s / 3600.0, priced.per_session(s.duration_s, st.sessions_finished),
                                    rate, priced.per_mtok(rate), api, s.slo_met, Code.PAST_CACHE_CLIFF in s.flags))
    return out
