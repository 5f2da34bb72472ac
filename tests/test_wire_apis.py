"""The events of Anthropic's Messages API and OpenAI's Responses API through the decoder: recorded streams of the
real servers (tests/data/streams: llama-server and vLLM 0.32 on the embedded models), streams with tool calls,
reasoning and errors written as the servers' own code writes them (llama.cpp's ``server-task.cpp``
``to_json_anthropic*``/``to_json_oaicompat_resp*``; vLLM's ``entrypoints/anthropic/serving.py`` and
``entrypoints/openai/responses``), and generated events of every shape: each is a typed value or a counted
malformed event, never a traceback, and replaying stamped reads gives the record feeding them gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_hot_path import EXAMPLES, json_any
from tokenbench.client import StreamClient
from tokenbench.decoder import StreamDecoder
from tokenbench.records import RequestRecord
from tokenbench.wire import WireError
from tokenbench.wire_apis import api_events

STREAMS = Path(__file__).parent / "data" / "streams"


def _client(api: str) -> StreamClient:
    return StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m", api=api)  # type: ignore[arg-type]


def _sse(events: list[dict[str, Any]]) -> bytes:
    """Events as the servers frame them: the event's type as its SSE name, then its data line."""
    return b"".join(b"event: %s\ndata: %s\n\n" % (str(e.get("type", "x")).encode(), json.dumps(e).encode())
                    for e in events)


def _decode(data: bytes, api: str, per_read: bool = True) -> RequestRecord:
    """Each event its own read (stamped 10, 20, 30, ... after a send at 0), or all in one read at 10."""
    rec = RequestRecord(index=0, sent_ns=0)
    dec = StreamDecoder(rec, api == "chat", api)
    blocks = [b + b"\n\n" for b in data.split(b"\n\n") if b] if per_read else [data]
    dec.replay(blocks, [10 * (i + 1) for i in range(len(blocks))])
    if dec.close(10 * (len(blocks) + 1)):
        _client(api)._count_tokens(rec, dec.usage)
    return rec


# ---- recorded from the real servers ---------------------------------------------------------------------------

def test_llama_server_messages_stream() -> None:
    """llama-server on /v1/messages (tiny model, 6 tokens, its prompt cache on: the conversion keeps no
    cache_prompt): message_start gives the prompt's counts, 1 prefilled and 21 read from the cache."""
    rec = _decode((STREAMS / "llama-server-messages.sse").read_bytes(), "messages")
    assert rec.ok, rec.error
    assert rec.first_token_ns == 30  # message_start (10) and the text block's empty start (20) are no token
    assert len(rec.chunk_ns) == 6 and rec.output_tokens == 6 and rec.output_tokens_source == "usage"
    assert (rec.input_tokens, rec.cached_tokens, rec.cached_tokens_source) == (22, 21, "usage")
    assert rec.finish_reason == "max_tokens" and rec.first_tool_ns is None
    assert rec.answer_text == " show sh09 milesillbf"


def test_llama_server_responses_stream() -> None:
    rec = _decode((STREAMS / "llama-server-responses.sse").read_bytes(), "responses")
    assert rec.ok, rec.error
    assert rec.first_token_ns == 50  # created, in_progress, the message item and its content part come first
    assert len(rec.chunk_ns) == 6 and rec.output_tokens == 6
    assert (rec.input_tokens, rec.cached_tokens) == (22, 0)
    assert rec.finish_reason == "completed" and rec.server_timings is not None
    assert rec.server_timings["predicted_n"] == 6  # llama.cpp's timings ride on response.completed


def test_the_same_prompt_on_chat_and_messages_counts_the_same_tokens() -> None:
    chat = _decode((STREAMS / "llama-server-chat.sse").read_bytes(), "chat")
    messages = _decode((STREAMS / "llama-server-messages.sse").read_bytes(), "messages")
    responses = _decode((STREAMS / "llama-server-responses.sse").read_bytes(), "responses")
    assert chat.input_tokens == messages.input_tokens == responses.input_tokens == 22
    assert chat.output_tokens == messages.output_tokens == responses.output_tokens == 6


