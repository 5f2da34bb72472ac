"""Trace replay (trace.py): the typed boundary for a trace file, the prompts that share blocks token for token, the
open-loop schedule, and a replay end to end against the emitter. The cross-check against AIPerf on a real vLLM is
tests/test_trace_aiperf.py."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.errors import UsageError
from tokenbench.offered_load import Level
from tokenbench.metrics import cached_share, summarize
from tokenbench.records import RequestRecord
from tokenbench.store import Store
from tokenbench.kinds.trace import TraceKind
from tokenbench.sweep import SweepConfig, run_sweep
from tokenbench.trace import Trace, TracePrompts, load_trace
from tokenbench.workload import LocalTokenizer, PromptBuilder

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mooncake-trace.jsonl"


def write(tmp_path: Path, name: str, lines: list[Any]) -> Path:
    p = tmp_path / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


def line(ts: Any = 0, n_in: Any = 600, n_out: Any = 8, hids: Any = None, **more: Any) -> dict[str, Any]:
    d = {"timestamp": ts, "input_length": n_in, "output_length": n_out, **more}
    if hids is not None:
        d["hash_ids"] = hids
    return d


# ---- the boundary: a malformed trace is refused in one line naming file, line and field -------------------------

def refused(path: Path, block: int = 512) -> str:
    with pytest.raises(UsageError) as e:
        load_trace(path, block)
    text = str(e.value)
    assert len(text.splitlines()) == 1 and str(path) in text
    return text


def test_a_line_that_is_not_json_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "t.jsonl", [line(), '{"timestamp": 5, "input_length": 6'])
    assert f"{p}:2: line: not JSON (Expecting ',' delimiter at column 35)" in refused(p)
    # Python's words for a string cut short end in "at": the column follows them ("starting at at" once)
    p = write(tmp_path, "t.jsonl", [line(), '{"timestamp": 5, "input_len'])
    assert refused(p).endswith(f"{p}:2: line: not JSON (Unterminated string starting at column 18)")


@pytest.mark.parametrize("body", ['{"id": "t", "block_size": 64, "requests": [{"t": 0, "in": 1', "", "[]", "[1, 2]"])
def test_a_file_whose_format_cannot_be_told_is_refused_for_its_fault_not_an_option(
        tmp_path: Path, body: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A Weka trace cut short (a Weka trace goes with --concurrency), or an empty file, was told "--trace sets every
    request's length and send time: drop --concurrency": its format cannot be told, so it is read as Mooncake
    JSONL, and what is wrong with it is said, with how to name its format."""
    p = tmp_path / "t.json"
    p.write_text(body)
    argv = ["sweep", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--trace", str(p), "--concurrency", "2",
            "--db", str(tmp_path / "r.db")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "drop --concurrency" not in err, err
    said = "not a JSON object" if body.startswith("[") else "not JSON" if body else "empty"
    assert f"{p}" in err and "--trace-format" in err and said in err, err
    if body.startswith("{"):  # said as a JSON document cut short, not as line 1 of a Mooncake JSONL file
        assert f"{p} is not JSON (Expecting ',' delimiter at line 1, column 60, at its end: cut short?)" in err, err
        assert "read as Mooncake" not in err, err
        # in a folder, where only a file of Weka traces is read: its fault is said, not only that it is none
        assert main([*argv[:6], str(tmp_path), *argv[7:]]) == 2
        err = capsys.readouterr().err
        assert "is one; t.json is not JSON (" in err, err


def test_a_named_format_is_the_one_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--trace-format mooncake|csv is obeyed, not the file's name: a CSV named as Mooncake is refused as JSON it is
    not (it was replayed as CSV, the option dropped), and a Mooncake file named as CSV for its missing header."""
    csv = tmp_path / "t.csv"
    csv.write_text("timestamp,input_length,output_length\n0,100,8\n")
    assert load_trace(csv, 16, "csv").format == "csv"
    with pytest.raises(UsageError, match="t.csv:1: line: not JSON"):
        load_trace(csv, 16, "mooncake")
    moon = write(tmp_path, "t.jsonl", [line(0, 40, 5)])
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(moon), "--trace-format", "csv"]) == 2
    assert "t.jsonl:1: header: a CSV trace starts with the header" in capsys.readouterr().err


def test_a_trace_that_would_take_more_than_a_week_is_refused(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Timestamps of 1e20 ms started a replay that waited on without end; it is refused, with the speed that
    would replay it in an hour, and a fast enough --trace-speed is taken."""
    far = write(tmp_path, "far.jsonl", [line(0, 40, 5), line(1e10, 40, 5)])  # 116 days
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(far)]) == 2
    err = capsys.readouterr().err
    assert "far.jsonl spans 116 days at --trace-speed 1, more than a week" in err and "--trace-speed 2,778" in err
    # past the check, the next step (the server at port 9) is what refuses it
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(far), "--trace-speed", "2778"]) == 3


