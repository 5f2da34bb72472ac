"""What a measuring run tells its caller as it goes: a level starting and ending, each request done, what it waits
for while nothing comes back (a warm-up waiting on the server, a level past its end waiting out its grace), notes
and warnings. The CLI shows them (``cli/sweep.py``'s ``RichReporter``: a live bar, or a line a level); a library
caller may pass ``QuietReporter``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .levels import ServingLevel
    from .records import RequestRecord


class Reporter(Protocol):
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None: ...
    def request_done(self, record: RequestRecord) -> None: ...
    def level_end(self, summary: ServingLevel) -> None: ...
    def waiting(self, text: str | None) -> None: ...
    def note(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...


class QuietReporter:
    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None:
        pass

    def request_done(self, record: RequestRecord) -> None:
        pass

    def level_end(self, summary: ServingLevel) -> None:
        pass

    def waiting(self, text: str | None) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass
