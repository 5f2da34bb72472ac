"""benchmarks/peers.py, the client-overhead benchmark's peers: ``vllm bench serve``'s results read into the same
records as the other peers', from the field names vllm/benchmarks/serve.py (0.32) writes with --save-detailed,
and its environment found where tokenbench keeps its vLLM engine's, never a second one."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from conftest import need_engine
from tokenbench.emitter import BackgroundEmitter, EmitterConfig

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def peers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("peers", BENCHMARKS / "peers.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["peers"] = mod
    spec.loader.exec_module(mod)
    return mod


def _result(start: float) -> dict[str, object]:
    """A saved result as vllm bench serve writes it (benchmark()'s result, --save-detailed), four requests: two
    served, one failed with a traceback after its first chunk, one refused with an empty reason (no TTFT)."""
    return {
        "completed": 2, "failed": 2, "num_prompts": 4, "max_concurrency": 2,
        "input_lens": [8, 8, 8, 8],
        "output_lens": [64, 64, 0, 0],  # calculate_metrics: 0 for a failed request
        "ttfts": [0.052, 0.054, 0.051, 0.0],
        "itls": [[0.01] * 63, [0.01] * 63, [0.01], []],
        "latencies": [0.682, 0.690, 0.061, 0.0],
        "start_times": [start, start + 0.001, start + 0.7, start + 0.71],
        "errors": ["", "", "Traceback (most recent call last): ... ClientPayloadError", ""],
        "generated_texts": ["x" * 64, "x" * 64, "x", ""],
    }


def test_vllm_records_from_its_saved_result(peers: ModuleType, tmp_path: Path) -> None:
    start = time.perf_counter()
    (tmp_path / "result.json").write_text(json.dumps(_result(start)))
    reqs, failed = peers._vllm_records({"streams": 2}, tmp_path)
    assert failed == 2
    assert [r.ok for r in reqs] == [True, True, False, False]
    assert [r.output_tokens for r in reqs] == [64, 64, 0, 0]
    assert reqs[0].ttft_ms == pytest.approx(52.0) and reqs[1].ttft_ms == pytest.approx(54.0)
    assert reqs[2].ttft_ms is None and reqs[3].ttft_ms is None
    # perf_counter (CLOCK_MONOTONIC) brought onto the wall clock, as the other peers' stamps and TreeCPU's samples
    assert reqs[0].start_s == pytest.approx(time.time() - (time.perf_counter() - start), abs=0.5)
    assert reqs[0].end_s - reqs[0].start_s == pytest.approx(0.682, abs=1e-6)
    assert reqs[1].start_s - reqs[0].start_s == pytest.approx(0.001, abs=1e-6)


def test_vllm_runs_from_tokenbench_s_vllm_environment(peers: ModuleType, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    env = tmp_path / "vllm-env"
    monkeypatch.setenv("TOKENBENCH_VLLM_ENV", str(env))
    monkeypatch.setenv("TOKENBENCH_PEERS", str(tmp_path / "peers"))
    assert peers.version("vllm") is None and "vllm" not in peers.installed()
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").write_text("")
    (env / "READY").write_text("0.32.0\n")
    assert peers.version("vllm") == "0.32.0" and "vllm" in peers.installed()
    assert peers.label("vllm") == "vllm bench serve 0.32.0"
    assert not (tmp_path / "peers" / "vllm").exists()  # no venv of its own
    cmd, env_vars = peers._vllm({"root": "http://127.0.0.1:1", "streams": 64, "requests": 192, "out": 64},
                                tmp_path)
    assert cmd[0] == str(env / "bin" / "python") and cmd[1].endswith("tests/reference/vllm_bench_serve.py")
    opts = dict(zip(cmd[2::2], cmd[3::2]))
    assert opts["--backend"] == "openai" and opts["--endpoint"] == "/v1/completions"
    assert opts["--max-concurrency"] == "64" and opts["--num-warmups"] == "64" and opts["--num-prompts"] == "192"
    assert opts["--tokenizer"] == str(tmp_path / "peers" / "tokenizer")
    assert {"--ignore-eos", "--save-detailed", "--save-result"} <= set(cmd)
    assert env_vars["HF_HUB_OFFLINE"] == "1"


@pytest.mark.engine
@pytest.mark.timeout(240)
def test_vllm_bench_serve_against_the_emitter(peers: ModuleType) -> None:
    """The real vllm bench serve (vLLM's environment), offline, at a fixed concurrency of 4 on a paced emitter:
    every measured request read back, its TTFT near the schedule's 50 ms."""
    need_engine("vllm")
    with BackgroundEmitter(EmitterConfig(ttft_s=0.05, itl_s=0.01)) as em:
        root = em.url[:-3]
        out = peers.measure("vllm", {"root": root, "streams": 4, "requests": 12, "out": 8, "paced": True,
                                     "cores": sorted(os.sched_getaffinity(0))}, timeout_s=200)
    assert out["ok"] == 12 and out["failed"] == 0
    assert len(out["excess"]) == 12 and all(-1 < e < 200 for e in out["excess"])
    assert 0 < out["chunks_per_s"] <= 4 * 100 * 1.2  # 4 streams of a chunk every 10 ms
