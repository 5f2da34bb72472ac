"""The serving sweep: discover the endpoint, bind the workload kind to it, run every level of the plan (warm-up, then
the measured window), summarize, store each finished level at once, and stop cleanly on faults or Ctrl-C.

The sweep conducts; what it sends is its workload kind's (``kinds/``: the levels, the prompts, each request's
fields, the manifest's workload entry, how a level's measured phase runs), and which level comes next is its level
plan's (``FixedPlan``: the levels the options list; a search that chooses each level from the last is another)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
from functools import partial
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from . import findings, redact
from .aiohttp_path import trace_config
from .guard_results import GuardSnapshot
from .client import Api, StreamClient
from .pricing import level_cost
from .endpoint import Endpoint, RunLog, preflight
from .errors import EndpointError, EngineError, LevelFailed, UsageError
from .finding import Code
from .grace import DEFAULT_GRACE_S, Waiting
from .guard import refuse_dirty_nodes, snapshot_before
from .plans import FixedPlan, LevelPlan, LevelStop
from .kinds import WorkloadKind
from .kinds.base import AgentRun, Binding, Bound, LevelWork, OnDone, PromptPool, warmups
from .kinds.lengths import LengthsKind
from .client_report import ClientReport
from .levels import ServingLevel
from .loadgen import ClientWatch, ensure_open_files, run_phase, still_heap
from .offered_load import Level
from .metrics import peak_in_flight, summarize
from .slo import SLO
from .steady import WARMUP_ROUNDS, settled, stagger_window
from .progress import QuietReporter, Reporter
from .records import RequestRecord
from .results import LevelOutcome, Manifest, RunResult, combine_repetitions, new_run_id, now_iso
from .servers import ServerInfo, discover, root_url
from .serverhost import PowerPlan, ServerHost
from .store import Store
from .telemetry import LevelTelemetry
from .workers.auto import start_workers
from .workers.messages import ClientSpec
from .workers.pool import WorkerPool
from .warmup import failures, in_flight, watched
from .workload import PromptBuilder
from .layout import plural

CONNECTION_ERRORS = {"connection", "disconnected", "stream_broken"}
#: The longest level --duration runs (a week, as the longest trace replay): past it a soak holds the server
#: for years, a slip of the unit (--duration 1e9h was accepted and said "back to back for 3.6e+12 s").
LONGEST_LEVEL_S = 7 * 86400


@dataclass(slots=True)
class SweepConfig:
    url: str
    model: str | None = None
    api: Api = "completions"
    api_key: str | None = None  # used, never stored
    #: What is sent (kinds/): lengths (the default: 128 in, 128 out), a dataset, a trace, agent sessions.
    workload: WorkloadKind = field(default_factory=LengthsKind.fixed)
    concurrency: list[int] = field(default_factory=lambda: [1])
    rates: list[float] = field(default_factory=list)
    arrival: str = "poisson"
    max_concurrency: int | None = None
    requests: int | None = 16
    duration_s: float | None = None
    #: with a duration, requests still in flight this long after a level's end are cancelled, cut by its end
    #: (None: wait for every one)
    grace_s: float | None = DEFAULT_GRACE_S
    warmup: int | None = None  # None: one request per concurrent slot
    #: warm up in rounds (of ``warmup`` requests) until the median TTFT of one round is within a fifth of the last's
    warmup_auto: bool = False
    #: a closed loop's streams released together (as vllm bench serve does), or staggered: each stream's first send
    #: at a random offset within a warm-up request's median time, as agents arrive
    phase: str = "together"
    repetitions: int = 1
    timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    tokenizer: str | None = None
    label: str | None = None
    price_per_hour: float | None = None
    currency: str = "USD"
    slo: SLO | None = None
    seed: int | None = None
    temperature: float | None = 0.0
    fixed_output: bool = True
    extra_body: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    embedded: dict[str, Any] | None = None  # the embedded engine's facts (engine, startup_s, command)
    guard: str = "warn"  # strict | warn | off
    guard_config: dict[str, dict[str, Any]] | None = None  # guard.load_config's tables, loaded by the caller
    target_pids: set[int] = field(default_factory=set)
    #: Sample the server's /metrics this often (None: never). Each sample costs the server a page: on 2 CPU cores
    #: a vLLM /metrics GET stalled every stream for 70-145 ms, so 1 s polling slowed what it measured.
    metrics_interval_s: float | None = 5.0
    #: A level whose share of failed measured requests is above this is failed, not published as a result.
    max_error_rate: float = 0.1
    #: Load-generating processes (None: ``auto``, workers/auto.py: enough that a wave's p90 send queue stays
    #: under 1 ms at the send cost measured here, at least one per 64 streams, at most one a core).
    workers: int | None = 1
    #: A Ray cluster to place the workers on (an address, or "auto"); None: this machine only.
    ray: str | None = None
    #: Where power and the server host's guard are read (serverhost.py); None: nowhere.
    power: PowerPlan | None = None

    def __post_init__(self) -> None:
        if self.duration_s is not None and self.duration_s > LONGEST_LEVEL_S:
            raise UsageError(f"--duration of {_days(self.duration_s)} days: a level runs a week (168h) at most, and "
                             "longer is likely a slip of the unit: give at most 168h")
        if self.grace_s is not None and self.grace_s > LONGEST_LEVEL_S:
            # the wait after a level's end, held to the level's own bound (--grace 1e9h held the server for years);
            # inf (None) still waits for every request
            raise UsageError(f"--grace of {_days(self.grace_s)} days: a level waits a week (168h) at most after its "
                             "end, and longer is likely a slip of the unit: give at most 168h, or inf to wait for "
                             "every request")
        self.workload.refuse(self)  # the options a kind cannot run with, refused before anything starts

    def longest_request(self) -> int:  # what an engine's slot must hold
        return self.workload.longest_request()

    def levels(self) -> list[Level]:
        return self.workload.levels(self)


def _days(s: float) -> str:
    return f"{s / 86400:,.1f}" if s < 100 * 86400 else f"{s / 86400:,.0f}"


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def _check_fields(cfg: SweepConfig, ep: Endpoint) -> dict[str, Any]:
    """The check request's fields: the run's kind of request with a short output, the user's --extra-body on top."""
    check = ep.info.adapter.check_fields(2, ep.eos_token_id, cfg.api) if cfg.fixed_output else {}
    return check | cfg.extra_body


