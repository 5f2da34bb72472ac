"""The catalog's boxes predicted for a buyer's workload: each box with the engine, weights and KV cache people run on
it (``setup.usual_setup``, as fit and predict take it), llama.cpp with its server's slots, its figures at the
agents asked for or its capacity within the SLOs (searched as ``tokenbench capacity`` searches), on requests of
fixed length or on agent sessions with the prefix cache, each figure with its band."""

from __future__ import annotations

import statistics
from dataclasses import replace

from .candidates import Candidate, Workload, judge, meets, price
from .capacity import SearchSpec, search_by
from .pricing import Pricing
from .errors import UsageError
from .predict import session as ps
from .predict.calibration import Calibration
from .predict.setup import Setup, default_slots, usual_setup
from .predict.specs import Catalog, HardwareSpec
from .layout import plural

#: A predicted capacity is searched up to this many agents; a box that serves them all is "at least" this.
PREDICTED_AGENTS_MAX = 1024
#: Sessions: the most agents searched (each count predicts turns through the scheduler's queue, agent by agent).
SESSION_AGENTS_MAX = 128
#: The metrics whose bands a candidate carries.
BAND_METRICS = ("throughput", "ttft", "tpot")


def context(w: Workload) -> int:
    """The most tokens one agent's sequence holds: a request's prompt and answer, or a session's last turn."""
    if w.sessions is None:
        return w.input_len + w.output_len
    return w.sessions.longest()


def _bands(c: Candidate, s: Setup, cal: Calibration, w: Workload, agents: int) -> None:
    for m in BAND_METRICS:
        b = s.band(cal, m, context(w), agents)
        if b is not None:
            c.bands[m] = b.pct


def _predict_at(c: Candidate, s: Setup, cal: Calibration, w: Workload, agents: int, quick: bool = False) -> None:
    """The candidate's predicted figures at ``agents`` concurrent agents (``quick``, on sessions: its SLO figures
    from the first, middle and last turn only, as a capacity search checks them)."""
    c.at_agents = agents
    if w.sessions is not None and quick:
        worst, median, tpot = ps.probe(s, w.sessions, agents)
        c.ttft_p99_ms, c.ttft_p50_ms, c.tpot_ms = worst.estimate * 1000, median.estimate * 1000, tpot.estimate * 1000
        c.limits = {"ttft": worst.ceiling * 1000, "tpot": tpot.ceiling * 1000}
    elif w.sessions is not None:
        p = ps.predict_session(s, w.sessions, agents, cold=False)
        # every turn's TTFT: the slowest is turn 1's last prompt (all agents start at once), what a p99 over a
        # run of sessions sees
        c.ttft_p99_ms = max((t.ttft_worst_s or t.ttft_s).estimate for t in p.turns) * 1000
        c.ttft_p50_ms = statistics.median(t.ttft_s.estimate for t in p.turns) * 1000
        c.tpot_ms = statistics.median(t.tpot_s.estimate for t in p.turns) * 1000
        c.throughput = p.throughput()[1]
        c.session_s = p.time().total.estimate
        # each figure's physical limit, as it is taken over the turns (a max of floors, a median of floors)
        c.limits = {"ttft": max((t.ttft_worst_s or t.ttft_s).ceiling for t in p.turns) * 1000,
                    "tpot": statistics.median(t.tpot_s.ceiling for t in p.turns) * 1000,
                    "throughput": p.throughput()[0]}
    else:
        pt = s.serve(agents, w.input_len, w.output_len)
        c.throughput = pt.throughput[1]
        c.tpot_ms = pt.tpot_s.estimate * 1000
        c.ttft_p50_ms = pt.ttft_s.estimate * 1000
        # the slowest prompt of the loop's start (all agents at once), as predict --against predicts a p99
        c.ttft_p99_ms = (pt.ttft_worst_s or pt.ttft_s).estimate * 1000
        c.limits = {"ttft": (pt.ttft_worst_s or pt.ttft_s).ceiling * 1000, "tpot": pt.tpot_s.ceiling * 1000,
                    "throughput": pt.throughput[0]}
    _bands(c, s, cal, w, agents)


