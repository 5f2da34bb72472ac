"""The predictor's library calls, one per command that composes it: ``predict`` answers a typed ``PredictConfig``
with a ``Predicted`` (the setup, the tables the CLI prints, the prediction as a run on demand), and ``calibrate``
fits the constants to published rows and a user's own runs, returning a ``Calibrated``. The CLI parses options
into these configs and prints what comes back; nothing here prints."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .. import registry
from ..errors import UsageError
from ..finding import Code, Finding
from ..layout import plural
from ..store import Store
from .calibration import Calibration
from .fitting import fit_calibration, fittable_rows
from .formats import GGUF_FORMATS
from .measured import SKIPPED, Row, read_rows, rows_measured_clean
from .own import own_rows
from .queue import Arrivals
from .runs import depth_levels, prediction, serve_levels, session_level, speculation
from .session import SessionPrediction, SessionShape, predict_session
from .setup import Setup, default_slots, usual_setup
from .specs import Catalog
from .banding import BandLog, band_note
from .tables import (context_remark, depth_context, depth_table, not_run_remark, queued_remark, serve_table,
                     session_lines, session_metrics, session_table)
from .warm import WarmPrediction, predict_warm

if TYPE_CHECKING:
    from ..results import RunResult

#: The published measurements the package ships (copies of the reference set, a test keeps them equal):
#: what `calibrate` fits with no file given, and what the committed efficiency.toml was fitted on.
PUBLISHED_FILES = [Path(__file__).resolve().parents[1] / "data" / n for n in ("published.csv", "published-more.csv",
                                                                                    "published-current.csv",
                                                                                    "published-2024.csv")]


@dataclass(frozen=True, slots=True)
class SetupConfig:
    """The box, model, formats and engine a prediction is for, and the calibration it reads (a TOML that
    `calibrate` wrote; None: the packaged one)."""

    hardware: str
    model: str
    weights: str | None = None  # None: Q4_K_M for a GGUF engine, else BF16
    kv: str = "auto"  # auto: the model's dtype (F16 for a GGUF engine)
    engine: str | None = None  # None: the box's usual one (setup.usual_setup), said in the output
    engine_version: str | None = None
    calibration: str | None = None
    ubatch: int | None = None  # llama.cpp's -ub (None: 512)
    parallel: int | None = None  # llama.cpp's slots (None: its server's own default, _own_slots)
    tp: int | None = None  # GPUs sharing every layer (None: 1)
    flash_attn: bool = True
    batch_tokens: int | None = None  # a batching engine's token budget per step (None: its default)
    arrivals: Arrivals | None = None  # how a closed loop's prompts arrive (None: together)
    cache_ram: int | None = None  # llama-server's --cache-ram in MiB (None: its default, on; 0: off)


def read_calibration(path: str) -> str:
    """The TOML at ``path``; a file that cannot be read is a one-line error saying what to give."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--calibration {path}: cannot read it ({getattr(e, 'strerror', None) or e}); "
                         "give the TOML that tokenbench calibrate wrote") from None


def load_calibration(path: str | None) -> Calibration:
    """The calibration at ``path``, or the packaged one."""
    return Calibration.packaged() if not path else Calibration.from_toml(read_calibration(path), origin=path)


def ggml_formats(cfg: SetupConfig) -> str | None:
    """The weights named, where only ggml's engines run them (a GGUF quant), or None."""
    if cfg.weights and cfg.weights.upper() in GGUF_FORMATS - {"F16", "F32"}:
        return f"{cfg.weights.upper()} weights"
    return None


def default_engine(cfg: SetupConfig, cat: Catalog) -> str:
    """The engine when none is named: llama.cpp for a format only ggml runs, else the box's usual one
    (setup.usual_setup: what recommend ranks the box with too)."""
    hw = cat.find_hardware(cfg.hardware)
    usual = usual_setup(hw)[0]
    if ggml_formats(cfg) and not registry.engine(usual).gguf:
        return f"llama.cpp {hw.default_backend}"
    return usual


