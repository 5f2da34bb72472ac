"""When to send: closed-loop concurrency levels, open-loop rate levels (Poisson or constant) or schedules (a
trace's replay), warm-up as a recorded phase, a request count or a duration per level, and a watch on the client
itself.

The load generator defines the backend it needs (``Sender``); the streaming client implements it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import psutil

from .client import PreparedRequest
from .distribution import Tally
from .metrics import client_delays
from .records import Phase, RequestRecord
from .background import cancel_and_wait
from .errors import EndpointError, UsageError
from .grace import INTERRUPTED, Waiting, mark_unfinished, within_grace
from .offered_load import Level

NS_PER_S = 1_000_000_000

#: The client is the bottleneck when its event loop answers this late (p99 of 10 ms sleeps), when its one
#: thread is this busy, or when it keeps fewer requests in flight than asked (closed loop) / sends late
#: (open loop). Thresholds chosen so a healthy client on a 2-core laptop stays far below them.
LOOP_LAG_P99_MS = 25.0
CLIENT_CPU_PCT = 90.0
INFLIGHT_SHORTFALL = 0.9
SEND_DELAY_P90_MS = 10.0
#: A request that waits this long in the client (p90) before its body reaches the socket: the client's time,
#: which would otherwise read as the server's TTFT (41-128 ms at 512 streams on one event loop, before the sends were split over workers).
SEND_QUEUE_P90_MS = 10.0
#: One stop of the event loop this long delays every stream in flight by as much, whatever the p99 says.
LOOP_STALL_MS = 100.0
MONITOR_PERIOD_S = 0.01
#: the event-loop lag is kept to this (ms): its findings are at 25 and 100 ms
LAG_RESOLUTION_MS = 0.01

_frozen_depth = 0


@contextlib.contextmanager
def still_heap() -> Iterator[None]:
    """No collection of the whole heap while requests are timed. A collection of Python's oldest generation walks
    every object the process holds and stops the event loop meanwhile: 0.4-1.1 s in the test suite's process
    (560k objects), about twice that on 2 cores busy serving. Every stream in flight then reads its tokens late
    and in a burst: a CI run against vLLM read +245 ms mean TTFT and -14% decode time against vLLM's own stamps.

    What exists on entry is collected once, then frozen (``gc.freeze``: left out of later collections); what the
    timed code makes is still collected, and it is young and small. A nested use freezes only what is new; the
    outermost exit unfreezes, so a library caller's heap is collected as before."""
    global _frozen_depth
    freeze_heap()
    try:
        yield
    finally:
        _frozen_depth -= 1
        if _frozen_depth == 0:
            gc.unfreeze()


def freeze_heap() -> None:
    """Collect, freeze what exists, and keep it frozen: an enclosing ``still_heap`` for the rest of the process
    (a load worker's process, which only sends requests), or until the ``still_heap`` that called it exits."""
    global _frozen_depth
    gc.collect()
    gc.freeze()
    _frozen_depth += 1


class Sender(Protocol):
    async def send(self, req: PreparedRequest, record: RequestRecord,
                   on_done: Callable[[RequestRecord], None] | None = None) -> RequestRecord: ...

    def flush(self) -> None: ...


class PromptSource(Protocol):
    async def next(self) -> tuple[int, PreparedRequest]: ...


#: Sends in a row whose connection could not open (at least; twice a closed loop's streams) that end its sending:
#: the server is gone, and the level ends with them, failed (the sweep then asks whether it is still there).
REFUSED_IN_A_ROW = 16


def stopped_by(report: dict[str, Any]) -> str:
    """What held the event loop at its longest stop, from a ``ClientWatch.report``: the process itself (busy for
    most of it, a garbage collection named where one was long), or other work on the machine's cores."""
    stop, cpu, collected = report["loop_lag_ms_max"], report.get("loop_stop_cpu_ms"), report.get("gc_ms_max") or 0
    if cpu is None:
        return ""
    if cpu < stop / 2:
        return f", the process given a core for {cpu:.0f} ms of it: other work held the machine's cores"
    said = f", the process busy for {cpu:.0f} ms of it"
    return said + (f" ({collected:.0f} ms in one garbage collection)" if collected > LOOP_STALL_MS else "")


