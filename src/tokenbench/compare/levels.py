"""Two runs level by level: rows aligned on the shared workload axes (test, depth, concurrency), a ratio column
with its 95% interval and the faster side named only where the interval excludes 1 (``bootstrap``), crossovers,
the effective-serving line, and the "different model shapes" trap; and the table and legend that print them.

Works on any kind of run (sweeps, depth runs, imports, predictions) since all are levels in the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..bootstrap import MEANS, RESAMPLES, TAIL, Interval, LevelSamples, interval, run_samples
from ..jsontext import finite_number
from ..levels import LevelSummary, of_depth, of_serving
from ..results import RunResult
from ..session_view import BUSTED, cache_of, is_replay_run, is_session_run
from ..sweep_table import per_agent_shown, tpot_shown, tpot_unseen
from .effective import effective_line
from .sides import one_run, run_name, shape_warnings

if TYPE_CHECKING:
    from ..store import Store


#: Where a ratio has no interval (a side without samples: an import, a prediction), ratios closer to 1 than this
#: are a tie and farther a win: a stated rule, not a test (it guesses a run-to-run spread it did not measure).
TIE = 1.05
#: The fewest requests a p99 is read from before a side is named on it without an interval: below, it is the
#: slowest request or two (the sweep marks such a p99 an estimate at the same count)
P99_FLOOR = 100

Getter = Callable[[LevelSummary], float | None]


#: The band a prediction keeps for each metric compare shows (Manifest.band_pct's keys).
BAND_OF = {"Aggregate output": "throughput", "Per-agent": "throughput", "Median TTFT": "ttft", "P99 TTFT": "ttft",
           "Median TPOT": "tpot", "Prefill": "prefill", "Decode": "decode", "pp": "prefill", "tg": "decode"}


def band_of(r: RunResult, metric: str) -> float | None:
    """A predicted run's band for a metric as a share of its estimate (0.2: ±20%); 0 for a measured run (its figure
    is what it measured); None for a prediction that kept no band for it."""
    if not r.predicted_mark:
        return 0.0
    pct = (r.manifest.band_pct or {}).get(BAND_OF.get(metric, ""))
    return float(pct) / 100 if finite_number(pct) else None


def band_range(ratio: float, x: float | None, y: float | None, higher_better: bool = True,
               fast: tuple[float | None, float | None] = (None, None)) -> tuple[float, float] | None:
    """Where A/B lies when A measures within ±x of its figure and B within ±y (None without both bands); a band
    of 100% or more reaches zero, so the range is unbounded on that side. ``fast``: each side's physical limit as
    a share of its figure (a rate's ceiling, a time's floor; None: not known), where its band's fast end stops."""
    if x is None or y is None or (x == 0 and y == 0):
        return None
    (a_low, a_high), (b_low, b_high) = (_reach(x, fast[0], higher_better), _reach(y, fast[1], higher_better))
    return ratio * a_low / b_high, ratio * a_high / b_low if b_low > 0 else float("inf")


def _reach(pct: float, fast: float | None, higher_better: bool) -> tuple[float, float]:
    """Where a side's figure may lie, as a share of it, within ±``pct``: down to zero at most, its fast end (a
    rate's top, a time's bottom) no further than its limit."""
    low, high = max(1 - pct, 0.0), 1 + pct
    if fast is None:
        return low, high
    return (low, min(high, max(fast, 1.0))) if higher_better else (max(low, min(fast, 1.0)), high)


def fast_share(metric: str, s: LevelSummary) -> float | None:
    """A predicted level's physical limit for ``metric`` as a share of its figure there (None: the level keeps
    none): the rates' ceilings, the times' floors, and the rates made of a time (prefill from TTFT, decode from
    TPOT) from that time's floor. A p99 TTFT is held at the slowest prompt's floor, or the median's where the
    level keeps no other: no request is faster than that."""
    limits = s.limits or {}
    ttft, tpot = getattr(s, "ttft_ms", None), getattr(s, "tpot_ms", None)
    shares: dict[str, tuple[str, float | None, bool]] = {  # the limit's key, the figure, whether it is its inverse
        "Aggregate output": ("output_throughput_tps", getattr(s, "output_throughput_tps", None), False),
        "Per-agent": ("output_throughput_tps", getattr(s, "output_throughput_tps", None), False),
        "Median TTFT": ("ttft_ms", ttft.p50 if ttft else None, False),
        "P99 TTFT": ("ttft_p99_ms" if "ttft_p99_ms" in limits else "ttft_ms", ttft.p99 if ttft else None, False),
        "Median TPOT": ("tpot_ms", tpot.p50 if tpot else None, False),
        "Prefill": ("ttft_ms", ttft.p50 if ttft else None, True),
        "Decode": ("tpot_ms", tpot.p50 if tpot else None, True),
        "pp": ("pp_tps", getattr(s, "pp_tps", None), False),
        "tg": ("tg_tps", getattr(s, "tg_tps", None), False),
    }
    key, figure, inverse = shares.get(metric, ("", None, False))
    limit = limits.get(key)
    if not limit or not figure:
        return None
    return figure / limit if inverse else limit / figure


#: (name, unit, higher is better, getter)
METRICS: list[tuple[str, str, bool, Getter]] = [
    # the rates as the sweep table shows them: over a level's plateau where it held its load
    ("Aggregate output", "tok/s", True, of_serving(lambda s: s.sustained_tps or None)),
    # each figure as the sweep table shows it, none where the table shows "—": a per-agent rate under one request
    # in flight, a median TPOT (and the decode rate from it) of answers that came whole in one network read
    ("Per-agent", "tok/s", True, of_serving(per_agent_shown)),
    ("Median TTFT", "ms", False, of_serving(lambda s: s.ttft_ms.p50)),
    ("P99 TTFT", "ms", False, of_serving(lambda s: s.ttft_ms.p99)),
    ("Median TPOT", "ms", False, of_serving(tpot_shown)),
    ("Prefill", "tok/s", True, of_serving(lambda s: s.prefill_tps)),
    ("Decode", "tok/s", True, of_serving(lambda s: None if tpot_unseen(s) else s.decode_tps)),
    ("pp", "tok/s", True, of_depth(lambda s: s.pp_tps)),
    ("tg", "tok/s", True, of_depth(lambda s: s.tg_tps)),
]


def level_key(s: LevelSummary) -> tuple[str, int, int, int, str, float]:
    """The workload axes a row is aligned on: test, depth, concurrency, a serving level's prompt length (to the
    nearest 64 tokens, so a BOS token or a chat template does not split a row), a session level's cache mode
    (a session run measures each concurrency twice, warm and busted; its prompts grow turn by turn, so their mean
    length aligns nothing) and an open loop's rate (its levels all have concurrency 0). A llama-bench test names
    its own length (pp512), which some sources also state as a prompt length and others do not."""
    test = s.test or "serve"
    cache = cache_of(s) or ""
    prompt = round((s.input_tokens_mean or 0) / 64) * 64 if test == "serve" and not cache else 0
    return (test, s.depth or 0, s.concurrency or 0, prompt, cache, getattr(s, "rate", None) or 0.0)


def _point(c: int, p: int, cache: str, rate: float) -> str:
    """A serving point in words: "concurrency 4 at ~128 tokens in", "rate 0.5/s at ~128 tokens in"."""
    prompt = f" at ~{p:,} tokens in" if p else ""
    if rate:
        return f"rate {rate:g}/s{prompt}"
    return f"concurrency {c}{prompt}" + (f", {cache} cache" if cache else "")


def points(res: RunResult, most: int = 4) -> str:
    """A run's operating points, as compare aligns them: "pp512 at depth 0, tg128 at depth 32768" or
    "concurrency 1 at 4096 tokens in, concurrency 4 at 4096 tokens in" or "concurrency 4, warm cache"."""
    return points_said({level_key(o.summary) for o in res.outcomes}, most)


