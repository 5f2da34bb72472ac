"""How much does the client itself distort what it measures, and how fast can it ingest a stream?

A local emitter (``tokenbench.emitter``, its own process, pinned to core 0 when there are two or more) streams on
a known schedule and stamps when it really wrote each request's first token (perf_counter_ns: CLOCK_MONOTONIC,
one clock for every process of the machine). Each measurement runs in a fresh child process pinned to the other
cores: this tree's tokenbench, with 1 or more ``--workers``, and beside it, interleaved, a baseline version
(``--baseline REF``, a git ref of this repository, run from a temporary checkout), and, when installed
(``python benchmarks/peers.py install``; ``--peers``), GuideLLM, AIPerf and ``vllm bench serve`` (vLLM's own
aiohttp client, from the vLLM environment tokenbench makes for its engine: the like-for-like baseline) through
their own CLIs at the same fixed concurrency (``benchmarks/peers.py`` says how each is driven and read), so every
ratio is measured side by side in one run. Printed per row, medians over ``--repeats``:

- TTFT excess: measured TTFT minus the schedule's 50 ms (the emitter's own lateness, the kernel and the client);
- delivery: the client's read of the first token minus the emitter's write of it (the kernel and the client);
- send queue: the request's last byte on the socket minus when the client began the send (the client alone);
- arrival: the emitter's handler starting on the request minus when the client began the send (the client's send,
  the kernel, and the emitter's own queue of requests to parse); emitter late: its first write minus its handler's
  start minus the 50 ms (its sleep's overshoot while it serves the other streams). TTFT excess is, near enough,
  arrival + emitter late + delivery, so a row names which part of the excess is the client's;
- ingest: token chunks per second the client took in; CPU of the client (all its processes, % of the cores they
  can use: one per process, at most its cores)
  and of the emitter; the limit: whichever was above 85%, else the schedule itself;
- x PEER, on the "now, 1 worker" row: its ingest, then its TTFT excess p99, as ratios to the peer's on that row
  (above 1 ingests more; below 1 adds less TTFT).

"paced" rows follow the schedule (TTFT 50 ms, a chunk every 10 ms per stream); "burst" rows write every chunk at
once, so the limit is how fast the client parses. This is a benchmark, not a test: it prints tables.

    python benchmarks/client_overhead.py [--quick] [--workers 1,2,auto] [--baseline c5f8e15] [--repeats 3]
                                         [--peers guidellm,aiperf,vllm] [--paths lean,aiohttp] [--emitter lean]
                                         [--emitters 8] [--paced 256] [--burst 64]

On a machine of many cores (the 16-core targets: ``--workers auto`` at 512 and 2,048 streams), one emitter
core cannot pace 2,048 streams nor take in their waves of re-sends: ``--emitters N`` runs N lean emitters, each
pinned to a core of its own, on one shared port (SO_REUSEPORT), each keeping its own stamps; the client gets the
remaining cores.

Under the tables, a line says what ``--workers auto`` would start here: the cost of one send on each path,
measured as a sweep measures it (``workers.send_cost_us``: a wave of 64 to a sink on the loopback), and the
workers ``workers.auto_workers`` picks from it for 64 to 2,048 streams on the client's cores (the fewest whose
wave of re-sends keeps its p90 send queue under 1 ms, at least one per 64 streams, at most one per core).

``--paths``: this tree's send paths (the lean one, http1.py, and aiohttp's), interleaved, so "x baseline" compares
them within one run when ``--baseline ''``. ``--emitter lean``: the emitter on a bare asyncio server, whose
~70 µs less per request keeps a wave of 256 requests from queueing in the emitter (that queue is in "arrival").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # this tree's; a baseline tree (--baseline) runs this file too, and kept it in metrics
    from tokenbench.distribution import percentile
except ImportError:
    from tokenbench.metrics import percentile  # type: ignore[attr-defined,no-redef]

import peers  # benchmarks/peers.py, beside this file (a script's directory is on its path)

TTFT_S = 0.050
ITL_S = 0.010
HERE = Path(__file__).resolve().parent.parent
#: The client version before the batched hot path and the workers.
DEFAULT_BASELINE = "c5f8e15"


# ---- the child: one measurement, with whichever tokenbench is on its path ------------------------------------------

class _Prompts:
    def __init__(self, tag: str, out: int) -> None:
        self.tag, self.out, self.i = tag, out, 0

    async def next(self) -> tuple[int, Any]:
        from tokenbench.client import PreparedRequest

        self.i += 1
        return self.i, PreparedRequest(f"{self.tag}-{self.i} x", self.out, 2)

    async def prepare(self, n: int) -> None:
        pass

    async def take(self, n: int) -> list[tuple[int, Any]]:
        return [await self.next() for _ in range(n)]


def _cpu(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


async def _measure(job: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    from tokenbench import client as tc
    from tokenbench.loadgen import ClientWatch, run_phase
    from tokenbench.offered_load import Level

    root, c, n_req, out, tag, workers = job["root"], job["streams"], job["requests"], job["out"], job["tag"], \
        job["workers"]
    level = Level(concurrency=c)
    pids = [os.getpid()]
    try:  # this tree's: the aiohttp path's own module; an older tree's: the client's, or none
        from tokenbench.aiohttp_path import trace_config
    except ImportError:
        trace_config = getattr(tc, "trace_config", None)
    trace = [trace_config()] if trace_config is not None else []
    # the send path: the lean one (http1.py) or aiohttp's; a tree from before the lean path has aiohttp's only
    lean = {"lean": job["lean"]} if hasattr(tc.StreamClient, "close") else {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), trace_configs=trace) as session:
        client = tc.StreamClient(http=session, base_url=root + "/v1", model="emitter", stall_timeout_s=120, **lean)
        pool = None
        if workers == "auto":  # as a sweep's --workers auto: the cost of one send, measured here, sizes the pool
            from tokenbench.workers import ClientSpec, auto_workers, send_cost_us

            workers = auto_workers([level], None, await send_cost_us(ClientSpec.of(client, None)))
        if workers > 1:
            from tokenbench.workers import ClientSpec, WorkerPool

            pool = await WorkerPool.local(ClientSpec.of(client, None), workers)
            pids += [m.handle.proc.pid for m in pool.members]  # type: ignore[attr-defined]
        watch = ClientWatch()
        try:  # a warm-up wave opens the connections, as a sweep's warm-up does
            if pool is None:
                await run_phase(client, _Prompts(tag + "w", 4), level, "warmup", requests=c, duration_s=None)
            else:
                await pool.run_phase(level, "warmup", requests=c, duration_s=None, seed=0,
                                     prompts=_Prompts(tag + "w", 4), sink=[])
            cpu0, t0 = _cpu(pids), time.perf_counter()
            if pool is None:
                watch.start()
                res = await run_phase(client, _Prompts(tag, out), level, "measured", requests=n_req,
                                      duration_s=None, watch=watch)
                await watch.stop()
                records, lag = res.records, watch.report().get("loop_lag_ms_p99")
            else:
                merged = await pool.run_phase(level, "measured", requests=n_req, duration_s=None, seed=1,
                                              prompts=_Prompts(tag, out), sink=[])
                records, lag = merged.records, merged.client.get("loop_lag_ms_p99")
            wall, cpu = time.perf_counter() - t0, _cpu(pids) - cpu0
        finally:
            if pool is not None:
                await pool.close()
            if lean:
                await client.close()
        stamps = peers.emitter_stamps(job)
    ok = [r for r in records if r.ok and r.phase == "measured"]
    usable = min(len(os.sched_getaffinity(0)), len(pids))
    excess, deliver, queue, arrive, late = [], [], [], [], []
    for r in ok:
        key = f"{tag}-{r.index} x"
        if r.first_token_ns is None:
            continue
        excess.append((r.first_token_ns - r.sent_ns) / 1e6 - TTFT_S * 1000)
        if key in stamps:
            t_recv, t_first = stamps[key][0], stamps[key][1]
            deliver.append((r.first_token_ns - t_first) / 1e6)
            arrive.append((t_recv - r.sent_ns) / 1e6)  # the send, the kernel, the emitter's queue of requests
            late.append((t_first - t_recv) / 1e6 - (TTFT_S * 1000 if job["paced"] else 0))  # its sleep's overshoot
        if getattr(r, "written_ns", None):
            queue.append((r.written_ns - r.sent_ns) / 1e6)
    return {"ok": len(ok), "failed": len([r for r in records if r.phase == "measured"]) - len(ok), "workers": workers,
            "chunks_per_s": sum(len(r.chunk_ns) for r in ok) / wall, "wall_s": wall,
            # of the cores its processes can use: one process uses one core however many it may run on
            "client_cpu_pct": 100 * cpu / wall / usable, "client_cores": usable, "lag_p99": lag,
            "excess": excess, "deliver": deliver, "queue": queue, "arrive": arrive, "late": late}


def child(argv: list[str]) -> None:
    job = json.loads(argv[0])
    os.sched_setaffinity(0, set(job["cores"]))
    print(json.dumps(asyncio.run(_measure(job))))


# ---- the parent: emitters, versions, rows, tables ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    src: Path | None  # a tokenbench tree's src/ (None for a peer)
    workers: int | str = 1  # or "auto": the child picks them as a sweep's --workers auto does
    peer: str | None = None  # a key of peers.PEERS
    lean: bool = True  # this tree's send path: the lean one (http1.py), or aiohttp's


def _baseline_tree(ref: str) -> Path | None:
    """``ref``'s src/ in a temporary directory (git archive; nothing in this checkout changes), or None."""
    tmp = Path(tempfile.mkdtemp(prefix="tokenbench-baseline-"))
    try:
        data = subprocess.run(["git", "-C", str(HERE), "archive", "--format=tar", ref, "src"], check=True,
                              capture_output=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        print(f"baseline {ref}: not available here ({e}); its column is left out", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    with tarfile.open(fileobj=__import__("io").BytesIO(data)) as t:
        t.extractall(tmp, filter="data")
    return tmp / "src"


def _path(src: Path) -> str:
    """PYTHONPATH for a child: ``src`` first, then whatever the caller had on it (packages installed beside)."""
    return os.pathsep.join([str(src), *filter(None, [os.environ.get("PYTHONPATH")])])


def _run_child(src: Path, job: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": _path(src)}
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)], env=env, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"child failed: {p.stderr.strip().splitlines()[-1:]}")
    out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return out


