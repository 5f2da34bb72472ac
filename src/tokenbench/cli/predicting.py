"""Commands of the predictor: hardware, models, fit, predict, calibrate."""
from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path
from rich.console import Console
from typing import TYPE_CHECKING, Any
from .. import redact
from ..errors import UsageError
from ..store import Store
from .common import check_output, emit_json, int_list, saved, tokens, write_json
from .grammar.predicting import TESTS, add_predict_parser
from ..layout import plural

if TYPE_CHECKING:
    from ..predict.calibration import Calibration
    from ..predict.entrypoints import Predicted, SetupConfig
    from ..predict.roofline import Efficiency
    from ..predict.setup import Setup
    from ..predict.session import SessionShape
    from ..results import RunResult


def _setup_config(a: argparse.Namespace) -> SetupConfig:
    """The box, model and engine the options name (fit's and predict's: fit has no --ubatch, --parallel, ...)."""
    from ..predict.entrypoints import SetupConfig

    return SetupConfig(a.hardware, a.model, a.weights, a.kv, a.engine, getattr(a, "engine_version", None),
                       getattr(a, "calibration", None), ubatch=getattr(a, "ubatch", None),
                       parallel=getattr(a, "parallel", None), tp=getattr(a, "tp", None),
                       flash_attn=getattr(a, "flash_attn", "on") != "off",
                       batch_tokens=getattr(a, "max_num_batched_tokens", None), arrivals=getattr(a, "arrivals", None),
                       cache_ram=getattr(a, "cache_ram", None))


def cmd_catalog(a: argparse.Namespace, console: Console) -> int:
    from ..console import print_table
    from ..predict import tables
    from ..predict.specs import Catalog

    check_output(a.json, "--json")
    cat = Catalog.load()
    head, rows = tables.hardware_table(cat) if a.command == "hardware" else tables.models_table(cat)
    print_table(console, head, rows, a.format)
    if cat.user_file:
        console.print(f"including entries from {cat.user_file}", style="dim", markup=False)
    if a.json:
        entries = cat.hardware if a.command == "hardware" else cat.models
        emit_json(a.json, {"tool": "tokenbench", "kind": a.command, "user_file": str(cat.user_file or "") or None,
                           "entries": [asdict(e) for e in entries.values()]})
    return 0


def cmd_fit(a: argparse.Namespace, console: Console) -> int:
    from ..console import print_hanging
    from ..predict import tables
    from ..predict.entrypoints import engine_note, setup

    check_output(a.json, "--json")
    ctx = tokens(a.context, "--context")  # every argument checked before anything is said
    cfg = _setup_config(a)
    s, cal = setup(cfg)
    if note := engine_note(cfg, s):
        print_hanging(console, note)
    f = s.fit(ctx, a.concurrency)
    for line in tables.fit_lines(s, f, ctx, a.concurrency, cal):
        print_hanging(console, line)  # a line that runs on is indented under its own, never back at the margin
    # "does NOT fit" is an answer, as a dirty bench is guard's: 1, the JSON written; so is a context past the
    # model's own, which vLLM refuses to start with whatever the memory holds
    verdict = f.fits and not s.model.past_context(ctx)
    if a.json:  # fits: the verdict printed and exited on (data/fit.schema.json); the memory's answer beside it
        memory = asdict(f)
        emit_json(a.json, {"tool": "tokenbench", "kind": "fit", "hardware": s.hw.id, "model": s.model.id,
                           "weights": s.quant.weights, "kv": s.quant.kv, "engine": s.engine, "context": ctx,
                           "concurrency": a.concurrency, "model_context": s.model.context, "fits": verdict,
                           "fits_in_memory": memory.pop("fits"), "past_model_context": s.model.past_context(ctx),
                           "unit": "GiB", **memory,
                           "split_decode": tables.split_decode_json(s, cal, ctx) if not f.fits else None})
    return 0 if verdict else 1


#: What predict --against reads besides its file: every row says its own box, model and setup.
AGAINST_READS = {"command", "against", "calibration", "json", "format", "sessions"}


