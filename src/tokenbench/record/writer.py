"""The log writer: its own process, so that parsing what the proxy forwarded (a long agent's request is megabytes
of JSON) never holds the proxy's interpreter while a stream waits on it. The proxy hands it each answered request
(``exchange.Exchange``) as the answer ends; it parses it once (``chat``, ``anthropic``, ``responses``), places it
in its session (``sessions``), counts its prompt into hash ids where the log is lengths-only (``tokens``), and
appends one line, whole, in one write: a log cut short by a crash still ends on a complete line.

``WriterLink`` is the proxy's end: exchanges go over a socket pair through the proxy's event loop's buffered
transport (never blocking it), and at the close the writer's counts come back. The child is a fresh interpreter (``python -c``), in a session of
its own: Ctrl-C in the terminal stops the proxy, which then tells the writer to finish.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import redact
from .anthropic import answer as messages_answer
from .anthropic import request as messages_request
from .chat import answer as chat_answer
from .chat import request as chat_request
from .exchange import Exchange
from .parsed import Answer, Request, Unrecordable, body_text
from .responses import answer as responses_answer
from .responses import request as responses_request
from .sessions import Placed, Sessions, Turn
from ..errors import UsageError
from .tokens import ROUNDING, HashIds, LocalChatTokenizer, TokenizerError, UpstreamTokenizer, answer_text

CHILD_ENTRY = "from tokenbench.record.writer import child_main; child_main({fd})"
#: The most reasons for not recording a request said as they first come up (all are counted).
MAX_NOTICES = 20
#: Each recorded API's parsers: its request's bytes, its answer's bytes (and Content-Type).
PARSERS = {"chat": (chat_request, chat_answer), "messages": (messages_request, messages_answer),
           "responses": (responses_request, responses_answer)}


@dataclass(frozen=True, slots=True)
class WriterConfig:
    out: Path
    upstream: str  # the upstream's root URL (for its tokenizer)
    lengths_only: bool = False
    block_size: int = 64
    tokenizer: str | None = None
    key: bytes | None = None  # the hash ids' key (None: a random one)


@dataclass(slots=True)
class WriterCounts:
    recorded: int = 0
    sessions: int = 0
    subagents: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # why -> requests answered but not recorded


def header(lengths_only: bool, block_size: int, started_at: str) -> bytes:
    head: dict[str, Any] = {"format": "tokenbench-session-log", "version": 1, "lengths_only": lengths_only}
    if lengths_only:
        head.update(block_size=block_size, rounding=ROUNDING)
    head["started_at"] = started_at
    return (json.dumps(head) + "\n").encode()


def write_whole(fd: int, data: bytes) -> None:
    """All of ``data`` (one line) in as few writes as the kernel takes: one, for a file."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _json_line(obj: dict[str, Any]) -> bytes:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate the client sent escaped: kept escaped
        return (json.dumps(obj, separators=(",", ":")) + "\n").encode("ascii")


def _seconds(t: float) -> float:
    return round(max(0.0, t), 6)


