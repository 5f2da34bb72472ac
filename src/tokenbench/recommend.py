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
from dataclasses import dataclass
from typing import Any

from .boxes import BAND_METRICS, PREDICTED_AGENTS_MAX, predicted
from .candidates import NO_P99, NO_P99_PREDICTED, Candidate, SloMiss, Workload, judge, meets, price
from .capacity import Verdict, bracket
from .money import DEFAULT_CURRENCY, DEFAULT_KWH_PRICE
from .pricing import Pricing
from .errors import UsageError
from .finding import Code
from .jsontext import finite_number
from .levels import ServingLevel
from .predict.calibration import Calibration
from .predict.session import SessionShape
from .predict.setup import usual_setup
from .predict.specs import Catalog
from .results import LevelOutcome, RunResult
from .slo import duration_text, needed_for_sure_pass
from .store import Store

__all__ = ["Candidate", "SloMiss", "Workload", "PREDICTED_AGENTS_MAX", "predicted", "measured", "recommend",
           "default_setup"]

#: Boxes listed when none meets the SLOs.
CLOSEST = 5


#: The engine, weights and KV format people run on such a box: the one rule fit, predict and recommend take.
default_setup = usual_setup


def _serving(r: RunResult, agents: int | None = None) -> list[tuple[LevelOutcome, ServingLevel]]:
    """A run's serving levels with a throughput (at ``agents``, or all by concurrency), each beside its outcome:
    an agent session's busted level is the no-cache baseline, not how the box serves; its warm level is."""
    return sorted(((o, s) for o in r.outcomes if (s := o.serving) is not None and s.concurrency
                   and s.output_throughput_tps and (agents is None or s.concurrency == agents)
                   and not (s.session is not None and s.session.cache == "busted")),
                  key=lambda x: (x[1].concurrency or 0, -(x[1].input_tokens_mean or 0)))


def _set_measured(c: Candidate, s: ServingLevel) -> None:
    c.throughput, c.ttft_p99_ms, c.tpot_ms = s.sustained_tps, s.ttft_ms.p99, s.tpot_ms.p50  # as the sweep showed
    c.ttft_p50_ms = s.ttft_ms.p50


def _level_verdict(o: LevelOutcome, s: ServingLevel, c: Candidate, w: Workload) -> bool | None:
    """A measured level against the SLOs; None where it cannot say (cut short before its verdict, stopped early by
    a search, so a pass on what it ran is not a pass, or without a figure an SLO needs)."""
    if o.status in ("interrupted", "partial"):
        return None
    if o.status == "failed":
        return False
    _set_measured(c, s)
    met = meets(c, w)
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
    if w.ttft_p99_ms is not None and n and n < (needed_for_sure_pass(0.01) or 0):  # a p99 of fewer is its maximum
        c.notes.append(f"p99 of {n} requests")
    return at


def _workload_differs(r: RunResult, w: Workload) -> str | None:
    """Why a run cannot stand for a box on this workload: agent sessions (the prefix cache serving each turn's
    history) and requests of fixed length are never ranked against each other."""
    from .session_view import is_replay_run, is_session_run

    if is_replay_run(r):  # its calls are a recording's: neither fixed-length requests nor the sessions asked
        return "a replay of recorded agents: compare it with other replays (tokenbench compare)"
    if is_session_run(r) and w.sessions is None:
        return "an agent-session run: rank it on sessions (recommend --sessions)"
    if w.sessions is not None and not is_session_run(r):
        return "a run of fixed-length requests, not agent sessions: rank it without --sessions"
    return None


def _run_price(label: str, r: RunResult, prices: dict[str, Pricing], cat: Catalog,
               w: Workload) -> tuple[Pricing | None, bool]:
    """A run's price, and whether the user gave it: for its label, or for the catalog box it ran on (through the
    same alias table); else its own recorded rental price."""
    box = None
    if r.manifest.hardware:
        try:
            box = cat.find_hardware(str(r.manifest.hardware)).id
        except UsageError:
            box = None
    for key in (label, box):
        if key and key in prices:
            return prices[key], True
    own = r.manifest.price_per_hour
    return (Pricing(currency=w.currency, price_per_hour=own) if own else None), False


