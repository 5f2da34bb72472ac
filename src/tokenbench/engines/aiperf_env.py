"""AIPerf (NVIDIA's benchmarking tool, ``aiperf`` on PyPI) in a virtual environment of its own, made once in the
cache as vLLM's is: the reference tool a trace replay is cross-checked against (tests/test_trace_aiperf.py).

It cannot share tokenbench's environment: it pins its own pandas, scipy, pyzmq, datasets, transformers and
tokenizers, about 130 packages. It needs no torch. Making it takes about a minute where pip's cache holds the
wheels, a few minutes of downloads where it does not, and about 1.2 GB of disk.
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

AIPERF = "aiperf==0.13.*"
ENV_DIR = "TOKENBENCH_AIPERF_ENV"

Progress = Callable[[str], None]


def env_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else tools_dir() / "aiperf-0.13-env"


def python() -> Path:
    return env_dir() / "bin" / "python"


def executable() -> Path:
    """The ``aiperf`` command of the environment."""
    return env_dir() / "bin" / "aiperf"


def ready() -> bool:
    return (env_dir() / "READY").exists()


def version() -> str | None:
    v = env_dir() / "READY"
    return v.read_text().strip() or None if v.exists() else None


def ensure(progress: Progress | None = None) -> Path:
    """The environment's ``aiperf`` command, made on first use."""
    say = progress or (lambda t: print(t, file=sys.stderr, flush=True))
    d = env_dir()
    if ready():
        return executable()
    if os.environ.get(ENV_DIR) and not python().exists():
        raise EngineError(f"{ENV_DIR}={d} holds no Python environment: unset it or point it at one with aiperf")
    say(f"making AIPerf's own environment once in {d} (about 130 packages, ~1.2 GB) ...")
    if not python().exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(d)
    say(f"  pip install {AIPERF} ...")
    run_step([str(python()), "-m", "pip", "install", "--progress-bar", "off", AIPERF], say,
             f"pip install {AIPERF} failed", pip_progress, tail=15)
    probe = subprocess.run(
        [str(python()), "-c", "import importlib.metadata as m, aiperf.cli; print(m.version('aiperf'))"],
        capture_output=True, text=True, check=False,
    )
    if probe.returncode != 0 or not executable().exists():
        raise EngineError("AIPerf's environment does not import aiperf: "
                          + " ".join((probe.stderr or "").strip().splitlines()[-1:]))
    (d / "READY").write_text(probe.stdout.strip() + "\n")
    say(f"AIPerf {probe.stdout.strip()} ready")
    return executable()
