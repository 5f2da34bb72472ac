"""Two runs side by side: rows aligned on the shared workload axes (test, depth, concurrency), a ratio
column with its 95% interval and the faster side named only where the interval excludes 1 (``bootstrap``),
crossovers, the effective-serving line, and the "different model shapes" trap.

Works on any kind of run (sweeps, depth runs, imports, predictions) since all are levels in the store. Two
agent-session runs are also compared turn by turn (``compare_sessions``): TTFT against context, warm and busted,
session time, and what each box's prefix cache bought; a session run beside one that is not is refused.
"""

from __future__ import annotations

import math
import re

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from . import adapters, session_view
from .bootstrap import RESAMPLES, TAIL, Interval, LevelSamples, interval, run_samples
from .capacity import SURE_LEGEND, CapacityAnswer, answer
from .cost import effective_serving_s
from .errors import UsageError
from .metrics import DepthLevel, LevelSummary, ServingLevel, of_depth, of_serving, serving
from .predict.formats import WEIGHT_BPW
from .results import Manifest, RunResult
from .session_view import BUSTED, WARM, cache_of, is_session_run
from .slo import SLO

if TYPE_CHECKING:
    from .quality.parity import Beside
    from .store import Store

#: Where a ratio has no interval (a side without samples: an import, a prediction), ratios closer to 1 than this
#: are a tie and farther a win: a stated rule, not a test (it guesses a run-to-run spread it did not measure).
TIE = 1.05
#: Aggregate throughput at the highest concurrency over single-stream throughput above which a server whose
#: batching is unknown is taken to batch (queued requests alone gain a little from hidden HTTP overhead).
BATCHING_GAIN = 1.3

Getter = Callable[[LevelSummary], float | None]


#: (name, unit, higher is better, getter)
METRICS: list[tuple[str, str, bool, Getter]] = [
    ("Aggregate output", "tok/s", True, of_serving(lambda s: s.output_throughput_tps or None)),
    ("Per-agent", "tok/s", True, of_serving(lambda s: s.per_agent_tps)),
    ("Median TTFT", "ms", False, of_serving(lambda s: s.ttft_ms.p50)),
    ("P99 TTFT", "ms", False, of_serving(lambda s: s.ttft_ms.p99)),
    ("Median TPOT", "ms", False, of_serving(lambda s: s.tpot_ms.p50)),
    ("Prefill", "tok/s", True, of_serving(lambda s: s.prefill_tps)),
    ("Decode", "tok/s", True, of_serving(lambda s: s.decode_tps)),
    ("pp", "tok/s", True, of_depth(lambda s: s.pp_tps)),
    ("tg", "tok/s", True, of_depth(lambda s: s.tg_tps)),
]


def level_key(s: LevelSummary) -> tuple[str, int, int, int, str]:
    """The workload axes a row is aligned on: test, depth, concurrency, a serving level's prompt length (to the
    nearest 64 tokens, so a BOS token or a chat template does not split a row) and a session level's cache mode
    (a session run measures each concurrency twice, warm and busted; its prompts grow turn by turn, so their mean
    length aligns nothing). A llama-bench test names its own length (pp512), which some sources also state as a
    prompt length and others do not."""
    test = s.test or "serve"
    cache = cache_of(s) or ""
    prompt = round((s.input_tokens_mean or 0) / 64) * 64 if test == "serve" and not cache else 0
    return (test, s.depth or 0, s.concurrency or 0, prompt, cache)


def points(res: RunResult, most: int = 4) -> str:
    """A run's operating points, as compare aligns them: "pp512 at depth 0, tg128 at depth 32768" or
    "concurrency 1 at 4096 tokens in, concurrency 4 at 4096 tokens in" or "concurrency 4, warm cache"."""
    keys = sorted({level_key(o.summary) for o in res.outcomes})
    said = [(f"concurrency {c}" + (f" at {p} tokens in" if p else "") + (f", {k} cache" if k else ""))
            if t == "serve" else f"{t} at depth {d}" for t, d, c, p, k in keys]
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
        else:
            if 1 / TIE < self.ratio < TIE:
                return 0
            larger = self.ratio > 1
        return 1 if larger == self.higher_better else 2

    @property
    def rule(self) -> str:
        """How the winner was decided: by the interval, or (no samples) by the fixed 5% rule."""
        return "95% interval" if self.interval is not None else f"{TIE - 1:.0%} rule"

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

    def to_dict(self) -> dict[str, Any]:
        """The rows as ``compare --json`` and the JSON report write them: each with its ratio, the winner's name
        (None: a tie) and the rule that decided it; ``interval`` is {low, high, how_a, how_b, n_a, n_b} or None."""
        doc = asdict(self)
        for row, r in zip(doc["rows"], self.rows):
            row.update(ratio=r.ratio, winner={0: None, 1: self.a, 2: self.b}[r.winner()], rule=r.rule)
        return doc


def _name(res: RunResult) -> str:
    return str(res.manifest.label or res.run_id)


#: Weight formats a served name or a model file carries after the model's own name, beside the catalog's: Unsloth's
#: dynamic quants (UD-Q4_K_XL), ternary GGUFs, gpt-oss's MXFP4_MOE, MLX's 4bit/8bit, FP8-dynamic checkpoints.
_NAMED_FORMATS = sorted({f.lower() for f in WEIGHT_BPW} | {f"q{b}_k_xl" for b in range(2, 9)} |
                        {"tq1_0", "tq2_0", "mxfp4_moe", "4bit", "8bit", "fp8-dynamic", "int4", "w4a16"},
                        key=len, reverse=True)
