"""The typed boundary for the events of Anthropic's Messages API and OpenAI's Responses API: the same types
(``wire.Chunk``, ``wire.Usage``) and the same rules (``wire.WireError``: ``malformed_event`` for a field of the
wrong shape, ``invalid_usage`` for a count out of range) as ``wire.parse_chunk`` for OpenAI chunks.

Each stream gets its own reader (``api_events``), which keeps what the API spreads over several events: Anthropic
gives the prompt's counts in ``message_start`` and the output's in ``message_delta``, so the usage a chunk returns
is the stream's so far.

The chunk rule, as for chat: an event that carries generated text is a token-bearing chunk, visible or not.

- Messages: a ``content_block_delta`` of ``text_delta`` (answer), ``thinking_delta`` (reasoning) or
  ``input_json_delta`` (a tool call's arguments), and the start of a ``tool_use`` block (the call's name, as chat's
  first ``tool_calls`` delta carries it). Not: ``message_start``, a text or thinking block's empty start,
  ``signature_delta``, ``content_block_stop``, ``ping``. ``message_delta`` gives ``stop_reason`` (the record's
  ``finish_reason``) and the output count; ``message_stop`` ends the stream; ``error`` is the server's error.
- Responses: ``response.output_text.delta`` (and ``refusal.delta``: answer), ``response.reasoning_text.delta`` and
  ``response.reasoning_summary_text.delta`` (reasoning), ``response.function_call_arguments.delta`` and a
  ``function_call`` item's start (``response.output_item.added``: a tool call). ``response.completed`` or
  ``response.incomplete`` ends the stream with its usage (the finish reason: ``incomplete_details.reason``, else
  the status); ``response.failed`` and ``error`` are the server's error.

Usage. Anthropic's ``input_tokens`` counts the prompt tokens neither read from the cache nor written to it: the
prompt is ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``, and the cached tokens are
``cache_read_input_tokens``. Responses' ``input_tokens`` is the whole prompt, ``input_tokens_details.cached_tokens``
its cached part, ``output_tokens_details.reasoning_tokens`` the reasoning part of ``output_tokens``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .wire import MAX_EVENT_BYTES, Chunk, Usage, WireError, _error_text, _object, _text, _timings, count, loads

_EMPTY = Chunk()
_ANTHROPIC_COUNTS = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens")


def _event(data: bytes | str) -> tuple[dict[str, Any], str | None, dict[str, float] | None]:
    """An event's object, its ``type`` and llama.cpp's ``timings`` on it. Bytes that are not UTF-8 read as the SSE
    parser reads them (replaced), so a stream decodes the same whichever way its events came."""
    if isinstance(data, bytes):
        data = data.decode("utf-8", errors="replace")
    obj = loads(data)
    if not isinstance(obj, dict):
        raise WireError("malformed_event", f"event is {type(obj).__name__}, not an object")
    return obj, _text(obj.get("type"), "type"), _timings(obj.get("timings"))


def _token(text: Any, what: str, timings: dict[str, float] | None, reasoning: bool = False) -> Chunk:
    """A delta's chunk: a token whenever the delta's text is there (empty: held back), as chat's rule says."""
    value = _text(text, what)
    if value is None:
        return Chunk(timings=timings, choice=True)
    if reasoning:
        return Chunk(None, value or None, timings=timings, choice=True, token=True)
    return Chunk(value or None, timings=timings, choice=True, token=True)


def _tool(timings: dict[str, float] | None) -> Chunk:
    return Chunk(timings=timings, choice=True, token=True, tool=True)


# The fast path for the events a stream is made of, a text delta after a text delta (as wire.parse_event's for
# OpenAI chunks): msgspec checks the types in C, about 1 µs an event against 4 µs. Anything else (another event,
# a field of the wrong type, timings, invalid UTF-8, NaN, deep nesting) takes the general path, so the two cannot
# disagree: the fast one only returns what the general one would for the events it accepts.
class _FastDelta(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    partial_json: str | None = None


class _FastEvent(msgspec.Struct):
    type: str | None = None
    delta: _FastDelta | str | None = None  # an object on Anthropic's events, a string on Responses'
    timings: Any = None


_decode_fast = msgspec.json.Decoder(_FastEvent).decode
_FAST_FAILS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError)
_TOOL = Chunk(choice=True, token=True, tool=True)


