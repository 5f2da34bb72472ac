"""Results of the tools people already use, into the store as runs with provenance "imported".

One module per format, each with ``detect(path, text) -> bool`` and ``parse(path, text, label) -> list[Imported]``.
A malformed file raises an error naming the file and the field; nothing of it is stored (one transaction).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import UsageError
from ..metrics import LevelSummary


@dataclass(slots=True)
class Imported:
    label: str
    kind: str  # sweep | bench
    manifest: dict[str, Any]
    levels: list[LevelSummary] = field(default_factory=list)


class FieldError(UsageError):
    def __init__(self, path: Path, where: str, problem: str) -> None:
        super().__init__(f"{path}: {where}: {problem}; nothing was imported")


def need(obj: Any, key: str, path: Path, where: str, kind: type | tuple[type, ...] = (int, float)) -> Any:
    """obj[key], checked: a missing or mistyped field names the file and the field."""
    if not isinstance(obj, dict) or key not in obj:
        raise FieldError(path, f"{where}.{key}" if where else key, "missing")
    v = obj[key]
    if kind is not None and not isinstance(v, kind) or isinstance(v, bool) and kind == (int, float):
        raise FieldError(path, f"{where}.{key}" if where else key, f"expected {getattr(kind, '__name__', 'a number')}, got {type(v).__name__}")
    return v


def load_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError(f"{path}: not valid JSON ({e}); nothing was imported") from None


FORMATS: list[tuple[str, Callable[[Path, str], bool], Callable[[Path, str, str | None], list[Imported]]]] = []


def _register() -> None:
    from . import guidellm, llamabench, published, vllm

    FORMATS.extend([
        ("published.csv", published.detect, published.parse),
        ("llama-bench", llamabench.detect, llamabench.parse),
        ("vllm bench serve", vllm.detect, vllm.parse),
        ("guidellm", guidellm.detect, guidellm.parse),
    ])


def parse_file(path: Path, label: str | None = None) -> tuple[str, list[Imported]]:
    if not FORMATS:
        _register()
    try:
        text = path.read_text()
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    for name, detect, parse in FORMATS:
        if detect(path, text):
            runs = parse(path, text, label)
            if not runs:
                raise UsageError(f"{path}: a {name} file with no results in it; nothing was imported")
            return name, runs
    raise UsageError(
        f"{path}: not a format tokenbench imports (vllm bench serve JSON, llama-bench JSON/CSV/JSONL, GuideLLM "
        "JSON, published.csv)"
    )


def import_file(store: Any, path: Path, label: str | None = None) -> tuple[str, list[str]]:
    """Parse, then store every run of the file in one transaction. Returns (format, run ids)."""
    from ..sweep import new_run_id

    fmt, runs = parse_file(path, label)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    ids = []
    with store.tx():
        for r in runs:
            rid = new_run_id()
            while rid in ids:
                rid = new_run_id()
            r.manifest.update(provenance="imported", imported_from=str(path), format=fmt, label=r.label)
            store.save_run_in_tx(rid, r.kind, r.label, r.manifest, "imported", r.levels, __version__, now, now)
            ids.append(rid)
    return fmt, ids