def test_vllm_streams_of_one_prompt_on_chat_messages_and_responses() -> None:
    """vLLM 0.32 (small-utf8 model, 8 tokens, a system and a user turn): the same counts on the three APIs. Its
    third token is the first piece of a character: chat streams it as a chunk with empty text (a token by the chunk
    rule), while its Messages and Responses conversions drop empty deltas, so those streams carry 7 token events
    for 8 tokens; the usage still counts 8."""
    chat, messages, responses = (_decode((STREAMS / f"vllm-{api}.sse").read_bytes(), api)
                                 for api in ("chat", "messages", "responses"))
    for rec in (chat, messages, responses):
        assert rec.ok, rec.error
        assert (rec.input_tokens, rec.output_tokens, rec.output_tokens_source, rec.cached_tokens) == \
            (35, 8, "usage", 0)
    assert chat.chunk_chars[2] == 0 and len(chat.chunk_ns) == 8
    assert len(messages.chunk_ns) == len(responses.chunk_ns) == 7 and 0 not in messages.chunk_chars
    assert chat.answer_text == messages.answer_text == responses.answer_text
    assert (chat.finish_reason, messages.finish_reason, responses.finish_reason) == \
        ("length", "max_tokens", "max_output_tokens")


# ---- as the servers' code writes them ------------------------------------------------------------------------

def _anthropic(*events: dict[str, Any], usage: dict[str, Any] | None = None, stop: str = "end_turn",
               output: int = 3) -> list[dict[str, Any]]:
    start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                  "content": [], "model": "m", "stop_reason": None,
                                                  "usage": usage or {"input_tokens": 9, "output_tokens": 0}}}
    end = [{"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": output}}, {"type": "message_stop"}]
    return [start, *events, *end]


def _block(index: int, kind: str, **more: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": {"type": kind, **more}}


def _delta(index: int, kind: str, **more: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **more}}


def test_a_messages_tool_call_is_stamped_at_its_block_start() -> None:
    """vLLM's converter: text, then a tool_use block (its id and name) and the arguments as input_json_delta;
    stop_reason tool_use. The time to the first tool call is the block's start."""
    rec = _decode(_sse(_anthropic(
        _block(0, "text", text=""), _delta(0, "text_delta", text="Let me look."), {"type": "content_block_stop",
                                                                                     "index": 0},
        _block(1, "tool_use", id="call_1", name="read_file", input={}),
        _delta(1, "input_json_delta", partial_json='{"path": '), _delta(1, "input_json_delta", partial_json='"a"}'),
        {"type": "content_block_stop", "index": 1}, stop="tool_use", output=7)), "messages")
    assert rec.ok and rec.finish_reason == "tool_use"
    assert rec.first_token_ns == 30 and rec.first_tool_ns == 50
    assert list(rec.chunk_ns) == [30, 50, 60, 70] and list(rec.chunk_chars) == [12, 0, 0, 0]
    assert rec.answer_text == "Let me look." and rec.output_tokens == 7


def test_messages_thinking_is_reasoning_and_its_signature_no_token() -> None:
    rec = _decode(_sse(_anthropic(
        _block(0, "thinking", thinking=""), _delta(0, "thinking_delta", thinking="hmm"),
        _delta(0, "signature_delta", signature="abc"), {"type": "content_block_stop", "index": 0},
        _block(1, "text", text=""), _delta(1, "text_delta", text="ok"), {"type": "ping"})), "messages")
    assert rec.ok and rec.reasoning_text == "hmm" and rec.answer_text == "ok"
    assert list(rec.chunk_ns) == [30, 70] and rec.first_answer_ns == 70 and rec.reasoning_chunks == 1


def test_messages_usage_prompt_is_input_plus_cache_reads_and_writes() -> None:
    """Anthropic's input_tokens leaves out what the cache served and what was written to it; a count said again
    later (message_delta, cumulative) replaces the earlier one."""
    usage = {"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20,
             "output_tokens": 1}
    events = _anthropic(_block(0, "text", text=""), _delta(0, "text_delta", text="x"), usage=usage, output=4)
    events[-2]["usage"] = {"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20,
                           "output_tokens": 4}
    rec = _decode(_sse(events), "messages")
    assert (rec.input_tokens, rec.cached_tokens, rec.output_tokens) == (125, 100, 4)


