"""The serving sweep: discover the endpoint, build the workload, run every level (warm-up, then the
measured window), summarize, store each finished level at once, and stop cleanly on faults or Ctrl-C."""

from __future__ import annotations

import asyncio
import random
import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from . import __version__, findings, machine
from .client import Api, PreparedRequest, StreamClient, trace_config
from .errors import EndpointError, EngineError, LevelFailed, TokenbenchError, UsageError
from .loadgen import ClientWatch, Level, run_phase
from .cost import level_cost
from .findings import Code
from .metrics import SLO, LevelSummary, peak_in_flight, summarize
from .records import RequestRecord
from . import redact
from .servers import ServerInfo, ServerTokenizer, check_model, discover, root_url
from .store import Store
from .telemetry import LevelTelemetry
from .results import LevelOutcome, RunResult, combine_repetitions, new_run_id, now_iso
from .workload import LocalTokenizer, PromptBuilder, Tokenizer, Workload

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
    guard_config: Any = None  # guard.GuardEnv config (dict), loaded by the caller
    target_pids: set[int] = field(default_factory=set)
    #: Sample the server's /metrics this often (None: never). Each sample costs the server a page: on 2 CPU cores
    #: a vLLM /metrics GET stalled every stream for 70-145 ms, so 1 s polling slowed what it measured.
    metrics_interval_s: float | None = 5.0
    #: A level whose share of failed measured requests is above this is failed, not published as a result.
    max_error_rate: float = 0.1

    def levels(self) -> list[Level]:
        if self.rates:
            return [Level(rate=r, arrival=self.arrival, max_concurrency=self.max_concurrency) for r in self.rates]  # type: ignore[arg-type]
        return [Level(concurrency=c) for c in self.concurrency]