def engine_note(cfg: SetupConfig, s: Setup) -> str | None:
    """What a prediction says when it chose the engine: the box's usual one, the same fit, predict and recommend
    take (setup.usual_setup), or the one its formats need; None when --engine named it."""
    if cfg.engine:
        return None
    if (why := ggml_formats(cfg)) and usual_setup(s.hw)[0] != s.engine:
        return f"engine: {s.engine}, which runs {why} (--engine to change)"
    return f"engine: {s.engine}, the usual one on {s.hw.id} (fit, predict and recommend take it; --engine to change)"


def setup(cfg: SetupConfig) -> tuple[Setup, Calibration]:
    """The prediction's setup, and the calibration its constants come from (the box's usual engine where
    ``cfg.engine`` names none)."""
    cal = load_calibration(cfg.calibration)
    cat = Catalog.load()
    engine = cfg.engine or default_engine(cfg, cat)
    gguf = registry.engine(engine).gguf  # llama.cpp, llama-cpp-python, ollama: a GGUF quant, an f16 cache
    weights = cfg.weights or ("Q4_K_M" if gguf else "BF16")
    kv = cfg.kv.upper()
    if kv == "AUTO" and gguf:
        kv = "F16"
    version = cfg.engine_version
    if cfg.cache_ram is not None and not registry.engine(engine).host_prompt_cache:
        raise UsageError(f"--cache-ram is llama-server's host prompt cache; {engine} keeps none: leave it out")
    return Setup.make(cat, cal, cfg.hardware, cfg.model, weights, kv, engine,
                      ubatch=cfg.ubatch or 512, parallel=cfg.parallel or 1, tp=cfg.tp or 1,
                      flash_attn=cfg.flash_attn, era=registry.build_date(engine, version) if version else None,
                      batch_tokens=cfg.batch_tokens, arrivals=cfg.arrivals or "together",
                      prompt_cache=cfg.cache_ram != 0), cal


@dataclass(frozen=True, slots=True)
class SpecConfig:
    """Speculative decoding: ``tokens`` drafted per target pass, and one of an acceptance probability or a mean
    acceptance length; a draft token's cost as a share of a target pass (None: a small draft model's)."""

    tokens: int
    acceptance: float | None = None
    acceptance_length: float | None = None
    draft_cost: float | None = None


@dataclass(frozen=True, slots=True)
class PredictConfig:
    """One prediction: serving ``levels`` (concurrency, or agents with ``session``), or llama-bench's one stream
    at ``depths``; a request's lengths (None: 4096/512 serving, 512/128 at depths)."""

    setup: SetupConfig
    levels: list[int] = field(default_factory=lambda: [1])
    depths: list[int] | None = None
    input_len: int | None = None
    output_len: int | None = None
    session: SessionShape | None = None
    sessions: int | None = None  # sessions each agent runs (None or 0: as many as the window holds)
    spec: SpecConfig | None = None
    tests: tuple[str, ...] = ("pp", "tg")  # at depths: llama-bench's tests shown (--test pp512: pp; tg128: tg)

    def lengths(self) -> tuple[int, int]:
        """A request's prompt and output lengths: those given, else 512/128 at depths, 4096/512 serving."""
        if self.depths is not None:
            return self.input_len or 512, self.output_len or 128
        return self.input_len or 4096, self.output_len or 512


