"""Two runs side by side: rows aligned on the shared workload axes (test, depth, concurrency), a ratio
column with the winner named, crossovers, the effective-serving line, and the "different model shapes" trap.

Works on any kind of run (sweeps, depth runs, imports, predictions) since all are levels in the store.
"""

from __future__ import annotations

import re

from collections.abc import Callable
from dataclasses import dataclass, field

from . import adapters
from .cost import effective_serving_s
from .metrics import LevelSummary
from .predict.roofline import WEIGHT_BPW
from .results import Manifest, RunResult

#: Ratios closer to 1 than this are a tie, not a win.
TIE = 1.05
#: Aggregate throughput at the highest concurrency over single-stream throughput above which a server whose
#: batching is unknown is taken to batch (queued requests alone gain a little from hidden HTTP overhead).
BATCHING_GAIN = 1.3

Getter = Callable[[LevelSummary], float | None]
#: (name, unit, higher is better, getter)
METRICS: list[tuple[str, str, bool, Getter]] = [
    ("Aggregate output", "tok/s", True, lambda s: s.output_throughput_tps or None),
    ("Per-agent", "tok/s", True, lambda s: s.per_agent_tps),
    ("Median TTFT", "ms", False, lambda s: s.ttft_ms.p50),
    ("P99 TTFT", "ms", False, lambda s: s.ttft_ms.p99),
    ("Median TPOT", "ms", False, lambda s: s.tpot_ms.p50),
    ("Prefill", "tok/s", True, lambda s: s.prefill_tps),
    ("Decode", "tok/s", True, lambda s: s.decode_tps),
    ("pp", "tok/s", True, lambda s: s.pp_tps),
    ("tg", "tok/s", True, lambda s: s.tg_tps),
]


def level_key(s: LevelSummary) -> tuple[str, int, int, int]:
    """The workload axes a row is aligned on: test, depth, concurrency, and a serving level's prompt length (to
    the nearest 64 tokens, so a BOS token or a chat template does not split a row). A llama-bench test names its
    own length (pp512), which some sources also state as a prompt length and others do not."""
    test = s.test or "serve"
    prompt = round((s.input_tokens_mean or 0) / 64) * 64 if test == "serve" else 0
    return (test, s.depth or 0, s.concurrency or 0, prompt)


def points(res: RunResult, most: int = 4) -> str:
    """A run's operating points, as compare aligns them: "pp512 at depth 0, tg128 at depth 32768" or
    "concurrency 1 at 4096 tokens in, concurrency 4 at 4096 tokens in"."""
    keys = sorted({level_key(o.summary) for o in res.outcomes})
    said = [(f"concurrency {c}" + (f" at {p} tokens in" if p else "")) if t == "serve" else f"{t} at depth {d}"
            for t, d, c, p in keys]
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

    @property
    def ratio(self) -> float:
        return self.a / self.b if self.b else float("inf")

    def winner(self) -> int:
        """0: a tie; 1: A is better; 2: B is better."""
        r = self.ratio
        if 1 / TIE < r < TIE:
            return 0
        return 1 if (r > 1) == self.higher_better else 2

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
    serve = sorted((o.summary for o in res.outcomes if (o.summary.test or "serve") == "serve"
                    and o.summary.concurrency and o.summary.output_throughput_tps),
                   key=lambda s: s.concurrency or 0)
    if len(serve) < 2 or serve[0].concurrency != 1:
        return True  # nothing measured shows batching
    return serve[-1].output_throughput_tps < BATCHING_GAIN * serve[0].output_throughput_tps


def effective_line(res: RunResult, agents: int, tokens: int) -> str | None:
    """How long `agents` requests of `tokens` tokens take: batched at concurrency N, or one sequential stream."""
    levels = [o.summary for o in res.outcomes]
    serve = [s for s in levels if (s.test or "serve") == "serve" and s.concurrency and s.output_throughput_tps]
    single = next((s.decode_tps or s.tg_tps for s in levels if (s.decode_tps or s.tg_tps) and not s.depth), None)
    name = _name(res)
    if serve and not _sequential(res):
        at = [s for s in serve if s.concurrency and s.concurrency <= agents]
        s = max(at, key=lambda x: x.concurrency or 0) if at else min(serve, key=lambda x: x.concurrency or 0)
        t = effective_serving_s(agents, tokens, s.output_throughput_tps)
        how = "predicted" if res.predicted_mark else "measured"
        note = "" if s.concurrency == agents else f" ({how} at concurrency {s.concurrency}, the nearest)"
        return f"{name}: ~{t:,.1f} s batched, {s.output_throughput_tps:,.0f} tok/s aggregate{note}"
    rate = single or (serve[0].output_throughput_tps if serve else None)
    if rate:
        t = effective_serving_s(agents, tokens, rate)
        return f"{name}: ~{t:,.1f} s as one sequential stream at {rate:,.1f} tok/s"
    return None


def compare(a: RunResult, b: RunResult, agents: int = 16, tokens: int = 200) -> Comparison:
    la = {level_key(o.summary): o.summary for o in a.outcomes}
    lb = {level_key(o.summary): o.summary for o in b.outcomes}
    rows = []
    for key in sorted(set(la) & set(lb)):
        sa, sb = la[key], lb[key]
        for name, unit, higher, get in METRICS:
            va, vb = get(sa), get(sb)
            if va and vb:
                rows.append(CompareRow(key[0], key[1], key[2], key[3], name, unit, va, vb, higher))
    cmp = Comparison(_name(a), _name(b), rows, warnings=_shape_warnings(a, b))
    if not rows:
        cmp.warnings.append("the two runs share no operating point (test, depth, concurrency): nothing to align")
    # crossovers: along depth for llama-bench tests, along concurrency for serving
    series: dict[tuple[str, str, int], list[CompareRow]] = {}
    for r in rows:
        fixed = r.concurrency if r.test != "serve" else r.depth
        series.setdefault((r.test, r.metric, fixed * 1_000_000 + r.input_len), []).append(r)
    for (test, metric, _), rs in series.items():
        axis = "depth" if test != "serve" else "concurrency"
        rs.sort(key=lambda r: r.depth if axis == "depth" else r.concurrency)
        decided = [r for r in rs if r.winner()]
        for p, q in zip(decided, decided[1:]):
            if p.winner() != q.winner():
                at = (lambda r: f"{r.depth // 1024}K" if r.depth >= 1024 else str(r.depth)) if axis == "depth" \
                    else (lambda r: str(r.concurrency))
                cmp.crossovers.append(
                    f"faster box changes between {at(p)} and {at(q)} {axis} ({test} {metric}): "
                    f"{cmp.a if p.winner() == 1 else cmp.b} then {cmp.a if q.winner() == 1 else cmp.b}"
                )
    for res in (a, b):
        line = effective_line(res, agents, tokens)
        if line:
            cmp.effective.append(line)
    return cmp


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def table(c: Comparison) -> tuple[list[str], list[list[str]]]:
    head = ["Test", "Depth", "Concurrency", "Prompt", "Metric", f"A: {c.a}", f"B: {c.b}", "A/B", "Winner"]
    out = []
    for r in c.rows:
        w = r.winner()
        note = "≈ tie" if w == 0 else (f"→ {c.a} wins {r.factor():.1f}×" if w == 1 else f"← {c.b} wins {r.factor():.1f}×")
        out.append([r.test, f"{r.depth:,}", str(r.concurrency), str(r.input_len or "—"), f"{r.metric} ({r.unit})",
                    _fmt(r.a), _fmt(r.b), f"{r.ratio:.2f}", note])
    return head, out
