"""How long do `runs` and `show` take on a big results database?

Builds a database with one run of N levels (a llama-bench import of that size: 158,000 rows once made `runs`
take 22 s and `show` 290 s) beside a few small runs, then times the CLI commands in-process. A benchmark, not
a test: it prints a table.

    python benchmarks/store_scale.py [--levels 200000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

from tokenbench.cli import main
from tokenbench.levels import DepthLevel, ServingLevel
from tokenbench.store import Store


def build(path: Path, n: int) -> str:
    store = Store(path)
    levels = [DepthLevel(concurrency=1, test="tg128", depth=i, tg_tps=80.0, tg_tps_sd=0.4) for i in range(n)]
    store.save_run("big-run", "bench", "big", {"model": "m", "provenance": "imported"}, "imported", levels, "0",
                   "2026-01-01T00:00:00", "2026-01-01T00:00:00")
    for i in range(20):
        store.save_run(f"small-{i:02d}", "sweep", "small", {"model": "m"}, "measured",
                       [ServingLevel(concurrency=c) for c in (1, 4, 16)], "0", f"2026-01-02T00:00:{i:02d}",
                       "2026-01-02T00:01:00")
    store.close()
    return "big-run"


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    assert code == 0, argv
    return time.perf_counter() - t


def run(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        db = Path(d) / "r.db"
        t = time.perf_counter()
        big = build(db, n)
        print(f"built a database with {n:,} levels in one run, and 20 small runs: {time.perf_counter() - t:.1f} s")
        rows = [("runs", ["runs", "--db", str(db)]), ("show (a small run)", ["show", "small-03", "--db", str(db)]),
                ("show (the big run, first 200 levels)", ["show", big, "--db", str(db)]),
                ("show --json (every level)", ["show", big, "--db", str(db), "--json", str(Path(d) / "o.json")])]
        print(f"{'command':<40} {'seconds':>8}")
        for name, argv in rows:
            print(f"{name:<40} {timed(argv):>8.2f}")
        print(f"{'(the JSON written)':<40} {len(json.loads((Path(d) / 'o.json').read_text())['levels']):>8,} levels")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", type=int, default=200_000)
    run(ap.parse_args().levels)
