"""The serving sweep: discover the endpoint, build the workload, run every level (warm-up, then the
measured window), summarize, store each finished level at once, and stop cleanly on faults or Ctrl-C."""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import secrets
import shlex
import statistics
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from . import __version__, machine
from .client import Api, PreparedRequest, StreamClient
from .errors import EndpointError, EngineError, LevelFailed, TokenbenchError, UsageError
from .loadgen import ClientWatch, Level, run_phase
from .metrics import SLO, LevelSummary, coefficient_of_variation, cost_per_mtok, summarize
from .records import RequestRecord
from .servers import (ONE_TOKEN_PER_CHUNK, ServerInfo, ServerTokenizer, discover, output_length_fields, root_url,
                      slot_warnings)
from .store import Store
from .telemetry import LevelTelemetry
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
    metrics_interval_s: float | None = 1.0  # sample the server's /metrics this often (None: never)

    def levels(self) -> list[Level]:
        if self.rates:
            return [Level(rate=r, arrival=self.arrival, max_concurrency=self.max_concurrency) for r in self.rates]  # type: ignore[arg-type]
        return [Level(concurrency=c) for c in self.concurrency]


@dataclass(slots=True)
class LevelOutcome:
    idx: int
    level: Level
    summary: LevelSummary
    status: str  # complete | interrupted | failed
    repetitions: list[LevelSummary] = field(default_factory=list)


@dataclass(slots=True)
class RunResult:
    run_id: str
    manifest: dict[str, Any]
    outcomes: list[LevelOutcome]
    status: str
    error: str | None = None
    kind: str = "sweep"

    def to_json(self) -> dict[str, Any]:
        """The JSON result contract of DESIGN.md."""
        levels = []
        for o in self.outcomes:
            d = o.summary.to_dict()
            d["status"] = o.status
            if len(o.repetitions) > 1:
                d["repetitions"] = repetition_stats(o.repetitions)
            levels.append(d)
        return {
            "tool": "tokenbench",
            "version": __version__,
            "run_id": self.run_id,
            "kind": self.kind,
            "status": self.status,
            "error": self.error,
            "manifest": self.manifest,
            "levels": levels,
        }


class Reporter(Protocol):
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None: ...
    def request_done(self, record: RequestRecord) -> None: ...
    def level_end(self, summary: LevelSummary) -> None: ...
    def note(self, text: str) -> None: ...


class QuietReporter:
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None:
        pass

    def request_done(self, record: RequestRecord) -> None:
        pass

    def level_end(self, summary: LevelSummary) -> None:
        pass

    def note(self, text: str) -> None:
        pass


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


#: Options whose value is a secret, in tokenbench's own command line and in the server commands it records.
SECRET_OPTIONS = ("--api-key", "--api_key", "--hf-token", "--token")


def redact_command(argv: list[str]) -> str:
    """A command line as it may be stored: the values of secret options replaced by ***."""
    out: list[str] = []
    hide = False
    for a in argv:
        if hide:
            out.append("***")
            hide = False
        elif a in SECRET_OPTIONS:
            out.append(a)
            hide = True
        elif a.startswith(tuple(f"{o}=" for o in SECRET_OPTIONS)):
            out.append(a.split("=", 1)[0] + "=***")
        elif " " in a and any(o in a for o in SECRET_OPTIONS):  # a quoted command line, e.g. coldstart --cmd
            out.append(shlex.quote(redact_command(shlex.split(a))))
        else:
            out.append(a)
    return " ".join(out)