def _session_apart(recorded: dict[str, Any], shape: SessionShape) -> str:
    """What a session run's recorded shape has that the ranked sessions do not ("turns 4, shared prefix 256"): its
    figures stand for other sessions (it was ranked for 10 turns with no word)."""
    ours = {"turns": str(shape.turns), "shared prefix": str(shape.shared_prefix), "task": shape.input_len.describe(),
            "tool results": shape.tool_len.describe(), "answers": shape.output_len.describe(),
            "think": shape.think_time.describe()}
    theirs = {"turns": recorded.get("turns"), "shared prefix": recorded.get("shared_prefix"),
              "task": (recorded.get("task") or {}).get("text"), "tool results": (recorded.get("tool") or {}).get("text"),
              "answers": (recorded.get("output") or {}).get("text"), "think": (recorded.get("think") or {}).get("text")}
    return ", ".join(f"{k} {theirs[k]}" for k in ours if theirs[k] is not None and str(theirs[k]) != ours[k])


def _apart(have: float | None, want: int) -> bool:
    """A run's mean length more than a tenth from the length ranked."""
    return bool(have) and abs((have or 0) / want - 1) > 0.1


def _run_notes(r: RunResult, s: ServingLevel, w: Workload, c: Candidate) -> list[str]:
    """What a run's figures stand for, where it is not quite the workload ranked: another model, other lengths, a
    prediction no measurement stands behind."""
    m, out = r.manifest, []
    if m.model and m.model.split("/")[-1].lower() != w.model.lower():
        out.append(f"measured with {m.model}")
        c.other_model = m.model
    if w.sessions is None and (_apart(s.input_tokens_mean, w.input_len) or _apart(s.output_tokens_mean, w.output_len)):
        out.append(f"measured at {s.input_tokens_mean or 0:,.0f} in / {s.output_tokens_mean or 0:,.0f} out tokens")
    if w.sessions is not None and (shape := _session_apart(m.workload or {}, w.sessions)):
        out.append(f"measured with {shape}")
    if c.source == "predicted" and not c.calibrated:
        out.append("UNCALIBRATED")
    return out


def _stored_bands(c: Candidate, r: RunResult, s: ServingLevel) -> None:
    """A saved prediction's bands, the widest its cells printed, and its level's physical limits: a box ranked
    from it is held to them as the same prediction made afresh is."""
    c.bands = {m: float(v) for m, v in (r.manifest.band_pct or {}).items() if m in BAND_METRICS and finite_number(v)}
    limits = s.limits or {}
    ttft = "ttft_p99_ms" if c.ttft_p99_ms is not None and "ttft_p99_ms" in limits else "ttft_ms"  # its TTFT figure's
    c.limits = {m: limits[key] for m, key in (("throughput", "output_throughput_tps"), ("ttft", ttft),
                                              ("tpot", "tpot_ms")) if key in limits}


def measured(runs: list[RunResult], w: Workload, prices: dict[str, Pricing], capacity: bool = False,
             cat: Catalog | None = None) -> list[Candidate]:
    """Each stored run as a box (a stored prediction as PREDICTED): its level at ``w.agents`` (``capacity``, and
    always on sessions: its capacity within the SLOs)."""
    cat = cat or Catalog.load()
    capacity = capacity or w.sessions is not None
    out = []
    for r in runs:
        m = r.manifest
        label = str(m.label or r.run_id)
        mark = r.predicted_mark
        c = Candidate(label, f"{m.engine or '?'} {m.weights or ''}".strip(), "predicted" if mark else "measured",
                      calibrated=not (mark and "UNCALIBRATED" in mark), stored=True)
        out.append(c)
        pricing, c.priced = _run_price(label, r, prices, cat, w)
        if (differs := _workload_differs(r, w)) is not None:
            c.exclude("another workload", differs)
            continue
        s = _measured_capacity(c, r, w) if capacity else max((s for _, s in _serving(r, w.agents)),
                                                             key=lambda x: x.input_tokens_mean or 0, default=None)
        if s is None:
            c.exclude("no measured level", "no serving level" if capacity else f"no level at {w.agents} agents")
            continue
        _set_measured(c, s)
        if mark:
            _stored_bands(c, r, s)
            c.kv = (m.kv or "").lower()  # as predicted then: it may differ from what the catalog's boxes assume
        c.notes += _run_notes(r, s, w, c)
        judge(c, w, NO_P99_PREDICTED if mark else NO_P99)
        if capacity and c.capacity is None and not c.excluded:
            c.exclude("meets the SLOs at no level", "meets the SLOs at no level it was run or predicted at")
        if pricing is None:
            c.exclude("no price", f"no price: pass --price {label}=PER_HOUR or --owned {label}=PURCHASE:YEARS:WATTS")
        price(c, pricing, w.agents)
    return out


