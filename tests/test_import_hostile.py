"""Imports are all-or-nothing: a malformed file is refused in one line naming the field, impossible values are
refused, a file imported before is recognised, and the JSON written is always valid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.reader import load_result
from tokenbench.store import Store

DATA = Path(__file__).parent / "data"


def _llama(tmp_path: Path, name: str, **change: Any) -> Path:
    recs = json.loads((DATA / "llama_bench.json").read_text())
    recs[0].update(change)
    p = tmp_path / name
    p.write_text(json.dumps(recs, allow_nan=True))
    return p


def _vllm(tmp_path: Path, name: str, **change: Any) -> Path:
    d = json.loads((DATA / "vllm_serve_result.json").read_text())
    d.update(change)
    p = tmp_path / name
    p.write_text(json.dumps(d, allow_nan=True))
    return p


def _import(files: list[Path], db: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["import", *map(str, files), "--db", str(db)])
    cap = capsys.readouterr()
    return code, cap.out + cap.err


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD = {
    "binary": lambda t: _write(t / "x.json", b"\x00\x01\xff\xfe" * 64),
    "utf-16": lambda t: _write(t / "u.json", (DATA / "llama_bench.json").read_text().encode("utf-16")),
    "NaN": lambda t: _llama(t, "nan.json", avg_ts=float("nan")),
    "Infinity": lambda t: _llama(t, "inf.json", avg_ts=float("inf")),
    "a string for a number": lambda t: _llama(t, "s.json", avg_ts="fast"),
    "a list for an object": lambda t: _write(t / "l.json", b'[[1, 2], {"avg_ts": 1, "n_prompt": 5}]'),
    "negative throughput": lambda t: _llama(t, "neg.json", avg_ts=-5.0),
    "negative prompt length": lambda t: _llama(t, "pp.json", n_prompt=-512),
    "negative depth": lambda t: _llama(t, "d.json", n_depth=-4096),
    "zero duration": lambda t: _vllm(t, "z.json", duration=0),
    "negative concurrency": lambda t: _vllm(t, "nc.json", max_concurrency=-3),
    "empty": lambda t: _write(t / "e.json", b" \n"),
    "cut short": lambda t: _write(t / "cut.json", (DATA / "vllm_serve_result.json").read_bytes()[:700]),
    "vllm NaN throughput": lambda t: _vllm(t, "vn.json", output_throughput=float("nan")),
    "infinite concurrency": lambda t: _write(t / "mc.json", (DATA / "vllm_serve_result.json").read_bytes()
                                            .replace(b'"max_concurrency": 16', b'"max_concurrency": 1e999')),
    "a 400-digit count": lambda t: _write(t / "big.json", (DATA / "vllm_serve_result.json").read_bytes()
                                         .replace(b'"completed": 64', b'"completed": 1' + b"0" * 400)),
    "tokens from no request": lambda t: _vllm(t, "zc.json", completed=0),
    "a p99 below the median": lambda t: _vllm(t, "p99.json", p99_ttft_ms=10.0),
    # vllm bench serve divides its total output tokens by its duration: a billion tok/s from 64 requests is a typo
    "a throughput its own totals deny": lambda t: _vllm(t, "tps.json", output_throughput=1e9),
    "a null for a number": lambda t: _vllm(t, "null.json", median_ttft_ms=None),
    "a figure missing": lambda t: _write(t / "miss.json", json.dumps({k: v for k, v in json.loads(
        (DATA / "vllm_serve_result.json").read_text()).items() if k != "output_throughput"}).encode()),
    "JSON cut short, of no format": lambda t: _write(t / "trunc.json", b'{"a": 1'),
    "nested too deep": lambda t: _write(t / "deep.json", b'[{"avg_ts": 1, "n_prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}]"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_malformed_file_is_refused_in_one_line(name: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    path = BAD[name](tmp_path)
    code, out = _import([path], db, capsys)
    assert code == 2, out
    assert len(out.strip().splitlines()) == 1 and "Traceback" not in out
    assert str(path) in out and "nothing was imported" in out
    assert Store(db).runs() == []
    said = {"negative concurrency": "max_concurrency: -3 is negative", "empty": "the file is empty",
            "cut short": "before its document does: cut short?",
            "tokens from no request": "completed: 0 requests finished, yet output_throughput",
            "a p99 below the median": "serve ttft: its p99 (10 ms) is below its p50 (1,420 ms)",
            "JSON cut short, of no format": "not valid JSON (",
            "a throughput its own totals deny": "output_throughput: 1e+09 tok/s, where total_output_tokens over "
                                                "duration is",
            "a null for a number": "median_ttft_ms: expected a number, got null",
            "a figure missing": "output_throughput: missing"}
    assert said.get(name, "") in out


def test_vllms_default_rate_is_every_request_in_flight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--request-rate inf (vllm bench serve's default) with no --max-concurrency sends all --num-prompts at once: the
    level is a closed loop of that many, where it was shown as a trace (no concurrency, no rate)."""
    db = tmp_path / "r.db"
    assert _import([_vllm(tmp_path, "burst.json", max_concurrency=None, request_rate="inf")], db, capsys)[0] == 0
    [run] = Store(db).runs()
    [level] = load_result(Store(db), run.id).outcomes
    assert level.summary.concurrency == 64 and level.summary.rate is None


def test_several_files_are_all_or_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    good = DATA / "llama_bench.json"
    code, out = _import([good, _llama(tmp_path, "bad.json", avg_ts=-1.0), DATA / "vllm_serve_result.json"], db, capsys)
    assert code == 2 and "bad.json" in out
    assert Store(db).runs() == []  # the good file before the bad one was not kept either


def test_importing_the_same_file_twice_is_recognised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    assert _import([DATA / "vllm_serve_result.json"], db, capsys)[0] == 0
    n = len(Store(db).runs())
    code, out = _import([DATA / "vllm_serve_result.json"], db, capsys)
    assert code == 0 and "imported before" in out
    assert len(Store(db).runs()) == n


def test_show_json_is_always_valid_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    assert _import([DATA / "llama_bench.json"], db, capsys)[0] == 0
    out = tmp_path / "show.json"
    assert main(["show", Store(db).runs()[0].id, "--db", str(db), "--json", str(out)]) == 0
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
