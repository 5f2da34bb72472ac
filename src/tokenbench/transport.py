"""How a request reaches the server and its answer comes back: the interface both send paths keep.

``client.StreamClient`` builds a request's body and decides how often to send it; a ``Transport`` sends it once and
stamps what comes back. There are two:

- ``http1.LeanTransport``, the lean path for plain ``http://``: the request is one ``transport.write`` made
  synchronously from the start of the send, on a pooled keep-alive connection; each read is stamped in the
  protocol's ``data_received``.
- ``aiohttp_path.AiohttpTransport``: aiohttp's client, for ``https://``, ``StreamClient(lean=False)`` and a header
  the lean path cannot write; each read is stamped as ``readany`` returns it.

Both keep to the hot path's rule: a read is stamped with ``perf_counter_ns`` and kept as bytes, nothing else
happens per read. The bytes become events and the record in ``decoder.StreamDecoder`` (where TTFT is stamped),
after the stream ends, or every ``REPLAY_BYTES`` of a long one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .wire import WireError, loads

if TYPE_CHECKING:
    from .decoder import StreamDecoder

#: Bytes of a stream held unparsed before they are decoded (a long stream's memory stays bounded by this).
REPLAY_BYTES = 1 << 20

#: A stream read to its end: its reads (body bytes), each read's stamp, and the stamp of its end.
Stream = tuple[list[bytes], list[int], int]


class Transport(Protocol):
    """One send path: a prepared request on the wire, each read stamped, its connections closed at the end."""

    async def send(self, payload: bytes, decoder: StreamDecoder, fresh: bool,
                   headers: dict[str, str] | None = None) -> tuple[bool, Stream | None]:
        """Send ``payload`` (the request's body) once and fill ``decoder.record``'s send stamps, status and error.

        ``headers``: the request's own, sent beside the path's (a request's value wins over the path's for the
        same name, case-insensitively); the client has checked them (client.refused_header).

        ``fresh``: on a new connection that is closed after it (the send before died unanswered). Returns whether
        the attempt counts (False: the connection died before the server answered a byte, so the server never
        saw the request and it may be sent again), and the stream read to its end, or None where the record holds
        what went wrong (an HTTP error, a timeout, a broken stream: the events that came are replayed into
        ``decoder``). Never raises for what a server does; an interruption (cancellation) is raised after the
        reads that arrived are replayed."""
        ...

    async def close(self) -> None:
        """Close the connections this path holds (an aiohttp session is its owner's to close)."""
        ...


def merged_headers(path: dict[str, str], own: dict[str, str]) -> dict[str, str]:
    """A send path's headers with a request's own over them: the request's value wins for a name they share
    (header names are case-insensitive)."""
    names = {k.lower() for k in own}
    return {**{k: v for k, v in path.items() if k.lower() not in names}, **own}


def error_message(text: str) -> str:
    """The server's own words from an error body (OpenAI ``{"error": {"message"}}``, FastAPI ``detail``)."""
    try:
        obj = loads(text, "error body")
    except WireError:
        return " ".join(text.split())[:300]
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return " ".join(str(err).split())[:300]
    return " ".join(text.split())[:300]
