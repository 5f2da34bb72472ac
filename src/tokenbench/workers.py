"""Load generation on every core (``--workers N``) and on many machines (``--ray ADDRESS``).

One client process on one event loop tops out near 250k chunks/s and, when a whole wave of streams is
re-sent at once, queues the later sends behind the earlier ones (issue 13). Here a level is split over
workers, each a :class:`LoadWorker` with its own event loop, session and client, running the same
``loadgen.run_phase`` as a single-process sweep. The driver (the sweep) hands each worker its share and its
prompts, drains finished records every :data:`DRAIN_PERIOD_S`, and merges them into one level.

Splitting a level, exactly:
- closed loop: concurrency C over N workers is C//N each, the first C%N one more (a worker with none sits out);
  a request count is split in proportion to those shares by largest remainder;
- open loop: each worker sends at rate/N. Poisson arrivals of rate/N from N independent seeds add up to a Poisson
  process of the whole rate; constant arrivals are interleaved by starting worker k k/rate seconds late.

Clocks. Every stamp is ``time.perf_counter_ns()``: CLOCK_MONOTONIC on Linux, one clock for every process of a
machine, so records from local workers merge with no correction. A worker on another machine has its own
monotonic clock: the driver reads the worker's wall clock between two readings of its own (an NTP-style
exchange), takes the skew as the difference from the midpoint, and maps that worker's stamps onto its own clock
through the two wall clocks. Latencies of one request (TTFT, TPOT, ITL) never cross machines and are exact; only
the level's window, and so its throughput, carries the error: at most half the exchange's round trip, reported
per worker as ``clock_uncertainty_ms``. Workers on the driver's machine (same boot id) need no mapping.

A worker that dies (a killed process, a lost Ray node) ends the level as partial: the records it had finished
and handed over are kept, what it had in flight is lost and counted.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import aiohttp

from .checks import GuardSnapshot
from .client import Api, PreparedRequest, StreamClient, trace_config
from .errors import UsageError
from .loadgen import ClientWatch, Level, freeze_heap, run_phase
from .records import Phase, RequestRecord

NS_PER_S = 1_000_000_000
#: How often the driver collects finished records (progress, and what survives a worker lost mid-level).
DRAIN_PERIOD_S = 0.1
#: Streams one worker is given before ``--workers auto`` adds another: at 64 streams of 100 tok/s one
#: process spends about 16% of a core on reads (2.5 µs a chunk, issue 13), and its send bursts stay short.
STREAMS_PER_WORKER = 64
#: Workers start this long after the driver asks, so all have their share ready (local; Ray adds its latency).
START_LEAD_S = 0.05
_STAMPS = ("scheduled_ns", "sent_ns", "written_ns", "first_byte_ns", "first_token_ns", "first_answer_ns", "end_ns")


class WorkerLost(Exception):
    """A worker process or actor stopped answering: its finished records are kept, the level is partial."""


@dataclass(slots=True, frozen=True)
class ClientSpec:
    """What a worker needs to build the same client as the driver's (a session is not sent across)."""

    base_url: str
    model: str
    api: Api
    api_key: str | None
    temperature: float | None
    body_extras: dict[str, Any]
    timeout_s: float
    stall_timeout_s: float
    one_token_per_chunk: bool
    fresh_connection: bool
    counter_path: str | None = None  # a local tokenizer to count tokens with, where the server gives no usage
    stream_options: tuple[tuple[str, bool], ...] = (("include_usage", True),)
    lean: bool = True  # the lean send path (client.StreamClient.lean)

    @classmethod
    def of(cls, client: StreamClient, counter_path: str | None) -> ClientSpec:
        return cls(client.base_url, client.model, client.api, client.api_key, client.temperature,
                   dict(client.body_extras), client.timeout_s, client.stall_timeout_s, client.one_token_per_chunk,
                   client.fresh_connection, counter_path, tuple(client.stream_options.items()), client.lean)

    def build(self, session: aiohttp.ClientSession) -> StreamClient:
        counter = None
        if self.counter_path:
            from .workload import LocalTokenizer

            counter = LocalTokenizer(self.counter_path)
        return StreamClient(session=session, base_url=self.base_url, model=self.model, api=self.api,
                            api_key=self.api_key, temperature=self.temperature, body_extras=dict(self.body_extras),
                            timeout_s=self.timeout_s, stall_timeout_s=self.stall_timeout_s, counter=counter,
                            one_token_per_chunk=self.one_token_per_chunk, fresh_connection=self.fresh_connection,
                            stream_options=dict(self.stream_options), lean=self.lean)