#: One suffix that says how a model is stored, not which model it is: a format (after an optional "UD-"), a
#: split file's part ("-00001-of-00003"), an importance-matrix tag, the extension.
FORMAT_SUFFIX = re.compile(r"[-_.:](?:ud-)?(?P<format>" + "|".join(map(re.escape, _NAMED_FORMATS)) +
                           r")$|[-_.](?:\d{5}-of-\d{5}|imat(?:rix)?|gguf)$")


#: A format's other spellings, as the catalog names it.
_FORMAT_ALIASES = {"MXFP4_MOE": "MXFP4", "FP8-DYNAMIC": "FP8", "4BIT": "MLX4", "8BIT": "MLX8"}


def model_identity(name: str) -> tuple[str, str | None]:
    """A model name as the catalog and a server's listing both spell it (no organisation, no case, no format
    suffix: Qwen/Qwen3.6-27B-FP8, gpt-oss-20b-UD-Q4_K_XL.gguf, qwen3-8b:q4_k_m), and the weight format its
    suffix named, if any. A suffix that is no known format (model-q4_instruct, kimi-k2-q3) stays in the name."""
    key, weights = name.strip().lower().rsplit("/", 1)[-1], None
    while (m := FORMAT_SUFFIX.search(key)) is not None:
        said = (m.group("format") or "").upper()
        weights = weights or _FORMAT_ALIASES.get(said, said) or None
        key = key[: m.start()]
    return key, weights


def _model_warnings(ma: Manifest, mb: Manifest) -> list[str]:
    """Different models, or different weight formats, on the two sides."""
    out = []
    # a llama-bench import names its model file too: llama.cpp's own description of it ("gpt-oss 20B Q4_K -
    # Medium") is no served name or catalog id
    names = [str(m.extra["model_file"]) if isinstance(m.extra.get("model_file"), str) else m.model for m in (ma, mb)]
    ids = [model_identity(n) if n else ("", None) for n in names]
    if all(names) and ids[0][0] != ids[1][0]:
        out.append(f"the two sides ran different models ({names[0]} vs {names[1]}): a ratio compares boxes only for "
                   "the same model shape")
    # the format a run states, else the one its model's name carries (a llama-bench import states none)
    fa, fb = ((m.weights or i[1] or "").upper().replace("-", "_") or None for m, i in ((ma, ids[0]), (mb, ids[1])))
    if fa and fb and fa != fb:
        out.append(f"the two sides ran different weight formats ({fa} vs {fb}): a ratio compares boxes only for the "
                   "same model shape")
    return out


def _shape_warnings(a: RunResult, b: RunResult) -> list[str]:
    ma, mb = a.manifest, b.manifest
    out = _model_warnings(ma, mb)
    wa, wb = ma.workload or {}, mb.workload or {}
    la = (wa.get("input_len"), wa.get("output_len"))
    lb = (wb.get("input_len"), wb.get("output_len"))
    if all(la) and all(lb) and la != lb:
        out.append(f"the workloads differ ({la[0]}/{la[1]} vs {lb[0]}/{lb[1]} tokens in/out)")
    # what a prediction assumed (GPUs, slots, micro-batch, flash attention, speculation) is part of what it compares
    sa, sb = (", ".join([m.box or "", *m.shape_parts]) for m in (ma, mb))
    if ma.shape and mb.shape and sa != sb:
        out.append(f"the two predictions assume different shapes ({sa} vs {sb})")
    else:
        out += [f"{_name(r)} assumes {said}" for r, said in ((a, sa), (b, sb))
                if r.manifest.shape and (r.manifest.box != r.manifest.hardware or r.manifest.shape_parts)]
    for r in (a, b):
        if r.predicted_mark:
            out.append(f"{_name(r)} is {r.predicted_mark}, not measured")
    return out


def _sequential(res: RunResult) -> bool:
    """One stream at a time: from what the server said of itself (its adapter and slots), else measured."""
    server = res.manifest.server or {}
    batches = server.get("batches") if "batches" in server else \
        adapters.by_name(res.manifest.engine).batches(server.get("slots"))
    if batches is not None:
        return not batches
    serve = sorted((s for s in serving(o.summary for o in res.outcomes) if s.concurrency and s.output_throughput_tps),
                   key=lambda s: s.concurrency or 0)
    if len(serve) < 2 or serve[0].concurrency != 1:
        return True  # nothing measured shows batching
    return serve[-1].output_throughput_tps < BATCHING_GAIN * serve[0].output_throughput_tps


def _one_stream(s: LevelSummary) -> float | None:
    """A level's single-stream decode rate: a serving level's at concurrency 1, a depth level's tg."""
    return s.decode_tps if isinstance(s, ServingLevel) else s.tg_tps if isinstance(s, DepthLevel) else None


def effective_line(res: RunResult, agents: int, tokens: int) -> str | None:
    """How long `agents` requests of `tokens` tokens take: batched at concurrency N, or one sequential stream."""
    levels = [o.summary for o in res.outcomes]
    serve = [s for s in serving(levels) if s.concurrency and s.output_throughput_tps]
    if serve and not _sequential(res):
        return _batched_line(res, serve, agents, tokens)
    return _sequential_line(res, levels, serve, agents, tokens)