class Reporter(Protocol):
    run_id: str | None  # set once the run is stored: the one run an interrupt may show

    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None: ...
    def request_done(self, record: RequestRecord) -> None: ...
    def level_end(self, summary: LevelSummary) -> None: ...
    def note(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...


class QuietReporter:
    run_id: str | None = None

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


async def pick_tokenizer(
    path: str | None, api_key: str | None, session: aiohttp.ClientSession, info: ServerInfo, model: str
) -> tuple[Tokenizer, LocalTokenizer | None]:
    """The served model's tokenizer: ``path`` if given, else the server's own endpoint, else a local one by the
    model's name. Also returns the local one, if any, for counting tokens."""
    if path:
        t = LocalTokenizer(path)
        return t, t
    if info.tokenize_path:
        st = ServerTokenizer(session, info, model, api_key)
        try:
            if await st.encode("hello world"):
                return st, None
        except (TokenbenchError, aiohttp.ClientError, KeyError, ValueError, asyncio.TimeoutError):
            pass
    try:
        t = LocalTokenizer(model)
        return t, t
    except (UsageError, ValueError, OSError):
        pass
    raise UsageError(
        f"no tokenizer for exact prompt lengths of '{model}': pass --tokenizer PATH "
        "(a tokenizer.json or a Hugging Face directory of the served model)"
    )


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


async def run_sweep(
    cfg: SweepConfig,
    store: Store,
    reporter: Reporter | None = None,
    alive: Any = None,
) -> RunResult:
    """Run a sweep and store it. ``alive`` (optional callable) tells whether an embedded server still runs."""
    rep = reporter or QuietReporter()
    ensure_open_files(max([lv.concurrency or lv.max_concurrency or 1 for lv in cfg.levels()]))
    seed = cfg.seed if cfg.seed is not None else random.randrange(2**31)
    run_id = new_run_id()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace_config()]) as session:
        info = await discover(session, cfg.url, cfg.api_key, model=cfg.model)
        if info.models_error:
            rep.warn(f"warning: {info.models_error}; measuring '{cfg.model}' as given by --model")
        model = check_model(info, cfg.model, cfg.url)
        tokenizer, counter = await pick_tokenizer(cfg.tokenizer, cfg.api_key, session, info, model)
        eos = getattr(tokenizer, "eos_token_id", None)
        adapter = info.adapter
        extras: dict[str, Any] = {}
        check: dict[str, Any] = {}
        if cfg.fixed_output:
            extras.update(adapter.output_length_fields(cfg.output_len, eos, cfg.api))
            check.update(adapter.check_fields(2, eos, cfg.api))
        extras.update(cfg.extra_body)
        check.update(cfg.extra_body)
        client = StreamClient(
            session=session, base_url=cfg.url, model=model, api=cfg.api, api_key=cfg.api_key,
            temperature=cfg.temperature, timeout_s=cfg.timeout_s, stall_timeout_s=cfg.stall_timeout_s,
            counter=counter, one_token_per_chunk=adapter.one_token_per_chunk,
            fresh_connection=adapter.closes_after_stream,
        )
        builder = PromptBuilder(tokenizer, seed, run_id.rsplit("-", 1)[-1] + secrets.token_hex(2))
        # The check request names the model too: with a server that cannot list its models, it proves the name.
        probe = await _preflight(client, builder, check)
        client.body_extras = extras
        workload = Workload(cfg.input_len, cfg.output_len, cfg.shape, cfg.api, cfg.prefix_len, seed)
        manifest: dict[str, Any] = {
            "endpoint": cfg.url,
            "model": model,
            "engine": info.engine,
            "engine_version": info.engine_version or (cfg.embedded or {}).get("engine_version"),
            "server": info.to_dict(),
            # the one uncounted request before any level: the server counts it in its own metrics
            "check_request": {"ttft_ms": _ms(probe.ttft_ns), "e2e_ms": _ms(probe.e2e_ns),
                              "output_tokens": probe.output_tokens},
            "server_flags": (cfg.embedded or {}).get("command"),
            "embedded": cfg.embedded,
            "label": cfg.label,
            "command": cfg.command,
            "started": now_iso(),
            "finished": None,
            "workload": workload.to_dict(),
            "tokenizer": tokenizer.description,
            "request_fields": redact.body(extras),
            "load": {
                "levels": [lv.describe() for lv in cfg.levels()],
                "requests": cfg.requests,
                "duration_s": cfg.duration_s,
                "warmup": cfg.warmup,
                "repetitions": cfg.repetitions,
                "timeout_s": cfg.timeout_s,
                "stall_timeout_s": cfg.stall_timeout_s,
                "temperature": cfg.temperature,
            },
            "price_per_hour": cfg.price_per_hour,
            "currency": cfg.currency,
            "slo": cfg.slo.describe() if cfg.slo else None,
            "seed": seed,
            "machine": machine.snapshot(),
        }
        manifest["guard"] = cfg.guard
        first = await guard_snapshot(cfg.guard, cfg.guard_config, cfg.target_pids, "before the run")  # strict: refuse before anything is stored
        manifest["guard_before_run"] = first
        store.create_run(run_id, "sweep", cfg.label, manifest["started"], __version__, manifest)
        rep.run_id = run_id
        prompts = _Prompts(builder, workload, {})
        outcomes: list[LevelOutcome] = []
        status, error = "complete", None
        try:
            for idx, level in enumerate(cfg.levels()):
                reps: list[LevelSummary] = []
                level_status = "complete"
                for r in range(cfg.repetitions):
                    summary, level_status = await _run_level(
                        cfg, store, run_id, idx, r, level, client, prompts, rep, info, seed
                    )
                    reps.append(summary)
                    if level_status != "complete":
                        break
                outcomes.append(LevelOutcome(idx, level, combine_repetitions(reps, cfg.price_per_hour, cfg.currency), level_status, reps))
                last = reps[-1]
                truncated = last.finding(Code.PROMPT_TRUNCATED)
                if truncated is not None:
                    raise LevelFailed(f"level {level.describe()} failed: {truncated.text}")
                if set(last.errors) & CONNECTION_ERRORS or (last.failed and not last.completed):
                    if alive is not None and not alive():
                        raise EngineError(f"the embedded engine died during level {level.describe()}: see its log")
                    try:
                        await discover(session, cfg.url, cfg.api_key, timeout=5, model=model)
                    except EndpointError as e:
                        raise EndpointError(
                            f"the server stopped answering during level {level.describe()}: {e}"
                        ) from e
        except asyncio.CancelledError:
            status, error = "interrupted", "interrupted by the user"
            store.finish_run(run_id, status, now_iso(), error)
            raise
        except Exception as e:  # a user-facing error, or a bug: either way the run is closed, its levels kept
            status = "partial" if any(o.status == "complete" for o in outcomes) else "failed"
            error = str(e) if isinstance(e, TokenbenchError) else f"crashed: {type(e).__name__}: {e}"[:500]
            manifest["finished"] = now_iso()
            store.update_manifest(run_id, manifest)
            store.finish_run(run_id, status, manifest["finished"], error)
            e.run_id = run_id  # type: ignore[attr-defined]
            raise
        failed = [o for o in outcomes if o.status != "complete"]
        if failed:
            status = "partial" if len(failed) < len(outcomes) else "failed"
            error = f"{len(failed)} of {len(outcomes)} levels failed: " + "; ".join(
                f"{o.level.describe()}: {', '.join(o.summary.flags) or o.status}" for o in failed)
        manifest["finished"] = now_iso()
        store.update_manifest(run_id, manifest)
        store.finish_run(run_id, status, manifest["finished"], error)
        return RunResult(run_id, manifest, outcomes, status, error)


