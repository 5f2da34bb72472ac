"""Real servers the engine tests share: one per configuration for the whole session.

Starting a server is most of what an engine test costs (vLLM about 30 s on 2 cores, Transformers serve about 8 s),
so a configuration (``Config``: engine, model size, slots, context per slot, extra flags) is started the first
time a test asks for it and kept for every later test that asks for the same one. ``tests/conftest.py`` names the
configurations the tests use (``SHARED``), one fixture each, runs the tests on them last, grouped by
configuration, and stops each server after the last test of the session that uses it, so the rest of the suite
never runs beside them (the guard's tests count the serving processes on this machine). The slow starts (vLLM's,
about 30 s of mostly importing, three of them; Transformers', about 8 s) are made beside a test that times nothing
(``Servers.prestart``), so the tests after it find their servers up.

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
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
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
    """The session's servers, one per ``Config``, started on first use or ahead of it (``prestart``)."""

    def __init__(self, models: ModelGuard) -> None:
        self.models = models
        self.running: dict[Config, Serving] = {}
        self.starting: dict[Config, Future[Serving]] = {}
        self._ahead: ThreadPoolExecutor | None = None

    def _start(self, config: Config) -> Serving:
        model = self.models.model(config.size)
        server = launch.start(config.engine, model, parallel=config.parallel, ctx=config.ctx, extra=config.extra)
        return Serving(server, model)

    def prestart(self, configs: Iterable[Config]) -> None:
        """Start ``configs`` that do not run yet, one after another in a thread of their own, while the caller goes
        on: a start is mostly imports, on one core; two at once would only share it. ``get`` waits for its own,
        and raises what stopped it. The thread lives until ``stop_all``, after the servers it started: a server's
        death signal follows the thread that started it (``child.spawn``)."""
        for config in configs:
            if config in self.running or config in self.starting:
                continue
            if self._ahead is None:
                self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prestart")
            self.starting[config] = self._ahead.submit(self._start, config)

    def get(self, config: Config) -> Serving:
        """The running server of ``config``; started now if none runs (or the one that ran has died)."""
        if config in self.starting:
            self.running[config] = self.starting.pop(config).result()
        got = self.running.get(config)
        if got is not None and got.server.alive():
            return got
        if got is not None:
            got.server.stop()
        self.running[config] = self._start(config)
        return self.running[config]

    def stop(self, config: Config) -> None:
        """Stop ``config``'s server; one still starting ahead is waited for, one not begun never starts."""
        pending = self.starting.pop(config, None)
        if pending is not None and not pending.cancel() and pending.exception() is None:
            pending.result().server.stop()
        got = self.running.pop(config, None)
        if got is not None:
            got.server.stop()

    def stop_all(self) -> None:
        for pending in self.starting.values():  # what has not begun starting, first, so none begins now
            pending.cancel()
        for config in [*self.starting, *self.running]:
            self.stop(config)
        if self._ahead is not None:
            self._ahead.shutdown()
            self._ahead = None


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