def _run_tool(tool: Tool, job: dict[str, Any], emitter_pids: list[int]) -> dict[str, Any]:
    import psutil

    ems = [psutil.Process(pid) for pid in emitter_pids]
    e0, t0 = sum(sum(em.cpu_times()[:2]) for em in ems), time.perf_counter()
    if tool.peer is not None:
        out = peers.measure(tool.peer, job)
    else:
        assert tool.src is not None
        out = _run_child(tool.src, job)
    # the emitters' CPU over the whole run (start-up included), per emitter core: a lower bound of their share
    # during the level
    spent = sum(sum(em.cpu_times()[:2]) for em in ems) - e0
    out["emitter_cpu_pct"] = 100 * spent / (time.perf_counter() - t0) / len(ems)
    return out


def _pct(vals: list[float], q: float) -> float:
    return percentile(sorted(vals), q)  # tokenbench's one definition (linear, as numpy and vLLM)


def _summary(reps: list[dict[str, Any]]) -> dict[str, Any]:
    def med(f: Any) -> float | None:
        vals = [f(r) for r in reps if f(r) is not None]
        return statistics.median(vals) if vals else None

    return {
        "ok": sum(r["ok"] for r in reps), "failed": sum(r["failed"] for r in reps),
        "picked": sorted({r["workers"] for r in reps if isinstance(r.get("workers"), int)}),
        "client_cores": max((r["client_cores"] for r in reps if r.get("client_cores")), default=None),
        "chunks_per_s": med(lambda r: r["chunks_per_s"]),
        **{f"excess_p{q}": med(lambda r, q=q: _pct(r["excess"], q) if r["excess"] else None) for q in (50, 90, 99)},
        "deliver_p99": med(lambda r: _pct(r["deliver"], 99) if r["deliver"] else None),
        "queue_p99": med(lambda r: _pct(r["queue"], 99) if r["queue"] else None),
        "arrive_p99": med(lambda r: _pct(r["arrive"], 99) if r.get("arrive") else None),
        "late_p99": med(lambda r: _pct(r["late"], 99) if r.get("late") else None),
        "client_cpu_pct": med(lambda r: r["client_cpu_pct"]), "emitter_cpu_pct": med(lambda r: r["emitter_cpu_pct"]),
        "lag_p99": med(lambda r: r["lag_p99"]),
    }


