"""The serving sweep: discover the endpoint, build the workload, run every level (warm-up, then the
measured window), summarize, store each finished level at once, and stop cleanly on faults or Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from . import findings, redact
from .client import Api, PreparedRequest, StreamClient, trace_config
from .cost import level_cost
from .endpoint import Endpoint, RunLog
from .errors import EndpointError, EngineError, LevelFailed, UsageError
from .findings import Code
from .guard import refuse_if_dirty, snapshot_before
from .loadgen import ClientWatch, Level, run_phase, still_heap
from .metrics import SLO, LevelSummary, peak_in_flight, summarize
from .workers import ClientSpec, WorkerPool, auto_workers
from .records import RequestRecord
from .results import LevelOutcome, Manifest, RunResult, combine_repetitions, new_run_id, now_iso
from .servers import ServerInfo, discover, root_url
from .store import Store
from .telemetry import LevelTelemetry
from .trace import Trace, TracePrompts
from .workload import PromptBuilder, Workload

CONNECTION_ERRORS = {"connection", "disconnected", "stream_broken"}


@dataclass(slots=True)
class SweepConfig:
    url: str
    model: str | None = None
    api: Api = "completions"
    api_key: str | None = None  # used, never stored
    concurrency: list[int] = field(default_factory=lambda: [1])
    rates: list[float] = field(default_factory=list)
    arrival: str = "poisson"
    max_concurrency: int | None = None
    requests: int | None = 16
    duration_s: float | None = None
    warmup: int | None = None  # None: one request per concurrent slot
    repetitions: int = 1
    timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    input_len: int = 128
    output_len: int = 128
    shape: str | None = None
    prefix_len: int = 0
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
    #: Load-generating processes (None: ``auto``, one per workers.STREAMS_PER_WORKER streams, at most one a core).
    workers: int | None = 1
    #: A Ray cluster to place the workers on (an address, or "auto"); None: this machine only.
    ray: str | None = None
    #: A trace to replay in open loop (trace.load_trace): one level, its first ``requests`` requests if given,
    #: sent at its timestamps divided by ``trace_speed`` (2: twice as fast)
    trace: Trace | None = None
    trace_speed: float = 1.0

    def __post_init__(self) -> None:
        if (trace := self.replayed()) is not None:  # its requests carry their own lengths: the longest stand here
            self.input_len, self.output_len = trace.max_input, trace.max_output

    def replayed(self) -> Trace | None:
        """The part of the trace this run replays: its first ``requests`` requests (all of them for None)."""
        return self.trace.head(self.requests) if self.trace is not None else None

    def levels(self) -> list[Level]:
        if (trace := self.replayed()) is not None:
            return [Level(schedule=trace.schedule(self.trace_speed), max_concurrency=self.max_concurrency)]
        if self.rates:
            return [Level(rate=r, arrival=self.arrival, max_concurrency=self.max_concurrency) for r in self.rates]  # type: ignore[arg-type]
        return [Level(concurrency=c) for c in self.concurrency]


class Reporter(Protocol):
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None: ...
    def request_done(self, record: RequestRecord) -> None: ...
    def level_end(self, summary: LevelSummary) -> None: ...
    def note(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...


class QuietReporter:
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None:
        pass

    def request_done(self, record: RequestRecord) -> None:
        pass

    def level_end(self, summary: LevelSummary) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass


class _Prompts:
    """Unique prompts, built ahead of the level so building never delays a send."""

    def __init__(self, builder: PromptBuilder, workload: Workload, extra: dict[str, Any]) -> None:
        self.builder = builder
        self.workload = workload
        self.extra = extra
        self.pool: list[tuple[int, PreparedRequest]] = []
        self.counter = 0

    async def prepare(self, n: int) -> None:
        missing = n - len(self.pool)
        if missing <= 0:
            return
        built = await self.builder.build(missing, self.workload.input_len, self.workload.prefix_len, self.counter)
        for text, count in built:
            self.pool.append(
                (self.counter, PreparedRequest(text, self.workload.output_len, count, self.extra))
            )
            self.counter += 1

    async def next(self) -> tuple[int, PreparedRequest]:
        if not self.pool:
            await self.prepare(1)
        return self.pool.pop(0)

    async def take(self, n: int) -> list[tuple[int, PreparedRequest]]:
        """The next ``n`` prompts, for a worker (workers.WorkerPool)."""
        await self.prepare(n)
        out, self.pool = self.pool[:n], self.pool[n:]
        return out


#: Where a sweep's prompts come from: unique ones of the workload's lengths, or a trace's.
Prompts = _Prompts | TracePrompts


def ensure_open_files(concurrency: int) -> None:
    """Each request in flight holds a socket: raise this process's open-file limit to what ``concurrency`` needs,
    or refuse with advice before the level crashes on "Too many open files" (macOS allows 256 by default)."""
    try:
        import resource
    except ImportError:  # not on POSIX: nothing to check
        return
    need = concurrency + 64  # the sockets, and room for the database, logs and the event loop
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    target = need if hard == resource.RLIM_INFINITY else min(need, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target < need:
        raise UsageError(f"concurrency {concurrency} needs about {need} open files, and this shell allows {target}: "
                         f"raise it first (ulimit -n {need}) or lower --concurrency")


def _ms(ns: int | None) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


async def _preflight(client: StreamClient, builder: PromptBuilder, fields: dict[str, Any]) -> RequestRecord:
    """A 2-token check request with ``fields``: the run's own kind of request, with a short output."""
    text, n = await builder.exact("preflight: ", 8, random.Random())
    rec = RequestRecord(index=-1, phase="warmup")
    await client.send(PreparedRequest(text, 2, n, fields), rec)
    if rec.error_kind is None:
        return rec
    if rec.http_status is not None and 400 <= rec.http_status < 500:
        raise EndpointError(
            f"the server refused the request (HTTP {rec.http_status}: {rec.error}); "
            "check --model and --api, or drop fields with --extra-body"
        )
    raise EndpointError(f"the first request failed ({rec.error_kind}: {rec.error}); check the server's log")


