"""Other tools' per-request records as tokenbench's own (``records.RequestRecord``), and a level made from them by
tokenbench's definitions (``metrics.summarize``): an imported run's TTFT, TPOT, ITL and E2E then mean what a
measured run's mean, whatever the tool called them, and its requests are stored, so compare's intervals and
calibrate read them as they read a measured run's.

Each format gives a request's send time, its first token, the gaps between the token chunks after it, its end,
and its token counts, in its own clock and unit; ``Timed`` carries them in nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..levels import ServingLevel
from ..metrics import peak_in_flight, summarize
from ..records import RequestRecord, TokenSource
from .fields import FieldError, field_name, number

NS = 1_000_000_000


@dataclass(slots=True)
class Timed:
    """One request as a tool recorded it, in nanoseconds of the tool's clock (only differences are used)."""

    sent_ns: int
    end_ns: int | None
    first_token_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)  # every token chunk, the first one included
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_source: TokenSource | None = None
    error_kind: str | None = None
    error: str | None = None
    warmup: bool = False


def ns(value: object, path: Path, where: str, scale: float) -> int:
    """A time (``scale`` nanoseconds a unit) as integer nanoseconds, checked: finite and not negative. A clock's
    nanoseconds (AIPerf's epoch stamps) pass as the integers they are, past the 2**53 a float holds exactly."""
    if isinstance(value, int) and not isinstance(value, bool) and scale == 1:
        if not 0 <= value < 2**63:
            raise FieldError(path, where, f"{value!r} is not a time")
        return value
    return round(number(value, path, where) * scale)


def stamp(obj: dict[str, object], key: str, path: Path, where: str) -> int:
    """A clock's nanoseconds, ``obj[key]``: an integer (AIPerf's epoch stamps are past the 2**53 a float holds)."""
    name = field_name(where, key)
    if key not in obj:
        raise FieldError(path, name, "missing")
    v = obj[key]
    if not isinstance(v, int) or isinstance(v, bool):
        raise FieldError(path, name, f"expected int, got {type(v).__name__}")
    return ns(v, path, name, 1)


def chunk_times(first_ns: int, gaps: object, path: Path, where: str, scale: float) -> list[int]:
    """The token chunks' times from the first one's and the gaps after it (a list of numbers in ``scale``)."""
    if not isinstance(gaps, list):
        raise FieldError(path, where, f"expected a list of gaps, got {type(gaps).__name__}")
    out = [first_ns]
    for i, g in enumerate(gaps):
        out.append(out[-1] + ns(g, path, f"{where}[{i}]", scale))
    return out


def record(i: int, t: Timed) -> RequestRecord:
    """A tool's request as tokenbench's record: a success has a first token; a failure keeps its kind."""
    return RequestRecord(
        index=i, phase="warmup" if t.warmup else "measured", sent_ns=t.sent_ns, first_token_ns=t.first_token_ns,
        end_ns=t.end_ns, chunk_ns=t.chunk_ns, input_tokens=t.input_tokens,
        input_tokens_source="usage" if t.input_tokens is not None else None, output_tokens=t.output_tokens,
        output_tokens_source=t.output_source if t.output_tokens is not None else None,
        error_kind=t.error_kind, error=t.error)


def level(records: list[RequestRecord], concurrency: int | None, rate: float | None, path: Path,
          where: str) -> ServingLevel:
    """The level of a file's measured requests, by tokenbench's definitions, over the window from the first send
    to the last end. ``concurrency`` None and no ``rate``: the most requests the records had in flight, as a
    closed loop at that concurrency would have."""
    measured = [r for r in records if r.phase == "measured"]
    if not measured:
        raise FieldError(path, where, "no measured requests")
    if concurrency is None and rate is None:
        concurrency = max(1, peak_in_flight(measured))
    start = min(r.sent_ns for r in measured)
    end = max([r.end_ns for r in measured if r.end_ns is not None], default=start)
    if end <= start:
        raise FieldError(path, where, "the requests took no time")
    s = summarize(records, concurrency=concurrency, rate=rate, window_start_ns=start, window_end_ns=end)
    s.test = "serve"
    return s