def _limit(s: dict[str, Any], client_cores: int) -> str:
    client_cores = s.get("client_cores") or client_cores
    if (s["client_cpu_pct"] or 0) >= 85:
        return f"client CPU ({client_cores} core{'s' if client_cores > 1 else ''})"
    if (s["emitter_cpu_pct"] or 0) >= 85:
        return "emitter CPU"
    return "schedule"


def _f(v: float | None, spec: str = ".1f") -> str:
    return "—" if v is None else format(v, spec)


def main() -> None:
    ap = argparse.ArgumentParser(description="client overhead: a table, not a test")
    ap.add_argument("--quick", action="store_true", help="fewer rows, one repeat (about 2 minutes)")
    ap.add_argument("--workers", default="1,2",
                    help="worker counts for this tree, e.g. 1,2 (default); 'auto' picks them as a sweep's "
                         "--workers auto does (the send cost measured in the measuring process)")
    ap.add_argument("--baseline", default=DEFAULT_BASELINE, help="git ref to compare with ('' for none)")
    ap.add_argument("--repeats", type=int, help="runs per cell, interleaved; the median is shown (default 3)")
    ap.add_argument("--peers", default=None,
                    help="peers to run beside, e.g. guidellm,aiperf,vllm ('' for none; default: those installed, "
                         "see benchmarks/peers.py install)")
    ap.add_argument("--paths", default="lean,aiohttp",
                    help="this tree's send paths, interleaved: lean (http1.py), aiohttp (default: both)")
    ap.add_argument("--paced", help="paced stream counts, e.g. 256 (default 1,64,256,512; --quick 1,64,256)")
    ap.add_argument("--burst", help="burst stream counts, e.g. 64 (default 64,512; --quick 64)")
    ap.add_argument("--emitter", choices=["aiohttp", "lean"], default="aiohttp",
                    help="the emitter's server: aiohttp's web server (default, as in earlier tables) or a bare asyncio "
                         "protocol (lean_emitter.LeanServer: about 70 µs less per request it takes in)")
    ap.add_argument("--emitters", type=int, default=1,
                    help="emitter processes, each on its own core, sharing one port (with --emitter lean): for more "
                         "streams than one core paces (default 1)")
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args()
    repeats = a.repeats or (1 if a.quick else 3)
    workers: list[int | str] = [w.strip() if w.strip() == "auto" else int(w) for w in a.workers.split(",")]
    cores = sorted(os.sched_getaffinity(0))
    if a.emitters < 1 or (a.emitters > 1 and a.emitter != "lean") or a.emitters >= max(len(cores), 2):
        raise SystemExit(f"--emitters {a.emitters}: give 1, or up to {len(cores) - 1} with --emitter lean "
                         "(the client needs a core of its own)")
    emitter_core, client_cores = ((cores[:a.emitters], cores[a.emitters:]) if len(cores) > 1 else (cores, cores))
    paths = [p.strip() for p in a.paths.split(",") if p.strip()]
    tools = [Tool(f"now{'' if path == 'lean' else ', aiohttp'}, {_workers_label(w)}", HERE / "src", w,
                  lean=path == "lean") for w in workers for path in paths]
    base = _baseline_tree(a.baseline) if a.baseline else None
    if base is not None:
        tools.insert(0, Tool(f"baseline {a.baseline}", base))
    tools += [Tool(peers.label(p), None, 1, p) for p in _peers(a.peers)]
    paced = _counts(a.paced, [1, 64, 256] if a.quick else [1, 64, 256, 512])
    burst = _counts(a.burst, [64] if a.quick else [64, 512])
    load0 = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for mode, streams_list, args in (("paced", paced, ["--ttft", str(TTFT_S), "--itl", str(ITL_S)]),
                                     ("burst", burst, ["--burst"])):
        for streams in streams_list:
            out = 64 if mode == "paced" else (2000 if streams <= 64 else 200)
            reps: dict[str, list[dict[str, Any]]] = {t.name: [] for t in tools}
            for rep in range(repeats):  # tools interleaved, each on a fresh emitter
                for tool in tools:
                    if isinstance(tool.workers, int) and tool.workers > streams:
                        continue
                    ems, root, stats = _start_emitters(args + (["--lean"] if a.emitter == "lean" else []),
                                                       emitter_core)
                    try:
                        job = {"root": root, "stats": stats, "streams": streams, "requests": max(3 * streams, 16),
                               "out": out, "tag": f"{mode}{streams}r{rep}", "workers": tool.workers,
                               "cores": client_cores, "paced": mode == "paced", "lean": tool.lean}
                        reps[tool.name].append(_run_tool(tool, job, [em.pid for em in ems]))
                    except RuntimeError as e:
                        if tool.peer is None:
                            raise
                        print(f"  {mode} {streams} {tool.name}: failed: {e}", file=sys.stderr)
                    finally:
                        for em in ems:
                            em.kill()
                            em.wait()
            for tool in tools:
                if reps[tool.name]:
                    rows.append({"mode": mode, "streams": streams, "tool": tool.name, "workers": tool.workers,
                                 "peer": tool.peer, "offered": streams / ITL_S if mode == "paced" else None,
                                 **_summary(reps[tool.name])})
                    print(f"  {mode} {streams} {tool.name}: {rows[-1]['chunks_per_s']:,.0f} chunks/s",
                          file=sys.stderr)
    peer_labels = [t.name for t in tools if t.peer is not None]
    print(_machine(load0, os.getloadavg()) + f"; emitter: {a.emitter}")
    _print(rows, len(client_cores), emitter_core, client_cores, repeats, a.baseline if base else None, peer_labels)
    _goals(rows, os.cpu_count() or 1)
    print(_auto_line(len(client_cores)))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    if base is not None:
        shutil.rmtree(base.parent, ignore_errors=True)