@dataclass(slots=True)
class PredictedTable:
    """One table of a prediction as header and rows of strings; a session's per number of ``agents``, with the
    lines under it and the notes it is the first to raise."""

    columns: list[str]
    rows: list[list[str]]
    agents: int | None = None
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Predicted:
    """What ``predict`` answers: the setup and calibration, speculative decoding described (None without), the
    tables, the metrics their bands cover and the band note, the lengths a serving or depth prediction assumed
    (None for a session's), what is said before the tables (``remarks``), and a session's predictions."""

    setup: Setup
    calibration: Calibration
    config: PredictConfig
    speculation: str | None
    tables: list[PredictedTable]
    metrics: list[str]
    note: str
    input_len: int | None
    output_len: int | None
    remarks: list[str] = field(default_factory=list)
    session_predictions: list[SessionPrediction] = field(default_factory=list)
    warm: WarmPrediction | None = None  # a session's: the live sessions its KV cache keeps warm
    log: BandLog = field(default_factory=BandLog)  # every band the tables' cells printed: the note's and JSON's

    def run(self) -> RunResult:
        """The prediction as a result (kind predict), not stored: its levels, as a stored run keeps them."""
        s, cfg = self.setup, self.config
        if cfg.session is not None:
            # with the cache and without it, as a measured session run with its baseline: show and compare read
            # what the cache bought from the pair
            levels = [session_level(p, cfg.sessions or None, cache) for p in self.session_predictions
                      for cache in (True, False)]
            for lv in levels[::2]:  # the warm ones: flagged where they pass the sessions the cache keeps warm
                if self.warm is not None and (why := self.warm.past(lv.concurrency or 0)):
                    lv.add(Finding(Code.PAST_CACHE_CLIFF, why, "read the uncached figures for the sessions past it",
                                   observed=lv.concurrency, threshold=self.warm.holds, unit="agents"))
            return prediction(s, levels, cfg.session.workload(cfg.sessions or None), bands=self.note,
                              band_pct=self.band_pct())
        assert self.input_len is not None and self.output_len is not None
        if cfg.depths is not None:
            return prediction(s, depth_levels(s, cfg.depths, self.input_len, self.output_len, cfg.tests), None,
                              bands=self.note, band_pct=self.band_pct())
        return prediction(s, serve_levels(s, cfg.levels, self.input_len, self.output_len),
                          {"input_len": self.input_len, "output_len": self.output_len}, bands=self.note,
                          band_pct=self.band_pct())

    def band_pct(self) -> dict[str, float | None] | None:
        """Each metric's widest band as the tables' cells printed it (None: uncalibrated)."""
        return self.log.band_pct(self.metrics) if self.setup.calibrated else None

    def band_held(self) -> list[dict[str, object]]:
        """The cells whose band's fast end was held at the physical limit (a rate's ceiling, a time's floor)."""
        return self.log.held()


