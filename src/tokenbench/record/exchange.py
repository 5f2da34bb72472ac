"""What the proxy hands the log writer about one answered request: the request's bytes and the answer's bytes as
they passed through, with the times they did. Nothing in it is parsed yet (``chat``, ``anthropic`` and
``responses`` parse, after the answer ended, in the writer's process). Of the headers it holds only the two that
name a session, and, for a lengths-only log's tokenizer, the client's key headers, in memory only: the writer
never writes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: The requests recorded, by the path they were sent to: OpenAI chat completions, Anthropic messages, OpenAI
#: responses.
Api = Literal["chat", "messages", "responses"]
#: Path endings of the recorded APIs (the query string aside: Claude Code sends ``/v1/messages?beta=true``).
API_PATHS: tuple[tuple[str, Api], ...] = (("/chat/completions", "chat"), ("/messages", "messages"),
                                          ("/responses", "responses"))
#: The header a client may name its session with, and its parent session's.
SESSION_HEADER = "X-Session-ID"
PARENT_HEADER = "X-Parent-Session-ID"


def api_of(method: str, path: str) -> Api | None:
    """The recorded API a request is, or None: forwarded, never recorded (``/v1/models``, ``/metrics``, a GET)."""
    if method != "POST":
        return None
    for ending, api in API_PATHS:
        if path.endswith(ending):
            return api
    return None


@dataclass(slots=True)
class Exchange:
    """One request the upstream answered in full (a 2xx status, its body to the end), as it passed. Times are
    seconds on the log's clock: ``sent`` when the proxy sent it upstream, ``first_byte`` when the answer's
    first body byte came back, ``end`` when the proxy had written the answer's last byte to the client."""

    api: Api
    body: bytes
    sent: float
    first_byte: float
    end: float
    status: int
    content_type: str
    content_encoding: str
    chunks: list[bytes] = field(default_factory=list)
    session: str | None = None  # the X-Session-ID header, where sent
    parent: str | None = None  # the X-Parent-Session-ID header, where sent
    #: another request of the same X-Session-ID, sent before this one, had not ended when this one did
    overlapped: bool = False
    #: the client's key headers, for the upstream's tokenizer (lengths-only logs): held in memory, never written
    auth: dict[str, str] = field(default_factory=dict, repr=False)