def _workers_label(w: int | str) -> str:
    return "auto workers" if w == "auto" else f"{w} worker{'s' if int(w) > 1 else ''}"


def _auto_line(cores: int) -> str:
    """What ``--workers auto`` would start on ``cores`` cores, from the send cost measured here on each path."""
    from tokenbench.client import StreamClient
    from tokenbench.offered_load import Level
    from tokenbench.workers import ClientSpec, auto_workers, send_cost_us

    parts = []
    for lean in (True, False):
        client = StreamClient(http=None, base_url="http://127.0.0.1:9/v1",  # type: ignore[arg-type]
                              model="emitter", lean=lean)
        us = asyncio.run(send_cost_us(ClientSpec.of(client, None)))
        if us is None:
            continue
        picks = ", ".join(f"{n:,} streams: {auto_workers([Level(concurrency=n)], cores, us)}"
                          for n in (64, 256, 512, 2048))
        parts.append(f"{'lean' if lean else 'aiohttp'} path {us:.0f} µs a send ({picks})")
    return f"--workers auto on {cores} client cores: " + "; ".join(parts)


def _counts(arg: str | None, default: list[int]) -> list[int]:
    return default if arg is None else [int(n) for n in arg.split(",") if n.strip()]


def _machine(load0: tuple[float, ...], load1: tuple[float, ...]) -> str:
    """The machine the table was measured on: its CPU, its cores, and how busy it was before and after."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"machine: {model}, {os.cpu_count()} cores; load average (1 min) {load0[0]:.2f} before, "
            f"{load1[0]:.2f} after")


#: The targets on the 2-core machine: TTFT excess p99 at 256 paced streams, ingest at 64 burst streams, one
#: worker.
GOAL_P99_MS = 5.0
GOAL_INGEST = 300_000
#: The targets on a machine of 8 or more cores (measured on a 16-core H100 host), with --workers auto: TTFT excess p99 at
#: paced stream counts.
MANY_CORES = 8
GOAL_AUTO_P99_MS = {512: 1.0, 2048: 5.0}


def _parts(r: dict[str, Any]) -> str:
    """Where a row's TTFT excess went, measured: the client's send queue, arrival at the emitter, the emitter's own
    lateness, delivery, and both sides' CPU."""
    return (f"send queue p99 {_f(r['queue_p99'], '.2f')} ms, arrival at the emitter p99 {_f(r.get('arrive_p99'))} "
            f"ms, emitter late p99 {_f(r.get('late_p99'))} ms, delivery p99 {_f(r['deliver_p99'])} ms, client CPU "
            f"{_f(r['client_cpu_pct'], '.0f')}%, emitter CPU {_f(r['emitter_cpu_pct'], '.0f')}%")