def _batched_line(res: RunResult, serve: list[ServingLevel], agents: int, tokens: int) -> str:
    """N agents at the highest concurrency measured up to N (the lowest measured when all are above it)."""
    at = [s for s in serve if s.concurrency and s.concurrency <= agents]
    s = max(at, key=lambda x: x.concurrency or 0) if at else min(serve, key=lambda x: x.concurrency or 0)
    how = "predicted" if res.predicted_mark else "measured"
    note = "" if s.concurrency == agents else f" ({how} at concurrency {s.concurrency}, the nearest)"
    ttft, tpot = s.ttft_ms.p50, s.tpot_ms.p50
    if ttft is not None and tpot is not None and s.concurrency:
        # each request waits for its first token, then decodes the rest: the level's own medians, in rounds
        # of its concurrency (tokens / aggregate rate would leave the first token's wait out)
        c = s.concurrency
        rounds = math.ceil(agents / c)
        t = rounds * (ttft + (tokens - 1) * tpot) / 1000
        each = (f"{rounds} rounds of {c}, each" if rounds > 1 else f"{min(agents, c)} at once, each request")
        return (f"{_name(res)}: ~{t:,.1f} s batched ({each} TTFT {ttft:,.0f} ms + {tokens - 1} x TPOT {tpot:.1f} "
                f"ms); {s.output_throughput_tps:,.0f} tok/s aggregate{note}")
    t = effective_serving_s(agents, tokens, s.output_throughput_tps)
    return f"{_name(res)}: ~{t:,.1f} s batched, {s.output_throughput_tps:,.0f} tok/s aggregate{note}"


def _sequential_line(res: RunResult, levels: list[LevelSummary], serve: list[ServingLevel], agents: int,
                     tokens: int) -> str | None:
    """N agents in turn on one stream: each request's first token, then its tokens, where a concurrency-1 level
    measured both; else tokens over the decode rate (llama-bench's tg: decoding only, said so)."""
    one = next((s for s in serve if s.concurrency == 1), None)
    ttft, tpot = (one.ttft_ms.p50, one.tpot_ms.p50) if one is not None else (None, None)
    if ttft is not None and tpot is not None:
        t = agents * (ttft + (tokens - 1) * tpot) / 1000
        return (f"{_name(res)}: ~{t:,.1f} s as one sequential stream ({agents} requests in turn, each TTFT "
                f"{ttft:,.0f} ms + {tokens - 1} x TPOT {tpot:.1f} ms)")
    single = next((rate for s in levels if (rate := _one_stream(s)) and not s.depth), None)
    rate = single or (serve[0].output_throughput_tps if serve else None)
    if not rate:
        return None
    t = effective_serving_s(agents, tokens, rate)
    return (f"{_name(res)}: ~{t:,.1f} s as one sequential stream at {rate:,.1f} tok/s"
            + (", decoding only: no time to first token measured" if single else ""))


def crossovers(rows: list[CompareRow], a: str, b: str) -> list[str]:
    """Where the faster box changes: along depth for llama-bench tests, along concurrency for serving (a session
    run's warm and busted levels each a series of their own)."""
    out = []
    series: dict[tuple[str, str, int, str], list[CompareRow]] = {}
    for r in rows:
        fixed = r.concurrency if r.test != "serve" else r.depth
        series.setdefault((r.test, r.metric, fixed * 1_000_000 + r.input_len, r.cache or ""), []).append(r)
    for (test, metric, _, cache), rs in series.items():
        axis = "depth" if test != "serve" else "concurrency"
        rs.sort(key=lambda r: r.depth if axis == "depth" else r.concurrency)
        decided = [r for r in rs if r.winner()]
        for p, q in zip(decided, decided[1:]):
            if p.winner() != q.winner():
                at = (lambda r: f"{r.depth // 1024}K" if r.depth >= 1024 else str(r.depth)) if axis == "depth" \
                    else (lambda r: str(r.concurrency))
                out.append(f"faster box changes between {at(p)} and {at(q)} {axis} ({test}"
                           f"{' ' + cache if cache else ''} {metric}): {a if p.winner() == 1 else b} then "
                           f"{a if q.winner() == 1 else b}")
    return out


#: The warning of two runs with no row in common (two capacity searches often: each bisects to its own levels).
NO_SHARED_POINT = "the two runs share no operating point (test, depth, concurrency): nothing to align"


