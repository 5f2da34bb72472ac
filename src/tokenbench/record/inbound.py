"""The agent's side of ``tokenbench record``'s forwarder: its requests read from the bytes it sent, one at a time,
as HTTP/1.1 has them (a head, then a body by Content-Length or chunked). A request this cannot read is a
``BadRequest``, answered with its status and the connection closed."""

from __future__ import annotations

from ..http1 import MAX_HEAD_BYTES


class BadRequest(Exception):
    """A request that is not HTTP/1.x as this forwarder reads it: answered with ``status`` and closed."""

    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status = status


class Request:
    """One request's head as the client sent it: ``length`` is its body's (None: chunked), after ``start``."""

    __slots__ = ("method", "target", "version", "headers", "length", "start")

    def __init__(self, method: str, target: str, version: str, headers: list[tuple[str, str]]) -> None:
        self.method, self.target, self.version, self.headers = method, target, version, headers
        self.length: int | None = 0
        self.start = 0

    def header(self, name: str, default: str = "") -> str:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return default

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def closes(self) -> bool:
        """The client asked for its connection to be closed after this answer."""
        tokens = {t.strip().lower() for t in self.header("connection").split(",")}
        return "close" in tokens or (self.version == "HTTP/1.0" and "keep-alive" not in tokens)


def read_head(buf: bytearray) -> Request | None:
    """The first request's head once it is whole in ``buf``, or None until it is (BadRequest: not one)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD_BYTES:
            raise BadRequest("431 Request Header Fields Too Large", "a request head over 64 KiB")
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise BadRequest("400 Bad Request", "not an HTTP/1.x request line")
    headers = []
    for line in lines[1:]:
        k, sep, v = line.partition(":")
        if not sep or not k.strip():
            raise BadRequest("400 Bad Request", "a header line without a name")
        headers.append((k.strip(), v.strip()))
    target = parts[1]
    if target.startswith(("http://", "https://")):  # the absolute form: the path is what is forwarded
        target = "/" + target.split("://", 1)[1].partition("/")[2]
    req = Request(parts[0], target, parts[2], headers)
    req.start = end + 4
    if "chunked" in req.header("transfer-encoding").lower():
        req.length = None
    else:
        size = req.header("content-length", "0")
        if not size.isdigit():
            raise BadRequest("400 Bad Request", "a Content-Length that is not a number")
        req.length = int(size)
    return req


def read_body(req: Request, buf: bytearray) -> tuple[bytes, int] | None:
    """The request's body and the bytes it took in ``buf`` (head included), or None until it has all come."""
    if req.length is not None:
        end = req.start + req.length
        return (bytes(buf[req.start:end]), end) if len(buf) >= end else None
    parts: list[bytes] = []
    pos = req.start
    while True:  # chunked: sizes, data, then trailers to a blank line
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size_text = bytes(buf[pos:eol]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise BadRequest("400 Bad Request", "a bad chunk size in the request's body") from None
        pos = eol + 2
        if size == 0:
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return None
                if eol == pos:
                    return b"".join(parts), eol + 2
                pos = eol + 2
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos:pos + size]))
        pos += size + 2
