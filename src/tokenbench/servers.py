"""What differs per server: discovery of the engine and its version, the fields that fix the output
length, slot limits, and the server's own tokenizer endpoint.

Each engine honours a different way of forcing a fixed output length, and we verify on every response
that it worked (see ``metrics.summarize``: ``output_short``):
- vLLM: ``ignore_eos`` and ``min_tokens``; SGLang: ``ignore_eos``;
- llama.cpp's ``llama-server``: ``ignore_eos`` (``n_predict`` mirrors ``max_tokens``), ``cache_prompt: false``
  so its prompt cache cannot serve a repeated prefix;
- llama-cpp-python's server: ``min_tokens`` and a ``logit_bias`` of -100 on EOS;
- Transformers serve: a ``logit_bias`` of -100.0 on EOS (a float: 5.23 rejects an integer bias and the whole
  server shuts down), and nothing else: it answers 422 to any field outside the OpenAI schema.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .errors import EndpointError

#: Engines that stream exactly one generated token per chunk: without usage, counting chunks is exact,
#: while re-tokenizing the generated text is not (text does not always re-tokenize to the same tokens).
ONE_TOKEN_PER_CHUNK = frozenset({"llama-cpp-python"})


@dataclass(slots=True)
class ServerInfo:
    base_url: str
    models: list[str]
    owned_by: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    slots: int | None = None  # llama.cpp: parallel slots
    slot_ctx: int | None = None  # llama.cpp: context per slot
    tokenize_path: str | None = None  # root-relative path of the server's tokenizer endpoint
    props: dict[str, Any] = field(default_factory=dict)

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
        }


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """A blocking probe: does ``url`` answer 200? (For waiting on a server that is starting.)"""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    if not url.endswith("/v1"):
        url += "/v1"
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url


def root_url(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


async def _get_json(session: aiohttp.ClientSession, url: str, headers: dict[str, str], timeout: float) -> Any:
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
            if r.status != 200:
                return None
            return await r.json(content_type=None)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        return None


async def discover(
    session: aiohttp.ClientSession, base_url: str, api_key: str | None = None, timeout: float = 10.0
) -> ServerInfo:
    """Ask the server what it serves and what it is. Raises EndpointError when it cannot be reached."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        async with session.get(
            f"{base_url}/models", headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as r:
            if r.status in (401, 403):
                raise EndpointError(
                    f"{base_url} refused the API key (HTTP {r.status}): pass --api-key or set OPENAI_API_KEY"
                )
            if r.status != 200:
                raise EndpointError(
                    f"{base_url}/models answered HTTP {r.status}: is --url the OpenAI-compatible base (…/v1)?"
                )
            body = await r.json(content_type=None)
            server_header = r.headers.get("Server", "")
    except aiohttp.ClientConnectorError as e:
        raise EndpointError(f"cannot reach {base_url} ({e.os_error or e}): is the server running? check --url") from e
    except (asyncio.TimeoutError, TimeoutError) as e:
        raise EndpointError(f"{base_url} did not answer within {timeout:g} s: check --url and the server") from e
    except aiohttp.ClientError as e:
        raise EndpointError(f"cannot talk to {base_url}: {e}; check --url") from e
    except ValueError as e:
        raise EndpointError(f"{base_url}/models did not return JSON: is --url an OpenAI-compatible API?") from e
    data = body.get("data", []) if isinstance(body, dict) else []
    info = ServerInfo(base_url=base_url, models=[m.get("id", "") for m in data if isinstance(m, dict)])
    if data and isinstance(data[0], dict):
        info.owned_by = data[0].get("owned_by")
    root = info.root
    version, props, sgl, ollama, lcp = await asyncio.gather(
        _get_json(session, f"{root}/version", headers, 3),
        _get_json(session, f"{root}/props", headers, 3),
        _get_json(session, f"{root}/get_server_info", headers, 3),
        _get_json(session, f"{root}/api/version", headers, 3),
        _get_json(session, f"{root}/openapi.json", headers, 3),
    )
    paths = lcp.get("paths", {}) if isinstance(lcp, dict) else {}
    if isinstance(props, dict) and ("default_generation_settings" in props or "total_slots" in props):
        info.engine = "llama.cpp"
        info.props = props
        info.engine_version = props.get("build_info")
        info.slots = props.get("total_slots")
        gen = props.get("default_generation_settings") or {}
        info.slot_ctx = gen.get("n_ctx") or props.get("n_ctx")
        info.tokenize_path = "/tokenize"
    elif isinstance(sgl, dict) and ("version" in sgl or "server_args" in sgl):
        info.engine = "sglang"
        info.engine_version = sgl.get("version")
    elif info.owned_by == "vllm" or (isinstance(version, dict) and "version" in version and info.owned_by != "llamacpp"):
        info.engine = "vllm"
        info.engine_version = version.get("version") if isinstance(version, dict) else None
        info.tokenize_path = "/tokenize"
    elif isinstance(ollama, dict) and "version" in ollama:
        info.engine = "ollama"
        info.engine_version = ollama.get("version")
    elif "/extras/tokenize" in paths or "/v1/engines/copilot-codex/completions" in paths:
        info.engine = "llama-cpp-python"
        info.tokenize_path = "/extras/tokenize"
    elif "/v1/systemone" in paths or ("/v1/responses" in paths and "uvicorn" in server_header):
        info.engine = "transformers"
    # (OpenAPI's info.version is the app's own, FastAPI's default "0.1.0", not the engine's: not used.)
    return info