def predict(cfg: PredictConfig, save: bool = False) -> Predicted:
    """Predict ``cfg``: its setup, speculative decoding, and the tables a user reads (a session's per number of
    agents, else llama-bench's depths or the serving levels), each cell an estimate with its band. ``save``: the
    prediction is to be stored beside measured runs, refused where no measurement of its backend stands behind it.
    """
    s, cal = setup(cfg.setup)
    input_len, output_len = cfg.lengths()
    s, slots = _own_slots(cfg, s, input_len + output_len)
    # the deepest context the tables reach (bands widen beyond the backend's rows): a depth's prompt or its
    # generation on top of the depth, a serving request's prompt and output; a session's grows turn by turn
    reached = 0 if cfg.session is not None else (max(cfg.depths or [0]) + max(input_len, output_len)
                                                 if cfg.depths is not None else input_len + output_len)
    s.reach = replace(s.reach, depth=reached, concurrency=max(cfg.levels or [1]))
    if save and not s.calibrated:
        raise UsageError(f"--save: no measurements of {s.backend} stand behind an estimate, so there is none to store "
                         "beside measured runs (predict shows only the ceiling); anchor it first with calibrate --runs")
    if cfg.setup.ubatch and s.kind != "sequential":
        raise UsageError(f"--ubatch is llama.cpp's -ub; {s.engine} prefills in chunks of its own token budget")
    described = None
    if cfg.spec is not None:
        spec = speculation(s, cfg.spec.tokens, cfg.spec.acceptance, cfg.spec.acceptance_length, cfg.spec.draft_cost)
        s.spec = spec.spec()
        described = spec.describe()
    if cfg.session is not None:
        return _predict_sessions(cfg, cfg.session, s, cal, described, [slots] if slots else [])
    remarks: list[str] = []
    log = BandLog()
    if cfg.depths is not None:
        head, rows = depth_table(s, cal, cfg.depths, input_len, output_len, cfg.tests, log)
        metrics = [m for t, m in (("pp", "prefill"), ("tg", "decode")) if t in cfg.tests]
    else:
        head, rows = serve_table(s, cal, cfg.levels, input_len, output_len, log)
        metrics = ["throughput", "ttft", "tpot"]
        if slots:
            remarks.append(slots)
        if s.kind == "sequential" and s.parallel == 1:
            remarks.append(f"{s.engine} serves one stream at a time (one slot): concurrency only queues; "
                           "--parallel N models N slots")
        state = s.slot_state_bytes(input_len + output_len)
        saving = s.slot_save(input_len + output_len)
        if saving:
            remarks.append(f"TTFT counts llama-server saving each finished request's slot ({state / 2**20:,.0f} MiB of "
                           f"KV cache) to its host prompt cache before the next one starts: {saving * 1e3:,.0f} ms "
                           "a request, no slot running meanwhile (--cache-ram, on by default; --cache-ram 0 "
                           "removes it, and the cache with it: predict --cache-ram 0)")
    longest = input_len + output_len if cfg.depths is None else \
        depth_context(max(cfg.depths), input_len, output_len, cfg.tests)
    if all(r[-1] == "no" for r in rows):
        metrics = []  # no cell printed a band: no note on bands
    remarks += [r for r in [context_remark(s.model, longest),
                            not_run_remark(rows, "depth" if cfg.depths is not None else "concurrency"),
                            queued_remark(rows, "concurrency")] if r]
    return Predicted(s, cal, cfg, described, [PredictedTable(head, rows)], metrics, band_note(s, cal, metrics, log),
                     input_len, output_len, remarks, log=log)


def _own_slots(cfg: PredictConfig, s: Setup, request: int) -> tuple[Setup, str | None]:
    """llama.cpp's server serving (not llama-bench's depths) with the slots it starts when --parallel is not given
    (setup.default_slots) for sequences of ``request`` tokens or a session's last turn, in the builds
    --engine-version names (none: the newest), and the line that says how many and why (None: no such line)."""
    e = registry.engine(s.engine)
    if cfg.setup.parallel is not None or cfg.depths is not None or s.kind != "sequential" or not e.auto_slots_since:
        return s, None
    context = request if cfg.session is None else cfg.session.longest()
    since = registry.month_text(e.auto_slots_since)
    v = cfg.setup.engine_version
    build = registry.build_date(s.engine, v) if v else ""
    own = e.default_slots(build)
    if own == 1:
        return s, (f"1 slot: llama-server's default in builds before {since} (--engine-version {v}); later builds "
                   f"start {registry.AUTO_SLOTS}")
    slots = default_slots(s, context, build)
    why = (f"its own default since builds of {since} (-np auto)" if slots == own
           else f"of its default {own}, as many sequences of {context:,} tokens as the memory holds")
    return s.with_slots(slots), f"{plural(slots, 'slot')} on llama-server: {why}; --parallel N to set them"


