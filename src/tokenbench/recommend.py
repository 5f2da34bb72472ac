"""Which box, for a workload and SLOs: rank the catalog's boxes (predicted) and any measured runs by cost per
million output tokens among those that fit and meet the SLOs, and say why each other box is excluded. When no
box meets the SLOs, the closest: ranked by how far each missed (the worst SLO, relative to its limit; a box that
does not fit in memory is further than any SLO miss).

With ``capacity=True`` the ranking is by cost per agent-hour at the SLOs instead: each box's capacity is the most
agents it serves within them, searched as ``tokenbench capacity`` searches (brackets, then bisects): predicted
from the roofline, or read from a measured run's levels (a capacity search's, or any sweep's). A team's
``agents`` then says how many such boxes it needs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .capacity import SearchSpec, Verdict, bracket, search_by
from .cost import DEFAULT_CURRENCY, Pricing
from .errors import UsageError
from .findings import Code
from .levels import ServingLevel
from .predict.calibration import Calibration
from .predict.setup import Setup
from .predict.specs import Catalog, HardwareSpec
from .results import LevelOutcome, RunResult
from .slo import duration_text, needed_for_sure_pass
from .store import Store


@dataclass(slots=True)
class Workload:
    model: str
    agents: int
    input_len: int
    output_len: int
    ttft_p99_ms: float | None = None
    tpot_ms: float | None = None
    currency: str = DEFAULT_CURRENCY


#: Boxes listed when none meets the SLOs.
CLOSEST = 5
#: A predicted capacity is searched up to this many agents; a box that serves them all is "at least" this.
PREDICTED_AGENTS_MAX = 1024


@dataclass(slots=True)
class SloMiss:
    """One SLO a box missed: its (predicted or measured) value against the limit."""

    slo: str  # "TTFT p99" | "TPOT"
    value_ms: float
    limit_ms: float

    @property
    def relative(self) -> float:
        """How far over the limit, as a share of it (0.3: 30% over)."""
        return self.value_ms / self.limit_ms - 1


@dataclass(slots=True)
class Candidate:
    box: str
    setup: str  # engine and weights
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

    def exclude(self, reason: str, message: str) -> None:
        """Out of the ranking for the first reason found: a box that does not fit is not also 'no price'."""
        if self.excluded is None:
            self.reason, self.excluded = reason, message


def default_setup(hw: HardwareSpec) -> tuple[str, str, str]:
    """The engine, weights and KV format people run on such a box."""
    if hw.kind == "gpu":
        return ("vllm", "FP8", "FP8") if hw.has_fp8 else ("vllm", "BF16", "AUTO")
    return (f"llama.cpp {hw.default_backend}", "Q4_K_M", "Q8_0")


def _pricing(c: Candidate, hw: HardwareSpec, prices: dict[str, Pricing], currency: str) -> Pricing | None:
    """The box's price, or None with the candidate excluded for the want of one."""
    if hw.id in prices:
        return prices[hw.id]
    if hw.price_per_hour is not None:
        if hw.price_currency.upper() != currency.upper():
            c.exclude(f"its catalog price is in {hw.price_currency}",
                      f"its catalog price is in {hw.price_currency}: pass --currency {hw.price_currency}, or "
                      f"--price {hw.id}=PRICE in {currency}")
            return None
        return Pricing(currency=currency, price_per_hour=hw.price_per_hour)
    c.exclude("no price", f"no price: pass --price {hw.id}=PER_HOUR or --owned {hw.id}=PURCHASE:YEARS:WATTS")
    return None


def _slo(c: Candidate, w: Workload) -> None:
    """Every SLO the candidate misses, kept (worst first); excluded for the first, TTFT before TPOT."""
    for slo, value, limit in (("TTFT p99", c.ttft_p99_ms, w.ttft_p99_ms), ("TPOT", c.tpot_ms, w.tpot_ms)):
        if limit is not None and value is not None and value > limit:
            c.misses.append(SloMiss(slo, value, limit))
    if c.misses and c.misses[0].slo == "TTFT p99":
        c.exclude("misses TTFT p99", f"misses TTFT p99: {c.ttft_p99_ms:,.0f} ms > {w.ttft_p99_ms:,.0f} ms")
    elif c.misses:
        c.exclude("misses TPOT", f"misses TPOT: {c.tpot_ms:.1f} ms > {w.tpot_ms:.1f} ms")
    c.misses.sort(key=lambda m: -m.relative)