def test_a_responses_function_call_is_stamped_at_its_item() -> None:
    """vLLM's and llama.cpp's Responses stream: a function_call item added, its arguments as deltas; the usage
    and the reasoning count on response.completed."""
    events = [
        {"type": "response.created", "response": {"id": "r", "status": "in_progress"}, "sequence_number": 0},
        {"type": "response.output_item.added", "output_index": 0,
         "item": {"id": "rs_1", "type": "reasoning", "summary": [], "content": []}},
        {"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": "think"},
        {"type": "response.reasoning_summary_text.delta", "item_id": "rs_1", "delta": " more"},
        {"type": "response.output_item.added", "output_index": 1,
         "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f", "arguments": ""}},
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{}"},
        {"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": "{}"},
        {"type": "response.completed", "response": {"id": "r", "status": "completed", "usage": {
            "input_tokens": 40, "input_tokens_details": {"cached_tokens": 32}, "output_tokens": 9,
            "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 49}}},
    ]
    rec = _decode(_sse(events), "responses")
    assert rec.ok and rec.finish_reason == "completed"
    assert rec.first_token_ns == 30 and rec.first_tool_ns == 50 and list(rec.chunk_ns) == [30, 40, 50, 60]
    assert rec.reasoning_text == "think more" and rec.reasoning_tokens == 5
    assert (rec.input_tokens, rec.cached_tokens, rec.output_tokens) == (40, 32, 9)


def test_a_responses_output_cut_at_its_limit_says_so() -> None:
    events = [{"type": "response.output_text.delta", "delta": "a"},
              {"type": "response.incomplete", "response": {"status": "incomplete",
                                                           "incomplete_details": {"reason": "max_output_tokens"},
                                                           "usage": {"input_tokens": 3, "output_tokens": 1}}}]
    rec = _decode(_sse(events), "responses")
    assert rec.ok and rec.finish_reason == "max_output_tokens" and rec.output_tokens == 1


@pytest.mark.parametrize("api,event,message", [
    ("messages", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "Overloaded"),
    # llama-server's own error object under "event: error" (format_anthropic_sse)
    ("messages", {"code": 500, "message": "boom", "type": "server_error"}, "boom"),
    ("responses", {"type": "error", "code": "server_error", "message": "boom", "param": None}, "boom"),
    ("responses", {"type": "response.failed", "response": {"status": "failed",
                                                           "error": {"code": "x", "message": "died"}}}, "died"),
    ("responses", {"error": {"message": "llama.cpp says no", "code": 500}}, "llama.cpp says no"),
])
def test_an_error_event_fails_the_request_with_the_servers_words(api: str, event: dict[str, Any],
                                                                 message: str) -> None:
    first = {"messages": _block(0, "text", text=""), "responses": {"type": "response.created"}}[api]
    rec = _decode(_sse([first, event]), api)
    assert rec.error_kind == "server_error_event" and rec.error == message


@pytest.mark.parametrize("api", ["messages", "responses"])
def test_a_stream_cut_before_its_end_is_incomplete(api: str) -> None:
    events = [_delta(0, "text_delta", text="a")] if api == "messages" else \
        [{"type": "response.output_text.delta", "delta": "a"}]
    rec = _decode(_sse(events), api)
    assert rec.error_kind == "stream_incomplete" and len(rec.chunk_ns) == 1


@pytest.mark.parametrize("api,bad,kind", [
    ("messages", {"type": 7}, "malformed_event"),
    ("messages", {"type": "content_block_delta", "delta": "x"}, "malformed_event"),
    ("messages", {"type": "content_block_delta", "delta": {"type": "text_delta", "text": 5}}, "malformed_event"),
    ("messages", {"type": "message_delta", "delta": {}, "usage": {"output_tokens": -1}}, "invalid_usage"),
    ("messages", {"type": "message_start", "message": {"usage": {"input_tokens": 1.5}}}, "invalid_usage"),
    ("responses", {"type": "response.output_text.delta", "delta": ["a"]}, "malformed_event"),
    ("responses", {"type": "response.completed", "response": {"usage": {"input_tokens": "9"}}}, "invalid_usage"),
    ("responses", {"type": "response.output_item.added", "item": []}, "malformed_event"),
    ("responses", [1, 2], "malformed_event"),
])
def test_a_malformed_event_is_counted_never_raised(api: str, bad: Any, kind: str) -> None:
    ok = [_delta(0, "text_delta", text="a")] if api == "messages" else [{"type": "response.output_text.delta",
                                                                          "delta": "a"}]
    data = _sse(ok) + b"data: " + json.dumps(bad).encode() + b"\n\n" + _sse(ok)
    rec = _decode(data, api)
    assert rec.malformed_events == 1 and rec.error_kind == kind and len(rec.chunk_ns) == 2


# ---- generated events: a typed value or a WireError, and replay = feed ----------------------------------------

text_or_any = st.one_of(st.text(max_size=4), st.none(), json_any)
count_or_any = st.one_of(st.integers(-2, 2**54), st.none(), json_any)
anthropic_usage = st.one_of(st.fixed_dictionaries({}, optional={
    k: count_or_any for k in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                              "cache_creation_input_tokens")}), json_any)
anthropic_event = st.one_of(
    st.fixed_dictionaries({"type": st.just("content_block_delta")}, optional={
        "index": json_any, "delta": st.one_of(st.fixed_dictionaries({}, optional={
            "type": st.one_of(st.sampled_from(["text_delta", "thinking_delta", "input_json_delta", "signature_delta"]),
                              json_any),
            "text": text_or_any, "thinking": text_or_any, "partial_json": text_or_any}), json_any)}),
    st.fixed_dictionaries({"type": st.just("content_block_start")}, optional={
        "content_block": st.one_of(st.fixed_dictionaries({}, optional={
            "type": st.one_of(st.sampled_from(["text", "thinking", "tool_use"]), json_any),
            "text": text_or_any, "thinking": text_or_any}), json_any)}),
    st.fixed_dictionaries({"type": st.just("message_start")}, optional={
        "message": st.one_of(st.fixed_dictionaries({}, optional={"usage": anthropic_usage}), json_any)}),
    st.fixed_dictionaries({"type": st.just("message_delta")}, optional={
        "delta": st.one_of(st.fixed_dictionaries({}, optional={"stop_reason": text_or_any}), json_any),
        "usage": anthropic_usage}),
    st.fixed_dictionaries({"type": st.sampled_from(["message_stop", "ping", "error", "content_block_stop",
                                                    "server_error"])},
                          optional={"error": json_any, "message": json_any, "timings": json_any}),
    json_any)
responses_event = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["response.output_text.delta", "response.reasoning_text.delta",
                                                    "response.function_call_arguments.delta",
                                                    "response.refusal.delta"])},
                          optional={"delta": text_or_any, "timings": json_any}),
    st.fixed_dictionaries({"type": st.just("response.output_item.added")}, optional={
        "item": st.one_of(st.fixed_dictionaries({}, optional={
            "type": st.one_of(st.sampled_from(["function_call", "message"]), json_any)}), json_any)}),
    st.fixed_dictionaries({"type": st.sampled_from(["response.completed", "response.incomplete",
                                                    "response.failed"])}, optional={
        "response": st.one_of(st.fixed_dictionaries({}, optional={
            "status": text_or_any, "error": json_any,
            "incomplete_details": st.one_of(st.fixed_dictionaries({}, optional={"reason": text_or_any}), json_any),
            "usage": st.one_of(st.fixed_dictionaries({}, optional={
                "input_tokens": count_or_any, "output_tokens": count_or_any,
                "input_tokens_details": st.one_of(st.fixed_dictionaries({}, optional={"cached_tokens": count_or_any}),
                                                  json_any),
                "output_tokens_details": json_any}), json_any)}), json_any)}),
    st.fixed_dictionaries({"type": st.sampled_from(["error", "response.created"])},
                          optional={"message": json_any, "error": json_any}),
    json_any)


