"""Depth sweeps: llama-bench semantics over HTTP.

For each depth d and repetition: (1) fill the server's KV cache with d tokens of unique context (one request,
not counted); (2) send the same context plus ``pp`` new tokens and time their prompt processing alone (the
context is already cached); (3) send the context again and time the generation of ``tg`` tokens on top of it.
Reported like llama-bench: mean ± standard deviation over repetitions, tokens per second.

A server that cannot keep the context warm (no prefix cache: vLLM without --enable-prefix-caching, a slot
reused by another client) re-processes the depth in step 2; that is detected (the pp step takes nearly as long
as the fill) and said, instead of publishing a prefill rate that includes the depth. llama.cpp's ``timings``
are used when the server sends them and cross-checked against the client's clock.

Impossible numbers are not published as measurements: a rate whose spread is over half its mean is flagged
``unstable`` with its repetitions shown, a tg faster than the server's own timings allow is withheld
(``exceeds_server_timings``), and depths that do not fit the server's context a request are kept as ``skipped``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
import statistics
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from . import depth_findings, findings
from .finding import Code, Finding
from .adapters.base import Adapter
from .aiohttp_path import trace_config
from .client import PreparedRequest, StreamClient
from .endpoint import Endpoint, RunLog
from .errors import EndpointError, UsageError
from .guard_results import GuardSnapshot
from .guard import snapshot_before
from .loadgen import still_heap
from .offered_load import Level
from .distribution import Distribution
from .layout import sig
from .client_report import ClientReport
from .levels import DepthLevel, LevelSummary
from .metrics import NS_PER_S
from .records import RequestRecord
from .results import LevelOutcome, RunResult, new_run_id, now_iso
from .servers import root_url
from .store import Store
from .telemetry import LevelTelemetry
from .workload import PromptBuilder

Note = Callable[[str], None]


@dataclass(slots=True)
class DepthConfig:
    url: str
    depths: list[int]
    pp: int = 512
    tg: int = 128
    repetitions: int = 3
    model: str | None = None
    api_key: str | None = None
    tokenizer: str | None = None
    label: str | None = None
    seed: int | None = None
    timeout_s: float = 600.0
    command: str = ""
    embedded: dict[str, Any] | None = None
    metrics: bool = True  # sample the server's /metrics during each depth
    metrics_interval_s: float = 5.0  # as for sweeps: a sample costs the server a page
    guard: str = "warn"  # strict | warn | off, as for sweeps
    guard_config: dict[str, dict[str, Any]] | None = None
    target_pids: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Step:
    fill_s: float | None
    pp_s: float
    pp_tokens: int
    tg_s: float
    tg_tokens: int
    server_pp_tps: float | None = None
    server_tg_tps: float | None = None
    cached_tokens: int | None = None
    records: list[RequestRecord] = field(default_factory=list)


def _extras(adapter: Adapter, tg: int, eos: int | None) -> dict[str, Any]:
    out = adapter.output_length_fields(tg, eos, "completions")
    out.update(adapter.warm_context_fields())  # the point here is a warm cache
    return out


async def _send(client: StreamClient, prompt: str, max_tokens: int, expected: int, extras: dict[str, Any],
                idx: int, phase: str) -> RequestRecord:
    rec = RequestRecord(index=idx, phase=phase)  # type: ignore[arg-type]
    await client.send(PreparedRequest(prompt, max_tokens, expected, extras), rec)
    if not rec.ok:
        raise EndpointError(f"a depth request failed ({rec.error_kind}: {rec.error}); check the server's log")
    return rec


def _t(rec: RequestRecord) -> float:
    return (rec.ttft_ns or 0) / NS_PER_S


async def run_step(client: StreamClient, builder: PromptBuilder, depth: int, pp: int, tg: int, rep: int,
                   adapter: Adapter, eos: int | None, idx: int) -> Step:
    rng = random.Random(f"{builder.seed}/{builder.run_tag}/depth/{depth}/{rep}")
    context, _ = await builder.exact("", depth, rng) if depth else ("", 0)
    new, _ = await builder.exact("", pp, rng)
    prompt_pp = (context + " " + new) if context else new
    fill_s = None
    records = []
    one = adapter.check_fields(1, eos, "completions") | adapter.warm_context_fields()  # one token, warm cache
    if depth:
        r = await _send(client, context, 1, depth, one, idx, "warmup")
        fill_s = _t(r)
        records.append(r)
    r_pp = await _send(client, prompt_pp, 1, depth + pp, one, idx + 1, "measured")
    records.append(r_pp)
    # tg on top of the same d tokens: the context is cached (a prefix of the last prompt)
    tg_prompt = context if context else new[: max(1, len(new) // 64)]
    r_tg = await _send(client, tg_prompt, tg, depth, _extras(adapter, tg, eos), idx + 2, "measured")
    records.append(r_tg)
    tg_tokens = r_tg.output_tokens or 0
    tg_s = ((r_tg.end_ns or 0) - (r_tg.first_token_ns or 0)) / NS_PER_S
    step = Step(fill_s, _t(r_pp), pp, tg_s, max(tg_tokens - 1, 0), records=records)
    step.server_pp_tps, _ = adapter.server_rates(r_pp.server_timings)
    cached = (r_pp.server_timings or {}).get("cache_n")
    step.cached_tokens = cached if isinstance(cached, int) else None
    _, step.server_tg_tps = adapter.server_rates(r_tg.server_timings)
    return step


def _add(level: LevelSummary, finding: Finding | None) -> bool:
    return finding is not None and level.add(finding)


def _mean_sd(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation; no spread (None) from one repetition, where it is not 0 but unknown."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _against_server_timings(lp: DepthLevel, lt: DepthLevel, steps: list[Step], pp_mean: float | None,
                            tg_mean: float | None) -> None:
    """The server's own timings beside the client's clock: a prefill that disagrees is flagged; a tg faster than
    the server allows is withheld (chunks were held back), the client's figure kept apart."""
    server_pp = [s.server_pp_tps for s in steps if s.server_pp_tps]
    if server_pp and pp_mean:
        lp.client.put(server_pp_tps=statistics.fmean(server_pp))
        _add(lp, depth_findings.timings_disagree(statistics.fmean(server_pp), pp_mean))
    server_tg = [s.server_tg_tps for s in steps if s.server_tg_tps]
    if server_tg:
        ceiling = statistics.fmean(server_tg)
        lt.client.put(server_tg_tps=ceiling)
        if tg_mean and _add(lt, depth_findings.exceeds_server_timings(tg_mean, ceiling)):
            lt.client.put(tg_tps_client=tg_mean)
            lt.tg_tps = lt.tg_tps_sd = lt.tg_tps_dist = None