def _meets(c: Candidate, w: Workload) -> bool:
    """The candidate's current figures meet every SLO given."""
    return not ((w.ttft_p99_ms is not None and (c.ttft_p99_ms is None or c.ttft_p99_ms > w.ttft_p99_ms))
                or (w.tpot_ms is not None and (c.tpot_ms is None or c.tpot_ms > w.tpot_ms)))


def _predict_at(c: Candidate, s: Setup, w: Workload, agents: int) -> None:
    """The candidate's predicted figures at ``agents`` concurrent agents."""
    p = s.serve(agents, w.input_len, w.output_len)
    c.throughput = p.throughput[1]
    c.tpot_ms = p.tpot_s.estimate * 1000
    # a batching engine's p99: the slowest prompt of the loop's start, from the scheduler model (as predict
    # --against predicts a published ttft_p99); one stream's: waiting behind every other agent's request
    worst = p.ttft_worst_s if s.kind == "batching" and p.ttft_worst_s is not None else p.ttft_s
    c.ttft_p99_ms = worst.estimate * 1000


def _fitting(c: Candidate, s: Setup, cat: Catalog, cal: Calibration, w: Workload, agents: int) -> Setup | None:
    """The setup if the model and ``agents`` agents' KV cache fit (vLLM BF16 tries a 4-bit format before giving
    up); None, with the candidate excluded, if not."""
    f = s.fit(w.input_len + w.output_len, agents)
    if not f.fits and s.engine == "vllm" and s.quant.weights == "BF16":
        s = Setup.make(cat, cal, s.hw.id, w.model, "AWQ", s.quant.kv, s.engine)
        c.setup = f"{s.engine} AWQ"
        f = s.fit(w.input_len + w.output_len, agents)
    if f.fits:
        return s
    c.memory_gb = (f.total_gb, f.usable_gb)
    c.exclude("does not fit", f"does not fit: needs {f.total_gb:,.0f} GiB of {f.usable_gb:,.0f} GiB for {agents} "
              f"agent{'s' if agents != 1 else ''}")
    return None


def _predicted_capacity(c: Candidate, s: Setup, w: Workload) -> None:
    """The most agents the setup is predicted to serve within the SLOs (fitting in memory too), and its figures
    there (at one agent when it serves none)."""
    def meets(n: float) -> bool:
        if not s.fit(w.input_len + w.output_len, int(n)).fits:
            return False
        _predict_at(c, s, w, int(n))
        return _meets(c, w)

    # to the agent: a prediction costs microseconds, not a level's minutes
    last, _, ended = search_by(SearchSpec("concurrency", 1, PREDICTED_AGENTS_MAX, resolution=0.0), meets)
    c.capacity, c.at_least = (int(last) if last else None), ended == "all"
    _predict_at(c, s, w, c.capacity or 1)


def _price(c: Candidate, pricing: Pricing | None, w: Workload) -> None:
    if pricing is None:
        return
    c.cost_per_mtok = pricing.per_mtok(c.throughput)
    if c.capacity:
        c.cost_per_agent_hour = pricing.effective_hourly() / c.capacity
        c.boxes = math.ceil(w.agents / c.capacity)


def _no_capacity(c: Candidate) -> None:
    """Capacity mode: a box that serves no agent within the SLOs is out, whatever else is said of it."""
    if c.capacity is None and not c.excluded:
        c.exclude("meets the SLOs at no level", "meets the SLOs at no level it was run or predicted at")


def predicted(cat: Catalog, cal: Calibration, w: Workload, prices: dict[str, Pricing],
              capacity: bool = False) -> list[Candidate]:
    """Every catalog box, predicted (``capacity``: its capacity within the SLOs, searched)."""
    out = []
    for hw in cat.hardware.values():
        engine, weights, kv = default_setup(hw)
        c = Candidate(hw.id, f"{engine} {weights}", "predicted", kv=kv.lower())
        out.append(c)
        try:
            made = Setup.make(cat, cal, hw.id, w.model, weights, kv, engine)
        except UsageError as e:
            c.exclude("cannot run it", str(e))
            continue
        s = _fitting(c, made, cat, cal, w, 1 if capacity else w.agents)
        if s is None:
            continue
        if capacity:
            _predicted_capacity(c, s, w)
        else:
            _predict_at(c, s, w, w.agents)
        if s.kind == "sequential":
            c.notes.append("one stream at a time")
        if not s.calibrated:  # priors only: no measurement of this backend stands behind the figures
            c.notes.append(f"UNCALIBRATED ({s.backend})")
        if c.at_least:
            c.notes.append(f"at least: every count up to {PREDICTED_AGENTS_MAX} met the SLOs")
        _slo(c, w)
        if capacity:
            _no_capacity(c)
        _price(c, _pricing(c, hw, prices, w.currency), w)
    return out


