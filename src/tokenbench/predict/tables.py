"""Tables of the predictor as (header, rows) of strings: the CLI renders them, tests read them."""

from __future__ import annotations

from . import roofline as rf
from .banding import HELD_MARK, BandLog, band_text, estimate_cell, span
from .calibration import Calibration
from .accuracy import AgainstReport
from .rows import RowResult
from .formats import Quant
from .setup import Setup
from .memory import Fit, FIT_SEARCH_TOKENS, kv_bytes, state_bytes
from .specs import GIB
from .session import SessionPrediction, rounds
from .specs import Catalog, ModelSpec
from ..layout import figure, plural

Table = tuple[list[str], list[list[str]]]


def hardware_table(cat: Catalog) -> Table:
    """Every box, its id and the other names every command takes for it (--hardware, --price, --owned)."""
    head = ["Hardware", "Name", "Memory GiB", "BW GB/s", "BF16 TFLOPS", "FP8 TFLOPS", "GHz", "Source"]
    # a box without BF16 matmuls holds its FP16 (or FP32) rate there, and says which
    rows = [[h.id, h.name + (f" (also: {', '.join(h.aliases)})" if h.aliases else ""), figure(h.mem_gb, 0),
             figure(h.bw_gbs, 0), figure(h.bf16_tflops) + (f" ({h.half_is.upper()}: no BF16)" if h.half_is else ""),
             figure(h.fp8_tflops), figure(h.boost_ghz, 2), h.source] for h in cat.hardware.values()]
    return head, rows


def models_table(cat: Catalog) -> Table:
    head = ["Model", "Params B", "Active B", "Layers", "Attention", "KV KiB/token (BF16)", "Source"]
    rows = []
    for m in cat.models.values():
        kinds = []
        if m.kv_lora_rank:
            kinds.append("MLA")
        else:
            kinds.append(f"GQA {m.heads}/{m.kv_heads}")
        if m.local_layers:
            kinds.append(f"{m.local_layers} local (W={m.window})")
        if m.linear_layers:
            kinds.append(f"{m.linear_layers} linear")
        if m.experts:
            kinds.append(f"MoE {m.experts} top-{m.top_k}")
        kv = m.kv_elems_per_token_layer() * 2 * (m.n_full + m.local_layers) / 1024
        active = (m.active_nonemb_params + m.lm_params + (m.emb_params if m.tied else 0)) / 1e9
        rows.append([m.id, figure(m.total_b), figure(active), str(m.layers), ", ".join(kinds), figure(kv, 0), m.source])
    return head, rows


def _box(s: Setup) -> str:
    return s.hw.id if s.tp == 1 else f"{s.tp}x {s.hw.id} (tensor parallel, memory pooled)"


#: A speed cell of a row that does not fit: no figure for a setup that cannot run (``not_run_remark`` says why).
NOT_RUN = "—"


def not_run_remark(rows: list[list[str]], what: str) -> str | None:
    """The line that says why a table's rows whose fits cell is "no" show no speed; None where every row fits."""
    said = [r[0] for r in rows if r[-1] == "no"]
    if not said:
        return None
    return (f"fits no ({what} {', '.join(said)}): the weights and KV cache pass the box's memory, and no speed is "
            "predicted for a setup that cannot run; 'tokenbench fit' says what would fit")


def none_run(rows: list[list[str]]) -> bool:
    """Whether no row of a table fits: nothing was predicted (predict then exits 1, as fit does)."""
    return bool(rows) and all(r[-1] == "no" for r in rows)


#: A "fits" cell of a batching engine's level whose KV cache holds fewer requests than it sends (queued_cell).
QUEUED = "queued"

#: A "fits" cell whose context passes the model's own: the box may hold it, the model was not trained for it.
PAST_MODEL = "past model"


def fits_cell(s: Setup, context: int, fits: bool, offload: str | None = None) -> str:
    """A Fits cell, said alike in every predicted table: what the box cannot hold first ("no"), then a context the
    model was not trained for (``PAST_MODEL``), then what runs slowly (``offload``: what says so, where the box holds
    the rest on its CPU), else "yes"."""
    if not fits and offload is None:
        return "no"
    if s.model.past_context(context):
        return PAST_MODEL
    return offload if not fits and offload is not None else "yes"


