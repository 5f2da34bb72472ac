"""Commands that measure: sweep, depth, coldstart, guard; and runs/show to read them back."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import socket
from pathlib import Path
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from typing import Any
from ..errors import TokenbenchError, UsageError
from ..metrics import SLO, LevelSummary
from ..output import describe_run, format_sweep_markdown, print_sweep
from ..records import RequestRecord
from ..servers import normalize_base_url
from ..store import Store
from ..sweep import RunResult, SweepConfig, load_result, redact_command, run_sweep
from ..workload import resolve_shape
from .common import float_list, guard_config, int_list, seconds, tokens, write_json, guard_targets


EMBEDDED_DEFAULTS = {"concurrency": "1,2,4,8", "requests": 16, "input_len": 128, "output_len": 64}


class RichReporter:
    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self.progress: Progress | None = None
        self.task: Any = None

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
    duration = seconds(a.duration, "--duration")
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
        concurrency=int_list(a.concurrency or str(d.get("concurrency", "1")), "--concurrency"),
        rates=float_list(a.rate, "--rate") if a.rate else [],
        arrival=a.arrival,
        max_concurrency=a.max_concurrency,
        requests=requests,
        duration_s=duration,
        warmup=a.warmup,
        repetitions=a.repetitions,
        timeout_s=seconds(a.timeout, "--timeout") or 600.0,
        stall_timeout_s=seconds(a.stall_timeout, "--stall-timeout") or 60.0,
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
        guard_config=guard_config(a.guard_config),
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


def cmd_sweep(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    cfg = _sweep_config(a, argv)
    store = Store(a.db)
    reporter = RichReporter(err, enabled=not a.quiet)
    engine = None
    try:
        if not a.url:
            from ..engines import launch, tiny

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
                write_json(a.json, res)
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
                write_json(a.json, res)
        raise
    finally:
        if engine is not None:
            engine.stop()
    _print_result(console, res, a.format, store.path)
    if a.json:
        write_json(a.json, load_result(store, res.run_id))
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
        write_json(a.json, res)
    return 0


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

    from ..importers import import_file

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
    from ..output import print_table

    print_table(console, *depth_rows(res), a.format)
    console.print(f"run {res.run_id} (llama-bench, imported) saved in {store.path}", markup=False)
    if a.json:
        write_json(a.json, res)
    return 0


def cmd_depth(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    from ..depth import DepthConfig, run_depth
    from ..output import print_table

    depths = [tokens(d, "--depths") for d in (a.depths or ("0,1k,4k" if not a.url else "0,8k,32k")).split(",")
              if d.strip()]
    if a.llama_bench:
        return _llama_bench(a, depths, console)
    cfg = DepthConfig(url=normalize_base_url(a.url) if a.url else "", depths=depths, pp=a.pp, tg=a.tg,
                      repetitions=a.repetitions, model=a.model, api_key=a.api_key or os.environ.get("OPENAI_API_KEY"),
                      tokenizer=a.tokenizer, label=a.label, seed=a.seed, command=redact_command(["tokenbench", *argv]),
                      metrics=not a.no_metrics, guard=a.guard, guard_config=guard_config(a.guard_config),
                      target_pids=guard_targets(a.url))
    store = Store(a.db)
    note = (lambda t: err.print(t, style="dim", markup=False, highlight=False))
    engine = None
    try:
        if not a.url:
            from ..engines import launch, tiny

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
            write_json(a.json, load_result(store, rid))
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
        write_json(a.json, load_result(store, res.run_id))
    return 0


def cmd_coldstart(a: argparse.Namespace, argv: list[str], console: Console) -> int:
    from urllib.parse import urlparse

    from .. import __version__
    from ..coldstart import boot
    from ..output import print_table
    from ..sweep import new_run_id, now_iso

    if a.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    base = normalize_base_url(a.url)
    port = urlparse(base).port
    cmd = a.cmd.replace("{port}", str(port or ""))
    health = a.health or base + "/models"
    timeout = seconds(a.timeout, "--timeout") or 600.0
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
    manifest = {"command": redact_command(["tokenbench", *argv]), "server_command": redact_command(shlex.split(cmd)), "endpoint": base,
                "model": boots[0].model, "boots": [b.to_dict() for b in boots], "label": a.label}
    rid = new_run_id()
    Store(a.db).save_run(rid, "coldstart", a.label, manifest, "measured", [], __version__, now_iso(), now_iso())
    if a.json:
        Path(a.json).write_text(json.dumps({"tool": "tokenbench", "kind": "coldstart", "run_id": rid, **manifest},
                                           indent=2) + "\n")
    console.print(f"run {rid} (coldstart) saved", style="dim", markup=False)
    return 0


def cmd_guard(a: argparse.Namespace, console: Console) -> int:
    from .. import guard
    from ..output import print_table

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