async def _preflight(client: StreamClient, builder: PromptBuilder) -> RequestRecord:
    text, n = await builder.exact("preflight: ", 8, random.Random())
    rec = RequestRecord(index=-1, phase="warmup")
    await client.send(PreparedRequest(text, 2, n), rec)
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
    seed = cfg.seed if cfg.seed is not None else random.randrange(2**31)
    run_id = new_run_id()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        info = await discover(session, cfg.url, cfg.api_key)
        model = cfg.model or (info.models[0] if info.models else None)
        if model is None:
            raise EndpointError(f"{cfg.url} lists no models: pass --model")
        # Transformers serve lists its Hugging Face cache, not the model pinned on its command line: the
        # preflight request tells whether the name is right.
        if info.models and model not in info.models and info.engine != "transformers":
            raise EndpointError(
                f"model '{model}' is not served at {cfg.url}; served: {', '.join(info.models[:10])}: pass one with --model"
            )
        tokenizer, counter = await pick_tokenizer(cfg.tokenizer, cfg.api_key, session, info, model)
        eos = getattr(tokenizer, "eos_token_id", None)
        extras: dict[str, Any] = {}
        if cfg.fixed_output:
            extras.update(output_length_fields(info.engine, cfg.output_len, eos, cfg.api))
        extras.update(cfg.extra_body)
        client = StreamClient(
            session=session, base_url=cfg.url, model=model, api=cfg.api, api_key=cfg.api_key,
            temperature=cfg.temperature, body_extras={k: v for k, v in extras.items() if k != "min_tokens"},
            timeout_s=cfg.timeout_s, stall_timeout_s=cfg.stall_timeout_s, counter=counter,
            one_token_per_chunk=info.engine in ONE_TOKEN_PER_CHUNK,
        )
        builder = PromptBuilder(tokenizer, seed, run_id.rsplit("-", 1)[-1] + secrets.token_hex(2))
        await _preflight(client, builder)
        client.body_extras = extras  # min_tokens only for the real requests (the preflight asks for 2)
        workload = Workload(cfg.input_len, cfg.output_len, cfg.shape, cfg.api, cfg.prefix_len, seed)
        manifest: dict[str, Any] = {
            "endpoint": cfg.url,
            "model": model,
            "engine": info.engine,
            "engine_version": info.engine_version or (cfg.embedded or {}).get("engine_version"),
            "server": info.to_dict(),
            "server_flags": (cfg.embedded or {}).get("command"),
            "embedded": cfg.embedded,
            "label": cfg.label,
            "command": cfg.command,
            "started": now_iso(),
            "finished": None,
            "workload": workload.to_dict(),
            "tokenizer": tokenizer.description,
            "request_fields": extras,
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
                outcomes.append(LevelOutcome(idx, level, _combine(reps), level_status, reps))
                last = reps[-1]
                if "prompt_truncated" in last.flags:
                    raise LevelFailed(
                        f"level {level.describe()} failed: {next(w for w in last.warnings if 'truncates' in w)}"
                    )
                if set(last.errors) & CONNECTION_ERRORS or (last.failed and not last.completed):
                    if alive is not None and not alive():
                        raise EngineError(f"the embedded engine died during level {level.describe()}: see its log")
                    try:
                        await discover(session, cfg.url, cfg.api_key, timeout=5)
                    except EndpointError as e:
                        raise EndpointError(
                            f"the server stopped answering during level {level.describe()}: {e}"
                        ) from e
        except asyncio.CancelledError:
            status, error = "interrupted", "interrupted by the user"
            store.finish_run(run_id, status, now_iso(), error)
            raise
        except TokenbenchError as e:
            status = "partial" if any(o.status == "complete" for o in outcomes) else "failed"
            error = str(e)
            manifest["finished"] = now_iso()
            store.update_manifest(run_id, manifest)
            store.finish_run(run_id, status, manifest["finished"], error)
            e.run_id = run_id  # type: ignore[attr-defined]
            raise
        manifest["finished"] = now_iso()
        store.update_manifest(run_id, manifest)
        store.finish_run(run_id, status, manifest["finished"], error)
        return RunResult(run_id, manifest, outcomes, status, error)


def _combine(reps: list[LevelSummary]) -> LevelSummary:
    """Repetitions of a level: the first summary with throughput and medians replaced by their medians."""
    if len(reps) == 1:
        return reps[0]
    base = LevelSummary.from_dict(reps[0].to_dict())
    base.output_throughput_tps = statistics.median(r.output_throughput_tps for r in reps)
    if base.concurrency:
        base.per_agent_tps = base.output_throughput_tps / base.concurrency
    base.completed = sum(r.completed for r in reps)
    base.failed = sum(r.failed for r in reps)
    cv = coefficient_of_variation([r.output_throughput_tps for r in reps])
    if cv is not None and cv >= 0.10:
        base.flags = sorted(set(base.flags) | {"unstable"})
        base.warnings.append(f"throughput varies {cv:.0%} between repetitions: the bench is noisy")
    for attr in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        dist = getattr(base, attr)
        p50s = [getattr(r, attr).p50 for r in reps if getattr(r, attr).p50 is not None]
        if p50s:
            dist.p50 = statistics.median(p50s)
    base.cost_per_mtok = None
    return base


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
    desc = level.describe() + (f" (rep {repetition + 1}/{cfg.repetitions})" if cfg.repetitions > 1 else "")
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
        summary.flags.append("interrupted")
        store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                         finished=now_iso(), window=window)
        raise
    summary = summarize(
        records, concurrency=level.concurrency, rate=level.rate, window_start_ns=window[0],
        window_end_ns=window[1], slo=cfg.slo, price_per_hour=cfg.price_per_hour,
    )
    summary.client = watch.report()
    summary.guard = snap
    if tele is not None:
        summary.telemetry = tele.summary(summary.total_output_tokens, summary.duration_s)
        if tele.series():
            store.save_telemetry(run_id, idx, repetition, tele.series())
    if snap is not None and not snap["clean"]:
        summary.flags.append("dirty_bench")
        bad = ", ".join(c["name"] for c in snap["checks"] if c["status"] == "fail")
        summary.warnings.append(f"the guard found the bench dirty before this level ({bad}): see its snapshot")
    reasons = watch.verdict(level, summary.send_delay_ms.p90 if summary.send_delay_ms else None)
    if reasons:
        summary.flags.append("client_bound")
        summary.warnings.append(
            "the client was a limit, so timings may read late (a server on the same cores competes with it): "
            + "; ".join(reasons)
        )
    total_tokens = cfg.input_len + cfg.output_len
    for w in slot_warnings(info, level.concurrency, total_tokens):
        summary.flags.append("slots_exceeded")
        summary.warnings.append(w)
    if summary.cost_per_mtok is None and cfg.price_per_hour is not None:
        summary.cost_per_mtok = cost_per_mtok(cfg.price_per_hour, summary.output_throughput_tps)
    if "prompt_truncated" in summary.flags:
        status = "failed"
    store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                     finished=now_iso(), window=window)
    rep.level_end(summary)
    return summary, status


def load_result(store: Store, ref: str) -> RunResult:
    """A stored run, as the sweep returned it (finished levels only if it was cut short)."""
    row = store.resolve(ref)
    by_idx: dict[int, list[tuple[str, LevelSummary]]] = {}
    for idx, _rep, status, summary in store.levels(row.id):
        by_idx.setdefault(idx, []).append((status, summary))
    outcomes = []
    for idx, items in sorted(by_idx.items()):
        reps = [s for _, s in items]
        status = next((st for st, _ in items if st != "complete"), "complete")
        first = reps[0]
        level = Level(concurrency=first.concurrency, rate=first.rate)
        outcomes.append(LevelOutcome(idx, level, _combine(reps), status, reps))
    manifest = dict(row.manifest)
    manifest.setdefault("provenance", row.provenance)
    manifest.setdefault("label", row.label)
    return RunResult(row.id, manifest, outcomes, row.status, row.error, kind=row.kind)
