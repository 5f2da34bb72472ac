"""Incremental Server-Sent Events parser.

Follows the WHATWG event-stream rules that matter for LLM servers: lines end in LF, CRLF or CR;
a blank line dispatches the event; ``:`` starts a comment (keep-alives); several ``data:`` lines
of one event are joined with LF; a single space after the colon is dropped. There is no limit on
line length (aiohttp's line reader stops at 64 KiB, so we never use it), and an event may arrive
split across any number of network reads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class SSEEvent:
    data: str
    event: str = "message"


class SSEParser:
    """Feed raw bytes as they arrive; get back the events they complete."""

    __slots__ = ("_buf", "_data", "_data_bytes", "_event", "_pending_cr")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._pending_cr:
            # A CR ended the previous read: a LF now is the second half of that CRLF.
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
            self._pending_cr = False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                self._pending_cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            self._buf += chunk  # a bytearray grows in place: a line split over many reads costs linear time
            return []
        buf = bytes(self._buf) + chunk if self._buf else chunk
        *lines, rest = buf.split(b"\n")
        self._buf = bytearray(rest)
        events: list[SSEEvent] = []
        for raw in lines:
            if not raw:
                if self._data:
                    events.append(SSEEvent("\n".join(self._data), self._event or "message"))
                self._data = []
                self._data_bytes = 0
                self._event = ""
                continue
            if raw[:1] == b":":
                continue  # comment / keep-alive
            field, sep, value = raw.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                self._data.append(value.decode("utf-8", errors="replace"))
                self._data_bytes += len(value)
            elif field == b"event":
                self._event = value.decode("utf-8", errors="replace")
            # "id" and "retry" are irrelevant to a benchmark client.
        return events

    @property
    def pending_bytes(self) -> int:
        """Bytes held for a line or an event not finished yet."""
        return len(self._buf) + self._data_bytes

    def close(self) -> list[SSEEvent]:
        """End of stream: an event not followed by a blank line is still delivered."""
        events = self.feed(b"\n\n") if (self._buf or self._data) else []
        return events
