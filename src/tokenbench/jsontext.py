"""JSON as every ``--json`` of tokenbench writes it: indented, and always valid JSON (a NaN or an infinity, which
JSON cannot say, is written as null)."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def json_text(obj: Any) -> str:
    """``obj`` as the text of a JSON file, newline-terminated."""
    return json.dumps(finite(obj), indent=2, allow_nan=False) + "\n"