def _manifest(cfg: SweepConfig, ep: Endpoint, workload: dict[str, Any], fields: dict[str, Any],
              probe: RequestRecord, seed: int, pool: WorkerPool | None, auto: dict[str, Any] | None) -> Manifest:
    return ep.manifest(
        cfg.embedded, cfg.label, cfg.command,
        # the one uncounted request before any level: the server counts it in its own metrics
        check_request={"ttft_ms": _ms(probe.ttft_ns), "e2e_ms": _ms(probe.e2e_ns),
                       "output_tokens": probe.output_tokens},
        server_flags=(cfg.embedded or {}).get("command"),
        workload=workload,
        request_fields=redact.body(fields),
        load={
            "levels": [lv.describe() for lv in cfg.levels()],
            "requests": cfg.requests,
            "duration_s": cfg.duration_s,
            "grace_s": cfg.grace_s,
            "warmup": cfg.warmup,
            "repetitions": cfg.repetitions,
            "timeout_s": cfg.timeout_s,
            "stall_timeout_s": cfg.stall_timeout_s,
            "temperature": cfg.temperature,
            "workers": (pool.describe() if pool is not None else {"kind": "in-process", "workers": 1})
            | ({"auto": auto} if auto is not None else {}),
        },
        price_per_hour=cfg.price_per_hour,
        currency=cfg.currency,
        slo=cfg.slo.describe() if cfg.slo else None,
        seed=seed,
    )


def _facts(cfg: SweepConfig, run_id: str, level: Level, records: list[RequestRecord], summary: ServingLevel,
           load: _Load, info: ServerInfo,
           snaps: tuple[GuardSnapshot | None, list[GuardSnapshot], GuardSnapshot | None],
           longest: int, work: LevelWork) -> findings.LevelFacts:
    """What the finding rules look at for a finished level: the client's reasons (its watch, or each worker's),
    the adapter's slot limits (against ``longest``, the most tokens a request of the run needed), the guard's
    snapshots (this machine's and each load-generating node's), workers lost, the most requests in flight, and
    the cached share of every request the server counted (``work.counted``: a background load's too)."""
    snap, node_snaps, server_snap = snaps
    slots = info.adapter.slot_warnings(info.slots, info.slot_ctx, None if cfg.workload.outgrows_slots else
                                       level.concurrency, longest or cfg.longest_request())
    measured = [r for r in records if r.phase == "measured"]
    # the responses' cached share over every request sent in the measured window, a background load's beside the
    # level's own, as the server's counters hold them all (None without a window: the summary's)
    cached, prompt = work.counted(records, load.window[0]) if load.window[1] else (0, 0)
    sent = cached / prompt if prompt else None
    return findings.LevelFacts(
        records, summary, level.concurrency, cfg.requests, run_id=run_id, guard=snap, client_reasons=load.reasons,
        slot_reasons=slots, max_error_rate=cfg.max_error_rate, peak_in_flight=peak_in_flight(measured),
        node_guards=node_snaps, server_guard=server_snap, lost_workers=load.lost,
        stopped=load.stop.reason if load.stop else None, sent_cached_share=sent, grace_s=cfg.grace_s)


