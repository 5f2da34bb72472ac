"""The serving sweep: discover the endpoint, build the workload, run every level (warm-up, then the
measured window), summarize, store each finished level at once, and stop cleanly on faults or Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import random
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import aiohttp

from . import findings, redact
from .aiohttp_path import trace_config
from .client import Api, PreparedRequest, StreamClient
from .cost import level_cost
from .dataset import Dataset, Item, measure
from .draws import Draw
from .endpoint import Endpoint, RunLog
from .errors import EndpointError, EngineError, LevelFailed, UsageError
from .findings import Code
from .checks import GuardSnapshot
from .guard import refuse_if_dirty, snapshot_before
from .loadgen import ClientWatch, Level, run_phase, still_heap
from .levels import ClientReport, ServingLevel
from .metrics import peak_in_flight, session_stats, summarize
from .slo import SLO
from .workers import (SEND_QUEUE_GOAL_MS, ClientSpec, WorkerPool, auto_workers, send_cost_us, usable_core_ids,
                      usable_cores)
from .records import RequestRecord
from .results import LevelOutcome, Manifest, RunResult, combine_repetitions, new_run_id, now_iso
from .servers import ServerInfo, discover, on_this_machine, root_url, server_cores
from .store import Store
from .telemetry import LevelTelemetry
from .sessions import CacheMode, SessionLevel, SessionPlan, SessionTexts
from .trace import Trace, TracePrompts
from .workload import PromptBuilder, Workload

if TYPE_CHECKING:
    from .capacity import CapacitySearch, LevelStop

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
    #: Load-generating processes (None: ``auto``, workers.auto_workers: enough that a wave's p90 send queue stays
    #: under 1 ms at the send cost measured here, at least one per 64 streams, at most one a core).
    workers: int | None = 1
    #: A Ray cluster to place the workers on (an address, or "auto"); None: this machine only.
    ray: str | None = None
    #: Agent sessions instead of independent requests (sessions.py): each concurrency level runs them with the
    #: prefix cache warm, then (the plan's baseline) busted.
    sessions: SessionPlan | None = None
    #: Lengths that vary (draws.py): each request draws its own. None: every request ``input_len``/``output_len``
    #: tokens (with a draw, the CLI sets those to its largest, what a slot must hold).
    input_draw: Draw | None = None
    output_draw: Draw | None = None
    #: Prompts from a file (dataset.py) instead of built ones; output lengths from it where it gives them, else
    #: ``output_len``/``output_draw``.
    dataset: Dataset | None = None

    def longest_request(self) -> int:
        """The most tokens (prompt and output) one request can need: what an engine's slot must hold. For a
        dataset, a bound from its bytes (a byte-level tokenizer's count is never more); for sessions, the longest
        turn."""
        if self.sessions is not None:
            return self.sessions.longest_context()
        out = int(self.output_draw.maximum()) if self.output_draw is not None else self.output_len
        if self.dataset is not None:
            return self.dataset.longest(out)
        return (int(self.input_draw.maximum()) if self.input_draw is not None else self.input_len) + out

    def workload(self, seed: int) -> Workload:
        """What the run sends, as its manifest records it: a distribution by its expected lengths and itself."""
        ins = self.input_draw or Draw.fixed(self.input_len)
        outs = self.output_draw or Draw.fixed(self.output_len)
        return Workload(None if self.dataset is not None else round(ins.expected()), round(outs.expected()),
                        self.shape, self.api, self.prefix_len, seed, None if self.dataset else self.input_draw,
                        self.output_draw, self.dataset.describe() if self.dataset is not None else None)

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
        if self.sessions is not None:
            modes: list[CacheMode] = ["warm", "busted"] if self.sessions.baseline else ["warm"]
            return [Level(concurrency=c, cache=m) for c in self.concurrency for m in modes]
        if (trace := self.replayed()) is not None:
            return [Level(schedule=trace.schedule(self.trace_speed), max_concurrency=self.max_concurrency)]
        if self.rates:
            return [Level(rate=r, arrival=self.arrival, max_concurrency=self.max_concurrency) for r in self.rates]  # type: ignore[arg-type]
        return [Level(concurrency=c) for c in self.concurrency]


class Reporter(Protocol):
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None: ...
    def request_done(self, record: RequestRecord) -> None: ...
    def level_end(self, summary: ServingLevel) -> None: ...
    def note(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...


class QuietReporter:
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None:
        pass

    def request_done(self, record: RequestRecord) -> None:
        pass

    def level_end(self, summary: ServingLevel) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass


LengthFields = Callable[[int], dict[str, Any]]


class _Prompts:
    """Unique prompts, built ahead of the level so building never delays a send. Request ``i`` has its own lengths
    (``Workload.request_lengths``: the same seed draws the same lengths), or from a dataset the next of its
    ``items`` (in the run's shuffled order) with the output length it gives, else the drawn one. ``fields`` gives
    the request fields that fix one output length, put in each request when lengths vary (None: every request's
    are the client's ``body_extras``)."""

    def __init__(self, builder: PromptBuilder, workload: Workload, extra: dict[str, Any],
                 fields: LengthFields | None = None, items: list[Item] | None = None,
                 warn: Callable[[str], None] | None = None) -> None:
        self.builder = builder
        self.workload = workload
        self.extra = extra
        self.fields = fields
        self.items = items or []
        self.warn = warn
        self.pool: list[tuple[int, PreparedRequest]] = []
        self.counter = 0
        self.longest = 0  # the most tokens (prompt and output) of a request prepared so far

    async def prepare(self, n: int) -> None:
        for _ in range(n - len(self.pool)):
            self.pool.append((self.counter, await self._one(self.counter)))
            self.counter += 1

    async def _one(self, i: int) -> PreparedRequest:
        n_in, n_out = self.workload.request_lengths(i)
        messages = None
        if self.items:
            item = self.items[i % len(self.items)]
            if i == len(self.items) and self.warn is not None:
                self.warn(f"the dataset's {len(self.items):,} items are used up: from request {i + 1:,} on they "
                          "repeat, and a server's prefix cache can serve a repeated prompt")
            count, reply = await measure(item, self.builder.tok)
            n_out = item.output_len or reply or n_out
            text = item.text()
            messages = item.wire_messages() if self.workload.api == "chat" else None
        else:
            text, count = await self.builder.one(i, n_in, self.workload.prefix_len)
        self.longest = max(self.longest, count + n_out)
        extra = self.extra if self.fields is None else self.fields(n_out)
        return PreparedRequest(text, n_out, count, extra, messages)

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
              seed: int, pool: WorkerPool | None, auto: dict[str, Any] | None = None) -> Manifest:
    return ep.manifest(
        cfg.embedded, cfg.label, cfg.command,
        # the one uncounted request before any level: the server counts it in its own metrics
        check_request={"ttft_ms": _ms(probe.ttft_ns), "e2e_ms": _ms(probe.e2e_ns),
                       "output_tokens": probe.output_tokens},
        server_flags=(cfg.embedded or {}).get("command"),
        workload=cfg.sessions.to_dict() | {"seed": seed} if cfg.sessions is not None
        else workload.to_dict() | _trace_manifest(cfg, ep),
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
            "workers": (pool.describe() if pool is not None else {"kind": "in-process", "workers": 1})
            | ({"auto": auto} if auto is not None else {}),
        },
        price_per_hour=cfg.price_per_hour,
        currency=cfg.currency,
        slo=cfg.slo.describe() if cfg.slo else None,
        seed=seed,
    )


def _request_fields(cfg: SweepConfig, ep: Endpoint, varies: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fields of every measured request (fixed output length, by what the server honours; where lengths vary
    each request carries its own, ``_length_fields``, and a trace's requests each theirs, ``_trace_fields``) and
    of the check request before the run (the same kind, a short output); the user's --extra-body on top of both."""
    extras: dict[str, Any] = {}
    check: dict[str, Any] = {}
    if cfg.fixed_output:
        if not varies and cfg.trace is None:
            extras.update(ep.info.adapter.output_length_fields(cfg.output_len, ep.eos_token_id, cfg.api))
        check.update(ep.info.adapter.check_fields(2, ep.eos_token_id, cfg.api))
    if cfg.trace is not None:
        extras.update(ep.info.adapter.warm_context_fields())
    return extras | cfg.extra_body, check | cfg.extra_body


def _length_fields(cfg: SweepConfig, ep: Endpoint) -> LengthFields | None:
    """Where lengths vary: the fields that fix one request's output length, the user's --extra-body on top (the
    client applies a request's own fields after its body_extras). None: the output is not fixed."""
    if not cfg.fixed_output:
        return None
    adapter, eos, api, user = ep.info.adapter, ep.eos_token_id, cfg.api, cfg.extra_body
    return lambda n: adapter.output_length_fields(n, eos, api) | user


def _recorded_fields(extras: dict[str, Any], fields: LengthFields | None) -> dict[str, Any]:
    """The request fields a manifest records: a field whose value follows each request's length says so."""
    if fields is None:
        return extras
    one, two = fields(1), fields(2)
    return extras | {k: v if one.get(k) == v else "per request" for k, v in two.items()}
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


class LevelPlan(Protocol):
    """Which level a sweep runs next, given the levels run so far: a fixed list (``FixedPlan``) or a search
    (``capacity.CapacitySearch``), which may also stop a level early (``stop``)."""

    total: int | None  # levels, where known beforehand ("level 2/5")

    def next_level(self, outcomes: list[LevelOutcome]) -> Level | None: ...

    def stop(self, level: Level, planned: int | None, records: list[RequestRecord]) -> LevelStop | None: ...


class FixedPlan:
    """The levels the options list, in order."""

    def __init__(self, levels: list[Level]) -> None:
        self.levels = levels
        self.total: int | None = len(levels)

    def next_level(self, outcomes: list[LevelOutcome]) -> Level | None:
        return self.levels[len(outcomes)] if len(outcomes) < len(self.levels) else None

    def stop(self, level: Level, planned: int | None, records: list[RequestRecord]) -> LevelStop | None:
        return None


class _Sweep:
    """One sweep's levels in order, each with its repetitions, stopping on what makes the rest meaningless."""

    def __init__(self, cfg: SweepConfig, store: Store, run_id: str, ep: Endpoint, client: StreamClient,
                 prompts: Prompts, rep: Reporter, seed: int, alive: Callable[[], bool] | None,
                 pool: WorkerPool | None = None, plan: LevelPlan | None = None) -> None:
        self.cfg, self.store, self.run_id, self.ep, self.client = cfg, store, run_id, ep, client
        self.prompts, self.rep, self.seed, self.alive, self.pool = prompts, rep, seed, alive, pool
        self.plan: LevelPlan = plan or FixedPlan(cfg.levels())
        self.outcomes: list[LevelOutcome] = []
        self.sessions: _SessionWork | None = None

    async def run(self) -> None:
        idx = 0
        while (level := self.plan.next_level(self.outcomes)) is not None:
            reps: list[ServingLevel] = []
            level_status = "complete"
            for r in range(self.cfg.repetitions):
                summary, level_status = await _run_level(
                    self.cfg, self.store, self.run_id, (idx, r), level, self.client, self.prompts, self.rep,
                    self.ep.info, self.seed, self.pool, self.sessions, self.plan)
                reps.append(summary)
                if level_status != "complete":
                    break
            combined = combine_repetitions(reps, self.cfg.price_per_hour, self.cfg.currency)
            self.outcomes.append(LevelOutcome(idx, level, combined, level_status, reps))
            idx += 1
            await self.stop_if_broken(level, reps[-1])

    async def stop_if_broken(self, level: Level, last: ServingLevel) -> None:
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
    search: CapacitySearch | None = None,
) -> RunResult:
    """Run a sweep and store it. ``alive`` (optional callable) tells whether an embedded server still runs.
    ``search``: run a capacity search's levels (capacity.py) instead of the configured ones."""
    rep = reporter or QuietReporter()
    if cfg.trace is not None and cfg.repetitions > 1:
        raise UsageError("a trace is replayed once per run (a repetition would find its blocks in the cache): "
                         "drop --repetitions")
    levels = cfg.levels() if search is None else [search.spec.level(search.spec.high)]
    ensure_open_files(max([lv.concurrency or lv.max_concurrency or 1 for lv in levels]))
    seed = cfg.seed if cfg.seed is not None else random.randrange(2**31)
    log = RunLog(store, new_run_id(), "sweep", cfg.label)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace_config()]) as session:
        ep = await Endpoint.open(session, cfg.url, cfg.api_key, cfg.model, cfg.tokenizer, rep.warn)
        if cfg.sessions is not None and cfg.sessions.max_context is None and ep.info.slot_ctx:
            # a session ends where the server's slot would overflow (llama.cpp answers a longer prompt with an error)
            cfg.sessions = replace(cfg.sessions, max_context=ep.info.slot_ctx - int(cfg.sessions.output.maximum()))
        workload = cfg.workload(seed)
        extras, check = _request_fields(cfg, ep, workload.varies)
        fields = _length_fields(cfg, ep) if workload.varies else None
        client = ep.client(cfg.api, temperature=cfg.temperature, timeout_s=cfg.timeout_s,
                           stall_timeout_s=cfg.stall_timeout_s)
        builder = PromptBuilder(ep.tokenizer, seed, log.run_id.rsplit("-", 1)[-1] + secrets.token_hex(2))
        # The check request names the model too: with a server that cannot list its models, it proves the name.
        probe = await _preflight(client, builder, check)
        # a session's turns carry their own fields (each its output length, its agent's slot): sessions.SessionLevel
        client.body_extras = extras if cfg.sessions is None else {}
        pool, auto = await _start_workers(cfg, client, ep.counter.path if ep.counter is not None else None, rep)
        manifest = _manifest(cfg, ep, workload, probe, _recorded_fields(extras, fields), seed, pool, auto)
        manifest.guard = cfg.guard
        if search is not None:
            _search_manifest(manifest, search)
        # strict: refuse before anything is stored
        before = await snapshot_before(cfg.guard, cfg.guard_config, cfg.target_pids, "before the run")
        manifest.guard_before_run = before.to_dict() if before is not None else None
        log.create(manifest)
        sweep = _Sweep(cfg, store, log.run_id, ep, client, _prompts(cfg, ep, builder, workload, fields, rep), rep,
                       seed, alive, pool, search)
        if cfg.sessions is not None:
            sweep.sessions = _SessionWork(cfg, ep, SessionTexts(builder, cfg.sessions, seed, builder.run_tag))
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
            await client.close()
        status, error = sweep.verdict() if search is None else _search_verdict(search, manifest, sweep)
        return log.close(status, error, sweep.outcomes)


