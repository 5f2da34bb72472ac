"""A trace replay cross-checked against AIPerf on one real vLLM server: the same Mooncake trace (shared prompt
blocks, timestamps) replayed by `aiperf profile --custom-dataset-type mooncake_trace --fixed-schedule` and by
`tokenbench sweep --trace`, in rounds A-B, B-A (and A-B, when the two leave a rule open: rounds.py), each run
with prompts of its own (a new seed), vLLM's prefix-cache counters read from /metrics before and after each run.

Also llama.cpp's llama-server, whose prompt cache a trace replay turns on (cache_prompt), on the README's example.

Needs vLLM's and AIPerf's environments and llama.cpp's tools (`make engines`, or `tokenbench engines build vllm
aiperf llama-server`): skips without them, fails instead under CI (TOKENBENCH_REQUIRE_ENGINES=1).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pytest

import rounds
from conftest import need_engine, need_modules
from servers import Serving, hub_cache, metrics
from tokenbench.cli import main
from tokenbench.engines import aiperf_env, tiny
from tokenbench.engines.launch import RunningEngine
from tokenbench.store import Store
from tokenbench.trace import load_trace

pytestmark = pytest.mark.engine
need_modules("torch")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mooncake-trace.jsonl"
#: vLLM's KV-cache block on a CPU is 128 tokens: trace blocks of the same size are cached whole.
BLOCK = 128
QUERIES, HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
TTFT_SUM, TTFT_COUNT = "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"
#: Each tool against the other: mean TTFT, output throughput, the server's prefix-cache hit share.
TOLERANCE = 0.10
#: Compared by each tool's median run: output tok/s, the hit share.
BOTH_WAYS = ("output_tps", "hit_share")


@pytest.fixture
def vllm_server(vllm_utf8: Serving) -> Serving:
    """The shared vLLM server of the small model (conftest.py), and AIPerf beside it."""
    need_engine("aiperf")
    return vllm_utf8


def write_trace(path: Path, n: int = 16, seed: int = 25) -> Path:
    """Agent-like traffic, light enough for vLLM on 2 CPU cores: three system prompts of two blocks each, every
    request one of them and a tail of its own (a partial block), 16 tokens out, about one request a second; 16
    requests over 12 s (24 over 19 s read the tools as close: docs/validation.md)."""
    rng = random.Random(seed)
    lines, t = [], 0
    for i in range(n):
        g = rng.randrange(3)
        n_in = 2 * BLOCK + rng.randint(32, 112)
        lines.append({"timestamp": t, "input_length": n_in, "output_length": 16,
                      "hash_ids": [10 * g, 10 * g + 1, 1000 + i]})
        t += rng.randint(600, 1000)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def server_view(before: dict[str, float], after: dict[str, float], client_ttfts_ms: list[float]) -> dict[str, float]:
    """What vLLM counted between two reads of /metrics: its prefix-cache hit share, its own mean TTFT (ms), and what
    the client added to it: the mean of the client's TTFTs of the same requests (every one the server saw)
    minus the server's."""
    queries = after[QUERIES] - before[QUERIES]
    count = after[TTFT_COUNT] - before[TTFT_COUNT]
    assert count == len(client_ttfts_ms)
    server = (after[TTFT_SUM] - before[TTFT_SUM]) * 1000 / count
    return {"hit_share": (after[HITS] - before[HITS]) / queries if queries else 0.0, "server_ttft_ms": server,
            "client_adds_ms": statistics.fmean(client_ttfts_ms) - server}


def run_aiperf(server: RunningEngine, model: tiny.TinyModel, trace: Path, seed: int, out: Path,
               hub: tuple[Path, str]) -> dict[str, Any]:
    """One AIPerf replay: its mean TTFT, output throughput (the server's token counts, as tokenbench's), the
    requests it completed, and the server's prefix-cache hit share over the run."""
    cmd = [str(aiperf_env.executable()), "profile", "--model", server.model, "--tokenizer", hub[1],
           "--url", server.base_url[:-3], "--endpoint-type", "completions", "--streaming",
           "--input-file", str(trace), "--custom-dataset-type", "mooncake_trace", "--fixed-schedule",
           "--prompt-input-tokens-block-size", str(BLOCK), "--random-seed", str(seed),
           "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
           # no /metrics polling (each poll stalls vLLM's streams on 2 cores; tokenbench runs --no-metrics too)
           "--no-server-metrics", "--no-gpu-telemetry", "--ui", "none", "--artifact-dir", str(out)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_CACHE=str(hub[0]),
               HF_HUB_DISABLE_TELEMETRY="1", DO_NOT_TRACK="1")
    before = metrics(server)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    after = metrics(server)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "profile_export_aiperf.json").read_text())
    ttfts = [json.loads(x)["metrics"]["time_to_first_token"]["value"]
             for x in (out / "profile_export.jsonl").read_text().splitlines()]
    return {"ttft_ms": doc["time_to_first_token"]["avg"], "output_tps": doc["output_token_throughput"]["avg"],
            "completed": int(doc["request_count"]["avg"]), "input_tokens": doc["usage_prompt_tokens"]["sum"],
            **server_view(before, after, ttfts)}