def _refuse_what_against_ignores(a: argparse.Namespace) -> None:
    """A one-line error naming the options given (not at their defaults) that --against would accept and ignore."""
    parser = argparse.ArgumentParser()
    add_predict_parser(parser.add_subparsers(dest="command"))  # predict's own options, at their defaults
    defaults = vars(parser.parse_args([a.command, "--against", "x"]))
    given = [k for k, v in vars(a).items() if k not in AGAINST_READS and k in defaults and v != defaults[k]]
    if given:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(f"--against predicts each row of the file with the box, model and setup the row states: "
                         f"{flags} would be ignored; drop {'it' if len(given) == 1 else 'them'}")


def _predict_against(a: argparse.Namespace, console: Console) -> int:
    """Predict every row of a published-measurements file and set each prediction beside its measurement."""
    from ..console import print_table
    from ..predict import tables
    from ..predict.accuracy import against
    from ..predict.entrypoints import load_calibration
    from ..predict.measured import read_rows
    from ..predict.specs import Catalog

    cal = load_calibration(a.calibration)
    if a.calibration:  # the user's own calibration: each row before it (the packaged one) and after
        from ..predict.accuracy import before_after, before_after_lines, before_after_table
        from ..predict.calibration import Calibration

        ba = before_after(Catalog.load(), Calibration.packaged(), cal, read_rows(Path(a.against)))
        head, rows = before_after_table(ba)
        print_table(console, head, rows, a.format)
        for line in before_after_lines(ba):
            console.print(line, markup=False, highlight=False)
        if a.json:
            emit_json(a.json, ba.to_json())
        return 0
    rep = against(Catalog.load(), cal, read_rows(Path(a.against)))
    head, rows = tables.against_table(rep)
    print_table(console, head, rows, a.format, keep=(), group=0)
    for line in tables.summary_lines(rep):
        console.print(line, markup=False, highlight=False)
    if a.json:
        emit_json(a.json, rep.to_json())
    if rep.results and all(r.predicted is None and r.ceiling is None for r in rep.results):
        raise UsageError(f"{a.against}: no row could be predicted (each row's reason is above): check its hardware, "
                         "model and metric columns against 'tokenbench hardware' and 'tokenbench models'")
    return 0


def cmd_predict(a: argparse.Namespace, console: Console) -> int:
    from ..console import print_table
    from ..predict.entrypoints import PredictConfig, SpecConfig, engine_note, predict
    from ..predict.runs import headline, prediction_manifest
    from ..predict.tables import none_run

    check_output(a.json, "--json")  # before the tables are printed and the prediction stored
    if a.against:
        if a.sessions is not None:
            raise UsageError("--against predicts the rows of a file; --sessions predicts an agent's session: drop one "
                             "or the other")
        _refuse_what_against_ignores(a)
        return _predict_against(a, console)
    if not a.hardware or not a.model:
        raise UsageError("predict needs --hardware and --model (or --against FILE)")
    depths, levels, input_len, output_len = _check_flags(a)
    shape = _session_shape(a, levels)
    cfg = PredictConfig(_setup_config(a), levels, depths, input_len, output_len, shape, a.sessions,
                        SpecConfig(a.spec_tokens, a.acceptance, a.acceptance_length, a.draft_cost)
                        if a.spec_tokens else None, TESTS[a.test or "depth"])
    out = predict(cfg, save=bool(a.save))
    s, cal = out.setup, out.calibration
    if out.speculation:
        console.print(out.speculation, markup=False, highlight=False)
    console.print(f"{headline(prediction_manifest(s))}; calibration {cal.origin}; a rate's ceiling and a time's floor "
                  "are its physical limits, at efficiency 1", markup=False, highlight=False)
    if note := engine_note(cfg.setup, s):
        console.print(note, markup=False, highlight=False)
    for line in out.remarks:
        console.print(line, markup=False)
    if shape is not None:
        _print_sessions(a, console, shape, out)
        shown: dict[str, Any] = {"note": out.note, "tables": [
            {"agents": t.agents, "columns": t.columns, "rows": t.rows, "lines": t.lines} for t in out.tables],
            "metrics": out.metrics, "warm": out.warm.to_dict() if out.warm is not None else None}
    else:
        (table,) = out.tables
        if cfg.depths is None and out.input_len is not None and out.output_len is not None:  # a TTFT needs its prompt
            console.print(f"{out.input_len:,} in / {out.output_len:,} out tokens a request (--input-len, "
                          "--output-len)", markup=False, highlight=False)
        print_table(console, table.columns, table.rows, a.format)
        if out.note:
            print_band_note(console, out.note, a.format, None if s.calibrated else "yellow")
        shown = {"note": out.note, "columns": table.columns, "rows": table.rows, "metrics": out.metrics}
    shown["band_pct"], shown["band_held"] = out.band_pct(), out.band_held()
    if a.save or a.json:
        _store_and_write(a, console, s, cal, out.run(), shown)
    return 1 if shape is None and none_run(table.rows) else 0  # nothing predicted: as fit, where nothing fits