def _fits(s: Setup, w: Workload, agents: int) -> bool:
    """Whether the contexts the box holds at once fit beside the weights (every agent's on a batching engine, one
    per slot on llama.cpp's server: session.held)."""
    return s.fit(context(w), ps.held(s, agents)).fits


def _fitting(c: Candidate, s: Setup, cat: Catalog, cal: Calibration, w: Workload, agents: int) -> Setup | None:
    """The setup if the model and ``agents`` agents' KV cache fit; None, with the candidate excluded, if not. Where
    vLLM BF16 does not hold the agents asked (``w.agents``, in either mode, so a box is one setup whether its
    capacity is searched or not) it tries a 4-bit format, and where vLLM holds not one agent, llama.cpp's server
    with Q4_K_M and a q8_0 cache, as people run a model too large for the card."""
    if not _fits(s, w, w.agents) and s.engine == "vllm" and s.quant.weights == "BF16":
        s = Setup.make(cat, cal, s.hw.id, w.model, "AWQ", s.quant.kv, s.engine)
        c.setup = f"{s.engine} AWQ"
    if not _fits(s, w, 1) and s.engine == "vllm":
        try:
            llama = Setup.make(cat, cal, s.hw.id, w.model, "Q4_K_M", "Q8_0", f"llama.cpp {s.hw.default_backend}")
        except UsageError:
            llama = None
        if llama is not None and _fits(llama, w, 1):
            s, c.setup, c.kv = llama, f"{llama.engine} Q4_K_M", "q8_0"
    f = s.fit(context(w), ps.held(s, agents))
    if f.fits:
        return s
    c.memory_gb = (f.total_gb, f.usable_gb)
    c.exclude("does not fit", f"does not fit: {c.memory_text()} for {plural(agents, 'agent')}")
    return None


def _slots(s: Setup, w: Workload, c: Candidate) -> Setup:
    """llama.cpp's server with its slots: those given, else its own default (setup.default_slots) or as many as
    the box's memory holds contexts for; said in the candidate's setup."""
    if s.kind != "sequential":
        return s
    slots = w.parallel or default_slots(s, context(w))
    if slots > 1:
        s = s.with_slots(slots)
    c.setup += f" -np {slots}"  # llama-server's own flag for its slots
    return s


def _search(c: Candidate, s: Setup, cal: Calibration, w: Workload,
            physical: Workload | None = None) -> tuple[int | None, bool]:
    """The most agents the setup is predicted to serve within ``w``'s SLOs (fitting in memory too), and whether
    every count searched met them; ``c`` holds the figures of the last count tried. ``physical``: the SLOs as
    given, which each figure's physical floor (the time at efficiency 1) must meet too: a band's fast end is held
    there, never faster."""
    def ok(n: float) -> bool:
        if not _fits(s, w, int(n)):
            return False
        _predict_at(c, s, cal, w, int(n), quick=True)
        return bool(meets(c, w)) and (physical is None or _floors_meet(c, physical))

    top = _top(w)
    # to the agent: a prediction costs milliseconds, not a level's minutes
    last, _, ended = search_by(SearchSpec("concurrency", 1, top, resolution=0.0), ok)
    return (int(last) if last else None), ended == "all"


#: A capacity that memory stops, not the SLOs: one agent more does not fit (cli/recommend.py says the rest).
MEMORY_BOUND = "memory-bound"


def _top(w: Workload) -> int:
    """The most agents a capacity search predicts."""
    return SESSION_AGENTS_MAX if w.sessions is not None else PREDICTED_AGENTS_MAX


def _floors_meet(c: Candidate, w: Workload) -> bool:
    """Whether the candidate's physical floors of TTFT p99 and TPOT (``limits``) meet ``w``'s SLOs."""
    return all(limit is None or c.limits.get(metric, 0.0) <= limit
               for metric, limit in (("ttft", w.ttft_p99_ms), ("tpot", w.tpot_ms)))


