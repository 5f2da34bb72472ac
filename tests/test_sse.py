from __future__ import annotations

import json

from tokenbench.sse import SSEParser


def feed_all(chunks: list[bytes]) -> list[str]:
    p = SSEParser()
    out = [e.data for c in chunks for e in p.feed(c)]
    return out + [e.data for e in p.close()]


STREAM = (
    b": keep-alive comment\n\n"
    b"data: {\"a\": 1}\n\n"
    b"event: message\ndata: first line\ndata: second line\n\n"
    b"data:no-space\n\n"
    b"id: 7\nretry: 100\n\n"
    b"data: [DONE]\n\n"
)


def test_events_comments_multiline_and_done() -> None:
    assert feed_all([STREAM]) == ['{"a": 1}', "first line\nsecond line", "no-space", "[DONE]"]


def test_every_split_point_gives_the_same_events() -> None:
    whole = feed_all([STREAM])
    for i in range(len(STREAM) + 1):
        assert feed_all([STREAM[:i], STREAM[i:]]) == whole, i


def test_crlf_and_cr_line_endings_even_split_between_cr_and_lf() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    assert feed_all([crlf]) == feed_all([STREAM])
    for i in range(len(crlf) + 1):
        assert feed_all([crlf[:i], crlf[i:]]) == feed_all([STREAM]), i
    assert feed_all([STREAM.replace(b"\n", b"\r")]) == feed_all([STREAM])


def test_line_longer_than_64_kib() -> None:
    text = "x" * (200 * 1024)
    payload = b"data: " + json.dumps({"t": text}).encode() + b"\n\n"
    pieces = [payload[i : i + 1000] for i in range(0, len(payload), 1000)]
    (data,) = feed_all(pieces)
    assert json.loads(data)["t"] == text


def test_last_event_without_blank_line_is_delivered() -> None:
    assert feed_all([b"data: tail"]) == ["tail"]


def test_byte_at_a_time_utf8() -> None:
    payload = "data: héllo ✓\n\n".encode()
    assert feed_all([payload[i : i + 1] for i in range(len(payload))]) == ["héllo ✓"]