def _predict_sessions(cfg: PredictConfig, shape: SessionShape, s: Setup, cal: Calibration,
                      described: str | None, remarks: list[str]) -> Predicted:
    """One table per number of agents, each with its session's time and tokens and the notes it is the first to
    raise; the run has two levels per number of agents, with the prefix cache and without it."""
    shown: list[PredictedTable] = []
    metrics: list[str] = []
    said: set[str] = set()
    sessions: list[SessionPrediction] = []
    log = BandLog()
    warm: WarmPrediction | None = None
    for n in cfg.levels:
        p = predict_session(s, shape, n)
        warm = warm or predict_warm(s, p, cfg.setup.cache_ram)  # of the session's shape, whatever the agents
        head, rows = session_table(s, cal, p, log)
        new = [note for note in dict.fromkeys(p.notes) if note not in said]
        said.update(new)
        past_cliff = warm.past(n)
        shown.append(PredictedTable(head, rows, n, session_lines(s, cal, p, cfg.sessions or None, log)
                                    + ([past_cliff] if past_cliff else []), new))
        sessions.append(p)
        metrics += [m for m in (*session_metrics(n), *(("throughput",) if n > 1 else ())) if m not in metrics]
    # the note under the tables names what the furthest of them reaches: the deepest turn, the most agents
    s.reach = replace(s.reach, depth=max(p.turns[-1].context for p in sessions), concurrency=max(cfg.levels))
    past = context_remark(s.model, max(p.turns[-1].context for p in sessions) + shape.output)
    return Predicted(s, cal, cfg, described, shown, metrics, band_note(s, cal, metrics, log), None, None,
                     remarks + ([past] if past else []), sessions, warm, log)


@dataclass(frozen=True, slots=True)
class OwnRuns:
    """The user's own runs that anchor a fit: run ids, prefixes or labels in ``store`` (``latest``: a shared label
    means the newest), and the box, model and setup they ran on where a run does not say."""

    store: Store
    refs: list[str]
    latest: bool = False
    hardware: str | None = None
    model: str | None = None
    engine: str | None = None
    weights: str | None = None
    kv: str | None = None


@dataclass(slots=True)
class Calibrated:
    """What ``calibrate`` answers: the fitted calibration, the measurements it took from the user's own runs and
    what it warned of while reading them."""

    calibration: Calibration
    own: int = 0
    warnings: list[str] = field(default_factory=list)


def calibrate(files: list[Path] | None, command: str, own: OwnRuns | None = None,
              fitting: Callable[[], None] | None = None) -> Calibrated:
    """Fit every backend's constants and bands to the rows of ``files`` (None: the published rows the package
    ships) and ``own`` runs, recording ``command`` as how it was made; ``fitting`` is called once every file and
    run has been read (a bad one refused), as the fit starts."""
    rows: list[Row] = [r for f in (files or PUBLISHED_FILES) for r in read_rows(Path(f))]
    cat = Catalog.load()
    warnings: list[str] = []
    if files:  # a file tokenbench exported says each level's state in its rows' notes: a flagged one is left out
        rows, skipped = rows_measured_clean(rows)
        if skipped:
            warnings.append(f"left out {plural(skipped, 'row')} whose note says its level is not what the box does "
                            f"({', '.join(sorted(SKIPPED))}, or a dirty guard), as calibrate --runs leaves it out")
    if files:  # a file whose rows the fit cannot read made a calibration of nothing, said by nothing
        why: Counter[str] = Counter()
        used = len(fittable_rows(cat, rows, why))
        told = "; ".join(f"{plural(n, 'row')}: {reason}" for reason, n in why.most_common())
        if not used:
            raise UsageError(f"calibrate: no row of {', '.join(map(str, files))} can be fitted "
                             f"({told or 'no rows'}): give each row a box and a model of the catalogs "
                             "('tokenbench hardware', 'tokenbench models') and their formats")
        if why:
            warnings.append(f"fitted {used} of {plural(len(rows), 'row')}; left out {told}")
    mine: list[Row] = []
    if own is not None:
        mine, said = own_rows(own.store, own.refs, own.latest, cat, own.hardware, own.model, own.engine,
                              own.weights, own.kv)
        warnings += said  # beside the files' own, which a run's used to replace
    if fitting is not None:
        fitting()
    return Calibrated(fit_calibration(cat, rows + mine, command), len(mine), warnings)
