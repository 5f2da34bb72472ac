"""Commands of the predictor: hardware, models, fit, predict, calibrate."""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from rich.console import Console
from typing import TYPE_CHECKING, Any
from .. import redact
from ..errors import UsageError
from ..store import Store
from .common import check_output, emit_json, int_list, tokens, write_json

if TYPE_CHECKING:
    from ..predict.calibration import Calibration
    from ..predict.predictor import Setup


def _setup(a: argparse.Namespace) -> tuple[Setup, Calibration]:
    from ..predict.calibration import Calibration
    from ..predict.predictor import Setup
    from ..predict.specs import Catalog

    cal = Calibration.packaged() if not getattr(a, "calibration", None) else \
        Calibration.from_toml(read_calibration(a.calibration), origin=a.calibration)
    engine = a.engine
    weights = a.weights or ("Q4_K_M" if engine.lower().startswith("llama") else "BF16")
    kv = a.kv.upper()
    if kv == "AUTO" and engine.lower().startswith("llama"):
        kv = "F16"
    return Setup.make(Catalog.load(), cal, a.hardware, a.model, weights, kv, engine,
                      ubatch=getattr(a, "ubatch", None) or 512, parallel=getattr(a, "parallel", None) or 1,
                      tp=getattr(a, "tp", None) or 1, flash_attn=getattr(a, "flash_attn", "on") != "off"), cal


def read_calibration(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--calibration {path}: cannot read it ({getattr(e, 'strerror', None) or e}); "
                         "give the TOML that tokenbench calibrate wrote") from None


def cmd_catalog(a: argparse.Namespace, console: Console) -> int:
    from ..output import print_table
    from ..predict import report
    from ..predict.specs import Catalog

    check_output(a.json, "--json")
    cat = Catalog.load()
    head, rows = report.hardware_table(cat) if a.command == "hardware" else report.models_table(cat)
    print_table(console, head, rows, a.format)
    if cat.user_file:
        console.print(f"including entries from {cat.user_file}", style="dim", markup=False)
    if a.json:
        entries = cat.hardware if a.command == "hardware" else cat.models
        emit_json(a.json, {"tool": "tokenbench", "kind": a.command, "user_file": str(cat.user_file or "") or None,
                           "entries": [asdict(e) for e in entries.values()]})
    return 0


def cmd_fit(a: argparse.Namespace, console: Console) -> int:
    from ..predict import report

    check_output(a.json, "--json")
    s, _ = _setup(a)
    ctx = tokens(a.context, "--context")
    if a.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    f = s.fit(ctx, a.concurrency)
    for line in report.fit_lines(s, f, ctx, a.concurrency):
        console.print(line, markup=False, highlight=False)
    if a.json:
        emit_json(a.json, {"tool": "tokenbench", "kind": "fit", "hardware": s.hw.id, "model": s.model.id,
                           "weights": s.quant.weights, "kv": s.quant.kv, "engine": s.engine, "context": ctx,
                           "concurrency": a.concurrency, "unit": "GiB", **asdict(f)})
    return 0


def _predict_against(a: argparse.Namespace, console: Console) -> int:
    """Predict every row of a published-measurements file and set each prediction beside its measurement."""
    from ..output import print_table
    from ..predict import report
    from ..predict.calibration import Calibration
    from ..predict.predictor import against
    from ..predict.published import read_rows
    from ..predict.specs import Catalog

    cal = Calibration.packaged() if not a.calibration else \
        Calibration.from_toml(read_calibration(a.calibration), origin=a.calibration)
    rep = against(Catalog.load(), cal, read_rows(Path(a.against)))
    head, rows = report.against_table(rep)
    print_table(console, head, rows, a.format)
    for line in report.summary_lines(rep):
        console.print(line, markup=False, highlight=False)
    if a.json:
        emit_json(a.json, rep.to_json())
    return 0


