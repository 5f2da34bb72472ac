"""What a soak costs the client in memory (a benchmark, not a test): ``sweep --sessions --duration`` against the
deterministic emitter, in its own process, its resident memory (RSS) read every half second. The emitter (its own
process) answers each turn at once, 64 tokens, so the client runs as many turns a second as it can: far more than a
real server allows, so memory grows here as fast as it can.

It prints the RSS at the start of the level and at each tenth of the run, the turns finished, and what each turn
kept: the growth over the run divided by its turns. A client whose memory grew with the run's length, not its
load, keeps something per turn; the figure says how much.

    python benchmarks/soak_memory.py [SECONDS]     (default 60; about that long)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from tokenbench.emitter import BackgroundEmitter, EmitterConfig


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    with tempfile.TemporaryDirectory() as tmp, BackgroundEmitter(EmitterConfig()) as em:
        out = Path(tmp) / "soak.json"
        cmd = [sys.executable, "-m", "tokenbench", "sweep", "--url", em.url, "--sessions", "8", "--turns", "10",
               "--shared-prefix", "512", "--input-len", "128", "--tool-len", "128", "--output-len", "64",
               "--duration", f"{seconds:g}s", "--no-baseline", "--no-metrics", "--guard", "off", "--quiet",
               "--db", str(Path(tmp) / "r.db"), "--json", str(out)]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        ps = psutil.Process(proc.pid)
        samples: list[tuple[float, float]] = []
        t0 = time.monotonic()
        while proc.poll() is None:
            try:
                samples.append((time.monotonic() - t0, ps.memory_info().rss / 2**20))
            except psutil.Error:
                break
            time.sleep(0.5)
        if proc.wait() != 0:
            sys.exit(f"the soak failed: {proc.stderr.read().decode() if proc.stderr else ''}")
        level = json.loads(out.read_text())["levels"][0]
    turns = level["completed"]
    # the level starts after the check request and the warm-up: its start is where the RSS stops jumping
    start = next((t for t, _ in samples if t >= samples[-1][0] - seconds), 0.0)
    during = [(t - start, rss) for t, rss in samples if t >= start]
    print(f"soak of {seconds:g} s, 8 agents, 10-turn sessions, 64 tokens an answer: {turns:,} turns "
          f"({turns / seconds:,.0f} a second), {level['session']['sessions']:,} sessions")
    print("| time into the level (s) | client RSS (MiB) |")
    print("|---|---|")
    for tenth in range(11):
        at = seconds * tenth / 10
        rss = min(during, key=lambda p: abs(p[0] - at))[1]
        print(f"| {at:,.0f} | {rss:,.1f} |")
    grown = during[-1][1] - during[0][1]
    print(f"grew {grown:,.1f} MiB over {turns:,} turns: {grown * 1024 / max(turns, 1):,.2f} KiB a turn")


if __name__ == "__main__":
    main()
