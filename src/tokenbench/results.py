"""A run's result, as every command that makes one returns it and every reader loads it: its levels (with
their repetitions combined), its manifest, its final state, the JSON result contract of DESIGN.md, and run
ids. Readers (compare, cost, report, recommend, importers) import this and the store, never a runner."""

from __future__ import annotations

import datetime as dt
import secrets
import statistics
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .loadgen import Level
from . import findings
from .cost import level_cost, run_price
from .metrics import LevelSummary, coefficient_of_variation
from .store import Store


@dataclass(slots=True)
class LevelOutcome:
    idx: int
    level: Level
    summary: LevelSummary
    status: str  # complete | interrupted | failed
    repetitions: list[LevelSummary] = field(default_factory=list)


@dataclass(slots=True)
class RunResult:
    """What every command that produces results returns (sweep, depth, coldstart, predict, import, quality's
    runs through the store), and what ``load_result`` reads back. ``run_id`` is empty only for a result that was
    not stored (a prediction without --save; its JSON says ``"run_id": null``). ``legacy``: top-level keys a command's JSON carried before it
    went through this contract, kept beside it for the scripts that read them (extend, never rename)."""

    run_id: str
    manifest: dict[str, Any]
    outcomes: list[LevelOutcome]
    status: str
    error: str | None = None
    kind: str = "sweep"
    legacy: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON result contract of DESIGN.md (the one writer every ``--json`` of a result goes through)."""
        levels = []
        for o in self.outcomes:
            d = o.summary.to_dict()
            d["status"] = o.status
            if len(o.repetitions) > 1:
                d["repetitions"] = repetition_stats(o.repetitions)
            levels.append(d)
        doc = {
            "tool": "tokenbench",
            "version": __version__,
            "run_id": self.run_id or None,
            "kind": self.kind,
            "status": self.status,
            "error": self.error,
            "manifest": self.manifest,
            "levels": levels,
        }
        return {**doc, **{k: v for k, v in self.legacy.items() if k not in doc}}


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def repetition_stats(reps: list[LevelSummary]) -> dict[str, Any]:
    def stat(values: list[float | None]) -> dict[str, Any]:
        vals = [v for v in values if v is not None]
        return {
            "values": vals,
            "median": statistics.median(vals) if vals else None,
            "cv": coefficient_of_variation(vals),
        }

    return {
        "n": len(reps),
        "output_throughput_tps": stat([r.output_throughput_tps for r in reps]),
        "ttft_ms_p50": stat([r.ttft_ms.p50 for r in reps]),
        "tpot_ms_p50": stat([r.tpot_ms.p50 for r in reps]),
    }


def combine_repetitions(reps: list[LevelSummary], price_per_hour: float | None,
                        currency: str | None = None) -> LevelSummary:
    """Repetitions of a level: the first summary with throughput and medians replaced by their medians, and the
    cost per million tokens at the median throughput (it was dropped: a priced run with --repetitions 3 showed
    no cost at all)."""
    if len(reps) == 1:
        return reps[0]
    base = LevelSummary.from_dict(reps[0].to_dict())
    base.output_throughput_tps = statistics.median(r.output_throughput_tps for r in reps)
    base.completed = sum(r.completed for r in reps)
    base.failed = sum(r.failed for r in reps)
    unstable = findings.unstable_repetitions(coefficient_of_variation([r.output_throughput_tps for r in reps]),
                                             len(reps))
    if unstable is not None:
        base.add(unstable)
    for attr in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        dist = getattr(base, attr)
        p50s = [getattr(r, attr).p50 for r in reps if getattr(r, attr).p50 is not None]
        if p50s:
            dist.p50 = statistics.median(p50s)
    base.cost_per_mtok = level_cost(price_per_hour, currency, base.output_throughput_tps)
    return base


def load_result(store: Store, ref: str, first: int | None = None, latest: bool = False,
                kinds: tuple[str, ...] | None = None, command: str = "") -> RunResult:
    """A stored run, as the sweep returned it (finished levels only if it was cut short); ``first``: only the
    first levels (a 200,000-level import loads in seconds, not a second)."""
    row = store.resolve(ref, latest, kinds, command)
    by_idx: dict[int, list[tuple[str, LevelSummary]]] = {}
    for idx, _rep, status, summary in store.levels(row.id, first):
        by_idx.setdefault(idx, []).append((status, summary))
    outcomes = []
    for idx, items in sorted(by_idx.items()):
        reps = [s for _, s in items]
        status = next((st for st, _ in items if st != "complete"), "complete")
        level = Level(concurrency=reps[0].concurrency, rate=reps[0].rate)
        combined = combine_repetitions(reps, run_price(row.manifest), row.manifest.get("currency"))
        outcomes.append(LevelOutcome(idx, level, combined, status, reps))
    manifest = dict(row.manifest)
    manifest.setdefault("provenance", row.provenance)
    manifest.setdefault("label", row.label)
    return RunResult(row.id, manifest, outcomes, row.status, row.error, kind=row.kind)