def _check_flags(a: argparse.Namespace) -> tuple[list[int] | None, list[int], int | None, int | None]:
    """Refuse flags that would be accepted and ignored, before anything is printed; the depths of --test (else
    None), the serving levels, and a serving or depth prediction's input and output lengths (None: not given, or
    a session's, which _session_shape reads)."""
    if not a.spec_tokens and (a.acceptance is not None or a.acceptance_length is not None or a.draft_cost is not None):
        raise UsageError("--acceptance, --acceptance-length and --draft-cost go with --spec-tokens N (drafted tokens "
                         "per step)")
    if a.sessions is not None and (a.test or a.depth):
        raise UsageError(f"{'--test' if a.test else '--depth'} predicts llama-bench's one stream at a depth; "
                         "--sessions predicts an agent's session, whose depth grows turn by turn: drop one or the other")
    if a.test and (a.concurrency or a.parallel):
        raise UsageError("--concurrency and --parallel describe serving; --test predicts llama-bench's one stream: "
                         "drop one or the other")
    if a.depth and not a.test:
        raise UsageError("--depth goes with --test tg128|pp512|depth; a serving prediction's context is --input-len")
    input_len = output_len = None
    if a.sessions is None:
        given = [f for f, v in SESSION_FLAGS.items() if getattr(a, v) is not None]
        if given:
            raise UsageError(f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} an agent's session: add "
                             "--sessions")
        input_len, output_len = _length(a.input_len, "--input-len"), _length(a.output_len, "--output-len")
    if a.test:
        depths = [tokens(d, "--depth", zero=True) for d in (a.depth or "0").split(",") if d.strip()]
        return depths, [], input_len, output_len
    return None, int_list(a.concurrency or "1", "--concurrency"), input_len, output_len


#: The options only a session prediction reads, and their attributes.
SESSION_FLAGS = {"--turns": "turns", "--shared-prefix": "shared_prefix", "--tool-len": "tool_len",
                 "--think-time": "think_time", "--max-context": "max_context"}


def _length(text: str | None, what: str) -> int | None:
    """A serving or depth prediction's one length; a drawn one (uniform:, normal:, file:) is a session's."""
    if text is None:
        return None
    if ":" in text:
        raise UsageError(f"{what} {text}: a drawn length goes with --sessions; a serving or --test prediction takes "
                         "one length, e.g. 4096 or 4k")
    return tokens(text, what)


def _session_shape(a: argparse.Namespace, agents: list[int]) -> SessionShape | None:
    """The session --sessions asks for (None without it), its lengths parsed as sweep --sessions parses them."""
    if a.sessions is None:
        return None
    if a.sessions and max(agents) > a.sessions:
        raise UsageError(f"--sessions {a.sessions} with --concurrency {max(agents)}: only {a.sessions} agents could "
                         f"run at once; give --concurrency {a.sessions} or less, or more sessions")
    return session_shape(a)