def context_remark(m: ModelSpec, tokens: int) -> str | None:
    """What a context past the model's own means, said once under a table whose cells say ``PAST_MODEL``."""
    if not m.past_context(tokens):
        return None
    return (f"{PAST_MODEL}: {tokens:,} tokens of context pass {m.id}'s own {m.context:,} (its config's "
            "max_position_embeddings): vLLM refuses a longer --max-model-len, and llama.cpp runs it past what the "
            "model was trained for; the figures are the box's, not an answer the model can give")


def past_verdict(m: ModelSpec, fits: bool) -> str:
    """What fit's verdict adds for a context past the model's own: the box's memory is half the answer, and the
    model (its config's limit, which vLLM holds --max-model-len to) the other; fit exits 1 on it."""
    return f"{' in memory, but not' if fits else ', nor'} {m.id}'s own context of {m.context:,} tokens"


def fit_lines(s: Setup, f: Fit, context: int, concurrency: int, cal: Calibration | None = None) -> list[str]:
    m = s.model
    past = context_remark(m, context)
    # experts that ship in a format of their own (gpt-oss's MXFP4) keep it whatever --weights says: said twice
    kept = m.expert_bpw is not None and m.expert_bpw != s.quant.bpw
    lines = [
        f"{m.id} ({s.quant.weights} weights{', experts as shipped' if kept else ''}, {s.quant.kv.lower()} KV) on "
        f"{_box(s)} with {s.engine}: {context:,} tokens x {plural(concurrency, 'sequence')}",
        f"  weights      {f.weights_gb:8,.2f} GiB  (all experts"
        + (f", theirs {m.expert_bpw:g} bits a weight as shipped)" if kept else ")")
        if m.is_moe else f"  weights      {f.weights_gb:8,.2f} GiB",
        f"  KV cache     {f.kv_gb:8,.2f} GiB  ({kv_bytes(m, s.quant, context) / GIB:,.3f} GiB per sequence)",
    ]
    if m.linear_layers:
        lines.append(f"  state        {f.state_gb:8,.2f} GiB  ({state_bytes(m) / 1e6:.1f} MB per sequence, fp32)")
    lines += [
        f"  runtime      {f.overhead_gb:8,.2f} GiB",
        f"  total        {f.total_gb:8,.2f} GiB of {f.usable_gb:,.1f} GiB usable (a vendor's \"GB\" of memory is GiB) -> "
        + ("fits" if f.fits else "does NOT fit") + (past_verdict(m, f.fits) if past else ""),
        f"  largest context at {plural(concurrency, 'sequence')}: "
        + (f"{f.max_context:,} tokens" if f.max_context < FIT_SEARCH_TOKENS else
           f"{FIT_SEARCH_TOKENS:,} tokens or more (memory is not the limit)")
        + (f" (the model's own: {m.context:,})" if m.past_context(f.max_context) else "") + "; "
        f"most sequences at {context:,} tokens: {f.max_concurrency:,}",
    ]
    if past:
        lines.append(f"  {past}")
    if not f.fits and f.gpu_layers is None:
        lines.append(f"  {what_fits(s, f, context, concurrency)}")
    elif not f.fits:
        lines.append(
            f"  hybrid split (llama.cpp -ngl {f.gpu_layers}): {f.gpu_layers} of {m.layers} layers on the GPU, "
            f"{f.offload_fraction:.0%} of the weights in host memory ({s.hw.host_bw_gbs:g} GB/s): they are read "
            "in sequence with the GPU's, so the times add"
        )
        dec_gpu = s.decode(context) if s.kind == "sequential" else None
        if dec_gpu is not None:
            lines.append(f"  predicted decode with that split: {split_decode(s, cal, dec_gpu, context)} "
                         f"(ceiling {figure(1 / dec_gpu.ceiling)} tok/s)")
    return lines


#: Each batching engine's flags for the context it holds, the sequences it runs at once and an FP8 KV cache.
_FIT_FLAGS = {"vllm": ("--max-model-len", "--max-num-seqs", "--kv-cache-dtype fp8"),
              "sglang": ("--context-length", "--max-running-requests", "--kv-cache-dtype fp8_e5m2")}