def _manifest(cfg: SweepConfig, ep: Endpoint, workload: Workload, probe: RequestRecord, extras: dict[str, Any],
              seed: int, pool: WorkerPool | None) -> Manifest:
    return ep.manifest(
        cfg.embedded, cfg.label, cfg.command,
        # the one uncounted request before any level: the server counts it in its own metrics
        check_request={"ttft_ms": _ms(probe.ttft_ns), "e2e_ms": _ms(probe.e2e_ns),
                       "output_tokens": probe.output_tokens},
        server_flags=(cfg.embedded or {}).get("command"),
        workload=workload.to_dict() | _trace_manifest(cfg, ep),
        request_fields=redact.body(extras),
        load={
            "levels": [lv.describe() for lv in cfg.levels()],
            "requests": cfg.requests,
            "duration_s": cfg.duration_s,
            "warmup": cfg.warmup,
            "repetitions": cfg.repetitions,
            "timeout_s": cfg.timeout_s,
            "stall_timeout_s": cfg.stall_timeout_s,
            "temperature": cfg.temperature,
            "workers": pool.describe() if pool is not None else {"kind": "in-process", "workers": 1},
        },
        price_per_hour=cfg.price_per_hour,
        currency=cfg.currency,
        slo=cfg.slo.describe() if cfg.slo else None,
        seed=seed,
    )


