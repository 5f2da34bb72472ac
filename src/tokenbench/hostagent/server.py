"""``tokenbench agent``: a small read-only service on the server host, so a bench run from another machine checks and
meters the box it is deciding about.

It answers GET only, as JSON, and every request must carry its token as a bearer token:
- ``/v1/guard``: the clean-bench guard's checks as they run on this host (``guard.snapshot``), the server's own
  processes (``--pid``, or those listening on ``--port-of-server``, found at each request) not counted as other work;
- ``/v1/power``: the power sources' readings now (``now`` is the mark of a level's start); ``?since=MARK``: each
  source's readings and its interval's joules and mean watts from the mark up to now (``power.report``);
- ``/v1/host``: the host's snapshot (``host.host_snapshot``).
A wrong or missing token is 401, an unknown path 404, another method 405, each with a one-line ``error``.

Why the host samples and the client asks for the interval: the sources are read on the host's own clock at a steady
pace, whatever the network between does, and a level costs two requests, at its start and at its end. Nothing on
the client depends on the two machines' clocks agreeing, and nothing the agent keeps depends on who asks (the
readings of the last two hours, the same for every client), so it holds no state a request could change.

Nothing it serves runs a shell or writes anything: the guard's checks and the sources only read ``/proc``, ``/sys``,
NVML, amdsmi, and the page or command the user started it with. It binds 127.0.0.1 unless ``--host`` says
otherwise."""

from __future__ import annotations

import asyncio
import hmac
import math
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .. import guard
from ..power.report import report
from ..power.sampler import LocalMeter
from ..servers import listening_pids
from .host import host_snapshot

PATHS = ("/v1/guard", "/v1/power", "/v1/host")
DEFAULT_PORT = 8765  # cli/agent.py says it too, without importing aiohttp's server for --help


@dataclass(slots=True)
class AgentConfig:
    """What the agent was started with: its token, where it listens, the server's processes (``pids``, and those
    listening on ``server_port`` of this host), the guard's thresholds."""

    token: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    pids: set[int] = field(default_factory=set)
    server_port: int | None = None
    guard_config: dict[str, dict[str, Any]] = field(default_factory=dict)
    guard_sample_s: float = 0.5

    def targets(self) -> set[int]:
        """The server's processes now: those given, and those listening on its port (a restarted server has new
        ones)."""
        found = set(self.pids)
        if self.server_port:
            found |= listening_pids(f"http://127.0.0.1:{self.server_port}")
        return found


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


def _door(token: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Every request shows the token first; then the path and method are the router's, its refusals one line."""
    expected = token.encode()

    @web.middleware
    async def door(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                   ) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        scheme, _, credentials = auth.strip().partition(" ")
        given = credentials.strip().encode() if scheme.lower() == "bearer" else b""  # any case (RFC 7235)
        if not given or not hmac.compare_digest(given, expected):
            why = "no bearer token" if not given else "wrong bearer token"
            return _error(401, f"{why}: send the agent's token as 'Authorization: Bearer TOKEN'",
                          **{"WWW-Authenticate": "Bearer"})
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return _error(404, f"no such path {request.path}: the agent serves GET {', '.join(PATHS)}")
        except web.HTTPMethodNotAllowed:
            return _error(405, f"{request.method} {request.path}: the agent answers GET only")

    return door


class Agent:
    """The service: its config and the power meter it samples from start to stop."""

    def __init__(self, cfg: AgentConfig, meter: LocalMeter) -> None:
        self.cfg = cfg
        self.meter = meter
        self.hostname = socket.gethostname()
        self.started = time.monotonic()  # no mark it answered is older

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_door(self.cfg.token)], client_max_size=4096)
        app.router.add_get("/v1/guard", self.guard)
        app.router.add_get("/v1/power", self.power)
        app.router.add_get("/v1/host", self.host)
        return app

    async def guard(self, request: web.Request) -> web.Response:
        targets = self.cfg.targets()
        env = guard.GuardEnv(config=self.cfg.guard_config or guard.load_config(), target_pids=targets,
                             sample_s=self.cfg.guard_sample_s)
        snap = await asyncio.to_thread(guard.snapshot, env)
        return web.json_response({"host": self.hostname, "targets": sorted(targets), "snapshot": snap.to_dict()})

    async def power(self, request: web.Request) -> web.Response:
        since: float | None = None
        if "since" in request.query:
            try:
                since = float(request.query["since"])
            except ValueError:
                since = math.nan
            # a mark from before this agent started, or not yet come, is none it answered: its interval would be
            # empty or span hours it never read
            if not math.isfinite(since) or not self.started <= since <= time.monotonic():
                return _error(400, f"since={request.query['since'][:40]!r}: give a mark this agent answered (now)")
        rep = await asyncio.to_thread(report, self.meter.samplers, self.meter.notes, since)
        return web.json_response({"host": self.hostname, **rep.to_dict()})

    async def host(self, request: web.Request) -> web.Response:
        sources = [s.to_dict() for s in self.meter.sources]
        snap = await asyncio.to_thread(host_snapshot, sources, self.meter.notes)
        return web.json_response(snap.to_dict())


async def serve(cfg: AgentConfig, meter: LocalMeter, ready: Callable[[str], None] | None = None,
                stop: asyncio.Event | None = None) -> None:
    """Sample and answer until ``stop`` is set (or the task is cancelled: Ctrl-C); ``ready`` is told the URL once
    it listens. A port that cannot be bound is an OSError, as the socket said it."""
    runner = web.AppRunner(Agent(cfg, meter.start()).app(), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, cfg.host, cfg.port)
        await site.start()
        if ready is not None:
            host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
            bound = runner.addresses  # the port it bound: --port 0 takes any free one
            ready(f"http://{host}:{bound[0][1] if bound else cfg.port}")
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()
        await meter.close()
