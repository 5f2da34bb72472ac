"""Ollama's OpenAI-compatible API: ``/api/version`` names it; nothing fixes the output length."""

from __future__ import annotations

from .base import Adapter, Probes, ServerFacts


class Ollama(Adapter):
    name = "ollama"
    process_patterns = (("Ollama", r"(^|/)ollama(\s+(serve|runner)|$)"),)
    batches_default = None  # OLLAMA_NUM_PARALLEL decides, and the API does not say

    def detect(self, p: Probes) -> bool:
        return p.ollama_version is not None and "version" in p.ollama_version

    def facts(self, p: Probes) -> ServerFacts:
        v = (p.ollama_version or {}).get("version")
        return ServerFacts(version=v if isinstance(v, str) else None)