@dataclass(slots=True)
class ClientWatch:
    """Event-loop lag, the client's own CPU, requests in flight: is the client or the server the limit?"""

    #: a sample every MONITOR_PERIOD_S for the whole level, tallied to 10 µs: a soak runs for hours, 360,000
    #: samples an hour, which a list (or an array) kept whole
    lags_ms: Tally = field(default_factory=lambda: Tally(LAG_RESOLUTION_MS))
    inflight_sum: int = 0  # requests in flight, summed over the samples, and the samples
    inflight_count: int = 0
    inflight: int = 0
    sampling_inflight: bool = True
    cpu_pct: float | None = None
    #: what stopped the loop at its longest stop: the CPU time the process had meanwhile (ms: near the stop, it
    #: was busy itself; near nothing, other work held the cores), and the longest garbage collection (ms)
    stop_cpu_ms: float | None = None
    gc_ms_max: float | None = None
    _longest_ms: float = -1.0
    _gc_t0: float = 0.0
    _task: asyncio.Task[None] | None = None
    _cpu0: float = 0.0
    _t0: float = 0.0

    async def _run(self, at_ns: int | None) -> None:
        if at_ns is not None and at_ns > time.perf_counter_ns():
            await asyncio.sleep((at_ns - time.perf_counter_ns()) / NS_PER_S)
            self._mark()
        while True:
            t, cpu = time.perf_counter(), time.process_time()
            await asyncio.sleep(MONITOR_PERIOD_S)
            lag = max(0.0, (time.perf_counter() - t - MONITOR_PERIOD_S) * 1000)
            self.lags_ms.append(lag)
            if lag > self._longest_ms:
                self._longest_ms, self.stop_cpu_ms = lag, (time.process_time() - cpu) * 1000
            if self.sampling_inflight:
                self.inflight_sum += self.inflight
                self.inflight_count += 1

    def _mark(self) -> None:
        ct = psutil.Process().cpu_times()
        self._cpu0 = ct.user + ct.system
        self._t0 = time.perf_counter()

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """``gc.callbacks``: each garbage collection's length."""
        now = time.perf_counter()
        if phase == "start":
            self._gc_t0 = now
        else:
            self.gc_ms_max = max(self.gc_ms_max or 0.0, (now - self._gc_t0) * 1000)

    def start(self, at_ns: int | None = None) -> None:
        """Watch from now, or from ``at_ns`` (perf_counter_ns): a worker's phase starts at the pool's shared start
        time (run_phase's ``start_at_ns``), and the wait before it is no part of the level: sampled, it read as
        requests not in flight (a worker at concurrency 1 read 0.89 in flight and was called client-bound)."""
        self._mark()
        gc.callbacks.append(self._collected)
        self._task = asyncio.get_running_loop().create_task(self._run(at_ns))

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._collected)
        await cancel_and_wait(self._task)
        ct = psutil.Process().cpu_times()
        wall = time.perf_counter() - self._t0
        self.cpu_pct = 100.0 * (ct.user + ct.system - self._cpu0) / wall if wall > 0 else None

    def report(self) -> dict[str, Any]:
        lags = self.lags_ms
        out: dict[str, Any] = {"cpu_pct": self.cpu_pct, "loop_lag_samples": len(lags)}
        if lags:
            out["loop_lag_ms_p50"] = lags.percentile(50)  # the one percentile definition (distribution)
            out["loop_lag_ms_p99"] = lags.percentile(99)
            out["loop_lag_ms_max"] = lags.max()
            out["loop_stop_cpu_ms"] = None if self.stop_cpu_ms is None else round(self.stop_cpu_ms, 1)
        if self.gc_ms_max is not None:
            out["gc_ms_max"] = round(self.gc_ms_max, 1)
        if self.inflight_count:
            out["inflight_mean"] = self.inflight_sum / self.inflight_count
        return out

    def judge(self, level: Level, records: list[RequestRecord]) -> list[str]:
        """``verdict`` on a phase's measured records (metrics.client_delays: the one definition of both delays)."""
        delay, queue = client_delays([r for r in records if r.phase == "measured"])
        return self.verdict(level, delay.p90 if delay else None, queue.p90 if queue else None)

    def verdict(self, level: Level, send_delay_p90_ms: float | None,
                send_queue_p90_ms: float | None = None) -> list[str]:
        """Reasons the client, not the server, limited this level (empty: it did not)."""
        r = self.report()
        reasons = []
        if send_queue_p90_ms is not None and send_queue_p90_ms > SEND_QUEUE_P90_MS:
            reasons.append(f"requests waited {send_queue_p90_ms:.1f} ms at p90 in the client before reaching the "
                           f"socket (TTFT includes it)")
        if r.get("loop_lag_ms_p99", 0) > LOOP_LAG_P99_MS:
            reasons.append(f"event-loop lag p99 {r['loop_lag_ms_p99']:.1f} ms > {LOOP_LAG_P99_MS:g} ms")
        elif r.get("loop_lag_ms_max", 0) > LOOP_STALL_MS:
            reasons.append(f"the event loop stopped once for {r['loop_lag_ms_max']:.0f} ms (> {LOOP_STALL_MS:g} ms)"
                           f"{stopped_by(r)}: the streams in flight then read their tokens that much late")
        if (self.cpu_pct or 0) > CLIENT_CPU_PCT:
            reasons.append(f"client CPU {self.cpu_pct:.0f}% of a core > {CLIENT_CPU_PCT:g}%")
        if level.concurrency and r.get("inflight_mean") is not None and self.inflight_count >= 20:
            if r["inflight_mean"] < INFLIGHT_SHORTFALL * level.concurrency:
                reasons.append(f"kept {r['inflight_mean']:.1f} requests in flight of {level.concurrency} asked")
        # a --max-concurrency cap holds requests past their arrival by design: their wait is the workload's (said
        # under the table, from arrival), not a client behind
        if level.open and not level.max_concurrency and send_delay_p90_ms is not None \
                and send_delay_p90_ms > SEND_DELAY_P90_MS:
            reasons.append(f"requests sent {send_delay_p90_ms:.1f} ms late at p90")
        return reasons


