"""AIPerf (NVIDIA's benchmarking tool, ``aiperf`` on PyPI) in a virtual environment of its own, made once in the
cache as vLLM's is: the reference tool a trace replay is cross-checked against (tests/test_trace_aiperf.py).

It cannot share tokenbench's environment: it pins its own pandas, scipy, pyzmq, datasets, transformers and
tokenizers, about 130 packages. It needs no torch. Making it takes about a minute where pip's cache holds the
wheels, a few minutes of downloads where it does not, and about 1.2 GB of disk.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from .toolenv import ToolEnv

AIPERF = "aiperf==0.13.*"
ENV = ToolEnv("AIPerf", "TOKENBENCH_AIPERF_ENV", "aiperf-0.13-env", "aiperf",
              "import importlib.metadata as m, aiperf.cli; print(m.version('aiperf'))")
env_dir, python, ready, version = ENV.dir, ENV.python, ENV.ready, ENV.version

Progress = Callable[[str], None]


def executable() -> Path:
    """The ``aiperf`` command of the environment."""
    return ENV.dir() / "bin" / "aiperf"


def ensure(progress: Progress | None = None) -> Path:
    """The environment's ``aiperf`` command, made on first use."""
    say = progress or (lambda t: print(t, file=sys.stderr, flush=True))
    if not ENV.ready():
        ENV.make(say, "about 130 packages, ~1.2 GB", lambda env, said: env.pip(said, AIPERF))
    return executable()
