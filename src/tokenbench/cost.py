"""``tokenbench cost``'s library call: a run's levels (or a rate the user knows) priced per million output tokens,
rented or owned, beside an API's price; an agent-session run also per finished session. ``cost`` answers a typed
``CostConfig`` with a ``Costed``; nothing here prints.

Apart from ``pricing.py`` (the arithmetic, which the modules that make and read runs price levels with): this one
reads runs from the store, and ``reader`` imports ``pricing``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .money import DEFAULT_CURRENCY, DEFAULT_KWH_PRICE
from .pricing import CostPoint, Pricing, SessionCostPoint, api_in, cost_points, output_rate, run_price, \
    session_cost_points
from .errors import UsageError
from .levels import serving
from .results import RunResult


@dataclass(frozen=True, slots=True)
class CostConfig:
    """What ``tokenbench cost`` prices: a run (id, id prefix or label) or an aggregate output rate (``tps``), on a
    box rented at ``price_per_hour`` (None: the run's own) or owned (``purchase`` over ``life_years``, ``watts``
    at ``kwh_price``), beside an API's price per million output tokens."""

    run: str | None = None
    tps: float | None = None  # an aggregate output rate instead of a run
    price_per_hour: float | None = None
    busy_hours: float | None = None  # rented: hours a day it does this work (None: 24)
    owned: bool = False
    purchase: float | None = None
    life_years: float | None = None  # owned (None: 3)
    watts: float | None = None  # owned: its draw under this load; required
    kwh_price: float | None = None  # owned (None: DEFAULT_KWH_PRICE, said where priced)
    hours_per_day: float | None = None  # owned: hours a day it does this work (None: 24)
    currency: str | None = None  # None: the run's, else DEFAULT_CURRENCY
    api_price: float | None = None
    api_currency: str | None = None  # None: ``currency``
    exchange_rate: float | None = None  # units of ``currency`` per 1 ``api_currency``
    latest: bool = False
    db: str | None = None  # None: $TOKENBENCH_DB or the user data dir


@dataclass(slots=True)
class Costed:
    """Every operating point priced (``points``), an agent-session run's levels per finished session
    (``sessions``; None for any other run), and the API's price in ``currency`` (None: none given, or in another
    currency with no rate, ``api_note`` saying so)."""

    currency: str
    pricing: Pricing
    run: RunResult | None
    points: list[CostPoint]
    sessions: list[SessionCostPoint] | None = None
    api: float | None = None
    api_note: str | None = None
    kwh_default: bool = False  # owned: the electricity price is DEFAULT_KWH_PRICE, none given

    def to_dict(self) -> dict[str, Any]:
        """``cost --json``."""
        doc: dict[str, Any] = {"tool": "tokenbench", "kind": "cost", "currency": self.currency,
                               "run_id": self.run.run_id if self.run else None, "pricing": self.pricing.describe(),
                               "predicted": self.run.predicted_mark if self.run else None,
                               "points": [asdict(p) for p in self.points]}
        if self.sessions is not None:
            doc["sessions"] = [dict(asdict(p), level=p.level) for p in self.sessions]
        return doc


#: The options of one way of paying for a box only: given with the other, each would be taken and ignored.
RENTED_ONLY = (("price_per_hour", "--price-per-hour"), ("busy_hours", "--busy-hours"))
OWNED_ONLY = (("purchase", "--purchase"), ("life_years", "--life-years"), ("watts", "--watts"),
              ("kwh_price", "--kwh-price"), ("hours_per_day", "--hours-per-day"))


def _refuse_what_does_not_apply(cfg: CostConfig) -> None:
    """A rented box has no purchase, life, watts or electricity; an owned one no rent: an option of the other kind
    is refused in one line, not ignored."""
    other = RENTED_ONLY if cfg.owned else OWNED_ONLY
    given = [flag for name, flag in other if getattr(cfg, name) is not None]
    if given:
        how = ("--owned prices the box by its purchase, life, watts and electricity" if cfg.owned else
               "a rented box is priced by --price-per-hour (and --busy-hours); add --owned for a box you buy")
        raise UsageError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply: {how}")
    if cfg.owned and cfg.purchase is None:
        raise UsageError("--owned needs --purchase PRICE and --watts W (and --life-years, --kwh-price, "
                         "--hours-per-day)")


