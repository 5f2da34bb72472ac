"""What ``tokenbench record`` adds to the TTFT an agent sees: the same streamed chat requests sent to an emitter
directly and through the recording proxy, side by side in one run.

The emitter (``python -m tokenbench.emitter --lean``: a bare asyncio server, so its own noise is small) answers
each request with its first token ``--ttft`` after it arrives, then a token every 2 ms. The proxy is the command a
user runs (``tokenbench record --upstream EMITTER --port 0 --out LOG``), its own process with its log writer beside
it, recording everything. This process is the client (aiohttp): TTFT is from just before its send to the arrival of
the first token's chunk. Each cell alternates waves of ``--streams`` concurrent requests direct and through the
proxy (which goes first rotates too), so every path sees the same machine; the table gives TTFT p50 and p99 of
each path, what the proxy added (proxied minus direct, at each percentile), and the ratio. ``--loops`` runs one
proxy per event loop side by side: uvloop's (the command's default where uvloop is installed) and asyncio's (the
same command with uvloop hidden from it). Under it, the floor: a
bare TCP relay (asyncio streams, no HTTP, nothing recorded) in the proxy's place, what any proxy process costs on
the machine. Prompts are ``--prompt``
kilobytes of chat message (1 KB, and 256 KB as a long agent's context re-sent every turn). On a machine of 4 cores
or more the emitter, the proxy, its writer and the client each get a core of their own; on fewer they share.

    python benchmarks/record_overhead.py [--requests 400] [--streams 1,8,32] [--prompt 1,256] [--ttft 0.02]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from tokenbench.distribution import percentile

SRC = Path(__file__).resolve().parents[1] / "src"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(proc: subprocess.Popen[Any] | None, cores: set[int]) -> None:
    if hasattr(os, "sched_setaffinity") and cores:
        os.sched_setaffinity(proc.pid if proc else 0, cores)


#: A bare TCP relay (asyncio streams, no HTTP, nothing recorded): what any proxy process costs on this machine.
RELAY = """
import asyncio, sys
async def pipe(r, w):
    try:
        while (d := await r.read(1 << 16)):
            w.write(d)
    finally:
        w.close()
async def handle(cr, cw):
    ur, uw = await asyncio.open_connection("127.0.0.1", int(sys.argv[1]))
    await asyncio.gather(pipe(cr, uw), pipe(ur, cw))
async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[2]))
    await server.serve_forever()
