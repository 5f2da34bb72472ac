"""Talking to a server before a run: discovery of the engine (through ``adapters``), its model list, its
own tokenizer endpoint. Everything that differs per engine lives in its adapter module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit
from typing import Any, TypeVar

import aiohttp

from . import adapters
from .adapters.base import Adapter, Probes
from . import redact
from .errors import EndpointError, UsageError
from .wire import WireError, loads


T = TypeVar("T")


async def once_more_if_closed(http: aiohttp.ClientSession,
                              call: Callable[[aiohttp.ClientSession], Awaitable[T]]) -> T:
    """``call``, a request that changes nothing on the server (a GET, a tokenize), sent once more where the server
    closed the kept-alive connection it went out on. Servers close a connection left idle (uvicorn, which serves
    vLLM, and llama.cpp's server, after 5 s); a request sent as that close comes fails before any answer. aiohttp
    sends a POST no more, and a GET once more through its pool, whose other connections were left idle as long
    and may be closing too. The second try here goes on a new connection of its own."""
    try:
        return await call(http)
    except aiohttp.ServerDisconnectedError:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as fresh:
            return await call(fresh)


@dataclass(slots=True)
class ServerInfo:
    base_url: str
    models: list[str]
    owned_by: str | None = None
    engine_version: str | None = None
    slots: int | None = None  # llama.cpp: parallel slots
    slot_ctx: int | None = None  # the context one request may fill (llama.cpp: a slot's; vLLM: max_model_len)
    adapter: Adapter = adapters.GENERIC  # the server's quirks: everything that differs per server
    models_error: str | None = None  # why /v1/models could not be read, when --model made it optional

    @property
    def engine(self) -> str | None:
        """The engine's name, as its adapter knows it (None: a generic OpenAI-compatible server)."""
        return None if self.adapter is adapters.GENERIC else self.adapter.name

    @property
    def tokenize_path(self) -> str | None:
        """The root-relative path of the server's tokenizer endpoint, if its adapter knows one."""
        return self.adapter.tokenize_path

    @property
    def batches(self) -> bool | None:
        """Concurrent requests run together (True), one at a time (False), or unknown (None)."""
        return self.adapter.batches(self.slots)

    @property
    def root(self) -> str:
        return root_url(self.base_url)

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": self.models,
            "owned_by": self.owned_by,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "slots": self.slots,
            "slot_ctx": self.slot_ctx,
            "tokenize_path": self.tokenize_path,
            "batches": self.batches,
            "models_error": self.models_error,
        }


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """A blocking probe: does ``url`` answer 200? (For waiting on a server that is starting.)"""
    return http_status(url, timeout=timeout) == 200


def http_status(url: str, api_key: str | None = None, timeout: float = 2.0) -> int | None:
    """A blocking probe: the HTTP status ``url`` answers with (``api_key`` sent as a bearer), None where nothing
    answers yet. (For waiting on a server that is starting.)"""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def key_refused(url: str, status: int, api_key: str | None) -> str:
    """What a 401 or 403 says: the key given was wrong, or, none given, the server asks for one."""
    if api_key:
        return f"{url} refused the API key given (HTTP {status}): check --api-key or OPENAI_API_KEY"
    return f"{url} asks for an API key (HTTP {status}): pass --api-key or set OPENAI_API_KEY"