def rank(cands: list[Candidate], capacity: bool = False) -> tuple[list[Candidate], list[Candidate]]:
    """The boxes in the running, cheapest first (per million output tokens, or per agent-hour at the SLOs), and
    the excluded."""

    def key(c: Candidate) -> float | None:
        return c.cost_per_agent_hour if capacity else c.cost_per_mtok

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
        return f"does not fit: {c.memory_text()} ({_over(need / usable - 1)})"
    return c.excluded or ""


def _box_key(key: str, flag: str, cat: Catalog, labels: tuple[str, ...]) -> str:
    """The id a price is kept under: a run label of --runs as given, else the catalog box the id or alias names
    (the alias table every command reads, shown by ``tokenbench hardware``); anything else is a one-line error."""
    if key in labels:
        return key
    try:
        return cat.find_hardware(key).id
    except UsageError as e:
        runs = f" nor a run of --runs ({', '.join(labels)})" if labels else ""
        raise UsageError(f"{flag} {key}=...: {str(e).split(';')[0]}{runs}; 'tokenbench hardware' lists the ids and "
                         "aliases") from None


def _numbers(texts: list[str], positive: int) -> list[float]:
    """The numbers of a price option, each finite, the first ``positive`` of them above 0 and the rest 0 or more;
    a ValueError for anything else (a missing part, a word, NaN, a negative)."""
    values = [float(t) for t in texts]
    if not values or any(not math.isfinite(v) or v < 0 or (i < positive and v == 0) for i, v in enumerate(values)):
        raise ValueError(texts)
    return values


def parse_prices(prices: list[str], owned: list[str], currency: str, kwh_price: float, cat: Catalog | None = None,
                 labels: tuple[str, ...] = ()) -> dict[str, Pricing]:
    """--price ID=PER_HOUR and --owned ID=PURCHASE:YEARS:WATTS, each keyed by the box's catalog id (an alias
    resolved) or a run label of ``labels``."""
    cat = cat or Catalog.load()
    out: dict[str, Pricing] = {}
    for p in prices:
        key, sep, val = p.partition("=")
        try:
            (price,) = _numbers([val] if sep else [], positive=1)
        except ValueError:
            raise UsageError(f"--price {p}: write ID=PER_HOUR, a price above 0, e.g. nvidia-l40s=0.9") from None
        box = _box_key(key, "--price", cat, labels)
        if box in out:
            raise UsageError(f"--price {p}: {box} is priced twice; give each box one price")
        out[box] = Pricing(currency=currency, price_per_hour=price)
    for o in owned:
        key, _, val = o.partition("=")
        try:
            purchase, years, watts = _numbers(val.split(":"), positive=2)
        except ValueError:
            raise UsageError(f"--owned {o}: write ID=PURCHASE:YEARS:WATTS (a price and years above 0, watts 0 or "
                             "more), e.g. amd-ryzen-ai-max-395=2500:3:120") from None
        box = _box_key(key, "--owned", cat, labels)
        if box in out:  # one box, two costs: one of them would be dropped without a word
            twice = "given --price and --owned" if out[box].price_per_hour is not None else "owned twice"
            raise UsageError(f"--owned {o}: {box} is {twice}; give each box one cost")
        out[box] = Pricing(currency=currency, purchase=purchase, life_years=years, watts=watts, kwh_price=kwh_price)
    return out


