"""The embedded engine of a command run without --url (sweep, capacity, depth, quality): build the tiny model
once, start the engine sized for the run, point the run's config at it, and stop it afterwards; ``running`` is
that life, written once for every command."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from .. import registry
from ..errors import UsageError
from . import launch, tiny
from .cache import cache_dir

#: A slot's context is rounded up to this many tokens (a KV-cache block of the engines it starts).
KV_BLOCK = 256
#: The smallest slot context started, whatever the run's prompts.
MIN_CONTEXT = 2048


def slot_context(tokens: int, margin: int = 64) -> int:
    """The context a slot needs for requests of ``tokens`` tokens (prompt and output) and a ``margin`` for the
    chat template: rounded up to a KV block, at least ``MIN_CONTEXT``."""
    return max(MIN_CONTEXT, -(-(tokens + margin) // KV_BLOCK) * KV_BLOCK)


@dataclass(frozen=True, slots=True)
class EmbeddedSpec:
    """Which embedded engine, on which model: what the CLI's --engine, --model-size, --quant and llama.cpp
    options say."""

    engine: str
    model_size: str = "tiny"
    quant: str | None = None
    server_flags: tuple[str, ...] = ()  # the engine's own flags the user gave (llama-server's; vLLM's KV pool)


class RunTarget(Protocol):
    """A run's config as the embedded engine fills it in (SweepConfig, DepthConfig, QualityConfig)."""

    url: str
    model: str | None
    tokenizer: str | None
    embedded: dict[str, Any] | None


@dataclass(slots=True)
class Embedded:
    spec: EmbeddedSpec
    engine: launch.RunningEngine
    model: tiny.TinyModel

    @classmethod
    def start(cls, spec: EmbeddedSpec, note: Callable[[str], None], parallel: int = 1, ctx: int = 8192,
              port: int | None = None) -> Embedded:
        """Build (once) the embedded model and start ``spec.engine`` on it (on ``port``: None, any free one),
        healthy."""
        if tiny.is_built(size=spec.model_size):
            note(f"the embedded {spec.model_size} model, cached in {cache_dir()}")
        else:
            note(f"building the embedded {spec.model_size} model (cached after this first run) in {cache_dir()} …")
        model = tiny.ensure(size=spec.model_size)
        eng = registry.by_launcher(spec.engine)
        gguf = model.gguf(spec.quant) if spec.quant and eng is not None and eng.gguf else None
        if spec.quant and gguf is None:
            raise UsageError(f"--quant applies to the llama engines only, not {spec.engine}")
        note(f"starting the embedded {spec.engine} engine …")
        engine = launch.start(spec.engine, model, parallel=parallel, ctx=ctx, progress=note, gguf=gguf,
                              extra=spec.server_flags, port=port)
        note(f"{spec.engine} engine healthy after {engine.startup_s:.1f} s at {engine.base_url}")
        return cls(spec, engine, model)

    def facts(self) -> dict[str, Any]:
        """What a run records of its embedded engine (its manifest's ``embedded``)."""
        return {"engine": self.spec.engine, "startup_s": self.engine.startup_s, "command": self.engine.command,
                "model": self.model.name, "model_size": self.spec.model_size, "quant": self.spec.quant,
                "engine_version": launch.engine_version(self.spec.engine)}

    def configure(self, cfg: RunTarget) -> None:
        """Point a run at this engine: its URL, served model, tokenizer (unless one was given) and facts; the
        guard watches its process where the config has targets."""
        cfg.url, cfg.model = self.engine.base_url, self.engine.model
        cfg.tokenizer = cfg.tokenizer or str(self.model.hf_dir)
        cfg.embedded = self.facts()
        if hasattr(cfg, "target_pids"):
            setattr(cfg, "target_pids", {self.engine.proc.pid})

    def alive(self) -> bool:
        return self.engine.alive()

    def stop(self) -> None:
        self.engine.stop()


@contextmanager
def running(spec: EmbeddedSpec | None, cfg: RunTarget, note: Callable[[str], None], parallel: int = 1,
            ctx: int = 8192) -> Iterator[Embedded | None]:
    """The embedded engine for the length of a ``with`` block: ``spec``'s engine started with ``parallel`` slots of
    ``ctx`` tokens (``Embedded.start``, its progress through ``note``), ``cfg`` pointed at it
    (``Embedded.configure``), and stopped when the block ends, however it ends (an error, an interrupt).
    ``spec`` None (the run has its --url) starts nothing and yields None."""
    if spec is None:
        yield None
        return
    engine = Embedded.start(spec, note, parallel=parallel, ctx=ctx)
    try:
        engine.configure(cfg)
        yield engine
    finally:
        engine.stop()