class _Load:
    """Where a level's requests come from: this process (run_phase), or the workers (workers.WorkerPool); or a
    kind's agents, in this process. After the measured phase: the measured window, the client's report and its
    reasons to be called the limit, and the workers lost (the window is kept as far as it got)."""

    def __init__(self, client: StreamClient, prompts: PromptPool, pool: WorkerPool | None) -> None:
        self.stream, self.prompts, self.pool, self.window = client, prompts, pool, (0, 0)
        self.client_report: dict[str, Any] = {}
        self.reasons: list[str] = []
        self.lost: list[str] = []
        self.stop: LevelStop | None = None  # a search's watch on the level: stop sending once its verdict is known
        self.stagger_s: float | None = None  # --phase staggered: the streams' first sends spread over this
        self.telemetry: LevelTelemetry | None = None  # the server's /metrics and power sampled while it measured
        self.grace_s: float | None = DEFAULT_GRACE_S  # requests in flight past a duration's end get this long
        self.waiting: Waiting | None = None  # told what a phase waits for (a warm-up, a level past its end)
        self.spill: Callable[[list[RequestRecord]], None] | None = None  # the level's records stored before its end
        self.source_error: str | None = None  # the prompts' source failed mid-level (loadgen.PhaseResult)

    @property
    def cut(self) -> bool:
        """The level lost part of its load (a worker) or was cut by the search's time budget: it is partial."""
        return bool(self.lost) or (self.stop is not None and self.stop.cut)

    async def warmup(self, level: Level, n: int, seed: int, records: list[RequestRecord]) -> None:
        stall_s = self.stream.stall_timeout_s  # what a warm-up waits on the server is said (warmup.watched)
        if self.pool is None:
            error = (await watched(run_phase(self.stream, self.prompts, level, "warmup", requests=n, duration_s=None,
                                             seed=seed, sink=records), in_flight(records), stall_s,
                                   self.waiting)).source_error
        else:
            merged = await watched(self.pool.run_phase(level, "warmup", requests=n, duration_s=None, seed=seed,
                                                       prompts=self.prompts, sink=records),
                                   self.pool.in_flight, stall_s, self.waiting)
            self.lost, error = self.lost + merged.lost, merged.source_error
        if error is not None:  # the prompts' source failed: the server's tokenizer is gone
            raise EndpointError(error)

    async def measured(self, level: Level, n: int | None, duration_s: float | None, seed: int,
                       records: list[RequestRecord], on_done: OnDone) -> None:
        if self.pool is not None:
            merged = await self.pool.run_phase(level, "measured", requests=n, duration_s=duration_s, seed=seed,
                                               prompts=self.prompts, sink=records, on_done=on_done,
                                               grace_s=self.grace_s, waiting=self.waiting)
            self.window, self.source_error = (merged.start_ns, merged.end_ns), merged.source_error
            self.client_report, self.reasons, self.lost = merged.client, merged.reasons, self.lost + merged.lost
            return
        watch = ClientWatch()
        watch.start()
        stop = self.stop
        try:
            res = await run_phase(self.stream, self.prompts, level, "measured", requests=n, duration_s=duration_s,
                                  watch=watch, on_done=stop.wrap(on_done) if stop else on_done, seed=seed,
                                  sink=records, halt=stop.halted if stop else None, stagger_s=self.stagger_s,
                                  grace_s=self.grace_s, waiting=self.waiting)
            self.window, self.source_error = (res.start_ns, res.end_ns), res.source_error
        finally:
            await watch.stop()
            self.client_report = watch.report()
        self.reasons = watch.judge(level, records)

    async def agents(self, run: AgentRun, level: Level, records: list[RequestRecord]) -> None:
        """Agents in this process (each turn waits for the answer before it, so no worker pool). Agents think
        between turns: fewer turns in flight than agents is the workload, not a client falling behind."""
        watch = ClientWatch(sampling_inflight=False)
        watch.start()
        try:
            with still_heap():
                self.window = await run.run(self.waiting)
        finally:
            await watch.stop()
            self.client_report = watch.report()
        self.reasons = watch.judge(level, records)


