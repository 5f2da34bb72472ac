"""llama-server's TTFT when agents send at once, measured beside the predictor's queue (a benchmark; the engine test
tests/test_buyer_engines.py runs it small).

N agents send a prompt each at the same moment to llama-server with 8 slots (the embedded small model, on this
machine's CPU): the prompts go through the server's step budget (-b 2048 tokens a step, in micro-batches of -ub 512)
behind each other, so the median agent waits for about half of the others' prompts and the last for all of them.
``predict/queue.py`` simulates that schedule (``closed_loop``, the start's burst); its steps are timed here from
the one-agent rounds' own server timings (``timings.prompt_ms`` over the prompt's tokens: seconds a prompt token;
``predicted_per_token_ms``: a decode step), not from the roofline, whose constants no row of this CPU stands
behind. So what is checked is the queue: whether TTFT grows with the agents as the server runs them.

    python benchmarks/llama_server_burst.py [ROUNDS]     (default 3 rounds per count of agents; about a minute)

It prints, per count of agents, the measured median TTFT (over rounds and agents) beside the predicted median of
the burst, and the slowest beside the predicted slowest.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tokenbench.engines import launch, tiny
from tokenbench.predict import queue

SLOTS = 8
AGENTS = (1, 2, 4, 8)
PROMPT_WORDS = 400  # 402 tokens of the small model's tokenizer (measured): 8 of them take two steps of 2048
OUTPUT = 16
BUDGET = 2048  # llama-server's -b (n_batch): prompt tokens a step takes
WORDS = (Path(__file__).resolve().parents[1] / "src" / "tokenbench" / "data" / "words.txt").read_text().split()


@dataclass(slots=True)
class Reply:
    ttft_ms: float  # as this client saw it
    prompt_ms: float  # the server's timings.prompt_ms
    prompt_n: int  # the prompt's tokens as the server counted them
    decode_ms: float  # the server's predicted_per_token_ms


def request(root: str, seed: int) -> Reply:
    rng = random.Random(seed)
    body = json.dumps({"prompt": " ".join(rng.choice(WORDS) for _ in range(PROMPT_WORDS)), "n_predict": OUTPUT,
                       "ignore_eos": True, "stream": True, "cache_prompt": False}).encode()
    req = urllib.request.Request(f"{root}/completion", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, timings = None, {}
    with urllib.request.urlopen(req, timeout=300) as r:
        for line in r:
            if not line.startswith(b"data:"):
                continue
            if first is None:
                first = (time.perf_counter() - t0) * 1e3
            chunk = json.loads(line[5:])
            timings = chunk.get("timings", timings)
    assert first is not None and timings, "no token came back"
    return Reply(first, float(timings["prompt_ms"]), int(timings["prompt_n"]), float(timings["predicted_per_token_ms"]))


def burst(root: str, n: int, seed: int) -> list[Reply]:
    """``n`` requests sent at the same moment (threads released together)."""
    out: list[Reply | None] = [None] * n
    go = threading.Barrier(n)

    def one(i: int) -> None:
        go.wait()
        out[i] = request(root, seed * 100 + i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in out if r is not None]


def predicted(n: int, prompt: int, per_token_s: float, step_s: float) -> tuple[float, float]:
    """The burst's median and slowest TTFT (seconds) by the predictor's queue, a step timed as on a CPU, where a
    token's arithmetic is the cost: its tokens (prompt chunks and one per decoding sequence) at ``per_token_s``
    each, plus what one agent's decode step costs beyond its one token (``step_s``: the step's fixed part); the
    first token's way out one decode step more."""
    loop = queue.closed_loop(n, prompt, queue.decode_steps(OUTPUT), BUDGET, True, "together", 1, 0, 1, False)
    fixed = max(0.0, step_s - per_token_s)
    times = [fixed + (sum(t for t, _ in k.chunks) + k.decodes) * per_token_s for k in loop.kinds]
    t = queue.evaluate(loop, times)
    return t.ttft_start + step_s, t.ttft_worst + step_s


def run(rounds: int = 3, cache: Path | None = None) -> list[dict[str, float]]:
    """Every count of agents, measured and predicted (ms): the rows the benchmark prints."""
    model = tiny.ensure(cache or Path(tempfile.mkdtemp()), size="small")
    with launch.start("llama-server", model, parallel=SLOTS, ctx=1024, extra=("--cache-ram", "0")) as server:
        root = server.base_url[: -len("/v1")]
        burst(root, SLOTS, 0)  # warm-up: every slot once
        seen = {n: [r for k in range(rounds) for r in burst(root, n, 1 + n * rounds + k)] for n in AGENTS}
    one = seen[1]
    per_token = statistics.median(r.prompt_ms / r.prompt_n for r in one) / 1e3
    step = statistics.median(r.decode_ms for r in one) / 1e3
    prompt = round(statistics.median(r.prompt_n for r in one))
    rows = []
    for n, replies in seen.items():
        median, worst = predicted(n, prompt, per_token, step)
        rows.append({"agents": n, "measured_p50_ms": statistics.median(r.ttft_ms for r in replies),
                     "predicted_p50_ms": median * 1e3, "measured_max_ms": max(r.ttft_ms for r in replies),
                     "predicted_max_ms": worst * 1e3, "prompt_tokens": prompt})
    return rows


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rows = run(rounds)
    print(f"llama-server, {SLOTS} slots, the embedded small model on this CPU; {rows[0]['prompt_tokens']:.0f}-token "
          f"prompts sent at once, {OUTPUT} tokens out, {rounds} rounds per count; TTFT in ms")
    print("| agents | measured p50 | predicted p50 | measured max | predicted max |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['agents']} | {r['measured_p50_ms']:,.0f} | {r['predicted_p50_ms']:,.0f} | "
              f"{r['measured_max_ms']:,.0f} | {r['predicted_max_ms']:,.0f} |")


if __name__ == "__main__":
    main()