def output_length_fields(engine: str | None, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
    """The request fields that make ``engine`` generate exactly ``max_tokens`` tokens, as far as it allows."""
    bias = {str(eos_token_id): -100.0} if eos_token_id is not None else None
    if engine == "vllm":
        return {"ignore_eos": True, "min_tokens": max_tokens}
    if engine == "sglang":
        return {"ignore_eos": True}
    if engine == "llama.cpp":
        return {"ignore_eos": True, "n_predict": max_tokens, "cache_prompt": False}
    if engine == "llama-cpp-python":
        out: dict[str, Any] = {"min_tokens": max_tokens}
        if bias:
            out["logit_bias"] = bias
        return out
    if engine == "transformers":
        return {"logit_bias": bias} if bias and api == "chat" else {}
    return {}


def slot_warnings(info: ServerInfo, concurrency: int | None, tokens_per_request: int) -> list[str]:
    out = []
    if info.engine == "llama.cpp":
        if concurrency and info.slots and concurrency > info.slots:
            out.append(
                f"concurrency {concurrency} exceeds the server's {info.slots} slots: requests queue; "
                f"start llama-server with -np {concurrency} for a true level"
            )
        if info.slot_ctx and tokens_per_request > info.slot_ctx:
            out.append(
                f"a request needs {tokens_per_request} tokens of context but each slot has {info.slot_ctx}: "
                "raise -c (context is split across slots)"
            )
    if info.engine == "llama-cpp-python" and concurrency and concurrency > 1:
        out.append("llama-cpp-python's server runs one request at a time: concurrent requests only queue")
    return out


class ServerTokenizer:
    """The served model's own tokenizer, through the server's tokenize/detokenize endpoints."""

    def __init__(self, session: aiohttp.ClientSession, info: ServerInfo, model: str, api_key: str | None) -> None:
        if info.tokenize_path is None:
            raise ValueError("server has no tokenize endpoint")
        self.session = session
        self.info = info
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.description = f"server {info.tokenize_path}"

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            async with self.session.post(f"{self.info.root}{path}", json=body, headers=self.headers) as r:
                if r.status != 200:
                    raise EndpointError(f"{self.info.root}{path} answered HTTP {r.status}; pass --tokenizer instead")
                return await r.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            raise EndpointError(f"the server's tokenizer at {self.info.root}{path} failed ({e}); is it still up?") from e

    async def encode(self, text: str) -> list[int]:
        path = self.info.tokenize_path or ""
        if path == "/extras/tokenize":
            body = await self._post(path, {"input": text, "model": self.model})
        elif self.info.engine == "llama.cpp":
            body = await self._post(path, {"content": text, "add_special": False})
        else:
            body = await self._post(path, {"model": self.model, "prompt": text, "add_special_tokens": False})
        return list(body["tokens"])

    async def decode(self, ids: list[int]) -> str:
        path = (self.info.tokenize_path or "").replace("tokenize", "detokenize")
        if path == "/extras/detokenize":
            body = await self._post(path, {"tokens": ids, "model": self.model})
            return str(body["text"])
        if self.info.engine == "llama.cpp":
            body = await self._post(path, {"tokens": ids})
            return str(body["content"])
        body = await self._post(path, {"model": self.model, "tokens": ids})
        return str(body["prompt"])