def what_fits(s: Setup, f: Fit, context: int, concurrency: int) -> str:
    """What would fit where a batching engine (vLLM, SGLang) cannot hold the model and its KV cache: it keeps every
    layer on its GPUs, so no llama.cpp-style split runs; a shorter context, fewer sequences, an FP8 KV cache or a
    box with the memory it needs."""
    ctx_flag, seq_flag, kv_flag = _FIT_FLAGS.get(s.engine.split()[0], ("", "", ""))
    head = f"{s.engine} keeps every layer and the KV cache in GPU memory (no layers in host memory): "
    if f.max_context == 0 and f.max_concurrency == 0:
        return (head + f"the weights and runtime alone ({f.weights_gb + f.overhead_gb:,.1f} GiB) leave no room for a "
                f"KV cache in {f.usable_gb:,.1f} GiB; fewer bits per weight (--weights) or a box with more than "
                f"{f.total_gb:,.1f} GiB usable would fit")
    ways = []
    if f.max_context > 0:
        ways.append(f"a context of at most {f.max_context:,} tokens" + (f" ({ctx_flag})" if ctx_flag else "")
                    + (f" at {plural(concurrency, 'sequence')}" if concurrency > 1 else ""))
    if 0 < f.max_concurrency < concurrency:
        ways.append(f"at most {plural(f.max_concurrency, 'sequence')} of {context:,} tokens"
                    + (f" ({seq_flag})" if seq_flag else ""))
    fp8 = Quant(s.quant.weights, "FP8")
    if s.quant.kv != "FP8" and s.hw.has_fp8 and s.kind == "batching" and ctx_flag:
        half = s.fit_as(fp8, context, concurrency)
        if half.fits:
            ways.append(f"an FP8 KV cache (--kv fp8, {s.engine}'s {kv_flag}: {half.total_gb:,.1f} GiB in all)")
    ways.append(f"a box with {f.total_gb:,.1f} GiB usable or more")
    return head + "would fit with " + ", or ".join(ways)


def split_decode(s: Setup, cal: Calibration | None, dec: rf.Estimate, context: int) -> str:
    """The decode rate of a hybrid split with its band, as predict's tg cell at that context says it (its fast end
    held at the ceiling)."""
    text = f"{figure(1 / dec.estimate)} tok/s"
    if cal is None or not s.calibrated:
        return text + (" UNCALIBRATED" if not s.calibrated else "")
    return estimate_cell(s, cal, "decode", text, context, 1, 1 / dec.estimate, 1 / dec.ceiling)


def split_decode_json(s: Setup, cal: Calibration, context: int) -> dict[str, object] | None:
    """fit --json's hybrid split decode where the model does not fit: the estimate, its ceiling and its band (None:
    a batching engine, which runs no split)."""
    if s.kind != "sequential":
        return None
    dec = s.decode(context)
    b = s.band(cal, "decode", context, 1) if s.calibrated else None
    return {"tok_s": 1 / dec.estimate, "ceiling_tok_s": 1 / dec.ceiling, "calibrated": s.calibrated,
            "band": span(b.pct, 1 / dec.estimate, 1 / dec.ceiling, True).to_dict() if b else None}


def depth_context(depth: int, pp: int, tg: int, tests: tuple[str, ...]) -> int:
    """The context a depth step holds at its end: the depth, and the prompt and generation its tests add."""
    return depth + (pp if "pp" in tests else 0) + (tg if "tg" in tests else 0)


