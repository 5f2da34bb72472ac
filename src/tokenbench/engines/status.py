"""What each embedded engine needs, whether it is ready here, and making the slow ones ahead of time; the same for
the reference tools the tests cross-check against that live in an environment of their own (AIPerf)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from .. import registry
from ..errors import EngineError
from . import aiperf_env, llamacpp_build, vllm_env
from .launch import ENGINES, canonical, install_line

#: Reference tools made like an engine (an environment of their own in the cache), served by no command.
TOOLS: tuple[str, ...] = ("aiperf",)
#: What ``tokenbench engines`` lists and builds.
NAMES: tuple[str, ...] = ENGINES + TOOLS

#: What making each engine costs on a 2-core, 24 GiB machine, measured (docs/engines.md's table says how).
NEEDS = {
    "transformers": "extra 'engine': 1.5 GB; starts in 8-30 s",
    "vllm": "own env on first use: 2.5-9 min, 3.4 GB; starts in 25-90 s",
    "llama-server": "built on first use: 10-17 min, 35 MB; starts in < 1 s",
    "llama-cpp-python": "extra 'llama-cpp-python': compiles ~6 min",
    "aiperf": "reference tool (trace replay cross-check): own env on first use, 1-5 min, 1.2 GB",
}


@dataclass(slots=True, frozen=True)
class EngineStatus:
    name: str
    ready: bool
    where: str
    needs: str


def known(name: str) -> bool:
    """An embedded engine or a reference tool, by any of its names."""
    eng = registry.find(name)
    return name in TOOLS or eng is not None and eng.launcher is not None


def status(name: str) -> EngineStatus:
    if name == "aiperf":
        return EngineStatus(name, aiperf_env.ready(), str(aiperf_env.env_dir()), NEEDS[name])
    name = canonical(name)
    if name == "transformers":
        ok = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("torch") is not None
        where = "this Python environment"
    elif name == "vllm":
        ok, where = vllm_env.ready(), str(vllm_env.env_dir())
    elif name == "llama-server":
        ok, where = all(llamacpp_build.tool(t) for t in llamacpp_build.TARGETS), str(llamacpp_build.bin_dir())
    else:
        ok = importlib.util.find_spec("llama_cpp") is not None
        where = "this Python environment"
    return EngineStatus(name, ok, where, NEEDS[name])


def build(name: str, progress: Callable[[str], None]) -> None:
    """Make ``name`` ready: build or install what it needs (the pip extras are the user's to install)."""
    if name == "aiperf":
        aiperf_env.ensure(progress)
        return
    name = canonical(name)
    if name == "vllm":
        vllm_env.ensure(progress)
    elif name == "llama-server":
        llamacpp_build.ensure_tools(progress)
    elif not status(name).ready:
        raise EngineError(install_line(name))


__all__ = ["ENGINES", "NAMES", "TOOLS", "EngineStatus", "build", "known", "status"]
