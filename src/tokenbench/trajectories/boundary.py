"""What every trajectory loader shares at its typed boundary: reading a file as UTF-8 text, JSON lines, and the
checks of one field that turn raw JSON into typed values or a ``Refusal`` naming the field. ``refuse`` makes the
one-line ``UsageError``: ``FILE:LINE: field: why`` for a line-per-record file, ``FILE: path.to.field: why`` for
one JSON document (``weka.json: requests[3].in: -4 is not a positive number of tokens``).
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..jsontext import json_fault
from .model import Rounding

#: The most tokens one call may send or answer: far beyond any served context (as trace.MAX_LENGTH), and a bound
#: on the work a hostile file can ask for.
MAX_TOKENS = 1 << 22
#: Hash ids are 64-bit signed integers (what a machine array holds).
HASH_ID_RANGE = (-(1 << 63), (1 << 63) - 1)
#: The longest recorded pause or time offset accepted: a year, in seconds (a longer one is a unit mistake).
MAX_SECONDS = 366 * 86400.0


class Refusal(Exception):
    """One field is wrong. ``field``: its name or JSON path; ``line``: the file's line, for line-per-record
    formats."""

    def __init__(self, field: str, why: str, line: int | None = None) -> None:
        super().__init__(f"{field}: {why}")
        self.field, self.why, self.line = field, why, line

    def at(self, line: int) -> Refusal:
        return self if self.line is not None else Refusal(self.field, self.why, line)

    def under(self, prefix: str) -> Refusal:
        """The same refusal with its field inside ``prefix`` (``requests[3]`` + ``in`` -> ``requests[3].in``)."""
        joined = prefix + (self.field if self.field.startswith("[") else "." + self.field)
        return Refusal(joined, self.why, self.line)


def refuse(path: Path, r: Refusal) -> UsageError:
    where = f"{path}:{r.line}" if r.line is not None else str(path)
    return UsageError(f"{where}: {r.field}: {' '.join(r.why.split())}")


def read_text(path: Path) -> tuple[bytes, str]:
    """The file's bytes and its text; a file that cannot be read, is not UTF-8 or is empty is refused."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise UsageError(f"--trace {path}: cannot read it ({e.strerror or type(e).__name__})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise UsageError(f"{path}: an empty file: no trajectories in it")
    return raw, text


def parse_json(text: str, field: str = "file") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise Refusal(field, f"not JSON ({json_fault(e)})") from None
    except RecursionError:
        raise Refusal(field, "not JSON (nested too deep)") from None


def json_lines(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line of ``path``'s text; a line that is not a JSON object is
    refused."""
    for k, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, "line")
        except Refusal as r:
            raise refuse(path, r.at(k + 1)) from None
        if not isinstance(obj, dict):
            raise refuse(path, Refusal("line", "not a JSON object", k + 1))
        yield k + 1, obj


def first_json_line(text: str) -> Any:
    """The first non-blank line as JSON, or None where it is not JSON (a pretty-printed document, a CSV)."""
    for line in text.splitlines():
        if line.strip():
            try:
                return json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                return None
    return None


# ---- one field ------------------------------------------------------------------------------------------------

def as_obj(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Refusal(name, f"{_kind(value)} is not a JSON object")
    return value


def as_list(value: Any, name: str, allow_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise Refusal(name, f"{_kind(value)} is not a list")
    if not value and not allow_empty:
        raise Refusal(name, "an empty list")
    return value


def as_text(value: Any, name: str, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise Refusal(name, f"{_kind(value)} is not text")
    if not value and not allow_empty:
        raise Refusal(name, "empty text")
    return value


def as_optional_text(value: Any, name: str) -> str | None:
    return None if value is None else as_text(value, name)


def as_tokens(value: Any, name: str, minimum: int = 1) -> int:
    """A whole number of tokens, at least ``minimum`` (1 for a prompt, 0 for an answer), at most MAX_TOKENS."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refusal(name, f"{value!r} is not a whole number of tokens")
    if value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise Refusal(name, f"{value} is not a {kind} number of tokens")
    if value > MAX_TOKENS:
        raise Refusal(name, f"{value} tokens is more than one call may send or answer ({MAX_TOKENS:,})")
    return value


def as_seconds(value: Any, name: str) -> float:
    """A finite, non-negative number of seconds."""
    return _time(value, name, "seconds", "seconds", 1.0)


def as_milliseconds(value: Any, name: str) -> float:
    """A finite, non-negative number of milliseconds, as seconds (held to the same year as ``as_seconds``)."""
    return _time(value, name, "milliseconds", "ms", 1000.0)


def _time(value: Any, name: str, unit: str, short: str, per_second: float) -> float:
    """A finite, non-negative time in ``unit`` (``per_second`` of them a second), at most a year, as seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Refusal(name, f"{value!r} is not a number of {unit}")
    if value < 0:
        raise Refusal(name, f"{value} is negative")
    if value > MAX_SECONDS * per_second:
        raise Refusal(name, f"{value:g} {short} is more than a year (another unit?)")
    return float(value) / per_second


def as_optional_seconds(value: Any, name: str) -> float | None:
    return None if value is None else as_seconds(value, name)


def as_hash_ids(value: Any, name: str) -> array[int]:
    """A list of whole numbers as a machine array (each checked at C speed, not one by one in Python)."""
    if not isinstance(value, list):
        raise Refusal(name, f"{_kind(value)} is not a list of whole numbers")
    if not set(map(type, value)) <= {int}:
        raise Refusal(name, "not a list of whole numbers")
    try:
        return array("q", value)
    except OverflowError:
        raise Refusal(name, f"a hash id outside {HASH_ID_RANGE[0]}..{HASH_ID_RANGE[1]}") from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def rounding_of(n_ids: int, input_tokens: int, size: int, name: str,
             allowed: tuple[Rounding, ...] = ("floor", "ceil")) -> Rounding:
    """Which rounding ``n_ids`` hash ids over ``input_tokens`` in blocks of ``size`` follow; refused when neither
    allowed one does. A prompt that fills its blocks reads as ``floor`` (both agree)."""
    floor, ceil = input_tokens // size, -(-input_tokens // size)
    for kind, n in (("floor", floor), ("ceil", ceil)):
        if n_ids == n and kind in allowed:
            return kind
    expected = " or ".join(f"{n} ({kind}(in / block))" for kind, n in (("floor", floor), ("ceil", ceil))
                           if kind in allowed and not (kind == "ceil" and ceil == floor))
    raise Refusal(name, f"{n_ids} hash ids for {input_tokens} tokens in blocks of {size}, where {expected} "
                        "would cover them (another block size?)")
