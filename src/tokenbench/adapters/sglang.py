"""SGLang: ``ignore_eos`` fixes the length; ``/get_server_info`` names it."""

from __future__ import annotations

from typing import Any

from .base import Adapter, Probes, ServerFacts


class SGLang(Adapter):
    name = "sglang"
    process_patterns = (("SGLang", r"sglang\.launch_server|sglang\.srt"),)
    batches_default = True
    metric_names = {
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_cache_usage": ("sglang:token_usage",),
        "generation_tokens": ("sglang:generation_tokens_total",),
        "prompt_tokens": ("sglang:prompt_tokens_total",),
    }
    health_path = "/health"

    def detect(self, p: Probes) -> bool:
        return p.sglang_info is not None and ("version" in p.sglang_info or "server_args" in p.sglang_info)

    def facts(self, p: Probes) -> ServerFacts:
        v = (p.sglang_info or {}).get("version")
        return ServerFacts(version=v if isinstance(v, str) else None)

    def output_length_fields(self, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
        return {"ignore_eos": True}