def points_said(keys: set[tuple[str, int, int, int, str, float]], most: int = 4) -> str:
    """Operating points (``level_key``s) in words, in order, the first ``most`` of them."""
    said = [_point(c, p, k, r) if t == "serve" else f"{t} at depth {d}" for t, d, c, p, k, r in sorted(keys)]
    return ", ".join(said[:most]) + (f" and {len(said) - most} more" if len(said) > most else "") or "no levels"


@dataclass(slots=True)
class CompareRow:
    test: str
    depth: int
    concurrency: int
    input_len: int
    metric: str
    unit: str
    a: float
    b: float
    higher_better: bool
    cache: str | None = None  # a session level's cache mode (warm, busted)
    interval: Interval | None = None  # A/B's 95% interval; None where a side has no samples
    rate: float | None = None  # an open loop's level: the requests a second it offered (its concurrency is 0)
    #: where a side is a prediction and no interval: the range A/B lies in when each predicted side measured within
    #: its band (80% of held-out rows of its kind do), a measured side being its figure
    band: tuple[float, float] | None = None
    #: a p99 from fewer requests than it needs on a side (``P99_FLOOR``) and no interval: no side is named
    thin: bool = False
    #: a depth rate's standard deviation on each side where no interval could be drawn (a llama-bench import gives
    #: a sd and no count): means apart by no more than the two together are not called apart
    spread: tuple[float, float] | None = None

    @property
    def ratio(self) -> float:
        return self.a / self.b if self.b else float("inf")

    def winner(self) -> int:
        """0: no significant difference (the interval holds 1; with no interval, a ratio within ``TIE``); 1: A
        is better; 2: B is better."""
        if self.interval is not None:
            if not self.interval.excludes_one():
                return 0
            larger = self.interval.low > 1
        elif self.thin:
            return 0
        elif self.band is not None:
            if self.band[0] <= 1 <= self.band[1]:
                return 0
            larger = self.band[0] > 1
        elif self.spread is not None and abs(self.a - self.b) <= sum(self.spread):
            return 0  # "B 1.15x (5% rule)" of 2,744 against 3,142 ± 1,031
        else:
            if 1 / TIE < self.ratio < TIE:
                return 0
            larger = self.ratio > 1
        return 1 if larger == self.higher_better else 2

    @property
    def rule(self) -> str:
        """How the winner was decided: by the interval, by the predicted sides' bands, or (no samples, no band) by
        the fixed 5% rule."""
        if self.interval is not None:
            return "95% interval"
        if self.thin:
            return f"p99 under {P99_FLOOR} requests"
        if self.band is not None:
            return "predicted bands"
        return "mean ± sd" if self.spread is not None else f"{TIE - 1:.0%} rule"

    def factor(self) -> float:
        r = self.ratio
        return r if r >= 1 else 1 / r