def summarize_depth(depth: int, pp: int, tg: int, steps: list[Step]) -> tuple[DepthLevel, DepthLevel]:
    pp_rates = [s.pp_tokens / s.pp_s for s in steps if s.pp_s > 0]
    tg_rates = [s.tg_tokens / s.tg_s for s in steps if s.tg_s > 0 and s.tg_tokens]
    pp_mean, pp_sd = _mean_sd(pp_rates) if pp_rates else (None, None)
    tg_mean, tg_sd = _mean_sd(tg_rates) if tg_rates else (None, None)
    lp = DepthLevel(test=f"pp{pp}", depth=depth, pp_tps=pp_mean, pp_tps_sd=pp_sd, completed=len(pp_rates))
    lt = DepthLevel(test=f"tg{tg}", depth=depth, tg_tps=tg_mean, tg_tps_sd=tg_sd, completed=len(tg_rates),
                    output_tokens_mean=statistics.fmean(s.tg_tokens + 1 for s in steps))
    lp.pp_tps_dist, lt.tg_tps_dist = Distribution.of(pp_rates), Distribution.of(tg_rates)
    lp.client = ClientReport.written(pp_tps_reps=[round(v, 2) for v in pp_rates])
    lt.client = ClientReport.written(tg_tps_reps=[round(v, 2) for v in tg_rates])
    for lvl, kind, mean, sd, reps in ((lp, "pp", pp_mean, pp_sd, pp_rates), (lt, "tg", tg_mean, tg_sd, tg_rates)):
        _add(lvl, depth_findings.unstable_depth_rate(kind, mean, sd, reps))
    _add(lp, depth_findings.context_not_warm(depth, pp, [(s.fill_s, s.pp_s, s.cached_tokens) for s in steps]))
    lp.client.put(fill_ms=[round((s.fill_s or 0) * 1000, 2) for s in steps],
                  pp_ms=[round(s.pp_s * 1000, 2) for s in steps])
    _against_server_timings(lp, lt, steps, pp_mean, tg_mean)
    return lp, lt


