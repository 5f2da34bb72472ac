"""JSON as every ``--json`` of tokenbench writes it: indented, and always valid JSON (a NaN or an infinity, which
JSON cannot say, is written as null); and where a text read as JSON stops being JSON, said one way everywhere."""

from __future__ import annotations

import json
import math
from typing import Any, TypeGuard


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def finite_number(v: Any) -> TypeGuard[float]:
    """A number as a hand-edited file or a stored JSON may give one: an int or a float, not a bool, and finite (an
    integer too large for a float is not: math.isfinite cannot even take it)."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and abs(v) < 1e300


def json_text(obj: Any) -> str:
    """``obj`` as the text of a JSON file, newline-terminated."""
    return json.dumps(finite(obj), indent=2, allow_nan=False) + "\n"


def json_fault(e: json.JSONDecodeError, line: bool = True) -> str:
    """Where and why ``e``'s text stops being JSON, as a message says it: "Expecting value at line 3, column 1",
    "Unterminated string starting at column 12" (Python's own words end in "at" for some faults and not others;
    ``line``: False where the text is one line of a file whose line the message names already)."""
    where = f"line {e.lineno}, column {e.colno}" if line else f"column {e.colno}"
    return f"{e.msg} {where}" if e.msg.endswith(" at") else f"{e.msg} at {where}"