def _fast(data: bytes | str) -> _FastEvent | None:
    if len(data) > MAX_EVENT_BYTES:
        return None
    try:
        ev = _decode_fast(data)
    except _FAST_FAILS:
        return None
    return ev if ev.timings is None else None


def _fast_token(text: str | None, reasoning: bool) -> Chunk:
    if text is None:
        return _NO_TOKEN
    if reasoning:
        return Chunk(None, text or None, choice=True, token=True)
    return Chunk(text or None, choice=True, token=True)


_NO_TOKEN = Chunk(choice=True)


class MessagesEvents:
    """One stream's Anthropic Messages events, each as a :class:`wire.Chunk` or :class:`wire.WireError`."""

    __slots__ = ("counts", "done")

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}  # the usage fields said so far, each the latest value said
        self.done = False  # message_stop came

    def __call__(self, data: bytes | str) -> Chunk:
        ev = _fast(data)
        if ev is not None and ev.type == "content_block_delta" and isinstance(ev.delta, _FastDelta):
            d = ev.delta
            if d.type == "text_delta":
                return _fast_token(d.text, False)
            if d.type == "thinking_delta":
                return _fast_token(d.thinking, True)
            if d.type == "input_json_delta":
                return _TOOL
        return self._general(data)

    def _general(self, data: bytes | str) -> Chunk:
        obj, kind, timings = _event(data)
        if kind == "content_block_delta":
            return self._delta(_object(obj.get("delta"), "delta") or {}, timings)
        if kind == "content_block_start":
            block = _object(obj.get("content_block"), "content_block") or {}
            btype = _text(block.get("type"), "content_block.type")
            if btype in ("tool_use", "server_tool_use"):
                return _tool(timings)
            if btype in ("text", "thinking"):  # an empty opening, unless a server put text in it
                text = _text(block.get(btype), f"content_block.{btype}")
                return _token(text, btype, timings, btype == "thinking") if text else _EMPTY
            return _EMPTY
        if kind == "message_start":
            message = _object(obj.get("message"), "message") or {}
            return Chunk(usage=self._usage(message.get("usage")), timings=timings)
        if kind == "message_delta":
            delta = _object(obj.get("delta"), "delta") or {}
            stop = _text(delta.get("stop_reason"), "delta.stop_reason")
            return Chunk(finish_reason=stop or None, usage=self._usage(obj.get("usage")), timings=timings)
        if kind == "message_stop":
            self.done = True
            return _EMPTY
        if kind == "error" or kind is not None and kind.endswith("_error") or kind is None and "error" in obj:
            # Anthropic's {"type": "error", "error": {...}}; llama-server's bare error object ({"type":
            # "server_error", "message": ...}) under its "event: error"
            err = obj.get("error")
            return Chunk(error=_error_text(err if err is not None else obj))
        return Chunk(timings=timings) if timings else _EMPTY  # ping, content_block_stop, an event type added later

    @staticmethod
    def _delta(delta: dict[str, Any], timings: dict[str, float] | None) -> Chunk:
        dtype = _text(delta.get("type"), "delta.type")
        if dtype == "text_delta":
            return _token(delta.get("text"), "delta.text", timings)
        if dtype == "thinking_delta":
            return _token(delta.get("thinking"), "delta.thinking", timings, reasoning=True)
        if dtype == "input_json_delta":
            _text(delta.get("partial_json"), "delta.partial_json")
            return _tool(timings)
        return Chunk(timings=timings) if timings else _EMPTY  # signature_delta, citations_delta: no generated text

    def _usage(self, value: Any) -> Usage | None:
        obj = _object(value, "usage")
        if not obj:
            return None
        for key in _ANTHROPIC_COUNTS:
            n = count(obj.get(key), f"usage.{key}")
            if n is not None:
                self.counts[key] = n
        c = self.counts
        prompt = None if "input_tokens" not in c else \
            c["input_tokens"] + c.get("cache_read_input_tokens", 0) + c.get("cache_creation_input_tokens", 0)
        return Usage(prompt, c.get("output_tokens"), None, c.get("cache_read_input_tokens"))


