"""A tool's Python environment of its own, made once in the cache: vLLM's (vllm_env.py) and AIPerf's
(aiperf_env.py). Each pins packages that cannot share tokenbench's environment. A variable moves it; a READY file
holding the version its probe printed says it was made whole."""

from __future__ import annotations

import os
import subprocess
import venv
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import EngineError
from .steps import pip_progress, run_step
from .cache import tools_dir

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ToolEnv:
    label: str  # the tool's name in messages: "vLLM", "AIPerf"
    variable: str  # the environment variable that points at another folder
    folder: str  # the folder's name under the tools cache
    package: str  # what the environment is for (a variable pointing at an empty folder is told to hold it)
    probe: str  # Python code that imports the tool and prints its version: the environment works

    def dir(self) -> Path:
        env = os.environ.get(self.variable)
        return Path(env) if env else tools_dir() / self.folder

    def python(self) -> Path:
        return self.dir() / "bin" / "python"

    def ready(self) -> bool:
        return (self.dir() / "READY").exists()

    def version(self) -> str | None:
        v = self.dir() / "READY"
        return v.read_text().strip() or None if v.exists() else None

    def pip(self, say: Progress, *what: str) -> None:
        """``pip install`` into the environment, its progress said; a failure is an EngineError with pip's tail."""
        say(f"  pip install {' '.join(what)} ...")
        run_step([str(self.python()), "-m", "pip", "install", "--progress-bar", "off", *what], say,
                 f"pip install {' '.join(what)} failed", pip_progress, tail=15)

    def make(self, say: Progress, size: str, install: Callable[[ToolEnv, Progress], None]) -> str:
        """Create the environment, ``install`` into it, check that the tool imports, mark it ready; its version."""
        d = self.dir()
        if os.environ.get(self.variable) and not self.python().exists():
            raise EngineError(f"{self.variable}={d} holds no Python environment: unset it or point it at one with "
                              f"{self.package}")
        say(f"making {self.label}'s own environment once in {d} ({size}) ...")
        if not self.python().exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(d)
        install(self, say)
        probe = subprocess.run([str(self.python()), "-c", self.probe], capture_output=True, text=True, check=False)
        if probe.returncode != 0:
            raise EngineError(f"{self.label}'s environment does not import {self.package}: "
                              + " ".join((probe.stderr or "").strip().splitlines()[-1:]))
        (d / "READY").write_text(probe.stdout.strip() + "\n")
        say(f"{self.label} {probe.stdout.strip()} ready")
        return probe.stdout.strip()
