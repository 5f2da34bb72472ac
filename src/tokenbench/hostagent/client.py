"""The bench machine's side of ``tokenbench agent``: typed answers from the server host, each failure one line.

``AgentClient(url, token)`` asks the agent for its guard snapshot (``GuardSnapshot``), its power (``PowerReport``;
``mark()`` and ``intervals(mark)`` make it a ``power.PowerMeter``, as ``LocalMeter`` is for this machine) and its
host snapshot (``HostSnapshot``). A wrong token, an agent that cannot be reached or does not answer in time, and an
answer that is not the agent's are each an ``AgentError`` whose message says what to do."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from .. import redact
from ..guard_results import GuardSnapshot
from ..errors import EndpointError, UsageError
from ..power.interval import Interval
from ..power.report import PowerReport
from ..servers import once_more_if_closed
from ..wire import WireError, loads
from .host import HostSnapshot

MAX_ANSWER_BYTES = 64 << 20


class AgentError(EndpointError):
    """The server host's agent cannot be used: unreachable, refusing the token, slow, or not an agent."""


def agent_url(url: str) -> str:
    """The agent's root URL as typed (``gpu-box:8765`` -> ``http://gpu-box:8765``); a UsageError-like AgentError for
    one that cannot be an agent's."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    url = url.rstrip("/")
    try:
        u = urlsplit(url)
        u.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise AgentError(f"--agent {redact.url(url)}: not a URL with a port from 1 to 65535") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise AgentError(f"--agent {redact.url(url)}: give the agent's http:// URL, e.g. http://gpu-box:8765")
    if redact.has_userinfo(url):  # the agent takes its token as a bearer, never as URL credentials
        raise UsageError(f"--agent {redact.url(url)} carries credentials: the agent takes its token from "
                         "--agent-token-file, --agent-token or $TOKENBENCH_AGENT_TOKEN; drop them from the URL")
    return url


class AgentClient:
    """Asks the agent at ``url`` with ``token``. Uses ``http`` where given (closed by its owner), else its own
    (``close()``, or ``async with``)."""

    def __init__(self, url: str, token: str, timeout_s: float = 15.0,
                 http: aiohttp.ClientSession | None = None) -> None:
        self.url = agent_url(url)
        self.token = token
        self.timeout_s = timeout_s
        self._http = http
        self._own = http is None

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own and self._http is not None:
            await self._http.close()
            self._http = None

    def _where(self) -> str:
        return f"the agent at {redact.url(self.url)}"

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        """The JSON the agent answers at ``path``; an AgentError in one line for anything else."""
        if self._http is None:
            self._http = aiohttp.ClientSession()
        headers = {"Authorization": f"Bearer {self.token}"}

        async def call(http: aiohttp.ClientSession) -> tuple[int, bytes]:
            async with http.get(self.url + path, params=params, headers=headers,
                                timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as r:
                if (r.content_length or 0) > MAX_ANSWER_BYTES:
                    raise AgentError(f"{self._where()} answered {path} with {r.content_length:,} bytes: is the URL "
                                     "the agent's?")
                return r.status, await r.read()

        try:
            # a proxy in front of the agent, or the agent itself, may close a kept-alive connection as it is reused
            status, body = await once_more_if_closed(self._http, call)
        except aiohttp.ClientConnectorError as e:
            raise AgentError(f"cannot reach {self._where()} ({e.os_error or e}): is `tokenbench agent` running on "
                             "the server host, listening on an address this machine reaches (--host)?") from None
        except (asyncio.TimeoutError, TimeoutError):
            raise AgentError(f"{self._where()} did not answer {path} within {self.timeout_s:g} s") from None
        except aiohttp.ClientError as e:
            raise AgentError(f"cannot talk to {self._where()} ({type(e).__name__}: {e})") from None
        return self._answer(path, status, body)

    def _answer(self, path: str, status: int, body: bytes) -> Any:
        try:
            data = loads(body, self.url + path, max_bytes=MAX_ANSWER_BYTES)
        except WireError:
            data = None
        said = data.get("error") if isinstance(data, dict) and isinstance(data.get("error"), str) else ""
        if status == 401:
            raise AgentError(f"{self._where()} refused the token ({said or 'HTTP 401'}): pass the token it was "
                             "started with (--agent-token)")
        if status != 200:
            raise AgentError(f"{self._where()} answered {path} with HTTP {status}"
                             + (f": {said}" if said else ": is the URL the agent's?"))
        if not isinstance(data, dict):
            raise AgentError(f"{self._where()} answered {path} with something other than its JSON: is the URL "
                             "the agent's?")
        return data

    def _malformed(self, path: str, e: Exception) -> AgentError:
        return AgentError(f"{self._where()} answered {path} in a shape this tokenbench does not read ({e}): is it "
                          "the same version?")

    async def guard(self) -> GuardSnapshot:
        """The clean-bench guard's snapshot taken on the server host now."""
        d = await self.get("/v1/guard")
        snap = d.get("snapshot")
        if not isinstance(snap, dict) or not isinstance(snap.get("clean"), bool):
            raise self._malformed("/v1/guard", ValueError("no snapshot with 'clean'"))
        out = GuardSnapshot.from_dict(snap)
        if out.checks is None:
            raise self._malformed("/v1/guard", ValueError("checks of another shape"))
        return out

    async def power(self, since: float | None = None) -> PowerReport:
        """The host's power readings now; with ``since`` (a mark), each source's readings and interval from it."""
        d = await self.get("/v1/power", None if since is None else {"since": repr(since)})
        try:
            return PowerReport.from_dict(d)
        except ValueError as e:
            raise self._malformed("/v1/power", e) from None

    async def host(self) -> HostSnapshot:
        return HostSnapshot.from_dict(await self.get("/v1/host"))

    async def mark(self) -> float:
        """A level's start, on the host's clock."""
        return (await self.power()).now

    async def intervals(self, since: float) -> list[Interval]:
        """Each source's figure from the mark ``since`` up to now."""
        return (await self.power(since)).intervals