def cmd_predict(a: argparse.Namespace, console: Console) -> int:
    from ..output import print_table
    from ..predict import report
    from ..predict.runs import headline, prediction_manifest, speculation

    if a.against:
        return _predict_against(a, console)
    if not a.hardware or not a.model:
        raise UsageError("predict needs --hardware and --model (or --against FILE)")
    depths, levels = _check_flags(a)
    s, cal = _setup(a)
    if a.save and not s.calibrated:
        raise UsageError(f"--save: no measurements of {s.backend} stand behind an estimate, so there is none to store "
                         "beside measured runs (predict shows only the ceiling); anchor it first with calibrate --runs")
    if a.ubatch and s.kind != "sequential":
        raise UsageError(f"--ubatch is llama.cpp's -ub; {s.engine} prefills in chunks of its own token budget")
    if a.spec_tokens:
        spec = speculation(s, a.spec_tokens, a.acceptance, a.acceptance_length, a.draft_cost)
        s.spec = spec.spec()
        console.print(spec.describe(), markup=False, highlight=False)
    console.print(f"{headline(prediction_manifest(s))}; calibration {cal.origin}; the ceiling is the physical limit at "
                  "efficiency 1", markup=False, highlight=False)
    if depths is not None:
        a.input_len, a.output_len = a.input_len or 512, a.output_len or 128
        head, rows = report.depth_table(s, cal, depths, a.input_len, a.output_len)
        metrics = ["prefill", "decode"]
    else:
        a.input_len, a.output_len = a.input_len or 4096, a.output_len or 512
        head, rows = report.serve_table(s, cal, levels, a.input_len, a.output_len)
        metrics = ["throughput", "ttft", "tpot"]
        if s.kind == "sequential" and s.parallel == 1:
            console.print(f"{s.engine} serves one stream at a time (one slot): concurrency only queues; "
                          "--parallel N models N slots", markup=False)
    print_table(console, head, rows, a.format)
    note = report.band_note(s, cal, metrics)
    console.print(note, markup=False, highlight=False, style=None if s.calibrated else "yellow")
    if a.save or a.json:
        _predicted_result(a, console, s, cal, depths, levels, {"note": note, "columns": head, "rows": rows, "metrics": metrics})
    return 0


def _check_flags(a: argparse.Namespace) -> tuple[list[int] | None, list[int]]:
    """Refuse flags that would be accepted and ignored, before anything is printed; the depths of --test (else
    None) and the serving levels."""
    if not a.spec_tokens and (a.acceptance is not None or a.acceptance_length is not None or a.draft_cost is not None):
        raise UsageError("--acceptance, --acceptance-length and --draft-cost go with --spec-tokens N (drafted tokens "
                         "per step)")
    if a.test and (a.concurrency or a.parallel):
        raise UsageError("--concurrency and --parallel describe serving; --test predicts llama-bench's one stream: "
                         "drop one or the other")
    if a.depth and not a.test:
        raise UsageError("--depth goes with --test tg128|pp512|depth; a serving prediction's context is --input-len")
    if a.test:
        return [tokens(d, "--depth", zero=True) for d in (a.depth or "0").split(",") if d.strip()], []
    return None, int_list(a.concurrency or "1", "--concurrency")


def _predicted_result(a: argparse.Namespace, console: Console, s: Setup, cal: Calibration, depths: list[int] | None, levels: list[int] | None,
                      shown: dict[str, Any]) -> None:
    """The prediction as a result (kind predict): stored with --save, written with --json."""
    from ..predict import report
    from ..predict.runs import depth_levels, prediction, save_prediction, serve_levels

    if depths is not None:
        res = prediction(s, depth_levels(s, depths, a.input_len, a.output_len), None)
    else:
        res = prediction(s, serve_levels(s, levels or [], a.input_len, a.output_len),
                         {"input_len": a.input_len, "output_len": a.output_len})
    if a.save:
        res = save_prediction(Store(a.db), res, a.save)
        console.print(f"saved as run {res.run_id} (label {a.save}, provenance predicted)", markup=False)
    if a.json:
        # the keys predict --json wrote before it went through the result contract, kept beside it
        res.legacy = {"predicted": True, "calibrated": s.calibrated, "backend": s.backend,
                      "calibration": {"origin": cal.origin, "source": s.eff.source, "rows": s.eff.rows},
                      "band_pct": report.bands(s, cal, shown["metrics"]), "note": shown["note"],
                      "columns": shown["columns"], "rows": shown["rows"]}
        write_json(a.json, res)


#: The published measurements the package ships (copies of shared/reference's, a test keeps them equal):
#: what `calibrate` fits with no file given, and what the committed efficiency.toml was fitted on.
PUBLISHED_FILES = [Path(__file__).resolve().parents[1] / "data" / n for n in ("published.csv", "published-more.csv")]