@settings(max_examples=EXAMPLES // 4, deadline=None, suppress_health_check=list(HealthCheck))
@given(api=st.sampled_from(["messages", "responses"]), data=st.data())
def test_every_event_is_a_typed_value_or_a_wire_error(api: str, data: st.DataObject) -> None:
    events = data.draw(st.lists(anthropic_event if api == "messages" else responses_event, max_size=6))
    read = api_events(api)
    assert read is not None
    for e in events:
        try:
            c = read(json.dumps(e).encode())
        except WireError:
            continue
        assert c.text is None or isinstance(c.text, str)
        assert c.usage is None or all(v is None or isinstance(v, int) and v >= 0 for v in
                                      (c.usage.prompt_tokens, c.usage.completion_tokens, c.usage.cached_tokens))
        assert not c.tool or c.token


@settings(max_examples=EXAMPLES // 8, deadline=None, suppress_health_check=list(HealthCheck))
@given(api=st.sampled_from(["messages", "responses"]), data=st.data(), crlf=st.booleans(),
       named=st.booleans(), cuts=st.lists(st.integers(0, 3000), max_size=8))
def test_replaying_named_events_gives_the_record_feeding_them_gives(api: str, data: st.DataObject, crlf: bool,
                                                                     named: bool, cuts: list[int]) -> None:
    events = data.draw(st.lists(anthropic_event if api == "messages" else responses_event, max_size=6))
    raw = b"".join((b"event: e\n" if named else b"") + b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    raw = raw.replace(b"\n", b"\r\n") if crlf else raw
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(raw)}), len(raw)]
    reads = [raw[a:b] for a, b in zip(bounds, bounds[1:])]
    stamps = [100 + i for i in range(len(reads))]
    fed, replayed = RequestRecord(index=0), RequestRecord(index=0)
    one, two = StreamDecoder(fed, False, api), StreamDecoder(replayed, False, api)
    for d, t in zip(reads, stamps):
        one.feed(d, t)
    two.replay(reads, stamps)
    for dec, rec in ((one, fed), (two, replayed)):
        if dec.close(10_000):
            _client(api)._count_tokens(rec, dec.usage)
    assert replayed.to_dict(keep_text=True) == fed.to_dict(keep_text=True)