def _request_fields(cfg: SweepConfig, ep: Endpoint) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of every measured request (fixed output length, by what the server honours) and of the check
    request before the run (the same kind, a short output); the user's --extra-body on top of both. A trace's
    requests fix each its own output length (``_trace_fields``) and let the prefix cache serve them."""
    extras: dict[str, Any] = {}
    check: dict[str, Any] = {}
    if cfg.fixed_output and cfg.trace is None:
        extras.update(ep.info.adapter.output_length_fields(cfg.output_len, ep.eos_token_id, cfg.api))
    if cfg.fixed_output:
        check.update(ep.info.adapter.check_fields(2, ep.eos_token_id, cfg.api))
    if cfg.trace is not None:
        extras.update(ep.info.adapter.warm_context_fields())
    return extras | cfg.extra_body, check | cfg.extra_body


def _trace_fields(cfg: SweepConfig, ep: Endpoint) -> Callable[[int], dict[str, Any]]:
    """A trace request's own fields, by its output length: that length fixed as the server allows, the prefix
    cache allowed to serve shared blocks (llama.cpp's ``cache_prompt``, off for every other sweep), the user's
    --extra-body on top."""
    adapter = ep.info.adapter

    def fields(output_len: int) -> dict[str, Any]:
        fixed = adapter.output_length_fields(output_len, ep.eos_token_id, cfg.api) if cfg.fixed_output else {}
        return fixed | adapter.warm_context_fields() | cfg.extra_body

    return fields


def _trace_manifest(cfg: SweepConfig, ep: Endpoint) -> dict[str, Any]:
    """The replayed trace, for the manifest's workload (nothing for another sweep)."""
    trace = cfg.replayed()
    if trace is None:
        return {}
    first = trace.requests[0].output_length
    return {"trace": trace.describe(cfg.trace_speed) | {
        "request_fields": f"per request, by its output_length: for {first}, "
                          f"{json.dumps(redact.body(_trace_fields(cfg, ep)(first)))}"}}


def _warmups(cfg: SweepConfig, level: Level) -> int:
    """Uncounted requests before a level: as asked, else one per concurrent slot (at most 4 in open loop)."""
    return cfg.warmup if cfg.warmup is not None else (level.concurrency or min(4, level.max_concurrency or 4))


class _Sweep:
    """One sweep's levels in order, each with its repetitions, stopping on what makes the rest meaningless."""

    def __init__(self, cfg: SweepConfig, store: Store, run_id: str, ep: Endpoint, client: StreamClient,
                 prompts: Prompts, rep: Reporter, seed: int, alive: Callable[[], bool] | None,
                 pool: WorkerPool | None = None) -> None:
        self.cfg, self.store, self.run_id, self.ep, self.client = cfg, store, run_id, ep, client
        self.prompts, self.rep, self.seed, self.alive, self.pool = prompts, rep, seed, alive, pool
        self.outcomes: list[LevelOutcome] = []

    async def run(self) -> None:
        for idx, level in enumerate(self.cfg.levels()):
            reps: list[LevelSummary] = []
            level_status = "complete"
            for r in range(self.cfg.repetitions):
                summary, level_status = await _run_level(
                    self.cfg, self.store, self.run_id, idx, r, level, self.client, self.prompts, self.rep,
                    self.ep.info, self.seed, self.pool)
                reps.append(summary)
                if level_status != "complete":
                    break
            combined = combine_repetitions(reps, self.cfg.price_per_hour, self.cfg.currency)
            self.outcomes.append(LevelOutcome(idx, level, combined, level_status, reps))
            await self.stop_if_broken(level, reps[-1])

    async def stop_if_broken(self, level: Level, last: LevelSummary) -> None:
        """A truncated prompt fails the run; lost connections ask whether the server is still there."""
        truncated = last.finding(Code.PROMPT_TRUNCATED)
        if truncated is not None:
            raise LevelFailed(f"level {level.describe()} failed: {truncated.text}")
        if not (set(last.errors) & CONNECTION_ERRORS or (last.failed and not last.completed)):
            return
        if self.alive is not None and not self.alive():
            raise EngineError(f"the embedded engine died during level {level.describe()}: see its log")
        try:
            await discover(self.ep.http, self.cfg.url, self.cfg.api_key, timeout=5, model=self.ep.model)
        except EndpointError as e:
            raise EndpointError(f"the server stopped answering during level {level.describe()}: {e}") from e

    def verdict(self) -> tuple[str, str | None]:
        failed = [o for o in self.outcomes if o.status != "complete"]
        if not failed:
            return "complete", None
        status = "partial" if len(failed) < len(self.outcomes) else "failed"
        return status, f"{len(failed)} of {len(self.outcomes)} levels failed: " + "; ".join(
            f"{o.level.describe()}: {', '.join(o.summary.flags) or o.status}" for o in failed)


async def run_sweep(
    cfg: SweepConfig,
    store: Store,
    reporter: Reporter | None = None,
    alive: Callable[[], bool] | None = None,
) -> RunResult:
    """Run a sweep and store it. ``alive`` (optional callable) tells whether an embedded server still runs."""
    rep = reporter or QuietReporter()
    if cfg.trace is not None and cfg.repetitions > 1:
        raise UsageError("a trace is replayed once per run (a repetition would find its blocks in the cache): "
                         "drop --repetitions")
    ensure_open_files(max([lv.concurrency or lv.max_concurrency or 1 for lv in cfg.levels()]))
    seed = cfg.seed if cfg.seed is not None else random.randrange(2**31)
    log = RunLog(store, new_run_id(), "sweep", cfg.label)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace_config()]) as session:
        ep = await Endpoint.open(session, cfg.url, cfg.api_key, cfg.model, cfg.tokenizer, rep.warn)
        extras, check = _request_fields(cfg, ep)
        client = ep.client(cfg.api, temperature=cfg.temperature, timeout_s=cfg.timeout_s,
                           stall_timeout_s=cfg.stall_timeout_s)
        builder = PromptBuilder(ep.tokenizer, seed, log.run_id.rsplit("-", 1)[-1] + secrets.token_hex(2))
        # The check request names the model too: with a server that cannot list its models, it proves the name.
        probe = await _preflight(client, builder, check)
        client.body_extras = extras
        pool = await _start_workers(cfg, client, ep.counter.path if ep.counter is not None else None, rep)
        workload = Workload(cfg.input_len, cfg.output_len, cfg.shape, cfg.api, cfg.prefix_len, seed)
        manifest = _manifest(cfg, ep, workload, probe, extras, seed, pool)
        manifest.guard = cfg.guard
        # strict: refuse before anything is stored
        manifest.guard_before_run = await snapshot_before(cfg.guard, cfg.guard_config, cfg.target_pids,
                                                             "before the run")
        log.create(manifest)
        sweep = _Sweep(cfg, store, log.run_id, ep, client, _prompts(cfg, ep, builder, workload), rep, seed, alive,
                       pool)
        try:
            with still_heap():  # the heap as it stands (tokenizer, prompts) is collected once, never while timing
                await sweep.run()
        except BaseException as e:  # an interrupt, a user-facing error or a bug: the run is closed, its levels kept
            # an interrupt is raised as RunInterrupted, carrying the run (asyncio.run passes it through as it is)
            if (stop := log.abort(e, any(o.status == "complete" for o in sweep.outcomes))) is not None:
                raise stop from None
            raise
        finally:
            if pool is not None:
                await pool.close()
        status, error = sweep.verdict()
        log.finish(status, error)
        return RunResult(log.run_id, manifest, sweep.outcomes, status, error)