def test_a_line_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "t.jsonl", [line(), "[1, 2, 3]"])
    assert f"{p}:2: line: not a JSON object" in refused(p)


@pytest.mark.parametrize("field", ["timestamp", "input_length", "output_length"])
def test_a_missing_field_is_refused(tmp_path: Path, field: str) -> None:
    d = line()
    del d[field]
    p = write(tmp_path, "t.jsonl", [line(), d])
    assert f"{p}:2: {field}: missing" in refused(p)


@pytest.mark.parametrize(("field", "value", "why"), [
    ("input_length", -5, "-5 is not a positive number of tokens"),
    ("input_length", 0, "0 is not a positive number of tokens"),
    ("output_length", -1, "-1 is not a positive number of tokens"),
    ("input_length", 12.5, "12.5 is not a whole number of tokens"),
    ("output_length", "16", "'16' is not a whole number of tokens"),
    ("input_length", True, "True is not a whole number of tokens"),
    ("output_length", 1 << 40, "1099511627776 tokens is more than a trace line may ask for"),
])
def test_a_negative_or_non_integer_length_is_refused(tmp_path: Path, field: str, value: Any, why: str) -> None:
    d = line()
    d[field] = value
    p = write(tmp_path, "t.jsonl", [d])
    assert f"{p}:1: {field}: {why}" in refused(p)


@pytest.mark.parametrize(("value", "why"), [
    (-1, "is negative"), ("0", "is not a number of milliseconds"), (None, "is not a number of milliseconds"),
])
def test_a_bad_timestamp_is_refused(tmp_path: Path, value: Any, why: str) -> None:
    p = write(tmp_path, "t.jsonl", [line(ts=value)])
    assert f"{p}:1: timestamp: " in refused(p) and why in refused(p)


def test_a_nan_timestamp_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "t.jsonl", ['{"timestamp": NaN, "input_length": 5, "output_length": 5}'])
    assert f"{p}:1: timestamp: nan is not a number of milliseconds" in refused(p)


def test_timestamps_going_backwards_are_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "t.jsonl", [line(0), line(100), "", line(50)])
    assert f"{p}:4: timestamp: 50 ms is before line 2's 100 ms" in refused(p)


@pytest.mark.parametrize("hids", ["0,1", [0, "1"], [0, 1.5], [True], {"a": 1}])
def test_hash_ids_not_a_list_of_ints_is_refused(tmp_path: Path, hids: Any) -> None:
    p = write(tmp_path, "t.jsonl", [line(hids=hids)])
    assert f"{p}:1: hash_ids: not a list of whole numbers" in refused(p)


def test_more_hash_ids_than_the_input_can_hold_are_refused(tmp_path: Path) -> None:
    # 3 blocks of 512 need at least 1025 tokens: the last one would be empty
    p = write(tmp_path, "t.jsonl", [line(n_in=1024, hids=[0, 1, 2])])
    assert f"{p}:1: hash_ids: 3 blocks of 512 tokens need more than 1024 input tokens" in refused(p)
    assert "--trace-block" in refused(p)


