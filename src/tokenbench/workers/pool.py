"""The driver's pool of workers: started once per sweep, given a share of each phase, drained every
:data:`DRAIN_PERIOD_S`, their records put on the driver's clock and merged into one level.

Each worker's sends are measured as its records come back: the median send queue of its last phase
(``_Member.send_queue_ms``, with at least ``MIN_QUEUE_SAMPLES`` sends) weighs the next phase's split
(``split.send_weights``), so a worker whose sends wait longer is given fewer streams.

A worker that dies (a killed process, a lost Ray node) ends the level as partial: the records it had finished
and handed over are kept, what it had in flight is lost and counted.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..grace import Waiting, overtime
from ..guard_results import GuardSnapshot
from ..client import PreparedRequest
from ..errors import EndpointError
from ..offered_load import Level
from ..records import Phase, RequestRecord
from .clocks import ClockSample, boot_id, clock_sample
from .handle import Handle, WorkerLost
from .messages import ClientSpec, Drained, PhaseTask, WorkerReport
from .process import ProcessHandle
from .split import send_weights, worker_shares

NS_PER_S = 1_000_000_000
#: How often the driver collects finished records (progress, and what survives a worker lost mid-level).
DRAIN_PERIOD_S = 0.1
#: Workers start this long after the driver asks, so all have their share ready (local; Ray adds its latency).
START_LEAD_S = 0.05
#: Sends a worker must have made in a phase before its send queue weighs the next split.
MIN_QUEUE_SAMPLES = 8
_STAMPS = ("scheduled_ns", "sent_ns", "written_ns", "first_byte_ns", "first_token_ns", "first_text_ns",
           "first_answer_ns", "first_tool_ns", "end_ns")


class PromptFeed(Protocol):
    async def prepare(self, n: int) -> None: ...
    async def take(self, n: int) -> list[tuple[int, PreparedRequest]]: ...


class _Feed:
    """A phase's prompts from the run's source, which may fail as it goes (a server's own tokenizer, gone with
    its server): then ``take`` gives None, and ``error`` says why."""

    def __init__(self, prompts: PromptFeed) -> None:
        self.prompts = prompts
        self.error: str | None = None

    async def take(self, n: int) -> list[tuple[int, PreparedRequest]] | None:
        if self.error is not None:
            return None
        try:
            return await self.prompts.take(n)
        except EndpointError as e:
            self.error = str(e)
            return None


@dataclass(slots=True)
class MergedPhase:
    records: list[RequestRecord]
    start_ns: int
    end_ns: int
    client: dict[str, Any]
    reasons: list[str]
    lost: list[str] = field(default_factory=list)
    source_error: str | None = None  # the prompts' source failed mid-phase: the workers sent what they held


@dataclass(slots=True)
class _Member:
    handle: Handle
    offset_ns: int = 0  # added to this worker's stamps to put them on the driver's clock
    clock: dict[str, Any] = field(default_factory=dict)
    alive: bool = True
    delivered: int = 0  # finished records handed over in the current phase
    send_queue_ms: float | None = None  # the median send queue of its last phase with enough sends
    queues: list[float] = field(default_factory=list)  # the current phase's send queues, ms
    in_flight: int = 0  # requests in flight, as its last drain said
    waiting_since_ns: int | None = None  # a warm-up's longest-waiting request's send, on the driver's clock

    def take(self, r: RequestRecord, sink: list[RequestRecord]) -> None:
        """One of this worker's records, put on the driver's clock and in ``sink``; its send queue noted."""
        _shift(r, self.offset_ns)
        sink.append(r)
        if r.written_ns is not None:
            self.queues.append((r.written_ns - r.sent_ns) / 1e6)

    def settle(self) -> None:
        """The phase is over: its send queue, if it sent enough to say, weighs the next split."""
        if len(self.queues) >= MIN_QUEUE_SAMPLES:
            self.send_queue_ms = statistics.median(self.queues)
        self.queues = []


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
                        on_done: Callable[[RequestRecord], None] | None = None,
                        grace_s: float | None = None, waiting: Waiting | None = None) -> MergedPhase:
        """Each worker's share of one phase, merged. ``waiting``: told, past a duration's end, how many requests
        the workers still have in flight and how long the grace has left (as grace.within_grace tells it)."""
        members = [m for m in self.members if m.alive]
        weights = send_weights([m.send_queue_ms for m in members])
        parts = [(m, s) for m, s in zip(members, worker_shares(level, requests, len(members), weights))
                 if s is not None]
        lead = START_LEAD_S if self.kind == "processes" else 0.5
        start_wall = time.time_ns() + int(lead * NS_PER_S)
        started = []
        lost: list[str] = []
        feed = _Feed(prompts)
        for k, (m, (share, count, offset)) in enumerate(parts):
            m.delivered, m.queues, m.in_flight, m.waiting_since_ns = 0, [], 0, None
            first = count if count is not None else 2 * (share.concurrency or share.max_concurrency or 4)
            held = await feed.take(first)
            if held is None:
                break  # the source failed: the workers started send what they hold (_follow ends theirs)
            task = PhaseTask(share, phase, count, duration_s, seed * 1009 + k, start_wall, held, offset,
                             watch=phase == "measured", grace_s=grace_s)
            try:
                await m.handle.call("start", task)
                started.append(m)
            except WorkerLost as e:
                lost.append(self._lose(m, str(e)))
        # the level's end and its grace's on the driver's clock (None: no end, or no bound after it)
        stop_ns = None if duration_s is None or waiting is None else \
            time.perf_counter_ns() + start_wall - time.time_ns() + int(duration_s * NS_PER_S)
        over = _Overtime(stop_ns, grace_s, waiting, started)
        try:
            await self._follow(started, duration_s is not None, feed, sink, on_done, lost, over)
        except asyncio.CancelledError:
            await asyncio.shield(self._collect(started, sink, lost, "cancel"))
            raise
        finally:
            over.done()
        reports = await self._collect(started, sink, lost, "finish", on_done)
        streams = {id(m): share.concurrency or share.max_concurrency for m, (share, _, _) in parts}
        for m, rep in reports:
            rep.client["streams"] = streams[id(m)]  # its share of the level: the split, as it was weighed
            rep.client["send_queue_ms_p50"] = statistics.median(m.queues) if m.queues else None
            m.settle()
        if not reports:
            now = time.perf_counter_ns()
            return MergedPhase([], now, now, {}, [], lost, feed.error)
        start_ns = min(r.start_ns for _, r in reports)
        end_ns = max(r.end_ns for _, r in reports)
        return MergedPhase(sink, start_ns, end_ns, _merge_client(reports), _reasons(reports), lost, feed.error)

    def in_flight(self) -> tuple[int, int | None]:
        """The requests the workers have in flight, as their last drains said, and when a warm-up's
        longest-waiting one was sent (perf_counter_ns on the driver's clock; None: not said)."""
        alive = [m for m in self.members if m.alive]
        since = [m.waiting_since_ns for m in alive if m.waiting_since_ns is not None]
        return sum(m.in_flight for m in alive), min(since, default=None)

    async def _follow(self, started: list[_Member], timed: bool, feed: _Feed, sink: list[RequestRecord],
                      on_done: Callable[[RequestRecord], None] | None, lost: list[str],
                      over: _Overtime | None = None) -> None:
        running = list(started)
        ended = False
        while running:
            if feed.error is not None and not ended:  # each worker sends what it holds, then stops
                ended = True
                for m in list(running):
                    try:
                        await m.handle.call("end_prompts", feed.error)
                    except WorkerLost as e:
                        running.remove(m)
                        lost.append(self._lose(m, str(e)))
            await asyncio.sleep(DRAIN_PERIOD_S)
            if over is not None:
                over.tell()
            for m in list(running):
                try:
                    d: Drained = await m.handle.call("drain")
                except WorkerLost as e:
                    running.remove(m)
                    lost.append(self._lose(m, str(e)))
                    continue
                m.delivered += len(d.records)
                m.in_flight = 0 if d.done else d.in_flight
                m.waiting_since_ns = None if d.waiting_since_ns is None else d.waiting_since_ns + m.offset_ns
                for r in d.records:
                    m.take(r, sink)
                    if on_done is not None:
                        on_done(r)
                if d.done:
                    running.remove(m)
                elif timed and d.prompts_left < 8 and not ended and (more := await feed.take(32)) is not None:
                    try:
                        await m.handle.call("add_prompts", more)
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
                m.take(r, sink)
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


class _Overtime:
    """A timed phase past its end: what the workers still have in flight, told to ``waiting`` until the grace
    runs out (each worker cuts its own then)."""

    def __init__(self, stop_ns: int | None, grace_s: float | None, waiting: Waiting | None,
                 members: list[_Member]) -> None:
        self.stop_ns, self.waiting, self.members = stop_ns, waiting, members
        self.until_ns = None if stop_ns is None or grace_s is None else stop_ns + int(grace_s * NS_PER_S)
        self.said = False

    def tell(self) -> None:
        now = time.perf_counter_ns()
        if self.waiting is None or self.stop_ns is None or now < self.stop_ns:
            return
        n = sum(m.in_flight for m in self.members if m.alive)
        left = None if self.until_ns is None else (self.until_ns - now) / NS_PER_S
        self.said = bool(n) and (left is None or left > 0)
        self.waiting(overtime(n, left) if self.said else None)

    def done(self) -> None:
        if self.waiting is not None and self.said:
            self.waiting(None)


def _shift(r: RequestRecord, offset: int) -> None:
    if not offset:
        return
    for name in _STAMPS:
        v = getattr(r, name)
        if v is not None:
            setattr(r, name, v + offset)
    r.chunk_ns = [t + offset for t in r.chunk_ns]
    r.pack()


def _merge_client(reports: list[tuple[_Member, WorkerReport]]) -> dict[str, Any]:
    """The level's client report: the busiest worker's figures at the top (the keys a one-process level has),
    every worker's below."""
    per = [r.client for _, r in reports]
    top = max(per, key=lambda c: c.get("cpu_pct") or 0.0)
    out = {k: v for k, v in top.items() if k not in ("worker", "streams", "send_queue_ms_p50")}  # one worker's
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
