"""How much does the client itself distort what it measures, and how fast can it ingest a stream?

A local emitter (``tokenbench.emitter``, its own process) streams on a known schedule and stamps when
it actually wrote each request's first and last token chunk (perf_counter_ns: CLOCK_MONOTONIC, shared by
both processes). The client measures as it always does. For each concurrency we print:

- TTFT error: measured TTFT minus the schedule's TTFT (what a user would see as error: the emitter's own
  lateness, the kernel and the client);
- delivery latency: the client's read time of the first token minus the emitter's write time (the
  client and kernel alone);
- TPOT error: measured TPOT minus the schedule's;
- ingest: token chunks per second the client parsed, with the client's CPU use and event-loop lag.

"paced" rows follow a schedule (TTFT 50 ms, one chunk every 10 ms); "burst" rows write every chunk at once,
so the limit is how fast the client parses. This is a benchmark, not a test: it prints a table.

    python benchmarks/client_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any

import aiohttp

from tokenbench.client import PreparedRequest, StreamClient
from tokenbench.emitter import EmitterProcess
from tokenbench.loadgen import ClientWatch, Level, run_phase
from tokenbench.metrics import percentile

TTFT_S = 0.050
ITL_S = 0.010


class Prompts:
    def __init__(self, tag: str, out: int) -> None:
        self.tag, self.out, self.i = tag, out, 0

    async def next(self) -> tuple[int, PreparedRequest]:
        self.i += 1
        return self.i, PreparedRequest(f"{self.tag}-{self.i} x", self.out, 2)


async def one_level(root: str, concurrency: int, requests: int, out_tokens: int, tag: str) -> dict[str, Any]:
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as session:
        client = StreamClient(session=session, base_url=root + "/v1", model="emitter", stall_timeout_s=120)
        watch = ClientWatch()
        watch.start()
        t0 = time.perf_counter()
        res = await run_phase(client, Prompts(tag, out_tokens), Level(concurrency=concurrency), "measured",
                              requests=requests, duration_s=None, watch=watch)
        wall = time.perf_counter() - t0
        await watch.stop()
        async with session.get(root + "/stats") as r:
            stamps = (await r.json())["stamps"]
    ok = [r for r in res.records if r.ok]
    ttft_err, deliver, tpot_err = [], [], []
    for r in ok:
        key = f"{tag}-{r.index} x"
        if key not in stamps or r.first_token_ns is None or r.end_ns is None:
            continue
        _recv, t_first, _t_last = stamps[key]
        ttft_err.append((r.first_token_ns - r.sent_ns) / 1e6 - TTFT_S * 1000)
        deliver.append((r.first_token_ns - t_first) / 1e6)
        if r.output_tokens and r.output_tokens > 1:
            tpot = (r.chunk_ns[-1] - r.first_token_ns) / 1e6 / (r.output_tokens - 1)
            tpot_err.append(tpot - ITL_S * 1000)
    chunks = sum(len(r.chunk_ns) for r in ok)
    rep = watch.report()
    return {
        "concurrency": concurrency, "ok": len(ok), "failed": len(res.records) - len(ok),
        "chunks_per_s": chunks / wall, "ttft_err": ttft_err, "deliver": deliver, "tpot_err": tpot_err,
        "cpu": rep.get("cpu_pct"), "lag_p99": rep.get("loop_lag_ms_p99"),
    }


def q(vals: list[float], p: float) -> str:
    return f"{percentile(sorted(vals), p):.2f}" if vals else "—"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer levels (about 30 s)")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    levels = [1, 8, 64] if a.quick else [1, 8, 64, 256, 512]
    rows: list[dict[str, Any]] = []
    with EmitterProcess("--ttft", str(TTFT_S), "--itl", str(ITL_S)) as em:
        for c in levels:
            r = asyncio.run(one_level(em.root, c, max(2 * c, 16), 64, f"paced{c}"))
            r["mode"], r["offered"] = "paced", c / ITL_S
            rows.append(r)
    with EmitterProcess("--burst") as em:
        for c in ([1, 8, 64] if a.quick else [1, 8, 64, 512]):
            r = asyncio.run(one_level(em.root, c, c * 2, 2000 if c <= 64 else 200, f"burst{c}"))
            r["mode"], r["offered"] = "burst", None
            rows.append(r)

    head = ["mode", "conc.", "ok/failed", "offered chunks/s", "ingested chunks/s", "TTFT err p50/p99 ms",
            "delivery p50/p99 ms", "TPOT err p50 ms", "client CPU %", "loop lag p99 ms"]
    print(f"client overhead on {os.cpu_count()} cores, python {sys.version.split()[0]}; "
          f"schedule: TTFT {TTFT_S * 1000:.0f} ms, ITL {ITL_S * 1000:.0f} ms")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join([
            r["mode"], str(r["concurrency"]), f"{r['ok']}/{r['failed']}",
            f"{r['offered']:,.0f}" if r["offered"] else "as fast as possible",
            f"{r['chunks_per_s']:,.0f}",
            f"{q(r['ttft_err'], 50)} / {q(r['ttft_err'], 99)}" if r["mode"] == "paced" else "—",
            f"{q(r['deliver'], 50)} / {q(r['deliver'], 99)}",
            q(r["tpot_err"], 50) if r["mode"] == "paced" else "—",
            f"{r['cpu']:.0f}" if r["cpu"] is not None else "—",
            f"{r['lag_p99']:.1f}" if r["lag_p99"] is not None else "—",
        ]) + " |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if not isinstance(v, list)} | {
                "ttft_err_p50": statistics.median(r["ttft_err"]) if r["ttft_err"] else None,
                "deliver_p50": statistics.median(r["deliver"]) if r["deliver"] else None} for r in rows], f, indent=1)


if __name__ == "__main__":
    main()