@dataclass(slots=True)
class PhaseTask:
    """One worker's share of one phase."""

    level: Level
    phase: Phase
    requests: int | None
    duration_s: float | None
    seed: int
    start_at_wall_ns: int
    prompts: list[tuple[int, PreparedRequest]]
    offset_s: float = 0.0
    watch: bool = False


@dataclass(slots=True)
class Drained:
    records: list[RequestRecord]
    prompts_left: int
    done: bool


@dataclass(slots=True)
class WorkerReport:
    records: list[RequestRecord]  # the phase's records not drained before
    start_ns: int
    end_ns: int
    client: dict[str, Any]
    reasons: list[str]
    error: str | None = None


@dataclass(slots=True, frozen=True)
class ClockSample:
    mono_ns: int
    wall_ns: int
    host: str
    boot_id: str
    pid: int
    node: str  # a Ray node id, or for local processes the boot id: where the guard is run once


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def clock_sample(node: str | None = None) -> ClockSample:
    boot = boot_id()
    return ClockSample(time.perf_counter_ns(), time.time_ns(), socket.gethostname(), boot, os.getpid(), node or boot)


class _QueuedPrompts:
    """A worker's prompts: handed over by the driver, topped up while a timed level runs."""

    def __init__(self, prompts: list[tuple[int, PreparedRequest]]) -> None:
        self.pool = list(reversed(prompts))
        self.more = asyncio.Event()

    def add(self, prompts: list[tuple[int, PreparedRequest]]) -> None:
        self.pool[:0] = list(reversed(prompts))
        self.more.set()

    async def next(self) -> tuple[int, PreparedRequest]:
        while not self.pool:
            self.more.clear()
            await self.more.wait()
        return self.pool.pop()


class LoadWorker:
    """Runs its share of each phase for a driver. The same class serves in a local process (``--workers``) and
    as a Ray actor (``--ray``): every method is a coroutine, called one at a time or beside ``drain``."""

    def __init__(self, spec: ClientSpec, index: int, node: str | None = None) -> None:
        self.spec = spec
        self.index = index
        self.node = node
        self._session: aiohttp.ClientSession | None = None
        self._client: StreamClient | None = None
        self._task: asyncio.Task[Any] | None = None
        self._records: list[RequestRecord] = []
        self._done: list[RequestRecord] = []
        self._drained: set[int] = set()
        self._prompts = _QueuedPrompts([])
        self._watch: ClientWatch | None = None
        self._level = Level()
        self._result: tuple[int, int] | None = None
        # The worker's process is its own (a --workers child, a Ray actor): what it holds now is frozen for good,
        # so a phase's still_heap (run_phase) collects only what is new before the shared start time.
        freeze_heap()

    async def clock(self) -> ClockSample:
        return clock_sample(self.node)

    async def start(self, task: PhaseTask) -> None:
        if self._client is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                  trace_configs=[trace_config()])
            self._client = self.spec.build(self._session)
        if self._task is not None and not self._task.done():
            raise RuntimeError("a phase is already running on this worker")
        self._records, self._done, self._drained = [], [], set()
        self._prompts = _QueuedPrompts(task.prompts)
        self._level = task.level
        self._watch = ClientWatch() if task.watch else None
        self._result = None
        start_at = time.perf_counter_ns() + (task.start_at_wall_ns - time.time_ns())
        self._task = asyncio.get_running_loop().create_task(self._run(task, start_at))

    async def _run(self, task: PhaseTask, start_at: int) -> None:
        assert self._client is not None
        if self._watch is not None:
            self._watch.start()
        try:
            res = await run_phase(self._client, self._prompts, task.level, task.phase, requests=task.requests,
                                  duration_s=task.duration_s, watch=self._watch, on_done=self._done.append,
                                  seed=task.seed, sink=self._records, start_at_ns=start_at, offset_s=task.offset_s)
            self._result = (res.start_ns, res.end_ns)
        finally:
            if self._watch is not None:
                await self._watch.stop()

    async def add_prompts(self, prompts: list[tuple[int, PreparedRequest]]) -> None:
        self._prompts.add(prompts)

    async def drain(self) -> Drained:
        out = self._done[:]  # run_phase holds self._done.append: the list itself stays
        self._done.clear()
        self._drained.update(id(r) for r in out)
        return Drained(out, len(self._prompts.pool), self._task is None or self._task.done())

    async def finish(self) -> WorkerReport:
        error = None
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                error = "cancelled"
            except Exception as e:  # a bug in the worker: the driver marks the level, the records stay
                error = f"{type(e).__name__}: {e}"[:300]
        return self._report(error)

    async def cancel(self) -> WorkerReport:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        return await self.finish()

    def _report(self, error: str | None) -> WorkerReport:
        rest = [r for r in self._records if id(r) not in self._drained]
        ends = [r.end_ns for r in self._records if r.end_ns is not None]
        start, end = self._result or (min((r.sent_ns for r in self._records), default=0), max(ends, default=0))
        client: dict[str, Any] = {}
        reasons: list[str] = []
        if self._watch is not None:
            client = self._watch.report()
            reasons = self._watch.judge(self._level, self._records)
        return WorkerReport(rest, start, end, client, reasons, error)

    async def guard(self, mode: str, config: Any) -> dict[str, Any] | None:
        """This machine's guard snapshot (the driver asks one worker per machine), taken as warn mode takes it:
        the driver decides, marking the level (findings: dirty_bench) or, in strict mode, refusing it
        (sweep.refuse_dirty_nodes)."""
        from . import guard

        snap = await guard.snapshot_before("off" if mode == "off" else "warn", config, set(), "on this node")
        return snap.to_dict() if snap is not None else None  # across the process boundary as JSON

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._client is not None:
            await self._client.close()
        if self._session is not None:
            await self._session.close()


