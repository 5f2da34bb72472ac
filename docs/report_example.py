"""Make the example report that docs/report.png and docs/report-plots.png show.

    .venv/bin/python docs/report_example.py [OUT_DIR]

Runs, all offline: a real sweep against the project's deterministic emitter (a batching server: 20 ms per
token per stream, 80 ms to the first token), priced at EUR 1.79/hour; a hand-made single-stream box
(the shape of llama.cpp on a mini PC: one stream at ~60 tok/s, requests queue) priced at EUR 0.25/hour,
labelled as a fixture; a prediction for an H100; and the llama-bench sample file from tests/data for the
depth plots. Then `tokenbench report` writes the HTML, and headless Chromium takes the screenshots.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter, EmitterConfig
from tokenbench.distribution import Distribution
from tokenbench.levels import ServingLevel
from tokenbench.store import Store

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 2, 4, 8, 16)


def single_stream(c: int) -> ServingLevel:
    """One stream at ~60 tok/s: requests wait their turn, so TTFT grows with the queue."""
    tps = 60.0 - c * 0.1
    wait = 45.0 + 530.0 * (c - 1)  # a request waits for those ahead of it: 32 tokens each at 60 tok/s
    return ServingLevel(concurrency=c, test="serve", completed=32, output_throughput_tps=tps,
                        ttft_ms=Distribution(n=32, p50=wait, p99=wait * 1.1 + 20),
                        tpot_ms=Distribution(n=32, p50=1000 / 62), input_tokens_mean=64.0, output_tokens_mean=32.0)


def build(out: Path) -> Path:
    db = out / "example.db"
    with BackgroundEmitter(EmitterConfig(ttft_s=0.08, itl_s=0.02)) as em:
        assert main(["sweep", "--url", em.url, "--input-len", "64", "--output-len", "32", "--concurrency",
                     ",".join(map(str, LEVELS)), "--requests", "32", "--label", "gpu-box (emitter)",
                     "--price-per-hour", "1.79", "--currency", "EUR", "--db", str(db)]) == 0
    Store(db).save_run("fixture-mini-pc", "sweep", "mini-pc (fixture)", {
        "label": "mini-pc (fixture)", "model": "emitter", "engine": "llama.cpp", "engine_version": "b6000 (fixture)",
        "hardware": "a mini PC, one stream at a time", "price_per_hour": 0.25, "currency": "EUR", "guard": "off",
        "workload": {"input_len": 64, "output_len": 32}}, "measured", [single_stream(c) for c in LEVELS],
        "0", "2026", "2026")
    rc = main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3.6-27b", "--weights", "FP8",
                 "--concurrency", ",".join(map(str, LEVELS)), "--input-len", "64", "--output-len", "32",
                 "--save", "h100", "--db", str(db)])
    assert rc == 0, rc
    assert main(["import", str(ROOT / "tests" / "data" / "llama_bench.json"), "--label", "strix (llama-bench)",
                 "--db", str(db)]) == 0
    page = out / "report.html"
    assert main(["report", "mini-pc (fixture)", "gpu-box (emitter)", "h100", "strix (llama-bench)",
                 "--title", "tokenbench report: example", "--html", str(page), "--png", str(out / "png"),
                 "--db", str(db)]) == 0
    return page


def only(page: Path, section: str) -> Path:
    """A copy of the page that shows its header and one section (the screenshot of the plots)."""
    copy = page.with_name(f"{page.stem}-{section}.html")
    hide = "".join(f"section#{s} {{ display: none; }}" for s in ("sides", "comparison", "plots", "runs") if s != section)
    copy.write_text(page.read_text(encoding="utf-8").replace("</style>", hide + "</style>", 1), encoding="utf-8")
    return copy


def shoot(page: Path, png: Path, height: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        sys.exit("no Chromium to take the screenshot with")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--hide-scrollbars", "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}",
                        f"--window-size=1280,{height}", "--virtual-time-budget=20000", f"--screenshot={png}",
                        page.as_uri()], check=True, capture_output=True, timeout=180)


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="tokenbench-report-"))
    out.mkdir(parents=True, exist_ok=True)
    page = build(out)
    shoot(page, ROOT / "docs" / "report.png", 1900)
    shoot(only(page, "plots"), ROOT / "docs" / "report-plots.png", 1750)
    print(f"wrote {page} and docs/report.png, docs/report-plots.png")