def depth_table(s: Setup, cal: Calibration, depths: list[int], pp: int, tg: int, tests: tuple[str, ...],
                log: BandLog | None = None) -> Table:
    """llama-bench's one stream at each depth: the columns of ``tests`` ("pp" prompt processing, "tg" generation);
    ``log`` records each cell's band."""
    head = ["Depth", *([f"pp{pp} tok/s", f"pp{pp} ceiling"] if "pp" in tests else []),
            *([f"tg{tg} tok/s", f"tg{tg} ceiling"] if "tg" in tests else []), "fits"]
    rows = []
    for d in depths:
        row = [f"{d:,}"]
        ctx = depth_context(d, pp, tg, tests)
        f = s.fit(ctx, 1)
        if not f.fits and f.gpu_layers is None:  # no split runs it: no speed for a setup that cannot run
            rows.append(row + [NOT_RUN] * (len(head) - 2) + [fits_cell(s, ctx, f.fits)])
            continue
        if "pp" in tests:
            p = s.prefill(pp, d)
            row += [estimate_cell(s, cal, "prefill", figure(pp / p.estimate), d + pp, 1, pp / p.estimate,
                                  pp / p.ceiling, log), figure(pp / p.ceiling)]
        if "tg" in tests:
            t = s.decode(d + tg // 2)
            row += [estimate_cell(s, cal, "decode", figure(1 / t.estimate), d + tg, 1, 1 / t.estimate, 1 / t.ceiling,
                                  log), figure(1 / t.ceiling)]
        split = f"offload ({f.gpu_layers}/{s.model.layers} layers on GPU)" if f.gpu_layers is not None else None
        rows.append(row + [fits_cell(s, ctx, f.fits, split)])
    return head, rows


def serve_table(s: Setup, cal: Calibration, concurrency: list[int], prompt: int, output: int,
                log: BandLog | None = None) -> Table:
    # medians, as vllm bench serve's and compare's; beside each, its physical limit: a rate's ceiling, a time's floor
    head = ["Concurrency", "Aggregate tok/s", "ceiling", "Per-agent tok/s", "Median TTFT", "floor", "Median TPOT",
            "floor", "fits"]
    rows = []
    ctx = prompt + output  # a request's context: each cell's band is its own level's (ctx, n)
    for n in concurrency:
        p, at_once = s.serve_held(n, prompt, output)  # it refuses more agents than the loop simulates
        if p is None:  # the serving loop runs no split: no speed for a setup that cannot run
            rows.append([str(n)] + [NOT_RUN] * (len(head) - 2) + [fits_cell(s, ctx, False)])
            continue
        # one output token has no time per output token after it (TPOT divides by output - 1): it read 0.0 ms ±35%
        tpot = [estimate_cell(s, cal, "tpot", f"{p.tpot_s.estimate * 1000:.1f} ms", ctx, n, p.tpot_s.estimate,
                              p.tpot_s.ceiling, log), f"{p.tpot_s.ceiling * 1000:.1f} ms"] if output > 1 else [NOT_RUN] * 2
        rows.append([str(n), estimate_cell(s, cal, "throughput", figure(p.throughput[1]), ctx, n, p.throughput[1],
                                           p.throughput[0], log), figure(p.throughput[0]),
                     estimate_cell(s, cal, "throughput", figure(p.per_agent[1]), ctx, n, p.per_agent[1], p.per_agent[0],
                                   log),
                     estimate_cell(s, cal, "ttft", _ttft(p.ttft_s.estimate), ctx, n, p.ttft_s.estimate,
                                   p.ttft_s.ceiling, log), _ttft(p.ttft_s.ceiling),
                     *tpot, queued_cell(at_once) if at_once < s.held(n) else fits_cell(s, ctx, True)])
    return head, rows


def queued_cell(at_once: int) -> str:
    """The fits cell of a batching engine's level whose KV cache holds fewer requests than it sends."""
    return f"{QUEUED} ({at_once} at once)"


def queued_remark(rows: list[list[str]], what: str) -> str | None:
    """The line under a serving table that says what its queued rows mean; None where no row is queued."""
    said = [r[0] for r in rows if r[-1].startswith(QUEUED)]
    if not said:
        return None
    return (f"{QUEUED} ({what} {', '.join(said)}): the KV cache holds fewer requests' contexts than are sent, so "
            "the engine runs as many as it holds and the rest wait for one to end, as vLLM's and SGLang's "
            "schedulers do: its throughput is theirs, and the wait is in TTFT")


def _ttft(v: float) -> str:
    """A serving level's TTFT: in milliseconds, from 10 s in seconds (it read "604,956 ms")."""
    return f"{v * 1000:,.0f} ms" if v < 10 else _seconds(v)


def against_table(rep: AgainstReport) -> Table:
    """One row per published figure: what was measured, what the model predicts, the error; the test, its depth,
    its concurrency and the metric in one cell, as llama-bench names them ("tg32 @ d4096"), so the table fits 80
    columns with the host and model heading their rows. A row's flags are said under the table (``summary_lines``)."""
    head = ["On", "Test", "Measured", "Predicted", "Error %", "Split", "Of ceiling"]
    rows = []
    for r in rep.results:
        unit = f" {r.row.unit}" if r.predicted is not None else ""  # the measured value's unit, as beside it
        pred = f"{figure(r.predicted)}{unit}" if r.calibrated or r.predicted is None else \
            f"{figure(r.predicted)}{unit} UNCALIBRATED"
        rows.append([_on(r), _test(r), f"{figure(r.row.value)} {r.row.unit}",
                     pred, figure(r.error_pct, 0) if r.error_pct is not None else "—", r.split,
                     f"{r.measured_over_ceiling:.2f}" if r.measured_over_ceiling is not None else "—"])
    return head, rows


#: The metric a llama-bench test measures: named in the test cell only where the row's is another.
_TEST_METRIC = {"pp": "prefill_tps", "tg": "decode_tps"}


def _on(r: RowResult) -> str:
    """The box, model and weight format a published figure was measured on: "RTX 3090 24GB, llama-3.1-8b
    Q4_K_M" (the same box and model in BF16 and Q4_K_M are two setups)."""
    return f"{r.row.raw.get('host', r.row.hardware)}, {r.row.model} {r.row.weights}".rstrip()


def _test(r: RowResult) -> str:
    """A published figure's test in one cell: "pp512", "tg32 @ d4096", "serve c8: output_tps"."""
    row = r.row
    cell = row.test + (f" @ d{row.depth}" if row.depth else "") + \
        (f" c{row.concurrency}" if row.concurrency > 1 or row.test == "serve" else "")
    return cell if _TEST_METRIC.get(row.test[:2]) == row.metric else f"{cell}: {row.metric}"


def summary_lines(rep: AgainstReport) -> list[str]:
    out = []
    for split in ("fitted", "unseen", "all"):
        parts = []
        for g in ("decode", "prefill", "serve", "serve_throughput"):
            d = rep.summary[split][g]
            if d["n"]:
                parts.append(f"{g} {d['median_abs_error_pct']:.1f}% (n={d['n']})")
        if parts:
            out.append(f"median |error| {split}: " + ", ".join(parts))
    fb = rep.summary["faster_box"]
    out.append(f"faster box predicted right: {fb['right']}/{fb['pairs']} pairs with a measured ratio >= "
               f"{fb['min_ratio']:g}")
    out.append("'fitted' rows are ones this calibration was fitted on (in-sample); cross-validated accuracy: "
               "python benchmarks/predictor_accuracy.py")
    if rep.summary["flagged"]:
        out.append(f"{plural(rep.summary['flagged'], 'row')} flagged as a likely software bottleneck")
    for r in rep.results:  # each flagged row by name, as the table shows it
        for flag in r.flags:
            out.append(f"{_on(r)}, {_test(r)}: {flag}")
    return out


#: Turns a session table shows at most, as columns beside the row names: five fit 80 columns.
SESSION_COLUMNS = 5


def shown_turns(turns: int, most: int = SESSION_COLUMNS) -> list[int]:
    """The turns a session table shows: all of them when they fit, else 1, 2, 5, 10, 20, 50, ... and the last,
    dropping the smallest of the middle ones until ``most`` are left."""
    if turns <= most:
        return list(range(1, turns + 1))
    picks, step = [1, 2], 5
    while step < turns:
        picks.append(step)
        step = step * 5 // 2 if str(step)[0] == "2" else step * 2  # 5, 10, 20, 50, 100, 200, 500, ...
    picks.append(turns)
    while len(picks) > most:
        del picks[2]
    return picks


def _seconds(v: float) -> str:
    """A time in a cell at most 7 wide: 5.3 ms, 46 ms, 1.76 s, 13.7 s, 147 s, 1,175 s."""
    if v < 1:
        return f"{v * 1000:.1f} ms" if v < 0.01 else f"{v * 1000:.0f} ms"
    if v >= 1000:
        return f"{v:,.0f} s"
    if v >= 100:
        return f"{v:.0f} s"
    return f"{v:.1f} s" if v >= 10 else f"{v:.2f} s"


def session_metrics(agents: int) -> tuple[str, str]:
    """The band metrics behind a session's TTFT and decode rate: one agent's come from the depth estimates (a
    prompt's prefill, a decode step), so their held-out errors are prefill's and decode's; N agents' from the
    serving loop, whose errors are TTFT's and TPOT's."""
    return ("prefill", "decode") if agents == 1 else ("ttft", "tpot")


def session_table(s: Setup, cal: Calibration, p: SessionPrediction, log: BandLog | None = None) -> Table:
    """One agent's session, turns as columns (a readable subset, ``shown_turns``): the context the turn sends, the
    uncached tokens it prefills, TTFT with the prefix cache and without it, the decode rate at that depth (per
    agent), each beside its physical limit (a rate's ceiling, a time's floor), and whether the contexts fit.
    Uncalibrated: the limits only. A row's band is in its label; a cell where the band's fast end would pass the
    limit below it is marked HELD_MARK (its fast end held there); ``log`` records each cell's band."""
    shown = [t for t in p.turns if t.turn in shown_turns(len(p.turns))]
    ttft_m, dec_m = session_metrics(p.agents)
    log = log if log is not None else BandLog()
    rows = [["Context"] + [f"{t.context:,}" for t in shown], ["Uncached"] + [f"{t.uncached:,}" for t in shown]]
    for name, metric, rate, get, fmt in (
            ("TTFT cached", ttft_m, False, lambda t: t.ttft_s, _seconds),
            ("TTFT uncached", ttft_m, False, lambda t: t.cold_ttft_s, _seconds),
            ("Decode tok/s", dec_m, True, lambda t: rf.Estimate(1 / t.tpot_s.ceiling, 1 / t.tpot_s.estimate), figure)):
        if s.calibrated:
            # one band for the row: at its deepest turn, with all its agents
            b = s.band(cal, metric, p.turns[-1].context, p.agents)
            cells = []
            for t in shown:
                if not t.fits:  # no speed for a turn the box cannot hold, as plain predict says of a setup
                    cells.append(NOT_RUN)
                    continue
                e = get(t)
                sp = span(b.pct, e.estimate, e.ceiling, rate) if b else None
                log.add(metric, b, sp, p.agents)
                cells.append(fmt(e.estimate) + (HELD_MARK if sp is not None and sp.held else ""))
            log.marked = log.marked or any(c.endswith(HELD_MARK) for c in cells)
            rows.append([f"{name} {band_text(b)}" if b else name] + cells)
        limit = "ceiling" if rate else "floor"  # a rate's physical limit, a time's
        rows.append([f"  {limit}" if s.calibrated else f"{name}, {limit}"] +
                    [fmt(get(t).ceiling) if t.fits else NOT_RUN for t in shown])
    out = p.shape.output
    rows.append(["Fits"] + [fits_cell(s, t.context + out, t.fits, "offload" if t.offload else None) for t in shown])
    return ["Turn"] + [str(t.turn) for t in shown], rows


def session_lines(s: Setup, cal: Calibration, p: SessionPrediction, sessions: int | None = None,
                  log: BandLog | None = None) -> list[str]:
    """The lines under a session table: its last turn, the session's time as the sum of its parts (with the
    cache and without it), the tokens of one session, for N agents their aggregate rate (with the serving loop's
    throughput band at that many agents and the deepest turn's context, as the serve table bands its own; ``log``
    records it), and with ``sessions`` how long they take. Uncalibrated: the ceilings (the least time the box
    allows), said so."""
    est = s.calibrated

    def pick(e: rf.Estimate) -> float:
        return e.estimate if est else e.ceiling

    last, sh = p.turns[-1], p.shape
    tokens = (f"per session: {p.output_tokens:,} output tokens; {p.prompt_tokens:,} prompt tokens sent, "
              f"{p.prefilled_tokens:,} prefilled ({1 - p.prefilled_tokens / p.prompt_tokens:.0%} from the cache)")
    out_from = next((t.turn for t in p.turns if not t.fits), None)
    if out_from is not None:  # its time and rates would rest on turns that cannot run: none is given
        return [f"session ({len(p.turns)} turns): no time or rate predicted: from turn {out_from} the box cannot hold "
                f"{plural(p.agents, 'context')} (Fits, above)", tokens]
    warm, cold = p.time(True), p.time(False)
    what = "" if est else " (ceilings: UNCALIBRATED, no estimate)"
    think = f" + {_seconds(warm.think_s)} thinking ({len(p.turns) - 1} x {sh.think_time.describe()})" \
        if warm.think_s else ""
    lines = [
        f"turn {last.turn}{what}: TTFT {_seconds(pick(last.ttft_s))} with the prefix cache, "
        f"{_seconds(pick(last.cold_ttft_s))} without; decode {figure(1 / pick(last.tpot_s))} tok/s at "
        f"{last.context:,} tokens",
        f"session ({len(p.turns)} turns){what}: {_seconds(pick(warm.total))} = {_seconds(pick(warm.ttft))} to first "
        f"tokens + {_seconds(pick(warm.decode))} decoding ({len(p.turns)} x {sh.output - 1} tokens after the first)"
        f"{think}; without the cache {_seconds(pick(cold.total))}",
        tokens,
    ]
    if p.agents > 1:
        thr = p.throughput(True)
        total = estimate_cell(s, cal, "throughput", f"{figure(thr[1])} output tok/s in all", last.context + sh.output,
                              p.agents, thr[1], thr[0], log) if est else f"{figure(thr[0])} output tok/s in all"
        lines.append(f"{p.agents} agents, sessions back to back: {total}" + what)
    if sessions:
        r = rounds(sessions, p.agents)
        lines.append(f"{sessions} sessions on {plural(p.agents, 'agent')}: {r} after another, "
                     f"{_seconds(r * pick(warm.total))}{what}")
    return lines
