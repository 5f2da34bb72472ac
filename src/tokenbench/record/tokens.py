"""The lengths-only log's token side: a request's prompt as the model's token ids, and those ids as hash ids.

Token ids come from the upstream's own endpoints where it has them, the chat template applied as for the request
itself (vLLM's ``/tokenize`` with the messages; llama-server's ``/apply-template`` then ``/tokenize``), else from
its text tokenizer over the messages written out one per line (``role: content``), else from ``--tokenizer PATH``
(its chat template where the folder has one, else the same lines). Only the first is the server's own count; the
others follow the messages, so equal prompts still get equal ids.

Hash ids (``HashIds``): block i of ``block_size`` tokens gets ``H(id of block i-1, its tokens)``, H a BLAKE2b keyed
with a random key made for this log and never written, 64 bits read as a signed integer. Equal ids mean equal
prefixes, within the log only: without the key nobody can check an id against a guessed text. The log's rounding is
``floor``: ``prompt_tokens // block_size`` ids, the rest of the prompt an unhashed tail. Where the tokenizer's
count falls short of the server's ``prompt_tokens`` (a local tokenizer without the template), each id past its
whole blocks chains on from the one before with the tokens it has of that block (none, past its last) and the
block's number: the count stays the server's, and a prefix shared in tokens is still shared in ids.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from array import array
from collections.abc import Sequence
from typing import Any

import aiohttp

from ..chat import Message

ROUNDING = "floor"


class TokenizerError(Exception):
    """The tokenizer could not count a prompt (the upstream's endpoint failed, or none is to be had)."""


class HashIds:
    def __init__(self, block_size: int, key: bytes | None = None) -> None:
        self.block_size = block_size
        self.key = key if key is not None else os.urandom(32)

    def _h(self, before: bytes, data: bytes, person: bytes = b"") -> bytes:
        return hashlib.blake2b(before + data, digest_size=8, key=self.key, person=person).digest()

    def ids(self, tokens: Sequence[int], prompt_tokens: int) -> list[int]:
        """The ids of a prompt of ``prompt_tokens`` tokens whose token ids are ``tokens`` (as far as known)."""
        size = self.block_size
        n = prompt_tokens // size
        whole = min(n, len(tokens) // size)
        out: list[int] = []
        h = b""
        packed = array("q", tokens).tobytes()
        step = size * 8
        for i in range(whole):
            h = self._h(h, packed[i * step:(i + 1) * step])
            out.append(int.from_bytes(h, "little", signed=True))
        for i in range(whole, n):  # past the tokenizer's whole blocks: what it has of the block, and its number
            h = self._h(h, packed[i * step:(i + 1) * step] + i.to_bytes(8, "little"), b"beyond")
            out.append(int.from_bytes(h, "little", signed=True))
        return out


def lines(messages: list[dict[str, Any]], tools: list[Any] | None) -> str:
    """Messages written out one per line, for a tokenizer that has no chat template."""
    out = [f"tools: {json.dumps(tools, sort_keys=True)}"] if tools else []
    for m in messages:
        content = m.get("content")
        text = content if isinstance(content, str) else json.dumps(content) if content is not None else ""
        calls = json.dumps(m["tool_calls"]) if m.get("tool_calls") else ""
        out.append(f"{m['role']}: {text}{calls}")
    return "\n".join(out) + "\nassistant:"


def answer_text(answer: Message) -> str:
    return "".join(x for x in (answer.reasoning_content, answer.content if isinstance(answer.content, str) else None,
                               *(c.name + c.arguments for c in answer.tool_calls)) if x)


class UpstreamTokenizer:
    """The upstream's endpoints (found by ``servers.discover`` on first use), with the client's own key."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._adapter: Any = None
        self._http: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def _ready(self, auth: dict[str, str]) -> Any:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        if self._adapter is None:
            from ..errors import EndpointError
            from ..servers import discover

            key = auth.get("Authorization", "").removeprefix("Bearer ").strip() or auth.get("x-api-key")
            try:
                info = await discover(self._http, self.root + "/v1", key, model="-")
            except EndpointError as e:
                raise TokenizerError(f"the upstream could not be asked for its tokenizer ({e})") from None
            if info.adapter.tokenize_path is None:
                raise TokenizerError("the upstream has no tokenize endpoint: pass --tokenizer PATH")
            self._adapter = info.adapter
        return self._adapter

    async def _post(self, path: str, body: dict[str, Any], auth: dict[str, str]) -> dict[str, Any]:
        from ..servers import once_more_if_closed

        assert self._http is not None

        async def once(http: aiohttp.ClientSession) -> Any:
            async with http.post(self.root + path, json=body, headers=auth) as r:
                return await r.json(content_type=None) if r.status == 200 else None

        try:  # tokenizing changes nothing upstream: asked again where a kept-alive connection was closed
            got = await once_more_if_closed(self._http, once)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            raise TokenizerError(f"the upstream's {path} failed ({type(e).__name__})") from None
        if not isinstance(got, dict):
            raise TokenizerError(f"the upstream's {path} did not answer")
        return got

    async def prompt(self, messages: list[dict[str, Any]], tools: list[Any] | None, model: str,
                     auth: dict[str, str]) -> list[int]:
        adapter = await self._ready(auth)
        steps = adapter.chat_tokenize_steps(messages, tools, model)
        if not steps:
            return await self.text(lines(messages, tools), model, auth)
        said: dict[str, Any] = {}
        for path, body in steps:
            body = {k: (said.get("prompt") if v == "{prompt}" else v) for k, v in body.items()}
            said = await self._post(path, body, auth)
        return _ids(said)

    async def text(self, text: str, model: str, auth: dict[str, str]) -> list[int]:
        adapter = await self._ready(auth)
        return _ids(await self._post(adapter.tokenize_path, adapter.tokenize_request(text, model), auth))


def _ids(said: dict[str, Any]) -> list[int]:
    tokens = said.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise TokenizerError("the upstream's tokenizer answered without token ids")
    return [t if isinstance(t, int) else 0 for t in tokens]


class LocalChatTokenizer:
    """``--tokenizer PATH``: a tokenizer.json, or a Hugging Face folder (its chat template where it has one)."""

    def __init__(self, path: str) -> None:
        from ..workload import LocalTokenizer

        self.local = LocalTokenizer(path)
        self._template: Any = None
        try:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self._template = tok if getattr(tok, "chat_template", None) else None
        except Exception:  # no transformers, or a bare tokenizer.json: the lines rendering
            self._template = None

    async def prompt(self, messages: list[dict[str, Any]], tools: list[Any] | None, model: str,
                     auth: dict[str, str]) -> list[int]:
        if self._template is not None:
            try:
                got = self._template.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                         tokenize=True)
                return list(got["input_ids"] if isinstance(got, dict) or hasattr(got, "keys") else got)
            except Exception:  # a template that refuses these messages: the lines rendering
                pass
        return await self.local.encode(lines(messages, tools))

    async def text(self, text: str, model: str, auth: dict[str, str]) -> list[int]:
        return await self.local.encode(text)

    async def close(self) -> None:
        return None