def _prompts(cfg: SweepConfig, ep: Endpoint, builder: PromptBuilder, workload: Workload) -> Prompts:
    """The run's prompts: a trace's (its warm-ups first), or unique ones of the workload's lengths."""
    trace = cfg.replayed()
    if trace is None:
        return _Prompts(builder, workload, {})
    return TracePrompts(builder, trace, _trace_fields(cfg, ep), _warmups(cfg, cfg.levels()[0]))


async def _start_workers(cfg: SweepConfig, client: StreamClient, counter_path: str | None,
                         rep: Reporter) -> WorkerPool | None:
    """The load-generating workers (workers.py), or None to run every level in this process."""
    if cfg.trace is not None:  # a trace is replayed by this process: its one schedule, its prompts in order
        if cfg.ray or (cfg.workers or 1) > 1:
            raise UsageError("a trace is replayed by one process: drop --workers and --ray with --trace")
        return None
    n = cfg.workers if cfg.workers is not None else auto_workers(cfg.levels())
    spec = ClientSpec.of(client, counter_path)
    if cfg.ray:
        from .raypool import ray_pool

        pool = await ray_pool(cfg.ray, spec, cfg.workers)
    elif n > 1:
        pool = await WorkerPool.local(spec, n)
    else:
        return None
    rep.note(f"load from {pool.size} workers ({pool.kind})")
    return pool


