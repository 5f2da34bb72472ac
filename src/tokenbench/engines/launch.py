"""Start a real server for the tiny model on a free loopback port, wait until it answers, stop it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from ..errors import EngineError
from ..servers import http_ok
from .tiny import TinyModel, cache_dir

EngineName = Literal["transformers", "llamacpp"]
ENGINES: tuple[str, ...] = ("transformers", "llamacpp")
STARTUP_TIMEOUT_S = 300.0


def engine_version(engine: str) -> str | None:
    """The installed version of the package behind an embedded engine (its server does not say)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers" if engine == "transformers" else "llama-cpp-python")
    except PackageNotFoundError:
        return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(engine: str, model: TinyModel, port: int) -> tuple[list[str], str]:
    """The server command line and the model name to request."""
    if engine == "transformers":
        return (
            [
                sys.executable, "-m", "transformers.cli.transformers", "serve", str(model.hf_dir),
                "--continuous-batching", "--host", "127.0.0.1", "--port", str(port),
                "--device", "cpu", "--dtype", "float32", "--log-level", "warning",
            ],
            str(model.hf_dir),
        )
    if engine == "llamacpp":
        return (
            [
                sys.executable, "-m", "llama_cpp.server", "--model", str(model.gguf_path),
                "--model_alias", model.name, "--host", "127.0.0.1", "--port", str(port),
                # Leave a core to the client measuring it: both run on this machine.
                "--n_ctx", "8192", "--n_threads", str(max(1, min(4, (os.cpu_count() or 2) - 1))),
                # Its default cancels the running request when another arrives; a benchmark wants them queued.
                "--interrupt_requests", "False",
            ],
            model.name,
        )
    raise EngineError(f"unknown engine '{engine}': use one of {', '.join(ENGINES)}")


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
        root = self.base_url[: -len("/v1")]
        return root + "/health" if self.engine == "transformers" else self.base_url + "/models"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 15) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=timeout)

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(engine: str, model: TinyModel, timeout_s: float = STARTUP_TIMEOUT_S) -> RunningEngine:
    """Start ``engine`` serving ``model``; returns once ``/v1/models`` answers. Startup time is measured."""
    port = free_port()
    cmd, served = command(engine, model, port)
    logs = cache_dir() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{engine}-{port}.log"
    # Transformers serve lists the models of the Hugging Face cache at /v1/models and answers 500 when there
    # is none; an empty cache of our own makes it list none (the served model is the one on its command line).
    hub = cache_dir() / "hf-hub"
    hub.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_CACHE=str(hub))
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    running = RunningEngine(engine, base, served, proc, log_path, 0.0, cmd)
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise EngineError(
                f"the {engine} engine exited with code {proc.returncode} while starting; its log: {log_path}\n"
                + running.log_tail()
            )
        if http_ok(running.health_url):
            running.startup_s = time.perf_counter() - t0
            return running
        time.sleep(0.1)
    running.stop()
    raise EngineError(f"the {engine} engine did not answer within {timeout_s:g} s; its log: {log_path}")