def _responses_usage(value: Any) -> Usage | None:
    obj = _object(value, "response.usage")
    if not obj:
        return None
    inp = _object(obj.get("input_tokens_details"), "usage.input_tokens_details") or {}
    out = _object(obj.get("output_tokens_details"), "usage.output_tokens_details") or {}
    return Usage(count(obj.get("input_tokens"), "usage.input_tokens"),
                 count(obj.get("output_tokens"), "usage.output_tokens"),
                 count(out.get("reasoning_tokens"), "usage.output_tokens_details.reasoning_tokens"),
                 count(inp.get("cached_tokens"), "usage.input_tokens_details.cached_tokens"))


_RESPONSES_TEXT = {"response.output_text.delta": False, "response.refusal.delta": False,
                   "response.reasoning_text.delta": True, "response.reasoning_summary_text.delta": True}
_RESPONSES_TOOL = ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")
_RESPONSES_END = ("response.completed", "response.incomplete")


class ResponsesEvents:
    """One stream's OpenAI Responses events, each as a :class:`wire.Chunk` or :class:`wire.WireError`."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False  # response.completed or response.incomplete came

    def __call__(self, data: bytes | str) -> Chunk:
        ev = _fast(data)
        if ev is not None and (ev.delta is None or isinstance(ev.delta, str)):
            reasoning = _RESPONSES_TEXT.get(ev.type or "")
            if reasoning is not None:
                return _fast_token(ev.delta, reasoning)
            if ev.type in _RESPONSES_TOOL:
                return _TOOL
        return self._general(data)

    def _general(self, data: bytes | str) -> Chunk:
        obj, kind, timings = _event(data)
        reasoning = _RESPONSES_TEXT.get(kind or "")
        if reasoning is not None:
            return _token(obj.get("delta"), "delta", timings, reasoning)
        if kind in _RESPONSES_TOOL:
            _text(obj.get("delta"), "delta")
            return _tool(timings)
        if kind == "response.output_item.added":
            item = _object(obj.get("item"), "item") or {}
            if _text(item.get("type"), "item.type") in ("function_call", "custom_tool_call"):
                return _tool(timings)
            return Chunk(timings=timings) if timings else _EMPTY
        if kind in _RESPONSES_END:
            return self._end(_object(obj.get("response"), "response") or {}, kind, timings)
        if kind == "response.failed":
            response = _object(obj.get("response"), "response") or {}
            err = response.get("error")
            return Chunk(error=_error_text(err) if err is not None else "the response failed")
        if kind == "error" or kind is None and "error" in obj:
            # OpenAI's {"type": "error", "code", "message"}; llama-server's {"error": {...}}
            err = obj.get("error")
            return Chunk(error=_error_text(err if err is not None else obj))
        return Chunk(timings=timings) if timings else _EMPTY

    def _end(self, response: dict[str, Any], kind: str, timings: dict[str, float] | None) -> Chunk:
        self.done = True
        status = _text(response.get("status"), "response.status")
        details = _object(response.get("incomplete_details"), "response.incomplete_details") or {}
        reason = _text(details.get("reason"), "response.incomplete_details.reason")
        return Chunk(finish_reason=reason or status or kind.removeprefix("response."),
                     usage=_responses_usage(response.get("usage")), timings=timings)


def api_events(api: str | None) -> MessagesEvents | ResponsesEvents | None:
    """A fresh reader of one stream's events on ``api``; None for the OpenAI chunk APIs (``wire.parse_event``)."""
    if api == "messages":
        return MessagesEvents()
    if api == "responses":
        return ResponsesEvents()
    return None
