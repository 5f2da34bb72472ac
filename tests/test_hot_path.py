"""The client's hot path keeps bytes and stamps; parsing happens later, in batches. Deferring it must
change nothing: the batch decoder (``StreamDecoder.replay``) and the fast event parser (``wire.parse_event``) are
held to the general ones (``StreamDecoder.feed``, ``wire.parse_chunk``) on generated streams."""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import fuzz_examples
from tokenbench.client import StreamClient
from tokenbench.decoder import StreamDecoder
from tokenbench.records import RequestRecord
from tokenbench.transport import REPLAY_BYTES
from tokenbench.wire import MAX_EVENT_BYTES, WireError, parse_chunk, parse_event

#: As test_wire.py: 10,000 in `make test`, fewer in `make test-fast`, TOKENBENCH_FUZZ_EXAMPLES outright.
EXAMPLES = int(os.environ.get("TOKENBENCH_FUZZ_EXAMPLES") or fuzz_examples(10_000))
CLIENT = StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m")  # type: ignore[arg-type]

json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(), st.floats(allow_nan=False),
                      st.text(max_size=4))
json_any = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                           st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                        max_leaves=6)
# Events shaped like the real ones, with any field replaced by anything: where the two parsers could disagree.
text_or_any = st.one_of(st.text(max_size=4), st.none(), json_any)
choice = st.fixed_dictionaries({}, optional={
    "index": st.one_of(st.just(0), st.integers(-1, 2), st.none(), json_any),
    "text": text_or_any, "reasoning_content": text_or_any, "reasoning": text_or_any,
    "delta": st.one_of(st.fixed_dictionaries({}, optional={"content": text_or_any, "reasoning_content": text_or_any,
                                                           "reasoning": text_or_any,
                                                           "role": st.one_of(st.just("assistant"), json_any),
                                                           "tool_calls": st.one_of(st.just([{"index": 0}]), json_any)}),
                       json_any),
    "finish_reason": st.one_of(st.sampled_from(["stop", "length", ""]), st.none(), json_any),
    "logprobs": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"content": json_any, "tokens": json_any}),
                          json_any),
    "token_ids": st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=3), json_any),
})
event = st.fixed_dictionaries({}, optional={
    "id": st.just("x"),
    "choices": st.one_of(st.lists(choice, max_size=2), json_any),
    "usage": st.one_of(st.fixed_dictionaries({}, optional={"completion_tokens": json_leaf, "prompt_tokens": json_leaf,
                                                           "total_tokens": json_leaf,
                                                           "completion_tokens_details": st.one_of(st.none(), json_any),
                                                           "prompt_tokens_details": st.one_of(st.none(), json_any)}),
                       json_any),
    "timings": st.one_of(st.dictionaries(st.sampled_from(["predicted_n", "prompt_n", "x"]), json_leaf), json_any),
    "error": st.one_of(st.none(), json_any),
})
# The common shape, well typed: the events the fast path takes.
maybe_text = st.one_of(st.text(max_size=4), st.none())
typed_choice = st.fixed_dictionaries({}, optional={
    "index": st.sampled_from([0, 1, None]), "text": maybe_text, "reasoning_content": maybe_text, "reasoning": maybe_text,
    "delta": st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "content": maybe_text, "reasoning_content": maybe_text, "reasoning": maybe_text,
        "role": st.sampled_from([None, "assistant"])})),
    "finish_reason": st.sampled_from([None, "stop", "length", ""]), "logprobs": st.none(), "token_ids": st.none()})
# vLLM's continuous_usage_stats: a plain running count on every chunk
running_usage = st.fixed_dictionaries({"completion_tokens": st.integers(-1, 2**54)}, optional={
    "prompt_tokens": st.integers(-1, 2**54), "total_tokens": st.integers(0, 99), "completion_tokens_details": st.none()})
typed_event = st.fixed_dictionaries({"choices": st.lists(typed_choice, max_size=2)},
                                    optional={"usage": st.one_of(st.none(), running_usage), "timings": st.none(),
                                              "error": st.none()})
raw_event = st.one_of(typed_event.map(lambda e: json.dumps(e).encode()), event.map(lambda e: json.dumps(e).encode()), json_any.map(lambda e: json.dumps(e).encode()),
                      st.binary(max_size=12), st.sampled_from([b"NaN", b'{"choices": [{"text": NaN}]}',
                                                               b'{"choices": [{"text": "\xff"}]}', b"[" * 3000]))


def _outcome(f: Any, *args: Any) -> Any:
    try:
        return f(*args)
    except WireError as e:
        return ("error", e.kind, str(e))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=raw_event, chat=st.booleans())