class Handle(Protocol):
    """The driver's side of one worker: a local process or a Ray actor."""

    name: str

    async def call(self, method: str, *args: Any) -> Any: ...
    async def close(self) -> None: ...


# ---- local processes -------------------------------------------------------------------------------------------

def child_main(fd: int) -> None:
    """A worker process (started by ProcessHandle as ``python -c``): read its spec, then answer the driver's calls
    on the socket ``fd`` until it closes. Ctrl-C is the driver's to handle."""
    from multiprocessing.connection import Connection

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    spec, index = conn.recv()
    asyncio.run(_serve_async(conn, spec, index))


async def _serve_async(conn: Any, spec: ClientSpec, index: int) -> None:
    worker = LoadWorker(spec, index)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[Any] = asyncio.Queue()

    def readable() -> None:
        try:
            inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            loop.remove_reader(conn.fileno())
            inbox.put_nowait(None)

    loop.add_reader(conn.fileno(), readable)

    async def answer(call_id: int, method: str, args: tuple[Any, ...]) -> None:
        try:
            reply: tuple[str, Any] = ("ok", await getattr(worker, method)(*args))
        except Exception as e:
            reply = ("error", f"{type(e).__name__}: {e}"[:500])
        try:
            conn.send((call_id, reply))
        except (OSError, ValueError):
            pass

    tasks = set()
    while True:
        msg = await inbox.get()
        if msg is None or msg[1] == "close":
            await worker.close()
            if msg is not None:
                conn.send((msg[0], ("ok", None)))
            return
        t = loop.create_task(answer(*msg))
        tasks.add(t)
        t.add_done_callback(tasks.discard)


