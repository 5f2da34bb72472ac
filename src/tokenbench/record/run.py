"""A recording from start to stop: the proxy served on ``host:port``, the log's file made with its header, the
writer process beside it; at the stop, the requests in flight given ``grace_s`` to end, the writer drained, and
the ``Summary`` of what was recorded and what failed. ``record`` runs one until it is cancelled (Ctrl-C);
``BackgroundRecording`` runs one on a thread of its own (tests, the overhead benchmark)."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .proxy import Proxy
from .writer import WriterConfig, WriterCounts, WriterLink, header
from ..layout import plural


@dataclass(frozen=True, slots=True)
class RecordConfig:
    upstream: str  # the upstream's root URL (no /v1)
    out: Path
    host: str = "127.0.0.1"
    port: int = 8100  # 0: any free port
    lengths_only: bool = False
    block_size: int = 64
    tokenizer: str | None = None
    key: bytes | None = None  # the hash ids' key (None: a random one, never written)
    grace_s: float = 3.0  # at the stop, how long requests in flight may take to end


@dataclass(slots=True)
class Summary:
    out: Path
    recorded: int = 0
    sessions: int = 0
    subagents: int = 0
    forwarded: int = 0
    others: int = 0  # requests of paths not recorded (models, metrics, completions ...)
    failed: Counter[str] = field(default_factory=Counter)  # why -> recorded APIs' requests that failed
    skipped: Counter[str] = field(default_factory=Counter)  # why -> answered, but the log cannot hold them
    lost: str | None = None  # the writer stopped early: why
    removed: bool = False  # nothing was recorded, and the log (its header alone) was removed

    @property
    def ok(self) -> bool:
        """Whether the recording holds what it was for: a request at least, and all the writer was handed."""
        return self.recorded > 0 and self.lost is None

    def lines(self) -> list[str]:
        if self.removed:
            why = "" if self.failed or self.skipped else \
                ": no chat completion, message or response came through the proxy (is the agent pointed at it?)"
            out = [f"nothing recorded, so {self.out} was not kept{why}"]
        else:
            out = [f"recorded {self.recorded} request{'s' * (self.recorded != 1)} in {self.sessions} "
                   f"session{'s' * (self.sessions != 1)} ({self.subagents} of them subagents) to {self.out}"]
        if self.failed:
            out.append(f"{sum(self.failed.values())} failed, not recorded: " + _reasons(self.failed))
        if self.skipped:
            out.append(f"{sum(self.skipped.values())} answered but not recorded: " + _reasons(self.skipped))
        if self.others:
            out.append(f"{plural(self.others, 'other request')} forwarded (paths that are not "
                       "chat completions, messages or responses)")
        if self.lost:
            out.append(f"{self.lost}: the log holds what it wrote before")
        return out


def _reasons(c: Counter[str]) -> str:
    return ", ".join(f"{n} {why}" for why, n in c.most_common())


class Recording:
    def __init__(self, config: RecordConfig) -> None:
        self.config = config
        self.clock0 = time.perf_counter()
        self.link: WriterLink | None = None
        self.proxy = Proxy(config.upstream, self.clock0, self._hand, keys=config.lengths_only)
        self.port = config.port
        self.summary: Summary | None = None
        self._header_bytes = -1  # the log's header as written (-1: this recording made no log)

    def _hand(self, ex: Any) -> None:
        if self.link is not None:
            self.link.put(ex)

    async def start(self) -> str:
        """Make the log, start the writer (a lengths-only log's tokenizer loaded), then serve: the proxy forwarded
        requests while the tokenizer loaded (4 s), and dropped them unwritten. The proxy's root URL."""
        self._make_log()
        c = self.config
        link = WriterLink(WriterConfig(c.out, c.upstream, c.lengths_only, c.block_size, c.tokenizer, c.key))
        try:
            await link.open()
            self.port = await self.proxy.serve(c.host, c.port)
        except BaseException as e:  # the writer cannot start, the port is taken, or an interrupt: no log is left
            link.abort()
            self._remove_empty_log()
            if isinstance(e, OSError) and e.errno == errno.EADDRINUSE:
                raise UsageError(f"--port {c.port}: {c.host}:{c.port} is in use; pick another with --port") from None
            if isinstance(e, OSError):
                raise UsageError(f"--host {c.host} --port {c.port}: cannot listen there ({e.strerror or e})") from None
            raise
        self.link = link
        host = "127.0.0.1" if c.host in ("0.0.0.0", "", "::") else c.host
        return f"http://{host}:{self.port}"

    def _make_log(self) -> None:
        c = self.config
        started = datetime.fromtimestamp(time.time() - (time.perf_counter() - self.clock0), timezone.utc)
        stamp = started.isoformat(timespec="microseconds").replace("+00:00", "Z")
        try:
            fd = os.open(c.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise UsageError(f"--out {c.out} already exists: name a new file (a log holds one recording)") from None
        except OSError as e:
            raise UsageError(f"--out {c.out}: cannot create it ({e.strerror or e})") from None
        try:
            head = header(c.lengths_only, c.block_size, stamp)
            os.write(fd, head)
            self._header_bytes = len(head)
        finally:
            os.close(fd)

    async def stop(self) -> Summary:
        """Stop serving (requests in flight get ``grace_s`` to end), drain the writer, and say what was done."""
        await self.proxy.stop(self.config.grace_s)
        counts: WriterCounts | None = None
        lost = None
        if self.link is not None:
            counts = await self.link.close()
            lost = self.link.lost
            self.link = None
        w = counts or WriterCounts()
        self.summary = Summary(self.config.out, w.recorded, w.sessions, w.subagents, self.proxy.counts["forwarded"],
                               self.proxy.counts["not recorded"], self.proxy.failed, w.skipped, lost,
                               removed=w.recorded == 0 and lost is None and self._remove_empty_log())
        return self.summary

    def _remove_empty_log(self) -> bool:
        """A log that holds its header alone is removed, so the same ``--out`` can be given again (a log is never
        overwritten); one that holds anything more is kept."""
        try:
            if self.config.out.stat().st_size == self._header_bytes:
                self.config.out.unlink()
                return True
        except OSError:
            pass
        return False


async def record(config: RecordConfig, ready: Callable[[str], None], holder: list[Summary]) -> None:
    """Record until cancelled; the summary goes into ``holder`` (the cancellation propagates: asyncio.run
    raises KeyboardInterrupt after a Ctrl-C however the task ends)."""
    rec = Recording(config)
    root = await rec.start()
    # what start-up made lives as long as the proxy's process: out of the collector's way, so that a full
    # collection, which stops every stream in flight, walks only what requests leave behind
    gc.collect()
    gc.freeze()
    try:
        ready(root)
        await asyncio.Event().wait()
    finally:
        holder.append(await rec.stop())


class BackgroundRecording:
    """A recording on its own thread and event loop: ``url`` (…/v1) and ``root`` while it runs; ``stop()`` (or
    leaving the ``with``) returns its summary."""

    def __init__(self, config: RecordConfig) -> None:
        self.config = config
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="recording")
        self._rec: Recording | None = None
        self.root = ""
        self.summary: Summary | None = None

    @property
    def url(self) -> str:
        return self.root + "/v1"

    @property
    def proxy(self) -> Proxy:
        assert self._rec is not None
        return self._rec.proxy

    def __enter__(self) -> BackgroundRecording:
        self._thread.start()
        self._rec = Recording(self.config)
        try:
            self.root = asyncio.run_coroutine_threadsafe(self._rec.start(), self._loop).result(30)
        except BaseException:
            self._end()
            raise
        return self

    def stop(self) -> Summary:
        if self.summary is None and self._rec is not None:
            self.summary = asyncio.run_coroutine_threadsafe(self._rec.stop(), self._loop).result(180)
            self._end()
        assert self.summary is not None
        return self.summary

    def _end(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __exit__(self, *exc: object) -> None:
        self.stop()