class Writer:
    """Takes exchanges in the order their answers ended and appends their lines to ``config.out``."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        self.counts = WriterCounts()
        self.sessions = Sessions()
        self.fd = os.open(config.out, os.O_WRONLY | os.O_APPEND)
        self.hashes = HashIds(config.block_size, config.key)
        self.tokenizer: LocalChatTokenizer | UpstreamTokenizer | None = None
        if config.lengths_only:
            self.tokenizer = (LocalChatTokenizer(config.tokenizer) if config.tokenizer
                              else UpstreamTokenizer(config.upstream))

    async def take(self, ex: Exchange) -> None:
        try:
            line = await self._line(ex)
        except Unrecordable as e:
            self.skip(str(e)[:120])
            return
        except TokenizerError as e:
            self.skip(f"not counted: {e}"[:160])
            return
        write_whole(self.fd, _json_line(line))
        self.counts.recorded += 1

    def skip(self, why: str) -> None:
        """A request answered but not recorded: counted, and said on stderr the first time a reason comes up (a
        recording that records nothing is known before its end)."""
        if why not in self.counts.skipped and len(self.counts.skipped) < MAX_NOTICES:
            print(f"tokenbench record: a request was forwarded but not recorded: {redact.keys(why)}", file=sys.stderr,
                  flush=True)
        self.counts.skipped[why] += 1

    async def _line(self, ex: Exchange) -> dict[str, Any]:
        parse_request, parse_answer = PARSERS[ex.api]
        req: Request = parse_request(ex.body)
        ans: Answer = parse_answer(body_text(ex.chunks, ex.content_encoding), ex.content_type)
        messages = req.messages
        if req.previous is not None:
            before = self.sessions.history(req.previous)
            if before is None:
                raise Unrecordable("a response continuing one that was not recorded")
            messages = (*before, *messages)
        tokens = await self._tokens(ex, req, messages, ans) if self.tokenizer is not None else None
        sent, first, end = _seconds(ex.sent), _seconds(ex.first_byte), _seconds(ex.end)
        turn = Turn(sent, end, messages, ans.message, ex.session, ex.parent, req.scope, req.previous,
                    ans.response_id, ex.overlapped)
        placed = self.sessions.place(turn)
        self.counts.sessions, self.counts.subagents = len(self.sessions), self.sessions.subagents
        line: dict[str, Any] = {"session": redact.keys(placed.session),
                                "parent": redact.keys(placed.parent) if placed.parent is not None else None,
                                "sent": sent, "first_byte": max(sent, first), "end": max(sent, first, end),
                                "pause": _pause(placed, sent)}
        if tokens is not None:
            line["usage"], line["hash_ids"] = tokens
            return line
        line["usage"] = {"prompt_tokens": ans.counts.prompt, "completion_tokens": ans.counts.completion,
                         "cached_tokens": ans.counts.cached}
        request: dict[str, Any] = {"messages": [m.to_wire() for m in messages]}
        if req.tools is not None:
            request["tools"] = list(req.tools)
        if req.tool_choice is not None:
            request["tool_choice"] = req.tool_choice
        line["request"] = redact.stored(request)
        line["response"] = redact.stored(ans.message.to_wire())
        return line

    async def _tokens(self, ex: Exchange, req: Request, messages: tuple[Any, ...],
                      ans: Answer) -> tuple[dict[str, Any], list[int]]:
        """The usage and hash ids of a lengths-only line: the server's counts where it gave them, else the
        tokenizer's."""
        assert self.tokenizer is not None
        wire = [m.to_wire() for m in messages]
        ids = await self.tokenizer.prompt(wire, list(req.tools) if req.tools else None, req.model, ex.auth)
        prompt = ans.counts.prompt or len(ids)
        if prompt < 1:
            raise Unrecordable("a prompt of no tokens")
        completion = ans.counts.completion
        if completion is None:
            text = answer_text(ans.message)
            completion = len(await self.tokenizer.text(text, req.model, ex.auth)) if text else 0
        cached = ans.counts.cached if ans.counts.prompt is not None else None
        usage = {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached}
        return usage, self.hashes.ids(ids, prompt)

    async def close(self) -> WriterCounts:
        if self.tokenizer is not None:
            await self.tokenizer.close()
        os.fsync(self.fd)
        os.close(self.fd)
        return self.counts


def _pause(placed: Placed, sent: float) -> float | None:
    if placed.previous_end is None or not placed.known:
        return None
    return _seconds(sent - _seconds(placed.previous_end))


# ---- the child process and the proxy's end of it ------------------------------------------------------------------

def child_main(fd: int) -> None:
    """The writer process: its config, then exchanges until ``None``; it answers with its counts."""
    from multiprocessing.connection import Connection

    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:  # background work: the proxy and the agents come first for a core
        os.nice(10)
    except OSError:
        pass
    conn = Connection(fd)
    config = conn.recv()
    asyncio.run(_serve(conn, config))