def _goals(rows: list[dict[str, Any]], machine_cores: int) -> None:
    for r in rows:
        if r.get("peer") is not None or r["tool"].startswith("baseline"):
            continue
        paced = r["mode"] == "paced" and r["excess_p99"] is not None
        if r["workers"] == "auto" and paced and r["streams"] in GOAL_AUTO_P99_MS:
            goal = GOAL_AUTO_P99_MS[r["streams"]]
            met = r["excess_p99"] <= goal
            where = "" if machine_cores >= MANY_CORES else f" (a goal for {MANY_CORES}+ cores; this machine has " \
                f"{machine_cores})"
            print(f"goal: TTFT excess p99 <= {goal:g} ms at {r['streams']:,} streams with --workers auto{where}, "
                  f"{r['tool']} ({'/'.join(map(str, r['picked']))} picked): {r['excess_p99']:.1f} ms, "
                  f"{'met' if met else 'not met'} ({_parts(r)})")
        if r["workers"] != 1:
            continue
        if paced and r["streams"] == 256:
            met = r["excess_p99"] <= GOAL_P99_MS
            print(f"goal: TTFT excess p99 <= {GOAL_P99_MS:g} ms at 256 streams, {r['tool']}: "
                  f"{r['excess_p99']:.1f} ms, {'met' if met else 'not met'} ({_parts(r)})")
        if r["mode"] == "burst" and r["streams"] == 64:
            met = r["chunks_per_s"] >= GOAL_INGEST
            print(f"goal: ingest >= {GOAL_INGEST:,} chunks/s on one core at 64 burst streams, {r['tool']}: "
                  f"{r['chunks_per_s']:,.0f}, {'met' if met else 'not met'} ({_f(_per_cpu(r, 1), ',.0f')} per client "
                  f"CPU-second; client CPU "
                  f"{_f(r['client_cpu_pct'], '.0f')}%, emitter CPU {_f(r['emitter_cpu_pct'], '.0f')}%)")