def _serving(r: RunResult, agents: int | None = None) -> list[tuple[LevelOutcome, ServingLevel]]:
    """A run's serving levels with a throughput (at ``agents``, or all by concurrency), each beside its outcome:
    an agent session's busted level is the no-cache baseline, not how the box serves; its warm level is."""
    return sorted(((o, s) for o in r.outcomes if (s := o.serving) is not None and s.concurrency
                   and s.output_throughput_tps and (agents is None or s.concurrency == agents)
                   and not (s.session is not None and s.session.cache == "busted")),
                  key=lambda x: (x[1].concurrency or 0, -(x[1].input_tokens_mean or 0)))


def _set_measured(c: Candidate, s: ServingLevel) -> None:
    c.throughput, c.ttft_p99_ms, c.tpot_ms = s.output_throughput_tps, s.ttft_ms.p99, s.tpot_ms.p50


def _level_verdict(o: LevelOutcome, s: ServingLevel, c: Candidate, w: Workload) -> bool | None:
    """A measured level against the SLOs; None where it cannot say (cut short before its verdict, or stopped
    early by a search, so a pass on what it ran is not a pass)."""
    if o.status in ("interrupted", "partial"):
        return None
    if o.status == "failed":
        return False
    _set_measured(c, s)
    met = _meets(c, w)
    return None if met and s.finding(Code.STOPPED_EARLY) is not None else met


def _measured_capacity(c: Candidate, r: RunResult, w: Workload) -> ServingLevel | None:
    """The most agents a run's levels show the box serving within the SLOs (every level below it met them too:
    the first failing level bounds it), and the level whose figures stand for the box there."""
    levels = _serving(r)
    if not levels:
        return None
    verdicts = [Verdict(float(s.concurrency or 0), _level_verdict(o, s, c, w), [], 0, None, o.idx) for o, s in levels]
    last, first = bracket(verdicts)
    c.capacity, c.at_least = (int(last) if last else None), last is not None and first is None
    at = next((s for _, s in levels if s.concurrency == c.capacity), levels[0][1])
    n = at.completed + at.failed
    if c.at_least:
        c.notes.append(f"at least: every level run (to {int(last or 0)} agents) met the SLOs")
    if w.ttft_p99_ms is not None and n < (needed_for_sure_pass(0.01) or 0):  # a p99 of fewer is its maximum
        c.notes.append(f"p99 of {n} requests")
    return at


def measured(runs: list[RunResult], w: Workload, prices: dict[str, Pricing], capacity: bool = False) -> list[Candidate]:
    """Each measured run as a box: its level at ``w.agents`` (``capacity``: its capacity within the SLOs)."""
    out = []
    for r in runs:
        m = r.manifest
        label = str(m.label or r.run_id)
        c = Candidate(label, f"{m.engine or '?'} {m.weights or ''}".strip(), "measured")
        out.append(c)
        s = _measured_capacity(c, r, w) if capacity else max((s for _, s in _serving(r, w.agents)),
                                                             key=lambda x: x.input_tokens_mean or 0, default=None)
        if s is None:
            c.exclude("no measured level", "no measured serving level" if capacity
                      else f"no measured level at {w.agents} agents")
            continue
        _set_measured(c, s)
        if m.model and m.model.split("/")[-1].lower() != w.model.lower():
            c.notes.append(f"measured with {m.model}")
        if s.input_tokens_mean and abs(s.input_tokens_mean / w.input_len - 1) > 0.1:  # another workload's figures
            c.notes.append(f"measured at {s.input_tokens_mean:,.0f} in / {s.output_tokens_mean or 0:,.0f} out tokens")
        _slo(c, w)
        if capacity:
            _no_capacity(c)
        price = m.price_per_hour
        pricing = prices.get(label) or (Pricing(currency=w.currency, price_per_hour=price) if price else None)
        if pricing is None:
            c.exclude("no price", f"no price: pass --price {label}=PER_HOUR")
        _price(c, pricing, w)
    return out