def _facts(cfg: SweepConfig, run_id: str, level: Level, records: list[RequestRecord], summary: LevelSummary,
           reasons: list[str], info: ServerInfo, snap: dict[str, Any] | None, node_snaps: list[dict[str, Any]],
           lost: list[str]) -> findings.LevelFacts:
    """What the finding rules look at for a finished level: the client's reasons (its watch, or each worker's),
    the adapter's slot limits, the guard's snapshots (this machine's and each load-generating node's), workers
    lost, and the most requests in flight."""
    slots = info.adapter.slot_warnings(info.slots, info.slot_ctx, level.concurrency, cfg.input_len + cfg.output_len)
    measured = [r for r in records if r.phase == "measured"]
    return findings.LevelFacts(
        records, summary, level.concurrency, cfg.requests, run_id=run_id, guard=snap, client_reasons=reasons,
        slot_reasons=slots, max_error_rate=cfg.max_error_rate, peak_in_flight=peak_in_flight(measured),
        node_guards=node_snaps, lost_workers=lost)


class _Load:
    """Where a level's requests come from: this process (run_phase), or the workers (workers.WorkerPool). Either
    way, after ``measured``: the measured window, the client's report and its reasons to be called the limit,
    and the workers lost (the window is kept as far as it got, for a level cut short)."""

    def __init__(self, client: StreamClient, prompts: Prompts, pool: WorkerPool | None) -> None:
        self.stream, self.prompts, self.pool = client, prompts, pool
        self.window = (0, 0)
        self.client_report: dict[str, Any] = {}
        self.reasons: list[str] = []
        self.lost: list[str] = []

    async def warmup(self, level: Level, n: int, seed: int, records: list[RequestRecord]) -> None:
        if self.pool is None:
            await run_phase(self.stream, self.prompts, level, "warmup", requests=n, duration_s=None, seed=seed,
                            sink=records)
        else:
            self.lost += (await self.pool.run_phase(level, "warmup", requests=n, duration_s=None, seed=seed,
                                                    prompts=self.prompts, sink=records)).lost

    async def measured(self, level: Level, n: int | None, duration_s: float | None, seed: int,
                       records: list[RequestRecord], on_done: Any) -> None:
        if self.pool is not None:
            merged = await self.pool.run_phase(level, "measured", requests=n, duration_s=duration_s, seed=seed,
                                               prompts=self.prompts, sink=records, on_done=on_done)
            self.window = (merged.start_ns, merged.end_ns)
            self.client_report, self.reasons, self.lost = merged.client, merged.reasons, self.lost + merged.lost
            return
        watch = ClientWatch()
        watch.start()
        try:
            res = await run_phase(self.stream, self.prompts, level, "measured", requests=n, duration_s=duration_s,
                                  watch=watch, on_done=on_done, seed=seed, sink=records)
            self.window = (res.start_ns, res.end_ns)
        finally:
            await watch.stop()
            self.client_report = watch.report()
        self.reasons = watch.judge(level, records)


