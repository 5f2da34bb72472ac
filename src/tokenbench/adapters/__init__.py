"""Server adapters: one module per serving engine, all behind ``base.Adapter``.

``detect`` tries them in the order of ``ADAPTERS`` (the most specific probes first); a server none of them
recognises is driven as a plain OpenAI-compatible endpoint by ``GENERIC``.
"""

from __future__ import annotations

from .. import registry
from .base import Adapter, Probes, ServerFacts
from .llama_cpp_python import LlamaCppPython
from .llama_server import LlamaServer
from .ollama import Ollama
from .sglang import SGLang
from .transformers import Transformers
from .vllm import VLLM

ADAPTERS: tuple[Adapter, ...] = (LlamaServer(), SGLang(), VLLM(), Ollama(), LlamaCppPython(), Transformers())
GENERIC = Adapter()

__all__ = ["ADAPTERS", "GENERIC", "Adapter", "Probes", "ServerFacts", "by_name", "detect", "metric_names",
           "process_patterns"]


def detect(p: Probes) -> Adapter:
    for a in ADAPTERS:
        if a.detect(p):
            return a
    return GENERIC


def by_name(name: str | None) -> Adapter:
    """The adapter for an engine name as stored in a result (any spelling the registry knows); GENERIC when
    unknown."""
    eng = registry.find(name)
    return next((a for a in ADAPTERS if eng is not None and type(a).__name__ == eng.adapter), GENERIC)


def metric_names() -> dict[str, tuple[str, ...]]:
    """Every engine's Prometheus names per summarized quantity."""
    out: dict[str, tuple[str, ...]] = {}
    for a in ADAPTERS:
        for key, names in a.metric_names.items():
            out[key] = out.get(key, ()) + names
    return out


def process_patterns() -> list[tuple[str, str]]:
    return [pat for a in ADAPTERS for pat in a.process_patterns]
