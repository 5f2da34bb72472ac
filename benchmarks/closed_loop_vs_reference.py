"""Does vLLM serve tokenbench's closed loop as it serves vllm bench serve's? (a benchmark, not a test)

One vLLM server (built model, random weights), its processes pinned to core 0 and each client to core 1 where the
machine has two cores or more. Rounds interleaved A-B, B-A, ...: ``tokenbench sweep --warmup 0 --no-metrics`` and
``vllm bench serve`` (a new ``--seed`` each run, so vLLM's prefix cache serves neither), the same concurrency,
request count and lengths. Per run it prints:

- the tool's mean TTFT over its measured requests; vLLM's own mean TTFT over every request the run sent
  (``/metrics`` read before and after: tokenbench's check request too), and what the client and HTTP add to it
  (the tool's mean over the same requests, its check request counted, minus vLLM's);
- vLLM's own mean prefill time over those requests;
- the closed loop's waves (``steady.waves``, the same rule for both tools' per-request stamps): each wave size
  with its count and median TTFT;
- the re-send gap: from a request's end to the next send (median and p90), how fast the loop answers an end;
- output tokens a second.

    python benchmarks/closed_loop_vs_reference.py [tiny|small] [CONCURRENCY] [REQUESTS] [ROUNDS]
        (default: small 4 32 3; about 8 minutes on 2 cores, vLLM's start included)
"""

from __future__ import annotations

import bisect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from tokenbench.engines import launch, tiny, vllm_env
from tokenbench.engines.cache import cache_dir
from tokenbench.importers.vllm import _requests as detailed_requests
from tokenbench.prometheus import parse
from tokenbench.records import RequestRecord
from tokenbench.steady import waves
from tokenbench.store import Store

REFERENCE = Path(__file__).resolve().parents[1] / "tests" / "reference" / "vllm_bench_serve.py"
INPUT, OUTPUT = 128, 64
TIMES = ("time_to_first_token", "request_prefill_time")


def server_sums(base: str) -> dict[str, float]:
    """vLLM's TTFT and prefill-time histograms' sums and counts, summed over their label sets."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as f:
        samples = parse(f.read().decode())
    return {name + part: samples[f"vllm:{name}_seconds{part}"] for name in TIMES for part in ("_sum", "_count")}


def server_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: (after[name + "_sum"] - before[name + "_sum"]) * 1000
            / max(1.0, after[name + "_count"] - before[name + "_count"]) for name in TIMES}


def resend_gaps_ms(records: list[RequestRecord], concurrency: int) -> list[float]:
    """For every send after the first ``concurrency``: the time since the latest end before it."""
    ends = sorted(r.end_ns for r in records if r.end_ns is not None)
    gaps = []
    for r in sorted(records, key=lambda r: r.sent_ns)[concurrency:]:
        i = bisect.bisect_right(ends, r.sent_ns)
        if i:
            gaps.append((r.sent_ns - ends[i - 1]) / 1e6)
    return gaps


def describe_waves(records: list[RequestRecord], concurrency: int) -> str:
    tpot = [(r.end_ns - r.first_token_ns) / 1e6 / (OUTPUT - 1) for r in records
            if r.end_ns is not None and r.first_token_ns is not None]
    w = waves(records, concurrency, statistics.median(tpot) if tpot else None)
    if w is None:
        return "-"
    return ", ".join(f"{s.waves}x{s.size} ({s.ttft_ms_p50:.0f} ms)" for s in w.by_size if s.ttft_ms_p50)


def run_tokenbench(server: launch.RunningEngine, model: tiny.TinyModel, c: int, n: int, pin: list[str],
                   tmp: Path, tag: str) -> tuple[list[RequestRecord], list[float], list[float], float]:
    db, js = tmp / f"{tag}.db", tmp / f"{tag}.json"
    cmd = pin + [sys.executable, "-m", "tokenbench", "sweep", "--url", server.base_url, "--tokenizer",
                 str(model.hf_dir), "--input-len", str(INPUT), "--output-len", str(OUTPUT), "--concurrency", str(c),
                 "--requests", str(n), "--warmup", "0", "--no-metrics", "--guard", "off", "--quiet",
                 "--db", str(db), "--json", str(js)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"tokenbench failed: {proc.stderr[-2000:]}")
    doc = json.loads(js.read_text())
    recs = [r for r in Store(db).requests(doc["run_id"]) if r.phase == "measured"]
    measured = [r.ttft_ns / 1e6 for r in recs if r.ttft_ns is not None]
    check = doc["manifest"]["check_request"]["ttft_ms"]
    return recs, measured, measured + [check], doc["levels"][0]["output_throughput_tps"]


def run_reference(server: launch.RunningEngine, model: tiny.TinyModel, c: int, n: int, pin: list[str],
                  tmp: Path, tag: str, seed: int) -> tuple[list[RequestRecord], list[float], list[float], float]:
    out = tmp / f"{tag}.json"
    cmd = pin + [str(vllm_env.python()), str(REFERENCE), "--backend", "openai", "--base-url", server.base_url[:-3],
                 "--model", server.model, "--tokenizer", str(model.hf_dir), "--dataset-name", "random",
                 "--random-input-len", str(INPUT), "--random-output-len", str(OUTPUT), "--num-prompts", str(n),
                 "--max-concurrency", str(c), "--ignore-eos", "--seed", str(seed), "--ready-check-timeout-sec", "0",
                 "--save-result", "--save-detailed", "--result-filename", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"vllm bench serve failed: {proc.stdout[-1000:]}{proc.stderr[-1000:]}")
    d = json.loads(out.read_text())
    recs = detailed_requests(d, out)  # the importer's reading of --save-detailed
    ttfts = [t * 1000 for t in d["ttfts"]]
    return recs, ttfts, ttfts, float(d["output_throughput"])


def pin_server(server: launch.RunningEngine) -> None:
    """Every process of the server's group, every thread, onto core 0."""
    pids = subprocess.run(["pgrep", "-g", str(os.getpgid(server.proc.pid))], capture_output=True, text=True,
                          check=False).stdout.split()
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "0x1", pid], capture_output=True, check=False)