@dataclass(slots=True)
class PhaseResult:
    records: list[RequestRecord]
    start_ns: int
    end_ns: int
    #: why sending stopped before the phase's end: its prompts' source failed (a server's own tokenizer, gone
    #: with its server); the requests sent before it are in ``records``
    source_error: str | None = None


OnDone = Callable[[RequestRecord], None]


class _Phase:
    """The sending loops of one phase: closed (N senders, each sends when its last request ends) or open (a
    request at each arrival of the process, however many are in flight)."""

    def __init__(self, backend: Sender, prompts: PromptSource, phase: Phase, records: list[RequestRecord],
                 watch: ClientWatch, done: OnDone, requests: int | None, stop_ns: int | None,
                 halt: Callable[[], bool] | None = None) -> None:
        self.backend, self.prompts, self.phase, self.records = backend, prompts, phase, records
        self.watch, self.done, self.requests, self.stop_ns = watch, done, requests, stop_ns
        self.halt = halt or _never
        self.issued = 0
        self.source_error: str | None = None
        self.gone_after = REFUSED_IN_A_ROW
        self.refused = 0  # a closed loop's sends in a row whose connection could not open: the server is gone

    async def _prompt(self) -> tuple[int, PreparedRequest] | None:
        """The next prompt, or None once the prompts' source failed (a server's own tokenizer, built from as the
        level goes): no more is sent, and the requests in flight end as they end."""
        try:
            return await self.prompts.next()
        except EndpointError as e:
            self.source_error = self.source_error or str(e)
            return None

    async def one(self, req: PreparedRequest, rec: RequestRecord) -> None:
        self.watch.inflight += 1
        try:  # decoded later (decoder.DeferredDecoding): ``done`` runs then, and run_phase's flush() waits
            await self.backend.send(req, rec, self.done)
        finally:
            self.watch.inflight -= 1

    def timed_out(self) -> bool:
        """Whether the phase stopped sending for its duration: not halted, not at its request count, not for want
        of prompts, nor for a server gone."""
        return self.stop_ns is not None and not self.halt() and self.source_error is None and \
            self.refused < self.gone_after and \
            (self.requests is None or self.issued < self.requests)

    def more(self) -> bool:
        return (self.requests is None or self.issued < self.requests) and self.source_error is None and \
            (self.stop_ns is None or time.perf_counter_ns() < self.stop_ns) and not self.halt() and \
            self.refused < self.gone_after

    async def closed_loop(self, n: int, stagger_s: float | None = None, rng: random.Random | None = None) -> None:
        # a server gone refuses each send at once: a closed loop sent thousands a second until its duration ended
        self.gone_after = max(REFUSED_IN_A_ROW, 2 * n)
        waiting = n if stagger_s and rng is not None else 0

        async def sender() -> None:
            nonlocal waiting
            if stagger_s and rng is not None:  # desynchronised: each stream's first send at a random offset
                await asyncio.sleep(rng.uniform(0.0, stagger_s))
                waiting -= 1
                # the streams' staggered starts are the load asked for, not a client falling behind: in flight is
                # sampled once every stream has sent
                self.watch.sampling_inflight = waiting == 0 and self.more()
            while self.more():
                self.issued += 1
                if (got := await self._prompt()) is None:
                    self.issued -= 1
                    break
                idx, req = got
                rec = RequestRecord(index=idx, phase=self.phase)
                self.records.append(rec)
                await self.one(req, rec)
                self.refused = self.refused + 1 if rec.error_kind == "connection" else 0
            self.watch.sampling_inflight = False  # the tail of a level is not a shortfall of the client

        if waiting:
            self.watch.sampling_inflight = False
        await asyncio.gather(*(sender() for _ in range(n)))

    async def open_loop(self, level: Level, start_ns: int, offset_s: float, rng: random.Random) -> None:
        tasks: list[asyncio.Task[None]] = []
        try:
            await self._arrivals(level, start_ns, offset_s, rng, tasks)
        except asyncio.CancelledError:  # cancelled while sending (--grace 0s, an interrupt): the sent ones stop too
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        self.watch.sampling_inflight = False
        if self.timed_out():  # the next arrival falls past the level's end: the level lasts to it regardless
            await asyncio.sleep(max(0.0, ((self.stop_ns or 0) - time.perf_counter_ns()) / NS_PER_S))
        await asyncio.gather(*tasks)

    async def _arrivals(self, level: Level, start_ns: int, offset_s: float, rng: random.Random,
                        tasks: list[asyncio.Task[None]]) -> None:
        """Send a request at each arrival until the level's count or time, each a task of ``tasks``."""
        sem = asyncio.Semaphore(level.max_concurrency) if level.max_concurrency else None
        for t_next in level.arrivals(offset_s, rng):
            if self.requests is not None and self.issued >= self.requests:
                break
            scheduled = start_ns + int(t_next * NS_PER_S)
            if (self.stop_ns is not None and scheduled >= self.stop_ns) or self.halt():
                break
            if (got := await self._prompt()) is None:
                break
            idx, req = got
            delay = (scheduled - time.perf_counter_ns()) / NS_PER_S
            if delay > 0:
                await asyncio.sleep(delay)
                if self.halt():
                    break
            rec = RequestRecord(index=idx, phase=self.phase, scheduled_ns=scheduled)
            self.records.append(rec)
            tasks.append(asyncio.get_running_loop().create_task(self._capped(sem, req, rec)))
            self.issued += 1

    async def _capped(self, sem: asyncio.Semaphore | None, req: PreparedRequest, rec: RequestRecord) -> None:
        if sem is None:
            await self.one(req, rec)
            return
        async with sem:
            await self.one(req, rec)