def _search_manifest(manifest: Manifest, search: CapacitySearch) -> None:
    """A capacity search's manifest: how it searched and for what (its levels are found, not listed)."""
    manifest.capacity = {**search.spec.to_dict(), "slo": search.slo.describe(), "objectives": search.slo.headline()}
    manifest.load = {**(manifest.load or {}), "levels": []}


def _search_verdict(search: CapacitySearch, manifest: Manifest, sweep: _Sweep) -> tuple[str, str | None]:
    """A search's levels answer it whether they met the SLO or failed it (too many errors is a fail): the run is
    complete once the search ended, and says how in its manifest."""
    if manifest.capacity is not None:
        manifest.capacity["ended"] = search.ended
    return "complete", None


def _prompts(cfg: SweepConfig, ep: Endpoint, builder: PromptBuilder, workload: Workload,
             fields: LengthFields | None, rep: Reporter) -> Prompts:
    """The run's prompts: a trace's (its warm-ups first), a dataset's items in the order of the run's seed (what it
    read and skipped said first), or built ones of the workload's lengths."""
    trace = cfg.replayed()
    if trace is not None:
        return TracePrompts(builder, trace, _trace_fields(cfg, ep), _warmups(cfg, cfg.levels()[0]))
    if cfg.dataset is None:
        return _Prompts(builder, workload, {}, fields)
    rep.note(f"{cfg.dataset.path}: {cfg.dataset.summary()}")
    for line in cfg.dataset.notes:
        rep.warn(f"{cfg.dataset.path}: {line}")
    return _Prompts(builder, workload, {}, fields, cfg.dataset.shuffled(workload.seed), rep.warn)