def test_an_input_longer_than_its_blocks_is_refused(tmp_path: Path) -> None:
    p = write(tmp_path, "t.jsonl", [line(n_in=1100, hids=[0, 1])])
    assert f"{p}:1: hash_ids: 2 blocks of 512 tokens hold at most 1024 input tokens" in refused(p)
    assert load_trace(p, block=600).requests[0].block_tokens(600) == [600, 500]
    one = write(tmp_path, "one.jsonl", [line(n_in=600, hids=[-1])])
    assert f"{one}:1: hash_ids: 1 block of 512 tokens holds at most 512 input tokens" in refused(one)


@pytest.mark.parametrize(("name", "text"), [("t.jsonl", ""), ("t.jsonl", "\n\n  \n"), ("t.csv", ""),
                                           ("t.csv", "timestamp,input_length,output_length\n\n")])
def test_an_empty_file_is_refused(tmp_path: Path, name: str, text: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    assert f"{p}: an empty trace: no requests in it" in refused(p)


def test_a_csv_without_the_header_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("0,600,8\n100,700,8\n")
    assert f"{p}:1: header: a CSV trace starts with the header timestamp,input_length,output_length" in refused(p)


def test_a_csv_row_with_a_bad_field_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("timestamp,input_length,output_length\n0,600,8\n100,-3,8\n")
    assert f"{p}:3: input_length: -3 is not a positive number of tokens" in refused(p)
    p.write_text("timestamp,input_length,output_length\n0,600\n")
    assert f"{p}:2: line: 2 fields where the header names 3" in refused(p)
    p.write_text("timestamp,input_length,output_length\nsoon,600,8\n")
    assert f"{p}:2: timestamp: 'soon' is not a number of milliseconds" in refused(p)


def test_unreadable_and_non_utf8_files_are_refused(tmp_path: Path) -> None:
    assert "cannot read it" in refused(tmp_path / "absent.jsonl")
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"timestamp": 0, "input_length": 5, "output_length": 5}\n\xff\xfe\n')
    assert "not UTF-8 text" in refused(p)


def test_the_cli_refuses_a_malformed_trace_in_one_line_exit_2(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "t.jsonl", [line(), line(ts=-3)])
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(p), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{p}:2: timestamp: -3 is negative" in err and "Traceback" not in err