def compare(a: RunResult, b: RunResult, agents: int = 16, tokens: int = 200, store: Store | None = None) -> Comparison:
    """The two runs row by row. ``store``: where their requests are, for the intervals of levels run once (a
    repeated level's repetitions are in the results already); without it those rows have no interval."""
    oa = {level_key(o.summary): o for o in a.outcomes}
    ob = {level_key(o.summary): o for o in b.outcomes}
    shared = sorted(set(oa) & set(ob), key=lambda k: (*k[:4], k[4] == BUSTED))  # warm before busted
    samples: tuple[dict[int, LevelSamples], dict[int, LevelSamples]] = (
        (run_samples(a, store), run_samples(b, store)) if shared else ({}, {}))
    rows = []
    for key in shared:
        sa, sb = oa[key].summary, ob[key].summary
        # the run and the level seed each side's draws: the same runs give the same interval every time
        seeds = [f"{r.run_id}:{o.idx}" for r, o in ((a, oa[key]), (b, ob[key]))]
        for name, unit, higher, get in METRICS:
            va, vb = get(sa), get(sb)
            if va and vb:
                iv = interval(va, vb, samples[0].get(oa[key].idx), samples[1].get(ob[key].idx), sa, sb, name, get,
                              seeds) if a.run_id and b.run_id else None
                rows.append(CompareRow(key[0], key[1], key[2], key[3], name, unit, va, vb, higher, key[4] or None,
                                       iv))
    cmp = Comparison(_name(a), _name(b), rows, warnings=_shape_warnings(a, b))
    if not rows:
        cmp.warnings.append(NO_SHARED_POINT)
    cmp.crossovers = crossovers(rows, cmp.a, cmp.b)
    for res in (a, b):
        # a session's requests grow turn by turn: N agents x M tokens is no question a session run answers
        line = None if is_session_run(res) else effective_line(res, agents, tokens)
        if line:
            cmp.effective.append(line)
    return cmp


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def _times(v: float) -> str:
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
    return _times(r.ratio) + mark + (f" ({_times(iv.low)}–{_times(iv.high)})" if iv is not None else "")


def verdict(r: CompareRow, a: str = "A", b: str = "B") -> str:
    """The faster side and by how much ("A 1.16×"), or "not significant" where the interval holds 1; a row with
    no interval says the rule that decided it ("A 1.21× (5% rule)", "tie (5% rule)")."""
    w = r.winner()
    said = "not significant" if w == 0 else f"{a if w == 1 else b} {r.factor():.2f}×"
    if r.interval is None:
        said = (f"tie ({r.rule})" if w == 0 else f"{said} ({r.rule})")
    return said


def table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    """The rows as a table: the workload axes, the metric and its unit, both values (A and B: the heading names
    the runs), A/B with its interval, and the faster side."""
    head = ["Test", "Depth", "Concurrency", "Prompt", "Metric", "A", "B", "A/B (95% CI)", "Faster"]
    out = []
    for r in c.rows:
        out.append([r.test + (f" {r.cache}" if r.cache else ""), f"{r.depth:,}", str(r.concurrency),
                    str(r.input_len or "—"), metric_label(r.metric, r.unit), _fmt(r.a), _fmt(r.b), ratio_cell(r),
                    verdict(r)])
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
    bare = len(c.rows) - len(sampled)
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
    if bare:
        out.append(f"{TIE - 1:.0%} rule: {bare} of {len(c.rows)} rows have no interval (no samples on a side, or a p99 "
                   f"of under {round(TAIL / 0.01)} requests); there a ratio beyond {TIE:g} names the faster side: a rule "
                   "of thumb, not a test.")
    return out


# --- agent sessions (issue 25) ----------------------------------------------------------------------------

#: Two sides' contexts at a turn closer than this are one context (a chat template or a marker apart).
SAME_CONTEXT = 0.05


@dataclass(slots=True)
class SessionTurn:
    """One turn at one concurrency on both sides: the context each sent and its TTFT p50, warm and busted."""

    turn: int  # as stored: 0 is the first turn
    context_a: float | None
    context_b: float | None
    a_warm_ms: float | None
    a_busted_ms: float | None
    b_warm_ms: float | None
    b_busted_ms: float | None

    @property
    def warm_ratio(self) -> float | None:
        """A's warm TTFT over B's: below 1, A's first token came sooner."""
        return self.a_warm_ms / self.b_warm_ms if self.a_warm_ms and self.b_warm_ms else None

    @property
    def busted_ratio(self) -> float | None:
        return self.a_busted_ms / self.b_busted_ms if self.a_busted_ms and self.b_busted_ms else None

    def context(self) -> str:
        """One context where both sides sent about the same, else A's and B's ("48K/51K")."""
        a, b = self.context_a, self.context_b
        if a is None or b is None or abs(a - b) <= SAME_CONTEXT * max(a, b):
            return session_view.tokens(a if a is not None else b)
        return f"{session_view.tokens(a)}/{session_view.tokens(b)}"


@dataclass(slots=True)
class SessionSide:
    """One side's session level at one concurrency and cache mode: what a finished session took."""

    cache: str
    sessions: int
    sessions_finished: int
    session_p50_s: float | None
    session_p90_s: float | None
    cached_share: float | None  # the responses' cached prompt tokens / prompt tokens
    server_hit_share: float | None  # the server's own prefix-cache hit share (/metrics)
    output_tps: float | None
    per_agent_tps: float | None

    @classmethod
    def of(cls, s: ServingLevel) -> SessionSide:
        st = s.session
        assert st is not None
        return cls(st.cache, st.sessions, st.sessions_finished, st.session_s.p50, st.session_s.p90, st.cached_share,
                   st.server_hit_share, s.output_throughput_tps or None, s.per_agent_tps)


@dataclass(slots=True)
class SessionBlock:
    """Both sides at one shared concurrency: the turns, each side's levels by cache mode, the cache's gain."""

    concurrency: int
    turns: list[SessionTurn]
    a: dict[str, SessionSide]
    b: dict[str, SessionSide]
    gains: list[str]  # "NAME: turn 20 at 48K context: TTFT 0.31 s cached, 9.8 s uncached (...)"


@dataclass(slots=True)
class SessionComparison:
    a: str
    b: str
    blocks: list[SessionBlock]
    warnings: list[str] = field(default_factory=list)


