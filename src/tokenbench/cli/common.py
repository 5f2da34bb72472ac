"""Parsing helpers shared by the commands."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any
from ..errors import UsageError
from ..metrics import parse_duration_ms
from ..sweep import RunResult


def int_list(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a comma-separated list of integers, e.g. 1,4,8") from None
    if not vals or any(v < 1 for v in vals):
        raise UsageError(f"{what} '{text}' needs positive integers, e.g. 1,4,8")
    return vals


def float_list(text: str, what: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a comma-separated list of numbers, e.g. 0.5,1,2") from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"{what} '{text}' needs positive numbers, e.g. 0.5,1,2")
    return vals


def seconds(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        v = parse_duration_ms(text) / 1000.0
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a duration: write e.g. 30s, 500ms or 2m") from None
    if v <= 0:
        raise UsageError(f"{what} must be positive")
    return v


def tokens(text: str, what: str) -> int:
    """A token count: 65536, or 64k. ``Nk`` means the power of two people mean by it when N thousand or N·1024 is
    within 2.5% of one ("8k" 8,192; "65K" 65,536; "131K" 131,072), else N·1024."""
    t = text.strip().lower()
    try:
        if not t.endswith("k"):
            return int(t)
        n = float(t[:-1])
    except ValueError:
        raise UsageError(f"{what} '{text}' is not a token count: write e.g. 65536 or 64k") from None
    binary = int(n * 1024)
    if binary > 0:
        p2 = 1 << round(math.log2(binary))
        if min(abs(p2 - n * 1000), abs(p2 - binary)) <= 0.025 * p2:
            return p2
    return binary


def write_json(path: str, res: RunResult) -> None:
    Path(path).write_text(json.dumps(res.to_json(), indent=2) + "\n")


def guard_targets(url: str | None) -> set[int]:
    """Processes of a server measured on this machine: the guard must not count them against the bench."""
    if not url:
        return set()
    from urllib.parse import urlparse

    import psutil

    u = urlparse(url if "://" in url else "http://" + url)
    if u.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or not u.port:
        return set()
    try:
        return {c.pid for c in psutil.net_connections(kind="tcp")
                if c.laddr and c.laddr.port == u.port and c.status == psutil.CONN_LISTEN and c.pid}
    except (psutil.AccessDenied, OSError):
        return set()


def guard_config(path: str | None) -> Any:
    from .. import guard

    return guard.load_config(Path(path) if path else None)