async def _serve(conn: Any, config: WriterConfig) -> None:
    try:
        writer = Writer(config)
    except Exception as e:  # a --tokenizer that is no tokenizer: said before the proxy says where to point agents
        said = str(e) if isinstance(e, UsageError) else \
            f"--tokenizer {config.tokenizer}: cannot be loaded as a tokenizer ({type(e).__name__})"
        conn.send(("refused", said.splitlines()[0] if said else type(e).__name__))
        return
    conn.send(("ready", None))
    loop = asyncio.get_running_loop()
    while True:
        try:
            ex = await loop.run_in_executor(None, conn.recv)
        except (EOFError, OSError):  # the proxy is gone: what came is written
            ex = None
        if ex is None:
            break
        try:
            await writer.take(ex)
        except Exception as e:  # a bug here must not lose the requests after it
            writer.skip(f"the log writer failed on it ({type(e).__name__})")
    counts = await writer.close()
    try:
        conn.send(counts)
    except OSError:
        pass


def frame(obj: Any) -> bytes:
    """``obj`` as multiprocessing's ``Connection`` frames a message (the writer reads it with ``recv``)."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    n = len(data)
    return (struct.pack("!i", n) if n < 0x7FFFFFFF else struct.pack("!iQ", -1, n)) + data


class _Replies(asyncio.Protocol):
    """The proxy's end of the socket: what the writer says back (whether it is ready, then its counts), and whether
    it went away (each then None)."""

    def __init__(self) -> None:
        self.buf = b""
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[Any] = loop.create_future()
        self.reply: asyncio.Future[Any] = loop.create_future()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            (n,) = struct.unpack("!i", self.buf[:4])
            if n < 0 or len(self.buf) < 4 + n:
                return
            message, self.buf = pickle.loads(self.buf[4:4 + n]), self.buf[4 + n:]
            for waiting in (self.ready, self.reply):
                if not waiting.done():
                    waiting.set_result(message)
                    break

    def connection_lost(self, exc: Exception | None) -> None:
        for waiting in (self.ready, self.reply):
            if not waiting.done():
                waiting.set_result(None)


class WriterLink:
    """The proxy's end of the writer process. ``put`` hands an exchange to the event loop's buffered transport of
    the socket: it never blocks the loop and takes no other thread; ``close`` waits for every exchange put to be
    written and returns the writer's counts (None when the writer died: ``lost`` says so)."""

    def __init__(self, config: WriterConfig) -> None:
        self.config = config
        mine, theirs = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD_ENTRY.format(fd=theirs.fileno())],
                                     pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self._sock = mine
        self._transport: asyncio.Transport | None = None
        self._replies: _Replies | None = None
        self.lost: str | None = None

    async def open(self, timeout: float = 300.0) -> None:
        """Start the writer: it loads what it needs (a lengths-only log's tokenizer) and says it is ready, or
        why it cannot be (a ``UsageError``, the writer gone)."""
        loop = asyncio.get_running_loop()
        transport, self._replies = await loop.create_unix_connection(_Replies, sock=self._sock)
        self._transport = transport
        self._transport.write(frame(self.config))
        try:
            said = await asyncio.wait_for(asyncio.shield(self._replies.ready), timeout)
        except asyncio.TimeoutError:
            said = ("refused", f"the log writer did not start within {timeout:g} s")
        if said is None:
            said = ("refused", "the log writer stopped as it started")
        if said[0] != "ready":
            await self.close(timeout=5)
            raise UsageError(said[1])

    def abort(self) -> None:
        """Stop the writer at once, whatever it was doing (it had written nothing: the proxy had not served)."""
        if self._transport is not None:
            self._transport.abort()
        self._sock.close()
        self.proc.kill()
        self.proc.wait()

    def put(self, ex: Exchange) -> None:
        if self._transport is None or self._transport.is_closing():
            self.lost = self.lost or "the log writer stopped"
            return
        self._transport.write(frame(ex))

    async def close(self, timeout: float = 120.0) -> WriterCounts | None:
        counts = None
        if self._transport is not None and self._replies is not None:
            if not self._transport.is_closing():
                self._transport.write(frame(None))
            try:
                counts = await asyncio.wait_for(asyncio.shield(self._replies.reply), timeout)
            except asyncio.TimeoutError:
                counts = None
            self._transport.close()
        else:
            self._sock.close()
        try:
            await asyncio.wait_for(asyncio.to_thread(self.proc.wait), 10)
        except asyncio.TimeoutError:
            self.proc.kill()
            await asyncio.to_thread(self.proc.wait)
        if counts is None:
            self.lost = self.lost or "the log writer stopped before it said what it wrote"
        return counts
