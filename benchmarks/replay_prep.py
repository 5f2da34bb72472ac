"""What preparing a trajectory replay costs at real sizes: time and memory follow a trace's distinct tokens, not
the tokens its calls send.

A real Claude Code trace makes about 45 calls of about 100K tokens each, 96% of them in blocks an earlier call of
the trace already sent. The replayer builds each distinct block's text once per tree replayed and joins a call's
blocks when it is sent, so a whole trace's prompts cost about its distinct tokens' worth of work and memory.

For each trace (a folder of Weka/AgentX traces, e.g. a clone of kv-cache-tester's ``traces/``; or, without one,
traces of that shape made here), this loads the set, then builds every call's prompt as a replay sends it (one
at a time, none kept; a tree's blocks dropped when it is done) with the embedded model's tokenizer, and prints: tokens the calls send, distinct block
tokens, seconds and peak traced memory for loading and for building. A benchmark, not a test: it prints a table.

    python benchmarks/replay_prep.py [--traces DIR] [--limit 20] [--rss]

``--rss``: tracemalloc off (it slows building several-fold on a large set, more than the set's size would say),
and the process's peak resident memory in place of the traced peaks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from tokenbench.engines import tiny
from tokenbench.replay import ReplayPlan, ReplayTexts
from tokenbench.trajectories.load import load_trajectories
from tokenbench.workload import LocalTokenizer, PromptBuilder

BLOCK = 64


def made(folder: Path, n: int, seed: int = 1) -> None:
    """``n`` traces of a real trace's shape: 45 calls, a system prompt of 20K tokens, each call re-sending the last
    one's prompt and answer and adding a tool result, so most of its prompt is blocks already sent."""
    rng = random.Random(seed)
    for k in range(n):
        ids: list[int] = list(range(k * 10**6, k * 10**6 + 20_000 // BLOCK))
        t, requests = 0.0, []
        for _ in range(45):
            ids += list(range(ids[-1] + 1, ids[-1] + 1 + rng.randint(10, 80)))
            n_in = len(ids) * BLOCK + rng.randint(0, BLOCK - 1)
            requests.append({"t": round(t, 3), "type": "n", "in": n_in, "out": rng.randint(50, 600),
                             "hash_ids": list(ids), "think_time": 2.0, "api_time": 6.0})
            t += 8.0
        (folder / f"trace_{k:04d}.json").write_text(json.dumps({"id": f"made-{k}", "block_size": BLOCK,
                                                                "requests": requests}))


async def build_all(plan: ReplayPlan, builder: PromptBuilder) -> tuple[int, int]:
    """Every call's prompt as a replay builds it (the salt of one replay per tree), none kept: the tokens sent."""
    texts = ReplayTexts(builder, plan)
    await texts.start()
    sent = 0
    for i, tree in enumerate(plan.trajectories.trajectories):
        for _, t in tree.walk():
            for c in t.calls:
                _, count = await texts.prompt(f"bench-{i}", c, f"{i}/{c.index}")
                sent += count
        texts.forget(f"bench-{i}")  # as a replay does when a tree is done
    return sent, texts.built


def measure(path: Path, traced: bool = True) -> None:
    tok = LocalTokenizer(str(tiny.ensure().hf_dir))
    if traced:
        tracemalloc.start()
    t0 = time.perf_counter()
    trajectories = load_trajectories(path)
    load_s, (_, load_peak) = time.perf_counter() - t0, tracemalloc.get_traced_memory()
    if traced:
        tracemalloc.reset_peak()
    f = trajectories.figures
    t0 = time.perf_counter()
    sent, built = asyncio.run(build_all(ReplayPlan(trajectories), PromptBuilder(tok, 1, "bench")))
    build_s, (_, build_peak) = time.perf_counter() - t0, tracemalloc.get_traced_memory()
    if traced:
        tracemalloc.stop()
    print(f"{'trajectories':<34} {f.trajectories:>14,}")
    print(f"{'calls (median per tree)':<34} {f.calls:>14,} ({statistics.median([len(t.calls) for t in trajectories.trajectories]):g})")
    print(f"{'input tokens the calls send':<34} {sent:>14,}")
    print(f"{'distinct block tokens (file)':<34} {f.distinct_block_tokens or 0:>14,}")
    print(f"{'block tokens built':<34} {built:>14,}")
    print(f"{'ideal cached share':<34} {f.ideal_cached_share or 0:>14.2%}")
    if traced:
        print(f"{'load: seconds, peak MB':<34} {load_s:>7.1f} {load_peak / 2**20:>6.0f}")
        print(f"{'build: seconds, peak MB':<34} {build_s:>7.1f} {build_peak / 2**20:>6.0f}")
    else:
        print(f"{'load, build: seconds':<34} {load_s:>7.1f} {build_s:>6.1f}")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(f"{'peak resident MB (the process)':<34} {rss:>14.0f}")
    print(f"{'build: µs per token sent':<34} {1e6 * build_s / max(1, sent):>14.3f}")
    print(f"{'build: µs per distinct token':<34} {1e6 * build_s / max(1, built):>14.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, help="a folder of Weka/AgentX trace files (default: made here)")
    ap.add_argument("--limit", type=int, default=20, help="the first N traces of the folder (default 20)")
    ap.add_argument("--rss", action="store_true", help="tracemalloc off: time, and the peak resident memory")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d)
        if a.traces is None:
            made(folder, a.limit)
            print(f"{a.limit} traces of a real trace's shape, made here")
        else:
            for src in sorted(a.traces.glob("*.json"))[: a.limit]:
                (folder / src.name).symlink_to(src.resolve())
            print(f"the first {a.limit} traces of {a.traces}")
        measure(folder, traced=not a.rss)


if __name__ == "__main__":
    main()
