"""A prediction as a stored run, and the speculative-decoding settings a prediction applies.

``prediction`` turns a setup's predicted depth or serving figures into levels (typed, like an import's) as a
``RunResult`` of kind ``predict``; ``save_prediction`` stores it as one run with provenance ``predicted``, so compare, cost, report and
recommend read it beside measured runs. ``speculation`` works out a speculative-decoding speed-up from what the
user knows: an acceptance probability or a mean acceptance length (as vLLM reports it), and a draft cost.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..errors import UsageError
from ..distribution import Distribution
from ..levels import DepthLevel, LevelSummary, ServingLevel, SessionStats, TurnPoint
from ..offered_load import Level
from ..results import LevelOutcome, Manifest, RunResult, new_run_id, now_iso
from ..store import Store
from .speculation import Spec, alpha_from_acceptance_length, expected_tokens, spec_speedup
from .setup import Setup
from .session import SessionPrediction

#: A draft model's cost per drafted token, as a share of the target's pass, when none is given (a small draft
#: model); a model with its own multi-token-prediction head drafts with about one layer's work.
DEFAULT_DRAFT_COST = 0.05


@dataclass(frozen=True, slots=True)
class Speculation:
    tokens: int  # drafted tokens per target pass (γ)
    acceptance: float  # probability each drafted token is accepted (α)
    draft_cost: float  # a drafted token's cost as a share of a target pass
    tokens_per_pass: float
    speedup: float

    def spec(self) -> Spec:
        """What the decode model takes (each step verifies tokens + 1; roofline.spec_decode)."""
        return Spec(self.acceptance, self.tokens, self.draft_cost)

    def describe(self) -> str:
        return (f"speculative decoding: {self.tokens} tokens, acceptance {self.acceptance:.2f}, "
                f"{self.tokens_per_pass:.2f} tokens per target pass, draft cost {self.draft_cost:.3f} "
                f"-> decode x{self.speedup:.2f} while memory-bound (less as the batch makes verification "
                "compute-bound)")


def speculation(s: Setup, tokens: int, acceptance: float | None, acceptance_length: float | None,
                draft_cost: float | None) -> Speculation:
    """The speed-up of ``tokens`` drafted tokens, from one of an acceptance probability or a mean acceptance
    length (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding")."""
    if (acceptance is None) == (acceptance_length is None):
        raise UsageError("with --spec-tokens give one of --acceptance (0..1) or --acceptance-length")
    alpha = acceptance if acceptance is not None else alpha_from_acceptance_length(acceptance_length or 0.0,
                                                                                     tokens)
    if not 0 <= alpha <= 1:
        raise UsageError("--acceptance is a probability between 0 and 1")
    cost = draft_cost if draft_cost is not None else (1 / s.model.layers if s.model.mtp else DEFAULT_DRAFT_COST)
    return Speculation(tokens, alpha, cost, expected_tokens(alpha, tokens), spec_speedup(alpha, tokens, cost))


def depth_levels(s: Setup, depths: list[int], pp: int, tg: int, tests: tuple[str, ...]) -> list[DepthLevel]:
    """Predicted pp and tg rates per depth (those of ``tests``), as a depth run stores them (tg at the middle of its
    output); a depth whose context does not fit, and no split runs it, is left out (no speed for it)."""
    levels = []
    for d in depths:
        f = s.fit(d + (pp if "pp" in tests else 0) + (tg if "tg" in tests else 0), 1)
        if not f.fits and f.gpu_layers is None:
            continue
        if "pp" in tests:
            t = s.prefill(pp, d)
            levels.append(DepthLevel(test=f"pp{pp}", depth=d, pp_tps=pp / t.estimate,
                                     limits={"pp_tps": pp / t.ceiling}))
        if "tg" in tests:
            t = s.decode(d + tg // 2)
            levels.append(DepthLevel(test=f"tg{tg}", depth=d, tg_tps=1 / t.estimate, limits={"tg_tps": 1 / t.ceiling}))
    return levels


def serve_levels(s: Setup, concurrency: list[int], input_len: int, output_len: int) -> list[ServingLevel]:
    """Predicted serving levels: aggregate throughput, median TTFT and TPOT per concurrency; a level that does not
    fit the box's memory is left out (no speed for it), and one a batching engine queues is its queue's
    (``Setup.serve_held``)."""
    levels = []
    for n in concurrency:
        pt, _ = s.serve_held(n, input_len, output_len)
        if pt is None:
            continue
        levels.append(ServingLevel(
            concurrency=n, test="serve", output_throughput_tps=pt.throughput[1],
            request_throughput_rps=pt.throughput[1] / output_len,  # each request's answer is output_len tokens
            # p99: the slowest prompt, of the loop's start (all agents at once) or its steady state, as predict
            # --against predicts one
            ttft_ms=Distribution(n=0, p50=pt.ttft_s.estimate * 1000,
                                 p99=(pt.ttft_worst_s or pt.ttft_s).estimate * 1000),
            tpot_ms=Distribution(n=0, p50=pt.tpot_s.estimate * 1000),
            input_tokens_mean=float(input_len), output_tokens_mean=float(output_len),
            # the fastest each could be, the p99's at its slowest prompt's floor: no band reaches past it
            limits={"output_throughput_tps": pt.throughput[0], "ttft_ms": pt.ttft_s.ceiling * 1000,
                    "ttft_p99_ms": (pt.ttft_worst_s or pt.ttft_s).ceiling * 1000, "tpot_ms": pt.tpot_s.ceiling * 1000}))
    return levels


def _turn_points(p: SessionPrediction, cache: bool) -> list[TurnPoint]:
    out = []
    for t in p.turns:
        ttft, tpot = (t.ttft_s, t.tpot_s) if cache else (t.cold_ttft_s, t.cold_tpot_s)
        out.append(TurnPoint(turn=t.turn - 1, n=0, context_tokens_mean=float(t.context),
                             cached_tokens_mean=float(t.cached if cache else 0),
                             uncached_tokens_mean=float(t.uncached if cache else t.context),
                             ttft_ms=Distribution(n=0, p50=ttft.estimate * 1000),
                             tpot_ms=Distribution(n=0, p50=tpot.estimate * 1000),
                             limits=_positive({"ttft_ms": ttft.ceiling * 1000, "tpot_ms": tpot.ceiling * 1000})))
    return out


def _ms(values: list[float], p99: float | None = None) -> Distribution:
    """Predicted figures over the turns of a session (each turn once, as a measured level holds each session's
    turns): their mean and median, no samples; ``p99`` where the prediction has one."""
    d = Distribution.of(values)
    return Distribution(n=0, mean=d.mean, p50=d.p50, p99=p99)


def _slowest(p: SessionPrediction, cache: bool, floor: bool = False) -> float | None:
    """A session's slowest TTFT in ms, what a p99 over its turns sees (turn 1's last prompt, every agent sending it
    at once), or its floor; with the cache only (the cold figures keep their medians)."""
    if not cache:
        return None
    worst = [t.ttft_worst_s or t.ttft_s for t in p.turns]
    return max(w.ceiling if floor else w.estimate for w in worst) * 1000


def _session_limits(p: SessionPrediction, turns: list[TurnPoint], cache: bool) -> dict[str, float]:
    """A predicted session level's physical limits: its throughput's ceiling, and the floors of its TTFT and TPOT
    over the turns (the median of the turns' floors, as the figure is the median of their estimates: no turn
    faster than its floor makes the median faster than theirs), the slowest prompt's for the p99."""
    floors = {k: [(t.limits or {}).get(k, 0.0) for t in turns] for k in ("ttft_ms", "tpot_ms")}
    return _positive({"output_throughput_tps": p.throughput(cache)[0], "ttft_ms": _ms(floors["ttft_ms"]).p50,
                      "tpot_ms": _ms(floors["tpot_ms"]).p50, "ttft_p99_ms": _slowest(p, cache, floor=True)})


def _positive(limits: dict[str, float | None]) -> dict[str, float]:
    """The limits known (positive): a zero or a missing one bounds nothing."""
    return {k: v for k, v in limits.items() if v is not None and v > 0}


def session_level(p: SessionPrediction, sessions: int | None = None, cache: bool = True) -> ServingLevel:
    """A predicted session as a measured session level stores it: a serving level of ``p.agents`` agents whose
    ``session`` holds the predicted turns (``n`` 0: no request was measured), the estimates (not the ceilings),
    with the prefix cache serving each turn's history (``cache``: "warm") or without it ("busted", the baseline
    that says what the cache bought). The level's TTFT and TPOT are over the turns, each once, as a measured
    level holds every turn of its sessions."""
    turns = _turn_points(p, cache)
    t = p.time(cache)
    n = sessions or p.agents
    lv = ServingLevel(
        concurrency=p.agents, test="serve", output_throughput_tps=p.throughput(cache)[1],
        input_tokens_mean=statistics.fmean(x.context for x in p.turns), output_tokens_mean=float(p.shape.output),
        ttft_ms=_ms([x.ttft_ms.p50 or 0.0 for x in turns], _slowest(p, cache)),
        tpot_ms=_ms([x.tpot_ms.p50 or 0.0 for x in turns]), limits=_session_limits(p, turns, cache),
        # the time the level holds the box: its agents run the sessions back to back (what cost prices it at)
        duration_s=math.ceil(n / p.agents) * t.total.estimate)
    lv.request_throughput_rps = n * len(p.turns) / lv.duration_s if lv.duration_s else 0.0
    prompt = p.prompt_tokens
    lv.session = SessionStats(
        cache="warm" if cache else "busted", sessions=n, sessions_finished=n, turns_per_session=float(len(p.turns)),
        session_s=Distribution(n=0, mean=t.total.estimate, p50=t.total.estimate),
        cached_share=(1 - p.prefilled_tokens / prompt if cache else 0.0) if prompt else None,
        cached_source="predicted", capped=n if p.capped else 0, turns=turns)
    return lv


def shape(s: Setup) -> dict[str, Any]:
    """What a prediction assumed beyond box, model and formats, as its manifest keeps it: the GPUs sharing each
    layer (tensor parallel), llama.cpp's slots (-np), micro-batch (-ub) and flash attention (-fa), a batching
    engine's token budget per step and arrival pattern, and speculative decoding."""
    out: dict[str, Any] = {"gpus": s.tp, "parallel": s.parallel, "ubatch": s.ubatch, "flash_attn": s.flash_attn}
    if not s.prompt_cache:  # llama-server run with --cache-ram 0 (said only when off: on is its default)
        out["prompt_cache"] = False
    if s.kind == "batching":  # the scheduler's budget per step, and how the closed loop's prompts arrive
        out.update(batch_tokens=s.budget, batch_tokens_given=s.batch_tokens is not None, arrivals=s.arrivals)
    if s.spec is not None:
        out["speculation"] = {"tokens": s.spec.gamma, "acceptance": round(s.spec.alpha, 4),
                              "draft_cost": round(s.spec.draft_cost, 4)}
    return out


def prediction_manifest(s: Setup, workload: dict[str, Any] | None = None, label: str | None = None,
                        bands: str | None = None, band_pct: dict[str, float | None] | None = None) -> Manifest:
    """A prediction's provenance: what was predicted, on which box, in which shape, by which calibration, and
    its bands (tables.band_note: what show prints under a stored prediction's table)."""
    return Manifest(model=s.model.id, weights=s.quant.weights, kv=s.quant.kv, engine=s.engine, hardware=s.hw.id,
                    engine_version=builds(s),
                    predicted=True, backend=s.backend, calibration=s.eff.source, calibrated=s.calibrated,
                    bands=bands, band_pct=band_pct, workload=dict(workload or {}), label=label, shape=shape(s),
                    key_order=("label",))


def builds(s: Setup) -> str | None:
    """The engine builds a prediction assumes: "2026 builds", or what it was asked beyond the data; None when its
    constants are priors or undated."""
    if not s.era:
        return None
    if s.reach.years > 0:
        return f"{int(s.era[-4:]) + s.reach.years} builds, from {s.era}'s constants (the newest fitted)"
    if s.reach.years < 0:
        return f"{int(s.era[:4]) + s.reach.years} builds, from {s.era}'s constants (the oldest fitted)"
    return f"{s.era} builds"


def headline(m: Manifest) -> str:
    """The line above a prediction, printed by predict and by show of a stored one: what, on which box and in
    which shape, by which calibration (UNCALIBRATED included: it is the calibration's own text)."""
    return (f"{m.predicted_mark or 'PREDICTED'} for {m.model} ({m.weights}, {(m.kv or '').lower()} KV) on {m.box}, "
            f"{m.engine}" + (f" ({m.engine_version})" if m.engine_version else "")
            + "".join(f", {e}" for e in m.shape_parts) + f" ({m.backend}: {m.calibration})")


def prediction(s: Setup, levels: Sequence[LevelSummary], workload: dict[str, Any] | None,
               label: str | None = None, bands: str | None = None,
               band_pct: dict[str, float | None] | None = None) -> RunResult:
    """Predicted levels as a result (kind predict), not stored: ``run_id`` is empty until ``save_prediction``."""
    manifest = prediction_manifest(s, workload, label, bands, band_pct)
    outcomes = [LevelOutcome(i, Level(concurrency=lv.concurrency, rate=lv.rate), lv, "complete")
                for i, lv in enumerate(levels)]
    return RunResult("", manifest, outcomes, "complete", kind="predict")


def save_prediction(store: Store, res: RunResult, label: str) -> RunResult:
    """Store a prediction as one run (kind predict, provenance predicted) labelled ``label``; the result with
    its run id."""
    rid = new_run_id()
    manifest = replace(res.manifest, label=label)
    store.save_run(rid, "predict", label, manifest.to_dict(), "predicted", [o.summary for o in res.outcomes],
                   __version__, now_iso(), now_iso())
    return replace(res, run_id=rid, manifest=manifest)