class ProcessHandle:
    """A worker in a local process: a fresh interpreter (``python -c``, so a user's script is never re-imported as
    multiprocessing's spawn would), talking over a socket pair with multiprocessing's message framing."""

    def __init__(self, spec: ClientSpec, index: int) -> None:
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        mine, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"from tokenbench.workers import child_main; child_main({theirs.fileno()})"],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(mine.detach())
        self.conn.send((spec, index))
        self.name = f"worker {index} (pid {self.proc.pid})"
        self._ids = itertools.count()
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _readable(self) -> None:
        try:
            call_id, reply = self.conn.recv()
        except (EOFError, OSError):
            self._lost()
            return
        fut = self._waiting.pop(call_id, None)
        if fut is not None and not fut.done():
            fut.set_result(reply)

    def _lost(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.conn.fileno())
            self._loop = None
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(WorkerLost(f"{self.name} died"))
        self._waiting.clear()

    async def call(self, method: str, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            if self.conn.closed or self.proc.poll() is not None:
                raise WorkerLost(f"{self.name} died")
            self._loop = loop
            loop.add_reader(self.conn.fileno(), self._readable)
        call_id = next(self._ids)
        fut: asyncio.Future[Any] = loop.create_future()
        self._waiting[call_id] = fut
        try:
            self.conn.send((call_id, method, args))
        except (OSError, ValueError) as e:
            self._waiting.pop(call_id, None)
            raise WorkerLost(f"{self.name} died ({e})") from e
        status, value = await fut
        if status != "ok":
            raise WorkerLost(f"{self.name} failed: {value}")
        return value

    async def close(self) -> None:
        if self.proc.poll() is None and self._loop is not None:
            try:
                await asyncio.wait_for(self.call("close"), 5)
            except (WorkerLost, asyncio.TimeoutError):
                pass
        if self._loop is not None:
            self._loop.remove_reader(self.conn.fileno())
            self._loop = None
        try:
            await asyncio.wait_for(asyncio.to_thread(self.proc.wait), 2)
        except asyncio.TimeoutError:
            self.proc.kill()
            self.proc.wait()
        self.conn.close()


# ---- the driver ------------------------------------------------------------------------------------------------

def split_level(level: Level, requests: int | None, n: int) -> list[tuple[Level, int | None, float]]:
    """Each worker's (level, request count, start offset in s); see the module's docstring. Shares of nothing are
    dropped, so fewer than ``n`` may come back."""
    if level.rate is not None:
        counts = _apportion(requests, [1] * n) if requests is not None else [None] * n
        cap = _apportion(level.max_concurrency, [1] * n) if level.max_concurrency else [None] * n
        rate = level.rate / n
        out = []
        for k in range(n):
            if counts[k] == 0 or (cap[k] == 0):
                continue
            offset = k / level.rate if level.arrival == "constant" else 0.0
            out.append((replace(level, rate=rate, max_concurrency=cap[k]), counts[k], offset))
        return out
    c = level.concurrency or 1
    shares = [c // n + (1 if k < c % n else 0) for k in range(n)]
    counts = _apportion(requests, shares) if requests is not None else [None] * n
    return [(replace(level, concurrency=s), counts[k], 0.0) for k, s in enumerate(shares)
            if s > 0 and counts[k] != 0]


def _apportion(total: int | None, weights: Sequence[int]) -> list[Any]:
    """Largest remainder: integers in proportion to ``weights`` that add up to ``total`` exactly."""
    assert total is not None
    w = sum(weights)
    exact = [total * x / w for x in weights]
    out = [math.floor(e) for e in exact]
    for k in sorted(range(len(weights)), key=lambda k: exact[k] - out[k], reverse=True)[: total - sum(out)]:
        out[k] += 1
    return out


def auto_workers(levels: Sequence[Level], cores: int | None = None) -> int:
    """``--workers auto``: one worker per STREAMS_PER_WORKER streams of the busiest level, at most one per core."""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    streams = max((lv.concurrency or lv.max_concurrency or 1) for lv in levels) if levels else 1
    return max(1, min(cores, math.ceil(streams / STREAMS_PER_WORKER)))


class PromptFeed(Protocol):
    async def prepare(self, n: int) -> None: ...
    async def take(self, n: int) -> list[tuple[int, PreparedRequest]]: ...


@dataclass(slots=True)
class MergedPhase:
    records: list[RequestRecord]
    start_ns: int
    end_ns: int
    client: dict[str, Any]
    reasons: list[str]
    lost: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Member:
    handle: Handle
    offset_ns: int = 0  # added to this worker's stamps to put them on the driver's clock
    clock: dict[str, Any] = field(default_factory=dict)
    alive: bool = True
    delivered: int = 0  # finished records handed over in the current phase


class WorkerPool:
    """The driver's side: workers started once per sweep, given a share of each phase, merged back."""

    def __init__(self, handles: Sequence[Handle], kind: str, driver_node: str | None = None) -> None:
        self.members = [_Member(h) for h in handles]
        self.kind = kind  # "processes" | "ray"
        self.driver_node = driver_node or boot_id()  # the machine the driver's own guard covers
        self.closers: list[Callable[[], None]] = []  # run after the workers are closed (ray.shutdown)

    @classmethod
    async def local(cls, spec: ClientSpec, n: int) -> WorkerPool:
        pool = cls([ProcessHandle(spec, k) for k in range(n)], "processes")
        await pool.sync_clocks()
        return pool

    @property
    def size(self) -> int:
        return sum(m.alive for m in self.members)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "workers": len(self.members), "clocks": [m.clock for m in self.members]}

    async def sync_clocks(self, rounds: int = 5) -> None:
        """Each worker's offset onto the driver's monotonic clock; see the module's docstring."""
        here = clock_sample()
        for m in self.members:
            best: tuple[int, ClockSample, int] | None = None
            for _ in range(rounds):  # the exchange with the shortest round trip bounds the skew best
                t0 = time.time_ns()
                sample: ClockSample = await m.handle.call("clock")
                rtt = time.time_ns() - t0
                if best is None or rtt < best[0]:
                    best = (rtt, sample, sample.wall_ns - (t0 + rtt // 2))
            assert best is not None
            rtt, s, skew = best
            same = bool(s.boot_id) and s.boot_id == here.boot_id
            if same:
                m.offset_ns = 0
            else:  # worker mono -> worker wall -> driver wall (minus skew) -> driver mono
                m.offset_ns = (s.wall_ns - s.mono_ns) - skew - (here.wall_ns - here.mono_ns)
            m.clock = {"worker": m.handle.name, "host": s.host, "node": s.node, "same_clock": same,
                       "skew_ms": 0.0 if same else round(skew / 1e6, 3),
                       "clock_uncertainty_ms": 0.0 if same else round(rtt / 2e6, 3)}

    async def guards(self, mode: str, config: Any) -> list[GuardSnapshot]:
        """One guard snapshot per node with workers, other than the driver's (its own guard covers that one)."""
        seen = {self.driver_node}
        out = []
        for m in self.members:
            node = str(m.clock.get("node"))
            if not m.alive or node in seen:
                continue
            seen.add(node)
            try:
                snap = await m.handle.call("guard", mode, config)
            except WorkerLost:
                continue
            if isinstance(snap, dict):
                node_snap = GuardSnapshot.from_dict(snap)
                node_snap.put(node=f"{m.clock.get('host')} ({str(node)[:12]})")
                out.append(node_snap)
        return out

    async def run_phase(self, level: Level, phase: Phase, *, requests: int | None, duration_s: float | None,
                        seed: int, prompts: PromptFeed, sink: list[RequestRecord],
                        on_done: Callable[[RequestRecord], None] | None = None) -> MergedPhase:
        members = [m for m in self.members if m.alive]
        shares = split_level(level, requests, len(members))
        parts = list(zip(members, shares))
        lead = START_LEAD_S if self.kind == "processes" else 0.5
        start_wall = time.time_ns() + int(lead * NS_PER_S)
        started = []
        lost: list[str] = []
        for k, (m, (share, count, offset)) in enumerate(parts):
            m.delivered = 0
            first = count if count is not None else 2 * (share.concurrency or share.max_concurrency or 4)
            task = PhaseTask(share, phase, count, duration_s, seed * 1009 + k, start_wall, await prompts.take(first),
                             offset, watch=phase == "measured")
            try:
                await m.handle.call("start", task)
                started.append(m)
            except WorkerLost as e:
                lost.append(self._lose(m, str(e)))
        try:
            await self._follow(started, duration_s is not None, prompts, sink, on_done, lost)
        except asyncio.CancelledError:
            await asyncio.shield(self._collect(started, sink, lost, "cancel"))
            raise
        reports = await self._collect(started, sink, lost, "finish", on_done)
        if not reports:
            now = time.perf_counter_ns()
            return MergedPhase([], now, now, {}, [], lost)
        start_ns = min(r.start_ns for _, r in reports)
        end_ns = max(r.end_ns for _, r in reports)
        return MergedPhase(sink, start_ns, end_ns, _merge_client(reports), _reasons(reports), lost)

    async def _follow(self, started: list[_Member], timed: bool, prompts: PromptFeed, sink: list[RequestRecord],
                      on_done: Callable[[RequestRecord], None] | None, lost: list[str]) -> None:
        running = list(started)
        while running:
            await asyncio.sleep(DRAIN_PERIOD_S)
            for m in list(running):
                try:
                    d: Drained = await m.handle.call("drain")
                except WorkerLost as e:
                    running.remove(m)
                    lost.append(self._lose(m, str(e)))
                    continue
                m.delivered += len(d.records)
                for r in d.records:
                    _shift(r, m.offset_ns)
                    sink.append(r)
                    if on_done is not None:
                        on_done(r)
                if d.done:
                    running.remove(m)
                elif timed and d.prompts_left < 8:
                    try:
                        await m.handle.call("add_prompts", await prompts.take(32))
                    except WorkerLost as e:
                        running.remove(m)
                        lost.append(self._lose(m, str(e)))

    async def _collect(self, started: list[_Member], sink: list[RequestRecord], lost: list[str], how: str,
                       on_done: Callable[[RequestRecord], None] | None = None) -> list[tuple[_Member, WorkerReport]]:
        out = []
        for m in started:
            if not m.alive:
                continue
            try:
                rep: WorkerReport = await asyncio.wait_for(m.handle.call(how), None if how == "finish" else 10)
            except (WorkerLost, asyncio.TimeoutError) as e:
                lost.append(self._lose(m, str(e) or "no answer"))
                continue
            for r in rep.records:
                _shift(r, m.offset_ns)
                sink.append(r)
                if on_done is not None and r.end_ns is not None:
                    on_done(r)
            rep.start_ns += m.offset_ns
            rep.end_ns += m.offset_ns
            rep.client["worker"] = m.handle.name
            if rep.error and how == "finish":
                lost.append(f"{m.handle.name} stopped with an error ({rep.error}); its finished requests are kept")
            out.append((m, rep))
        return out

    def _lose(self, m: _Member, why: str) -> str:
        m.alive = False
        return (f"{m.handle.name} was lost mid-level ({why}); the {m.delivered} requests it had finished are kept, "
                "the ones it had in flight are not counted")

    async def close(self) -> None:
        await asyncio.gather(*(m.handle.close() for m in self.members), return_exceptions=True)
        for close in self.closers:
            close()


def _shift(r: RequestRecord, offset: int) -> None:
    if not offset:
        return
    for name in _STAMPS:
        v = getattr(r, name)
        if v is not None:
            setattr(r, name, v + offset)
    r.chunk_ns = [t + offset for t in r.chunk_ns]


def _merge_client(reports: list[tuple[_Member, WorkerReport]]) -> dict[str, Any]:
    """The level's client report: the busiest worker's figures at the top (the keys a one-process level has),
    every worker's below."""
    per = [r.client for _, r in reports]
    top = max(per, key=lambda c: c.get("cpu_pct") or 0.0)
    out = {k: v for k, v in top.items() if k != "worker"}
    if any(c.get("loop_lag_ms_p99") is not None for c in per):
        out["loop_lag_ms_p99"] = max(c.get("loop_lag_ms_p99") or 0.0 for c in per)
    means = [c["inflight_mean"] for c in per if c.get("inflight_mean") is not None]
    if means:
        out["inflight_mean"] = sum(means)
    out["workers"] = per
    out["clocks"] = [m.clock for m, _ in reports]
    return out


def _reasons(reports: list[tuple[_Member, WorkerReport]]) -> list[str]:
    """The client-bound check runs in each worker, on its own loop and share; a reason names its worker."""
    out = []
    for _, r in reports:
        out += [f"{r.client.get('worker')}: {why}" for why in r.reasons]
    return out


def parse_workers(value: str) -> int | None:
    """``--workers``: a count, or ``auto`` (None: decided per sweep by :func:`auto_workers`)."""
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--workers {value}: give a number of processes (1 or more) or 'auto'") from None
    if n < 1:
        raise UsageError(f"--workers {value}: give a number of processes (1 or more) or 'auto'")
    return n