def _ignore(record: RequestRecord) -> None:
    pass


def _never() -> bool:
    return False


async def run_phase(
    backend: Sender,
    prompts: PromptSource,
    level: Level,
    phase: Phase,
    *,
    requests: int | None,
    duration_s: float | None,
    watch: ClientWatch | None = None,
    on_done: OnDone | None = None,
    seed: int = 0,
    sink: list[RequestRecord] | None = None,
    start_at_ns: int | None = None,
    offset_s: float = 0.0,
    halt: Callable[[], bool] | None = None,
    stagger_s: float | None = None,
    grace_s: float | None = None,
    waiting: Waiting | None = None,
) -> PhaseResult:
    """Run one phase (warm-up or measured) of a level. Cancellation keeps the records gathered so far.

    ``start_at_ns`` (perf_counter_ns) starts the phase at that moment, so workers sharing a level start together;
    ``offset_s`` delays an open-loop worker's first arrival (constant arrivals split over workers interleave);
    ``halt`` (asked before each send) stops sending once true: the requests in flight finish and are kept;
    ``stagger_s``: a closed loop's streams start at random offsets within it (desynchronised), not together;
    ``grace_s``: with a duration, requests still in flight this long after its end are cancelled, cut by the
    level's end (grace.LEVEL_END; None: wait for every one); ``waiting`` is told meanwhile what is still in
    flight (grace.within_grace)."""
    if requests is None and duration_s is None:
        raise ValueError("a level needs a request count or a duration")
    records: list[RequestRecord] = [] if sink is None else sink  # the caller's list survives a cancel
    with still_heap():  # entered before the start, so its one collection is never timed
        if start_at_ns is not None and start_at_ns > time.perf_counter_ns():
            await asyncio.sleep((start_at_ns - time.perf_counter_ns()) / NS_PER_S)
        start_ns = start_at_ns if start_at_ns is not None else time.perf_counter_ns()
        stop_ns = start_ns + int(duration_s * NS_PER_S) if duration_s else None
        run = _Phase(backend, prompts, phase, records, watch or ClientWatch(), on_done or _ignore, requests, stop_ns,
                     halt)
        loop = run.closed_loop(level.concurrency or 1, stagger_s, random.Random(seed)) if not level.open else \
            run.open_loop(level, start_ns, offset_s, random.Random(seed))
        try:
            # past the end, the requests in flight as the watch counts them (a long level's records are many)
            await within_grace(loop, records, stop_ns, grace_s, waiting, lambda: run.watch.inflight)
        except asyncio.CancelledError:
            # Ctrl-C: requests still in flight end as "interrupted"; finished ones are kept.
            backend.flush()
            mark_unfinished(records, INTERRUPTED, "the run was interrupted")
            raise
        backend.flush()
    # the window ends at the last request's end, or the cut of those the grace let go: the level held them till then;
    # a level held for a duration spans it, unless halted: an open loop's sparse arrivals (one request of 0.12 s in a
    # 5 s level at 0.5/s) offered their load over the duration, not over their own time (it read 1,093 tok/s)
    ends = [r.end_ns for r in records if r.end_ns is not None and r.phase == phase]
    if stop_ns is not None and run.timed_out() and time.perf_counter_ns() >= stop_ns:
        ends.append(stop_ns)
    return PhaseResult(records=records, start_ns=start_ns, end_ns=max(ends) if ends else time.perf_counter_ns(),
                       source_error=run.source_error)


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