def _peers(arg: str | None) -> list[str]:
    """The peers to run: ``--peers`` (comma-separated; '' for none), else every installed one."""
    if arg is None:
        return peers.installed()
    names = [n.strip() for n in arg.split(",") if n.strip()]
    chosen = []
    for n in names:
        if n not in peers.PEERS:
            raise SystemExit(f"unknown peer '{n}': choose from {', '.join(peers.PEERS)}")
        if peers.version(n) is None:
            print(f"peer {n}: not installed (python benchmarks/peers.py install {n}); its rows are left out",
                  file=sys.stderr)
        else:
            chosen.append(n)
    return chosen


def _start_emitters(args: list[str], cores: list[int]) -> tuple[list[subprocess.Popen[bytes]], str, list[str]]:
    """One emitter per core in ``cores`` (several share one port: ``--reuse-port``, each also on a port of its own
    for its stamps), each pinned to its core; the processes, the shared root URL, and the roots to read stamps from."""
    from tokenbench.emitter import answers
    from tokenbench.engines.launch import free_port

    port = free_port()
    root = f"http://127.0.0.1:{port}"
    own = [free_port() for _ in cores] if len(cores) > 1 else []
    env = {**os.environ, "PYTHONPATH": _path(HERE / "src")}
    ems = []
    for i, core in enumerate(cores):
        extra = ["--reuse-port", "--own-port", str(own[i])] if own else []
        ems.append(subprocess.Popen([sys.executable, "-m", "tokenbench.emitter", "--port", str(port), *args, *extra],
                                    env=env))
        os.sched_setaffinity(ems[-1].pid, {core})
    stats = [f"http://127.0.0.1:{p}" for p in own] or [root]
    if not all(answers(url) for url in stats):
        for em in ems:
            em.kill()
        raise RuntimeError("the emitter did not start")
    return ems, root, stats