def require_parity(store: Store, cands: list[Candidate], reference: str) -> None:
    """Exclude every candidate whose quality is not shown to match the reference box's: measured boxes need a
    quality run under their label, made with the reference's request settings, that no task of the reference's
    beats (paired verdict); a prediction has no quality at all."""
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
        if q.apart is not None:  # not compared: no verdict either way, so no parity shown
            c.exclude("quality runs not comparable", f"parity with {reference} not shown: {q.apart.no_verdict()}; "
                      f"rerun {c.box}'s with {q.apart.b}")
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
    instead of per million tokens at ``agents``; ``sessions``: on agent sessions of this shape, the prefix cache
    on, always by cost per agent-hour; ``parallel``: llama.cpp's slots (None: its default where memory holds
    them)."""

    model: str
    agents: int = 16
    input_len: int = 4096
    output_len: int = 512
    ttft_p99_ms: float | None = None
    tpot_ms: float | None = None
    currency: str = DEFAULT_CURRENCY
    prices: tuple[str, ...] = ()
    owned: tuple[str, ...] = ()
    kwh_price: float = DEFAULT_KWH_PRICE  # of owned boxes
    runs: tuple[str, ...] = ()  # ids, id prefixes or labels
    capacity: bool = False
    parity_with: str | None = None  # keep only measured boxes whose quality is as this box's
    latest: bool = False
    db: str | None = None  # None: $TOKENBENCH_DB or the user data dir
    sessions: SessionShape | None = None
    parallel: int | None = None


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

        w = asdict(self.workload)
        if self.workload.sessions is not None:  # a session's lengths as a prediction's manifest keeps them (its
            # draws' own fields, not the dataclass's unused zeros), and no request lengths it never had
            w |= {"sessions": self.workload.sessions.workload(), "input_len": None, "output_len": None}
        return {"tool": "tokenbench", "kind": "recommend", "currency": self.workload.currency, "workload": w,
                "ranked_by": "cost_per_agent_hour" if self.capacity else "cost_per_mtok",
                "ranked": [asdict(c) for c in self.ranked], "excluded": [asdict(c) for c in self.excluded],
                "closest": [asdict(c) | {"relative_miss": (shortfall(c) or (0, None))[1]} for c in self.closest]}


def recommend(cfg: RecommendConfig) -> Recommendation:
    """``tokenbench recommend``'s work: every catalog box predicted, the measured runs read from the store, the
    parity rule applied, then ranked."""
    from .reader import LOADED, load_result

    if cfg.agents < 1:
        raise UsageError("--agents must be at least 1")
    by_capacity = cfg.capacity or cfg.sessions is not None
    if by_capacity and cfg.ttft_p99_ms is None and cfg.tpot_ms is None:
        flag = "--sessions" if cfg.sessions is not None else "--capacity"
        raise UsageError(f"{flag} ranks by the agents each box serves within an SLO: give --ttft-p99 (e.g. 2s) "
                         "and/or --tpot (e.g. 50ms)")
    w = Workload(cfg.model, cfg.agents, cfg.input_len, cfg.output_len, cfg.ttft_p99_ms, cfg.tpot_ms, cfg.currency,
                 cfg.sessions, cfg.parallel)
    cat = Catalog.load()
    cat.find_model(cfg.model)  # an unknown model is an error, not a table of exclusions
    store = Store(cfg.db, readonly=True) if cfg.runs or cfg.parity_with else None
    runs = [load_result(store, r, latest=cfg.latest, kinds=LOADED, command="recommend")
            for r in cfg.runs] if cfg.runs and store is not None else []
    labels = tuple(dict.fromkeys([*cfg.runs, *(str(r.manifest.label or r.run_id) for r in runs)]))
    prices = parse_prices(list(cfg.prices), list(cfg.owned), cfg.currency, cfg.kwh_price, cat, labels)
    cands = predicted(cat, Calibration.packaged(), w, prices, by_capacity)
    cands += measured(runs, w, _by_label(prices, cfg.runs, runs), by_capacity, cat)
    if cfg.parity_with and store is not None:
        require_parity(store, cands, cfg.parity_with)
    ok, excluded = rank(cands, by_capacity)
    return Recommendation(w, by_capacity, ok, excluded, closest(cands))


def _by_label(prices: dict[str, Pricing], refs: tuple[str, ...], runs: list[RunResult]) -> dict[str, Pricing]:
    """The prices, a run's also under its label where the user keyed it by the id or prefix given to --runs."""
    out = dict(prices)
    for ref, r in zip(refs, runs):
        if ref in prices:
            out.setdefault(str(r.manifest.label or r.run_id), prices[ref])
    return out
