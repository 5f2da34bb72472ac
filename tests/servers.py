"""Real servers the engine tests share: one per configuration for the whole session.

Starting a server is most of what an engine test costs (vLLM about 30 s on 2 cores, Transformers serve about 8 s),
so a configuration (``Config``: engine, model size, slots, context per slot, extra flags) is started the first
time a test asks for it and kept for every later test that asks for the same one. ``tests/conftest.py`` names the
configurations the tests use (``SHARED``), one fixture each, runs the tests on them last, grouped by
configuration, and stops each server after the last test of the session that uses it, so the rest of the suite
never runs beside them (the guard's tests count the serving processes on this machine).

A shared server is not fresh: its prefix cache holds what earlier tests sent and its ``/metrics`` counters are not
at zero. A test on one reads counters as the difference over its own requests and sends prompts of its own (a new
seed); a test that needs a server state of its own (one it kills, restarts, times the start of, or the only
serving process on the machine) starts its own with ``launch.start``.

The built models are checked as well: ``ModelGuard`` takes a fingerprint of a cached model's files when a test
first gets it and fails the session if one of them changed by its end, since the cache is the user's and outlives
the session.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tokenbench.engines import launch, tiny
from tokenbench.engines.launch import RunningEngine
from tokenbench.prometheus import parse


@dataclass(frozen=True, slots=True)
class Config:
    """What makes two servers the same server: started from the same arguments of ``launch.start``."""

    engine: str
    size: str = "tiny"
    parallel: int = 1
    ctx: int = 8192  # tokens per slot
    extra: tuple[str, ...] = ()  # the engine's own flags (llama-server's, vLLM's)

    def __str__(self) -> str:
        extra = f" {' '.join(self.extra)}" if self.extra else ""
        return f"{self.engine} {self.size} x{self.parallel} ctx {self.ctx}{extra}"


class Serving(NamedTuple):
    """A running server and the model it serves."""

    server: RunningEngine
    model: tiny.TinyModel


class ModelGuard:
    """The cached models' files as first seen (size and modification time), to tell whether a test changed one."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.seen: dict[Path, tuple[int, int]] = {}

    def model(self, size: str) -> tiny.TinyModel:
        """The model of ``size`` from the cache, built on first use (``tiny.ensure``: safe beside another build)."""
        model = tiny.ensure(self.cache, size=size)
        for root in (model.hf_dir, model.gguf_path):
            for f in [root] if root.is_file() else sorted(root.rglob("*")):
                if f.is_file() and f not in self.seen:
                    st = f.stat()
                    self.seen[f] = (st.st_size, st.st_mtime_ns)
        return model

    def changed(self) -> list[str]:
        """The files seen that are gone or differ now."""
        out = []
        for f, was in sorted(self.seen.items()):
            try:
                st = f.stat()
            except OSError:
                out.append(f"{f}: removed")
                continue
            if (st.st_size, st.st_mtime_ns) != was:
                out.append(f"{f}: changed")
        return out


class Servers:
    """The session's servers, one per ``Config``, started on first use."""

    def __init__(self, models: ModelGuard) -> None:
        self.models = models
        self.running: dict[Config, Serving] = {}

    def get(self, config: Config) -> Serving:
        """The running server of ``config``; started now if none runs (or the one that ran has died)."""
        got = self.running.get(config)
        if got is not None and got.server.alive():
            return got
        if got is not None:
            got.server.stop()
        model = self.models.model(config.size)
        server = launch.start(config.engine, model, parallel=config.parallel, ctx=config.ctx, extra=config.extra)
        self.running[config] = Serving(server, model)
        return self.running[config]

    def stop(self, config: Config) -> None:
        got = self.running.pop(config, None)
        if got is not None:
            got.server.stop()

    def stop_all(self) -> None:
        for config in list(self.running):
            self.stop(config)


def hub_cache(root: Path, model: tiny.TinyModel) -> tuple[Path, str]:
    """The model's tokenizer as a Hugging Face cache entry, and its repo name. AIPerf 0.13 cannot load a tokenizer
    from a local directory offline: its decoding workers force HF_HUB_OFFLINE, and offline it looks the name up
    as a cached repo (snapshot_download(local_files_only=True)), which a path is not."""
    repo, rev = "tokenbench/served", "0" * 40
    entry = root / f"models--{repo.replace('/', '--')}"
    snap = entry / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    (entry / "refs").mkdir(exist_ok=True)
    (entry / "refs" / "main").write_text(rev)
    for f in model.hf_dir.iterdir():
        if f.name.startswith("tokenizer") or f.name.endswith("config.json"):
            (snap / f.name).unlink(missing_ok=True)
            (snap / f.name).symlink_to(f)
    return root, repo


def metrics(server: RunningEngine) -> dict[str, float]:
    """The server's /metrics now, parsed."""
    with urllib.request.urlopen(server.base_url[:-3] + "/metrics", timeout=10) as f:
        return parse(f.read().decode())
