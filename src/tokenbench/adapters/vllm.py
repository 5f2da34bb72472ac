"""vLLM's OpenAI server: ``ignore_eos`` and ``min_tokens`` fix the length (on /v1/responses ``ignore_eos`` alone; on
/v1/messages nothing can); ``/version``, ``/tokenize``."""

from __future__ import annotations

from typing import Any

from .base import Adapter, Probes, ServerFacts


class VLLM(Adapter):
    name = "vllm"
    process_patterns = (("vLLM", r"(^|/|\s)vllm(\s+serve|\.entrypoints)"),)
    tokenize_path = "/tokenize"
    batches_default = True
    metric_names = {
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        "drafts": ("vllm:spec_decode_num_drafts_total",),
        "draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
        "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
        "generation_tokens": ("vllm:generation_tokens_total",),
        "prompt_tokens": ("vllm:prompt_tokens_total",),
        # a histogram's sum and count are counters: the mean time a level's requests waited in its queue, whatever
        # moments the gauges were sampled at
        "queue_time_sum": ("vllm:request_queue_time_seconds_sum",),
        "queue_time_count": ("vllm:request_queue_time_seconds_count",),
        # prefix-cache hits by the tier that supplied them (device, host, disk, p2p), labelled "source" (0.32)
        "cached_by_tier": ("vllm:prompt_tokens_cached_by_source_total",),
    }
    health_path = "/health"
    more_context = "raise vLLM's --max-model-len"
    stream_options = {"include_usage": True, "continuous_usage_stats": True}

    def chat_tokenize_steps(self, messages: list[dict[str, Any]], tools: list[Any] | None,
                            model: str) -> list[tuple[str, dict[str, Any]]]:
        """Its /tokenize takes chat messages and renders them with the served model's template."""
        body: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        return [("/tokenize", body)]

    def detect(self, p: Probes) -> bool:
        if p.owned_by == "vllm":
            return True
        return p.version is not None and "version" in p.version and p.owned_by != "llamacpp"

    def facts(self, p: Probes) -> ServerFacts:
        """The version from ``/version``; the context a request may fill from ``/v1/models``, whose entries carry
        the served model's ``max_model_len`` (a longer request is refused with HTTP 400)."""
        v = (p.version or {}).get("version")
        lens = {m.get("max_model_len") for m in p.model_entries}
        ctx = lens.pop() if len(lens) == 1 else None
        ok = isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0
        return ServerFacts(version=v if isinstance(v, str) else None, slot_ctx=ctx if ok else None)

    def slot_warnings(self, slots: int | None, slot_ctx: int | None, concurrency: int | None,
                      tokens_per_request: int) -> list[str]:
        if slot_ctx and tokens_per_request > slot_ctx:
            return [f"a request needs {tokens_per_request} tokens of context but the server's max_model_len is "
                    f"{slot_ctx}: vLLM refuses such a request; {self.more_context}"]
        return []

    def output_length_fields(self, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
        """vLLM 0.32: its Responses request has ``ignore_eos`` but no ``min_tokens`` (``ignore_eos`` and
        ``max_output_tokens`` fix the length); its Anthropic Messages request has neither (a plain pydantic model:
        unknown fields are dropped), so there the output ends where the model ends it."""
        if api == "messages":
            return {}
        if api == "responses":
            return {"ignore_eos": True}
        return {"ignore_eos": True, "min_tokens": max_tokens}