def skipped_depth(depth: int, pp: int, tg: int, slot_ctx: int, advice: str) -> tuple[DepthLevel, DepthLevel]:
    """Levels for a depth that does not fit the server's context: kept, marked, with no numbers."""
    out = []
    for test in (f"pp{pp}", f"tg{tg}"):
        lvl = DepthLevel(test=test, depth=depth)
        lvl.add(depth_findings.exceeds_context(depth, pp, tg, slot_ctx, advice))
        out.append(lvl)
    return out[0], out[1]


def _rate(mean: float | None, sd: float | None) -> str:
    """A depth step's rate as its progress line says it: the mean, and its spread to two significant figures (a
    spread of 6,277.3 knows no tenth, nor its last two digits)."""
    if mean is None:
        return "not published (see the warnings)"
    return f"{mean:,.1f} tok/s" if sd is None else f"{mean:,.1f} ± {sig(sd, 2)} tok/s"


def _note(note: Note | None, text: str) -> None:
    if note is not None:
        note(text)


class _DepthRun:
    """The depths of one run in order: each skipped (it does not fit) or measured, and stored at once."""

    def __init__(self, cfg: DepthConfig, store: Store, run_id: str, ep: Endpoint, client: StreamClient,
                 builder: PromptBuilder, fits: list[int], first_snap: GuardSnapshot | None,
                 note: Note | None) -> None:
        self.cfg, self.store, self.run_id, self.ep, self.client = cfg, store, run_id, ep, client
        self.builder, self.fits, self.first_snap, self.note = builder, fits, first_snap, note
        self.outcomes: list[LevelOutcome] = []

    async def run(self) -> None:
        cfg = self.cfg
        await run_step(self.client, self.builder, 0, min(cfg.pp, 64), 4, -1, self.ep.info.adapter,
                       self.ep.eos_token_id, 0)
        for i, d in enumerate(cfg.depths):
            if d in self.fits:
                await self.measure(i, d)
            else:
                self.skip(i, d)

    def _save(self, idx: int, lvl: LevelSummary, records: list[RequestRecord], status: str, now: str) -> None:
        self.store.save_level(self.run_id, idx, 0, lvl, records, status=status, started=now, finished=now,
                              window=(0, 0))
        self.outcomes.append(LevelOutcome(idx, Level(concurrency=1), lvl, status, [lvl]))

    def skip(self, i: int, d: int) -> None:
        slot_ctx = self.ep.info.slot_ctx or 0
        lp, lt = skipped_depth(d, self.cfg.pp, self.cfg.tg, slot_ctx, self.ep.info.adapter.more_context)
        now = now_iso()
        self._save(2 * i, lp, [], "skipped", now)
        self._save(2 * i + 1, lt, [], "skipped", now)
        _note(self.note, f"depth {d}: skipped, it does not fit the server's {slot_ctx}-token context")

    async def measure(self, i: int, d: int) -> None:
        cfg = self.cfg
        snap = self.first_snap if d == self.fits[0] else await snapshot_before(
            cfg.guard, cfg.guard_config, cfg.target_pids, f"before depth {d}")
        tele = LevelTelemetry(self.ep.http, root_url(cfg.url), cfg.metrics_interval_s) if cfg.metrics else None
        if tele:
            tele.start()
        steps = []
        if d:  # a deep context's fill may take minutes on a slow box: say what runs before it is done
            _note(self.note, f"depth {d}: filling {d:,} tokens of context, then pp{cfg.pp} and tg{cfg.tg}"
                             f"{'' if cfg.repetitions == 1 else f', {cfg.repetitions} times'}")
        try:
            for r in range(cfg.repetitions):
                steps.append(await run_step(self.client, self.builder, d, cfg.pp, cfg.tg, r, self.ep.info.adapter,
                                            self.ep.eos_token_id, 1000 * i + 10 * r))
        except (asyncio.CancelledError, KeyboardInterrupt):
            # Ctrl-C: the repetitions this depth finished are kept, marked, as a sweep keeps a level's requests
            if steps:
                self.store_depth(i, d, steps, snap, None, "interrupted")
            raise
        finally:
            if tele:
                await tele.stop()
        self.store_depth(i, d, steps, snap, tele, "complete")

    def store_depth(self, i: int, d: int, steps: list[Step], snap: GuardSnapshot | None,
                    tele: LevelTelemetry | None, status: str) -> None:
        """A depth's pp and tg rows from its repetitions, stored; one cut short says how many of them ran."""
        cfg = self.cfg
        lp, lt = summarize_depth(d, cfg.pp, cfg.tg, steps)
        if status == "interrupted":
            cut = Finding(Code.INTERRUPTED, f"interrupted after {len(steps)} of {cfg.repetitions} repetitions",
                          observed=len(steps), threshold=cfg.repetitions, unit="repetitions")
            for level in (lp, lt):
                level.add(cut)
        lp.guard = lt.guard = snap
        for level in (lp, lt):  # both rows ran on that machine: the tg row read clean while its guard said dirty
            _add(level, findings.guard_finding(snap, self.run_id))
        if tele:
            lp.telemetry = lt.telemetry = tele.summary(sum(s.tg_tokens + 1 for s in steps), sum(s.tg_s for s in steps))
            if tele.series():
                self.store.save_telemetry(self.run_id, 2 * i, 0, tele.series())
        now = now_iso()
        self._save(2 * i, lp, [rec for s in steps for rec in s.records], status, now)
        self._save(2 * i + 1, lt, [], status, now)
        if status == "complete":
            _note(self.note, f"depth {d}: pp{cfg.pp} {_rate(lp.pp_tps, lp.pp_tps_sd)}, "
                             f"tg{cfg.tg} {_rate(lt.tg_tps, lt.tg_tps_sd)}")