def _session_turns(a: RunResult, b: RunResult, c: int) -> list[SessionTurn]:
    ta = {t.turn: t for t in session_view.turn_rows(a, c)}
    tb = {t.turn: t for t in session_view.turn_rows(b, c)}
    out = []
    for k in sorted(set(ta) | set(tb)):
        x, y = ta.get(k), tb.get(k)
        out.append(SessionTurn(k, x.context_tokens if x else None, y.context_tokens if y else None,
                               x.warm_ttft_ms if x else None, x.busted_ttft_ms if x else None,
                               y.warm_ttft_ms if y else None, y.busted_ttft_ms if y else None))
    return out


def _session_workload_warnings(a: RunResult, b: RunResult) -> list[str]:
    """The session parameters the two runs' manifests give differently (turns, shared prefix, distributions). The
    seed is not one: it picks the words, not the shape, and two runs without --seed always differ in it."""
    wa, wb = a.manifest.workload or {}, b.manifest.workload or {}
    said = [f"{k} {wa.get(k, '(not given)')} vs {wb.get(k, '(not given)')}" for k in dict.fromkeys([*wa, *wb])
            if k != "seed" and wa.get(k) != wb.get(k)]
    return [f"the session workloads differ ({'; '.join(said)})"] if said else []


def compare_sessions(a: RunResult, b: RunResult) -> SessionComparison:
    """Two agent-session runs side by side at each concurrency both ran: per turn, the context and the TTFT p50
    on each side, warm and busted; per level, the session time; per side, what the cache bought. Refuses
    (``UsageError``) a session run beside one that is not, and two session runs that share no concurrency."""
    why = session_view.mismatch(a, b)
    if why is None and not session_view.is_session_run(a):
        why = f"{_name(a)} and {_name(b)} are no agent-session runs: compare them as sweeps"
    if why is None and not set(session_view.concurrencies(a)) & set(session_view.concurrencies(b)):
        why = (f"{_name(a)} and {_name(b)} share no session concurrency: the first ran "
               f"{', '.join(map(str, session_view.concurrencies(a))) or 'none'}; the second "
               f"{', '.join(map(str, session_view.concurrencies(b))) or 'none'}")
    if why is not None:
        raise UsageError(why)
    la, lb = session_view.levels(a), session_view.levels(b)
    blocks = []
    for c in sorted(set(session_view.concurrencies(a)) & set(session_view.concurrencies(b))):
        gains = [f"{_name(r)}: {g}" for r in (a, b) if (g := session_view.gain_line(r, c))]
        blocks.append(SessionBlock(
            c, _session_turns(a, b, c),
            {k: SessionSide.of(s) for (cc, k), s in la.items() if cc == c},
            {k: SessionSide.of(s) for (cc, k), s in lb.items() if cc == c}, gains))
    warnings = _model_warnings(a.manifest, b.manifest) + _session_workload_warnings(a, b)
    warnings += session_view.warnings(a) + session_view.warnings(b)
    warnings += [f"{_name(r)} is {r.predicted_mark}, not measured" for r in (a, b) if r.predicted_mark]
    return SessionComparison(_name(a), _name(b), blocks, warnings)


def _ratio(x: float | None, y: float | None) -> str:
    if not (x and y):
        return "—"
    r = x / y
    return f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"


def session_turn_table(block: SessionBlock, every: bool = False) -> tuple[list[str], list[list[str]]]:
    """TTFT p50 in seconds at each turn shown (turns counted from 1; ``every``: all of them, else a sample of a
    long session), both sides, warm and busted: seven columns that fit 80 (the sides' names go in the heading
    above the table, never in a column)."""
    head = ["Turn", "Context", "A warm", "A busted", "B warm", "B busted", "Warm A/B"]
    turns = [t.turn for t in block.turns]
    shown = set(turns if every else session_view.shown_turns(turns))
    s = session_view.seconds
    rows = [[str(t.turn + 1), t.context(), s(t.a_warm_ms), s(t.a_busted_ms), s(t.b_warm_ms), s(t.b_busted_ms),
             _ratio(t.a_warm_ms, t.b_warm_ms)] for t in block.turns if t.turn in shown]
    return head, rows


#: The session table's rows: (label, the figure of one side's level, how it is written, a ratio makes sense).
_SESSION_ROWS: list[tuple[str, Callable[[SessionSide], float | None], Callable[[float | None], str], bool]] = [
    ("Session p50 (s)", lambda x: x.session_p50_s, lambda v: session_view.seconds(v * 1000 if v is not None else None),
     True),
    ("Session p90 (s)", lambda x: x.session_p90_s, lambda v: session_view.seconds(v * 1000 if v is not None else None),
     True),
    ("Cached share", lambda x: x.cached_share, session_view.share, False),
    ("Server hits", lambda x: x.server_hit_share, session_view.share, False),
    ("Output tok/s", lambda x: x.output_tps, lambda v: "—" if v is None else _fmt(v), True),
    ("Per-agent tok/s", lambda x: x.per_agent_tps, lambda v: "—" if v is None else _fmt(v), True),
]