asyncio.run(main())
"""


def _relay(direct: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    proc = subprocess.Popen([sys.executable, "-c", RELAY, direct.rsplit(":", 1)[1], str(port)])
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), 0.1):
                break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def _emitter(ttft: float, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    emitter = subprocess.Popen([sys.executable, "-m", "tokenbench.emitter", "--lean", "--port", str(port),
                                "--ttft", str(ttft), "--itl", "0.002"], env=env)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), 0.1):
                break
        except OSError:
            time.sleep(0.05)
    return emitter, f"http://127.0.0.1:{port}"


#: The proxy on asyncio's own loop: the command as a user runs it, with uvloop hidden from it.
NO_UVLOOP = "import sys; sys.modules['uvloop'] = None; from tokenbench.cli import entrypoint; entrypoint()"


def _proxy(direct: str, log: Path, loop: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """``tokenbench record`` in front of the emitter, on uvloop's event loop or asyncio's."""
    argv = ["record", "--upstream", direct, "--port", "0", "--out", str(log)]
    cmd = [sys.executable, "-m", "tokenbench"] if loop == "uvloop" else [sys.executable, "-c", NO_UVLOOP]
    proxy = subprocess.Popen([*cmd, *argv], stdout=subprocess.PIPE, text=True, env=env)
    assert proxy.stdout is not None
    line = "".join(proxy.stdout.readline() for _ in range(2))  # the heading, then the OpenAI address
    m = re.search(r"OPENAI_BASE_URL=(http://\S+)/v1", line)
    if not m:
        proxy.kill()
        raise SystemExit(f"the proxy ({loop}) did not start: {line!r}")
    return proxy, m.group(1)


async def _one(s: aiohttp.ClientSession, root: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with s.post(root + "/v1/chat/completions", data=body,
                      headers={"Content-Type": "application/json"}) as r:
        got = b""
        ttft = None
        async for chunk in r.content.iter_any():
            if ttft is None:
                got += chunk
                if b"w0" in got:
                    ttft = time.perf_counter() - t0
        assert r.status == 200 and ttft is not None
    return ttft * 1000


async def _cell(paths: dict[str, str], streams: int, prompt_kb: int, requests: int) -> dict[str, list[float]]:
    """TTFTs per path (direct, and each proxy), the paths taking turns wave by wave in a rotating order."""
    words = " ".join(f"word{i % 997}" for i in range(prompt_kb * 1024 // 8))[: prompt_kb * 1024]
    out: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        waves = max(2, requests // streams)
        for w in range(waves + 2):  # two warm-up waves open the connections
            for path in names[w % len(names):] + names[:w % len(names)]:
                bodies = [json.dumps({"model": "emitter", "stream": True, "max_tokens": 4, "messages": [
                    {"role": "user", "content": f"{path} {w} {i} {words}"}]}).encode() for i in range(streams)]
                got = await asyncio.gather(*(_one(s, paths[path], b) for b in bodies))
                if w >= 2:
                    out[path].extend(got)
    return out


def _row(streams: int, prompt_kb: int, loop: str, cell: dict[str, list[float]]) -> list[str]:
    d, p = sorted(cell["direct"]), sorted(cell[loop])
    d50, d99, p50, p99 = percentile(d, 50), percentile(d, 99), percentile(p, 50), percentile(p, 99)
    return [str(streams), f"{prompt_kb} KB", loop, str(len(d)), f"{d50:.2f}", f"{p50:.2f}",
            f"{(p50 - d50) * 1000:+.0f}", f"{d99:.2f}", f"{p99:.2f}", f"{(p99 - d99) * 1000:+.0f}", f"{p99 / d99:.3f}"]


def _table(rows: list[list[str]]) -> str:
    head = ["streams", "prompt", "loop", "requests", "p50 direct ms", "p50 proxied ms", "p50 added µs", "p99 direct ms",
            "p99 proxied ms", "p99 added µs", "p99 ratio"]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400, help="TTFT samples per path and cell")
    ap.add_argument("--streams", default="1,8,32", help="concurrent requests per wave")
    ap.add_argument("--prompt", default="1,256", help="prompt sizes, KB")
    ap.add_argument("--ttft", type=float, default=0.02, help="the emitter's TTFT, seconds")
    ap.add_argument("--loops", default="uvloop,asyncio",
                    help="the proxy's event loops, side by side (asyncio: the command with uvloop hidden)")
    a = ap.parse_args()
    loops = a.loops.split(",")
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proxies: dict[str, subprocess.Popen[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        emitter, direct = _emitter(a.ttft, env)
        paths = {"direct": direct}
        try:
            for loop in loops:
                proxies[loop], paths[loop] = _proxy(direct, Path(tmp) / f"{loop}.jsonl", loop, env)
            pinned = len(cores) >= 4
            if pinned:  # emitter, proxies, client: a core each; the proxies' writers on the rest
                _pin(emitter, {cores[0]})
                for proxy in proxies.values():
                    _pin(proxy, {cores[1]})
                _pin(None, {cores[2]})
            load = os.getloadavg()[0]
            rows = []
            for kb in [int(x) for x in a.prompt.split(",")]:
                for streams in [int(x) for x in a.streams.split(",")]:
                    cell = asyncio.run(_cell(paths, streams, kb, a.requests))
                    rows += [_row(streams, kb, loop, cell) for loop in loops]
                    print(f"  {streams} streams, {kb} KB: done", file=sys.stderr)
            relay, relayed = _relay(direct)
            _pin(relay, {cores[1]} if pinned else set())
            floor = asyncio.run(_cell({"direct": direct, "relay": relayed}, 1, 1, a.requests))
            relay.kill()
            load_after = os.getloadavg()[0]
        finally:
            summaries = {}
            for loop, proxy in proxies.items():
                proxy.send_signal(signal.SIGINT)
                summaries[loop] = proxy.communicate(timeout=120)[0].strip()
            emitter.kill()
            emitter.wait()
        recorded = {loop: (Path(tmp) / f"{loop}.jsonl").read_text().count("\n") - 1 for loop in loops}
    print(f"TTFT through `tokenbench record` (recording every request) against direct, emitter TTFT "
          f"{a.ttft * 1000:g} ms; {len(cores)} cores, {'each process pinned to its own' if pinned else 'shared'}; "
          f"load average {load:.2f} before, {load_after:.2f} after.")
    print(_table(rows))
    for loop in loops:
        said = summaries[loop].splitlines()[-1] if summaries[loop] else "?"
        print(f"The proxy on {loop} recorded {recorded[loop]} requests: {said}")
    f = _row(1, 1, "relay", floor)
    print(f"The floor, a bare TCP relay in its place (asyncio, no HTTP, nothing recorded), 1 stream, 1 KB: "
          f"{f[6]} µs at p50, {f[9]} µs at p99.")


if __name__ == "__main__":
    main()