def _outcome(read: Any, data: bytes) -> Any:
    try:
        return read(data)
    except WireError as e:
        return ("error", e.kind, str(e))


typed_delta = st.one_of(
    st.fixed_dictionaries({"type": st.just("content_block_delta"), "index": st.integers(0, 3)}, optional={
        "delta": st.fixed_dictionaries({}, optional={
            "type": st.sampled_from(["text_delta", "thinking_delta", "input_json_delta", "signature_delta", None]),
            "text": st.one_of(st.text(max_size=4), st.none()), "thinking": st.one_of(st.text(max_size=4), st.none()),
            "partial_json": st.one_of(st.text(max_size=4), st.none())}),
        "timings": st.one_of(st.none(), st.just({"predicted_n": 3}))}),
    st.fixed_dictionaries({"type": st.sampled_from([*("response.output_text.delta", "response.reasoning_text.delta",
                                                      "response.function_call_arguments.delta")])},
                          optional={"delta": st.one_of(st.text(max_size=4), st.none()), "item_id": st.just("x"),
                                    "sequence_number": st.integers(0, 9)}))
raw_api_event = st.one_of(
    typed_delta.map(lambda e: json.dumps(e).encode()),
    anthropic_event.map(lambda e: json.dumps(e).encode()), responses_event.map(lambda e: json.dumps(e).encode()),
    st.binary(max_size=12),
    st.sampled_from([b'{"type": "content_block_delta", "delta": {"type": "text_delta", "text": "\xff"}}',
                     b'{"type": "response.output_text.delta", "delta": NaN}', b"[" * 3000,
                     b'{"type": "response.output_text.delta", "delta": "\xe4\xb8"}',
                     b'{"type": "content_block_delta", "delta": {"type": "text_delta", "text": "a", "x": 1e400}}']))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=raw_api_event, api=st.sampled_from(["messages", "responses"]))
def test_the_fast_event_path_agrees_with_the_general_one(raw: bytes, api: str) -> None:
    fast, general = api_events(api), api_events(api)
    assert fast is not None and general is not None
    assert _outcome(fast, raw) == _outcome(general._general, raw)
    assert _outcome(fast, raw) == _outcome(api_events(api), raw.decode("utf-8", "replace").encode())
