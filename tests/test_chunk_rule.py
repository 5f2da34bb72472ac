"""The chunk rule: a chunk that carries a generated token is a token for TTFT and ITL whether or not
its text is visible yet, as ``vllm bench serve`` counts chunks; where the server counts the tokens a chunk carried,
its count decides. The event shapes are the ones vLLM 0.32 and llama.cpp's llama-server stream (recorded from the
embedded engines serving the small-utf8 model, whose tokens are often pieces of a multi-byte character)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tokenbench.client import StreamClient
from tokenbench.decoder import StreamDecoder
from tokenbench.metrics import summarize
from tokenbench.sweep_table import notes
from tokenbench.records import RequestRecord
from tokenbench.wire import parse_chunk, parse_event

CLIENT = StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m")  # type: ignore[arg-type]


def _chat(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    choice.update(extra)
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}


# (event, chat, carries a token by the rule without counts)
SHAPES = {
    "vLLM opens the message": (_chat({"role": "assistant", "content": ""}), True, False),
    "vLLM held back a piece of a character": (_chat({"content": ""}, token_ids=None), True, True),
    "vLLM token with text": (_chat({"content": " good"}, token_ids=None), True, True),
    "vLLM last token with finish_reason": (_chat({"content": " good"}, "length"), True, True),
    "vLLM usage at the end": ({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}, True, False),
    "llama.cpp opens the message": (_chat({"role": "assistant", "content": None}), True, False),
    "llama.cpp closes with an empty delta": (_chat({}, "length"), True, False),
    "a tool call's arguments": (_chat({"tool_calls": [{"index": 0, "function": {"arguments": "{\""}}]}), True,
                                True),
    "reasoning held back": (_chat({"reasoning": ""}), True, True),
    "completions held back": ({"choices": [{"index": 0, "text": "", "finish_reason": None}]}, False, True),
    "completions closing with empty text": ({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]},
                                            False, False),
    "completions token": ({"choices": [{"index": 0, "text": "22", "finish_reason": None}]}, False, True),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_real_event_shape_is_a_token_or_not_by_the_rule_on_both_parsers(name: str) -> None:
    event, chat, token = SHAPES[name]
    raw = json.dumps(event)
    fast, general = parse_event(raw.encode(), chat), parse_chunk(raw, chat)
    assert fast == general
    assert fast.token is token, name


def _decode(events: list[Any], chat: bool = True, step: int = 10) -> RequestRecord:
    """Each event its own read, stamped 10, 20, 30, ... (``step`` ns apart, after a send at 0)."""
    rec = RequestRecord(index=0, sent_ns=0)
    dec = StreamDecoder(rec, chat)
    for i, ev in enumerate([*events, "[DONE]"]):
        data = ev if isinstance(ev, str) else json.dumps(ev)
        dec.feed(f"data: {data}\n\n".encode(), step * (i + 1))
    if dec.close(step * (len(events) + 2)):
        CLIENT._count_tokens(rec, dec.usage)
    return rec


def test_a_first_token_held_back_starts_ttft_at_its_own_chunk_not_at_the_first_text() -> None:
    """vLLM's stream when the first generated token is the first byte of a CJK character: the role chunk, then
    a chunk with empty content (held back), then the character's text. The old rule (first non-empty text) read
    TTFT at 30 and one interval fewer; the reference reads 10 (vllm bench serve takes the role chunk too)."""
    rec = _decode([_chat({"role": "assistant", "content": ""}), _chat({"content": ""}), _chat({"content": "世"}),
                   _chat({"content": ""}), _chat({"content": "界"}, "length"),
                   {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}])
    assert rec.ok and rec.output_tokens == 4
    assert rec.first_token_ns == 20  # the held-back token's own chunk
    assert rec.first_text_ns == rec.first_answer_ns == 30  # visible text, a metric of its own
    assert list(rec.chunk_ns) == [20, 30, 40, 50]  # every token-bearing chunk, for ITL
    assert list(rec.chunk_chars) == [0, 1, 0, 1]
    assert rec.answer_text == "世界"


def test_the_servers_running_count_decides_where_it_gives_one() -> None:
    """vLLM with continuous_usage_stats: a count on every chunk, from the opening one (0). A chunk whose count
    did not move is not a token even with text; one that moved by two is one chunk."""
    def ev(delta: dict[str, Any], n: int, finish: str | None = None) -> dict[str, Any]:
        return {**_chat(delta, finish), "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}}

    rec = _decode([ev({"role": "assistant", "content": ""}, 0), ev({"content": ""}, 1), ev({"content": "ab"}, 3),
                   ev({"content": ""}, 3), ev({"content": "c"}, 4, "length")])
    assert rec.first_token_ns == 20 and rec.first_text_ns == 30
    assert list(rec.chunk_ns) == [20, 30, 50]  # the chunk at 40 moved no count and showed no text
    assert rec.output_tokens == 4 and rec.output_tokens_source == "usage"


def test_llama_cpp_timings_per_token_count_and_a_total_at_the_end_is_not_a_running_count() -> None:
    def ev(text: str, n: int | None) -> dict[str, Any]:
        e = _chat({"content": text})
        if n is not None:
            e["timings"] = {"predicted_n": n, "prompt_n": 5}
        return e

    # timings_per_token: a count on every token chunk (the opening chunk has none and carries no token)
    rec = _decode([_chat({"role": "assistant", "content": None}), ev("a", 1), ev("", 1), ev("bc", 3),
                   {**_chat({}, "length")}, {"choices": [], "timings": {"predicted_n": 3, "prompt_n": 5}}])
    assert list(rec.chunk_ns) == [20, 40]
    # a total on the closing chunk only (older llama.cpp): not a chunk of 3 tokens
    rec = _decode([_chat({"role": "assistant", "content": None}), ev("a", None), ev("b", None),
                   {**_chat({}, "length"), "timings": {"predicted_n": 2, "prompt_n": 5}}])
    assert list(rec.chunk_ns) == [20, 30] and rec.output_tokens == 2


def test_logprobs_say_how_many_tokens_a_chunk_carried() -> None:
    one = {"token": "\\xe4", "logprob": -1.0, "top_logprobs": []}
    rec = _decode([_chat({"content": ""}, logprobs={"content": [one]}), _chat({"content": ""}, logprobs={"content": []}),
                   _chat({"content": "世"}, logprobs={"content": [one, one]}), _chat({}, "length")])
    assert list(rec.chunk_ns) == [10, 30] and rec.first_text_ns == 30


def test_time_to_first_text_is_its_own_metric_beside_ttft() -> None:
    recs = [_decode([_chat({"content": ""}), _chat({"content": ""}), _chat({"content": "x"}, "length")])
            for _ in range(3)]
    for i, r in enumerate(recs):
        r.index = i
    s = summarize(recs, concurrency=1, rate=None, window_start_ns=0)
    assert s.ttft_ms.p50 == pytest.approx(10 / 1e6)
    assert s.time_to_first_text_ms is not None and s.time_to_first_text_ms.p50 == pytest.approx(30 / 1e6)
    assert s.itl_ms.n == 6  # two intervals per request: every token chunk counts


def test_the_sweep_notes_say_when_text_came_later_than_the_first_token() -> None:
    ms = 1_000_000
    held = [_decode([_chat({"content": ""}), _chat({"content": "x"}, "length")], step=20 * ms) for _ in range(3)]
    plain = [_decode([_chat({"content": "x"}), _chat({"content": "y"}, "length")], step=20 * ms) for _ in range(3)]
    s_held = summarize(held, concurrency=1, rate=None, window_start_ns=0)
    s_plain = summarize(plain, concurrency=1, rate=None, window_start_ns=0)
    line = next(n for n in notes([s_held]) if "first visible text" in n)
    assert "40.0 ms, 20.0 ms after the first token" in line
    assert not any("first visible text" in n for n in notes([s_plain]))