def _per_cpu(r: dict[str, Any], n_client: int) -> float | None:
    """Chunks ingested per second of the client's CPU: what one core would take in were the client never idle
    waiting for the emitter (a peer's CPU is sampled, so only this tree's rows have it)."""
    pct = r.get("client_cpu_pct")
    cores = r.get("client_cores") or n_client
    return r["chunks_per_s"] / (pct * cores / 100) if pct and r.get("peer") is None else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _print(rows: list[dict[str, Any]], n_client: int, emitter_core: list[int], client_cores: list[int],
           repeats: int, baseline: str | None, peer_labels: list[str]) -> None:
    print(f"client overhead, python {sys.version.split()[0]}: emitter{'s' if len(emitter_core) > 1 else ''} on "
          f"core{'s' if len(emitter_core) > 1 else ''} {emitter_core}, client on cores "
          f"{client_cores}; median of {repeats}; schedule TTFT {TTFT_S * 1000:.0f} ms, a chunk every "
          f"{ITL_S * 1000:.0f} ms per stream (paced)")
    print("x baseline: " + (f"against {baseline}" if baseline else "the lean path against the aiohttp path"))
    head = ["mode", "streams", "client", "ok/failed", "offered chunks/s", "ingested chunks/s",
            "chunks per client CPU-s", "x baseline",
            "TTFT excess p50/p90/p99 ms", "x baseline p99", "delivery p99 ms", "send queue p99 ms",
            "arrival p99 ms", "emitter late p99 ms", "client CPU %",
            "emitter CPU %", "limit", *(f"x {p}: ingest / p99" for p in peer_labels)]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    # "x baseline": against the git ref's row where there is one, else against this tree's aiohttp path at as many
    # workers (the old send path, interleaved with the new in the same run)
    base = {(r["mode"], r["streams"]): r for r in rows if r["tool"].startswith("baseline")}
    old_path = {(r["mode"], r["streams"], r["workers"]): r for r in rows if ", aiohttp," in r["tool"]}
    by_tool = {(r["mode"], r["streams"], r["tool"]): r for r in rows}
    for r in rows:
        b = base.get((r["mode"], r["streams"])) or old_path.get((r["mode"], r["streams"], r["workers"]))
        is_base = r["tool"].startswith("baseline") or r.get("peer") is not None or r is b  # no "x baseline" here
        ratio = r["chunks_per_s"] / b["chunks_per_s"] if b and not is_base and b["chunks_per_s"] else None
        p99 = (r["excess_p99"] / b["excess_p99"] if b and not is_base and r["excess_p99"] is not None
               and b["excess_p99"] else None)
        paced = r["mode"] == "paced"
        vs_peer = []  # tokenbench with one worker against each peer, on this row only
        for p in peer_labels:
            q = by_tool.get((r["mode"], r["streams"], p))
            if r["tool"] != "now, 1 worker" or q is None:
                vs_peer.append("")
                continue
            ingest = _ratio(r["chunks_per_s"], q["chunks_per_s"])
            vs_peer.append(f"{_f(ingest, '.2f')} / {_f(_ratio(r['excess_p99'], q['excess_p99']), '.2f')}"
                           if paced else _f(ingest, ".2f"))
        print("| " + " | ".join([
            r["mode"], str(r["streams"]),
            r["tool"] + (f" ({'/'.join(map(str, r['picked']))})" if r["workers"] == "auto" and r.get("picked") else ""),
            f"{r['ok']}/{r['failed']}",
            f"{r['offered']:,.0f}" if r["offered"] else "all at once", f"{r['chunks_per_s']:,.0f}",
            _f(_per_cpu(r, n_client), ",.0f"), _f(ratio, ".2f"),
            (f"{_f(r['excess_p50'])} / {_f(r['excess_p90'])} / {_f(r['excess_p99'])}" if paced else "—"),
            _f(p99, ".2f") if paced else "—", _f(r["deliver_p99"]), _f(r["queue_p99"]),
            _f(r.get("arrive_p99")) if paced else "—", _f(r.get("late_p99")) if paced else "—",
            _f(r["client_cpu_pct"], ".0f"), _f(r["emitter_cpu_pct"], ".0f"), _limit(r, n_client), *vs_peer,
        ]) + " |")
    if peer_labels:
        print(f"peers ({', '.join(peer_labels)}): each through its own CLI and per-request results file, a first "
              "wave of `streams` requests not counted; ingest over the measured requests' own window; TTFT as the "
              "peer reports it; client CPU sampled over all its processes (benchmarks/peers.py).")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
