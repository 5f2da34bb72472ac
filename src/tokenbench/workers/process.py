"""A worker in a local process (``--workers N``): the child's entry (``child_main``, its serving loop) and the
driver's handle on it (``ProcessHandle``), the two ends of one socket pair."""

from __future__ import annotations

import asyncio
import itertools
import signal
import socket
from typing import Any

from .handle import WorkerLost
from .messages import ClientSpec
from .worker import LoadWorker

#: The child's entry, as the driver starts it (``python -c``): a module path, kept in step with ``child_main``.
CHILD_ENTRY = "from tokenbench.workers.process import child_main; child_main({fd})"


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
            [sys.executable, "-c", CHILD_ENTRY.format(fd=theirs.fileno())],
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