#: GPU vendors by the words a device name carries (llama-bench's gpu_info, e.g. "Radeon 8060S Graphics (RADV
#: GFX1151)"), and the catalog id prefix of each vendor's boxes.
_VENDOR_WORDS = {"nvidia": ("nvidia", "geforce", "rtx", "tesla", "quadro"), "amd": ("amd", "radeon", "instinct"),
                 "apple": ("apple",)}


def _same_box(run_id: str, hardware: str | None, gpu: str | None, hw: Any, cat: Any) -> None:
    """Refuse a run that says it ran on another box than --hardware: calibrating one box's backend with another
    box's figures moves its constants to wherever the two disagree (a Strix Halo run given as an H100 pushed
    llama.cpp Vulkan's bandwidth share to its bound). Only what the run itself says counts: a published or
    predicted run's catalog id, an imported llama-bench run's GPU; a sweep's own machine is the client's."""
    if hardware and hardware != hw.id and hardware not in hw.aliases and hardware in cat.hardware:
        raise UsageError(f"run {run_id} ran on {hardware}, not {hw.id}: give --hardware {hardware}, or runs of "
                         f"{hw.id}")
    words = set((gpu or "").lower().replace("(", " ").replace(")", " ").split())
    said = [v for v, w in _VENDOR_WORDS.items() if words & set(w)]
    if len(said) == 1 and not hw.id.startswith(said[0] + "-"):
        raise UsageError(f"run {run_id} ran on '{gpu}', an {said[0].upper()} device, not {hw.id}: give the "
                         "--hardware it ran on ('tokenbench hardware' lists them)")


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _weights_in(name: str) -> str | None:
    """The GGUF weight format a model file's name carries (gpt-oss-20b-Q4_K_M.gguf: Q4_K_M), the longest match."""
    from ..predict.roofline import GGUF_FORMATS

    up = name.upper().replace("-", "_").replace(".", "_")
    found = [f for f in GGUF_FORMATS if f"_{f}_" in f"_{up}_"]
    return max(found, key=len) if found else None


def _same_model(run_id: str, names: list[str], model: Any, cat: Any) -> None:
    """Refuse a run whose own model names (served name, file) name another catalog model than --model (a
    gpt-oss-20b file given as llama-3.1-8b would pull the backend's constants to wherever the shapes disagree)."""
    text = _norm(" ".join(names))
    named = [m for m in cat.models if _norm(m) and _norm(m) in text]
    if named and model.id not in named:
        raise UsageError(f"run {run_id} served {names[-1]}, which is {max(named, key=len)}, not {model.id}: give "
                         f"--model {max(named, key=len)}")


def _physical(run_id: str, rows: list[Any], cat: Any, console: Console) -> None:
    """A measurement above the physical ceiling of the box, model and formats named cannot be theirs: refuse it.
    One far below what the packaged calibration predicts is said, not refused (a slow box is possible)."""
    from ..predict.calibration import Calibration
    from ..predict.predictor import predict_row

    cal = Calibration.packaged()
    low: list[tuple[float, Any]] = []
    for r in rows:
        res = predict_row(cat, cal, r)
        if res.ceiling is None or res.predicted is None:
            continue
        above = r.value < res.ceiling if r.unit == "ms" else r.value > res.ceiling
        if above:
            raise UsageError(f"run {run_id}: {r.test} at depth {r.depth} measured {r.value:g} {r.unit}, beyond the "
                             f"physical limit of {r.model} ({r.weights}) on {r.hardware} ({res.ceiling:.4g}): it ran "
                             "another box, model or format than --hardware, --model and --weights say")
        share = res.predicted / r.value if r.unit == "ms" else r.value / res.predicted
        if share < 1 / 3:
            low.append((share, r))
    if low:
        share, r = min(low, key=lambda x: x[0])
        console.print(f"warning: run {run_id}: {len(low)} of its {len(rows)} measurements are under a third of what "
                      f"the packaged calibration predicts on {r.hardware} ({r.test} at depth {r.depth}: {share:.0%}): "
                      "check that it ran there", style="yellow", markup=False, highlight=False)