def _measured_watts(res: RunResult | None) -> str | None:
    """What the draw every level with an output rate read covers ("whole box", "GPU board"), or None where one
    did not read it (a meter, or the server host's agent, reads it)."""
    levels = [s for s in serving(o.summary for o in res.outcomes) if output_rate(s)] if res is not None else []
    if not levels or not all(s.telemetry is not None and s.telemetry.gpu_power_w_mean for s in levels):
        return None
    return ", ".join(sorted({s.telemetry.power_measures or "a meter" for s in levels if s.telemetry is not None}))


def pricing(cfg: CostConfig, currency: str, res: RunResult | None) -> Pricing:
    """The box's price as the config gives it: rented at ``price_per_hour`` (else the run's own), or owned (its
    draw given with --watts, else each level's measured one)."""
    _refuse_what_does_not_apply(cfg)
    if cfg.owned:
        measures = _measured_watts(res) if cfg.watts is None else None
        if cfg.watts is None and measures is None:
            raise UsageError("--owned needs --watts: the box's draw under this load, e.g. --watts 120 (0 leaves "
                             "power out), unless every level of the run measured it (docs/power.md)")
        return Pricing(currency=currency, purchase=cfg.purchase, life_years=cfg.life_years or 3.0,
                       watts=cfg.watts or 0.0, measures=measures or "",
                       kwh_price=DEFAULT_KWH_PRICE if cfg.kwh_price is None else cfg.kwh_price,
                       hours_per_day=cfg.hours_per_day or 24.0)
    price = cfg.price_per_hour
    if price is None and res is not None:
        price = run_price(res.manifest)
        theirs = res.manifest.currency or DEFAULT_CURRENCY
        if price is not None and theirs != currency:  # a price in USD relabelled EUR is no conversion
            raise UsageError(f"run {res.manifest.label or res.run_id} was priced at {price:g} {theirs}/hour, not in "
                             f"{currency}: give --price-per-hour in {currency}, or leave --currency out")
    return Pricing(currency=currency, price_per_hour=price, busy_hours_per_day=cfg.busy_hours or 24.0)


def api_price(cfg: CostConfig, currency: str) -> tuple[float | None, str | None]:
    """The API's price in ``currency``, or None and a note when it is in another currency and no rate is given
    (shown as given rather than a guessed rate)."""
    try:
        return api_in(currency, cfg.api_price, cfg.api_currency, cfg.exchange_rate), None
    except UsageError:
        return None, (f"API: {cfg.api_price:g} {cfg.api_currency}/M output tokens; pass --exchange-rate "
                      f"({currency} per 1 {cfg.api_currency}) to compare in {currency}")


def cost(cfg: CostConfig) -> Costed:
    """``tokenbench cost``'s work: the run read from the store (or the rate given), its price, every level
    priced."""
    from .reader import REPORTED, load_result
    from .session_view import is_replay_run, is_session_run
    from .store import Store

    res = None
    if cfg.run:
        res = load_result(Store(cfg.db, readonly=True), cfg.run, latest=cfg.latest, kinds=REPORTED, command="cost")
    elif cfg.tps is None:
        raise UsageError("give a run, or --tps RATE for a rate you know")
    currency = cfg.currency or (res.manifest.currency if res else None) or DEFAULT_CURRENCY
    price = pricing(cfg, currency, res)
    api, note = api_price(cfg, currency)
    default_kwh = cfg.owned and cfg.kwh_price is None
    if res is None:
        assert cfg.tps is not None
        return Costed(currency, price, None, [CostPoint("given rate", cfg.tps, price.per_mtok(cfg.tps), api)], None,
                      api, note, default_kwh)
    levels = [o.summary for o in res.outcomes]
    # a replay's finished trees are priced as sessions are: each a session with its subagents
    sessions = session_cost_points(price, levels, api) if is_session_run(res) or is_replay_run(res) else None
    return Costed(currency, price, res, cost_points(price, levels, api, trace_name(res)), sessions, api, note,
                  default_kwh)


def trace_name(res: RunResult) -> str | None:
    """A trace run's trace as its level is named: "trace NAME" (and its speed where replayed faster or slower);
    None for any other run."""
    trace = (res.manifest.workload or {}).get("trace")
    if not isinstance(trace, dict) or not trace.get("path"):
        return None
    speed = trace.get("speed")
    return f"trace {Path(str(trace['path'])).name}" + (
        f" x{speed:g}" if isinstance(speed, (int, float)) and speed != 1 else "")