def session_level_table(block: SessionBlock) -> tuple[list[str], list[list[str]]]:
    """Each side's levels at the block's concurrency, warm and busted: sessions finished, session time, what
    the cache served, throughput. A row no level has a figure for is left out."""
    sides = [block.a.get(WARM), block.a.get(BUSTED), block.b.get(WARM), block.b.get(BUSTED)]
    head = ["Per level", "A warm", "A busted", "B warm", "B busted", "Warm A/B"]
    rows = [["Sessions done", *(f"{x.sessions_finished}/{x.sessions}" if x else "—" for x in sides), ""]]
    for label, get, fmt, ratio in _SESSION_ROWS:
        values = [get(x) if x else None for x in sides]
        if any(v is not None for v in values):
            rows.append([label, *map(fmt, values), _ratio(values[0], values[2]) if ratio else ""])
    return head, rows


# --- capacity under an SLO (issue 22) ---------------------------------------------------------------------

#: How a search ended, as a cell says it (``capacity.Ended``).
_ENDED_CELL = {"resolved": "resolved", "none": "no level met", "all": "every level met",
               "budget": "unresolved", "interrupted": "interrupted", "running": "cut short"}
#: What a side's capacity is, given how its search ended: the number itself, or a bound on it.
Bound = Literal["exact", "at least", "fewer than", "between", "no verdict"]
#: The objective a capacity search adds to an over-saturated level (``capacity.LevelStop.apply``): its limit is
#: that level's own queue, not part of the SLO asked for.
_QUEUE = "queue"


def _value(found: CapacityAnswer, v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:g}" if found.spec.axis == "rate" else f"{v:.0f}"


def _unit(found: CapacityAnswer, v: float | None) -> str:
    return "agent" if found.spec.axis == "concurrency" and v == 1 else found.unit


def bound(found: CapacityAnswer) -> Bound:
    """What ``found.capacity`` says of the box: the capacity itself (a resolved search), a lower bound (every
    level met, or a search cut before it resolved), an upper one (no level met), or nothing."""
    if found.capacity is None:
        return "no verdict" if found.first_fail is None else "fewer than"
    if found.ended == "resolved" and found.first_fail is not None:
        return "exact"
    return "at least" if found.first_fail is None else "between"


def capacity_text(found: CapacityAnswer) -> str:
    """"4 agents", "at least 16 agents", "fewer than 1 agent", "between 4 and 8 agents", "no verdict"."""
    cap, fail, kind = found.capacity, found.first_fail, bound(found)
    if kind == "exact":
        return f"{_value(found, cap)} {_unit(found, cap)}"
    if kind == "at least":
        return f"at least {_value(found, cap)} {found.unit}"
    if kind == "fewer than":
        return f"fewer than {_value(found, fail)} {_unit(found, fail)}"
    if kind == "between":
        return f"between {_value(found, cap)} and {_value(found, fail)} {found.unit}"
    return "no verdict"


def slo_words(found: CapacityAnswer) -> str:
    """The SLO as a buyer reads it ("TTFT p99 <= 2 s"): a capacity run stores it so; a sweep stores its terse
    form (ttft_p99<=2000ms), said again here in words."""
    try:
        return SLO.parse(found.slo.replace("<=", "=").replace(">=", "=")).headline()
    except ValueError:
        return found.slo


def _slo_key(found: CapacityAnswer) -> frozenset[tuple[str, float]]:
    """The objectives that decided the verdicts, each with its limit (the errors budget included, an
    over-saturated level's queue not): what makes two searches' capacities comparable."""
    return frozenset((c.name, round(c.limit, 9)) for v in found.verdicts for c in v.checks if c.name != _QUEUE)


def same_slo(a: CapacityAnswer, b: CapacityAnswer) -> bool:
    ka, kb = _slo_key(a), _slo_key(b)
    if ka and kb:
        return ka == kb
    return slo_words(a) == slo_words(b)  # no stored checks on a side: the objectives as written


def _ended_warning(side: str, found: CapacityAnswer) -> str | None:
    """A search that did not resolve: what its number is, a bound, said plainly."""
    kind = bound(found)
    cap, fail = _value(found, found.capacity), _value(found, found.first_fail)
    if kind == "exact":
        return None
    if kind == "at least":
        return (f"{side}'s search did not resolve ({_why(found)}): its {cap} {found.unit} is a lower bound, at least "
                f"{cap}" + ("; a higher range would find the limit" if found.ended == "all" else ""))
    if kind == "fewer than":
        return (f"{side}'s search did not resolve (no level it ran met the SLO): it serves fewer than {fail} "
                f"{_unit(found, found.first_fail)}")
    if kind == "between":
        return (f"{side}'s search did not resolve ({_why(found)}): it serves between "
                f"{cap} and {fail} {found.unit} ({cap} met the SLO, {fail} did not)")
    return f"{side}'s search gave no verdict ({_why(found)})"


def _why(found: CapacityAnswer) -> str:
    """Why a search ended where it did, in words."""
    if found.ended == "budget":  # a sweep's levels read as a search: it had no budget, its levels were set so
        return "its time budget ran out" if found.spec.budget_s is not None else \
            "its levels leave a gap between the last that met the SLO and the first that did not"
    return {"interrupted": "it was interrupted", "running": "it was cut short", "none": "no level it ran met the SLO",
            "all": "every level it ran met the SLO"}.get(found.ended, found.ended)