def test_the_fast_event_parser_agrees_with_the_general_one(raw: bytes, chat: bool) -> None:
    assert _outcome(parse_event, raw, chat) == _outcome(parse_chunk, raw.decode("utf-8", "replace"), chat)


def _valid(chat: bool, text: str) -> bytes:
    part = {"delta": {"content": text}} if chat else {"text": text}
    return json.dumps({"choices": [{"index": 0, **part, "finish_reason": None}]}).encode()


frame = st.one_of(
    st.text(min_size=1, max_size=3).map(lambda t: ("valid", t)),
    raw_event.map(lambda r: ("raw", r)),
    st.sampled_from([("keep", b": keep-alive\n\n"), ("keep", b"data:\n\n"), ("keep", b"\n"),
                     ("keep", b"event: x\ndata: " + _valid(False, "e") + b"\n\n"),
                     ("keep", b"data: {\"choices\":\ndata: [{\"text\": \"m\"}]}\n\n"),
                     ("keep", b"data:" + _valid(False, "nospace") + b"\n\n"),
                     ("keep", b"data: [DONE]\n\n")]),
)


def _bytes(frames: list[tuple[str, Any]], chat: bool, crlf: bool) -> bytes:
    out = []
    for kind, v in frames:
        if kind == "valid":
            out.append(b"data: " + _valid(chat, v) + b"\n\n")
        elif kind == "raw":
            out.append(b"data: " + v.replace(b"\n", b" ").replace(b"\r", b" ") + b"\n\n")
        else:
            out.append(v)
    data = b"".join(out)
    return data.replace(b"\n", b"\r\n") if crlf else data


def _record(data: bytes, cuts: list[int], chat: bool, batches: list[int] | None) -> RequestRecord:
    rec = RequestRecord(index=0)
    dec = StreamDecoder(rec, chat)
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    reads = [data[a:b] for a, b in zip(bounds, bounds[1:])]
    stamps = [1000 + i for i in range(len(reads))]
    if batches is None:
        for d, t in zip(reads, stamps):
            dec.feed(d, t)
    else:
        i = 0
        for n in [*batches, len(reads)]:
            dec.replay(reads[i:i + n], stamps[i:i + n])
            i += n
    if dec.close(10_000):
        CLIENT._count_tokens(rec, dec.usage)
    return rec


@settings(max_examples=EXAMPLES // 4, deadline=None, suppress_health_check=list(HealthCheck))
@given(frames=st.lists(frame, max_size=8), chat=st.booleans(), crlf=st.booleans(),
       cuts=st.lists(st.integers(0, 4000), max_size=8), batches=st.lists(st.integers(0, 3), max_size=4),
       end=st.sampled_from([b"", b"data: [DONE]\n\n", b"data: [DONE]", b"data: " + _valid(False, "last")]))
def test_replaying_stamped_reads_gives_the_record_feeding_them_gives(
        frames: list[tuple[str, Any]], chat: bool, crlf: bool, cuts: list[int], batches: list[int],
        end: bytes) -> None:
    data = _bytes(frames, chat, crlf) + end
    fed, replayed = _record(data, cuts, chat, None), _record(data, cuts, chat, batches)
    assert replayed.to_dict(keep_text=True) == fed.to_dict(keep_text=True)


def test_each_event_gets_the_stamp_of_the_read_that_finished_it() -> None:
    data = b"data: " + _valid(False, "a") + b"\n\n" + b"data: " + _valid(False, "b") + b"\n\n"
    half = data.index(b"\n\n") + 1  # the first event's blank line straddles two reads
    rec = RequestRecord(index=0)
    dec = StreamDecoder(rec, chat=False)
    dec.replay([data[:half], data[half:half + 5], data[half + 5:]], [10, 20, 30])
    assert list(rec.chunk_ns) == [20, 30] and rec.first_byte_ns == 10


def test_a_stream_of_one_endless_event_is_cut_off_in_replay_too() -> None:
    rec = RequestRecord(index=0)
    dec = StreamDecoder(rec, chat=False)
    line = b"data: " + b"x" * 65536 + b"\n"
    batch = [line] * (REPLAY_BYTES // len(line) + 1)
    for i in range(200):
        dec.replay(batch, list(range(len(batch))))
        if dec.overflowed:
            break
    assert dec.overflowed and i * len(batch) * len(line) < 2 * MAX_EVENT_BYTES
    assert not dec.close(0) and rec.error_kind == "malformed_event" and "MiB" in (rec.error or "")