async def run_depth(cfg: DepthConfig, store: Store, note: Note | None = None) -> RunResult:
    if any(d < 0 for d in cfg.depths) or cfg.pp < 1 or cfg.tg < 2 or cfg.repetitions < 1:
        raise UsageError("depths must be >= 0, --pp >= 1, --tg >= 2 and --repetitions >= 1")
    seed = cfg.seed if cfg.seed is not None else random.randrange(2**31)
    log = RunLog(store, new_run_id(), "depth", cfg.label)
    async with aiohttp.ClientSession(trace_configs=[trace_config()]) as http:
        ep = await Endpoint.open(http, cfg.url, cfg.api_key, cfg.model, cfg.tokenizer, note)
        slot_ctx = ep.info.slot_ctx
        fits = [d for d in cfg.depths if not slot_ctx or d + cfg.pp + cfg.tg <= slot_ctx]
        if not fits:
            raise UsageError(f"no depth fits the {slot_ctx} tokens of context the server gives a request with pp "
                             f"{cfg.pp} and tg {cfg.tg}: lower --depths, or {ep.info.adapter.more_context}")
        client = ep.client(timeout_s=cfg.timeout_s)
        builder = PromptBuilder(ep.tokenizer, seed, log.run_id.rsplit("-", 1)[-1])
        manifest = ep.manifest(cfg.embedded, cfg.label, cfg.command, seed=seed, workload={
            "depths": cfg.depths, "pp": cfg.pp, "tg": cfg.tg, "repetitions": cfg.repetitions})
        # strict: refuse before anything runs or is stored
        first_snap = await snapshot_before(cfg.guard, cfg.guard_config, cfg.target_pids, f"before depth {fits[0]}")
        log.create(manifest)
        _note(note, "warm-up: one uncounted pp/tg pass at depth 0")
        run = _DepthRun(cfg, store, log.run_id, ep, client, builder, fits, first_snap, note)
        try:
            with still_heap():  # no collection of the whole heap stops a timed step (loadgen.still_heap)
                await run.run()
        except BaseException as e:  # the run is closed, its levels kept; an interrupt becomes RunInterrupted
            if (stop := log.abort(e, any(o.status == "complete" for o in run.outcomes))) is not None:
                raise stop from None
            raise
        finally:
            await client.close()
        status = "complete" if len(fits) == len(cfg.depths) else "partial"
        error = None if status == "complete" else "some depths do not fit the server's context: see the skipped levels"
        return log.close(status, error, run.outcomes)
