"""What every format's parser shares: the run a foreign file becomes (``Imported``) and its fields read checked
(``need``, ``number``, ``load_json``, ``json_lines``): a missing, mistyped, non-finite or negative field is a
``FieldError`` naming the file, the line where the format has lines, and the field, and nothing of the file is
stored."""

from __future__ import annotations

import json

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..jsontext import json_fault
from ..levels import LevelSummary
from ..records import RequestRecord
from ..results import Manifest
from ..wire import WireError, loads


@dataclass(slots=True)
class Imported:
    label: str
    kind: str  # sweep | bench
    manifest: Manifest  # a foreign file's values through Manifest.from_dict: typed where they have the type
    levels: list[LevelSummary] = field(default_factory=list)
    #: each level's requests, where the file kept them (a per-request export): stored beside the level, so
    #: compare's intervals and calibrate read them as they read a measured run's; empty for a summary
    requests: list[list[RequestRecord]] = field(default_factory=list)


class FieldError(UsageError):
    def __init__(self, path: Path, where: str, problem: str) -> None:
        super().__init__(f"{path}: {where}: {problem}; nothing was imported")


def need(obj: Any, key: str, path: Path, where: str, kind: type | tuple[type, ...] | None = (int, float)) -> Any:
    """obj[key], checked: a missing or mistyped field names the file and the field. A number must be finite and
    not negative: no measurement tokenbench imports can be NaN, infinite or below zero."""
    name = field_name(where, key)
    if not isinstance(obj, dict):
        raise FieldError(path, where or "top level", f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise FieldError(path, name, "missing")
    v = obj[key]
    if kind is not None and not isinstance(v, kind) or isinstance(v, bool) and kind == (int, float):
        raise FieldError(path, name, f"expected {JSON_NAMES.get(kind, 'a number')}, got {json_kind(v)}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        number(v, path, name)
    return v


#: A field's expected Python type as JSON names it.
JSON_NAMES: dict[Any, str] = {list: "a list", dict: "an object", str: "a string", int: "a whole number",
                              float: "a number", bool: "true or false"}


def json_kind(v: Any) -> str:
    """What a parsed JSON value is, as JSON names it (null, not NoneType)."""
    if v is None:
        return "null"
    return JSON_NAMES.get(type(v), type(v).__name__)


def field_name(where: str, key: str) -> str:
    """A field's name for a message: ``where.key``, or ``line 3: key`` where ``where`` names a line (ends in ':')."""
    if not where:
        return key
    return f"{where} {key}" if where.endswith(":") else f"{where}.{key}"


def number(v: Any, path: Path, where: str) -> float:
    """A measured number: finite and not negative, else a FieldError naming the field."""
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        raise FieldError(path, where, f"expected a number, got {str(v)[:40]!r}") from None
    if not math.isfinite(f) or f > 2**53:
        raise FieldError(path, where, f"{v!r} is not a finite number")
    if f < 0:
        raise FieldError(path, where, f"{v!r} is negative")
    return f


def load_json(path: Path, text: str) -> Any:
    """JSON, strictly (wire.loads): NaN, Infinity and nesting too deep to parse are refused."""
    try:
        return loads(text, "the file", max_bytes=None)
    except WireError as e:
        raise UsageError(f"{path}: not valid JSON ({_where_not(text, e)}); nothing was imported") from None


def _where_not(text: str, e: WireError) -> str:
    """Where a document stops being JSON: the end of a file cut short, or the line and column of what is wrong."""
    try:
        json.loads(text)
    except json.JSONDecodeError as d:
        if d.pos >= len(text.rstrip()):
            return f"it ends at line {d.lineno} before its document does: cut short?"
        return json_fault(d)
    except (ValueError, RecursionError):
        pass
    return str(e)


def text_field(obj: Any, key: str, path: Path, where: str) -> str:
    """obj[key] as text: a string, or a number written as one (a CSV cell, a runner's name)."""
    v = need(obj, key, path, where, kind=(str, int, float))
    if isinstance(v, bool):
        raise FieldError(path, f"{where}.{key}" if where else key, "expected text, got bool")
    return str(v)


def json_lines(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """Each non-blank line of a JSON Lines file, parsed strictly, with its line number (from 1)."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, loads(line, f"line {n}", max_bytes=None)
        except WireError as e:
            raise UsageError(f"{path}: {e}; nothing was imported") from None


def obj(d: dict[str, Any], key: str) -> dict[str, Any]:
    """``d[key]`` where it is an object, else an empty one: an optional section of a file, read field by field."""
    v = d.get(key)
    return v if isinstance(v, dict) else {}