async def guard_snapshot(mode: str, config: Any, target_pids: set[int], where: str) -> dict[str, Any] | None:
    """The guard's snapshot, or None with mode "off". Strict mode refuses a dirty bench."""
    if mode == "off":
        return None
    from . import guard

    env = guard.GuardEnv(config=config or guard.load_config(), target_pids=target_pids)
    snap = await asyncio.to_thread(guard.snapshot, env)
    if mode == "strict" and not snap["clean"]:
        raise guard.GuardFailed(guard.refuse_message(snap, where))
    return snap


def _facts(cfg: SweepConfig, run_id: str, level: Level, records: list[RequestRecord], summary: LevelSummary,
           watch: ClientWatch, info: ServerInfo, snap: dict[str, Any] | None) -> findings.LevelFacts:
    """What the finding rules look at for a finished level: the client watch's reasons, the adapter's slot
    limits, the guard's snapshot and the most requests in flight."""
    reasons = watch.verdict(level, summary.send_delay_ms.p90 if summary.send_delay_ms else None,
                            summary.send_queue_ms.p90 if summary.send_queue_ms else None)
    slots = info.adapter.slot_warnings(info.slots, info.slot_ctx, level.concurrency, cfg.input_len + cfg.output_len)
    measured = [r for r in records if r.phase == "measured"]
    return findings.LevelFacts(
        records, summary, level.concurrency, cfg.requests, run_id=run_id, guard=snap, client_reasons=reasons,
        slot_reasons=slots, max_error_rate=cfg.max_error_rate, peak_in_flight=peak_in_flight(measured))


async def _run_level(
    cfg: SweepConfig,
    store: Store,
    run_id: str,
    idx: int,
    repetition: int,
    level: Level,
    client: StreamClient,
    prompts: _Prompts,
    rep: Reporter,
    info: ServerInfo,
    seed: int,
) -> tuple[LevelSummary, str]:
    n_warm = cfg.warmup if cfg.warmup is not None else (level.concurrency or min(4, level.max_concurrency or 4))
    n_req = cfg.requests
    snap = await guard_snapshot(cfg.guard, cfg.guard_config, cfg.target_pids, f"before level {level.describe()}")
    await prompts.prepare(n_warm + (n_req or max(8, 2 * (level.concurrency or 4))))
    started = now_iso()
    records: list[RequestRecord] = []
    status = "complete"
    watch = ClientWatch()
    window = (0, 0)
    n_levels = len(cfg.levels())
    desc = (f"level {idx + 1}/{n_levels} " if n_levels > 1 else "") + level.describe() + \
        (f" (rep {repetition + 1}/{cfg.repetitions})" if cfg.repetitions > 1 else "")
    try:
        if n_warm:
            rep.note(f"{desc}: {n_warm} warm-up requests (not counted)")
            await run_phase(client, prompts, level, "warmup", requests=n_warm, duration_s=None, seed=seed, sink=records)
        rep.level_start(desc, n_req, cfg.duration_s)
        watch.start()
        tele = None
        if cfg.metrics_interval_s:
            tele = LevelTelemetry(client.session, root_url(cfg.url), cfg.metrics_interval_s,
                                  {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {})
            tele.start()
        try:
            res = await run_phase(
                client, prompts, level, "measured", requests=n_req, duration_s=cfg.duration_s,
                watch=watch, on_done=rep.request_done, seed=seed + idx * 7919 + repetition, sink=records,
            )
        finally:
            await watch.stop()
            if tele is not None:
                await tele.stop()
        window = (res.start_ns, res.end_ns)
    except asyncio.CancelledError:
        status = "interrupted"
        measured = [r for r in records if r.phase == "measured"]
        summary = summarize(records, concurrency=level.concurrency, rate=level.rate,
                            window_start_ns=min((r.sent_ns for r in measured), default=0))
        findings.assess(findings.LevelFacts(records, summary, level.concurrency, n_req, interrupted=True))
        store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                         finished=now_iso(), window=window)
        raise
    summary = summarize(records, concurrency=level.concurrency, rate=level.rate, window_start_ns=window[0],
                        window_end_ns=window[1], slo=cfg.slo)
    summary.cost_per_mtok = level_cost(cfg.price_per_hour, cfg.currency, summary.output_throughput_tps)
    summary.client = watch.report()
    summary.guard = snap
    if tele is not None:
        summary.telemetry = tele.summary(summary.total_output_tokens, summary.duration_s)
        if tele.series():
            store.save_telemetry(run_id, idx, repetition, tele.series())
    findings.assess(_facts(cfg, run_id, level, records, summary, watch, info, snap))
    if summary.finding(Code.ERROR_RATE) or summary.finding(Code.PROMPT_TRUNCATED):
        status = "failed"
    store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                     finished=now_iso(), window=window)
    rep.level_end(summary)
    return summary, status