async def _start_workers(cfg: SweepConfig, client: StreamClient, counter_path: str | None,
                         rep: Reporter) -> tuple[WorkerPool | None, dict[str, Any] | None]:
    """The load-generating workers (workers/), or None to run every level in this process; and, for ``--workers
    auto`` on this machine, how their number was chosen (the manifest keeps it)."""
    if cfg.trace is not None:  # a trace is replayed by this process: its one schedule, its prompts in order
        if cfg.ray or (cfg.workers or 1) > 1:
            raise UsageError("a trace is replayed by one process: drop --workers and --ray with --trace")
        return None, None
    spec = ClientSpec.of(client, counter_path)
    n, auto = cfg.workers, None
    if n is None and not cfg.ray:
        n, auto = await _auto_workers(cfg, spec)
        rep.note(f"--workers auto: {n} ({auto['why']})")
    if cfg.ray:
        from .raypool import ray_pool

        pool = await ray_pool(cfg.ray, spec, cfg.workers)
    elif n is not None and n > 1:
        pool = await WorkerPool.local(spec, n)
    else:
        return None, auto
    rep.note(f"load from {pool.size} workers ({pool.kind})")
    return pool, auto


async def _auto_workers(cfg: SweepConfig, spec: ClientSpec) -> tuple[int, dict[str, Any]]:
    """``--workers auto`` on this machine: the cost of one send measured (workers.send_cost_us, a wave to a sink
    on the loopback, prompts about as long as the run's), then workers.auto_workers."""
    levels, cores = cfg.levels(), usable_cores()
    here = on_this_machine(cfg.url)
    theirs = server_cores(cfg.url) if here else None
    mine = usable_core_ids()
    free = len(mine - theirs) if theirs and mine is not None else 0
    shared = here and not free
    if shared:  # the server runs on these cores too (an embedded engine, a loopback URL): the client takes half
        cores = max(1, cores // 2)
    elif free:  # the server's processes are pinned to other cores (taskset, a cpuset): the client takes the rest
        cores = free
    of = _cores(cores) + (" (half this machine's: the server shares it)" if shared else
                             f" (the server's processes keep to {_cores(len(theirs or ()))} of their own)" if free else "")
    streams = max((lv.concurrency or lv.max_concurrency or 1) for lv in levels) if levels else 1
    send_us = await send_cost_us(spec, prompt_chars=4 * cfg.input_len) if streams > 1 and cores > 1 else None
    n = auto_workers(levels, cores, send_us)
    why = (f"{streams} streams at {send_us:.0f} µs a send: the fewest workers whose wave of re-sends keeps its "
           f"p90 send queue under {SEND_QUEUE_GOAL_MS:g} ms, at least one per 64 streams, of {of}"
           if send_us is not None else f"{streams} streams on {of}: one per 64 streams")
    return n, {"workers": n, "streams": streams, "cores": cores, "server_here": here, "shares_cores": shared,
               "send_us": round(send_us, 1) if send_us is not None else None,
               "send_queue_goal_ms": SEND_QUEUE_GOAL_MS, "why": why}


def _cores(n: int) -> str:
    return f"{n} core{'s' if n != 1 else ''}"


class _SessionWork:
    """What a session level needs beyond the sweep's: the texts, and each turn's request fields (its output length
    fixed as the server allows, the cache kept warm for its agent, the user's --extra-body on top)."""

    def __init__(self, cfg: SweepConfig, ep: Endpoint, texts: SessionTexts) -> None:
        self.cfg, self.ep, self.texts = cfg, ep, texts
        self.last: SessionLevel | None = None

    def fields(self, agent: int, out_len: int) -> dict[str, Any]:
        adapter = self.ep.info.adapter
        fixed = adapter.output_length_fields(out_len, self.ep.eos_token_id, "chat") if self.cfg.fixed_output else {}
        return fixed | adapter.session_fields(agent, self.ep.info.slots) | self.cfg.extra_body

    def level(self, client: StreamClient, repetition: int, level: Level, records: list[RequestRecord],
              on_done: Any) -> SessionLevel:
        """A level's agents; warm and busted at one agent count and repetition run the same sessions."""
        assert self.cfg.sessions is not None and level.cache is not None
        counter = self.ep.counter.count if self.ep.counter is not None else None
        self.last = SessionLevel(client, self.texts, self.cfg.sessions, f"{level.concurrency}/{repetition}",
                                 level.concurrency or 1, level.cache, self.fields, records, on_done, counter)
        return self.last


def _facts(cfg: SweepConfig, run_id: str, level: Level, records: list[RequestRecord], summary: ServingLevel,
           reasons: list[str], info: ServerInfo, snap: GuardSnapshot | None, node_snaps: list[GuardSnapshot],
           lost: list[str], longest: int, stopped: str | None = None) -> findings.LevelFacts:
    """What the finding rules look at for a finished level: the client's reasons (its watch, or each worker's),
    the adapter's slot limits (against ``longest``, the most tokens a request of the run needed), the guard's
    snapshots (this machine's and each load-generating node's), workers lost, and the most requests in flight."""
    slots = info.adapter.slot_warnings(info.slots, info.slot_ctx, level.concurrency, longest or cfg.longest_request())
    measured = [r for r in records if r.phase == "measured"]
    return findings.LevelFacts(
        records, summary, level.concurrency, cfg.requests, run_id=run_id, guard=snap, client_reasons=reasons,
        slot_reasons=slots, max_error_rate=cfg.max_error_rate, peak_in_flight=peak_in_flight(measured),
        node_guards=node_snaps, lost_workers=lost, stopped=stopped)


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
        self.stop: LevelStop | None = None  # a search's watch on the level: stop sending once its verdict is known

    @property
    def cut(self) -> bool:
        """The level lost part of its load (a worker) or was cut by the search's time budget: it is partial."""
        return bool(self.lost) or (self.stop is not None and self.stop.cut)

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
        stop = self.stop
        try:
            res = await run_phase(self.stream, self.prompts, level, "measured", requests=n, duration_s=duration_s,
                                  watch=watch, on_done=stop.wrap(on_done) if stop else on_done, seed=seed,
                                  sink=records, halt=stop.halted if stop else None)
            self.window = (res.start_ns, res.end_ns)
        finally:
            await watch.stop()
            self.client_report = watch.report()
        self.reasons = watch.judge(level, records)

    async def sessions(self, work: SessionLevel, level: Level, records: list[RequestRecord]) -> None:
        """A session level, in this process (each turn waits for the answer before it, so no worker pool). Agents
        think between turns: fewer turns in flight than agents is the workload, not a client falling behind."""
        watch = ClientWatch(sampling_inflight=False)
        watch.start()
        try:
            with still_heap():
                self.window = await work.run()
        finally:
            await watch.stop()
            self.client_report = watch.report()
        self.reasons = watch.judge(level, records)


def refuse_dirty_nodes(mode: str, node_snaps: list[GuardSnapshot], where: str) -> None:
    """Strict mode refuses a dirty load-generating node as it refuses a dirty driver (``guard.refuse_if_dirty``);
    warn mode records it and the level's findings say so."""
    for snap in node_snaps:
        refuse_if_dirty(mode, snap, f"on load-generating node {snap.node} {where}")


async def _run_level(
    cfg: SweepConfig,
    store: Store,
    run_id: str,
    at: tuple[int, int],
    level: Level,
    client: StreamClient,
    prompts: Prompts,
    rep: Reporter,
    info: ServerInfo,
    seed: int,
    pool: WorkerPool | None = None,
    sessions: _SessionWork | None = None,
    plan: LevelPlan | None = None,
) -> tuple[ServingLevel, str]:
    """One repetition of a level (``at``: its index and repetition): warm-up, the measured window, its summary and
    findings, stored at once."""
    idx, repetition = at
    n_warm = _warmups(cfg, level)
    n_req = cfg.requests if level.schedule is None else len(level.schedule)  # a trace: the part replayed
    if sessions is not None:
        # one request of a first turn's size per agent, on prompts of their own (no session's text, so no cache is
        # warmed for the sessions): an engine's first batch of that shape pays its one-time costs here (vLLM compiled
        # again for 2 x 2,079 tokens and a busted turn read 43 s, a "175x gain" of the cache)
        n_warm, n_req = (cfg.warmup if cfg.warmup is not None else level.concurrency or 1), None
    snap = await snapshot_before(cfg.guard, cfg.guard_config, cfg.target_pids, f"before level {level.describe()}")
    await prompts.prepare(n_warm + (n_req or max(8, 2 * (level.concurrency or 4))) if sessions is None else n_warm)
    started = now_iso()
    records: list[RequestRecord] = []
    status = "complete"
    desc = _describe(cfg, plan, level, at)
    load = _Load(client, prompts, pool)
    load.stop = plan.stop(level, n_req, records) if plan is not None and sessions is None else None
    node_snaps = await pool.guards(cfg.guard, cfg.guard_config) if pool is not None else []
    refuse_dirty_nodes(cfg.guard, node_snaps, f"before level {level.describe()}")
    try:
        if n_warm:
            rep.note(f"{desc}: {n_warm} warm-up requests (not counted)")
            await load.warmup(level, n_warm, seed, records)
        rep.level_start(desc, n_req, cfg.duration_s)
        tele = await _measure(cfg, client, load, level, (idx, repetition, seed, n_req), records, rep, sessions)
    except asyncio.CancelledError:
        status = "interrupted"
        measured = [r for r in records if r.phase == "measured"]
        summary = summarize(records, concurrency=level.concurrency, rate=level.offered_rate,
                            window_start_ns=min((r.sent_ns for r in measured), default=0))
        _attach_session(summary, records, level, sessions)
        findings.assess(findings.LevelFacts(records, summary, level.concurrency, n_req, interrupted=True))
        store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                         finished=now_iso(), window=load.window)
        raise
    window = load.window
    summary = summarize(records, concurrency=level.concurrency, rate=level.offered_rate, window_start_ns=window[0],
                        window_end_ns=window[1], slo=cfg.slo)
    summary.cost_per_mtok = level_cost(cfg.price_per_hour, cfg.currency, summary.output_throughput_tps)
    summary.client = ClientReport.written(**load.client_report)
    summary.guard = snap
    if tele is not None:
        summary.telemetry = tele.summary(summary.total_output_tokens, summary.duration_s)
        if tele.series():
            store.save_telemetry(run_id, idx, repetition, tele.series())
    _attach_session(summary, records, level, sessions)
    if node_snaps:
        summary.client.put(node_guards=[n.to_dict() for n in node_snaps])
    # the longest request built (a trace's requests: the longest the trace has, cfg.longest_request)
    longest = prompts.longest if isinstance(prompts, _Prompts) else 0
    findings.assess(_facts(cfg, run_id, level, records, summary, load.reasons, info, snap, node_snaps, load.lost,
                           longest, load.stop.reason if load.stop else None))
    status = _end_status(summary, load)
    store.save_level(run_id, idx, repetition, summary, records, status=status, started=started,
                     finished=now_iso(), window=window)
    rep.level_end(summary)
    return summary, status