@dataclass(slots=True)
class CapacityComparison:
    """Two runs' capacities under their SLOs: both answers, B's capacity over A's (``ratio``: only on one axis
    under one SLO, and only where the comparison has a direction, see ``ratio_bound``) and what the numbers
    cannot say (``warnings``)."""

    a: str
    b: str
    answer_a: CapacityAnswer
    answer_b: CapacityAnswer
    same_slo: bool
    ratio: float | None = None  # B's capacity / A's
    #: "exact" (both resolved), "at least" (B's a lower bound), "at most" (A's a lower bound); None: no ratio
    ratio_bound: Literal["exact", "at least", "at most"] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return self.same_slo and self.answer_a.spec.axis == self.answer_b.spec.axis

    def verdict(self) -> str | None:
        """One line: "B serves 2.00x the agents of A at TTFT p99 <= 2 s"; None where the capacities do not
        compare (different SLOs or axes) or nothing says which serves more."""
        if not self.comparable:
            return None
        fa, fb = self.answer_a, self.answer_b
        at = f"at {slo_words(fa)}"
        if self.ratio is None or self.ratio_bound is None:
            return _ordered(fa, fb, at)
        if self.ratio_bound == "exact" and _overlap(fa, fb):
            if self.ratio == 1:
                return f"A and B serve the same, {capacity_text(fa)} each, {at}"
            return (f"no difference found: A {capacity_text(fa)}, B {capacity_text(fb)} {at}, within what the "
                    f"searches resolved (A failed at {_value(fa, fa.first_fail)}, B at {_value(fb, fb.first_fail)})")
        flip = {"at least": "at most", "at most": "at least", "exact": "exact"}
        more, less, r, qual = ("B", "A", self.ratio, self.ratio_bound) if self.ratio >= 1 else \
            ("A", "B", 1 / self.ratio, flip[self.ratio_bound])
        what = "agents" if fa.spec.axis == "concurrency" else "request rate"
        if qual == "exact":
            return f"{more} serves {_times(r)}x the {what} of {less} {at}"
        if r == 1:  # B/A >= 1 (B serves at least as many) or <= 1 (A does)
            more, less = ("B", "A") if qual == "at least" else ("A", "B")
            return f"{more} serves at least as many {fa.unit} as {less} {at}"
        if qual == "at least":
            return f"{more} serves at least {_times(r)}x the {what} of {less} {at}"
        return f"{more} serves at most {_times(r)}x the {what} of {less} {at} ({less}'s capacity is a lower bound)"

    def to_dict(self) -> dict[str, object]:
        return {"a": self.answer_a.to_dict(), "b": self.answer_b.to_dict(), "same_slo": self.same_slo,
                "ratio": self.ratio, "ratio_bound": self.ratio_bound, "verdict": self.verdict(),
                "warnings": list(self.warnings)}


def _overlap(fa: CapacityAnswer, fb: CapacityAnswer) -> bool:
    """Both resolved, and each capacity below the other's first fail: the searches cannot tell them apart."""
    return (fa.capacity or 0) < (fb.first_fail or math.inf) and (fb.capacity or 0) < (fa.first_fail or math.inf)


def _ordered(fa: CapacityAnswer, fb: CapacityAnswer, at: str) -> str | None:
    """No ratio (a side met no level, or both are lower bounds): which serves more where the bounds say so."""
    lo = {s: f.capacity or 0.0 for s, f in (("A", fa), ("B", fb))}
    hi = {s: f.first_fail if f.first_fail is not None else math.inf for s, f in (("A", fa), ("B", fb))}
    if bound(fa) == "no verdict" or bound(fb) == "no verdict":
        return None
    for more, less in (("B", "A"), ("A", "B")):
        if hi[less] <= lo[more]:
            found = {"A": fa, "B": fb}
            return (f"{more} serves more {found[more].unit} than {less} {at}: {more} {capacity_text(found[more])}, "
                    f"{less} {capacity_text(found[less])}")
    return None


def compare_capacity(a: RunResult, b: RunResult) -> CapacityComparison | None:
    """Two runs' capacities side by side: each from a ``tokenbench capacity`` run or a sweep with an SLO
    (``capacity.answer``); None where either run has none."""
    fa, fb = answer(a), answer(b)
    if fa is None or fb is None:
        return None
    return compare_answers(fa, fb, _name(a), _name(b))


def compare_answers(fa: CapacityAnswer, fb: CapacityAnswer, a: str = "A", b: str = "B") -> CapacityComparison:
    """Two capacity answers side by side: B's over A's where they compare, and what they cannot say."""
    cc = CapacityComparison(a, b, fa, fb, same_slo(fa, fb))
    if not cc.same_slo:
        cc.warnings.append(f"the two searches used different SLOs (A: {slo_words(fa)}; B: {slo_words(fb)}): their "
                           "capacities do not compare, so no ratio is given")
    if fa.spec.axis != fb.spec.axis:
        cc.warnings.append(f"A searched {fa.unit} ({fa.spec.axis}), B {fb.unit} ({fb.spec.axis}): their capacities "
                           "do not compare, so no ratio is given")
    cc.warnings += [w for side, f in (("A", fa), ("B", fb)) if (w := _ended_warning(side, f)) is not None]
    if cc.comparable and fa.capacity and fb.capacity:
        ka, kb = bound(fa), bound(fb)
        cc.ratio_bound = "exact" if ka == kb == "exact" else "at least" if ka == "exact" else \
            "at most" if kb == "exact" else None
        cc.ratio = fb.capacity / fa.capacity if cc.ratio_bound is not None else None
    return cc


def _sure(found: CapacityAnswer) -> str:
    """Whether the verdicts that bracket the capacity are sure: "yes / no" (its pass, then its fail)."""
    def said(value: float | None, met: bool) -> str:
        v = next((v for v in found.verdicts if v.value == value and v.met is met), None)
        return "—" if v is None else "yes" if v.sure else "no"
    return f"{said(found.capacity, True)} / {said(found.first_fail, False)}"


