"""The load-generating worker: its share of each phase run on its own event loop, HTTP session and client.

The same class serves in a local process (``process.py``) and as a Ray actor (``raypool.py``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from ..aiohttp_path import trace_config
from ..client import PreparedRequest, StreamClient
from ..errors import EndpointError
from ..loadgen import ClientWatch, freeze_heap, run_phase
from ..offered_load import Level
from ..records import RequestRecord
from .clocks import ClockSample, clock_sample
from .messages import ClientSpec, Drained, PhaseTask, WorkerReport


class _QueuedPrompts:
    """A worker's prompts: handed over by the driver, topped up while a timed level runs, until the driver's
    source fails (``end``): then the phase sends what it holds and stops, as the driver's own loop does."""

    def __init__(self, prompts: list[tuple[int, PreparedRequest]]) -> None:
        self.pool = list(reversed(prompts))
        self.more = asyncio.Event()
        self.ended: str | None = None  # why no more will come

    def add(self, prompts: list[tuple[int, PreparedRequest]]) -> None:
        self.pool[:0] = list(reversed(prompts))
        self.more.set()

    def end(self, why: str) -> None:
        self.ended = why
        self.more.set()

    async def next(self) -> tuple[int, PreparedRequest]:
        while not self.pool:
            if self.ended is not None:
                raise EndpointError(self.ended)  # run_phase stops sending (loadgen._Phase._prompt)
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
        self._http: aiohttp.ClientSession | None = None
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
            self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                                  trace_configs=[trace_config()])
            self._client = self.spec.build(self._http)
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
            self._watch.start(at_ns=start_at)  # the level's window, as every worker's, from the shared start
        try:
            res = await run_phase(self._client, self._prompts, task.level, task.phase, requests=task.requests,
                                  duration_s=task.duration_s, watch=self._watch, on_done=self._done.append,
                                  seed=task.seed, sink=self._records, start_at_ns=start_at, offset_s=task.offset_s,
                                  grace_s=task.grace_s)
            self._result = (res.start_ns, res.end_ns)
        finally:
            if self._watch is not None:
                await self._watch.stop()

    async def add_prompts(self, prompts: list[tuple[int, PreparedRequest]]) -> None:
        self._prompts.add(prompts)

    async def end_prompts(self, why: str) -> None:
        """The driver's prompts' source failed: send no more once those held are sent."""
        self._prompts.end(why)

    async def drain(self) -> Drained:
        out = self._done[:]  # run_phase holds self._done.append: the list itself stays
        self._done.clear()
        self._drained.update(id(r) for r in out)
        return Drained(out, len(self._prompts.pool), self._task is None or self._task.done(), *self._in_flight())

    def _in_flight(self) -> tuple[int, int | None]:
        """Requests in flight: a measured phase's as its watch counts them (its records run to millions), a
        warm-up's few read off its records, with the send of the one that has waited longest."""
        if self._watch is not None:
            return self._watch.inflight, None
        sent = [r.sent_ns for r in self._records if r.end_ns is None and r.error_kind is None and r.sent_ns]
        return len(sent), min(sent, default=None)

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
        from .. import guard

        snap = await guard.snapshot_before("off" if mode == "off" else "warn", config, set(), "on this node")
        return snap.to_dict() if snap is not None else None  # across the process boundary as JSON

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        if self._client is not None:
            await self._client.close()
        if self._http is not None:
            await self._http.close()
