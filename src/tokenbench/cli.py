"""Command line: parses, builds a typed config, calls one library function, prints.

``main(argv)`` returns the exit code so tests call it in-process; only ``entrypoint()`` reads sys.argv.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import __version__
from .errors import TokenbenchError, UsageError
from .metrics import SLO, LevelSummary, parse_duration_ms
from .output import describe_run, format_sweep_markdown, print_sweep
from .records import RequestRecord
from .servers import normalize_base_url
from .store import Store
from .sweep import RunResult, SweepConfig, load_result, redact_command, run_sweep
from .workload import resolve_shape

#: The embedded engine's default sweep: small enough to finish in about a minute on a 2-core laptop.
EMBEDDED_DEFAULTS = {"concurrency": "1,2,4,8", "requests": 16, "input_len": 128, "output_len": 64}


def _int_list(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a comma-separated list of integers, e.g. 1,4,8") from None
    if not vals or any(v < 1 for v in vals):
        raise UsageError(f"{what} '{text}' needs positive integers, e.g. 1,4,8")
    return vals


def _float_list(text: str, what: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a comma-separated list of numbers, e.g. 0.5,1,2") from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{what} '{text}' needs positive numbers, e.g. 0.5,1,2")
    return vals


def _seconds(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        v = parse_duration_ms(text) / 1000.0
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a duration: write e.g. 30s, 500ms or 2m") from None
    if v <= 0:
        raise UsageError(f"{what} must be positive")
    return v


class RichReporter:
    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self.progress: Progress | None = None
        self.task: Any = None
        self.run_id: str | None = None

    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None:
        if not self.enabled:
            return
        if self.progress is None:
            self.progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=self.console,
            )
            self.progress.start()
        self.task = self.progress.add_task(description, total=total, info="")

    def request_done(self, record: RequestRecord) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task)

    def level_end(self, summary: LevelSummary) -> None:
        if self.progress is not None and self.task is not None:
            info = f"{summary.output_throughput_tps:.1f} tok/s, TTFT p50 {summary.ttft_ms.p50 or 0:.0f} ms"
            if summary.failed:
                info += f", {summary.failed} failed"
            self.progress.update(self.task, info=info)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, style="dim", markup=False, highlight=False)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="results database (default: $TOKENBENCH_DB or the user data dir)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tokenbench", description="Measure LLM serving stacks you can trust.")
    ap.add_argument("--version", action="version", version=f"tokenbench {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("sweep", help="load-test an OpenAI-compatible endpoint over concurrency or rate levels")
    g = s.add_argument_group("endpoint")
    g.add_argument("--url", help="OpenAI-compatible base URL (…/v1); omitted: start the embedded engine")
    g.add_argument("--model", help="served model name (default: the first the server lists)")
    g.add_argument("--api", choices=["completions", "chat"], default="completions",
                   help="/v1/completions (exact prompt lengths, default) or /v1/chat/completions")
    g.add_argument("--api-key", help="bearer token (default: $OPENAI_API_KEY); used, never stored")
    g.add_argument("--engine", choices=["transformers", "llamacpp"], default="transformers",
                   help="embedded engine when no --url: Transformers continuous batching (default) or llama.cpp")
    g.add_argument("--tokenizer", help="tokenizer.json or Hugging Face directory of the served model")
    g = s.add_argument_group("workload")
    g.add_argument("--shape", help="agentic (4096/512), short (128/128), pp512, tg128")
    g.add_argument("--input-len", type=int, help="prompt tokens per request")
    g.add_argument("--output-len", type=int, help="output tokens per request (fixed where the server allows)")
    g.add_argument("--prefix-len", type=int, default=0, help="tokens shared by all prompts (default 0: all unique)")
    g.add_argument("--no-fixed-output", action="store_true", help="let the model stop at EOS")
    g.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    g.add_argument("--extra-body", help="JSON object merged into every request body")
    g.add_argument("--seed", type=int, help="workload seed (default: random, recorded)")
    g = s.add_argument_group("load")
    g.add_argument("--concurrency", help="closed-loop levels, e.g. 1,4,8,16,32")
    g.add_argument("--rate", help="open-loop levels in requests/s, e.g. 0.5,1,2 (instead of --concurrency)")
    g.add_argument("--arrival", choices=["poisson", "constant"], default="poisson")
    g.add_argument("--max-concurrency", type=int, help="open loop: cap on requests in flight")
    g.add_argument("--requests", type=int, help="measured requests per level (default 32)")
    g.add_argument("--duration", help="measure each level for this long instead, e.g. 60s")
    g.add_argument("--warmup", type=int, help="uncounted full-length requests per level (default: one per slot)")
    g.add_argument("--repetitions", type=int, default=1, help="repeat each level; report median and CV")
    g.add_argument("--timeout", default="600s", help="per-request timeout (default 600s)")
    g.add_argument("--stall-timeout", default="60s", help="fail a request after this long without a byte")
    g.add_argument("--slo", help="e.g. ttft_p99=2s,tpot=50ms: goodput and pass/fail per level")
    g = s.add_argument_group("output")
    g.add_argument("--label", help="host label (default: this hostname, or embedded-ENGINE)")
    g.add_argument("--price-per-hour", type=float, help="box price for cost per million output tokens")
    g.add_argument("--currency", default="USD")
    g.add_argument("--json", help="write the run to this JSON file (DESIGN.md's result contract)")
    g.add_argument("--format", choices=["table", "markdown"], default="table")
    g.add_argument("--quiet", action="store_true", help="no progress bars")
    g = s.add_argument_group("clean bench")
    g.add_argument("--guard", choices=["strict", "warn", "off"], default="warn",
                   help="strict: refuse to start, and stop before a level, on a dirty bench; warn: record; off")
    g.add_argument("--guard-config", help="guard thresholds TOML (default: packaged, then the user config dir)")
    g.add_argument("--no-metrics", action="store_true", help="do not sample the server's /metrics")
    _add_db(s)

    gd = sub.add_parser("guard", help="check the machine is clean enough to measure (exit 1 if not)")
    gd.add_argument("--guard-config", help="thresholds TOML")
    gd.add_argument("--url", help="the server to be measured, if on this machine (not counted against the bench)")
    gd.add_argument("--root", default="/", help=argparse.SUPPRESS)
    gd.add_argument("--json", help="write the snapshot to this JSON file")

    r = sub.add_parser("runs", help="list saved runs")
    r.add_argument("--limit", type=int, default=30)
    _add_db(r)

    dp = sub.add_parser("depth", help="llama-bench style pp/tg at context depths, over HTTP")
    dp.add_argument("--url", help="OpenAI-compatible base URL; omitted: the embedded llama.cpp engine")
    dp.add_argument("--model")
    dp.add_argument("--api-key")
    dp.add_argument("--tokenizer")
    dp.add_argument("--depths", help="tokens of context, e.g. 0,8k,32k,65k (embedded default 0,1k,4k)")
    dp.add_argument("--pp", type=int, default=512, help="prompt tokens processed on top of the depth")
    dp.add_argument("--tg", type=int, default=128, help="tokens generated on top of the depth")
    dp.add_argument("--repetitions", type=int, default=3)
    dp.add_argument("--label")
    dp.add_argument("--seed", type=int)
    dp.add_argument("--json", help="write the run to this JSON file")
    dp.add_argument("--llama-bench", metavar="PATH", help="drive a local llama-bench binary instead, and import its JSON")
    dp.add_argument("--model-file", help="with --llama-bench: the GGUF to bench")
    dp.add_argument("--format", choices=["table", "markdown"], default="table")
    dp.add_argument("--guard", choices=["strict", "warn", "off"], default="warn")
    dp.add_argument("--guard-config")
    dp.add_argument("--no-metrics", action="store_true")
    _add_db(dp)

    cs = sub.add_parser("coldstart", help="time a server from start to healthy and to its first token, repeatedly")
    cs.add_argument("--cmd", required=True, help="the server's command line; {port} is replaced by --url's port")
    cs.add_argument("--url", required=True, help="its OpenAI-compatible base URL")
    cs.add_argument("--health", help="the URL that answers 200 when it is up (default: URL/models)")
    cs.add_argument("--model")
    cs.add_argument("--repeat", type=int, default=3, help="boots; the first is the cold one")
    cs.add_argument("--timeout", default="600s")
    cs.add_argument("--label")
    cs.add_argument("--json", help="write the boots to this JSON file")
    cs.add_argument("--log", help="append the server's output to this file")
    _add_db(cs)

    hw = sub.add_parser("hardware", help="list the hardware catalog, with sources")
    hw.add_argument("--format", choices=["table", "markdown"], default="table")
    md = sub.add_parser("models", help="list the model catalog, with sources")
    md.add_argument("--format", choices=["table", "markdown"], default="table")

    fp = sub.add_parser("fit", help="does a model and its KV cache fit a box? largest context and concurrency")
    _add_setup(fp, default_engine="llama.cpp")
    fp.add_argument("--context", default="8192", help="tokens per sequence, e.g. 65536 or 64k")
    fp.add_argument("--concurrency", type=int, default=1, help="sequences held at once")

    pp = sub.add_parser("predict", help="predicted speed (roofline ceiling and calibrated estimate)")
    _add_setup(pp, default_engine="vllm", required=False)
    pp.add_argument("--input-len", type=int, default=4096)
    pp.add_argument("--output-len", type=int, default=512)
    pp.add_argument("--concurrency", default="1", help="serving levels, e.g. 1,4,8,16,32")
    pp.add_argument("--test", choices=["tg128", "pp512", "depth"], help="llama-bench style tests at --depth")
    pp.add_argument("--depth", default="0", help="tokens already in the cache, e.g. 0,8k,32k,65536")
    pp.add_argument("--spec-tokens", type=int, help="speculative decoding / MTP: drafted tokens per step")
    pp.add_argument("--acceptance", type=float, help="per-token acceptance rate (0..1)")
    pp.add_argument("--acceptance-length", type=float, help="mean acceptance length (vLLM's τ)")
    pp.add_argument("--draft-cost", type=float, help="draft cost per token relative to the target (default: MTP 1/layers)")
    pp.add_argument("--against", help="predict every row of a file in the published.csv layout")
    pp.add_argument("--calibration", help="efficiency TOML to use instead of the packaged one")
    pp.add_argument("--json", help="write the predictions to this JSON file")
    pp.add_argument("--save", metavar="LABEL", help="store the predictions as a run (provenance 'predicted')")
    _add_db(pp)
    pp.add_argument("--format", choices=["table", "markdown"], default="table")

    cp = sub.add_parser("calibrate", help="fit per-backend efficiencies on published measurements")
    cp.add_argument("file", help="measurements in the published.csv layout")
    cp.add_argument("--out", required=True, help="efficiency TOML to write")

    c = sub.add_parser("compare", help="two runs side by side: ratios, winners, crossovers, effective serving")
    c.add_argument("a", help="run id, id prefix or label")
    c.add_argument("b", help="run id, id prefix or label")
    c.add_argument("--agents", type=int, default=16, help="effective-serving line: this many agents ... (default 16)")
    c.add_argument("--tokens", type=int, default=200, help="... each asking for this many tokens (default 200)")
    c.add_argument("--format", choices=["table", "markdown"], default="table")
    _add_db(c)

    co = sub.add_parser("cost", help="price per million output tokens at each operating point")
    co.add_argument("run", nargs="?", help="run id, id prefix or label (or give --tps)")
    co.add_argument("--tps", type=float, help="an aggregate output rate instead of a run")
    co.add_argument("--price-per-hour", type=float, help="rented: price per hour")
    co.add_argument("--busy-hours", type=float, default=24.0, help="rented: hours a day it does this work")
    co.add_argument("--owned", action="store_true", help="an owned box: --purchase, --life-years, --watts, --kwh-price")
    co.add_argument("--purchase", type=float)
    co.add_argument("--life-years", type=float, default=3.0)
    co.add_argument("--watts", type=float, default=0.0, help="power draw under this load")
    co.add_argument("--kwh-price", type=float, default=0.0)
    co.add_argument("--hours-per-day", type=float, default=24.0, help="owned: hours a day it does this work")
    co.add_argument("--currency", default=None, help="the box's currency (default: the run's, else USD)")
    co.add_argument("--api-price", type=float, help="an API's price per million output tokens, to compare")
    co.add_argument("--api-currency", help="the API price's currency (default: --currency)")
    co.add_argument("--exchange-rate", type=float, help="units of --currency per 1 --api-currency")
    co.add_argument("--format", choices=["table", "markdown"], default="table")
    _add_db(co)

    im = sub.add_parser("import", help="vllm bench serve / llama-bench / GuideLLM / published.csv results into the store")
    im.add_argument("files", nargs="+")
    im.add_argument("--label", help="label for the imported runs (default: from the file)")
    _add_db(im)

    rp = sub.add_parser("report", help="Markdown (BENCHMARKS.md), a self-contained HTML report with plots, PNGs")
    rp.add_argument("runs", nargs="+", help="run ids, id prefixes or labels (predicted runs are drawn dashed)")
    rp.add_argument("--html", help="write the HTML report here")
    rp.add_argument("--md", help="append or rewrite each run's section of this Markdown file")
    rp.add_argument("--png", help="write each plot as a PNG into this directory")
    rp.add_argument("--price-per-hour", type=float, help="for the cost plot (default: each run's own price)")
    rp.add_argument("--currency")
    rp.add_argument("--title", default="tokenbench report")
    _add_db(rp)

    rc = sub.add_parser("recommend", help="rank boxes by cost per million tokens among those that fit and meet SLOs")
    rc.add_argument("--model", required=True)
    rc.add_argument("--agents", type=int, default=16)
    rc.add_argument("--input-len", type=int, default=4096)
    rc.add_argument("--output-len", type=int, default=512)
    rc.add_argument("--ttft-p99", help="SLO, e.g. 2s")
    rc.add_argument("--tpot", help="SLO, e.g. 50ms")
    rc.add_argument("--currency", default="EUR")
    rc.add_argument("--price", action="append", default=[], metavar="ID=PER_HOUR", help="a rental price (repeat)")
    rc.add_argument("--owned", action="append", default=[], metavar="ID=PURCHASE:YEARS:WATTS", help="an owned box (repeat)")
    rc.add_argument("--kwh-price", type=float, default=0.30, help="electricity price for owned boxes")
    rc.add_argument("--runs", nargs="*", default=[], help="measured runs (ids or labels) to rank beside the predictions")
    rc.add_argument("--format", choices=["table", "markdown"], default="table")
    _add_db(rc)

    sh = sub.add_parser("show", help="print a saved run again")
    sh.add_argument("run", help="run id, unique id prefix, or label")
    sh.add_argument("--json", help="also write it to this JSON file")
    sh.add_argument("--format", choices=["table", "markdown"], default="table")
    _add_db(sh)
    return ap


def _add_setup(p: argparse.ArgumentParser, default_engine: str, required: bool = True) -> None:
    p.add_argument("--hardware", required=required, help="hardware id ('tokenbench hardware' lists them)")
    p.add_argument("--model", required=required, help="model id, or a config.json / .gguf path")
    p.add_argument("--weights", help="weight format: BF16, FP8, AWQ, Q4_K_M, Q8_0, ... (default BF16, "
                   "or Q4_K_M for llama.cpp)")
    p.add_argument("--kv", default="auto", help="KV-cache format: auto (model dtype), fp8, q8_0, q4_0, f16")
    p.add_argument("--engine", default=default_engine, help="vllm, sglang, llama.cpp [cuda|vulkan|rocm|metal|cpu]")


def _tokens(text: str, what: str) -> int:
    t = text.strip().lower()
    try:
        return int(float(t[:-1]) * 1024) if t.endswith("k") else int(t)
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a token count: write e.g. 65536 or 64k") from None


def _setup(a: argparse.Namespace) -> Any:
    from .predict.calibration import Calibration
    from .predict.predictor import Setup
    from .predict.specs import Catalog

    cal = Calibration.packaged() if not getattr(a, "calibration", None) else \
        Calibration.from_toml(Path(a.calibration).read_text())
    engine = a.engine
    weights = a.weights or ("Q4_K_M" if engine.lower().startswith("llama") else "BF16")
    kv = a.kv.upper()
    if kv == "AUTO" and engine.lower().startswith("llama"):
        kv = "F16"
    return Setup.make(Catalog.load(), cal, a.hardware, a.model, weights, kv, engine), cal


def cmd_coldstart(a: argparse.Namespace, argv: list[str], console: Console) -> int:
    from urllib.parse import urlparse

    from . import __version__
    from .coldstart import boot
    from .output import print_table
    from .sweep import new_run_id, now_iso

    if a.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    base = normalize_base_url(a.url)
    port = urlparse(base).port
    cmd = a.cmd.replace("{port}", str(port or ""))
    health = a.health or base + "/models"
    timeout = _seconds(a.timeout, "--timeout") or 600.0
    boots = []
    for n in range(a.repeat):
        b = boot(n + 1, cmd, base, health, a.model, timeout, a.log)
        boots.append(b)
        if b.error:
            raise UsageError(f"boot {n + 1}: {b.error}; see the server's output (--log FILE)")
    rows = [[str(b.n) + (" (cold)" if b.n == 1 else ""), f"{b.healthy_s:.2f} s",
             f"{b.first_token_s:.2f} s" if b.first_token_s is not None else "—"] for b in boots]
    print_table(console, ["Boot", "Start -> healthy", "Start -> first token"], rows)
    if len(boots) > 1:
        later = [b.healthy_s for b in boots[1:]]
        console.print(f"first boot {boots[0].healthy_s:.2f} s to healthy; later boots {min(later):.2f}..{max(later):.2f} s "
                      "(cached weights and compiled kernels)", markup=False)
    manifest = {"command": redact_command(["tokenbench", *argv]), "server_command": cmd, "endpoint": base,
                "model": boots[0].model, "boots": [b.to_dict() for b in boots], "label": a.label}
    rid = new_run_id()
    Store(a.db).save_run(rid, "coldstart", a.label, manifest, "measured", [], __version__, now_iso(), now_iso())
    if a.json:
        Path(a.json).write_text(json.dumps({"tool": "tokenbench", "kind": "coldstart", "run_id": rid, **manifest},
                                           indent=2) + "\n")
    console.print(f"run {rid} (coldstart) saved", style="dim", markup=False)
    return 0


def cmd_guard(a: argparse.Namespace, console: Console) -> int:
    from . import guard
    from .output import print_table

    env = guard.GuardEnv(root=Path(a.root), config=guard.load_config(Path(a.guard_config) if a.guard_config else None),
                         target_pids=guard_targets(a.url) if a.url else set())
    snap = guard.snapshot(env)
    rows = [[c["name"], c["status"], c["observed"], c["threshold"], c["advice"]] for c in snap["checks"]]
    print_table(console, ["Check", "Status", "Observed", "Threshold", "Advice"], rows)
    console.print("clean: ready to measure" if snap["clean"] else "DIRTY: fix the failed checks before measuring",
                  markup=False)
    if a.json:
        Path(a.json).write_text(json.dumps(snap, indent=2) + "\n")
    return 0 if snap["clean"] else 1


def guard_targets(url: str | None) -> set[int]:
    """Processes of a server measured on this machine: the guard must not count them against the bench."""
    if not url:
        return set()
    from urllib.parse import urlparse

    import psutil

    u = urlparse(url if "://" in url else "http://" + url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or not u.port:
        return set()
    try:
        return {c.pid for c in psutil.net_connections(kind="tcp")
                if c.laddr and c.laddr.port == u.port and c.status == psutil.CONN_LISTEN and c.pid}
    except (psutil.AccessDenied, OSError):
        return set()


def depth_rows(res: RunResult) -> tuple[list[str], list[list[str]]]:
    head = ["Model", "Test", "Depth", "t/s"]
    rows = []
    for o in res.outcomes:
        s = o.summary
        v, sd = (s.pp_tps, s.pp_tps_sd) if s.pp_tps is not None else (s.tg_tps, s.tg_tps_sd)
        rows.append([str(res.manifest.get("model") or ""), f"{s.test} @ d{s.depth}", f"{s.depth:,}",
                     f"{v:,.2f} ± {sd or 0:.2f}" if v is not None else "—"])
    return head, rows


def _llama_bench(a: argparse.Namespace, depths: list[int], console: Console) -> int:
    import subprocess
    import tempfile

    from .importers import import_file

    if not a.model_file:
        raise UsageError("--llama-bench needs --model-file MODEL.gguf")
    cmd = [a.llama_bench, "-m", a.model_file, "-p", str(a.pp), "-n", str(a.tg), "-d", ",".join(map(str, depths)),
           "-r", str(a.repetitions), "-o", "json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise UsageError(f"cannot run {a.llama_bench}: {e}") from None
    if proc.returncode != 0:
        raise UsageError(f"llama-bench exited with {proc.returncode}: {proc.stderr.strip().splitlines()[-1:] or ''}")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(proc.stdout)
    store = Store(a.db)
    _, ids = import_file(store, Path(f.name), a.label or Path(a.model_file).stem)
    Path(f.name).unlink()
    res = load_result(store, ids[0])
    from .output import print_table

    print_table(console, *depth_rows(res), a.format)
    console.print(f"run {res.run_id} (llama-bench, imported) saved in {store.path}", markup=False)
    if a.json:
        _write_json(a.json, res)
    return 0


def cmd_depth(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    from .depth import DepthConfig, run_depth
    from .output import print_table

    depths = [_tokens(d, "--depths") for d in (a.depths or ("0,1k,4k" if not a.url else "0,8k,32k")).split(",")
              if d.strip()]
    if a.llama_bench:
        return _llama_bench(a, depths, console)
    cfg = DepthConfig(url=normalize_base_url(a.url) if a.url else "", depths=depths, pp=a.pp, tg=a.tg,
                      repetitions=a.repetitions, model=a.model, api_key=a.api_key or os.environ.get("OPENAI_API_KEY"),
                      tokenizer=a.tokenizer, label=a.label, seed=a.seed, command=redact_command(["tokenbench", *argv]),
                      metrics=not a.no_metrics, guard=a.guard, guard_config=_guard_config(a.guard_config),
                      target_pids=guard_targets(a.url))
    store = Store(a.db)
    note = (lambda t: err.print(t, style="dim", markup=False, highlight=False))
    engine = None
    try:
        if not a.url:
            from .engines import launch, tiny

            model = tiny.ensure()
            note("starting the embedded llamacpp engine ...")
            engine = launch.start("llamacpp", model)
            cfg.url, cfg.model, cfg.tokenizer = engine.base_url, engine.model, cfg.tokenizer or str(model.hf_dir)
            cfg.label = cfg.label or "embedded-llamacpp"
            cfg.embedded = {"engine": "llamacpp", "startup_s": engine.startup_s, "command": engine.command,
                            "engine_version": launch.engine_version("llamacpp")}
            cfg.target_pids = {engine.proc.pid}
        res = asyncio.run(run_depth(cfg, store, note))
    except TokenbenchError as e:
        rid = getattr(e, "run_id", None)
        if rid and a.json:
            _write_json(a.json, load_result(store, rid))
        raise
    finally:
        if engine is not None:
            engine.stop()
    print_table(console, *depth_rows(res), a.format)
    for o in res.outcomes:
        for w in o.summary.warnings:
            console.print(f"[{o.summary.test} @ d{o.summary.depth}] {w}", style="yellow", markup=False, highlight=False)
    console.print(f"run {res.run_id} (depth) saved in {store.path}", style="dim", markup=False)
    if a.json:
        _write_json(a.json, load_result(store, res.run_id))
    return 0


def cmd_catalog(a: argparse.Namespace, console: Console) -> int:
    from .output import print_table
    from .predict import report
    from .predict.specs import Catalog

    cat = Catalog.load()
    head, rows = report.hardware_table(cat) if a.command == "hardware" else report.models_table(cat)
    print_table(console, head, rows, a.format)
    if cat.user_file:
        console.print(f"including entries from {cat.user_file}", style="dim", markup=False)
    return 0


def cmd_fit(a: argparse.Namespace, console: Console) -> int:
    from .predict import report

    s, _ = _setup(a)
    ctx = _tokens(a.context, "--context")
    if a.concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    f = s.fit(ctx, a.concurrency)
    for line in report.fit_lines(s, f, ctx, a.concurrency):
        console.print(line, markup=False, highlight=False)
    return 0


def cmd_predict(a: argparse.Namespace, console: Console) -> int:
    from .output import print_table
    from .predict import report
    from .predict import roofline as rf

    if a.against:
        from .predict.calibration import Calibration
        from .predict.predictor import against
        from .predict.published import read_rows
        from .predict.specs import Catalog

        cal = Calibration.packaged() if not a.calibration else Calibration.from_toml(Path(a.calibration).read_text())
        rep = against(Catalog.load(), cal, read_rows(Path(a.against)))
        head, rows = report.against_table(rep)
        print_table(console, head, rows, a.format)
        for line in report.summary_lines(rep):
            console.print(line, markup=False, highlight=False)
        if a.json:
            Path(a.json).write_text(json.dumps(rep.to_json(), indent=2) + "\n")
        return 0
    if not a.hardware or not a.model:
        raise UsageError("predict needs --hardware and --model (or --against FILE)")
    s, _ = _setup(a)
    if a.spec_tokens:
        if (a.acceptance is None) == (a.acceptance_length is None):
            raise UsageError("with --spec-tokens give one of --acceptance (0..1) or --acceptance-length")
        alpha = a.acceptance if a.acceptance is not None else rf.alpha_from_acceptance_length(a.acceptance_length, a.spec_tokens)
        if not 0 <= alpha <= 1:
            raise UsageError("--acceptance is a probability between 0 and 1")
        cost = a.draft_cost if a.draft_cost is not None else (1 / s.model.layers if s.model.mtp else 0.05)
        s.spec_speedup = rf.spec_speedup(alpha, a.spec_tokens, cost)
        console.print(f"speculative decoding: {a.spec_tokens} tokens, acceptance {alpha:.2f}, "
                      f"{rf.expected_tokens(alpha, a.spec_tokens):.2f} tokens per target pass, draft cost {cost:.3f} "
                      f"-> decode x{s.spec_speedup:.2f}", markup=False, highlight=False)
    console.print(f"PREDICTED for {s.model.id} ({s.quant.weights}, {s.quant.kv.lower()} KV) on {s.hw.id}, "
                  f"{s.engine} ({s.backend}: {s.eff.source}); the ceiling is the physical limit at efficiency 1",
                  markup=False, highlight=False)
    depths = levels = None
    if a.test:
        depths = [_tokens(d, "--depth") for d in a.depth.split(",") if d.strip()]
        head, rows = report.depth_table(s, depths, 512, 128)
    else:
        levels = _int_list(a.concurrency, "--concurrency")
        head, rows = report.serve_table(s, levels, a.input_len, a.output_len)
        if s.kind == "sequential":
            console.print("llama.cpp serves one stream at a time: concurrency only queues", markup=False)
    print_table(console, head, rows, a.format)
    if a.save:
        rid = _save_prediction(a, s, depths, levels)
        console.print(f"saved as run {rid} (label {a.save}, provenance predicted)", markup=False)
    if a.json:
        Path(a.json).write_text(json.dumps({"predicted": True, "columns": head, "rows": rows}, indent=2) + "\n")
    return 0


def cmd_compare(a: argparse.Namespace, console: Console) -> int:
    from .compare import compare, table
    from .output import print_table

    store = Store(a.db)
    c = compare(load_result(store, a.a), load_result(store, a.b), a.agents, a.tokens)
    for w in c.warnings:
        console.print(f"warning: {w}", style="yellow", markup=False, highlight=False)
    head, rows = table(c)
    print_table(console, head, rows, a.format)
    for line in c.crossovers:
        console.print(line, markup=False, highlight=False)
    if c.effective:
        console.print(f"{a.agents} agents x {a.tokens} tokens: " + "; ".join(c.effective), markup=False, highlight=False)
    return 0


def cmd_cost(a: argparse.Namespace, console: Console) -> int:
    from .cost import Pricing, api_in
    from .output import print_table

    res = None
    if a.run:
        res = load_result(Store(a.db), a.run)
    elif a.tps is None:
        raise UsageError("give a run, or --tps RATE for a rate you know")
    currency = a.currency or (res.manifest.get("currency") if res else None) or "USD"
    price = a.price_per_hour
    if price is None and not a.owned and res is not None:
        price = res.manifest.get("price_per_hour")
    if a.owned and a.purchase is None:
        raise UsageError("--owned needs --purchase PRICE (and --life-years, --watts, --kwh-price)")
    pricing = Pricing(currency=currency, price_per_hour=None if a.owned else price, busy_hours_per_day=a.busy_hours,
                      purchase=a.purchase if a.owned else None, life_years=a.life_years, watts=a.watts,
                      kwh_price=a.kwh_price, hours_per_day=a.hours_per_day)
    api_note = None
    try:
        api = api_in(currency, a.api_price, a.api_currency, a.exchange_rate)
    except UsageError:
        # an API priced in another currency and no rate: show it as given rather than guess a rate
        api = None
        api_note = (f"API: {a.api_price:g} {a.api_currency}/M output tokens; pass --exchange-rate "
                    f"({currency} per 1 {a.api_currency}) to compare in {currency}")
    points: list[tuple[str, float]] = []
    if res is not None:
        for o in res.outcomes:
            s = o.summary
            rate = s.output_throughput_tps or s.decode_tps or s.tg_tps
            if rate:
                key = f"{s.test or 'serve'} c={s.concurrency}" + (f" depth={s.depth}" if s.depth else "") \
                    + (f" prompt={s.input_tokens_mean:.0f}" if s.input_tokens_mean else "")
                points.append((key, rate))
    else:
        points.append(("given rate", a.tps))
    head = ["Operating point", "Output tok/s", f"{currency}/M output"]
    if api is not None:
        head += [f"API {currency}/M", "Box vs API"]
    rows = []
    for key, rate in points:
        c = pricing.per_mtok(rate)
        row = [key, f"{rate:,.1f}", f"{c:.2f}" if c is not None else "—"]
        if api is not None and c:
            row += [f"{api:.2f}", f"{api / c:.1f}x cheaper" if c < api else f"{c / api:.1f}x dearer"]
        rows.append(row)
    console.print(pricing.describe(), markup=False, highlight=False)
    print_table(console, head, rows, a.format)
    if api_note:
        console.print(api_note, markup=False, highlight=False)
    return 0


def cmd_report(a: argparse.Namespace, console: Console) -> int:
    from .report import html, markdown, plots, series

    if not (a.html or a.md or a.png):
        raise UsageError("say what to write: --html FILE, --md FILE and/or --png DIR")
    store = Store(a.db)
    runs = [load_result(store, r) for r in a.runs]
    if a.md:
        markdown.write(Path(a.md), runs)
        console.print(f"wrote {len(runs)} section(s) to {a.md}", markup=False)
    data = series.build(runs, a.price_per_hour, a.currency or runs[0].manifest.get("currency"))
    if a.html:
        Path(a.html).write_text(html.render(runs, [(p, plots.svg(p)) for p in data], a.title))
        console.print(f"wrote {a.html} ({len(data)} plots)", markup=False)
    if a.png:
        out = Path(a.png)
        out.mkdir(parents=True, exist_ok=True)
        for p in data:
            plots.png(p, out / f"{p.id}.png")
        console.print(f"wrote {len(data)} PNGs to {out}", markup=False)
    return 0


def _save_prediction(a: argparse.Namespace, s: Any, depths: list[int] | None, levels_n: list[int] | None) -> str:
    from . import __version__
    from .metrics import Distribution, LevelSummary
    from .sweep import new_run_id, now_iso

    levels = []
    if depths is not None:
        for d in depths:
            p, t = s.prefill(512, d), s.decode(d + 64)
            levels.append(LevelSummary.empty(concurrency=1, test="pp512", depth=d, pp_tps=512 / p.estimate))
            levels.append(LevelSummary.empty(concurrency=1, test="tg128", depth=d, tg_tps=1 / t.estimate))
    else:
        for n in levels_n or []:
            pt = s.serve(n, a.input_len, a.output_len)
            levels.append(LevelSummary.empty(
                concurrency=n, test="serve", output_throughput_tps=pt.throughput[1], per_agent_tps=pt.per_agent[1],
                ttft_ms=Distribution(n=0, p50=pt.ttft_s.estimate * 1000), tpot_ms=Distribution(n=0, p50=pt.tpot_s.estimate * 1000),
                input_tokens_mean=float(a.input_len), output_tokens_mean=float(a.output_len)))
    manifest = {"model": s.model.id, "weights": s.quant.weights, "kv": s.quant.kv, "engine": s.engine,
                "hardware": s.hw.id, "predicted": True, "backend": s.backend, "calibration": s.eff.source,
                "workload": {"input_len": a.input_len, "output_len": a.output_len} if depths is None else {},
                "label": a.save}
    rid = new_run_id()
    Store(a.db).save_run(rid, "predict", a.save, manifest, "predicted", levels, __version__, now_iso(), now_iso())
    return rid


def cmd_recommend(a: argparse.Namespace, console: Console) -> int:
    from .output import print_table
    from .predict.calibration import Calibration
    from .predict.specs import Catalog
    from .recommend import Workload, measured, parse_prices, predicted, rank

    if a.agents < 1:
        raise UsageError("--agents must be at least 1")
    w = Workload(a.model, a.agents, a.input_len, a.output_len,
                 parse_duration_ms(a.ttft_p99) if a.ttft_p99 else None, parse_duration_ms(a.tpot) if a.tpot else None,
                 a.currency)
    cat = Catalog.load()
    cat.find_model(a.model)  # an unknown model is an error, not a table of exclusions
    prices = parse_prices(a.price, a.owned, a.currency, a.kwh_price)
    cands = predicted(cat, Calibration.packaged(), w, prices)
    if a.runs:
        store = Store(a.db)
        cands += measured([load_result(store, r) for r in a.runs], w, prices)
    ok, excluded = rank(cands)
    console.print(f"{a.agents} agents, {a.input_len} in / {a.output_len} out tokens, model {a.model}"
                  + (f", TTFT p99 <= {a.ttft_p99}" if a.ttft_p99 else "") + (f", TPOT <= {a.tpot}" if a.tpot else ""),
                  markup=False, highlight=False)
    head = ["Rank", "Box", "Engine", "Source", "Aggregate tok/s", "TTFT p99", "TPOT", f"{a.currency}/M output", "Notes"]
    rows = [[str(i + 1), c.box, c.setup, c.source.upper() if c.source == "predicted" else c.source,
             f"{c.throughput:,.0f}" if c.throughput else "—",
             f"{c.ttft_p99_ms:,.0f} ms" if c.ttft_p99_ms else "—", f"{c.tpot_ms:.1f} ms" if c.tpot_ms else "—",
             f"{c.cost_per_mtok:.2f}" if c.cost_per_mtok else "—", "; ".join(c.notes)] for i, c in enumerate(ok)]
    print_table(console, head, rows, a.format)
    if not ok:
        console.print("no box fits, meets the SLOs and has a price", style="yellow", markup=False)
    for c in excluded:
        console.print(f"excluded {c.box} ({c.source}): {c.excluded}", markup=False, highlight=False)
    return 0


def cmd_import(a: argparse.Namespace, console: Console) -> int:
    from .importers import import_file

    store = Store(a.db)
    for f in a.files:
        fmt, ids = import_file(store, Path(f), a.label)
        labels = sorted({store.resolve(i).label or i for i in ids})
        console.print(f"{f}: {fmt}, {len(ids)} run(s) imported: {', '.join(labels[:6])}"
                      + (" ..." if len(labels) > 6 else ""), markup=False, highlight=False)
    return 0


def cmd_calibrate(a: argparse.Namespace, argv: list[str], console: Console) -> int:
    from .predict.calibration import write
    from .predict.predictor import fit_calibration
    from .predict.published import read_rows
    from .predict.specs import Catalog

    cal = fit_calibration(Catalog.load(), read_rows(Path(a.file)), "tokenbench " + " ".join(argv))
    write(cal, Path(a.out))
    for name, e in sorted(cal.backends.items()):
        console.print(f"{name}: decode bandwidth efficiency {e.eta_bw:.2f}, fixed {e.decode_b * 1000:.1f} ms/token; "
                      f"prefill matmul efficiency {e.eta_compute:.2f} ({e.rows} rows)", markup=False)
    console.print(f"wrote {a.out}", markup=False)
    return 0


def _guard_config(path: str | None) -> Any:
    from . import guard

    return guard.load_config(Path(path) if path else None)


def _sweep_config(a: argparse.Namespace, argv: list[str]) -> SweepConfig:
    embedded = a.url is None
    d = EMBEDDED_DEFAULTS if embedded else {}
    if a.shape is None and a.input_len is None and a.output_len is None and embedded:
        input_len, output_len = int(d["input_len"]), int(d["output_len"])
    else:
        input_len, output_len = resolve_shape(a.shape, a.input_len, a.output_len)
    if input_len < 1 or output_len < 1:
        raise UsageError("--input-len and --output-len must be at least 1")
    if a.prefix_len < 0 or a.prefix_len >= max(input_len, 1) and a.prefix_len:
        raise UsageError(f"--prefix-len must be between 0 and the input length ({input_len})")
    if a.rate and a.concurrency:
        raise UsageError("give --concurrency or --rate, not both")
    extra: dict[str, Any] = {}
    if a.extra_body:
        try:
            extra = json.loads(a.extra_body)
        except ValueError as e:
            raise UsageError(f"--extra-body is not valid JSON ({e.msg}): quote it, e.g. '{{\"top_k\": 1}}'") from None
        if not isinstance(extra, dict):
            raise UsageError("--extra-body must be a JSON object")
    duration = _seconds(a.duration, "--duration")
    requests = a.requests
    if requests is None and duration is None:
        requests = int(d.get("requests", 32))
    if requests is not None and requests < 1:
        raise UsageError("--requests must be at least 1")
    if a.repetitions < 1:
        raise UsageError("--repetitions must be at least 1")
    try:
        slo = SLO.parse(a.slo) if a.slo else None
    except ValueError as e:
        raise UsageError(f"--slo: {e}") from None
    return SweepConfig(
        url=normalize_base_url(a.url) if a.url else "",
        model=a.model,
        api=a.api,
        api_key=a.api_key or os.environ.get("OPENAI_API_KEY"),
        concurrency=_int_list(a.concurrency or str(d.get("concurrency", "1")), "--concurrency"),
        rates=_float_list(a.rate, "--rate") if a.rate else [],
        arrival=a.arrival,
        max_concurrency=a.max_concurrency,
        requests=requests,
        duration_s=duration,
        warmup=a.warmup,
        repetitions=a.repetitions,
        timeout_s=_seconds(a.timeout, "--timeout") or 600.0,
        stall_timeout_s=_seconds(a.stall_timeout, "--stall-timeout") or 60.0,
        input_len=input_len,
        output_len=output_len,
        shape=a.shape,
        prefix_len=a.prefix_len,
        tokenizer=a.tokenizer,
        label=a.label or (f"embedded-{a.engine}" if embedded else socket.gethostname()),
        price_per_hour=a.price_per_hour,
        currency=a.currency,
        slo=slo,
        seed=a.seed,
        guard=a.guard,
        guard_config=_guard_config(a.guard_config),
        target_pids=guard_targets(a.url),
        metrics_interval_s=None if a.no_metrics else 1.0,
        temperature=a.temperature,
        fixed_output=not a.no_fixed_output,
        extra_body=extra,
        command=redact_command(["tokenbench", *argv]),
    )


def _print_result(console: Console, res: RunResult, fmt: str, db: Path) -> None:
    levels = [o.summary for o in res.outcomes]
    currency = res.manifest.get("currency") or "USD"
    if fmt == "markdown":
        console.print(format_sweep_markdown(levels, currency), markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(describe_run(res.manifest), style="dim", markup=False, highlight=False)
        print_sweep(console, levels, currency)
    console.print(f"run {res.run_id} ({res.status}) saved in {db}", style="dim", markup=False, highlight=False)


def _write_json(path: str, res: RunResult) -> None:
    Path(path).write_text(json.dumps(res.to_json(), indent=2) + "\n")


def cmd_sweep(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    cfg = _sweep_config(a, argv)
    store = Store(a.db)
    reporter = RichReporter(err, enabled=not a.quiet)
    engine = None
    try:
        if not a.url:
            from .engines import launch, tiny

            reporter.note(f"building the embedded model (cached after the first run) in {tiny.cache_dir()} …")
            model = tiny.ensure()
            reporter.note(f"starting the embedded {a.engine} engine …")
            engine = launch.start(a.engine, model)
            reporter.note(f"{a.engine} engine healthy after {engine.startup_s:.1f} s at {engine.base_url}")
            cfg.url, cfg.model = engine.base_url, engine.model
            cfg.tokenizer = cfg.tokenizer or str(model.hf_dir)
            cfg.embedded = {"engine": a.engine, "startup_s": engine.startup_s, "command": engine.command,
                            "model": model.name, "engine_version": launch.engine_version(a.engine)}
            cfg.target_pids = {engine.proc.pid}
        alive = engine.alive if engine is not None else None
        try:
            res = asyncio.run(run_sweep(cfg, store, reporter, alive=alive))
        finally:
            reporter.close()
    except KeyboardInterrupt:
        reporter.close()
        rid = _latest_run(store)
        if rid:
            res = load_result(store, rid)
            _print_result(console, res, a.format, store.path)
            if a.json:
                _write_json(a.json, res)
        err.print("interrupted: the finished levels are saved; the level in progress is kept, marked interrupted",
                  markup=False, highlight=False)
        return 130
    except TokenbenchError as e:
        rid = getattr(e, "run_id", None)
        if rid:
            res = load_result(store, rid)
            if res.outcomes:
                _print_result(console, res, a.format, store.path)
            if a.json:
                _write_json(a.json, res)
        raise
    finally:
        if engine is not None:
            engine.stop()
    _print_result(console, res, a.format, store.path)
    if a.json:
        _write_json(a.json, load_result(store, res.run_id))
    return 0


def _latest_run(store: Store) -> str | None:
    runs = store.runs(limit=1)
    return runs[0].id if runs else None


def cmd_runs(a: argparse.Namespace, console: Console) -> int:
    store = Store(a.db)
    rows = store.runs(a.limit)
    if not rows:
        console.print(f"no runs in {store.path}", markup=False)
        return 0
    from rich.table import Table

    t = Table(box=None)
    for h in ("Run", "Started", "Kind", "Label", "Model", "Engine", "Levels", "Status"):
        t.add_column(h)
    for r in rows:
        n = len({idx for idx, *_ in store.levels(r.id)})
        t.add_row(r.id, r.started, r.kind, r.label or "", str(r.manifest.get("model") or ""),
                  str(r.manifest.get("engine") or ""), str(n), r.status)
    console.print(t)
    return 0


def cmd_show(a: argparse.Namespace, console: Console) -> int:
    store = Store(a.db)
    res = load_result(store, a.run)
    _print_result(console, res, a.format, store.path)
    if res.error:
        console.print(f"this run ended early: {res.error}", style="yellow", markup=False, highlight=False)
    if a.json:
        _write_json(a.json, res)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # A table piped to a file or a CI log keeps its width instead of wrapping at 80 columns.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True, highlight=False)
    parser = build_parser()
    a = parser.parse_args(argv)
    handlers = {
        "sweep": lambda: cmd_sweep(a, argv, console, err),
        "runs": lambda: cmd_runs(a, console),
        "show": lambda: cmd_show(a, console),
        "coldstart": lambda: cmd_coldstart(a, argv, console),
        "guard": lambda: cmd_guard(a, console),
        "depth": lambda: cmd_depth(a, argv, console, err),
        "hardware": lambda: cmd_catalog(a, console),
        "models": lambda: cmd_catalog(a, console),
        "fit": lambda: cmd_fit(a, console),
        "predict": lambda: cmd_predict(a, console),
        "calibrate": lambda: cmd_calibrate(a, argv, console),
        "compare": lambda: cmd_compare(a, console),
        "cost": lambda: cmd_cost(a, console),
        "import": lambda: cmd_import(a, console),
        "report": lambda: cmd_report(a, console),
        "recommend": lambda: cmd_recommend(a, console),
    }
    try:
        return int(handlers[a.command]())
    except TokenbenchError as e:
        # One line, never wrapped: scripts and people grep it.
        first, *rest = str(e).splitlines() or [""]
        print(f"tokenbench: error: {first}", file=sys.stderr)
        if rest:  # e.g. an engine's log tail, after the one line
            print("\n".join(rest), file=sys.stderr)
        return e.exit_code


def entrypoint() -> None:
    sys.exit(main())