def session_shape(a: argparse.Namespace) -> SessionShape:
    """The session the options describe (add_session_options), its lengths parsed as sweep --sessions parses them,
    sweep's defaults where none is given."""
    from .. import draws
    from ..predict import session as ps

    def draw(text: str | None, what: str, default: float | str, unit: str = "tokens") -> draws.Draw:
        try:
            return draws.parse(text if text is not None else str(default), what, unit)
        except draws.DrawError as e:
            raise UsageError(str(e)) from None

    shape = ps.SessionShape(
        turns=a.turns or ps.DEFAULT_TURNS,
        shared_prefix=tokens(a.shared_prefix, "--shared-prefix", zero=True) if a.shared_prefix is not None
        else ps.DEFAULT_SHARED_PREFIX,
        input_len=draw(a.input_len, "--input-len", ps.DEFAULT_INPUT_LEN),
        tool_len=draw(a.tool_len, "--tool-len", ps.DEFAULT_TOOL_LEN),
        output_len=draw(a.output_len, "--output-len", ps.DEFAULT_OUTPUT_LEN),
        think_time=draw(a.think_time, "--think-time", ps.DEFAULT_THINK_TIME, "s"),
        max_context=tokens(a.max_context, "--max-context") if a.max_context else None)
    shape.check()
    return shape


def session_text(sh: SessionShape) -> str:
    """An agent's session in one line: its turns, its lengths and its think time."""
    return (f"session: {sh.turns} turns; tokens: shared prefix {sh.shared_prefix}, task {sh.input_len.describe()}, "
            f"tool results {sh.tool_len.describe()}, answers {sh.output_len.describe()}"
            + (f", max context {sh.max_context:,}" if sh.max_context else "") + f"; think {sh.think_time.describe()}")


def _print_sessions(a: argparse.Namespace, console: Console, sh: SessionShape, out: Predicted) -> None:
    """The session, then one table per number of agents, each with its session's time and tokens and what it
    assumed, then the band note. (The run ``out.run()`` makes has two levels per number of agents, with the
    prefix cache and without it, as a measured session run's ``cache`` "warm" and "busted".)"""
    from ..cells import agents_text
    from ..console import print_table

    console.print(session_text(sh), markup=False, highlight=False)
    for t in out.tables:
        n = t.agents or 0
        console.print(f"{agents_text(n)}:", markup=False, highlight=False)
        print_table(console, t.columns, t.rows, a.format)
        for line in t.lines:
            console.print(line, markup=False, highlight=False)
        for note in t.notes:
            console.print(note, markup=False, highlight=False, style="dim")
    for line in out.warm.lines() if out.warm is not None else []:
        console.print(line, markup=False, highlight=False)
    print_band_note(console, out.note, a.format, None if out.setup.calibrated else "yellow")


def print_band_note(console: Console, note: str, fmt: str, style: str | None) -> None:
    """A prediction's band note (banding.band_note) under its table: each of its lines wrapped between words, a
    line's run-on indented past its own start; in one paragraph beside a Markdown table."""
    from ..predict.banding import one_line

    if fmt == "markdown":
        console.print(one_line(note), markup=False, highlight=False, style=style, soft_wrap=True)
        return
    for line in note.splitlines():
        lead = line[:len(line) - len(line.lstrip(" -"))]  # a reason's "  - ": its run-on under its text
        wrapped = textwrap.wrap(line, max(20, console.width), subsequent_indent=" " * (len(lead) if lead else 2),
                                break_long_words=False, break_on_hyphens=False) or [line]
        console.print("\n".join(wrapped), markup=False, highlight=False, style=style, soft_wrap=True)