def normalize_base_url(url: str) -> str:
    """The OpenAI base URL (``…/v1``) of what a user typed; refuses what cannot be measured safely."""
    url = url.strip().rstrip("/")
    scheme = url.split("://", 1)[0].lower() if "://" in url else None
    if scheme is not None and scheme not in ("http", "https"):
        raise UsageError(f"--url {redact.url(url)}: only http:// and https:// endpoints can be measured")
    try:
        urlsplit(url if scheme else "http://" + url).port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise UsageError(f"--url {redact.url(url)}: the port is not a number from 1 to 65535") from None
    if redact.has_userinfo(url if scheme else "http://" + url):
        raise UsageError(f"--url {redact.url(url if scheme else 'http://' + url)} carries credentials: pass the key "
                         "with --api-key or OPENAI_API_KEY instead, so that it is sent but never stored")
    for suffix in ("/chat/completions", "/completions"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    if not url.endswith("/v1"):
        url += "/v1"
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url


def on_this_machine(url: str) -> bool:
    """The URL names this machine (a loopback or the any-address host): its server shares this machine's cores
    and shows among its processes."""
    host = (urlsplit(url if "://" in url else "http://" + url).hostname or "").lower()
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.")


def listening_pids(url: str) -> set[int]:
    """The processes of this machine listening on a URL's port (several with SO_REUSEPORT); none for a URL of
    another machine, or where they cannot be read (another user's process)."""
    import psutil

    if not on_this_machine(url):
        return set()
    u = urlsplit(url if "://" in url else "http://" + url)
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        return {c.pid for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    except (psutil.Error, OSError):
        return set()


def server_cores(url: str) -> set[int] | None:
    """The cores the processes listening on a URL of this machine may run on (several with SO_REUSEPORT: their
    union); None when none is found (another user's process, or a platform that cannot tell)."""
    import psutil

    cores: set[int] = set()
    try:
        for pid in listening_pids(url):
            cores |= set(psutil.Process(pid).cpu_affinity() or [])
    except (psutil.Error, OSError, AttributeError):  # AttributeError: no cpu_affinity on this platform
        return None
    return cores or None


def root_url(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


async def _get(http: aiohttp.ClientSession, url: str, headers: dict[str, str],
               timeout: float) -> tuple[int, str, bytes]:
    """A GET's status, Server header and body, of an error at most its first 4 KiB (asked once more where a
    kept-alive connection was closed)."""
    async def once(on: aiohttp.ClientSession) -> tuple[int, str, bytes]:
        async with on.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            return r.status, r.headers.get("Server", ""), await (r.read() if r.status == 200 else r.content.read(4096))
    return await once_more_if_closed(http, once)


async def _get_json(http: aiohttp.ClientSession, url: str, headers: dict[str, str], timeout: float) -> Any:
    try:
        status, _, body = await _get(http, url, headers, timeout)
        return loads(body, url) if status == 200 else None
    except (aiohttp.ClientError, asyncio.TimeoutError, WireError):
        return None


async def discover(
    http: aiohttp.ClientSession, base_url: str, api_key: str | None = None, timeout: float = 10.0,
    model: str | None = None,
) -> ServerInfo:
    """Ask the server what it serves and what it is. Raises EndpointError when it cannot be reached.

    With ``model`` given, a ``/v1/models`` that fails (Transformers serve without a Hugging Face cache answers
    500) is noted in ``models_error`` instead of stopping the run: the check request proves the name."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body: Any = None
    models_error = None
    try:
        status, server_header, answer = await _get(http, f"{base_url}/models", headers, timeout)
    except aiohttp.ClientConnectorError as e:
        raise EndpointError(f"cannot reach {base_url} ({e.os_error or e}): is the server running? check --url") from e
    except (asyncio.TimeoutError, TimeoutError) as e:
        # a plain-HTTP server waits for the TLS handshake's request that never comes
        tls = " (if it serves plain HTTP: http://, not https://)" if base_url.startswith("https://") else ""
        raise EndpointError(f"{base_url} did not answer within {timeout:g} s: check --url{tls} and the server") from e
    except aiohttp.ClientError as e:
        raise EndpointError(f"cannot talk to {base_url}: {e}; check --url") from e
    if status in (401, 403):
        if b"the agent's token" in answer[:4096]:  # hostagent/server.py's refusal
            raise EndpointError(f"{base_url} is a tokenbench agent, not a model server: give the server's "
                                "own URL as --url, and the agent's as --agent")
        raise EndpointError(key_refused(base_url, status, api_key))
    if status != 200:
        models_error = f"{base_url}/models answered HTTP {status}"
    else:
        try:
            body = loads(answer, f"{base_url}/models")
        except WireError:
            models_error = f"{base_url}/models did not return JSON"
    if models_error and model is None:
        raise EndpointError(f"{models_error}: is --url the OpenAI-compatible base (…/v1)? "
                            "If it is right but cannot list its models, pass --model")
    root = root_url(base_url)
    version, props, sgl, ollama, openapi = await asyncio.gather(
        _get_json(http, f"{root}/version", headers, 3),
        _get_json(http, f"{root}/props", headers, 3),
        _get_json(http, f"{root}/get_server_info", headers, 3),
        _get_json(http, f"{root}/api/version", headers, 3),
        _get_json(http, f"{root}/openapi.json", headers, 3),
    )
    probes = Probes.of(body, server_header, version, props, sgl, ollama, openapi)
    adapter = adapters.detect(probes)
    facts = adapter.facts(probes)
    ids = [m.get("id") for m in probes.model_entries]
    # (OpenAPI's info.version is the app's own, FastAPI's default "0.1.0", not the engine's: not used.)
    return ServerInfo(
        base_url=base_url, models=[i for i in ids if isinstance(i, str)], owned_by=probes.owned_by,
        engine_version=facts.version, slots=facts.slots, slot_ctx=facts.slot_ctx, adapter=adapter,
        models_error=models_error,
    )


def check_model(info: ServerInfo, model: str | None, url: str) -> str:
    """The model to request: the one asked for, else the first listed. Refuses a name the server does not list
    (when it lists what it serves)."""
    chosen = model or (info.models[0] if info.models else None)
    if chosen is None:
        raise EndpointError(f"{url} lists no models: pass --model")
    if info.models and chosen not in info.models and info.adapter.lists_served_model:
        raise EndpointError(
            f"model '{chosen}' is not served at {url}; served: {', '.join(info.models[:10])}: pass one with --model"
        )
    return chosen


class ServerTokenizer:
    """The served model's own tokenizer, through the server's tokenize/detokenize endpoints."""

    def __init__(self, http: aiohttp.ClientSession, info: ServerInfo, model: str, api_key: str | None) -> None:
        if info.tokenize_path is None:
            raise ValueError("server has no tokenize endpoint")
        self.http = http
        self.info = info
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.description = f"server {info.tokenize_path}"

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:  # tokenizing changes nothing on the server: asked again where a kept-alive connection was closed
            return await once_more_if_closed(self.http, lambda on: self._post_once(on, path, body))
        except WireError as e:
            raise EndpointError(f"the server's tokenizer failed: {e}; pass --tokenizer instead") from e
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise EndpointError(f"the server's tokenizer at {self.info.root}{path} failed ({e}); is it still up?") from e

    async def _post_once(self, http: aiohttp.ClientSession, path: str, body: dict[str, Any]) -> Any:
        async with http.post(f"{self.info.root}{path}", json=body, headers=self.headers) as r:
            if r.status != 200:
                raise EndpointError(f"{self.info.root}{path} answered HTTP {r.status}; pass --tokenizer instead")
            return loads(await r.read(), f"{self.info.root}{path}")

    async def encode(self, text: str) -> list[int]:
        body = await self._post(self.info.tokenize_path or "", self.info.adapter.tokenize_request(text, self.model))
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise EndpointError(f"the server's tokenizer at {self.info.root}{self.info.tokenize_path} answered "
                                "without a list of token ids; pass --tokenizer instead")
        return tokens

    async def decode(self, ids: list[int]) -> str:
        path = (self.info.tokenize_path or "").replace("tokenize", "detokenize")
        body = await self._post(path, self.info.adapter.detokenize_request(ids, self.model))
        try:
            return self.info.adapter.detokenized_text(body)
        except (KeyError, TypeError) as e:
            raise EndpointError(f"the server's detokenizer at {self.info.root}{path} answered without text; "
                                "pass --tokenizer instead") from e