@dataclass(slots=True)
class Comparison:
    a: str
    b: str
    rows: list[CompareRow]
    crossovers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    effective: list[str] = field(default_factory=list)
    #: the operating points only one run has, in words ("only B has concurrency 8"): not in the rows
    unmatched: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The rows as ``compare --json`` and the JSON report write them: each with its ratio, the winner's name
        (None: a tie) and the rule that decided it; ``interval`` is {low, high, how_a, how_b, n_a, n_b} or None."""
        doc = asdict(self)
        for row, r in zip(doc["rows"], self.rows):
            row.update(ratio=r.ratio, winner={0: None, 1: self.a, 2: self.b}[r.winner()], rule=r.rule)
        return doc


def crossovers(rows: list[CompareRow], a: str, b: str) -> list[str]:
    """Where the faster box changes: along depth for llama-bench tests, along concurrency for serving (a session
    run's warm and busted levels each a series of their own)."""
    out = []
    series: dict[tuple[str, str, int, str], list[CompareRow]] = {}
    for r in rows:
        if r.rate:  # an open loop's levels have no concurrency to cross over along
            continue
        fixed = r.concurrency if r.test != "serve" else r.depth
        series.setdefault((r.test, r.metric, fixed * 1_000_000 + r.input_len, r.cache or ""), []).append(r)
    for (test, metric, _, cache), rs in series.items():
        axis = "depth" if test != "serve" else "concurrency"
        rs.sort(key=lambda r: r.depth if axis == "depth" else r.concurrency)
        decided = [r for r in rs if r.winner()]
        for p, q in zip(decided, decided[1:]):
            if p.winner() != q.winner():
                at: Callable[[Any], str] = (lambda r: f"{r.depth // 1024}K" if r.depth >= 1024 else str(r.depth)) \
                    if axis == "depth" else (lambda r: str(r.concurrency))
                out.append(f"faster box changes between {at(p)} and {at(q)} {axis} ({test}"
                           f"{' ' + cache if cache else ''} {metric}): {a if p.winner() == 1 else b} then "
                           f"{a if q.winner() == 1 else b}")
    return out


#: The warning of two runs with no row in common (two capacity searches often: each bisects to its own levels).
NO_SHARED_POINT = ("the two runs share no operating point (test, depth, concurrency, prompt length to the nearest "
                   "64 tokens, cache): nothing to align")
#: The rates over a level's whole window, ramp and drain included: what both sides are compared by where only one
#: has a plateau (a tool's summary file states no more than its whole window)
WHOLE_WINDOW: dict[str, Getter] = {"Aggregate output": of_serving(lambda s: s.output_throughput_tps or None),
                                   "Per-agent": of_serving(lambda s: s.per_agent_tps)}


def _getter(name: str, get: Getter, sa: LevelSummary, sb: LevelSummary) -> tuple[Getter, bool]:
    """The getter a row compares by, and whether it fell back to the whole window: a rate over one side's plateau
    against the other's whole window is no comparison (two imports of one AIPerf run read 1.31x apart)."""
    plateaus = {getattr(s, "plateau", None) is not None for s in (sa, sb)}
    if name in WHOLE_WINDOW and len(plateaus) == 2:
        return WHOLE_WINDOW[name], True
    return get, False


def _fewest(*sides: LevelSummary) -> float:
    """The fewest requests either side's TTFT was measured over; a side that does not say (a tool's summary of
    percentiles alone) is not held to a count it never stated."""
    return min(getattr(getattr(s, "ttft_ms", None), "n", 0) or float("inf") for s in sides)


def _unsampled(row: CompareRow, a: RunResult, b: RunResult, sa: LevelSummary, sb: LevelSummary) -> CompareRow:
    """A row no interval could be drawn for, with what decides it instead: a predicted side's band, a p99 too thin
    to name a side on, or a depth rate's standard deviations."""
    # a measured p99 of a few requests is their slowest one or two, against a prediction as against a measurement
    row.thin = row.metric == "P99 TTFT" and _fewest(sa, sb) < P99_FLOOR
    if row.thin:
        return row
    row.band = band_range(row.a / row.b, band_of(a, row.metric), band_of(b, row.metric), row.higher_better,
                          (fast_share(row.metric, sa), fast_share(row.metric, sb)))
    if row.band is None:
        row.spread = _spread(row.metric, sa, sb)
    return row


def _spread(metric: str, sa: LevelSummary, sb: LevelSummary) -> tuple[float, float] | None:
    """Each side's standard deviation of a depth rate, where either side gives one."""
    if metric not in MEANS:
        return None
    sds = [getattr(s, MEANS[metric][1], None) for s in (sa, sb)]
    return (sds[0] or 0.0, sds[1] or 0.0) if any(sds) else None


def compare(a: RunResult, b: RunResult, agents: int = 16, tokens: int = 200, store: Store | None = None) -> Comparison:
    """The two runs row by row. ``store``: where their requests are, for the intervals of levels run once (a
    repeated level's repetitions are in the results already); without it those rows have no interval."""
    oa = {level_key(o.summary): o for o in a.outcomes}
    ob = {level_key(o.summary): o for o in b.outcomes}
    shared = sorted(set(oa) & set(ob), key=lambda k: (*k[:4], k[4] == BUSTED, k[5]))  # warm before busted
    samples: tuple[dict[int, LevelSamples], dict[int, LevelSamples]] = (
        (run_samples(a, store), run_samples(b, store)) if shared else ({}, {}))
    rows = []
    windowed = False
    for key in shared:
        sa, sb = oa[key].summary, ob[key].summary
        # the run and the level seed each side's draws: the same runs give the same interval every time
        seeds = [f"{r.run_id}:{o.idx}" for r, o in ((a, oa[key]), (b, ob[key]))]
        for name, unit, higher, get in METRICS:
            get, whole = _getter(name, get, sa, sb)
            windowed |= whole
            va, vb = get(sa), get(sb)
            if va and vb:
                iv = interval(va, vb, samples[0].get(oa[key].idx), samples[1].get(ob[key].idx), sa, sb, name, get,
                              seeds) if a.run_id and b.run_id else None
                row = CompareRow(key[0], key[1], key[2], key[3], name, unit, va, vb, higher, key[4] or None, iv,
                                 rate=key[5] or None)
                rows.append(_unsampled(row, a, b, sa, sb) if iv is None else row)
    cmp = Comparison(run_name(a), run_name(b), rows, warnings=shape_warnings(a, b))
    if windowed:
        cmp.warnings.append("one side's output rates are over its plateau and the other's only over its whole window "
                            "(a tool's summary states no more): both compared over the whole window, ramp and drain "
                            "included")
    if not rows:
        cmp.warnings.append(f"{NO_SHARED_POINT}; A has {points(a)}, B {points(b)}")
    else:  # a level only one run has is not compared, and the reader is told which
        cmp.unmatched = [f"only {side} has {points_said(keys)}" for side, keys in (("A", set(oa) - set(ob)),
                                                                                  ("B", set(ob) - set(oa))) if keys]
    cmp.crossovers = crossovers(rows, cmp.a, cmp.b)
    for res in (a,) if one_run(a, b) else (a, b):
        # a session's requests grow turn by turn: N agents x M tokens is no question a session run answers
        line = None if is_session_run(res) or is_replay_run(res) else effective_line(res, agents, tokens, windowed)
        if line:
            cmp.effective.append(line)
    return cmp


def figure(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def times(v: float) -> str:
    """A ratio: two decimals from 0.1 to 10, three digits to 1,000, else two significant digits."""
    if v == float("inf"):
        return "∞"
    return f"{v:.2f}" if 0.1 <= v < 10 else f"{v:.3g}" if 10 <= v < 1000 else f"{v:.2g}"


def metric_label(name: str, unit: str) -> str:
    """A metric with its unit, short enough for a column: "Aggregate tok/s", "Median TTFT ms"."""
    return f"{name.removesuffix(' output')} {unit}"


def ratio_cell(r: CompareRow, mark: str = "") -> str:
    """A/B and its 95% interval: "1.11 (1.08–1.15)"; the ratio alone where it has none. ``mark``: after the
    ratio ("×" in the report)."""
    iv = r.interval
    if iv is None and r.band is not None:
        if r.band[1] == float("inf"):  # B's band reaches no rate at all: A/B has no upper end
            return times(r.ratio) + mark + f" ({times(r.band[0])} or more, band)"
        return times(r.ratio) + mark + f" ({times(r.band[0])}–{times(r.band[1])} band)"
    return times(r.ratio) + mark + (f" ({times(iv.low)}–{times(iv.high)})" if iv is not None else "")


def verdict(r: CompareRow, a: str = "A", b: str = "B") -> str:
    """The faster side and by how much ("A 1.16×"), or "not significant" where the interval holds 1; a row with
    no interval says the rule that decided it ("A 1.21× (5% rule)", "tie (5% rule)")."""
    if r.thin:  # a p99 of 8 requests is their slowest: no rule of thumb names a side on it
        return f"— ({r.rule})"
    w = r.winner()
    said = "not significant" if w == 0 else f"{a if w == 1 else b} {r.factor():.2f}×"
    if r.interval is None:
        said = (f"tie ({r.rule})" if w == 0 else f"{said} ({r.rule})")
    return said


def ratio_head(rows: list[CompareRow]) -> str:
    """The ratio column's heading, naming the range its cells give: a 95% interval where both sides were sampled,
    an 80% band where a side is a prediction (its band, not a confidence interval), both where the rows mix."""
    sampled = any(r.interval is not None for r in rows)
    banded = any(r.interval is None and r.band is not None for r in rows)
    said = [w for w, has in (("95% CI", sampled), ("80% band", banded)) if has]
    return f"A/B ({' or '.join(said)})" if said else "A/B"


def table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    """The rows as a table: the workload axes, the metric and its unit, both values (A and B: the heading names
    the runs), A/B with its interval or band, and the faster side."""
    rates = bool(c.rows) and all(r.rate for r in c.rows)  # open loops: the column is their rate
    head = ["Test", "Depth", "Rate" if rates else "Concurrency", "Prompt", "Metric", "A", "B", ratio_head(c.rows),
            "Faster"]
    out = []
    for r in c.rows:
        out.append([r.test + (f" {r.cache}" if r.cache else ""), f"{r.depth:,}",
                    (f"{r.rate:g}/s" if rates else f"rate {r.rate:g}/s") if r.rate else str(r.concurrency),
                    f"~{r.input_len:,}" if r.input_len else "—", metric_label(r.metric, r.unit), figure(r.a),
                    figure(r.b), ratio_cell(r), verdict(r)])
    return head, out


#: The table's columns that stay in it whatever they hold (the others, one value in every row, go to a heading).
VALUE_COLUMNS = (5, 6, 7, 8)
#: On a terminal, a concurrency that varies heads its rows ("Concurrency 4") instead of taking a column.
GROUP_COLUMN = 2


#: What a side's draws came from, as the legend says it (``bootstrap.Draws.how``).
_DRAWN = {"requests": "requests", "repetitions": "repetitions",
          "mean ± sd": "mean ± sd over its repetitions (a depth run: the mean drawn from its t distribution)"}


def legend(c: Comparison) -> list[str]:
    """What the ratio column and the verdicts mean, from the rows shown: how the intervals were drawn, and the
    rule that decided the rows without one."""
    sampled = [r.interval for r in c.rows if r.interval is not None]
    banded = sum(1 for r in c.rows if r.interval is None and r.band is not None)
    thin = sum(1 for r in c.rows if r.thin)
    bare = len(c.rows) - len(sampled) - banded - thin
    if not sampled:
        out = ["A/B: A's figure over B's."]
    else:
        hows = " and ".join(_DRAWN[h] for h in sorted({h for iv in sampled for h in (iv.how_a, iv.how_b)}))
        out = [f"A/B: A's figure over B's; 95% CI: its interval, a seeded bootstrap ({RESAMPLES:,} resamples) over "
               f"each level's {hows}. A side is named faster only where the interval excludes 1, else: not "
               "significant (no significant difference)."]
        if any("requests" in (iv.how_a, iv.how_b) for iv in sampled):
            out.append("Over requests it says how sure each run is of its own figure: a rerun can move more (sweep "
                       "--repetitions N; compare then resamples those).")
    if banded:
        out.append(f"predicted bands: {banded} of {len(c.rows)} rows set a PREDICTED side against the other; A/B's "
                   "range is where it lies when each predicted figure measures within its band (80% of held-out "
                   "rows of its kind do), and a side is named faster only where that range excludes 1.")
    if bare:
        out.append(f"{TIE - 1:.0%} rule: {bare} of {len(c.rows)} rows have no interval (no samples on a side, or "
                   f"fewer than {TAIL} requests beyond a percentile on a side: a median needs {round(TAIL / 0.5)}, a "
                   f"p99 {round(TAIL / 0.01)}); there a ratio beyond {TIE:g} names the faster side: a rule of thumb, "
                   "not a test.")
    if thin:
        out.append(f"p99 under {P99_FLOOR} requests: {thin} of {len(c.rows)} rows read a p99 from fewer requests "
                   "than it needs on a side (it is the slowest one or two): no side is named on it.")
    return out