def main() -> None:
    size = sys.argv[1] if len(sys.argv) > 1 else "small"
    c, n, rounds = (int(sys.argv[i]) if len(sys.argv) > i else d for i, d in ((2, 4), (3, 32), (4, 3)))
    model = tiny.ensure(cache_dir(), size=size)
    two = (os.cpu_count() or 1) >= 2
    server = launch.start("vllm", model, parallel=max(c, 4), ctx=2048)
    print(f"vLLM {size} model, concurrency {c}, {n} requests of {INPUT} in / {OUTPUT} out, {rounds} rounds; "
          f"{'server on core 0, each client on core 1' if two else 'one core: nothing pinned'}")
    print("| round | client | mean TTFT | vLLM's own TTFT | added | vLLM's prefill | waves (median TTFT) "
          "| re-send gap p50 / p90 | output tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    pin = ["taskset", "-c", "1"] if two else []
    try:
        if two:
            pin_server(server)
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for rnd in range(rounds):
                order = ("tokenbench", "vllm bench serve")
                for tool in order if rnd % 2 == 0 else order[::-1]:
                    before = server_sums(server.base_url[:-3])
                    if tool == "tokenbench":
                        recs, measured, seen, tps = run_tokenbench(server, model, c, n, pin, tmp, f"tb-{rnd}")
                    else:
                        recs, measured, seen, tps = run_reference(server, model, c, n, pin, tmp, f"ref-{rnd}",
                                                                  1000 + rnd)
                    own = server_means(before, server_sums(server.base_url[:-3]))
                    gaps = sorted(resend_gaps_ms(recs, c))
                    mean, added = statistics.fmean(measured), statistics.fmean(seen) - own["time_to_first_token"]
                    gap = f"{statistics.median(gaps):.2f} / {gaps[int(0.9 * (len(gaps) - 1))]:.2f} ms" if gaps else "-"
                    print(f"| {rnd + 1} | {tool} | {mean:,.1f} ms | {own['time_to_first_token']:,.1f} ms "
                          f"| {added:+.1f} ms | {own['request_prefill_time']:,.1f} ms "
                          f"| {describe_waves(recs, c)} | {gap} | {tps:,.1f} |", flush=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