#: What the table's "Sure" row means (as ``tokenbench capacity`` says under its levels).
CAPACITY_LEGEND = SURE_LEGEND + " A verdict not sure may turn on a rerun, and the capacity with it."


def _money(v: float | None, digits: int, currency: str) -> str:
    return "—" if v is None else f"{v:.{digits}f} {currency}"


def capacity_table(cc: CapacityComparison) -> tuple[list[str], list[list[str]]]:
    """Both capacities as a table of 80 columns: the capacity (or its bound), the levels that bracket it and how
    sure they are, the SLO, what the search spent, money and energy where known, and what limited a side when
    it was not the hardware. A row neither side has a figure for is left out."""
    fa, fb = cc.answer_a, cc.answer_b
    rows = [["Capacity", capacity_text(fa), capacity_text(fb)],
            ["Met / failed at", *(f"{_value(f, f.capacity)} / {_value(f, f.first_fail)}" for f in (fa, fb))],
            ["Sure (met / failed)", _sure(fa), _sure(fb)],
            ["SLO", *(slo_words(f) for f in (fa, fb))] if not cc.same_slo else ["SLO", slo_words(fa), "same"],
            ["Ended", *(f"{_ENDED_CELL.get(f.ended, f.ended)}, {len(f.verdicts)} levels" for f in (fa, fb))],
            ["Requests spent", *(f"{f.requests:,}" for f in (fa, fb))]]
    optional = [("Cost per agent-hour", [_money(f.cost_per_agent_hour(), 3, f.currency) for f in (fa, fb)]),
                ("Cost per Mtok out", [_money(f.cost_per_mtok(), 2, f.currency) for f in (fa, fb)]),
                ("J per output token", [f"{j:.3f}" if (j := f.energy()[0]) is not None else "—" for f in (fa, fb)]),
                ("Agents per kW", [f"{k:.1f}" if (k := f.energy()[1]) else "—" for f in (fa, fb)]),
                ("Limit (not the box)", [f.limit if f.limit and f.first_fail is not None else "—" for f in (fa, fb)])]
    rows += [[label, *cells] for label, cells in optional if any(c != "—" for c in cells)]
    return ["Capacity search", "A", "B"], rows


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """The two runs ``tokenbench compare`` sets side by side (ids, id prefixes or labels), the effective-serving
    line's workload (``agents`` asking for ``tokens`` each) and the results database (None: $TOKENBENCH_DB or the
    user data dir)."""

    a: str
    b: str
    agents: int = 16
    tokens: int = 200
    latest: bool = False  # a label several runs share means the newest of them
    db: str | None = None


@dataclass(slots=True)
class Compared:
    """What ``compare_runs`` found: the rows (every kind of run), the turns and levels of two agent-session runs,
    both boxes' capacities within their SLOs and their quality (None where they have none)."""

    run_a: RunResult
    run_b: RunResult
    comparison: Comparison
    sessions: SessionComparison | None = None
    capacity: CapacityComparison | None = None
    quality: Beside | None = None

    def to_dict(self) -> dict[str, Any]:
        """``compare --json``: the rows, the quality and the capacities (null where either run has none), and a
        session comparison's turns and levels."""
        doc = self.comparison.to_dict()
        doc["quality"] = self.quality.to_dict() if self.quality is not None else None
        doc["capacity"] = self.capacity.to_dict() if self.capacity is not None else None
        if self.sessions is not None:
            doc["sessions"] = asdict(self.sessions)
            for block, b in zip(doc["sessions"]["blocks"], self.sessions.blocks):
                for turn, t in zip(block["turns"], b.turns):
                    turn.update(warm_ratio=t.warm_ratio, busted_ratio=t.busted_ratio)
        return {"tool": "tokenbench", "kind": "compare", **doc}


def compare_runs(cfg: CompareConfig) -> Compared:
    """``tokenbench compare``'s work: both runs read from the store, compared row by row (two agent-session runs
    also turn by turn), their capacities and quality beside. A session run beside one that is not, or two runs
    that share nothing to compare, is a UsageError."""
    from .quality.parity import beside
    from .reader import REPORTED, load_result
    from .session_view import mismatch
    from .store import Store

    store = Store(cfg.db, readonly=True)
    ra, rb = (load_result(store, ref, latest=cfg.latest, kinds=REPORTED, command="compare") for ref in (cfg.a, cfg.b))
    why = mismatch(ra, rb)  # a session run beside a plain sweep: refused in one line
    if why is not None:
        raise UsageError(why)
    sessions = compare_sessions(ra, rb) if is_session_run(ra) else None
    c = compare(ra, rb, cfg.agents, cfg.tokens, store)
    cap = compare_capacity(ra, rb)  # both runs answer how many agents their box serves within an SLO
    # a sweep beside a llama-bench run once printed an empty table; two capacity searches compare their capacities
    if sessions is None and not c.rows and len(c.effective) < 2 and cap is None:
        raise UsageError(f"runs {ra.run_id} and {rb.run_id} share no operating point to compare: the first has "
                         f"{points(ra)}; the second {points(rb)}")
    return Compared(ra, rb, c, sessions, cap, beside(store, ra.manifest.label, rb.manifest.label))