@pytest.mark.parametrize("first", ['{"prompt": "hi", "answer": "x"}', "{}"])
def test_a_json_file_of_no_format_is_refused_naming_the_formats_read(tmp_path: Path, first: str,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A dataset's JSONL given to --trace was refused as a Mooncake trace ("timestamp: missing"): the user was not
    told which formats --trace reads, nor that prompts go to --dataset."""
    p = tmp_path / "prompts.jsonl"
    p.write_text(first + "\n")
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(p), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    keys = "prompt, answer" if "prompt" in first else "none"
    assert f"{p}: not a trace tokenbench reads: its first record's keys ({keys})" in err
    assert "Mooncake JSONL" in err and "MLCommons" in err and "--dataset" in err and "missing" not in err


def test_a_session_log_whose_header_line_was_removed_is_said_so(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A recording with its first line removed by hand was "not a trace tokenbench reads: its first record's keys
    (session, parent, sent, ...) are no format's": those are a session log's own keys."""
    log = Path(__file__).resolve().parents[1] / "examples" / "trajectories" / "session-log.jsonl"
    p = tmp_path / "mine.jsonl"
    p.write_text("".join(log.read_text().splitlines(True)[1:]))
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(p), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{p}: its first record is a session log's call, with no header line before it" in err, err



@pytest.mark.parametrize("argv", [["--concurrency", "4"], ["--rate", "2"], ["--input-len", "100"],
                                  ["--output-len", "9"], ["--shape", "short"]])
def test_the_cli_refuses_load_and_length_options_beside_a_trace(tmp_path: Path, argv: list[str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "t.jsonl", [line()])
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(p), *argv, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--trace sets every request's length and send time: drop " + argv[0] in err


@pytest.mark.parametrize("argv", [["--repetitions", "2"], ["--workers", "2"], ["--ray", "auto"]])
def test_the_cli_refuses_repetitions_and_workers_beside_a_trace(tmp_path: Path, argv: list[str],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "t.jsonl", [line()])
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(p), *argv, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "--trace is replayed once, by one process" in err and len(err.strip().splitlines()) == 1


def test_more_requests_than_the_trace_holds_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--requests 2000 on the packaged 16-request trace ran 16 and said nothing of the rest."""
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(EXAMPLE), "--trace-block", "64",
                 "--requests", "2000", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--requests 2000: mooncake-trace.jsonl holds 16 requests, replayed once" in err


TRAJECTORIES = EXAMPLE.parent / "trajectories" / "agents"


@pytest.mark.parametrize("trace", [EXAMPLE, TRAJECTORIES])
@pytest.mark.parametrize("extra, says", [
    (["--background", "2"], "--background runs beside agent sessions"),
    (["--turns", "3"], "--turns shapes agent sessions"),
])
def test_session_options_on_a_trace_are_refused(capsys: pytest.CaptureFixture[str], trace: Path,
                                                extra: list[str], says: str) -> None:
    """--background with --trace ran the replay alone, said nothing, and stored no background."""
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(trace), "--trace-block", "64",
                 *extra, "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and ": drop it" in err and len(err.splitlines()) == 1, err


def test_a_missing_trace_is_said_before_the_options_that_go_with_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--answers live on a missing file said it was a request trace; --concurrency said to drop it, which capacity
    needs for its search."""
    for cmd, more in (("sweep", ["--answers", "live"]), ("sweep", ["--concurrency", "2"]),
                      ("capacity", ["--concurrency", "1:4", "--slo", "ttft_p90=10s"])):
        code = main([cmd, "--url", "http://127.0.0.1:9/v1", "--trace", str(tmp_path / "x"), *more, "--quiet"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "cannot read it (No such file or directory)" in err, (cmd, more, err)


# ---- what a trace says ------------------------------------------------------------------------------------------

def test_mooncake_and_csv_read_the_same(tmp_path: Path) -> None:
    m = load_trace(write(tmp_path, "t.jsonl", [line(0, 600, 8, [0, 1], extra={"x": 1}), line(250.5, 40, 3)]))
    c = tmp_path / "t.csv"
    c.write_text("timestamp, input_length ,output_length\n0,600,8\n\n250.5,40,3\n")
    ct = load_trace(c)
    assert m.format == "mooncake" and ct.format == "csv"
    assert [(r.timestamp_ms, r.input_length, r.output_length) for r in m.requests] == \
        [(r.timestamp_ms, r.input_length, r.output_length) for r in ct.requests] == [(0, 600, 8), (250.5, 40, 3)]
    assert m.requests[0].hash_ids == (0, 1) and m.requests[0].block_tokens(512) == [512, 88]
    assert ct.requests[1].line == 4 and ct.distinct_blocks == 0 and ct.ideal_cached_share() == 0


def test_schedule_speed_and_head(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path, "t.jsonl", [line(1000), line(1500), line(3000)]))
    assert t.schedule() == (0.0, 0.5, 2.0)  # the first timestamp is the origin
    assert t.schedule(2.0) == (0.0, 0.25, 1.0)
    assert t.span_s == 2.0 and t.head(2).span_s == 0.5 and t.head(None) is t and t.head(9) is t
    assert t.head(2).lines_in_file == 3


def test_ideal_cached_share_counts_prefixes_seen_before(tmp_path: Path) -> None:
    t = load_trace(write(tmp_path, "t.jsonl", [
        line(0, 1200, 5, [0, 1, 2]),       # 1200 new
        line(1, 1800, 5, [0, 3, 4, 5]),    # block 0 (512) seen
        line(2, 1300, 5, [0, 3, 6]),       # blocks 0 and 3 (1024) seen
        line(3, 100, 5),                   # no blocks: unique
        line(4, 600, 5, [7, 1]),           # block 1 was seen, but after block 0: no prefix cache serves it
        line(5, 1100, 5, [0, 1, 8]),       # 0 and 1 seen as a prefix: 1024
    ]))
    assert t.distinct_blocks == 9
    assert t.ideal_cached_share() == pytest.approx((512 + 1024 + 1024) / (1200 + 1800 + 1300 + 100 + 600 + 1100))
    # a partial last block is served as far as it was sent before
    t2 = load_trace(write(tmp_path, "t2.jsonl", [line(0, 600, 5, [0, 1]), line(1, 1024, 5, [0, 1]),
                                                 line(2, 700, 5, [0, 1])]))
    assert t2.ideal_cached_share() == pytest.approx((600 + 700) / (600 + 1024 + 700))


def test_the_example_trace_shares_blocks() -> None:
    t = load_trace(EXAMPLE, 64)
    assert len(t.requests) >= 8 and t.distinct_blocks > 0 and 0.2 < t.ideal_cached_share() < 0.9


# ---- prompts ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> LocalTokenizer:
    """A byte-level BPE trained here, like the embedded model's (its pre-tokenizer splits before a space)."""
    pytest.importorskip("tokenizers")
    from tokenbench.engines.tiny import _train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    _train_tokenizer(d)
    return LocalTokenizer(str(d / "tokenizer.json"))


SHARED = [line(0, 1200, 5, [0, 1, 2]), line(105, 1800, 7, [0, 3, 4, 5]), line(274, 1300, 5, [0, 3, 6]),
          line(300, 100, 3)]


def build(tok: Any, trace: Trace, seed: int = 7, tag: str = "run1", warmups: int = 0) -> list[tuple[int, Any]]:
    tp = TracePrompts(PromptBuilder(tok, seed, tag), trace, lambda n: {"n": n}, warmups)
    asyncio.run(tp.prepare(warmups + len(trace.requests)))
    assert tp.fixed == 0
    return tp.pool


def test_prompts_have_the_trace_lengths_and_share_blocks_token_for_token(tok: LocalTokenizer, tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "t.jsonl", SHARED))
    pool = build(tok, trace)
    ids = [asyncio.run(tok.encode(req.prompt)) for _, req in pool]
    for (idx, req), r, got in zip(pool, trace.requests, ids):
        assert len(got) == req.expected_input_tokens == r.input_length  # checked with the tokenizer
        assert req.max_tokens == r.output_length and req.extra_body == {"n": r.output_length}
    assert ids[0][:512] == ids[1][:512] == ids[2][:512]          # block 0
    assert ids[1][:1024] == ids[2][:1024]                        # blocks 0 and 3
    assert ids[0][512:520] != ids[1][512:520]                    # 1 and 3 differ
    assert ids[3][:8] != ids[0][:8]                              # no hash ids: a prompt of its own


def test_blocks_are_seeded_by_the_seed_and_the_hash_id_alone(tok: LocalTokenizer, tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "t.jsonl", SHARED))
    a, b, c = build(tok, trace, 7, "run1"), build(tok, trace, 7, "run2"), build(tok, trace, 8, "run1")
    assert [r.prompt for _, r in a[:3]] == [r.prompt for _, r in b[:3]]   # the same seed: the same blocks
    assert a[3][1].prompt != b[3][1].prompt                             # a request without blocks: its own
    assert not {r.prompt[:200] for _, r in a} & {r.prompt[:200] for _, r in c}  # another seed: other blocks


def test_warmups_come_first_and_share_nothing(tok: LocalTokenizer, tmp_path: Path) -> None:
    trace = load_trace(write(tmp_path, "t.jsonl", SHARED))
    pool = build(tok, trace, warmups=2)
    assert [i for i, _ in pool] == [4, 5, 0, 1, 2, 3]
    warm = [asyncio.run(tok.encode(r.prompt)) for _, r in pool[:2]]
    assert [len(w) for w in warm] == [1200, 1800] and warm[0][:16] != warm[1][:16]
    measured = asyncio.run(tok.encode(pool[2][1].prompt))
    assert warm[0][:16] != measured[:16] and warm[1][:16] != measured[:16]


class WordTokenizer:
    """A word a token, and one more for a leading space: concatenated blocks lose a token at each boundary, as a
    tokenizer that merges across a block boundary would."""

    description = "words"

    def __init__(self) -> None:
        self.words: dict[int, str] = {0: " "}

    async def encode(self, text: str) -> list[int]:
        out = [0] if text.startswith(" ") else []
        for w in text.split():
            self.words[1 + hash(w) % 100000] = w
            out.append(1 + hash(w) % 100000)
        return out

    async def decode(self, ids: list[int]) -> str:
        lead = " " if ids[:1] == [0] else ""
        return lead + " ".join(self.words[i] for i in ids if i != 0)


def test_a_count_off_at_a_block_boundary_is_fixed_at_the_tail(tmp_path: Path) -> None:
    tok = WordTokenizer()
    trace = load_trace(write(tmp_path, "t.jsonl", [line(0, 50, 4, [0, 1, 2])]), block=20)
    tp = TracePrompts(PromptBuilder(tok, 3, "x"), trace, lambda n: {}, 0)
    asyncio.run(tp.prepare(1))
    text = tp.pool[0][1].prompt
    assert tp.fixed == 1 and tp.pool[0][1].expected_input_tokens == 50
    assert len(asyncio.run(tok.encode(text))) == 50


# ---- the open-loop schedule -------------------------------------------------------------------------------------

def test_a_trace_heading_says_the_rate_its_row_is_labelled() -> None:
    # "16 requests over 4.478 s" above a row labelled 3.35/s read as 3.57/s: 16 sends over that span are 15 gaps
    from tokenbench.describe import trace_heading

    schedule = tuple(4.478 * k / 15 for k in range(16))
    rate = Level(schedule=schedule).offered_rate
    head = trace_heading({"path": "t.jsonl", "requests": 16, "replay_s": 4.478, "speed": 1.0})
    assert rate == 3.35 and f"16 requests over 4.478 s (x1.0), sent at {rate:g}/s (15 gaps" in head
    assert "sent at" not in trace_heading({"path": "t.jsonl", "requests": 1, "replay_s": 0.0, "speed": 1.0})


def test_a_schedule_level_sends_at_its_times() -> None:
    lv = Level(schedule=(0.0, 0.5, 2.0))
    assert lv.open and lv.offered_rate == 1.0 and lv.describe() == "trace 3 requests over 2 s"
    assert list(lv.arrivals(0.1, random.Random(1))) == [0.1, 0.6, 2.1]
    assert Level(schedule=(0.0, 0.0)).offered_rate is None and not Level(concurrency=2).open
    # one is one: the progress said "1 agents" and "trace 1 requests over 0 s"
    assert [Level(concurrency=c, cache="warm").describe() for c in (1, 2)] == ["1 agent, cache warm",
                                                                             "2 agents, cache warm"]
    assert Level(schedule=(0.0,)).describe() == "trace 1 request over 0 s"


def test_a_rate_level_draws_the_same_arrivals_as_before() -> None:
    lv = Level(rate=4.0)
    got = lv.arrivals(0.0, random.Random(5))
    rng, t, want = random.Random(5), 0.0, []
    for _ in range(20):
        want.append(t)
        t += rng.expovariate(4.0)
    assert [next(got) for _ in range(20)] == want
    assert [next(Level(rate=4.0, arrival="constant").arrivals(0.5, rng)) for _ in range(1)] == [0.5]


def test_cached_share_of_a_level() -> None:
    recs = [RequestRecord(index=i, sent_ns=1, first_token_ns=2, end_ns=3, input_tokens=100, output_tokens=2,
                          cached_tokens=c, cached_tokens_source="usage" if c is not None else None)
            for i, c in enumerate([0, 50, 100, None])]
    assert cached_share(recs) == (150 / 300, "usage")
    s = summarize(recs, concurrency=None, rate=2.0, window_start_ns=0)
    assert s.cached_share == 0.5 and s.cached_source == "usage" and s.to_dict()["cached_share"] == 0.5
    assert cached_share(recs[3:]) == (None, None)


# ---- a replay end to end ----------------------------------------------------------------------------------------

def replay(url: str, path: Path, store: Store, **kw: Any) -> Any:
    requests = kw.pop("requests", None)  # the trace's first N, as --requests N asks
    kind = TraceKind(load_trace(path, kw.pop("block", 16)).head(requests), kw.pop("trace_speed", 1.0))
    cfg = SweepConfig(url=url, workload=kind, requests=requests, guard="off", seed=3, **kw)
    return asyncio.run(run_sweep(cfg, store))


MOONCAKE = [line(0, 40, 5, [0, 1, 2]), line(100, 60, 7, [0, 3, 4, 5]), line(250, 36, 3, [0, 3, 6]),
            line(400, 10, 4)]


def test_a_replay_sends_each_request_at_its_time_with_its_lengths(emitter: BackgroundEmitter,
                                                                  tmp_path: Path) -> None:
    emitter.configure(ttft_s=0.005, itl_s=0.001)
    store = Store(tmp_path / "r.db")
    res = replay(emitter.url, write(tmp_path, "t.jsonl", MOONCAKE), store, warmup=1, trace_speed=2.0)
    assert res.status == "complete", res.error
    s = res.outcomes[0].summary
    assert s.completed == 4 and s.failed == 0 and s.rate == pytest.approx(3 / 0.2)
    recs = [r for r in store.requests(res.run_id) if r.phase == "measured"]
    start = min(r.scheduled_ns for r in recs)
    # scheduled at timestamp / speed; sent on time (the actual send time is recorded beside it)
    assert [round((r.scheduled_ns - start) / 1e6) for r in sorted(recs, key=lambda r: r.index)] == [0, 50, 125, 200]
    assert all(0 <= (r.sent_ns - r.scheduled_ns) / 1e6 < 50 for r in recs) and s.send_delay_ms is not None
    bodies = emitter.emitter.requests_seen[2:]  # after the check request and the warm-up
    # the emitter counts words: each prompt has the trace's length, and each request its own output length
    assert [(len(b["prompt"].split()), b["max_tokens"], b["min_tokens"]) for b in bodies] == \
        [(40, 5, 5), (60, 7, 7), (36, 3, 3), (10, 4, 4)]
    assert bodies[0]["prompt"].split()[:16] == bodies[1]["prompt"].split()[:16] == bodies[2]["prompt"].split()[:16]
    assert bodies[1]["prompt"].split()[:32] == bodies[2]["prompt"].split()[:32]
    assert [r.expected_output_tokens for r in sorted(recs, key=lambda r: r.index)] == [5, 7, 3, 4]
    assert "output_short" not in s.flags
    t = res.manifest.workload["trace"]
    assert t["requests"] == 4 and t["speed"] == 2.0 and t["span_s"] == 0.4 and t["replay_s"] == 0.2
    assert t["block"] == 16 and t["distinct_blocks"] == 7 and len(t["sha256"]) == 64
    assert t["ideal_cached_share"] == pytest.approx((16 + 32) / 146, abs=1e-4)
    assert res.manifest.workload["input_len"] == 60 and res.manifest.workload["output_len"] == 7
    assert res.manifest.load["levels"] == ["trace 4 requests over 0.2 s"]


def test_more_warm_ups_than_the_trace_holds_leave_the_trace_whole(emitter: BackgroundEmitter,
                                                                    tmp_path: Path) -> None:
    """A warm-up plays the trace's first arrivals: asked for more than it holds (the default 4 on a short trace),
    it sends as many as it holds, and the measured window is the trace, each request with its own lengths. The
    rest of the warm-up prompts were once sent as the trace's first requests, and its last request not at all."""
    emitter.configure(ttft_s=0.002, itl_s=0.001)
    store = Store(tmp_path / "r.db")
    res = replay(emitter.url, write(tmp_path, "t.jsonl", MOONCAKE), store, warmup=6, trace_speed=8.0)
    assert res.status == "complete", res.error
    recs = store.requests(res.run_id)
    assert sum(r.phase == "warmup" for r in recs) == 4
    measured = sorted((r for r in recs if r.phase == "measured"), key=lambda r: r.index)
    assert [r.index for r in measured] == [0, 1, 2, 3]
    assert [r.expected_output_tokens for r in measured] == [5, 7, 3, 4]
    bodies = emitter.emitter.requests_seen[-4:]  # the measured ones, the trace in order
    assert [(len(b["prompt"].split()), b["max_tokens"]) for b in bodies] == [(40, 5), (60, 7), (36, 3), (10, 4)]


def test_requests_cut_the_trace_short(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    res = replay(emitter.url, write(tmp_path, "t.jsonl", MOONCAKE), store, warmup=0, requests=2)
    assert res.outcomes[0].summary.completed == 2
    t = res.manifest.workload["trace"]
    assert t["requests"] == 2 and t["requests_in_file"] == 4 and t["span_s"] == 0.1


def test_a_duration_stops_the_replay_at_a_time(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    res = replay(emitter.url, write(tmp_path, "t.jsonl", MOONCAKE), store, warmup=0, duration_s=0.2)
    assert res.outcomes[0].summary.completed == 2  # sent at 0 and 100 ms; the next was due at 250 ms


def test_a_replay_lets_llama_server_cache_its_prompts(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """Every other sweep sends llama-server cache_prompt: false (unique prompts, no cache); a trace's shared
    blocks are what its prefix cache is for."""
    emitter.configure(slot_ctx=4096)
    store = Store(tmp_path / "r.db")
    res = replay(emitter.url, write(tmp_path, "t.jsonl", MOONCAKE), store, warmup=0)
    assert res.manifest.engine == "llama.cpp"
    bodies = emitter.emitter.requests_seen[1:]
    assert [(b["cache_prompt"], b["n_predict"], b["ignore_eos"]) for b in bodies] == \
        [(True, 5, True), (True, 7, True), (True, 3, True), (True, 4, True)]
    assert res.manifest.to_dict()["request_fields"] == {"cache_prompt": True}


def test_the_library_refuses_repetitions_and_workers(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    p = write(tmp_path, "t.jsonl", MOONCAKE)
    for options in ({"repetitions": 2}, {"workers": 2}, {"ray": "auto"}):
        with pytest.raises(UsageError, match="replayed once, by one process"):
            replay(emitter.url, p, Store(tmp_path / "r.db"), **options)


def test_sweep_trace_from_the_command_line(emitter: BackgroundEmitter, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code = main(["sweep", "--url", emitter.url, "--trace", str(EXAMPLE), "--trace-block", "64",
                 "--trace-speed", "8", "--requests", "6", "--warmup", "0", "--guard", "off", "--json", str(out),
                 "--quiet"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    doc = json.loads(out.read_text())
    lv = doc["levels"][0]
    assert lv["completed"] == 6 and lv["concurrency"] is None and lv["rate"] > 0
    assert doc["manifest"]["workload"]["trace"]["speed"] == 8.0
    assert doc["manifest"]["workload"]["trace"]["requests"] == 6
    assert "/s" in cap.out  # the table labels the level by its offered rate


def test_a_served_path_is_named_once_above_the_table() -> None:
    """The embedded engine serves its model by its path, and the tokenizer is read from the same folder: the
    heading printed the path twice ('model /.../hf; ...; tokenizer: local /.../hf'), a new user found."""
    from tokenbench.describe import describe_run
    from tokenbench.results import Manifest

    path = "/home/me/.cache/tokenbench/tiny-llama-v2/hf"
    line = describe_run(Manifest.from_dict({"model": path, "engine": "transformers", "tokenizer": f"local {path}"}))
    assert line.count(path) == 1 and "tokenizer: the model's own" in line, line
    other = describe_run(Manifest.from_dict({"model": "qwen", "engine": "vllm", "tokenizer": f"local {path}"}))
    assert f"tokenizer: local {path}" in other
