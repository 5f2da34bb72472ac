"""What llama-server's host prompt cache costs each request (a benchmark, not a test): the same requests against the
embedded llama-server twice, with its default ``--cache-ram`` (8192 MiB) and with ``--cache-ram 0``.

As llama-server launches a task it first saves every idle slot whose state is not yet in its host prompt cache
(tools/server/server-context.cpp: "saving idle slot to prompt cache"), in its one loop, so no slot runs meanwhile.
Under a closed loop each request pays for the state the request before it left: its KV cache, prompt and output.
The predictor counts it (``serving.slot_save``, ``LLAMA_SAVE_GBS``); this measures it on this machine.

The model is built here with random weights (no hub): 64 layers of width 256 with 8 KV heads of 128, so each token
of context holds 256 KiB of f16 KV cache (twice a Llama 3 8B's) while a prompt costs about 1% of an 8B's
arithmetic. Requests go one at a time (concurrency 1), each a prompt of about 450 tokens and 32 output tokens;
the first of each server is a warm-up and not counted. Per server it prints the median TTFT, the median prompt
time the server reports (``timings.prompt_ms``), their difference, the saves its log shows (``-lv 4``) and the
state they moved, and from the two servers' difference the rate of a save.

    python benchmarks/llama_server_cache_ram.py [REQUESTS]     (default 8; about a minute on 2 cores)
"""

from __future__ import annotations

import json
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tokenbench.engines import launch, tiny

LAYERS, WIDTH, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 256, 8, 8, 128, 512
PROMPT_WORDS, OUTPUT = 450, 32
WORDS = (Path(__file__).resolve().parents[1] / "src" / "tokenbench" / "data" / "words.txt").read_text().split()
SAVE = re.compile(r"saving prompt with length (\d+), total state size = ([\d.]+) MiB")


def make_model(out: Path) -> tiny.TinyModel:
    """The KV-heavy random model as an F16 GGUF (about 15 s, 186 MB)."""
    return tiny.random_llama_gguf(out, "kv-heavy-random", LAYERS, WIDTH, FFN, HEADS, KV_HEADS, HEAD_DIM, 32768)


def saves(log: str) -> list[float]:
    """The MiB of every save the server's log shows (a save it skips, the prompt being in the cache already, not)."""
    lines = log.splitlines()
    return [float(m.group(2)) for i, line in enumerate(lines) if (m := SAVE.search(line))
            and not (i + 1 < len(lines) and "already in the cache" in lines[i + 1])]


def request(root: str, seed: int) -> tuple[float, float]:
    """One streamed completion: (TTFT in ms as this client saw it, the server's prompt time in ms)."""
    rng = random.Random(seed)
    body = json.dumps({"prompt": " ".join(rng.choice(WORDS) for _ in range(PROMPT_WORDS)), "n_predict": OUTPUT,
                       "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(f"{root}/completion", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, prompt_ms = None, float("nan")
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            if not line.startswith(b"data:"):
                continue
            if first is None:
                first = (time.perf_counter() - t0) * 1e3
            chunk = json.loads(line[5:])
            if "timings" in chunk:
                prompt_ms = float(chunk["timings"]["prompt_ms"])
    assert first is not None, "no token came back"
    return first, prompt_ms


def serve(model: tiny.TinyModel, extra: tuple[str, ...], n: int) -> tuple[list[float], list[float], list[float]]:
    """Start llama-server (tokenbench's embedded build, 4 slots), send a warm-up and ``n`` requests one at a time;
    TTFTs, prompt times, saved MiB."""
    with launch.start("llama-server", model, parallel=4, ctx=2048, extra=("-lv", "4", *extra)) as server:
        root = server.base_url[: -len("/v1")]
        request(root, 0)  # warm-up
        skip = len(saves(server.log_path.read_text()))
        ttft, prompt = zip(*(request(root, i + 1) for i in range(n)))
        return list(ttft), list(prompt), saves(server.log_path.read_text())[skip:]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    with tempfile.TemporaryDirectory() as tmp:
        model = make_model(Path(tmp))
        rows = {}
        for name, extra in (("default (--cache-ram 8192)", []), ("--cache-ram 0", ["--cache-ram", "0"])):
            rows[name] = serve(model, tuple(extra), n)
    print(f"llama-server, {LAYERS} layers x {KV_HEADS} KV heads of {HEAD_DIM} (256 KiB of f16 KV a token), 4 slots, "
          f"{n} requests one at a time (~{PROMPT_WORDS} prompt tokens, {OUTPUT} out), "
          f"{launch.server_threads()} threads\n")
    print("| server | TTFT median | prompt time (server) | TTFT - prompt time | saves logged | MiB a save |")
    print("|---|---|---|---|---|---|")
    over = {}
    for name, (ttft, prompt, saved) in rows.items():
        over[name] = statistics.median(t - p for t, p in zip(ttft, prompt))
        mib = f"{statistics.median(saved):.1f}" if saved else "—"
        print(f"| {name} | {statistics.median(ttft):,.0f} ms | {statistics.median(prompt):,.0f} ms | "
              f"{over[name]:,.0f} ms | {len(saved)} | {mib} |")
    ttft_on, _, saved_on = rows["default (--cache-ram 8192)"]
    cost = over["default (--cache-ram 8192)"] - over["--cache-ram 0"]
    if saved_on and cost > 0:
        mb = statistics.median(saved_on) * 2**20 / 1e6
        print(f"\nthe prompt cache costs {cost:,.0f} ms a request: {mb:,.0f} MB a save, "
              f"{len(saved_on) / len(ttft_on):.1f} saves a request, {mb / cost:.2f} GB/s "
              "(the predictor's LLAMA_SAVE_GBS is a GPU server's, 1.2)")
    else:
        print(f"\nno cost measured ({cost:+,.0f} ms a request, {len(saved_on)} saves logged)")


if __name__ == "__main__":
    main()
