"""Lengths that vary: draws.py's grammar and seeded draw, each request's own lengths through a sweep (the fields
that fix its output length, its record), and the line a run's table states them on."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from tokenbench import findings
from tokenbench.finding import Code
from tokenbench.cli import main
from tokenbench.draws import Draw, DrawError, parse
from tokenbench.emitter import BackgroundEmitter
from tokenbench.metrics import summarize
from tokenbench.records import RequestRecord
from tokenbench.store import Store
from tokenbench.engines.embedded import slot_context
from tokenbench.kinds.lengths import LengthsKind
from tokenbench.sweep import SweepConfig, run_sweep
from tokenbench.workload import WorkloadRecord


# --- the grammar ----------------------------------------------------------------------------------------------

def test_the_grammar() -> None:
    assert parse("128", "--input-len") == Draw.fixed(128)
    assert parse("4k", "--input-len") == Draw.fixed(4096)
    u = parse("uniform:64-256", "--input-len")
    assert (u.kind, u.low, u.high, u.minimum(), u.maximum(), u.expected()) == ("uniform", 64, 256, 64, 256, 160)
    n = parse("normal:128,32", "--output-len")
    assert (n.kind, n.mean, n.sd, n.low, n.high) == ("normal", 128, 32, 1, 128 + 4 * 32)
    assert u.describe() == "uniform 64-256" and n.describe() == "normal 128 sd 32 (1-256)"
    assert n.to_dict() == {"kind": "normal", "unit": "tokens", "text": "normal 128 sd 32 (1-256)", "mean": 128.0,
                           "sd": 32.0, "low": 1.0, "high": 256.0}


def test_a_file_of_lengths(tmp_path: Path) -> None:
    p = tmp_path / "lengths.txt"
    p.write_text("# prompt lengths from our logs\n12, 40\n7 300\n")
    d = parse(f"file:{p}", "--input-len")
    assert d.values == (12, 40, 7, 300) and (d.minimum(), d.maximum()) == (7, 300)
    rng = random.Random(1)
    assert {d.draw(rng) for _ in range(200)} == {12, 40, 7, 300}


@pytest.mark.parametrize(("text", "message"), [
    ("uniform:256-64", "--input-len: uniform:256-64 has its bounds the wrong way round"),
    ("uniform:64", "--input-len: write uniform:LOW-HIGH, e.g. uniform:64-256"),
    ("normal:512", "--input-len: write normal:MEAN,SD, e.g. normal:512,128"),
    ("normal:512,-1", "--input-len: a standard deviation cannot be negative"),
    ("gauss:5,1", "--input-len: 'gauss:5,1' is not a distribution: write a number, uniform:LOW-HIGH, "
                  "normal:MEAN,SD or file:PATH"),
    ("0", "--input-len: 0 is below the least allowed, 1 token"),
    ("1.5", "--input-len: '1.5' is not a whole number of tokens"),
    ("lots", "--input-len: 'lots' is not a token count"),
    ("file:/no/such/file", "--input-len: cannot read /no/such/file: No such file or directory"),
])
def test_the_grammar_refuses_in_one_line(text: str, message: str) -> None:
    with pytest.raises(DrawError) as e:
        parse(text, "--input-len")
    assert str(e.value) == message


# --- the seeded draw ------------------------------------------------------------------------------------------

def test_a_uniform_draw_stays_in_bounds_and_reaches_both() -> None:
    d = parse("uniform:32-96", "--input-len")
    rng = random.Random(7)
    seen = [d.draw(rng) for _ in range(5000)]
    assert min(seen) == 32 and max(seen) == 96 and all(isinstance(v, int) for v in seen)


def test_a_normal_draw_is_clipped() -> None:
    d = parse("normal:10,20", "--output-len")  # most of the mass below 1: clipped there, never 0 or negative
    rng = random.Random(3)
    seen = [d.draw(rng) for _ in range(5000)]
    assert min(seen) == 1 and max(seen) <= 10 + 4 * 20 and seen.count(1) > 1000


def test_the_same_seed_draws_the_same_lengths_and_another_seed_others() -> None:
    ins, outs = parse("uniform:32-96", "--input-len"), parse("normal:64,16", "--output-len")

    def lengths(seed: int) -> list[tuple[int, int]]:
        w = WorkloadRecord(64, 64, seed=seed, input_draw=ins, output_draw=outs)
        return [w.request_lengths(i) for i in range(50)]

    assert lengths(1) == lengths(1)
    assert lengths(1) != lengths(2)
    assert len(set(lengths(1))) > 40  # each request its own draw
    # a fixed side stays fixed, and a fixed workload reads as it always has
    w = WorkloadRecord(24, 6, seed=1)
    assert {w.request_lengths(i) for i in range(10)} == {(24, 6)} and not w.varies
    assert set(w.to_dict()) == {"input_len", "output_len", "shape", "api", "prefix_len", "seed"}


# --- findings compare each request against its own length ---------------------------------------------------

def _rec(i: int, asked: int, got: int) -> RequestRecord:
    r = RequestRecord(index=i, sent_ns=0, first_token_ns=1_000_000, end_ns=2_000_000 * got)
    r.chunk_ns = [1_000_000 * (k + 1) for k in range(got)]
    r.output_tokens, r.output_tokens_source, r.expected_output_tokens = got, "usage", asked
    r.input_tokens, r.input_tokens_source, r.expected_input_tokens = 10 * asked, "usage", 10 * asked
    r.finish_reason = "length"
    return r


def test_varying_lengths_raise_no_false_flag() -> None:
    rs = [_rec(i, asked, asked) for i, asked in enumerate([8, 24, 13, 17])]
    s = summarize(rs, concurrency=1, rate=None, window_start_ns=0)
    codes = {f.code for f in findings.assess(findings.LevelFacts(rs, s, 1))}
    assert Code.OUTPUT_SHORT not in codes and Code.PROMPT_TRUNCATED not in codes


def test_a_short_output_is_named_against_its_own_length() -> None:
    rs = [_rec(0, 8, 8), _rec(1, 24, 20), _rec(2, 13, 5)]
    s = summarize(rs, concurrency=1, rate=None, window_start_ns=0)
    findings.assess(findings.LevelFacts(rs, s, 1))
    short = s.finding(Code.OUTPUT_SHORT)
    assert short is not None and (short.observed, short.threshold) == (5, 13)
    assert short.text.startswith("2/3 outputs stopped before the length each asked for (13..24 tokens) "
                                 "(reached 5..20")


# --- through a sweep: each request's own fields, record and body --------------------------------------------

def _sweep(url: str, tmp_path: Path, seed: int, workers: int = 1) -> tuple[list[RequestRecord], dict[str, object]]:
    cfg = SweepConfig(url=url, concurrency=[2], requests=12, warmup=1, seed=seed, guard="off", workers=workers,
                      workload=LengthsKind(parse("uniform:32-96", "--input-len"), parse("uniform:8-24", "--output-len")))
    store = Store(tmp_path / "r.db")
    res = asyncio.run(run_sweep(cfg, store))
    assert res.status == "complete"
    return store.requests(res.run_id), res.manifest.to_dict()


@pytest.mark.parametrize("workers", [1, 2])
def test_each_request_draws_and_fixes_its_own_lengths(emitter: BackgroundEmitter, tmp_path: Path,
                                                      workers: int) -> None:
    """In this process, and from worker processes (each request's own fields travel with it)."""
    recs, manifest = _sweep(emitter.url, tmp_path, seed=11, workers=workers)
    bodies = emitter.emitter.requests_seen[1:]  # after the check request
    assert len(recs) == len(bodies) == 13
    by_prompt = {b["prompt"]: b for b in bodies}
    w = WorkloadRecord(64, 16, seed=11, input_draw=parse("uniform:32-96", "--input-len"),
                 output_draw=parse("uniform:8-24", "--output-len"))
    for r in recs:
        n_in, n_out = w.request_lengths(r.index)
        assert (r.expected_input_tokens, r.expected_output_tokens) == (n_in, n_out)
        assert (r.input_tokens, r.output_tokens) == (n_in, n_out)  # the emitter's usage: words and max_tokens
    # each body fixes its own length, by the adapter's fields (the emitter answers as vLLM)
    for b in bodies:
        assert b["max_tokens"] == b["min_tokens"] and b["ignore_eos"] is True and len(b["prompt"].split()) >= 32
    assert len({b["max_tokens"] for b in by_prompt.values()}) > 5
    wl = manifest["workload"]
    assert isinstance(wl, dict) and wl["input"]["text"] == "uniform 32-96" and wl["output"]["low"] == 8
    assert (wl["input_len"], wl["output_len"]) == (64, 16)
    assert manifest["request_fields"] == {"ignore_eos": True, "min_tokens": "per request"}


def test_a_run_with_the_same_seed_sends_the_same_lengths(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    def lengths(seed: int) -> list[tuple[int | None, int | None]]:
        recs, _ = _sweep(emitter.url, tmp_path, seed)
        return sorted((r.index, r.expected_input_tokens, r.expected_output_tokens) for r in recs)  # type: ignore

    assert lengths(5) == lengths(5) != lengths(6)


def test_the_user_extra_body_stays_on_top(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    cfg = SweepConfig(url=emitter.url, concurrency=[1], requests=3, warmup=0, seed=1, guard="off",
                      workload=LengthsKind(Draw.fixed(128), parse("uniform:8-24", "--output-len")),
                      extra_body={"min_tokens": 2})
    asyncio.run(run_sweep(cfg, Store(tmp_path / "r.db")))
    assert all(b["min_tokens"] == 2 for b in emitter.emitter.requests_seen)


def test_the_table_states_the_distribution(emitter: BackgroundEmitter, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    code = main(["sweep", "--url", emitter.url, "--input-len", "uniform:16-48", "--output-len", "normal:12,3",
                 "--concurrency", "1,2", "--requests", "4", "--guard", "off", "--quiet", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    flat = " ".join(text.split())  # a narrow terminal ($COLUMNS) wraps the line
    assert "input uniform 16-48 tokens, output normal 12 sd 3 (1-24) tokens" in flat
    assert " in / " not in text.splitlines()[0]  # the run's line leaves the lengths to the line below it
    doc = json.loads(out.read_text())
    assert doc["manifest"]["workload"]["output"]["text"] == "normal 12 sd 3 (1-24)"
    assert all("output_short" not in lv["flags"] for lv in doc["levels"])
    # show prints the same line from the store
    assert main(["show", doc["run_id"]]) == 0
    assert "input uniform 16-48 tokens, output normal 12 sd 3 (1-24) tokens" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("argv", "message"), [
    (["--input-len", "uniform:9-3"], "--input-len: uniform:9-3 has its bounds the wrong way round"),
    (["--output-len", "normal:5"], "--output-len: write normal:MEAN,SD, e.g. normal:512,128"),
    (["--input-len", "uniform:8-64", "--prefix-len", "8"],
     "--prefix-len must be between 0 and the shortest input length (8)"),
])
def test_the_cli_refuses_a_bad_distribution_in_one_line(argv: list[str], message: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", *argv]) == 2
    assert capsys.readouterr().err == f"tokenbench: error: {message}\n"


def test_the_embedded_engine_holds_the_longest_draw() -> None:
    from tokenbench.cli.sweep import embedded_ctx

    cfg = SweepConfig(url="", workload=LengthsKind(parse("uniform:64-256", "--input-len"),
                                                   parse("normal:32,8", "--output-len")))
    assert cfg.longest_request() == 256 + 64 and embedded_ctx(cfg) == slot_context(320)


def test_a_level_of_drawn_output_lengths_asked_no_one_length() -> None:
    """expected_output_tokens was the first request's draw (48, where the level's ran 48-161), which a script
    set beside output_tokens_mean read as the length asked for."""
    from tokenbench.metrics import summarize
    from tokenbench.records import RequestRecord

    def rec(i: int, asked: int) -> RequestRecord:
        r = RequestRecord(index=i, phase="measured", sent_ns=i * 10**9, first_token_ns=i * 10**9 + 10**7,
                          end_ns=i * 10**9 + 10**8, output_tokens=asked, expected_output_tokens=asked)
        r.input_tokens = 16
        return r

    assert summarize([rec(0, 48), rec(1, 161)], concurrency=1, rate=None, window_start_ns=0).expected_output_tokens is None
    assert summarize([rec(0, 64), rec(1, 64)], concurrency=1, rate=None, window_start_ns=0).expected_output_tokens == 64
