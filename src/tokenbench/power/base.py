"""What every power source shares: what it measures, one reading, and the source's contract.

A source reads the box it runs on (or a page or command that does). Its reading is either instantaneous watts, or an
energy counter in joules that only grows (and may wrap round at a known range), per channel (one GPU, one RAPL zone),
stamped with the reading host's monotonic clock, so that two readings of one host give an interval whatever the
clock of the machine that asks. A source that cannot be read says why in one line: ``PowerSource.read`` never raises,
it returns a reading that carries the reason, so a source that stops mid-level leaves a partial figure, never a
traceback."""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..errors import TokenbenchError


class PowerError(TokenbenchError):
    """A power source that cannot be opened or read, in one line that says what to do."""


class Scope(StrEnum):
    """What a source's watts cover: buyers compare boxes by the whole box, and a GPU board is not that."""

    GPU_BOARD = "GPU board"
    APU_PACKAGE = "APU package (GPU and CPU cores together)"
    CPU_PACKAGE = "CPU package"
    WHOLE_BOX = "whole box"


#: Channels are summed into one figure; a figure this large is a misread unit, not a box.
MAX_WATTS = 1e6


@dataclass(frozen=True, slots=True)
class Reading:
    """One read of one source. ``t``: ``time.monotonic()`` of the host that read it, in seconds. ``watts``: the
    instantaneous draw per channel; ``joules``: each channel's energy counter; ``wraps``: where a channel's counter
    goes back to 0 (joules), where known. ``error``: why this read failed (then both are empty)."""

    source: str
    t: float
    watts: dict[str, float] = field(default_factory=dict)
    joules: dict[str, float] = field(default_factory=dict)
    wraps: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def total_w(self) -> float | None:
        return sum(self.watts.values()) if self.watts else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "t": self.t}
        for k in ("watts", "joules", "wraps"):
            if getattr(self, k):
                out[k] = dict(getattr(self, k))
        if self.error is not None:
            out["error"] = self.error
        return out

    @classmethod
    def from_dict(cls, d: Any) -> Reading:
        """A reading as ``to_dict`` wrote it; anything else is a ValueError that says what is wrong."""
        if not isinstance(d, dict) or not isinstance(d.get("source"), str):
            raise ValueError("a reading is an object with a source name")
        t = d.get("t")
        if t is None or not _finite(t):
            raise ValueError(f"reading of {d['source']}: t is not a number")
        parts = {k: _channels(d.get(k), k) for k in ("watts", "joules", "wraps")}
        err = d.get("error")
        if err is not None and not isinstance(err, str):
            raise ValueError(f"reading of {d['source']}: error is not text")
        return cls(d["source"], float(t), parts["watts"], parts["joules"], parts["wraps"], err)


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _channels(v: Any, what: str) -> dict[str, float]:
    if v is None:
        return {}
    if not isinstance(v, dict) or not all(isinstance(k, str) and _finite(x) for k, x in v.items()):
        raise ValueError(f"{what} is not an object of numbers")
    return {k: float(x) for k, x in v.items()}


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """What a source is, as a report names it: ``counter`` when it reads energy counters (exact over any
    interval), else watts sampled and integrated."""

    name: str
    measures: str
    counter: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "measures": self.measures, "counter": self.counter, "note": self.note}

    @classmethod
    def from_dict(cls, d: Any) -> SourceInfo:
        if not isinstance(d, dict) or not all(isinstance(d.get(k), str) for k in ("name", "measures", "note")) \
                or not isinstance(d.get("counter"), bool):
            raise ValueError("a source is an object with name, measures, counter and note")
        return cls(d["name"], d["measures"], d["counter"], d["note"])


class PowerSource(ABC):
    """A source of power readings. A subclass opens in ``__init__`` (a ``PowerError`` in one line when it cannot be
    read here) and implements ``sample``; ``read`` is what callers use."""

    name = ""
    measures: Scope = Scope.WHOLE_BOX
    counter = False
    note = ""

    @abstractmethod
    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        """(watts, joules, wraps) per channel, now; raises (any exception) when the source cannot be read."""

    def read(self, clock: Any = time.monotonic) -> Reading:
        """A reading now, or one that says in a line why there is none: never an exception."""
        t = clock()
        try:
            watts, joules, wraps = self.sample()
        except Exception as e:  # a source that stopped: a file gone, a page down, a command failing
            return Reading(self.name, t, error=self.why(e))
        bad = [f"{k} read {v!r} W" for k, v in watts.items() if not (_finite(v) and 0 <= v < MAX_WATTS)] + \
            [f"{k} counted {v!r} J" for k, v in joules.items() if not (_finite(v) and v >= 0)]
        if bad or not (watts or joules):
            return Reading(self.name, t, error=f"{self.name}: no usable value in the reading"
                           + (f" ({bad[0]})" if bad else ""))
        return Reading(self.name, t, watts, joules, wraps)

    def why(self, e: Exception) -> str:
        """One line for a failed read: the source's name and what went wrong."""
        if isinstance(e, OSError) and e.filename and e.strerror:  # a sysfs file gone or refused: which, and why
            return f"{self.name}: {e.filename}: {e.strerror.lower()}"
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return text if text.startswith(self.name + ":") else f"{self.name}: {text}"

    def info(self) -> SourceInfo:
        return SourceInfo(self.name, str(self.measures), self.counter, self.note)

    def close(self) -> None:
        """Let go of a library handle, where the source holds one."""


def read_microunits(path: Any) -> float:
    """A sysfs value in micro-units (µW, µJ) as a float of whole units: ``"23040000\\n"`` -> 23.04."""
    text = path.read_text().strip()
    try:
        return int(text) / 1e6
    except ValueError:
        raise ValueError(f"{path} holds {text[:30]!r}, not a whole number") from None
