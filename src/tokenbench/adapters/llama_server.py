"""llama.cpp's own ``llama-server``.

- Found by ``/props`` (``default_generation_settings``, ``total_slots``, ``build_info``).
- ``ignore_eos`` fixes the length; ``n_predict`` has priority over ``max_tokens``, so it is sent with the
  same value (and the short check request must send its own short one). ``cache_prompt: false`` keeps its
  prompt cache from serving a repeated prefix; a depth run turns it on to keep its context warm.
- ``-np N`` slots are batched together in one decode; one slot serves one stream at a time.
- Its HTTP library closes the connection after every streamed reply although it answers
  ``Keep-Alive: timeout=5, max=100`` (``tools/server/server-http.cpp``: the streaming callback returns false
  at the end, which the library takes as cancelled), so each request gets a fresh connection.
- ``timings`` in the last chunk: ``predicted_ms`` spans the n-1 steps after the first token.
- ``/v1/responses`` is converted to a chat request with every other field of the body kept, so the fields above
  work there too; ``/v1/messages`` keeps only ``temperature``, ``top_p``, ``top_k``, ``stream`` and
  ``chat_template_kwargs`` (``server_chat_convert_anthropic_to_oai``): no field fixes the length, and its prompt
  cache stays on.
"""

from __future__ import annotations

from typing import Any

from .base import Adapter, Probes, ServerFacts



#: What llama-server says for its build when it was compiled outside a git checkout (llama.cpp's CMake: build
#: number 0, commit "unknown"), as from an sdist's vendored tree: no version, so a run records none from it.
UNKNOWN_BUILD = "b0-unknown"


class LlamaServer(Adapter):
    name = "llama.cpp"
    process_patterns = (("llama.cpp server", r"(^|/)llama-server(\s|$)"),)
    tokenize_path = "/tokenize"
    closes_after_stream = True
    batches_default = None  # it depends on the slots
    metric_names = {
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),  # exported by older builds only
        "prefix_hits": ("llamacpp:prompt_tokens_cached_total",),  # tokens reused from the cache
        # Current names first (llama.cpp 2026: spec_decode_num_*), the pre-2026 names after them.
        "drafts": ("llamacpp:spec_decode_num_drafts_total",),
        "draft_tokens": ("llamacpp:spec_decode_num_draft_tokens_total", "llamacpp:tokens_drafted_total"),
        "accepted_tokens": ("llamacpp:spec_decode_num_accepted_tokens_total",
                            "llamacpp:tokens_drafted_accepted_total"),
        "generation_tokens": ("llamacpp:tokens_predicted_total",),
        "prompt_tokens": ("llamacpp:prompt_tokens_total",),
        "busy_slots_per_decode": ("llamacpp:n_busy_slots_per_decode",),
    }
    health_path = "/health"
    more_context = "raise the server's -c, or fewer slots (-np): its context is split across them"

    def detect(self, p: Probes) -> bool:
        return p.props is not None and ("default_generation_settings" in p.props or "total_slots" in p.props)

    def facts(self, p: Probes) -> ServerFacts:
        props = p.props or {}
        gen = props.get("default_generation_settings")
        gen = gen if isinstance(gen, dict) else {}
        build = props.get("build_info")
        slots = props.get("total_slots")
        ctx = gen.get("n_ctx") or props.get("n_ctx")
        return ServerFacts(
            version=build if isinstance(build, str) and build != UNKNOWN_BUILD else None,
            slots=slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None,
            slot_ctx=ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else None,
        )

    def batches(self, slots: int | None) -> bool | None:
        return None if slots is None else slots > 1

    def output_length_fields(self, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
        if api == "messages":
            return {}  # its Anthropic conversion keeps only the sampling fields it knows: nothing fixes the length
        return {"ignore_eos": True, "n_predict": max_tokens, "cache_prompt": False}

    def warm_context_fields(self) -> dict[str, Any]:
        return {"cache_prompt": True}

    def session_fields(self, agent: int, slots: int | None) -> dict[str, Any]:
        """``cache_prompt`` and slot affinity: agent i keeps slot i mod slots (``id_slot``), so its next turn finds
        its own history in that slot's cache instead of whichever slot is free (tools/server/README.md)."""
        fields: dict[str, Any] = {"cache_prompt": True}
        if slots:
            fields["id_slot"] = agent % slots
        return fields

    def tokenize_request(self, text: str, model: str) -> dict[str, Any]:
        return {"content": text, "add_special": False}

    def detokenize_request(self, ids: list[int], model: str) -> dict[str, Any]:
        return {"tokens": ids}

    def chat_tokenize_steps(self, messages: list[dict[str, Any]], tools: list[Any] | None,
                            model: str) -> list[tuple[str, dict[str, Any]]]:
        """/apply-template renders the messages as a chat request would; /tokenize then counts that text with its
        special tokens, as the server does a chat prompt."""
        body: dict[str, Any] = {"messages": messages}
        if tools:
            body["tools"] = tools
        return [("/apply-template", body), ("/tokenize", {"content": "{prompt}", "add_special": True,
                                                          "parse_special": True})]

    def detokenized_text(self, body: dict[str, Any]) -> str:
        return str(body["content"])

    def server_rates(self, timings: dict[str, Any] | None) -> tuple[float | None, float | None]:
        t = timings or {}
        pp = tg = None
        prompt_n, prompt_ms = _pos(t.get("prompt_n")), _pos(t.get("prompt_ms"))
        if prompt_n is not None and prompt_ms is not None:
            pp = prompt_n / (prompt_ms / 1000)
        pred_n, pred_ms = _pos(t.get("predicted_n")), _pos(t.get("predicted_ms"))
        if pred_n is not None and pred_n > 1 and pred_ms is not None:
            tg = (pred_n - 1) / (pred_ms / 1000)  # the first token comes out of the prompt's pass
        return pp, tg

    def slot_warnings(self, slots: int | None, slot_ctx: int | None, concurrency: int | None,
                      tokens_per_request: int) -> list[str]:
        out = []
        if concurrency and slots and concurrency > slots:
            out.append(f"concurrency {concurrency} exceeds the server's {slots} slots: requests queue; "
                       f"start llama-server with -np {concurrency} for a true level")
        if slot_ctx and tokens_per_request > slot_ctx:
            out.append(f"a request needs {tokens_per_request} tokens of context but each slot has {slot_ctx}: "
                       "raise -c (context is split across slots)")
        return out


def _pos(v: Any) -> float | None:
    """A positive finite number, or None."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 and v == v and v != float("inf")
    return float(v) if ok else None