def refuse_dirty_nodes(mode: str, node_snaps: list[dict[str, Any]], where: str) -> None:
    """Strict mode refuses a dirty load-generating node as it refuses a dirty driver (``guard.refuse_if_dirty``);
    warn mode records it and the level's findings say so."""
    for snap in node_snaps:
        refuse_if_dirty(mode, snap, f"on load-generating node {snap.get('node')} {where}")


async def _run_level(
    cfg: SweepConfig,
    store: Store,
    run_id: str,
    idx: int,
    repetition: int,
    level: Level,
    client: StreamClient,
    prompts: Prompts,
    rep: Reporter,
    info: ServerInfo,
    seed: int,
    pool: WorkerPool | None = None,
) -> tuple[LevelSummary, str]:
    n_warm = _warmups(cfg, level)
    n_req = cfg.requests if level.schedule is None else len(level.schedule)  # a trace: the part replayed
    snap = await snapshot_before(cfg.guard, cfg.guard_config, cfg.target_pids, f"before level {level.describe()}")
    await prompts.prepare(n_warm + (n_req or max(8, 2 * (level.concurrency or 4))))
    started = now_iso()
    records: list[RequestRecord] = []
    status = "complete"
    n_levels = len(cfg.levels())
    desc = (f"level {idx + 1}/{n_levels} " if n_levels > 1 else "") + level.describe() + \
        (f" (rep {repetition + 1}/{cfg.repetitions})" if cfg.repetitions > 1 else "")
    load = _Load(client, prompts, pool)
    node_snaps = await pool.guards(cfg.guard, cfg.guard_config) if pool is not None else []
    refuse_dirty_nodes(cfg.guard, node_snaps, f"before level {level.describe()}")
    try:
        if n_warm:
            rep.note(f"{desc}: {n_warm} warm-up requests (not counted)")
            await load.warmup(level, n_warm, seed, records)
        rep.level_start(desc, n_req, cfg.duration_s)
        tele = None
        if cfg.metrics_interval_s:
            tele = LevelTelemetry(client.session, root_url(cfg.url), cfg.metrics_interval_s,
                                  {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {})
            tele.start()
        try:
            await load.measured(level, n_req, cfg.duration_s, seed + idx * 7919 + repetition, records,
                                rep.request_done)
        finally:
            if tele is not None:
                await tele.stop()
    except asyncio.CancelledError:
        status = "interrupted"
        measured = [r for r in records if r.phase == "measured"]
        summary = summarize(records, concurrency=level.concurrency, rate=level.offered_rate,
                            window_start_ns=min((r.sent_ns for r in measured), default=0))
        findings.assess(findings.LevelFacts(records, summary, level.concurrency, n_req, interrupted=True))
        store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                         finished=now_iso(), window=load.window)
        raise
    window = load.window
    summary = summarize(records, concurrency=level.concurrency, rate=level.offered_rate, window_start_ns=window[0],
                        window_end_ns=window[1], slo=cfg.slo)
    summary.cost_per_mtok = level_cost(cfg.price_per_hour, cfg.currency, summary.output_throughput_tps)
    summary.client = load.client_report
    summary.guard = snap
    if tele is not None:
        summary.telemetry = tele.summary(summary.total_output_tokens, summary.duration_s)
        if tele.series():
            store.save_telemetry(run_id, idx, repetition, tele.series())
    if node_snaps:
        summary.client["node_guards"] = node_snaps
    findings.assess(_facts(cfg, run_id, level, records, summary, load.reasons, info, snap, node_snaps, load.lost))
    if load.lost and status == "complete":
        status = "partial"
    if summary.finding(Code.ERROR_RATE) or summary.finding(Code.PROMPT_TRUNCATED):
        status = "failed"
    store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                     finished=now_iso(), window=window)
    rep.level_end(summary)
    return summary, status