def _scaled(w: Workload, c: Candidate, sign: int) -> Workload:
    """``w`` with its limits moved by the candidate's TTFT and TPOT bands: as if every figure measured at the slow
    end of its band (``sign`` 1) or the fast end (-1; no limit where a band reaches zero)."""
    def limit(v: float | None, metric: str) -> float | None:
        b = c.bands.get(metric, 0.0) / 100
        return None if v is None else v / (1 + b) if sign > 0 else v / (1 - b) if b < 1 else float("inf")

    return replace(w, ttft_p99_ms=limit(w.ttft_p99_ms, "ttft"), tpot_ms=limit(w.tpot_ms, "tpot"))


def _capacity(c: Candidate, s: Setup, cal: Calibration, w: Workload) -> None:
    """The most agents the setup is predicted to serve within the SLOs, its figures there (at one agent when it
    serves none), and the range the bands give it (``capacity_band``): the agents served were every
    figure at the slow end of its band, or at the fast end."""
    c.capacity, c.at_least = _search(c, s, cal, w)
    _predict_at(c, s, cal, w, c.capacity or 1)
    while c.capacity and not meets(c, w):  # a turn the quick look skipped misses: every turn decides
        c.capacity, c.at_least = c.capacity - 1 or None, False
        _predict_at(c, s, cal, w, c.capacity or 1)
    if c.capacity and c.capacity < _top(w) and not _fits(s, w, c.capacity + 1):  # memory stops it, not the SLOs
        c.notes.append(MEMORY_BOUND)
    if c.capacity and c.bands:  # the range the bands give each box, which the ranking says beside it
        probe = Candidate(c.box, c.setup, c.source, bands=dict(c.bands))
        low, _ = _search(probe, s, cal, _scaled(w, c, 1))
        high, every = _search(probe, s, cal, _scaled(w, c, -1), physical=w)
        c.capacity_band = (low or 0, high or 0, every)
    if c.at_least:
        c.notes.append(f"at least: every count up to {SESSION_AGENTS_MAX if w.sessions else PREDICTED_AGENTS_MAX} "
                       "met the SLOs")


def _pricing(c: Candidate, hw: HardwareSpec, prices: dict[str, Pricing], currency: str) -> Pricing | None:
    """The box's price, or None with the candidate excluded for the want of one."""
    if hw.id in prices:
        c.priced = True
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


def _no_capacity(c: Candidate) -> None:
    """Capacity mode: a box that serves no agent within the SLOs is out, whatever else is said of it."""
    if c.capacity is None and not c.excluded:
        c.exclude("meets the SLOs at no level", "meets the SLOs at no level it was run or predicted at")


def _one(hw: HardwareSpec, cat: Catalog, cal: Calibration, w: Workload, prices: dict[str, Pricing],
         capacity: bool) -> Candidate:
    engine, weights, kv = usual_setup(hw)
    c = Candidate(hw.id, f"{engine} {weights}", "predicted", kv=kv.lower())
    try:
        made = Setup.make(cat, cal, hw.id, w.model, weights, kv, engine)
    except UsageError as e:
        c.exclude("cannot run it", str(e))
        _pricing(c, hw, prices, w.currency)
        return c
    c.calibrated = made.calibrated
    s = _fitting(c, made, cat, cal, w, 1 if capacity else w.agents)
    if s is None:
        _pricing(c, hw, prices, w.currency)
        return c
    s = _slots(s, w, c)
    if capacity:
        _capacity(c, s, cal, w)
    else:
        _predict_at(c, s, cal, w, w.agents)
    if s.kind == "sequential" and s.parallel == 1:
        c.notes.append("one stream at a time")
    if not s.calibrated:  # priors only: no measurement of this backend stands behind the figures
        c.notes.append(f"UNCALIBRATED ({s.backend})")
    judge(c, w)
    if capacity:
        _no_capacity(c)
    price(c, _pricing(c, hw, prices, w.currency), w.agents)
    return c


def predicted(cat: Catalog, cal: Calibration, w: Workload, prices: dict[str, Pricing],
              capacity: bool = False) -> list[Candidate]:
    """Every catalog box, predicted (``capacity``, and always for sessions: its capacity within the SLOs,
    searched)."""
    return [_one(hw, cat, cal, w, prices, capacity or w.sessions is not None) for hw in cat.hardware.values()]
