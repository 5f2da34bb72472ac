"""Distributions a workload draws from: token lengths (prompt, output, tool result) and times (an agent's think
time between turns). One grammar for the command line, one typed value, one seeded draw.

    128                  fixed
    uniform:64-256       uniform between the bounds, both included
    normal:512,128       normal with that mean and standard deviation, clipped to [min, mean + 4 sd]
    file:lengths.txt     a draw from the numbers in a file (whitespace, comma or newline separated)

Times take units on each number (``2s``, ``uniform:500ms-3s``, ``normal:2s,500ms``); a bare number other than 0 is
refused, as every duration is (``slo.DURATION_RULE``).
vLLM's ``--random-range-ratio`` is ``uniform:`` around the mean; GuideLLM's ``prompt_tokens_stdev`` with its
min/max is ``normal:`` with a clip.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .layout import plural

Kind = Literal["fixed", "uniform", "normal", "file"]
#: A normal draw is clipped this many standard deviations above the mean (below, at the unit's minimum).
NORMAL_CLIP_SD = 4.0
#: Numbers read from a ``file:`` distribution at most (a file of lengths, not a data set).
MAX_FILE_VALUES = 1_000_000


class DrawError(ValueError):
    """A distribution that cannot be parsed or read; the message is one line saying what to write."""


@dataclass(slots=True, frozen=True)
class Draw:
    """What a workload draws one value of at a time. ``unit`` is ``tokens`` (whole numbers, at least 1 or the
    ``low`` given) or ``s`` (seconds, 0 or more)."""

    kind: Kind
    unit: str = "tokens"
    value: float = 0.0  # fixed
    low: float = 0.0  # uniform bounds; normal's clip below
    high: float = 0.0  # uniform bounds; normal's clip above
    mean: float = 0.0
    sd: float = 0.0
    values: tuple[float, ...] = ()  # file
    source: str | None = None  # file: its path as given

    @property
    def is_fixed(self) -> bool:
        return self.kind == "fixed"

    def sample(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            v = rng.randint(int(self.low), int(self.high)) if self.unit == "tokens" else rng.uniform(self.low, self.high)
        elif self.kind == "normal":
            v = min(self.high, max(self.low, rng.gauss(self.mean, self.sd)))
        else:
            v = rng.choice(self.values)
        return float(round(v)) if self.unit == "tokens" else float(v)

    def draw(self, rng: random.Random) -> int:
        """A token count."""
        return int(self.sample(rng))

    def expected(self) -> float:
        """The mean a draw has (a clipped normal's mean is taken as its unclipped one)."""
        if self.kind == "fixed":
            return self.value
        if self.kind == "uniform":
            return (self.low + self.high) / 2
        if self.kind == "normal":
            return self.mean
        return sum(self.values) / len(self.values)

    def minimum(self) -> float:
        """The smallest value a draw can have."""
        if self.kind == "fixed":
            return self.value
        if self.kind in ("uniform", "normal"):
            return self.low
        return min(self.values)

    def maximum(self) -> float:
        """The largest value a draw can have (what an engine's context must hold)."""
        if self.kind == "fixed":
            return self.value
        if self.kind in ("uniform", "normal"):
            return self.high
        return max(self.values)

    def describe(self) -> str:
        """As a level's table states it: ``128``, ``uniform 64-256``, ``normal 512 sd 128 (1-1024)``."""
        f = _fmt(self.unit)
        if self.kind == "fixed":
            return f(self.value)
        if self.kind == "uniform":
            return f"uniform {f(self.low)}-{f(self.high)}"
        if self.kind == "normal":
            return f"normal {f(self.mean)} sd {f(self.sd)} ({f(self.low)}-{f(self.high)})"
        return f"{len(self.values)} values from {self.source} (mean {f(self.expected())})"

    def to_dict(self) -> dict[str, Any]:
        """What a run's manifest records: the kind, its parameters, and the text it states."""
        out: dict[str, Any] = {"kind": self.kind, "unit": self.unit, "text": self.describe()}
        if self.kind == "fixed":
            out["value"] = self.value
        elif self.kind == "uniform":
            out.update(low=self.low, high=self.high)
        elif self.kind == "normal":
            out.update(mean=self.mean, sd=self.sd, low=self.low, high=self.high)
        else:
            out.update(source=self.source, n=len(self.values), mean=self.expected())
        return out

    @classmethod
    def fixed(cls, value: float, unit: str = "tokens") -> Draw:
        return cls("fixed", unit, value=float(value))


def _fmt(unit: str) -> Callable[[float], str]:
    if unit == "tokens":
        return lambda v: f"{v:g}"
    return lambda v: f"{v * 1000:g} ms" if 0 < v < 1 else f"{v:g} s"


def _token_number(text: str, what: str) -> float:
    t = text.strip().lower().replace("_", "")
    scale = 1
    if t.endswith("k"):
        t, scale = t[:-1], 1024
    try:
        v = float(t) * scale
    except ValueError:
        raise DrawError(f"{what}: '{text}' is not a token count") from None
    if not math.isfinite(v) or v != int(v):
        raise DrawError(f"{what}: '{text}' is not a whole number of tokens")
    return v


def _seconds(text: str, what: str) -> float:
    from .slo import parse_duration_ms

    try:
        return parse_duration_ms(text) / 1000.0
    except ValueError as e:
        if "has no unit" in str(e):
            raise DrawError(f"{what}: {e}") from None
        raise DrawError(f"{what}: '{text}' is not a time (write e.g. 2s or 500ms)") from None


def parse(text: str, what: str, unit: str = "tokens", minimum: float | None = None) -> Draw:
    """A distribution from its command-line text; ``what`` names the option in the one-line error.
    ``minimum``: the least a draw may be (tokens: 1 unless given; seconds: 0)."""
    low_bound = minimum if minimum is not None else (1.0 if unit == "tokens" else 0.0)
    num = _token_number if unit == "tokens" else _seconds
    t = text.strip()
    kind, sep, rest = t.partition(":")
    kind = kind.strip().lower()
    if not sep:
        v = num(t, what)
        _at_least(v, low_bound, what, unit)
        return Draw.fixed(v, unit)
    if kind == "uniform":
        m = re.fullmatch(r"\s*([^-\s]+)\s*-\s*([^-\s]+)\s*", rest)
        if not m:
            raise DrawError(f"{what}: write uniform:LOW-HIGH, e.g. uniform:64-256")
        lo, hi = num(m.group(1), what), num(m.group(2), what)
        _at_least(lo, low_bound, what, unit)
        if hi < lo:
            raise DrawError(f"{what}: uniform:{rest} has its bounds the wrong way round")
        return Draw("uniform", unit, low=lo, high=hi)
    if kind == "normal":
        parts = rest.split(",")
        if len(parts) != 2:
            raise DrawError(f"{what}: write normal:MEAN,SD, e.g. normal:512,128")
        mean, sd = num(parts[0], what), num(parts[1], what)
        _at_least(mean, low_bound, what, unit)
        if sd < 0:
            raise DrawError(f"{what}: a standard deviation cannot be negative")
        high = mean + NORMAL_CLIP_SD * sd
        return Draw("normal", unit, low=low_bound, high=float(round(high)) if unit == "tokens" else high,
                            mean=mean, sd=sd)
    if kind == "file":
        return _from_file(rest.strip(), what, unit, low_bound)
    raise DrawError(f"{what}: '{text}' is not a distribution: write a number, uniform:LOW-HIGH, "
                            "normal:MEAN,SD or file:PATH")


def _at_least(v: float, low: float, what: str, unit: str) -> None:
    if v < low:
        least = plural(int(low), "token") if unit == "tokens" else f"{low:g} {unit}"
        raise DrawError(f"{what}: {v:g} is below the least allowed, {least}")


def _from_file(path: str, what: str, unit: str, low: float) -> Draw:
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DrawError(f"{what}: cannot read {path}: {getattr(e, 'strerror', None) or e}") from None
    values: list[float] = []
    num = _token_number if unit == "tokens" else _seconds
    for lineno, line in enumerate(text.splitlines(), 1):
        for word in filter(None, re.split(r"[\s,]+", line.split("#", 1)[0])):
            try:
                v = num(word, what)
            except DrawError:
                raise DrawError(f"{what}: {path}:{lineno}: '{word}' is not a number") from None
            _at_least(v, low, f"{what}: {path}:{lineno}", unit)
            values.append(v)
            if len(values) > MAX_FILE_VALUES:
                raise DrawError(f"{what}: {path} has over {MAX_FILE_VALUES:,} numbers")
    if not values:
        raise DrawError(f"{what}: {path} holds no numbers")
    return Draw("file", unit, values=tuple(values), source=path)