def _run_engine(given: str | None, run_id: str, ran: str, hw: Any) -> str:
    """The engine a run calibrates: --engine, else the run's own; never one the box cannot run or the run did not."""
    from ..predict.calibration import backend_key
    from ..predict.roofline import check_engine

    engine = given or ran
    if not engine:
        raise UsageError(f"run {run_id} does not say which engine served it: give --engine")
    if engine.lower().startswith(("llama-server", "llama.cpp", "llamacpp", "llama-cpp-python")) \
            and len(engine.split()) == 1:
        engine = f"llama.cpp {hw.default_backend}"  # the box's backend: say --engine otherwise
    check_engine(hw, engine)
    if given and len(ran.split()) > 1 and backend_key(ran, hw.default_backend) != backend_key(engine, hw.default_backend):
        raise UsageError(f"run {run_id} ran on {ran}, not {given}: give --engine '{ran}'")
    return engine


def _run_weights(given: str | None, run_id: str, m: Any) -> str:
    """The weight format: --weights, else the run's own, else its model file's name; never against that name."""
    said = str(m.extra.get("model_file") or m.model or "")
    in_name = _weights_in(said)
    weights = (given or m.weights or m.quant or in_name or "").upper()
    if not weights:
        raise UsageError(f"run {run_id} does not say its weight format: give --weights")
    if in_name and weights.replace("-", "_") != in_name:
        raise UsageError(f"run {run_id} served {said}, whose weights are {in_name}, not {weights}: give "
                         f"--weights {in_name}")
    return weights


def _own_rows(a: argparse.Namespace, cat: Any, console: Console) -> list[Any]:
    """The user's stored runs as calibration rows, for the box, model and weights they name, each checked
    against what the run says of itself (its box, engine, model, weights) and against physics."""
    from ..predict.published import run_rows
    from ..results import load_result

    if not a.hardware or not a.model:
        raise UsageError("--runs needs --hardware ID and --model ID: the box they ran on and the catalog model "
                         "they served ('tokenbench hardware', 'tokenbench models')")
    hw = cat.find_hardware(a.hardware)
    model = cat.find_model(a.model)
    store = Store(a.db, readonly=True)
    rows = []
    for ref in a.runs:
        run = load_result(store, ref, latest=a.latest, kinds=("sweep", "depth", "bench"), command="calibrate --runs")
        m = run.manifest
        _same_box(run.run_id, m.hardware, m.gpu, hw, cat)
        engine = _run_engine(a.engine, run.run_id, m.engine or "", hw)
        _same_model(run.run_id, [str(x) for x in (m.model, m.extra.get("model_file")) if x], model, cat)
        weights = _run_weights(a.weights, run.run_id, m)
        got = run_rows(run, hw.id, engine, model.id, weights, (a.kv or m.kv or "F16").upper())
        if not got:
            raise UsageError(f"run {run.run_id} has no level calibration can use (complete, unflagged pp/tg or "
                             "serving levels)")
        _physical(run.run_id, got, cat, console)
        rows += got
    return rows


def cmd_calibrate(a: argparse.Namespace, argv: list[str], console: Console) -> int:
    from ..predict.calibration import write
    from ..predict.predictor import fit_calibration
    from ..predict.published import read_rows
    from ..predict.specs import Catalog

    rows = [r for f in (a.file or PUBLISHED_FILES) for r in read_rows(Path(f))]
    cat = Catalog.load()
    if a.runs:
        own = _own_rows(a, cat, console)
        console.print(f"{len(own)} measurements from {len(a.runs)} run(s) of your own, on {a.hardware}",
                      markup=False, highlight=False)
        rows += own
    elif a.hardware or a.model:
        raise UsageError("--hardware and --model go with --runs RUN...: the box and model of your own runs")
    cal = fit_calibration(cat, rows, "tokenbench " + redact.command(argv))
    write(cal, Path(a.out))
    for name, e in sorted(cal.backends.items()):
        bands = ", ".join(f"{m} ±{b.pct:.0f}%" for m, b in sorted(cal.bands.get(name, {}).items()))
        console.print(f"{name}: bandwidth share {e.eta_w:.2f}, {e.t_layer * 1e6:.0f} µs per layer; matmul share "
                      f"{e.eta_c:.2f} (routed experts x{e.eta_moe:.2f}), attention {e.eta_att:.2f}, "
                      f"{e.flops_per_w:.2f} TF/W of TDP ({e.rows} rows; cross-validated bands: {bands or 'none'})",
                      markup=False)
    console.print(f"wrote {a.out}", markup=False)
    return 0
