"""What a soak costs the client in memory (a benchmark, not a test): ``sweep --sessions --duration`` against the
deterministic emitter, in its own process, its resident memory (RSS) read every half second. The emitter (its own
process) answers each turn at once, 64 tokens, so the client runs as many turns a second as it can: far more than a
real server allows, so memory grows here as fast as it can. ``--paced``: the emitter streams 128 tokens 2 ms apart
after 20 ms, each in a chunk of its own, as a real server streams them (each chunk's stamp is then a value of its
own).

It prints the RSS at the start of the level and at each tenth of the run, the turns finished, and what each turn
kept: the growth from the level's first tenth to its last divided by the turns between, and the same over its
second half, once the soak holds as many turns as it keeps (``sessions.KEEP_TURNS``: past them it keeps a sample
of its ended sessions and stores the rest); the summary and the store at the level's end are transient, and
shown by the last row. A client whose memory grew with the run's
length, not its load, keeps something per turn; the figure says how much.

``--where`` runs the same soak in this process under tracemalloc instead and prints where the memory that stayed
between a quarter and nine tenths of the run was allocated, per turn, by the line that allocated it.

    python benchmarks/soak_memory.py [SECONDS] [--paced] [--where]     (default 60 s; about that long)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import psutil

from tokenbench.cli import main as tokenbench
from tokenbench.emitter import BackgroundEmitter, EmitterConfig, EmitterProcess

PACED = EmitterConfig(ttft_s=0.02, itl_s=0.002)
PACED_ARGS = ("--ttft", "0.02", "--itl", "0.002")


def sweep_args(url: str, seconds: float, out_len: int, tmp: Path) -> list[str]:
    return ["sweep", "--url", url, "--sessions", "8", "--turns", "10", "--shared-prefix", "512", "--input-len", "128",
            "--tool-len", "128", "--output-len", str(out_len), "--duration", f"{seconds:g}s", "--no-baseline",
            "--no-metrics", "--guard", "off", "--quiet", "--db", str(tmp / "r.db"), "--json", str(tmp / "soak.json")]


def rss(seconds: float, paced: bool) -> None:
    out_len = 128 if paced else 64
    with tempfile.TemporaryDirectory() as tmp, BackgroundEmitter(PACED if paced else EmitterConfig()) as em:
        cmd = [sys.executable, "-m", "tokenbench", *sweep_args(em.url, seconds, out_len, Path(tmp))]
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
        level = json.loads((Path(tmp) / "soak.json").read_text())["levels"][0]
    turns = level["completed"]
    # the level starts after the check request and the warm-up: its start is where the RSS stops jumping
    start = next((t for t, _ in samples if t >= samples[-1][0] - seconds), 0.0)
    during = [(t - start, mib) for t, mib in samples if t >= start]

    def at(s: float) -> float:
        return min(during, key=lambda p: abs(p[0] - s))[1]

    print(f"soak of {seconds:g} s, 8 agents, 10-turn sessions, {out_len} tokens an answer"
          f"{' (paced)' if paced else ''}: {turns:,} turns ({turns / seconds:,.0f} a second), "
          f"{level['session']['sessions']:,} sessions, {level['session'].get('sampled_sessions') or 'all'} kept")
    print("| time into the level (s) | client RSS (MiB) |")
    print("|---|---|")
    for tenth in range(11):
        print(f"| {seconds * tenth / 10:,.0f} | {at(seconds * tenth / 10):,.1f} |")
    for since, share in ((0.1, 0.8), (0.5, 0.4)):  # the second half: past the turns a soak keeps (KEEP_TURNS)
        grown = at(seconds * 0.9) - at(seconds * since)
        print(f"grew {grown:,.1f} MiB from {since:.0%} of the level to 90%, over about {turns * share:,.0f} turns: "
              f"{grown * 1024 / max(turns * share, 1):,.2f} KiB a turn")


def where(seconds: float, paced: bool) -> None:
    out_len = 128 if paced else 64
    snaps: list[tracemalloc.Snapshot] = []

    def take() -> None:
        time.sleep(seconds * 0.25)
        snaps.append(tracemalloc.take_snapshot())
        time.sleep(seconds * 0.65)
        snaps.append(tracemalloc.take_snapshot())

    # the emitter in a process of its own, so that only the client's memory is traced
    with tempfile.TemporaryDirectory() as tmp, EmitterProcess(*(PACED_ARGS if paced else ())) as em:
        tracemalloc.start()
        threading.Thread(target=take, daemon=True).start()  # the level starts within a second of the command
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            code = tokenbench(sweep_args(em.url, seconds, out_len, Path(tmp)))
        tracemalloc.stop()
        turns = json.loads((Path(tmp) / "soak.json").read_text())["levels"][0]["completed"]
    if code != 0 or len(snaps) < 2:
        sys.exit(f"the soak failed (exit {code})")
    between = turns * 0.65  # turns finish at an even pace through a soak's level
    stats = snaps[1].compare_to(snaps[0], "lineno")
    grown = sum(s.size_diff for s in stats)
    print(f"soak of {seconds:g} s under tracemalloc, {out_len} tokens an answer{' (paced)' if paced else ''}: "
          f"{turns:,} turns; {grown / 2**20:,.2f} MiB stayed over about {between:,.0f} turns, "
          f"{grown / 1024 / between:,.2f} KiB a turn")
    print("| allocated at | bytes a turn |")
    print("|---|---|")
    for s in stats[:8]:
        frame = s.traceback[0]
        print(f"| {Path(frame.filename).name}:{frame.lineno} | {s.size_diff / between:,.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("seconds", nargs="?", type=float, default=60.0)
    ap.add_argument("--paced", action="store_true", help="128 tokens 2 ms apart, each in a chunk of its own")
    ap.add_argument("--where", action="store_true", help="where the memory that stayed was allocated")
    a = ap.parse_args()
    (where if a.where else rss)(a.seconds, a.paced)


if __name__ == "__main__":
    main()
