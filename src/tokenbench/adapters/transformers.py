"""Transformers serve: a float ``logit_bias`` of -100.0 on EOS fixes the length (5.23 rejects an integer bias
and the whole server shuts down); it answers 422 to any field outside the OpenAI schema, lists its Hugging Face
cache rather than the served model at ``/v1/models``, and answers 500 there when it has no cache."""

from __future__ import annotations

from typing import Any

from .base import Adapter, Probes


class Transformers(Adapter):
    name = "transformers"
    process_patterns = (
        ("Transformers serve", r"transformers(\.cli\.transformers)?\s+serve|(^|/)transformers\s+serve"),
    )
    lists_served_model = False
    batches_default = True  # with --continuous-batching, as tokenbench starts it
    health_path = "/health"

    def detect(self, p: Probes) -> bool:
        paths = p.openapi_paths
        return "/v1/systemone" in paths or ("/v1/responses" in paths and "uvicorn" in p.server_header)

    def output_length_fields(self, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
        # Ignored on /v1/completions by 5.23; every response's length is verified anyway.
        if eos_token_id is not None and api == "chat":
            return {"logit_bias": {str(eos_token_id): -100.0}}
        return {}