def _store_and_write(a: argparse.Namespace, console: Console, s: Setup, cal: Calibration, res: RunResult,
                     shown: dict[str, Any]) -> None:
    """A prediction stored with --save and written with --json, beside what the terminal showed (``shown``: the
    band note and metrics, and the table's columns and rows, or a session's tables)."""
    from ..predict.runs import save_prediction

    if a.save:
        if not res.outcomes:  # a run of no level, stored "complete", that show printed as an empty table
            raise UsageError(f"--save {a.save}: nothing was predicted (no setup above fits the box), so no run was "
                             "saved; 'tokenbench fit' says what would fit")
        store = Store(a.db)
        res = save_prediction(store, res, a.save)
        saved(console, res, store.path, a.format)
    if a.json:
        # the keys predict --json wrote before it went through the result contract, kept beside it
        res.legacy = {"predicted": True, "calibrated": s.calibrated, "backend": s.backend,
                      "calibration": {"origin": cal.origin, "source": s.eff.source, "rows": s.eff.rows},
                      **{k: v for k, v in shown.items() if k != "metrics"}}
        write_json(a.json, res)


def cmd_calibrate(a: argparse.Namespace, argv: list[str], console: Console) -> int:
    from ..predict.calibration import write
    from ..predict.entrypoints import OwnRuns, calibrate
    from ..predict.fitting import fold_processes
    from ..predict.banding import band_text

    if not a.runs and (a.hardware or a.model):
        raise UsageError("--hardware and --model go with --runs RUN...: the box and model of your own runs")
    check_output(a.out, "--out")  # before the fit's seconds, not after them
    own = OwnRuns(Store(a.db, readonly=True), a.runs, a.latest, a.hardware, a.model, a.engine, a.weights, a.kv) \
        if a.runs else None

    def fitting() -> None:  # said once the files and runs are read: a bad one is refused before it
        # the fit, then one fit per source left out (the bands): about 10 s on one core, less on more
        print(f"fitting every backend, then each with one source left out, on "
              f"{plural(fold_processes(64), 'process', 'processes')}...", file=sys.stderr, flush=True)
    fitted = calibrate([Path(f) for f in a.file] if a.file else None, "tokenbench " + redact.command(argv), own,
                       fitting)
    for w in fitted.warnings:
        console.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    if own is not None:
        console.print(f"{fitted.own} measurements from {plural(len(a.runs), 'run')} of your own, on {a.hardware}",
                      markup=False, highlight=False)
    cal = fitted.calibration
    write(cal, Path(a.out))
    for name, e in sorted(cal.backends.items()):
        bands = ", ".join(f"{m} {band_text(b)}" for m, b in sorted(cal.bands.get(name, {}).items()))
        console.print(f"{name}: bandwidth share {_fitted(e, 'eta_w')}, {_fitted(e, 't_layer')} per layer; matmul "
                      f"share {_fitted(e, 'eta_c')} (routed experts x{_fitted(e, 'eta_moe')}), attention "
                      f"{_fitted(e, 'eta_att')}, {_fitted(e, 'flops_per_w')} ({e.rows} rows; cross-validated bands: "
                      f"{bands or 'none'})"
                      f"{'; anchored on your runs' if own is not None and 'anchored' in e.source else ''}",
                      markup=False)
    console.print(f"wrote {a.out}", markup=False)
    return 0


#: A fitted constant within this share of its range from a bound sits at it: the fit would have gone past it.
AT_BOUND = 0.02


def _fitted(e: Efficiency, name: str) -> str:
    """A fitted constant as `calibrate` prints it; one the fit pushed to a bound says so, as it was not measured
    there (the power term at its upper bound is no limit at all, not 9.87 TF/W). Routed experts at 1.00 lose
    nothing: a share, not a bound the fit ran into."""
    from ..predict.roofline import PARAM_BOUNDS

    v = getattr(e, name)
    lo, hi = PARAM_BOUNDS[name]
    room = AT_BOUND * (hi - lo)
    at = "" if name == "eta_moe" else "lower" if v <= lo + room else "upper" if v >= hi - room else ""
    if name == "flops_per_w":
        return "no power limit (TF/W at its bound)" if at == "upper" else \
            f"{v:.2f} TF/W of TDP" + (" (at its bound)" if at else "")
    text = f"{v * 1e6:.0f} µs" if name == "t_layer" else f"{v:.2f}"
    return text + (f" (at its {at} bound)" if at else "")
