"""The one protocol every server adapter implements, and the typed facts discovery gathers for it.

An adapter holds everything that differs between serving engines: how to recognise one and read its version,
whether ``/v1/models`` lists the served model, the request fields that fix the output length, its tokenize
endpoint, its slots and context, its ``/metrics`` names, whether it batches concurrent requests, and the
process names the guard looks for. Adding a server means adding one module beside this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


def _obj(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


@dataclass(slots=True, frozen=True)
class Probes:
    """What the discovery GETs returned, each parsed JSON object or None (absent, not 200, not an object)."""

    models: dict[str, Any] | None = None  # /v1/models
    server_header: str = ""
    version: dict[str, Any] | None = None  # /version (vLLM)
    props: dict[str, Any] | None = None  # /props (llama.cpp's llama-server)
    sglang_info: dict[str, Any] | None = None  # /get_server_info (SGLang)
    ollama_version: dict[str, Any] | None = None  # /api/version (Ollama)
    openapi: dict[str, Any] | None = None  # /openapi.json (FastAPI servers)

    @classmethod
    def of(cls, models: Any, server_header: str, version: Any, props: Any, sglang_info: Any,
           ollama_version: Any, openapi: Any) -> Probes:
        return cls(_obj(models), server_header, _obj(version), _obj(props), _obj(sglang_info),
                   _obj(ollama_version), _obj(openapi))

    @property
    def model_entries(self) -> list[dict[str, Any]]:
        data = (self.models or {}).get("data")
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []

    @property
    def owned_by(self) -> str | None:
        entries = self.model_entries
        v = entries[0].get("owned_by") if entries else None
        return v if isinstance(v, str) else None

    @property
    def openapi_paths(self) -> dict[str, Any]:
        paths = (self.openapi or {}).get("paths")
        return paths if isinstance(paths, dict) else {}


@dataclass(slots=True)
class ServerFacts:
    """What an adapter reads off a detected server."""

    version: str | None = None
    slots: int | None = None  # parallel slots (llama.cpp)
    slot_ctx: int | None = None  # the context one request may fill (llama.cpp: a slot's; vLLM: max_model_len)


class Adapter:
    """Defaults for a plain OpenAI-compatible server; each engine's module overrides what differs."""

    #: The engine's name as recorded in every result's manifest: its registry name (the registry holds its other
    #: spellings, and names this class as its adapter).
    name: ClassVar[str] = "openai-compatible"
    #: (label, regex on a command line): the guard refuses a bench that shares the machine with these.
    process_patterns: ClassVar[tuple[tuple[str, str], ...]] = ()
    #: Root-relative path of its tokenize endpoint, or None.
    tokenize_path: ClassVar[str | None] = None
    #: ``/v1/models`` lists the model it serves (Transformers serve lists its Hugging Face cache instead).
    lists_served_model: ClassVar[bool] = True
    #: It streams exactly one generated token per chunk, so counting chunks is exact without usage.
    one_token_per_chunk: ClassVar[bool] = False
    #: The request's ``stream_options``: the usage chunk at the end everywhere; where a server can also put its
    #: running token count on every chunk (vLLM), that too, so the chunk rule is the server's own count.
    stream_options: ClassVar[dict[str, bool]] = {"include_usage": True}
    #: It closes the connection after every streamed reply even when it advertises keep-alive.
    closes_after_stream: ClassVar[bool] = False
    #: Concurrent requests are batched (True), served one at a time (False), or it depends (None).
    batches_default: ClassVar[bool | None] = None
    #: Prometheus names per summarized quantity, newest first; telemetry reads the first one present.
    metric_names: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: The root-relative path that says the server is up (for embedded engines and cold starts).
    health_path: ClassVar[str] = "/v1/models"
    #: What gives a request more context on this server, said where one does not fit.
    more_context: ClassVar[str] = "serve a longer context"

    def detect(self, p: Probes) -> bool:
        return False

    def facts(self, p: Probes) -> ServerFacts:
        return ServerFacts()

    def batches(self, slots: int | None) -> bool | None:
        """Whether concurrent requests run together, from what the server said about itself."""
        return self.batches_default

    def output_length_fields(self, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
        """The request fields that make it generate exactly ``max_tokens`` tokens, as far as it allows."""
        return {}

    def check_fields(self, max_tokens: int, eos_token_id: int | None, api: str) -> dict[str, Any]:
        """Fields for the short check request before a run: the same kind of request, a short output."""
        fields = self.output_length_fields(max_tokens, eos_token_id, api)
        fields.pop("min_tokens", None)
        return fields

    def warm_context_fields(self) -> dict[str, Any]:
        """Fields that let a depth run reuse the context it just filled (a prefix cache)."""
        return {}

    def session_fields(self, agent: int, slots: int | None) -> dict[str, Any]:
        """Fields that let an agent's next turn reuse the history its last turn left in the server's cache (a prefix
        cache is on by default where the server has one: vLLM, SGLang; llama.cpp needs to be asked, per slot)."""
        return self.warm_context_fields()

    def tokenize_request(self, text: str, model: str) -> dict[str, Any]:
        return {"model": model, "prompt": text, "add_special_tokens": False}

    def detokenize_request(self, ids: list[int], model: str) -> dict[str, Any]:
        return {"model": model, "tokens": ids}

    def chat_tokenize_steps(self, messages: list[dict[str, Any]], tools: list[Any] | None,
                            model: str) -> list[tuple[str, dict[str, Any]]]:
        """How its endpoints count a chat request's prompt as its chat template renders it: root-relative paths
        and bodies to POST in turn, the last answering ``tokens``; a step's body may hold ``{prompt}``, the text
        the step before answered as ``prompt``. Empty: it tokenizes text only."""
        return []

    def detokenized_text(self, body: dict[str, Any]) -> str:
        return str(body["prompt"])

    def server_rates(self, timings: dict[str, Any] | None) -> tuple[float | None, float | None]:
        """(prefill, decode) tokens per second from the server's own per-request timings, if it sends them."""
        return None, None

    def slot_warnings(self, slots: int | None, slot_ctx: int | None, concurrency: int | None,
                      tokens_per_request: int) -> list[str]:
        return []
