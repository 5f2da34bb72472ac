"""llama-cpp-python's server (``python -m llama_cpp.server``): one request at a time, one token per chunk, no
usage while streaming; ``min_tokens`` and a ``logit_bias`` of -100 on EOS fix the length."""

from __future__ import annotations

from typing import Any

from .base import Adapter, Probes


class LlamaCppPython(Adapter):
    name = "llama-cpp-python"
    process_patterns = (("llama-cpp-python server", r"llama_cpp\.server"),)
    tokenize_path = "/extras/tokenize"
    one_token_per_chunk = True
    batches_default = False

    def detect(self, p: Probes) -> bool:
        paths = p.openapi_paths
        return "/extras/tokenize" in paths or "/v1/engines/copilot-codex/completions" in paths

    def output_length_fields(self, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
        out: dict[str, Any] = {"min_tokens": max_tokens}
        if eos_token_id is not None:
            out["logit_bias"] = {str(eos_token_id): -100.0}
        return out

    def tokenize_request(self, text: str, model: str) -> dict[str, Any]:
        return {"input": text, "model": model}

    def detokenize_request(self, ids: list[int], model: str) -> dict[str, Any]:
        return {"tokens": ids, "model": model}

    def detokenized_text(self, body: dict[str, Any]) -> str:
        return str(body["text"])

    def slot_warnings(self, slots: int | None, slot_ctx: int | None, concurrency: int | None,
                      tokens_per_request: int) -> list[str]:
        if concurrency and concurrency > 1:
            return ["llama-cpp-python's server runs one request at a time: concurrent requests only queue"]
        return []