class _Sweep:
    """One sweep's levels in order, each with its repetitions, stopping on what makes the rest meaningless."""

    def __init__(self, cfg: SweepConfig, store: Store, run_id: str, ep: Endpoint, client: StreamClient,
                 rep: Reporter, seed: int, alive: Callable[[], bool] | None, pool: WorkerPool | None,
                 plan: LevelPlan, host: ServerHost) -> None:
        self.cfg, self.store, self.run_id, self.ep, self.client = cfg, store, run_id, ep, client
        self.rep, self.seed, self.alive, self.pool, self.plan, self.host = rep, seed, alive, pool, plan, host
        self.outcomes: list[LevelOutcome] = []
        self.source_error: str | None = None  # a level's prompts could not be built: it ends the run, kept

    async def run(self, bound: Bound, prompts: PromptPool) -> None:
        while (level := self.plan.next_level(self.outcomes)) is not None:
            idx, reps, level_status = len(self.outcomes), [], "complete"
            for r in range(self.cfg.repetitions):
                summary, level_status = await self.level(bound, prompts, (idx, r), level)
                reps.append(summary)
                if level_status != "complete":
                    break
            combined = combine_repetitions(reps, self.cfg.price_per_hour, self.cfg.currency)
            self.outcomes.append(outcome := LevelOutcome(idx, level, combined, level_status, reps))
            try:
                await self.stop_if_broken(level, reps[-1])
            except (EndpointError, EngineError) as e:  # its server went: the level is kept, failed, and says why
                findings.server_gone(e, reps[-1], outcome.serving)
                outcome.status = "failed"
                self.store.restate_level(self.run_id, idx, len(reps) - 1, "failed", reps[-1])
                raise

    async def level(self, bound: Bound, prompts: PromptPool, at: tuple[int, int],
                    level: Level) -> tuple[ServingLevel, str]:
        """One repetition of a level (``at``: its index and repetition): warm-up, measured window, findings, stored."""
        cfg, rep = self.cfg, self.rep
        idx, repetition = at
        records: list[RequestRecord] = []
        work: LevelWork = bound.level(level, repetition, records, rep.request_done)
        n_warm = warmups(cfg, level)
        snap = await snapshot_before(cfg.guard, cfg.guard_config, cfg.target_pids, f"before level {level.describe()}")
        await prompts.prepare(work.prepare(n_warm))
        started = now_iso()
        desc = _describe(cfg, self.plan, level, at)
        load = _Load(self.client, prompts, self.pool)
        load.grace_s, load.waiting = cfg.grace_s, rep.waiting
        load.spill = partial(self.store.save_requests, self.run_id, idx, repetition)
        load.stop = self.plan.stop(level, work.planned, records) if work.stoppable else None
        node_snaps = await self.pool.guards(cfg.guard, cfg.guard_config) if self.pool is not None else []
        refuse_dirty_nodes(cfg.guard, node_snaps, f"before level {level.describe()}")
        server_snap = await self.host.guard(cfg.guard, f"before level {level.describe()}")
        try:
            if n_warm:
                rep.note(f"{desc}: {plural(n_warm, 'warm-up request')} (not counted)")
                await load.warmup(level, n_warm, self.seed, records)
                if cfg.warmup_auto:
                    await self.settle(load, level, n_warm, records, desc)
                if (failed := failures(records)) is not None:
                    rep.warn(f"{desc}: {failed}")
            load.stagger_s = stagger_window(records) if cfg.phase == "staggered" else None
            rep.level_start(desc, work.planned, cfg.duration_s)
            await self.measure(work, load, level, (idx, repetition), records)
        except asyncio.CancelledError:
            # Ctrl-C: what was measured is kept, with the guard's snapshots and the server's samples it had
            self.finish(work, load, level, at, records, (snap, node_snaps, server_snap), prompts, started, True)
            raise
        summary, status = self.finish(work, load, level, at, records, (snap, node_snaps, server_snap), prompts,
                                      started, False)
        self.source_error = load.source_error
        rep.level_end(summary)
        return summary, status

    def finish(self, work: LevelWork, load: _Load, level: Level, at: tuple[int, int], records: list[RequestRecord],
               snaps: tuple[GuardSnapshot | None, list[GuardSnapshot], GuardSnapshot | None], prompts: PromptPool,
               started: str, interrupted: bool) -> tuple[ServingLevel, str]:
        """A repetition's summary, findings and status, stored: one it measured to its end, or one an interrupt cut
        (its window from its first send to now, its status interrupted)."""
        cfg, store, run_id = self.cfg, self.store, self.run_id
        idx, repetition = at
        snap, node_snaps, server_snap = snaps
        window = load.window
        if interrupted:
            measured = [r for r in records if r.phase == "measured"]
            window = (min((r.sent_ns for r in measured), default=0), 0)
        summary = summarize(records, concurrency=level.concurrency, rate=level.offered_rate, window_start_ns=window[0],
                            window_end_ns=window[1] or None, slo=cfg.slo, sessions=work.whole(records))
        work.attach(summary, records)  # before what reads its totals: a soak's are over turns it let go
        summary.cost_per_mtok = level_cost(cfg.price_per_hour, cfg.currency, summary.sustained_tps)
        summary.client = ClientReport.written(**load.client_report)
        summary.guard = snap
        tele = load.telemetry
        if tele is not None:
            summary.telemetry = tele.summary(summary.total_output_tokens, summary.duration_s)
            if tele.series():
                store.save_telemetry(run_id, idx, repetition, tele.series())
            if summary.session is not None:  # the server's own hit share (/metrics) beside the responses'
                summary.session.server_hit_share = summary.telemetry.prefix_cache_hit_rate
        if node_snaps:
            summary.client.put(node_guards=[n.to_dict() for n in node_snaps])
        if server_snap is not None:
            summary.client.put(server_guard=server_snap.to_dict())
        facts = _facts(cfg, run_id, level, records, summary, load, self.ep.info, snaps, prompts.longest, work)
        if interrupted:  # "N of the M planned"
            facts.interrupted, facts.requests = True, work.planned
        findings.assess(facts)
        status = "interrupted" if interrupted else _end_status(summary, load)
        store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                         finished=now_iso(), window=window)
        return summary, status

    async def settle(self, load: _Load, level: Level, n: int, records: list[RequestRecord], desc: str) -> None:
        """``--warmup auto``: more rounds of warm-up until TTFT settles (steady.settled), at most WARMUP_ROUNDS."""
        for k in range(1, WARMUP_ROUNDS):
            before = len(records)
            await load.warmup(level, n, self.seed + 104729 * k, records)
            if settled(records[:before], records[before:]):
                self.rep.note(f"{desc}: warm-up settled after {k + 1} rounds of {n}")
                return
        self.rep.warn(f"{desc}: TTFT had not settled after {WARMUP_ROUNDS} warm-up rounds of {n}")

    async def measure(self, work: LevelWork, load: _Load, level: Level, at: tuple[int, int],
                      records: list[RequestRecord]) -> None:
        """The measured phase of a level, with the server's /metrics sampled meanwhile (``load.telemetry``, stopped
        however the phase ends). ``at``: the level's index and repetition."""
        cfg, (idx, repetition) = self.cfg, at
        tele = None
        if cfg.metrics_interval_s or self.host.meter is not None:
            tele = load.telemetry = LevelTelemetry(self.client.http, root_url(cfg.url), cfg.metrics_interval_s,
                                                   {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {},
                                                   self.host.meter, self.host.idle, self.host.note)
            tele.start()
        try:
            await work.measure(load, level, cfg.duration_s, self.seed + idx * 7919 + repetition, records,
                               self.rep.request_done)
        finally:
            if tele is not None:
                await tele.stop()

    async def stop_if_broken(self, level: Level, last: ServingLevel) -> None:
        """A truncated prompt fails the run; lost connections ask whether the server is still there."""
        if self.source_error is not None:  # its prompts could not be built: the server's tokenizer is gone
            raise EndpointError(f"the level ({level.describe()}) stopped sending: {self.source_error}")
        truncated = last.finding(Code.PROMPT_TRUNCATED)
        if truncated is not None:
            raise LevelFailed(f"the level ({level.describe()}) failed: {truncated.text}")
        if not (set(last.errors) & CONNECTION_ERRORS or (last.failed and not last.completed)):
            return
        if self.alive is not None and not self.alive():
            raise EngineError(f"the embedded engine died during the level ({level.describe()}): see its log")
        try:
            await discover(self.ep.http, self.cfg.url, self.cfg.api_key, timeout=5, model=self.ep.model)
        except EndpointError as e:
            raise EndpointError(f"the server stopped answering during the level ({level.describe()}): {e}") from e


def _end_status(summary: ServingLevel, load: _Load) -> str:
    """A measured level's status: failed (too many errors, a prompt cut), partial (cut by a search's budget) or
    complete; a search's early stop adds its verdict's reason first."""
    if load.stop is not None:
        load.stop.apply(summary)
    if summary.finding(Code.ERROR_RATE) or summary.finding(Code.PROMPT_TRUNCATED) or load.source_error \
            or (not summary.completed and summary.finding(Code.UNANSWERED)):  # the last: it measured nothing
        return "failed"
    return "partial" if load.cut else "complete"


def _describe(cfg: SweepConfig, plan: LevelPlan, level: Level, at: tuple[int, int]) -> str:
    """"level 2/5 concurrency 4 (rep 1/3)"; a search's levels have no total: "level 3 of the search, 4 agents"."""
    (idx, repetition), n_levels = at, plan.total
    where = f"level {idx + 1} of the search, " if n_levels is None else \
        f"level {idx + 1}/{n_levels} " if n_levels > 1 else ""
    return where + level.describe() + (f" (rep {repetition + 1}/{cfg.repetitions})" if cfg.repetitions > 1 else "")


async def run_sweep(
    cfg: SweepConfig,
    store: Store,
    reporter: Reporter | None = None,
    alive: Callable[[], bool] | None = None,
    plan: LevelPlan | None = None,
) -> RunResult:
    """Run a sweep and store it. ``alive`` (optional callable) tells whether an embedded server still runs.
    ``plan``: which level comes next (default: the configured levels in order)."""
    rep = reporter or QuietReporter()
    plan = plan or FixedPlan(cfg.levels())
    ensure_open_files(plan.widest())
    seed = cfg.seed if cfg.seed is not None else random.randrange(2**31)
    log = RunLog(store, new_run_id(), "sweep", cfg.label)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace_config()]) as http, \
            contextlib.AsyncExitStack() as closing:
        ep = await Endpoint.open(http, cfg.url, cfg.api_key, cfg.model, cfg.tokenizer, rep.warn)
        host = await ServerHost.open(cfg.power)
        closing.push_async_callback(host.close)  # whatever ends the run, a refusal before it starts too
        if cfg.power and cfg.power.idle_s and not host.idle:  # an agent's meter measures it too
            rep.warn(f"--idle-power: no idle figure, as {host.note}")
        client = ep.client(cfg.api, temperature=cfg.temperature, timeout_s=cfg.timeout_s,
                           stall_timeout_s=cfg.stall_timeout_s)
        builder = PromptBuilder(ep.tokenizer, seed, log.run_id.rsplit("-", 1)[-1] + secrets.token_hex(2))
        bound = cfg.workload.bind(Binding(ep, cfg, client, builder, seed, rep.note, rep.warn))
        # The check request names the model too: with a server that cannot list its models, it proves the name.
        probe = await preflight(client, builder, _check_fields(cfg, ep))
        client.body_extras = bound.body_extras
        pool, auto = await start_workers(ClientSpec.of(client, ep.counter.path if ep.counter is not None else None),
                                         cfg.url, cfg.workers, cfg.ray, cfg.levels(), cfg.workload.typical_input(),
                                         rep.note, rep.warn) if cfg.workload.splits else (None, None)
        manifest = _manifest(cfg, ep, bound.workload_entry(), bound.recorded_fields, probe, seed, pool, auto)
        manifest.guard, manifest.power, manifest.server_host = cfg.guard, host.manifest(), host.snapshot
        plan.annotate(manifest)
        # strict: refuse before anything is stored
        before = await snapshot_before(cfg.guard, cfg.guard_config, cfg.target_pids, "before the run")
        manifest.guard_before_run = before.to_dict() if before is not None else None
        log.create(manifest)
        sweep = _Sweep(cfg, store, log.run_id, ep, client, rep, seed, alive, pool, plan, host)
        try:
            prompts = bound.prompts()
            with still_heap():  # the heap as it stands (tokenizer, prompts) is collected once, never while timing
                await sweep.run(bound, prompts)
        except BaseException as e:  # an interrupt, a user-facing error or a bug: the run is closed, its levels kept
            # an interrupt is raised as RunInterrupted, carrying the run (asyncio.run passes it through as it is)
            if (stop := log.abort(e, any(o.status == "complete" for o in sweep.outcomes))) is not None:
                raise stop from None
            raise
        finally:
            if pool is not None:
                await pool.close()
            await client.close()
        status, error = plan.verdict(sweep.outcomes, manifest)
        return log.close(status, error, sweep.outcomes)
