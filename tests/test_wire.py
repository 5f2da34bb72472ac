"""The typed boundary (wire.py, decoder.StreamDecoder): whatever a server streams becomes typed values or a counted
error record, never an exception; impossible values are errors, not data; and failure is never reported as
success."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import fuzz_examples
from tokenbench.cli import main
from tokenbench.client import StreamClient
from tokenbench.decoder import StreamDecoder
from tokenbench.emitter import BackgroundEmitter
from tokenbench.records import RequestRecord
from tokenbench.sse import SSEParser
from tokenbench.store import Store

#: Generated streams per property test: 10,000 in `make test` and CI, fewer in `make test-fast` (conftest.py's
#: fuzz_examples); TOKENBENCH_FUZZ_EXAMPLES sets the count outright.
EXAMPLES = int(os.environ.get("TOKENBENCH_FUZZ_EXAMPLES") or fuzz_examples(10_000))
ERROR_KINDS = {"malformed_event", "invalid_usage", "server_error_event", "stream_incomplete"}


def _valid(chat: bool, text: str = " w") -> dict[str, Any]:
    part = {"delta": {"content": text}} if chat else {"text": text}
    return {"id": "x", "choices": [{"index": 0, **part, "finish_reason": None}]}


def _usage(completion: Any = 3, prompt: Any = 4) -> dict[str, Any]:
    return {"id": "x", "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}


def _stream(events: list[Any], done: bool = True) -> bytes:
    out = b"".join(b"data: " + (e if isinstance(e, bytes) else json.dumps(e).encode()) + b"\n\n" for e in events)
    return out + (b"data: [DONE]\n\n" if done else b"")


CLIENT = StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m")  # type: ignore[arg-type]


def decode(data: bytes, chat: bool = False, cuts: list[int] | None = None) -> RequestRecord:
    """Feed ``data`` to a decoder, split at ``cuts``, and close it as the client does."""
    rec = RequestRecord(index=0)
    dec = StreamDecoder(rec, chat)
    bounds = [0, *sorted(c for c in (cuts or []) if 0 < c < len(data)), len(data)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if b > a:
            dec.feed(data[a:b], 1000 + i)
    if dec.close(10_000):
        CLIENT._count_tokens(rec, dec.usage)
    return rec


def _check(rec: RequestRecord) -> None:
    """What must hold for any input: an error of a known kind, or a success with sane counts."""
    if rec.ok:
        assert rec.output_tokens is not None and rec.output_tokens >= 0
    else:
        assert rec.error_kind in ERROR_KINDS and isinstance(rec.error, str)
    assert rec.malformed_events >= 0 and len(rec.chunk_ns) == len(rec.chunk_chars)


def test_a_valid_stream_is_read() -> None:
    rec = decode(_stream([_valid(False), _valid(False), _usage(2)]))
    assert rec.ok and rec.output_tokens == 2 and rec.answer_text == " w w" and len(rec.chunk_ns) == 2


# The single-field mutations the issue measured: each raised from the client before.
POISON = {
    "error object without a message": {"error": {"code": 503}},
    "choices not a list": {"choices": {"0": {"text": "a"}}},
    "a choice not an object": {"choices": ["a"]},
    "delta not an object": {"choices": [{"index": 0, "delta": "a"}]},
    "token text not a string": {"choices": [{"index": 0, "text": 7, "delta": {"content": 7}}]},
    "usage not an object": {"choices": [], "usage": [3]},
    "details not an object": {"choices": [], "usage": {"completion_tokens": 3, "completion_tokens_details": 5}},
    "timings not an object": {"choices": [], "timings": "fast"},
    "count is a string": {"choices": [], "usage": {"completion_tokens": ""}},
    "count is a list": {"choices": [], "usage": {"completion_tokens": [3]}},
    "count is negative": {"choices": [], "usage": {"completion_tokens": -400}},
    "count has a fraction": {"choices": [], "usage": {"completion_tokens": 2.5}},
    "count is true": {"choices": [], "usage": {"prompt_tokens": True}},
    "timing negative": {"choices": [], "timings": {"predicted_ms": -1}},
    "count of 400 digits": {"choices": [], "usage": {"completion_tokens": 10**400}},
    "timing of 400 digits": {"choices": [], "timings": {"predicted_n": 10**400}},
}


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("name", sorted(POISON))
def test_a_poisoned_event_is_a_counted_error(name: str, chat: bool) -> None:
    if name == "delta not an object" and not chat:
        pytest.skip("completions streams carry no delta: the field is not read")
    rec = decode(_stream([_valid(chat), POISON[name], _valid(chat), _usage(2)]), chat=chat)
    assert not rec.ok, name
    assert rec.error_kind in ERROR_KINDS
    if name != "error object without a message":
        assert rec.malformed_events == 1 and rec.error_kind in ("malformed_event", "invalid_usage")
    assert rec.output_tokens is None  # nothing published from a refused stream


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_counts_are_refused(raw: bytes) -> None:
    rec = decode(_stream([_valid(False), b'{"choices": [], "usage": {"completion_tokens": ' + raw + b"}}"]))
    assert rec.error_kind == "invalid_usage" and rec.output_tokens is None


def test_nesting_5000_deep_and_an_unterminated_64mb_line() -> None:
    deep = b"[" * 5000 + b"]" * 5000
    rec = decode(_stream([_valid(False), deep]))
    assert rec.error_kind == "malformed_event" and "nested too deep" in (rec.error or "")
    big = b"data: " + b"x" * (64 << 20)  # no newline ever: the stream just ends
    rec = decode(big, cuts=list(range(0, len(big), 1 << 16)))
    assert rec.error_kind == "malformed_event"  # 64 MiB is not an event; read in linear time


def test_an_empty_data_line_is_a_keep_alive_not_an_error() -> None:
    rec = decode(b"data:\n\n" + _stream([_valid(False), _usage(1)]) + b"data: \n\n")
    assert rec.ok and rec.output_tokens == 1


def test_an_endless_event_is_cut_off_at_8_mib() -> None:
    """data lines without the blank line that ends an event: memory stays bounded, the request is an error."""
    rec = RequestRecord(index=0)
    dec = StreamDecoder(rec, chat=False)
    line = b"data: " + b"x" * 65536 + b"\n"
    for i in range(200):
        dec.feed(line, i)
        if dec.overflowed:
            break
    assert dec.overflowed and i < 140
    assert not dec.close(0) and rec.error_kind == "malformed_event" and "MiB" in (rec.error or "")


def test_an_error_object_without_a_message_keeps_its_fields() -> None:
    rec = decode(_stream([{"error": {"code": 503}}], done=False))
    assert rec.error_kind == "server_error_event" and "503" in (rec.error or "")


# Any JSON value, for the property tests: what a hostile server can put where a field belongs.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
FIELDS = [("choices",), ("choices", 0), ("choices", 0, "index"), ("choices", 0, "text"), ("choices", 0, "delta"),
          ("choices", 0, "delta", "content"), ("choices", 0, "delta", "reasoning_content"),
          ("choices", 0, "finish_reason"), ("usage",), ("usage", "completion_tokens"), ("usage", "prompt_tokens"),
          ("usage", "completion_tokens_details"), ("usage", "completion_tokens_details", "reasoning_tokens"),
          ("timings",), ("timings", "predicted_n"), ("timings", "prompt_ms"), ("error",), ("error", "message")]


def _mutate(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> Any:
    obj: Any = base
    for key in path[:-1]:
        nxt = obj[key] if isinstance(obj, list) and isinstance(key, int) and key < len(obj) else None
        if isinstance(obj, dict):
            nxt = obj.setdefault(key, {})
        if not isinstance(nxt, (dict, list)):
            return base
        obj = nxt
    if isinstance(obj, dict):
        obj[path[-1]] = value
    elif isinstance(obj, list) and isinstance(path[-1], int) and path[-1] < len(obj):
        obj[path[-1]] = value
    return base


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(chat=st.booleans(), muts=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(FIELDS), JSON), max_size=3),
       cuts=st.lists(st.integers(0, 400), max_size=6), done=st.booleans())
def test_wrong_types_anywhere_never_raise(chat: bool, muts: list[tuple[int, tuple[Any, ...], Any]],
                                          cuts: list[int], done: bool) -> None:
    events: list[Any] = [_valid(chat), _valid(chat), _valid(chat), {"id": "x", "choices": [], "usage": {}}]
    for i, path, value in muts:
        events[i] = _mutate(events[i], path, value)
    _check(decode(_stream(events, done), chat=chat, cuts=cuts))


@settings(max_examples=EXAMPLES // 4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.binary(max_size=300) | st.lists(st.sampled_from(
    [b"data: ", b"{", b"}", b'"choices"', b":", b"[", b"]", b"\n", b"\r", b"\n\n", b"[DONE]", b'"text"', b"1e999",
     b"-1", b"null", b"event: x", b": ping", b"\xff\xfe"]), max_size=40).map(b"".join), chat=st.booleans())
def test_arbitrary_bytes_never_raise(data: bytes, chat: bool) -> None:
    _check(decode(data, chat=chat, cuts=[len(data) // 3, 2 * len(data) // 3]))


def test_sse_buffer_is_linear() -> None:
    """An event split over 2,048 reads costs no more than copying it a few times (it was quadratic: 35 s)."""
    p = SSEParser()
    for _ in range(2048):
        assert p.feed(b"x" * 4096) == []
    assert p.feed(b"\n\n") == []  # a line without a field name: no event, and no time lost
    assert len(p._buf) == 0


# --- end to end: a poisoned server, a failing server ------------------------------------------------------

@pytest.mark.parametrize("poison", ['{"error": {"code": 503}}', '{"choices": [{"text": 7}]}',
                                    '{"choices": [], "usage": {"completion_tokens": -400}}',
                                    '{"choices": "x"}', "[" * 5000 + "]" * 5000])
def test_a_poisoned_server_fails_the_run_it_does_not_crash_it(poison: str, emitter: BackgroundEmitter,
                                                              tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every request poisoned after the check request: the sweep ends, keeps its levels marked failed, writes its
    JSON, records the run as failed and exits 5. It used to crash with a traceback and leave the run open."""
    emitter.configure(fault="poison", poison=poison, fault_from=1, fault_after=1)
    out, db = tmp_path / "r.json", tmp_path / "r.db"
    code = main(["sweep", "--url", emitter.url, "--concurrency", "1,2", "--requests", "4", "--input-len", "8",
                 "--output-len", "4", "--quiet", "--json", str(out), "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 5, err
    assert "Traceback" not in err and "run failed: 2 of 2 levels failed" in err
    doc = json.loads(out.read_text())
    assert doc["status"] == "failed" and [lv["completed"] for lv in doc["levels"]] == [0, 0]
    assert all("error_rate" in lv["flags"] for lv in doc["levels"])
    (run,) = Store(db).runs()
    assert run.status == "failed"
    # nothing impossible was published: no negative or absent-but-shown throughput
    assert all((lv["output_throughput_tps"] or 0) >= 0 for lv in doc["levels"])


def test_some_failed_requests_under_the_threshold_keep_the_level(emitter: BackgroundEmitter, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """1 failure in 20 (5%) is under --max-error-rate 0.1: the level stands, with its error counted; at
    --max-error-rate 0 the same run fails."""
    args = ["sweep", "--url", emitter.url, "--requests", "20", "--warmup", "0", "--input-len", "8",
            "--output-len", "4", "--quiet", "--db", str(tmp_path / "r.db")]
    # the check request and 19 measured ones pass, the 20th fails
    emitter.configure(fault="http500", fault_from=len(emitter.emitter.requests_seen) + 20)
    assert main([*args, "--json", str(tmp_path / "b.json")]) == 0, capsys.readouterr().err
    b = json.loads((tmp_path / "b.json").read_text())["levels"][0]
    assert (b["completed"], b["failed"]) == (19, 1) and "error_rate" not in b["flags"]
    emitter.configure(fault="http500", fault_from=len(emitter.emitter.requests_seen) + 20)
    assert main([*args, "--max-error-rate", "0", "--json", str(tmp_path / "c.json")]) == 5
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["status"] == "failed" and "error_rate" in c["levels"][0]["flags"]


@pytest.mark.parametrize("bad", ["-0.1", "1.5", "nan"])
def test_max_error_rate_out_of_range_is_refused(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--max-error-rate", bad]) == 2
    assert "--max-error-rate" in capsys.readouterr().err


@settings(max_examples=EXAMPLES // 10, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(max_size=200) | st.lists(st.sampled_from(
    ["# TYPE x counter\n", "# HELP x y\n", "x 1\n", 'x{a="b"} NaN\n', "x_total +Inf\n", "x{", "}", " ", "\n",
     "# TYPE h histogram\n", 'h_bucket{le="1"} 2\n', "h_sum 3\n", "1e999", "-", "\\"]), max_size=30).map("".join))
def test_a_metrics_page_is_numbers_or_a_value_error(text: str) -> None:
    """A /metrics page a hostile server makes up: finite numbers, or ValueError (the sampler's 'not metrics')."""
    from tokenbench.prometheus import parse

    try:
        out = parse(text)
    except ValueError:
        return
    assert all(v == v and abs(v) != float("inf") for v in out.values())


def test_llama_cpp_timings_keep_one_string_per_key_and_drop_what_is_not_a_number() -> None:
    """A record keeps its last timings until the level ends; every record's dict names its keys with the same
    strings (llama.cpp's own), not a new copy from each parse, and a field llama.cpp adds later is kept all the
    same."""
    from tokenbench.wire import parse_event

    def timings(n: int) -> dict[str, float]:
        ev = parse_event(json.dumps({"choices": [], "timings": {"prompt_n": n, "predicted_ms": 1.5 * n,
                                                                 "new_field": 2, "note": "x"}}).encode(), True)
        assert ev is not None and ev.timings is not None
        return ev.timings

    a, b = timings(3), timings(4)
    assert a == {"prompt_n": 3, "predicted_ms": 4.5, "new_field": 2} and b["prompt_n"] == 4
    assert all(x is y for x, y in zip(a, b) if x != "new_field")
