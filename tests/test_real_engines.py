"""The real serving stacks in the loop: llama.cpp's own llama-server and llama-bench, and vLLM, each cross-checked
against its reference tool on the same server and the same model.

These need the engines built (`make engines`, or `tokenbench engines build vllm llama-server`): they skip
without them, and fail instead under CI (TOKENBENCH_REQUIRE_ENGINES=1).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import threading
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

import rounds
from conftest import need_engine, need_modules
from servers import Serving
from tokenbench.cli import main
from tokenbench.engines import launch, tiny, vllm_env
from tokenbench.engines.launch import RunningEngine
from tokenbench.loadgen import LOOP_STALL_MS
from tokenbench.servers import ServerInfo, discover
from tokenbench.store import Store
from tokenbench.telemetry import parse

pytestmark = pytest.mark.engine
need_modules("torch", "gguf")

REFERENCE = Path(__file__).parent / "reference"


@pytest.fixture(autouse=True)
def _cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))


def _metrics(engine: RunningEngine) -> dict[str, float]:
    with urllib.request.urlopen(engine.base_url[:-3] + "/metrics", timeout=10) as f:
        return parse(f.read().decode())


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


# --- llama.cpp's llama-server ------------------------------------------------------------------------------

def test_llama_server_sweep_and_depth_lose_no_request_at_1_slot(llama_tiny_1: Serving, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    sweep_and_depth_lose_no_request(llama_tiny_1.server, 1, tmp_path, capsys)


def test_llama_server_sweep_and_depth_lose_no_request_at_4_slots(llama_tiny_4: Serving, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    sweep_and_depth_lose_no_request(llama_tiny_4.server, 4, tmp_path, capsys)


def sweep_and_depth_lose_no_request(server: RunningEngine, slots: int, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """llama-server closes the connection after every stream: 31-50% of requests used to be lost. At -np 1 and
    -np 4, a sweep and a depth run now finish with 0 failed requests. (The server is shared: what it generated is
    read from its counters as the difference over this test's runs.)"""
    before = _metrics(server)
    out = tmp_path / "sweep.json"
    assert main(["sweep", "--url", server.base_url, "--input-len", "64", "--output-len", "32",
                 "--concurrency", "1,4", "--requests", "16", "--json", str(out), "--quiet"]) == 0, \
        capsys.readouterr().err
    doc = _json(out)
    assert [(lv["completed"], lv["failed"]) for lv in doc["levels"]] == [(16, 0), (16, 0)]
    assert all(lv["output_tokens_mean"] == 32 for lv in doc["levels"])
    m = doc["manifest"]
    assert m["engine"] == "llama.cpp" and m["server"]["slots"] == slots
    # "one stream at a time" comes from the slots it reports, not from the engine's name
    assert m["server"]["batches"] is (slots > 1)
    assert ("slots_exceeded" in doc["levels"][1]["flags"]) is (slots == 1)
    # The server generated exactly what was asked: warm-ups (1 + 4) and measured requests (2 x 16) of 32
    # tokens, and 2 for the check request (it once sent n_predict = output length, 32 here).
    generated = _metrics(server)["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"]
    assert generated == (1 + 4 + 32) * 32 + 2

    dout = tmp_path / "depth.json"
    assert main(["depth", "--url", server.base_url, "--depths", "0,1k,16k", "--pp", "64", "--tg", "16",
                 "--repetitions", "2", "--json", str(dout)]) == 5, capsys.readouterr().err  # partial: 16K
    d = _json(dout)
    by = {(lv["test"], lv["depth"]): lv for lv in d["levels"]}
    assert by[("tg16", 1024)]["status"] == "complete" and by[("pp64", 1024)]["pp_tps"] > 0
    # 16K does not fit an 8K slot: kept and marked, the rest measured
    assert by[("tg16", 16384)]["status"] == "skipped" and d["status"] == "partial"
    recs = Store().requests(d["run_id"])
    assert recs and all(r.ok for r in recs)
    assert sum(r.connection_retries for r in recs) == 0  # a fresh connection per request: none needed


def _rates(doc: dict[str, Any]) -> dict[tuple[str, int], float]:
    """A depth run's rate per (test, depth)."""
    return {(lv["test"], lv["depth"]): lv.get("pp_tps") or lv.get("tg_tps") for lv in doc["levels"]}


def within_reference(ours: float, reference_runs: list[float], tolerance: float) -> bool:
    """Our value lies within the reference tool's own run range, widened by ``tolerance``. On 2 shared cores the
    reference tools disagree with themselves from run to run, so a band around one reference value would fail on
    the reference's own noise."""
    return (1 - tolerance) * min(reference_runs) <= ours <= (1 + tolerance) * max(reference_runs)


@pytest.mark.timeout(900)
def test_depth_over_http_matches_the_server_and_llama_bench(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """tokenbench depth over HTTP against llama-server, and llama-bench -d on the same GGUF and thread count,
    two rounds each, interleaved, and a third when the first two straddle the band (rounds.py). Two rules:

    - tokenbench's tg, timed by the client, agrees within 3% with llama-server's own timings of the same requests
      at every depth; its pp, the prompt over the time to the first token, takes no longer than the server's own
      prefill plus one decode step and 8 ms, nor 3% less. This is the client's honesty: nothing of the HTTP path is in the
      rate but the first token's own trip. (A CI run read pp128 at depth 0 2-3.4% under the server's prefill: 12-20
      ms, one decode step.)
    - llama-bench and tokenbench, paired round by round, agree within a factor of 1.6 at each depth (median of
      the rounds).
      They are two harnesses over one engine, and on a 2-core VM the engine itself drifts: the same tool's tg at
      depth 0 read 74 and 87 tok/s in two runs here, and one CI machine read llama-server 20-25% faster than
      llama-bench at depth 2048 in three rounds while this one read it 7-13% slower, each time with the client
      within 1% of the server's own timings. Another read the server's pp128 at 2048 at 300, 293 and 241 tok/s
      in its three rounds against llama-bench's steady 213-224 (+39, +38 and +7%), the client again within 1% of
      the server: a 25% band failed on the two harnesses, not on tokenbench. A factor of 1.6 still fails a rate
      measured at the wrong depth (pp at depth 0 is 2.5 times the rate at 2048 there, tg twice) or a pp that
      prefilled the whole context (half the rate or less).

    Also: depth --llama-bench imports exactly llama-bench's own values, records its options and keeps its JSON."""
    need_engine("llama-server")
    tiny.ensure(size="small")
    threads = str(launch.server_threads())
    # two depths: a rate taken at the wrong one is what the llama-bench band is there to fail (below)
    # one pass a depth a run: the rules read each run's rates, and the rounds give the medians (2 repetitions took
    # 85-103 s against 65, their medians 1-6% under llama-bench's, one's 0-7% in two runs)
    common = ["--model-size", "small", "--depths", "0,2k", "--pp", "128", "--tg", "32", "--repetitions", "1"]
    http: list[dict[str, Any]] = []
    bench: list[dict[str, Any]] = []
    keys = {(t, d) for t in ("pp128", "tg32") for d in (0, 2048)}

    def paired() -> dict[tuple[str, int], list[float]]:
        """Each round's tokenbench rate over llama-bench's, at each test and depth."""
        return {k: [_rates(h)[k] / _rates(b)[k] for h, b in zip(http, bench)] for k in sorted(keys)}

    for i, _ in rounds.played(lambda: all(rounds.within(r, 1 / 1.6, 1.6) for r in paired().values())):
        out = tmp_path / f"http{i}.json"
        assert main(["depth", "--engine", "llama-server", *common, "--json", str(out)]) == 0, capsys.readouterr().err
        http.append(_json(out))
        out = tmp_path / f"bench{i}.json"
        assert main(["depth", "--llama-bench", *common, "-t", threads, "--json", str(out)]) == 0, \
            capsys.readouterr().err
        bench.append(_json(out))
    assert all(set(_rates(doc)) == keys for doc in http + bench)

    server = {}
    for doc in http:
        step_s = {lv["depth"]: 1 / lv["client"]["server_tg_tps"] for lv in doc["levels"] if lv.get("tg_tps")}
        for lv in doc["levels"]:
            ours = lv.get("pp_tps") or lv.get("tg_tps")
            own = lv["client"].get("server_pp_tps") or lv["client"].get("server_tg_tps")
            server.setdefault((lv["test"], lv["depth"]), []).append((round(ours, 1), round(own, 1)))
            if lv.get("pp_tps"):
                # the client's pp is its time to the first token, which holds the server's prefill and then one
                # decode step and the HTTP path: at depth 0 that step alone is 2-3% of the prefill
                pp = int(lv["test"][2:])
                excess = pp / ours - pp / own
                # (and may read up to 3% faster: a loaded run read 104.2 tok/s against the server's 103.5)
                assert -0.03 * pp / own <= excess <= step_s[lv["depth"]] + 0.008, (lv["depth"], ours, own, excess)
            else:
                assert abs(ours / own - 1) <= 0.03, (lv["test"], lv["depth"], ours, own)
    print("tokenbench vs llama-server's own timings:", server)

    ratios = paired()
    table = {k: (f"{statistics.median(r) - 1:+.1%}", [f"{x - 1:+.0%}" for x in r]) for k, r in ratios.items()}
    print("tokenbench vs llama-bench, paired rounds (median, each):", table)
    for k, r in ratios.items():
        assert 1 / 1.6 <= statistics.median(r) <= 1.6, table
    # the embedded server ran on the same threads as llama-bench
    assert f"-t {threads}" in " ".join(http[0]["manifest"]["embedded"]["command"])
    # the import is llama-bench's own numbers, exactly
    raw = json.loads(bench[0]["manifest"]["llama_bench"]["raw"])
    assert bench[0]["manifest"]["llama_bench"]["options"] == ["-t", threads]
    for rec, lv in zip(raw, bench[0]["levels"]):
        assert (lv["pp_tps"] or lv["tg_tps"]) == rec["avg_ts"]
        # from one repetition llama-bench writes a stddev of 0: the spread of one sample is unknown, none, not 0
        assert rec["stddev_ts"] == 0 and (lv["pp_tps_sd"] if lv["pp_tps"] else lv["tg_tps_sd"]) is None, rec
        assert lv["depth"] == rec["n_depth"]
    assert bench[0]["manifest"]["threads"] == int(threads)


# --- vLLM --------------------------------------------------------------------------------------------------

# The shared vLLM server of the small model with real tokenization (``vllm_utf8`` in conftest.py): about a quarter of
# its tokens are pieces of a multi-byte character, which vLLM streams as chunks with empty text (the chunk rule).


class _VllmBench:
    """vllm bench serve, one process for every run of a test (``--runs-from-stdin``): vLLM's import, 11-15 s on 2
    cores, is paid once and not once a run; between runs the process waits on its stdin, taking no CPU from the
    server the other tool measures."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def run(self, server: RunningEngine, model: tiny.TinyModel, concurrency: int, n: int, seed: int,
            out: Path) -> dict[str, Any]:
        # A new --seed every run: with its default seed vllm bench serve sends the same prompts every run, and
        # vLLM's prefix cache serves them (measured: 512 of 3,080 prompt tokens from the cache on a repeat, median
        # TTFT at concurrency 4 down 19%). No ready check: it would be one more request in the server's own TTFT
        # metrics.
        args = ["--backend", "openai", "--base-url", server.base_url[:-3], "--model", server.model,
                "--tokenizer", str(model.hf_dir), "--dataset-name", "random", "--random-input-len", "128",
                "--random-output-len", "32", "--num-prompts", str(n), "--max-concurrency", str(concurrency),
                "--ignore-eos", "--seed", str(seed), "--ready-check-timeout-sec", "0", "--save-result",
                "--save-detailed", "--result-filename", str(out)]
        if self.proc is None:
            self.proc = subprocess.Popen([str(vllm_env.python()), str(REFERENCE / "vllm_bench_serve.py"),
                                          "--runs-from-stdin"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(args) + "\n")
        self.proc.stdin.flush()
        said: list[str] = []
        watchdog = threading.Timer(600, self.proc.kill)  # a run that hangs ends the process, and so this read
        watchdog.start()
        try:
            for line in self.proc.stdout:
                if line.startswith("@@ran "):
                    assert line.split()[1] == "0", "".join(said)[-4000:]
                    return _json(out)
                said.append(line)
        finally:
            watchdog.cancel()
        raise AssertionError("vllm bench serve stopped: " + "".join(said)[-4000:])

    def close(self) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


TTFT_SUM, TTFT_COUNT = "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count"
DECODE_SUM, DECODE_COUNT = "vllm:request_decode_time_seconds_sum", "vllm:request_decode_time_seconds_count"
PREFIX_HITS = "vllm:prefix_cache_hits_total"


@pytest.mark.timeout(1500)  # vLLM's start (~40 s) and twelve or eighteen interleaved runs
def test_sweep_matches_vllm_bench_serve(vllm_utf8: Serving, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """tokenbench sweep and vllm bench serve on the same vLLM server (the 140M small-utf8 model, whose tokens are
    often pieces of a multi-byte character that vLLM streams as chunks with empty text), 128 in / 32 out, two
    rounds each, interleaved A-B-B-A, and A-B again when the first two leave a rule open (rounds.py), each tool
    with fresh prompts every run. Definitions are the same
    (docs/metrics.md); tokenbench runs with --no-metrics because the reference tool does not poll /metrics (each poll
    stalls vLLM's streams on 2 cores); the test reads /metrics only between runs.

    The tight rules hold each tool to vLLM's own account of the same requests (its /metrics histograms, read
    before and after each run: every request the server saw, the check request and warm-ups included):
    - TTFT: each tool's mean TTFT minus vLLM's mean time_to_first_token is what the client and HTTP add.
      Measured: 2.4-6.2 ms for tokenbench, 3.1-6.5 ms for vllm bench serve (the small model). tokenbench's median
      may exceed the reference's largest by 2 ms at most. The old chunk rule, TTFT at the first
      visible text, is computed from the same records and printed: it sat 12-24 ms above the server when first
      reported; here it must read at least 1 ms later than the chunk rule on the same requests, or the
      model made too few held-back chunks to tell the rules apart.
    - Decode: each tool's mean first-to-last-token time per request is within 3% of vLLM's mean
      request_decode_time (its engine's own first and last token stamps). One CI run failed both rules in one
      run (+245 ms, -14%): streams read late and then in a burst, as when the client's event loop stops for
      about 1.8 s. That was Python's collector walking the test process's whole heap (0.4-1.1 s on an idle
      machine); timed phases now run with that heap frozen (loadgen.still_heap), and the longest stop each
      tokenbench run saw is printed. Since then one CI run read one run of three 8.2% short (the others -0.03%
      and +0.03%): one first token delivered late on a 2-core host that vLLM's engine keeps busy. A client
      that reads late does so in every run, so the median run is held to 3% and each run to 15%. Another CI run
      read two runs of three 12-13% long, with a stop of tokenbench's loop seen in another test of that run
      (2.3 s). A run in which tokenbench's own watch saw its loop stop over 100 ms (which it flags, and says what
      held it: loadgen.stopped_by) is held to having read no later than the stop explains (the stop's length for
      each stream in flight), and run again once: a client that reads late unseen still fails.
    Against the reference tool, each metric by the median round's ratio of the two tools' runs, which ran back to
    back in that round (TTFT's median, TPOT's and ITL's means, output tok/s):
    - at concurrency 1, with the server's own change between the two runs taken out (its mean TTFT, its mean
      decode time, from /metrics), within 10%. One request at a time gives the loads no shape to differ by, so
      that change is the server's drift: a CI run read tokenbench's TTFT and TPOT 7-23% above the reference's in
      two rounds of three and level in the third, where tokenbench's client uses 2% of a core (held below 10% in
      every run, at every concurrency: its work on the cores it shares with vLLM). The server's account leaves
      out tokenbench's check request, 2 tokens from a short prompt, which read the server 7-8% fast.
    - at concurrency 4 and 16, output tok/s as read, within 10%, or within the spread of the reference's own
      run medians where that is wider (the scheduler's split of each wave, below, moves every run); and within
      the range of those run medians widened by 10%. Pooled over the rounds, the server's drift reads as a
      difference between the tools: two CI runs failed so (output tok/s at 16 11.6% apart by the pooled medians
      and 3.8, 11.6 and 4.0% within each round).
    - TTFT at 4 and 16 is mostly where a request fell in vLLM's waves and queue, which the split moves by whole
      runs whichever tool sends (one run of this test read it at 4 +11.9, +17.7 and -1.5% apart by round, the
      reference's own runs 13% apart; another at 16 -13.8, -3.0 and +11.1%; a CI run +14.6% by the median round
      with each tool's runs within 10% of each other): it is held within the reference's run range widened by a
      quarter, and what each tool reads of it to vLLM's own TTFT (the overhead rule above).
    - TPOT and ITL at 4 and 16 are held to the server's account of each run only. Equal-length requests drive
      vLLM in lock-step waves whichever tool sends: of four requests sent within a millisecond, vLLM prefills
      the first alone and the other three in the step after, and the loop then keeps one request apart (1+3),
      splits in two (2+2) or runs all four together, by which one reached its scheduler first. Each split is a
      TPOT mode: one run of this test read tokenbench's requests at 16 in 1+3 waves (the lone one 58-70 ms, the
      three 43-53 ms) in two rounds and 2+2 (41-45 ms) in the third, and the reference in four together
      (35-41 ms), 1+3 and mixed in its three: TPOT 31% and 25% apart in two rounds, with both tools within 0.2%
      of vLLM's own decode times in every run. At concurrency 16 the server runs 4 sequences at a time
      (``--max-num-seqs 4``) and queues the other 12, so TTFT there is mostly the wait in vLLM's queue.
    - Neither tool's prompts came from vLLM's prefix cache during tokenbench's runs."""
    server, model = vllm_utf8
    n = {1: 8, 4: 24, 16: 32}  # one request at a time is the steadiest: 8 give its medians
    keys = ("ttft", "tpot", "itl", "tps")
    ours: dict[int, dict[str, list[float]]] = {c: {k: [] for k in keys} for c in n}
    theirs: dict[int, dict[str, list[float]]] = {c: {k: [] for k in keys} for c in n}
    their_runs: dict[int, dict[str, list[float]]] = {c: {k: [] for k in keys} for c in n}
    our_each: dict[int, dict[str, list[list[float]]]] = {c: {k: [] for k in keys} for c in n}  # per run
    their_each: dict[int, dict[str, list[list[float]]]] = {c: {k: [] for k in keys} for c in n}
    our_runs: dict[int, list[float]] = {c: [] for c in n}  # each run's median TPOT, to show the modes
    our_stops: dict[int, list[float]] = {c: [] for c in n}  # each run's longest event-loop stop (ms), as it saw it
    overhead: dict[tuple[str, int], list[float]] = {}
    held: dict[int, list[int]] = {c: [0, 0] for c in n}  # tokenbench's token chunks: with empty text, all
    decode: dict[tuple[str, int], list[float]] = {}  # each run: the tool's mean decode time / vLLM's, minus 1
    # each run: vLLM's own mean TTFT and decode time per request (ms), the server's speed while that tool ran
    our_server: dict[int, list[dict[str, float]]] = {c: [] for c in n}
    their_server: dict[int, list[dict[str, float]]] = {c: [] for c in n}
    our_cpu: dict[int, list[float]] = {c: [] for c in n}  # each run: tokenbench's client CPU, % of one core
    our_prefix_hits = 0.0
    #: tokenbench runs whose own watch saw its event loop stop past LOOP_STALL_MS, each run again: (concurrency,
    #: the stop in ms, the ms its requests' decode times read over vLLM's own in all, the CPU the process had in
    #: the stop, its longest garbage collection)
    stopped: list[tuple[int, int, int, Any, Any]] = []

    def server_ttft(before: dict[str, float], after: dict[str, float]) -> tuple[float, float]:
        """Sum (ms) and count of vLLM's own TTFTs between two /metrics reads."""
        return (after[TTFT_SUM] - before[TTFT_SUM]) * 1000, after[TTFT_COUNT] - before[TTFT_COUNT]

    def server_decode(before: dict[str, float], after: dict[str, float], n_requests: int) -> float:
        """vLLM's mean decode time (ms, first to last token) per request between two /metrics reads."""
        assert after[DECODE_COUNT] - before[DECODE_COUNT] == n_requests
        return (after[DECODE_SUM] - before[DECODE_SUM]) * 1000 / n_requests

    def sweep_once(c: int, name: str) -> tuple[dict[str, Any], dict[str, float], dict[str, float]]:
        """One tokenbench run at concurrency ``c``: its JSON document and vLLM's /metrics before and after it."""
        nonlocal our_prefix_hits
        out = tmp_path / f"tb-{name}-{c}.json"
        before = _metrics(server)
        assert main(["sweep", "--url", server.base_url, "--tokenizer", str(model.hf_dir), "--input-len", "128",
                     "--output-len", "32", "--concurrency", str(c), "--requests", str(n[c]), "--json", str(out),
                     # a warm-up for each of the server's 4 sequences (--max-num-seqs 4); the default, one for
                     # each agent, sent 16 at 16: three more waves of the same shape, 10 s a run
                     "--warmup", str(min(c, 4)), "--quiet", "--guard", "off", "--no-metrics"]) == 0, \
            capsys.readouterr().err
        after = _metrics(server)
        our_prefix_hits += after[PREFIX_HITS] - before[PREFIX_HITS]
        return _json(out), before, after

    def our_decode(doc: dict[str, Any], recs: list[Any], before: dict[str, float], after: dict[str, float]
                   ) -> tuple[list[float], float]:
        """tokenbench's decode time (ms, first to last token) of every request the server saw in a run, the check
        request's included, and vLLM's own mean over the same requests."""
        check = doc["manifest"]["check_request"]
        ours_decode = [(r.end_ns - r.first_token_ns) / 1e6 for r in recs] + [check["e2e_ms"] - check["ttft_ms"]]
        return ours_decode, server_decode(before, after, len(ours_decode))

    def run_ours(c: int, rnd: int) -> None:
        doc, before, after = sweep_once(c, str(rnd))
        client = doc["levels"][0]["client"]
        stop = client.get("loop_lag_ms_max", 0.0)
        if stop > LOOP_STALL_MS:
            # tokenbench's own watch saw its event loop stop (it says so in its output, as a client-limited level):
            # every stream in flight read its tokens that much late. The run is kept aside, held to having read
            # late by no more than the stop explains, and run again once
            recs = Store().requests(doc["run_id"])
            ours_decode, vllm_decode = our_decode(doc, recs, before, after)
            excess = sum(ours_decode) - vllm_decode * len(ours_decode)
            stopped.append((c, round(stop), round(excess), client.get("loop_stop_cpu_ms"), client.get("gc_ms_max")))
            assert excess <= stop * c + 5 * len(ours_decode), stopped
            doc, before, after = sweep_once(c, f"{rnd}-again")
        lv = doc["levels"][0]
        assert lv["completed"] == n[c] and lv["failed"] == 0
        ours[c]["tps"].append(lv["output_throughput_tps"])
        one: dict[str, list[float]] = {"tps": [lv["output_throughput_tps"]], "ttft": [], "tpot": [], "itl": []}
        our_stops[c].append(round(lv["client"].get("loop_lag_ms_max", 0.0), 1))
        our_cpu[c].append(round(lv["client"]["cpu_pct"], 1))
        recs = Store().requests(doc["run_id"])
        our_runs[c].append(statistics.median((r.end_ns - r.first_token_ns) / 1e6 / (r.output_tokens - 1)
                                             for r in recs if r.phase == "measured"))
        for r in recs:
            if r.phase == "measured":
                one["ttft"].append(r.ttft_ns / 1e6)
                one["tpot"].append((r.end_ns - r.first_token_ns) / 1e6 / (r.output_tokens - 1))
                one["itl"] += [(b - a) / 1e6 for a, b in zip(r.chunk_ns, r.chunk_ns[1:])]
        for k in ("ttft", "tpot", "itl"):
            ours[c][k] += one[k]
        for k in keys:
            our_each[c][k].append(one[k])
        # every request the server saw: the check request, the warm-ups and the measured ones
        check = doc["manifest"]["check_request"]
        client = [r.ttft_ns / 1e6 for r in recs] + [check["ttft_ms"]]
        total, count = server_ttft(before, after)
        assert count == len(client)
        overhead.setdefault(("tokenbench", c), []).append(statistics.fmean(client) - total / count)
        # the old rule over the same requests: TTFT at the first chunk with visible text
        visible = [((r.first_text_ns or r.end_ns) - r.sent_ns) / 1e6 for r in recs] + [check["ttft_ms"]]
        overhead.setdefault(("first visible text", c), []).append(statistics.fmean(visible) - total / count)
        held[c][0] += sum(1 for r in recs for k in r.chunk_chars if k == 0)
        held[c][1] += sum(len(r.chunk_chars) for r in recs)
        ours_decode, vllm_decode = our_decode(doc, recs, before, after)
        decode.setdefault(("tokenbench", c), []).append(statistics.fmean(ours_decode) / vllm_decode - 1)
        # the server's speed over the run's full-length requests: its sums less the check request (2 tokens from
        # a short prompt), by tokenbench's reading of it (within a few ms of vLLM's own, as above); with it in,
        # the server's means read 7-8% fast against the reference's at concurrency 1
        our_server[c].append({"ttft": (total - check["ttft_ms"]) / (count - 1),
                              "decode": (vllm_decode * len(ours_decode) - ours_decode[-1]) / (len(ours_decode) - 1)})

    def run_theirs(c: int, rnd: int) -> None:
        before = _metrics(server)
        ref = reference.run(server, model, c, n[c], 1000 * rnd + c, tmp_path / f"vb-{rnd}-{c}.json")
        after = _metrics(server)
        assert ref["completed"] == n[c] and ref["total_output_tokens"] == 32 * n[c]
        one = {"tps": [ref["output_throughput"]], "ttft": [t * 1000 for t in ref["ttfts"]],
               "tpot": [(lat - t) * 1000 / (o - 1)
                        for lat, t, o in zip(ref["latencies"], ref["ttfts"], ref["output_lens"])],
               "itl": [x * 1000 for itls in ref["itls"] for x in itls]}
        for k in keys:
            theirs[c][k] += one[k]
            their_runs[c][k].append(statistics.median(one[k]))
            their_each[c][k].append(one[k])
        total, count = server_ttft(before, after)
        assert count == n[c]
        overhead.setdefault(("vllm bench serve", c), []).append(statistics.fmean(one["ttft"]) - total / count)
        theirs_decode = [(lat - t) * 1000 for lat, t in zip(ref["latencies"], ref["ttfts"])]
        server_decode_ms = server_decode(before, after, n[c])
        decode.setdefault(("vllm bench serve", c), []).append(statistics.fmean(theirs_decode) / server_decode_ms - 1)
        their_server[c].append({"ttft": total / count, "decode": server_decode_ms})

    def by_round(c: int, k: str) -> list[float]:
        """Each round's ratio of the two tools' runs: TTFT's medians, TPOT's and ITL's means, output tok/s."""
        stat = statistics.median if k == "ttft" else statistics.fmean
        return [stat(a) / stat(b) for a, b in zip(our_each[c][k], their_each[c][k])]

    def server_by_round(c: int, k: str) -> list[float]:
        """Each round's ratio of the server's own speed under the two tools' runs, in the metric's sense: its
        mean TTFT for TTFT, its mean decode time for TPOT and ITL, and the inverse of their sum for output tok/s
        (one request at a time, a request's time is its TTFT and its decode)."""
        def one(s: dict[str, float]) -> float:
            return s["ttft"] if k == "ttft" else s["decode"] if k in ("tpot", "itl") else 1 / (s["ttft"] + s["decode"])
        return [one(a) / one(b) for a, b in zip(our_server[c], their_server[c])]

    def corrected_by_round(c: int, k: str) -> list[float]:
        """Each round's ratio of the two tools' figures with the server's own change between the two runs
        taken out: what the clients read differently of a server that moved."""
        return [r / s for r, s in zip(by_round(c, k), server_by_round(c, k))]

    def our_medians(c: int, k: str) -> list[float]:
        """Each tokenbench run's median, as their_runs holds the reference's."""
        return [statistics.median(x) for x in our_each[c][k]]

    def still_open() -> list[str]:
        """The rules below that read more than one run and that a third round could still change (rounds.py): a
        median of three runs lies between the other two, and a third reference run only widens its range."""
        found = []
        for c in n:
            if c == 1:
                found += [f"c1 {k}" for k in keys if not rounds.within(corrected_by_round(c, k), 0.9, 1.1)]
            else:
                if not all(within_reference(x, their_runs[c]["ttft"], 0.25) for x in our_medians(c, "ttft")):
                    found.append(f"c{c} ttft")
                if not (rounds.within(by_round(c, "tps"), 0.9, 1.1)  # the smallest the limit can be
                        and all(within_reference(x, their_runs[c]["tps"], 0.10) for x in ours[c]["tps"])):
                    found.append(f"c{c} tps")
            visible = sum(overhead[("first visible text", c)]) - sum(overhead[("tokenbench", c)])
            if not (held[c][0] >= 0.15 * held[c][1]  # a third run's chunks add half as many again
                    and max(overhead[("tokenbench", c)]) <= max(overhead[("vllm bench serve", c)]) + 2
                    and visible > 3):  # a run's visible-text overhead is never under its first-token one
                found.append(f"c{c} overhead")
            if not all(rounds.within(decode[(t, c)], -0.03, 0.03) for t in ("tokenbench", "vllm bench serve")):
                found.append(f"c{c} decode")
        return found

    reference = _VllmBench()
    try:
        left_open: list[str] = []

        def settled() -> bool:
            left_open.extend(still_open())
            return not left_open

        for rnd, order in rounds.played(settled):
            for c in n:
                first, second = (run_ours, run_theirs) if order == "ab" else (run_theirs, run_ours)
                first(c, rnd)
                second(c, rnd)
    finally:
        reference.close()

    table: dict[str, object] = {}
    for c in n:
        for k in keys:
            a, b = statistics.median(ours[c][k]), statistics.median(theirs[c][k])
            lo, hi = min(their_runs[c][k]), max(their_runs[c][k])
            table[f"c{c} {k}"] = (round(a, 2), round(b, 2), f"{a / b - 1:+.1%}", f"ref runs {lo:.2f}..{hi:.2f}")
            table[f"c{c} {k} by round"] = [f"{x - 1:+.1%}" for x in by_round(c, k)]
            if c > 1 and k == "ttft":  # vLLM's own TTFT, its queue's wait in, under the two tools' runs
                table[f"c{c} {k} server by round"] = [f"{x - 1:+.1%}" for x in server_by_round(c, k)]
            if c == 1:
                table[f"c{c} {k} server by round"] = [f"{x - 1:+.1%}" for x in server_by_round(c, k)]
                table[f"c{c} {k} by round, server's change out"] = [f"{x - 1:+.1%}" for x in corrected_by_round(c, k)]
            if k in ("tpot", "itl"):
                a, b = statistics.fmean(ours[c][k]), statistics.fmean(theirs[c][k])
                table[f"c{c} mean {k}"] = (round(a, 2), round(b, 2), f"{a / b - 1:+.1%}")
    print(f"tokenbench vs vllm bench serve over {len(our_runs[1])} rounds (medians, and TPOT's and ITL's means):", table)
    with capsys.disabled():  # in every run's log, so a third round's cause can be read after a passing run
        print(f"\nsweep beside vllm bench serve: {len(our_runs[1])} rounds; rules two rounds left open: {left_open}")
    print("TTFT over the server's own (ms):", {f"{t} c{c}": [round(x, 1) for x in v] for (t, c), v in overhead.items()})
    print("decode time against the server's own:", {f"{t} c{c}": [f"{x:+.1%}" for x in v] for (t, c), v in decode.items()})
    print("run medians, TPOT (ms):", {f"c{c}": {"tokenbench": [round(x, 1) for x in our_runs[c]],
                                                 "vllm bench serve": [round(x, 1) for x in their_runs[c]["tpot"]]}
                                       for c in n})
    print("tokenbench's longest event-loop stop per run (ms):", our_stops, "runs it flagged, run again:", stopped)
    print("tokenbench's client CPU per run (% of a core):", our_cpu)
    print("token chunks with no visible text (held back):", {f"c{c}": f"{h}/{t}" for c, (h, t) in held.items()})
    for c in n:
        # tokenbench's own work on the cores it shares with vLLM: too little to slow the server
        assert all(x < 10 for x in our_cpu[c]), our_cpu
        for k in keys:
            if c == 1:
                # one request at a time: the loads have no shape to differ by, so the server's change between the
                # two runs is its drift, and it is taken out (a CI run read the server's decode 23% and 15% slower
                # under tokenbench in two rounds of three, at 2% of a core for tokenbench's client)
                apart = statistics.median(corrected_by_round(c, k)) - 1
                assert abs(apart) <= 0.10, (table, f"c{c} {k} {apart:+.1%} with the server's change out")
                continue
            if k in ("tpot", "itl"):
                continue  # a run's lock-step mode: held to the server's own decode times below
            if k == "ttft":
                # a run's TTFT at 4 and 16 is mostly where its requests fell in vLLM's waves and queue, which the
                # scheduler's split moves by whole runs, not the client: one run of this test read TTFT at 16
                # -13.8, -3.0 and +11.1% apart by round, and a CI run +14.6% by the median round with each tool's
                # runs within 10% of each other. What the client reads of it is held to vLLM's own TTFT below
                # (a few ms over it, as the reference's), and the median of tokenbench's run medians, as the
                # reference's runs are read, to the reference's run range, widened by a quarter
                assert within_reference(statistics.median(our_medians(c, k)), their_runs[c][k], 0.25), table
                continue
            # each round's two runs ran back to back, so their ratio is free of the server's drift between rounds,
            # and the median round's is held: within 10%, or within the spread of either tool's own runs, which the
            # scheduler's split of each wave moves (a difference smaller than the runs' own is none). One run of
            # this test read TTFT at 4 +11.9, +17.7 and -1.5% apart by round, the reference's own runs 13%; another
            # tok/s at 4 -10.6, -13.4 and +2.4%, its TPOT +13.5, +15.4 and -6.3% (the split's modes), both tools
            # within 0.2% of the server's own decode times
            runs = [[statistics.fmean(x) if k == "tps" else statistics.median(x) for x in our_each[c][k]],
                    their_runs[c][k]]
            limit = max(0.10, *(max(r) / min(r) - 1 for r in runs))
            apart = statistics.median(by_round(c, k)) - 1
            assert abs(apart) <= limit, (table, f"c{c} {k} {apart:+.1%}, limit {limit:.1%}")
            assert within_reference(statistics.median(ours[c][k]), their_runs[c][k], 0.10), table
        assert all(x > -2 for x in overhead[("tokenbench", c)] + overhead[("vllm bench serve", c)]), overhead
        assert held[c][0] >= 0.1 * held[c][1], held  # the model made held-back chunks: the rule is tested
        assert statistics.median(overhead[("tokenbench", c)]) <= max(overhead[("vllm bench serve", c)]) + 2, overhead
        # the old rule reads later on the same requests (by the held-back first tokens' wait for their text)
        assert statistics.fmean(overhead[("first visible text", c)]) > statistics.fmean(overhead[("tokenbench", c)]) + 1, \
            overhead
        for tool in ("tokenbench", "vllm bench serve"):
            assert abs(statistics.median(decode[(tool, c)])) <= 0.03, (decode, our_stops, stopped)
            assert all(abs(x) <= 0.15 for x in decode[(tool, c)]), (decode, our_stops)
    assert our_prefix_hits == 0  # tokenbench's prompts are new every run: no prefix cache served them
    # the rule can fail: the first report of a slower tokenbench, 239-258 ms against the reference's 132-181 ms
    assert not within_reference(239.0, [132.0, 181.0], 0.25)


def test_the_embedded_vllm_compiles_its_graph_without_saving_it(vllm_utf8: Serving) -> None:
    """launch.VLLM_ENV: vLLM's CPU build cannot load back the compiled graph it saves (its "AOT compile"), so every
    start compiled it again and saved it again, 13 s a start; the embedded engine starts with saving off, and still
    compiles the graph it serves."""
    log = vllm_utf8.server.log_path.read_text(errors="replace")
    assert "Warming up model for the compilation" in log, log[-3000:]
    assert "saved AOT compiled function" not in log and "Compiling model again" not in log, log[-3000:]


def test_vllm_says_the_context_it_gives_a_request(vllm_utf8: Serving) -> None:
    """The real server's /v1/models lists max_model_len (the fixture's 2048), which discovery reads as the context
    a request may fill: depth skips what does not fit, and sessions end before they pass it."""
    info = asyncio.run(_discover(vllm_utf8.server.base_url))
    assert (info.engine, info.slot_ctx, info.slots) == ("vllm", 2048, None), info.to_dict()


async def _discover(url: str) -> ServerInfo:
    async with aiohttp.ClientSession() as http:
        return await discover(http, url)


# --- lengths that vary, and prompts from a file, on vLLM ----------------------------------------------------

DATA = Path(__file__).parent / "data"


@pytest.mark.timeout(900)
def test_dataset_and_drawn_lengths_come_back_exactly_from_vllm(vllm_utf8: Serving,
                                                               tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Per request, against the server's own usage:
    - a --dataset run of completion prompts: vLLM's usage.prompt_tokens is the local tokenizer's count of the
      very item that request sent (the run's seed orders the items), and its completion_tokens the item's own
      max_tokens, else --output-len;
    - ShareGPT on the chat API: completion_tokens is the token count of the item's first reply;
    - --input-len uniform:32-96 --output-len uniform:8-24: each request gets exactly the lengths it drew."""
    from tokenbench.dataset import load
    from tokenbench.workload import LocalTokenizer, WorkloadRecord
    from tokenbench.draws import parse as parse_draw

    server, model = vllm_utf8
    tok = LocalTokenizer(str(model.hf_dir))
    common = ["--url", server.base_url, "--tokenizer", str(model.hf_dir), "--no-metrics", "--quiet", "--seed", "4"]

    def records(argv: list[str]) -> tuple[dict[str, Any], list[Any]]:
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}.json"
        assert main(["sweep", *common, *argv, "--json", str(out)]) == 0, capsys.readouterr().err
        doc = _json(out)
        assert all(lv["failed"] == 0 and not {"output_short", "prompt_truncated"} & set(lv["flags"])
                   for lv in doc["levels"]), doc["levels"]
        return doc, sorted(Store().requests(doc["run_id"]), key=lambda r: r.index)

    # completion prompts from a file: every request, warm-ups included
    _, recs = records(["--dataset", str(DATA / "prompts.jsonl"), "--output-len", "16", "--concurrency", "1,4",
                       "--requests", "7"])
    items = load(DATA / "prompts.jsonl").shuffled(4)
    assert len(recs) == 1 + 7 + 4 + 7
    for r in recs:
        item = items[r.index % len(items)]
        assert r.input_tokens_source == "usage" and r.output_tokens_source == "usage"
        assert r.input_tokens == r.expected_input_tokens == tok.count(item.text()), (r.index, item.line)
        assert r.output_tokens == r.expected_output_tokens == (item.output_len or 16)
    print("dataset prompt tokens (usage = local count):", sorted({r.input_tokens for r in recs}))

    # ShareGPT on the chat API: the first reply's token count is the output length
    _, recs = records(["--dataset", str(DATA / "sharegpt.json"), "--api", "chat", "--output-len", "9",
                       "--concurrency", "2", "--requests", "5"])
    items = load(DATA / "sharegpt.json", "chat").shuffled(4)
    for r in recs:
        item = items[r.index % len(items)]
        want = tok.count(item.reply) if item.reply is not None else 9
        assert r.output_tokens == r.expected_output_tokens == want
        # the chat template adds its own tokens: the server counts more than the messages' text, never less
        assert (r.input_tokens or 0) > (r.expected_input_tokens or 0) > 0

    # drawn lengths: each request's own, exactly
    doc, recs = records(["--input-len", "uniform:32-96", "--output-len", "uniform:8-24", "--concurrency", "1,4",
                         "--requests", "12"])
    w = WorkloadRecord(64, 16, seed=4, input_draw=parse_draw("uniform:32-96", "--input-len"),
                 output_draw=parse_draw("uniform:8-24", "--output-len"))
    assert len(recs) == 1 + 12 + 4 + 12
    for r in recs:
        n_in, n_out = w.request_lengths(r.index)
        assert (r.input_tokens, r.output_tokens) == (n_in, n_out), (r.index, r.input_tokens, r.output_tokens)
        assert r.finish_reason == "length"
    assert len({r.output_tokens for r in recs}) >= 8
    assert doc["manifest"]["request_fields"] == {"ignore_eos": True, "min_tokens": "per request"}
    print("drawn (input, output) per request:", [(r.input_tokens, r.output_tokens) for r in recs])