def rank(cands: list[Candidate], capacity: bool = False) -> tuple[list[Candidate], list[Candidate]]:
    """The boxes in the running, cheapest first (per million output tokens, or per agent-hour at the SLOs), and
    the excluded."""
    key = (lambda c: c.cost_per_agent_hour) if capacity else (lambda c: c.cost_per_mtok)
    ok = sorted((c for c in cands if not c.excluded and key(c)), key=lambda c: key(c) or 0)
    return ok, [c for c in cands if c.excluded]


def shortfall(c: Candidate) -> tuple[int, float] | None:
    """How far a box is from meeting the SLOs, to sort by: (0, the worst SLO's relative miss), (1, how far
    its memory need is over what it has) for a box that does not fit, further than any SLO miss; None for one
    that meets them, or has no figures to say (it cannot run the model, no measured level)."""
    if c.misses:
        return 0, c.misses[0].relative
    if c.memory_gb is not None:
        need, usable = c.memory_gb
        return 1, need / usable - 1 if usable > 0 else float("inf")
    return None


def meets_slos(c: Candidate) -> bool:
    """Fits, has figures, and misses no SLO (whatever its price or quality)."""
    return c.throughput is not None and not c.misses and c.memory_gb is None


def closest(cands: list[Candidate], n: int = CLOSEST) -> list[Candidate]:
    """The ``n`` boxes nearest to meeting the SLOs, when none meets them (else none: the ranking is the answer)."""
    if any(meets_slos(c) for c in cands):
        return []
    near = [(d, i) for i, c in enumerate(cands) if (d := shortfall(c)) is not None]
    return [cands[i] for _, i in sorted(near)[:n]]


def _over(relative: float) -> str:
    """+31% over a limit; from twice the limit on, a factor ("117x")."""
    factor = relative + 1
    return f"+{relative:.0%}" if relative < 1 else f"{factor:.3g}x" if factor < 100 else f"{factor:,.0f}x"


def miss_text(c: Candidate) -> str:
    """How far a box missed, in words: "TTFT p99 2.61 s (limit 2 s, +31%)", every SLO it missed, or its memory."""
    if c.misses:
        return ", ".join(f"{m.slo} {duration_text(m.value_ms)} (limit {duration_text(m.limit_ms)}, {_over(m.relative)})"
                         for m in c.misses)
    if c.memory_gb is not None:
        need, usable = c.memory_gb
        return f"does not fit: needs {need:,.0f} GiB of {usable:,.0f} GiB ({_over(need / usable - 1)})"
    return c.excluded or ""


def parse_prices(prices: list[str], owned: list[str], currency: str, kwh_price: float) -> dict[str, Pricing]:
    out: dict[str, Pricing] = {}
    for p in prices:
        key, sep, val = p.partition("=")
        try:
            out[key] = Pricing(currency=currency, price_per_hour=float(val))
        except ValueError:
            raise UsageError(f"--price {p}: write ID=PER_HOUR, e.g. nvidia-l40s=0.9") from None
        if not sep:
            raise UsageError(f"--price {p}: write ID=PER_HOUR, e.g. nvidia-l40s=0.9")
    for o in owned:
        key, _, val = o.partition("=")
        parts = val.split(":")
        try:
            purchase, years, watts = float(parts[0]), float(parts[1]), float(parts[2])
        except (IndexError, ValueError):
            raise UsageError(f"--owned {o}: write ID=PURCHASE:YEARS:WATTS, e.g. amd-ryzen-ai-max-395=2500:3:120") from None
        out[key] = Pricing(currency=currency, purchase=purchase, life_years=years, watts=watts, kwh_price=kwh_price)
    return out