def _end_status(summary: ServingLevel, load: _Load) -> str:
    """A measured level's status: failed (too many errors, a prompt cut), partial (cut by a search's budget) or
    complete; a search's early stop adds its verdict's reason first."""
    if load.stop is not None:
        load.stop.apply(summary)
    if summary.finding(Code.ERROR_RATE) or summary.finding(Code.PROMPT_TRUNCATED):
        return "failed"
    return "partial" if load.cut else "complete"


def _describe(cfg: SweepConfig, plan: LevelPlan | None, level: Level, at: tuple[int, int]) -> str:
    """"level 2/5 concurrency 4 (rep 1/3)": a search's levels are numbered without a total."""
    idx, repetition = at
    n_levels = plan.total if plan is not None else len(cfg.levels())
    where = f"level {idx + 1} " if n_levels is None else f"level {idx + 1}/{n_levels} " if n_levels > 1 else ""
    return where + level.describe() + (f" (rep {repetition + 1}/{cfg.repetitions})" if cfg.repetitions > 1 else "")


async def _measure(cfg: SweepConfig, client: StreamClient, load: _Load, level: Level,
                   at: tuple[int, int, int, int | None], records: list[RequestRecord], rep: Reporter,
                   sessions: _SessionWork | None) -> LevelTelemetry | None:
    """The measured phase of a level (its ``requests``, or its agents' sessions), with the server's /metrics sampled
    meanwhile; returns the telemetry, stopped. ``at``: the level's index, repetition, seed and requests."""
    idx, repetition, seed, requests = at
    tele = None
    if cfg.metrics_interval_s:
        tele = LevelTelemetry(client.session, root_url(cfg.url), cfg.metrics_interval_s,
                              {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {})
        tele.start()
    try:
        if sessions is not None:
            await load.sessions(sessions.level(client, repetition, level, records, rep.request_done), level, records)
        else:
            await load.measured(level, requests, cfg.duration_s, seed + idx * 7919 + repetition, records,
                                rep.request_done)
    finally:
        if tele is not None:
            await tele.stop()
    return tele


def _attach_session(summary: ServingLevel, records: list[RequestRecord], level: Level,
                    sessions: _SessionWork | None) -> None:
    """A session level's view (``summary.session``), with what the runner alone knows (compactions, caps) and the
    server's own prefix-cache hit share over the level (/metrics, once the telemetry is in), beside the responses'
    cached share."""
    if sessions is None or sessions.last is None or level.cache is None:
        return
    stats = session_stats(records, level.cache)
    stats.compactions, stats.capped = sessions.last.compactions, sessions.last.capped
    stats.server_hit_share = summary.telemetry.prefix_cache_hit_rate if summary.telemetry is not None else None
    summary.session = stats
