"""A run's result, as every command that makes one returns it and every reader loads it (``reader.py``): its
levels (with their repetitions combined), its manifest, its final state, the JSON result contract (docs/results.md),
and run ids. Values only: nothing here reads the store. Readers (compare, cost, report, recommend, importers)
import this and ``reader``, never a runner."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import secrets
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import __version__
from .offered_load import Level
from . import depth_findings, registry
from .keyed import Keyed
from .pricing import level_cost
from .distribution import Distribution, coefficient_of_variation
from .levels import LevelSummary, ServingLevel, serving

if TYPE_CHECKING:
    from .quality.items import Item
    from .finding import Code, Finding


@dataclass(slots=True)
class Manifest(Keyed):
    """A run's provenance (every result carries it: docs/results.md), typed: the keys runs carry, each an
    attribute a reader reads and mypy checks. Every attribute may be missing (None): an older or imported run
    lacks most of them. Stored as JSON in the run's row; ``from_dict`` reads it, ``to_dict`` writes the same
    keys with the same values, in the same order.

    A key this type does not name (an importer's ``llama_bench``, the store's ``process``), and a named key whose
    stored value has another type (a foreign store's ``"seed": "x"``), are kept whole in ``extra``: written back
    unchanged, never read as a typed attribute. That is the reading side. tokenbench's own runs are written with
    keywords (``Manifest.written``): a key it does not name is an error there, never a silent extra."""

    # where and what: the endpoint, the model served, the engine serving it
    endpoint: str | None = None
    model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    server: dict[str, Any] | None = None  # servers.ServerInfo.to_dict()
    embedded: dict[str, Any] | None = None  # the embedded engine, when tokenbench started it
    # how it ran
    label: str | None = None
    command: str | None = None  # tokenbench's own command line, redacted
    started: str | None = None  # ISO-8601
    finished: str | None = None
    tokenizer: str | None = None
    workload: dict[str, Any] | None = None
    load: dict[str, Any] | None = None  # levels, requests, warm-up, repetitions, workers
    seed: int | None = None
    machine: dict[str, Any] | None = None  # machine.snapshot(): the client's, where tokenbench ran
    #: the server host's snapshot, as its ``tokenbench agent`` took it (None without --agent)
    server_host: dict[str, Any] | None = None
    power: dict[str, Any] | None = None  # where power was read (serverhost.PowerPlan.describe) and the idle figure
    guard: str | None = None  # the guard's mode
    guard_before_run: dict[str, Any] | None = None  # its snapshot before the first level
    # money
    price_per_hour: float | None = None
    currency: str | None = None
    # where the figures came from: measured, imported (by which tool) or predicted (on which box, how)
    provenance: str | None = None
    tool: str | None = None
    predicted: bool | None = None
    hardware: str | None = None
    host: str | None = None
    gpu: str | None = None
    cpu: str | None = None
    weights: str | None = None
    quant: str | None = None
    kv: str | None = None
    backend: str | None = None
    calibration: str | None = None
    calibrated: bool | None = None
    bands: str | None = None  # a prediction's bands, as the note predict printed under its table said them
    #: a prediction's bands per metric (throughput, ttft, tpot, prefill, decode): % of the estimate that 80% of
    #: held-out rows of its kind measured within, at the furthest point its table reached (compare reads them)
    band_pct: dict[str, Any] | None = None
    # an import: the file it came from, its digest (a file imported twice is recognised), its format, and
    # for published rows the write-up they came from
    imported_from: str | None = None
    source_sha256: str | None = None
    format: str | None = None
    source: str | None = None
    #: an import: the version of the tool that measured, as its file says; and where the tool's names for a figure
    #: and tokenbench's differ, what each stored figure is in the tool's words (AIPerf's inter_token_latency is
    #: tokenbench's TPOT), keyed by the level's key
    tool_version: str | None = None
    definitions: dict[str, Any] | None = None
    # a prediction's shape beyond box, model and formats: GPUs (tensor parallel), llama.cpp slots, micro-batch and
    # flash attention, speculative decoding (predict.runs.shape)
    shape: dict[str, Any] | None = None
    # a cold start's boots; a quality run's per-task summary
    boots: list[dict[str, Any]] | None = None
    summary: dict[str, Any] | None = None
    # a capacity search: its axis, range, resolution, budget and SLO, and how it ended (capacity.SearchSpec)
    capacity: dict[str, Any] | None = None
    # a sweep's: the uncounted request before any level, the embedded engine's command line, the fields every
    # request carried (redacted), its SLO; a quality run's: the tokens the server adds around a prompt
    check_request: dict[str, Any] | None = None
    server_flags: list[Any] | None = None
    request_fields: dict[str, Any] | None = None
    slo: str | None = None
    template_tokens: int | None = None

    @property
    def predicted_mark(self) -> str | None:
        """How a predicted run is named wherever it is shown: PREDICTED, and UNCALIBRATED where no measurement
        of its backend stood behind the estimate (physical priors only); None for a measured or imported run."""
        if not (self.provenance == "predicted" or self.predicted):
            return None
        return "PREDICTED, UNCALIBRATED" if self.calibrated is False else "PREDICTED"

    @property
    def box(self) -> str | None:
        """The hardware, with a prediction's GPU count: "2x nvidia-h100-sxm (tensor parallel)"."""
        gpus = (self.shape or {}).get("gpus")
        if not isinstance(gpus, int) or gpus < 2 or not self.hardware:  # a stored value may be anything
            return self.hardware
        return f"{gpus}x {self.hardware} (tensor parallel)"

    @property
    def shape_parts(self) -> list[str]:
        """What a prediction assumed of the engine beyond its defaults, in words: slots, micro-batch, flash
        attention, speculative decoding (empty for a measured run, whose server said what it ran)."""
        sh = self.shape or {}
        parts = []
        if isinstance(sh.get("parallel"), int) and sh["parallel"] > 1:
            parts.append(f"{sh['parallel']} slots (-np)")
        eng = registry.find(self.engine)
        if isinstance(sh.get("ubatch"), int) and sh["ubatch"] != 512 and eng is not None and eng.gguf:
            parts.append(f"-ub {sh['ubatch']}")
        if sh.get("flash_attn") is False:
            parts.append("no flash attention (-fa 0)")
        if sh.get("batch_tokens_given") and isinstance(sh.get("batch_tokens"), int):
            parts.append(f"--max-num-batched-tokens {sh['batch_tokens']}")
        if sh.get("arrivals") == "spread":
            parts.append("prompts spread over the cycle")
        if isinstance(sp := sh.get("speculation"), dict):
            parts.append(f"speculative decoding, {sp.get('tokens')} tokens at acceptance {sp.get('acceptance')}")
        return parts


@dataclass(slots=True)
class LevelOutcome:
    idx: int
    level: Level
    summary: LevelSummary
    status: str  # complete | interrupted | failed
    repetitions: Sequence[LevelSummary] = field(default_factory=list)

    @property
    def serving(self) -> ServingLevel | None:
        """The level's summary where it is a serving level (None: a depth level)."""
        return self.summary if isinstance(self.summary, ServingLevel) else None


@dataclass(slots=True)
class RunResult:
    """What every command that produces results returns (sweep, depth, coldstart, predict, import, quality's
    runs through the store), and what ``load_result`` reads back. ``run_id`` is empty only for a result that was
    not stored (a prediction without --save; its JSON says ``"run_id": null``). ``legacy``: top-level keys a command's JSON carried before it
    went through this contract, kept beside it for the scripts that read them (extend, never rename)."""

    run_id: str
    manifest: Manifest
    outcomes: list[LevelOutcome]
    status: str
    error: str | None = None
    kind: str = "sweep"
    legacy: dict[str, Any] = field(default_factory=dict)
    items: list[Item] = field(default_factory=list)  # a quality run's evaluated items (it has no levels)

    @property
    def predicted_mark(self) -> str | None:
        """How a predicted run is named wherever it is shown (``Manifest.predicted_mark``); a predict run is one
        whatever its stored manifest says."""
        return self.manifest.predicted_mark or ("PREDICTED" if self.kind == "predict" else None)

    @property
    def open_loop(self) -> bool:
        """Every level an open loop (--rate): levels with no concurrency to place them by (a plot's axis, a
        published.csv row)."""
        return bool(self.outcomes) and all(o.level.rate for o in self.outcomes)

    def sort_by_value(self) -> None:
        """A search's levels in the order of their value (concurrency, then rate), as capacity prints them; they
        ran, and are indexed, in the order the search tried them."""
        self.outcomes.sort(key=lambda o: (o.level.concurrency or 0, o.level.rate or 0.0))

    def to_json(self) -> dict[str, Any]:
        """The JSON result contract, docs/results.md and data/run.schema.json (the one writer every ``--json`` of a result goes through)."""
        levels = []
        for o in self.outcomes:
            d = o.summary.to_dict()
            d["status"] = o.status
            if len(reps := serving(o.repetitions)) > 1:
                d["repetitions"] = repetition_stats(reps)
            levels.append(d)
        doc = {
            "tool": "tokenbench",
            "version": __version__,
            "run_id": self.run_id or None,
            "kind": self.kind,
            "status": self.status,
            "error": self.error,
            "manifest": self.manifest.to_dict(),
            "levels": levels,
        }
        if self.kind == "quality":  # every item, its prompt left out (it can be long; its key pairs it)
            doc["items"] = [{k: v for k, v in it.to_row().items() if k not in ("prompt", "detail")}
                            | {"detail": it.detail} for it in self.items]
        return {**doc, **{k: v for k, v in self.legacy.items() if k not in doc}}


def as_read(stored: dict[str, Any], provenance: str, label: str | None) -> Manifest:
    """A run's manifest as every reader sees it: the stored keys, then the provenance and label the store keeps in
    columns of its own, where the manifest does not say them (``reader.load_result``, and ``RunLog.close`` for the
    result in hand, so the two are one document)."""
    d = dict(stored)
    d.setdefault("provenance", provenance)
    d.setdefault("label", label)
    return Manifest.from_dict(d)


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def repetition_stats(reps: list[ServingLevel]) -> dict[str, Any]:
    def stat(values: list[float | None]) -> dict[str, Any]:
        vals = [v for v in values if v is not None]
        return {
            "values": vals,
            "median": statistics.median(vals) if vals else None,
            "cv": coefficient_of_variation(vals),
            "distribution": Distribution.of(vals).to_dict(),  # as every other measured quantity
        }

    return {
        "n": len(reps),
        "output_throughput_tps": stat([r.output_throughput_tps for r in reps]),
        "ttft_ms_p50": stat([r.ttft_ms.p50 for r in reps]),
        "tpot_ms_p50": stat([r.tpot_ms.p50 for r in reps]),
    }


def _pooled(dists: list[Distribution]) -> Distribution:
    """A metric over every repetition: its count, extremes, mean and spread over all their values (the first
    one's alone made a median below the minimum), each percentile the repetitions' median (p99 was the first
    one's alone)."""
    said = [d for d in dists if d.n]
    if not said:
        return copy.deepcopy(dists[0])
    n = sum(d.n for d in said)
    means = [(d.n, d.mean) for d in said if d.mean is not None]
    mean = sum(k * m for k, m in means) / sum(k for k, _ in means) if means else None
    spread = [(d.n, d.mean, d.std) for d in said if d.mean is not None and d.std is not None]
    std = (sum(k * (sd ** 2 + (m - mean) ** 2) for k, m, sd in spread) / sum(k for k, _, _ in spread)) ** 0.5 \
        if mean is not None and len(spread) == len(said) else None
    out = Distribution(n=n, mean=mean, std=std, min=min((d.min for d in said if d.min is not None), default=None),
                       max=max((d.max for d in said if d.max is not None), default=None))
    for pct in ("p50", "p90", "p95", "p99"):
        values = [v for d in said if (v := getattr(d, pct)) is not None]
        setattr(out, pct, statistics.median(values) if values else None)
    return out


def _findings_of_every_repetition(base: LevelSummary, reps: Sequence[LevelSummary]) -> None:
    """Each repetition's findings on the combined level, once a code, saying which repetitions had it where not
    all did: the first one's alone dropped a later one's client_bound, under a TPOT its burst made 0.0 ms."""
    had: dict[Code, list[int]] = {}
    first: dict[Code, Finding] = {}
    for i, r in enumerate(reps, 1):
        for f in r.findings:
            had.setdefault(f.code, []).append(i)
            first.setdefault(f.code, f)
    own = {f.code.value for f in base.findings}, {f.text for f in base.findings}
    kept = [fl for fl in base.flags if fl not in own[0]], [w for w in base.warnings if w not in own[1]]
    base.findings, base.flags, base.warnings = [], *kept  # what no finding says stays as it was
    for code, f in first.items():
        which = had[code]
        if len(which) < len(reps):
            f = dataclasses.replace(f, message=f"repetition{'s' if len(which) > 1 else ''} "
                                               f"{', '.join(map(str, which))} of {len(reps)}: {f.message}")
        base.add(f)


def combine_repetitions(given: Sequence[LevelSummary], price_per_hour: float | None,
                        currency: str | None = None) -> LevelSummary:
    """Repetitions of a level: the first summary with throughput, percentiles and prefill rate replaced by their
    medians over the repetitions (what compare's interval over repetitions resamples; the plateau's throughput
    too, where every repetition held its load), and the cost per million tokens at the median of the rate the
    table shows (it was dropped: a priced run with --repetitions 3 showed no cost at all)."""
    reps = serving(given)
    if len(given) == 1 or len(reps) != len(given):  # a depth level is stored once
        return given[0]
    base = copy.deepcopy(reps[0])
    base.output_throughput_tps = statistics.median(r.output_throughput_tps for r in reps)
    if base.plateau is not None:  # the table's rate and the cost's: the median plateau, where every one held its load
        held = [r.plateau.output_throughput_tps for r in reps if r.plateau is not None]
        if len(held) == len(reps):
            base.plateau.output_throughput_tps = statistics.median(held)
        else:
            base.plateau = None
    base.completed = sum(r.completed for r in reps)
    base.failed = sum(r.failed for r in reps)
    base.total_input_tokens = sum(r.total_input_tokens for r in reps)
    base.total_output_tokens = sum(r.total_output_tokens for r in reps)
    _findings_of_every_repetition(base, reps)
    unstable = depth_findings.unstable_repetitions(coefficient_of_variation([r.output_throughput_tps for r in reps]),
                                             len(reps))
    if unstable is not None:
        base.add(unstable)
    for attr in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        setattr(base, attr, _pooled([getattr(r, attr) for r in reps]))
    prefill = [r.prefill_tps for r in reps if r.prefill_tps is not None]
    if prefill:
        base.prefill_tps = statistics.median(prefill)
    base.cost_per_mtok = level_cost(price_per_hour, currency, base.sustained_tps)
    return base
