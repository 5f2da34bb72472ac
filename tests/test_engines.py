"""End to end: the embedded engines, real servers on loopback, through the command line."""

from __future__ import annotations

import json
import statistics
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import rounds
from conftest import need_engine, need_modules
from servers import Serving
from tokenbench.cli import main
from tokenbench.engines import launch
from tokenbench.store import Store

pytestmark = pytest.mark.engine
need_modules("torch", "transformers", "gguf")


@pytest.fixture(autouse=True)
def _cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))
    yield


def sweep(tmp_path: Path, engine: str, concurrency: str, requests: int, capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    out = tmp_path / f"{engine}.json"
    code = main(["sweep", "--engine", engine, "--input-len", "96", "--output-len", "48", "--concurrency",
                 concurrency, "--requests", str(requests), "--json", str(out), "--quiet"])
    _, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out.read_text())  # type: ignore[no-any-return]


#: A batching engine serves 4 agents faster in aggregate than 1 (the first), and faster than one stream can
#: generate (the second): the median run's ratios must pass these. A server that took one request at a time would
#: read about 1.0 and under 1.0 (its prefills come out of the stream's rate).
SCALES = {"over_one": 1.1, "over_one_stream": 1.0}


def test_transformers_continuous_batching_scales(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The tiny model on 2 cores shared with the client scales unevenly run to run: 11 runs of one machine read
    4 agents 1.13-1.77x one agent's throughput, and 0.96-1.58x one stream's decode rate. Rules of 1.3x and 1.2x
    failed a single run a quarter of the time, and once the median of three (1.23x and 1.08x: a quiet machine).
    The rules are 1.1x and 1.0x, which a server taking one request at a time would not pass, held by the median
    of two runs, and of a third where the two straddle a limit (rounds.py: the third cannot change a verdict the
    two agree on)."""
    ratios: dict[str, list[float]] = {k: [] for k in SCALES}

    def settled() -> bool:
        return all(min(v) > SCALES[k] or max(v) <= SCALES[k] for k, v in ratios.items())

    for rnd, _ in rounds.played(settled):
        (tmp_path / str(rnd)).mkdir()
        doc = sweep(tmp_path / str(rnd), "transformers", "1,4", 12, capsys)
        c1, c4 = doc["levels"]
        for lv in (c1, c4):
            assert lv["completed"] == 12 and lv["failed"] == 0
            assert lv["output_tokens_mean"] == 48 and lv["output_tokens_source"] == "usage"
            assert lv["input_tokens_mean"] == 96 and "output_short" not in lv["flags"]
        ratios["over_one"].append(c4["output_throughput_tps"] / c1["output_throughput_tps"])
        ratios["over_one_stream"].append(c4["output_throughput_tps"] / c1["decode_tps"])
    assert all(statistics.median(v) > SCALES[k] for k, v in ratios.items()), ratios
    m = doc["manifest"]
    assert m["engine"] == "transformers" and m["engine_version"]
    assert m["embedded"]["startup_s"] > 0 and "--continuous-batching" in m["server_flags"]
    # the run is in the database (TOKENBENCH_DB, set per test)
    run = Store().resolve(doc["run_id"])
    assert run.status == "complete" and run.label == "embedded-transformers"


def test_llama_cpp_python_serves_one_stream_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llama_cpp")
    doc = sweep(tmp_path, "llama-cpp-python", "1,4", 8, capsys)
    c1, c4 = doc["levels"]
    for lv in (c1, c4):
        assert lv["completed"] == 8 and lv["failed"] == 0
        assert lv["output_tokens_mean"] == 48 and lv["output_tokens_source"] == "chunks"
        assert "usage_absent" in lv["flags"]
    # Sequential: concurrent agents together never get more than one stream's generation rate (1 / TPOT at
    # concurrency 1); queueing may hide the per-request overhead, which is pipelining, not batching. And
    # requests wait in the queue.
    assert c4["output_throughput_tps"] < 1.1 * c1["decode_tps"]
    assert c4["ttft_ms"]["p50"] > 2 * c1["ttft_ms"]["p50"]
    assert "slots_exceeded" in c4["flags"]
    assert doc["manifest"]["engine"] == "llama-cpp-python"
    assert doc["manifest"]["server"]["batches"] is False


def test_gguf_holds_the_same_weights(transformers_tiny: Serving, llama_tiny_1: Serving) -> None:
    """Greedy decoding of the same prompts agrees between the HF weights (Transformers serve) and the GGUF
    written from them (llama.cpp's own llama-server): the same model on every engine."""
    assert transformers_tiny.model == llama_tiny_1.model
    prompts = ["the number of people", "memory kernel server token", "silver river", "a b c", "garden bridge",
               "every found still", "water long little very", "kernel cache batch"]
    outs: dict[str, list[str]] = {}
    for engine, r in (("transformers", transformers_tiny.server), ("llama-server", llama_tiny_1.server)):
        outs[engine] = []
        for p in prompts:
            body = {"model": r.model, "prompt": p, "max_tokens": 1, "temperature": 0.0}
            req = urllib.request.Request(r.base_url + "/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as f:
                outs[engine].append(json.loads(f.read())["choices"][0]["text"])
    same = sum(a == b for a, b in zip(outs["transformers"], outs["llama-server"]))
    # Random weights leave near-ties where float rounding may pick another token; a wrong tensor layout
    # (e.g. RoPE rows not permuted) would agree on almost none.
    assert same >= 6, outs


def test_llama_server_serves_a_quantized_gguf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--quant Q4_0: llama-quantize writes the GGUF beside the built one and llama-server serves it; on a core
    with AMX with its weight repacking off, which in this llama.cpp build crashes loading quantized weights."""
    need_engine("llama-server")
    out = tmp_path / "q4.json"
    code = main(["sweep", "--engine", "llama-server", "--quant", "Q4_0", "--input-len", "32", "--output-len", "8",
                 "--concurrency", "1", "--requests", "2", "--json", str(out), "--quiet"])
    _, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["levels"][0]["completed"] == 2 and doc["levels"][0]["failed"] == 0
    command = doc["manifest"]["embedded"]["command"]
    assert any(a.endswith("q4_0.gguf") for a in command)
    assert ("--no-repack" in command) == launch.llama_repack_crashes()
