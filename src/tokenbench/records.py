"""The raw truth of one request. Everything reported is derived from these and can be recomputed."""

from __future__ import annotations

from array import array
from collections.abc import MutableSequence
from dataclasses import dataclass, field
from typing import Any, Literal

Phase = Literal["warmup", "measured"]
TokenSource = Literal["usage", "server_timings", "tokenizer", "chunks"]


@dataclass(slots=True)
class RequestRecord:
    """One request. Times are ``time.perf_counter_ns()`` values taken as each network read returned."""

    index: int
    phase: Phase = "measured"
    scheduled_ns: int | None = None  # open-loop levels: when the arrival process said to send
    sent_ns: int = 0
    written_ns: int | None = None  # the request's last byte handed to the socket (aiohttp_path.trace_config, or the lean path)
    first_byte_ns: int | None = None
    #: first chunk carrying a generated token of any kind, its text visible or held back (the chunk rule, wire.Chunk)
    first_token_ns: int | None = None
    first_text_ns: int | None = None  # first chunk with visible text (reasoning or answer)
    first_answer_ns: int | None = None  # first chunk carrying answer (non-reasoning) content
    #: first chunk carrying a tool call's tokens: chat's ``delta.tool_calls``, a Messages ``tool_use`` block's start
    #: or ``input_json_delta``, a Responses ``function_call`` item's start or ``function_call_arguments.delta``
    first_tool_ns: int | None = None
    end_ns: int | None = None  # last byte of the response
    #: token-bearing chunks only, held-back ones included; a list while the stream is read, packed when it ends
    chunk_ns: MutableSequence[int] = field(default_factory=list)
    #: characters of text in each of those chunks (0: held back)
    chunk_chars: MutableSequence[int] = field(default_factory=list)
    reasoning_chunks: int = 0
    answer_text: str = ""
    reasoning_text: str = ""
    #: the lengths of the two texts once released (release_text): what a stored record keeps of them
    released_chars: tuple[int, int] | None = None
    input_tokens: int | None = None
    input_tokens_source: TokenSource | None = None
    expected_input_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: TokenSource | None = None
    reasoning_tokens: int | None = None
    expected_output_tokens: int | None = None
    #: prompt tokens the server served from its prefix cache: ``usage.prompt_tokens_details.cached_tokens``, or
    #: llama.cpp's ``timings.cache_n``; None where the server did not say
    cached_tokens: int | None = None
    cached_tokens_source: TokenSource | None = None
    #: an agent session's request (sessions.py): which session, which turn (0 first), the time the agent thought
    #: before it (ms), and whether the turn began with a marker that kept every cache from serving it
    session: int | None = None
    turn: int | None = None
    think_ms: float | None = None
    cache_busted: bool | None = None
    #: a replayed subagent's call: the session (tree replayed) it was spawned by
    parent: int | None = None
    finish_reason: str | None = None
    server_timings: dict[str, Any] | None = None  # llama.cpp's "timings" object when sent
    malformed_events: int = 0  # events the wire boundary refused (wire.py)
    http_status: int | None = None
    connection_retries: int = 0  # sends that died on a dead kept-alive connection before the server saw them
    error_kind: str | None = None  # None: success
    error: str | None = None

    @property
    def said_cached(self) -> bool:
        """Whether the server said how many of this request's prompt tokens it served from its prefix cache."""
        return self.cached_tokens is not None and bool(self.input_tokens)

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def ttft_ns(self) -> int | None:
        return None if self.first_token_ns is None else self.first_token_ns - self.sent_ns

    @property
    def e2e_ns(self) -> int | None:
        return None if self.end_ns is None else self.end_ns - self.sent_ns

    def pack(self) -> None:
        """The chunk stamps and sizes into machine words (``array``): 8 and 2 bytes a chunk instead of a list's
        40 and 8, for as long as the level keeps its records (a soak's hour of them). Done once, when the stream
        ends: a list takes a chunk's append on the hot path five times faster than an array."""
        if type(self.chunk_ns) is not array:
            self.chunk_ns = array("q", self.chunk_ns)
        if type(self.chunk_chars) is not array:
            try:
                self.chunk_chars = array("H", self.chunk_chars)  # 2 bytes: a chunk's text is rarely 64K characters
            except OverflowError:
                self.chunk_chars = array("i", self.chunk_chars)

    def release_text(self) -> None:
        """The generated text let go once its reader has it (an agent session's next turn): a level keeps its
        records until it ends, and no metric reads the text. Its lengths are kept, as a stored record keeps them."""
        if self.released_chars is None:
            self.released_chars = (len(self.answer_text), len(self.reasoning_text))
            self.answer_text = self.reasoning_text = ""

    def to_dict(self, keep_text: bool = False) -> dict[str, Any]:
        """The record's fields, shallow: its lists are shared, not copied (``dataclasses.asdict`` deep-copied
        every chunk stamp, 657 µs for a 512-token record against 1.7 µs; it was measured at 14.5% of the client's
        time in storing records), but for packed stamps, which come out as lists (5 µs for 512). Serialise it; do not
        change it."""
        d = {name: getattr(self, name) for name in _FIELDS}
        for name in _PACKED:
            if type(d[name]) is array:
                d[name] = d[name].tolist()
        if not keep_text:
            # Generated text is large and not needed to recompute any metric; keep its length.
            d["answer_chars"], d["reasoning_chars"] = self.released_chars or (len(self.answer_text),
                                                                              len(self.reasoning_text))
            del d["answer_text"], d["reasoning_text"]
        del d["released_chars"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        # a record stored before a field existed reads with its default
        rec = cls(**{k: v for k, v in d.items() if k in _KNOWN})
        rec.pack()
        return rec


_FIELDS = tuple(RequestRecord.__dataclass_fields__)
_KNOWN = frozenset(_FIELDS)
_PACKED = ("chunk_ns", "chunk_chars")