def run_tokenbench(server: RunningEngine, model: tiny.TinyModel, trace: Path, seed: int, out: Path,
                   capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """One tokenbench replay of the trace, with no warm-up (AIPerf sends none) and no /metrics polling."""
    before = metrics(server)
    code = main(["sweep", "--url", server.base_url, "--tokenizer", str(model.hf_dir), "--trace", str(trace),
                 "--trace-block", str(BLOCK), "--warmup", "0", "--seed", str(seed), "--guard", "off",
                 "--no-metrics", "--json", str(out), "--quiet"])
    after = metrics(server)
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    lv = doc["levels"][0]
    recs = [r for r in Store().requests(doc["run_id"]) if r.phase == "measured"]
    # the server also saw tokenbench's check request before the level
    ttfts = [r.ttft_ns / 1e6 for r in recs if r.ttft_ns is not None] + [doc["manifest"]["check_request"]["ttft_ms"]]
    return {"ttft_ms": lv["ttft_ms"]["mean"], "output_tps": lv["output_throughput_tps"],
            "completed": lv["completed"], **server_view(before, after, ttfts),
            "cached_share": lv["cached_share"], "cached_source": lv["cached_source"],
            "input_tokens": sum(r.input_tokens or 0 for r in recs),
            "ideal": doc["manifest"]["workload"]["trace"]["ideal_cached_share"],
            "send_delay_p90_ms": lv["send_delay_ms"]["p90"]}


def over_server(runs: list[dict[str, Any]]) -> list[float]:
    """Each run's mean TTFT as the client read it over vLLM's own of the same requests."""
    return [r["ttft_ms"] / r["server_ttft_ms"] for r in runs]


def settled(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Whether the rules on the tools' median runs (the test's, below) hold whatever a third round reads
    (rounds.py): throughput and hit share within TOLERANCE both ways, TTFT over vLLM's own at most AIPerf's and
    TOLERANCE, the ms tokenbench adds at most AIPerf's largest and 10."""
    both = rounds.runs_within(ours, theirs, BOTH_WAYS, TOLERANCE)
    ttft = rounds.ratio_within(over_server(ours), over_server(theirs), 0, 1 + TOLERANCE)
    added = max(r["client_adds_ms"] for r in ours) <= max(r["client_adds_ms"] for r in theirs) + 10
    return both and ttft and added


@pytest.mark.timeout(1500)  # vLLM's start (~40 s), four or six replays of ~12 s, AIPerf's own start in each of its
def test_trace_replay_matches_aiperf_on_vllm(vllm_server: Serving, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The same trace replayed by both tools on the same vLLM server agrees within 10% on output throughput and
    the server's own prefix-cache hit share (vLLM's /metrics counters over each run), and tokenbench's mean TTFT
    (over vLLM's own TTFT of the same requests, below) is at most 10% over AIPerf's. Two or three runs each,
    A-B-B-A(-A-B) so a drift of the shared 2-core machine falls on both; each figure is the median of a tool's run
    means, and a third round runs when the first two straddle a rule's limit, so one run that another job on the
    same cores slowed does not decide. (Measured
    on a machine busy with other builds: one tokenbench run's mean TTFT read 489 ms where its other read 352 ms
    and AIPerf's 336 and 379 ms, its last eight requests 2-4x slower than the same requests in every other run;
    vLLM's own TTFT, printed beside each run, says whether the server or the client was slow.)

    And tokenbench alone: the responses' cached share (usage.prompt_tokens_details.cached_tokens, which vLLM sends
    with --enable-prompt-tokens-details) is above 0, matches the server's counters, and is close to the trace's
    ideal share (its shared blocks are vLLM-block aligned, so a prefix cache can serve all of them)."""
    server, model = vllm_server
    trace = write_trace(tmp_path / "trace.jsonl")
    hub = hub_cache(tmp_path / "hf-hub", model)
    n = len(load_trace(trace, BLOCK).requests)
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for rnd, order in rounds.played(lambda: settled(ours, theirs)):
        for tool in order:
            seed = 100 * rnd + (1 if tool == "a" else 2)
            if tool == "a":
                ours.append(run_tokenbench(server, model, trace, seed, tmp_path / f"tb-{rnd}.json", capsys))
            else:
                theirs.append(run_aiperf(server, model, trace, seed, tmp_path / f"aiperf-{rnd}", hub))
    keys = ("ttft_ms", "output_tps", "hit_share", "server_ttft_ms")
    med_ours = {k: statistics.median(r[k] for r in ours) for k in keys}
    med_theirs = {k: statistics.median(r[k] for r in theirs) for k in keys}
    table = {k: (round(med_ours[k], 3), round(med_theirs[k], 3), f"{med_ours[k] / med_theirs[k] - 1:+.1%}")
             for k in keys}
    print(f"trace replay, tokenbench vs AIPerf (median of the {len(ours)} runs' means):", table)
    print("tokenbench runs:", [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in ours])
    print("AIPerf runs:", [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in theirs])
    for r in ours + theirs:
        assert r["completed"] == n
    # the same prompt tokens went to the server: what each tool's prompts were made to be
    assert all(r["input_tokens"] == ours[0]["input_tokens"] for r in ours + theirs)
    for k in BOTH_WAYS:
        assert abs(med_ours[k] / med_theirs[k] - 1) <= TOLERANCE, table
    # TTFT as each tool read it over vLLM's own TTFT of the same requests: on 2 cores AIPerf's own processes can
    # slow the server during its runs (seen: vLLM's TTFT 12-34% higher in each of AIPerf's runs than in the
    # tokenbench run beside it, while each client added 3-6 ms), which a raw comparison would blame on a client.
    # tokenbench's at most AIPerf's and 10%, not held from below: AIPerf's processes take from the cores vLLM uses,
    # and its few ms are a larger share of a faster server's TTFT (vLLM in bfloat16: 64 ms, AIPerf adding 5-14)
    seen = {name: statistics.median(over_server(runs)) for name, runs in (("tokenbench", ours), ("AIPerf", theirs))}
    assert seen["tokenbench"] <= seen["AIPerf"] * (1 + TOLERANCE), (seen, table)
    # what each client adds to vLLM's own TTFT of the same requests: the rule a busy machine cannot blur
    added = {"tokenbench": [round(r["client_adds_ms"], 1) for r in ours],
             "AIPerf": [round(r["client_adds_ms"], 1) for r in theirs]}
    print("TTFT added over vLLM's own, per run (ms):", added)
    assert all(x > -2 for x in added["tokenbench"] + added["AIPerf"]), added
    assert statistics.median(added["tokenbench"]) <= max(added["AIPerf"]) + 10, added
    for r in ours:
        assert r["cached_source"] == "usage" and r["cached_share"] > 0
        assert r["cached_share"] == pytest.approx(r["hit_share"], abs=0.02)  # the responses say what /metrics says
        assert r["cached_share"] == pytest.approx(r["ideal"], abs=0.05)


def test_llama_server_serves_a_traces_shared_blocks_from_its_cache(llama_tiny_4: Serving, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Every other sweep sends llama-server cache_prompt: false; a trace replay sends true, and the server then
    serves the shared blocks: the responses' cached share (its usage, or timings.cache_n) is the trace's ideal.
    The server is shared: the run's seed is a new one (the default), so no earlier test sent these prompts."""
    out = tmp_path / "r.json"
    code = main(["sweep", "--url", llama_tiny_4.server.base_url, "--trace", str(EXAMPLE), "--trace-block", "64",
                 "--warmup", "0", "--guard", "off", "--json", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    lv, ideal = doc["levels"][0], doc["manifest"]["workload"]["trace"]["ideal_cached_share"]
    print(f"llama-server: cached share {lv['cached_share']:.4f} ({lv['cached_source']}), ideal {ideal:.4f}")
    assert lv["completed"] == 16 and lv["failed"] == 0
    assert lv["cached_source"] in ("usage", "server_timings")
    assert lv["cached_share"] == pytest.approx(ideal, abs=0.05)