def require_parity(store: Store, cands: list[Candidate], reference: str) -> None:
    """Exclude every candidate whose quality is not shown to match the reference box's: measured boxes need a
    quality run under their label that no task of the reference's beats (paired verdict); a prediction has no
    quality at all."""
    from .quality.parity import beside, newest_quality_run

    if newest_quality_run(store, reference) is None:
        raise UsageError(f"--parity-with {reference}: no quality run labelled '{reference}' "
                         f"(tokenbench quality --label {reference} ...)")
    for c in cands:
        if c.excluded:
            continue
        if c.source != "measured":
            c.exclude("quality not measured", f"quality not measured: a prediction cannot show parity with {reference}")
            continue
        if c.box == reference:
            c.notes.append("the parity reference")
            continue
        q = beside(store, c.box, reference)
        if q is None:
            c.exclude("no quality run", f"no quality run labelled '{c.box}' sharing a task with {reference}'s: "
                      f"tokenbench quality --label {c.box} ...")
            continue
        worse = [(tc.task, tc.scores) for tc in q.tasks if tc.scores is not None and tc.scores.verdict == "B better"]
        if worse:
            task, s = worse[0]
            c.exclude("quality below the reference", f"quality below {reference} on {task}: {100 * s.mean_a:.1f} "
                      f"vs {100 * s.mean_b:.1f} points, p = {s.p_value:.2g}")
        else:
            c.notes.append(f"quality as {reference}: " + "; ".join(q.lines(c.box, reference)))


@dataclass(frozen=True, slots=True)
class RecommendConfig:
    """What ``tokenbench recommend`` ranks boxes for: a catalog model served to ``agents`` at these lengths and
    SLOs, the prices the catalog lacks (``prices``: ID=PER_HOUR; ``owned``: ID=PURCHASE:YEARS:WATTS), measured
    ``runs`` to rank beside the predictions, and with ``capacity`` by cost per agent-hour at each box's capacity
    instead of per million tokens at ``agents``."""

    model: str
    agents: int = 16
    input_len: int = 4096
    output_len: int = 512
    ttft_p99_ms: float | None = None
    tpot_ms: float | None = None
    currency: str = DEFAULT_CURRENCY
    prices: tuple[str, ...] = ()
    owned: tuple[str, ...] = ()
    kwh_price: float = 0.30  # of owned boxes
    runs: tuple[str, ...] = ()  # ids, id prefixes or labels
    capacity: bool = False
    parity_with: str | None = None  # keep only measured boxes whose quality is as this box's
    latest: bool = False
    db: str | None = None  # None: $TOKENBENCH_DB or the user data dir


@dataclass(slots=True)
class Recommendation:
    """The boxes in the running, cheapest first; the excluded, each with its reason; and when none meets the
    SLOs, the closest (else empty)."""

    workload: Workload
    capacity: bool
    ranked: list[Candidate]
    excluded: list[Candidate]
    closest: list[Candidate]

    def to_dict(self) -> dict[str, object]:
        """``recommend --json``."""
        from dataclasses import asdict

        return {"tool": "tokenbench", "kind": "recommend", "currency": self.workload.currency,
                "workload": asdict(self.workload),
                "ranked_by": "cost_per_agent_hour" if self.capacity else "cost_per_mtok",
                "ranked": [asdict(c) for c in self.ranked], "excluded": [asdict(c) for c in self.excluded],
                "closest": [asdict(c) | {"relative_miss": (shortfall(c) or (0, None))[1]} for c in self.closest]}


def recommend(cfg: RecommendConfig) -> Recommendation:
    """``tokenbench recommend``'s work: every catalog box predicted, the measured runs read from the store, the
    parity rule applied, then ranked."""
    from .reader import LOADED, load_result

    if cfg.agents < 1:
        raise UsageError("--agents must be at least 1")
    if cfg.capacity and cfg.ttft_p99_ms is None and cfg.tpot_ms is None:
        raise UsageError("--capacity ranks by the agents each box serves within an SLO: give --ttft-p99 (e.g. 2s) "
                         "and/or --tpot (e.g. 50ms)")
    w = Workload(cfg.model, cfg.agents, cfg.input_len, cfg.output_len, cfg.ttft_p99_ms, cfg.tpot_ms, cfg.currency)
    cat = Catalog.load()
    cat.find_model(cfg.model)  # an unknown model is an error, not a table of exclusions
    prices = parse_prices(list(cfg.prices), list(cfg.owned), cfg.currency, cfg.kwh_price)
    cands = predicted(cat, Calibration.packaged(), w, prices, cfg.capacity)
    store = Store(cfg.db, readonly=True) if cfg.runs or cfg.parity_with else None
    if cfg.runs and store is not None:
        cands += measured([load_result(store, r, latest=cfg.latest, kinds=LOADED, command="recommend")
                           for r in cfg.runs], w, prices, cfg.capacity)
    if cfg.parity_with and store is not None:
        require_parity(store, cands, cfg.parity_with)
    ok, excluded = rank(cands, cfg.capacity)
    return Recommendation(w, cfg.capacity, ok, excluded, closest(cands))
