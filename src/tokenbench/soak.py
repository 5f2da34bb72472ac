"""A soak: agent sessions run for a duration (``sweep --sessions N --duration 1h``), each agent starting a new
session after its last until the time is up, and their turns read over time. A cache that holds the sessions at
first and stops (fragmented, its entries aged out, the engine's cache lost until a restart, as agents' owners
have reported after an hour of load) shows as a cached share that falls from the run's first tenth to its last,
with turn TTFT rising: ``metrics.soak_windows`` cuts the level into tenths by send time, and the finding
``cache_decay`` (findings.py) is raised when the share falls by more than ``DECAY_MARGIN`` (``decay``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


#: The windows a soak is read in: tenths, so the first and the last are its first and last tenth.
WINDOWS = 10
#: A fall of the cached share (in share of prompt tokens) from the first tenth to the last that is a finding.
DECAY_MARGIN = 0.10


@dataclass(frozen=True, slots=True)
class SoakWindow:
    """The turns sent within one window of a soak: how much of their prompts the server's cache served, and
    their TTFT."""

    start_s: float  # from the level's first send
    end_s: float
    turns: int  # successful turns sent in the window
    cached_share: float | None  # cached prompt tokens / prompt tokens (None: no response said)
    ttft_ms_p50: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SoakWindow | None:
        try:
            return cls(**{k: d[k] for k in cls.__dataclass_fields__})
        except (KeyError, TypeError):
            return None


def decay(over_time: Sequence[SoakWindow]) -> tuple[float, float] | None:
    """The cached share of the first window and of the last that said one, where it fell by more than the
    margin; None where it held."""
    said = [w.cached_share for w in over_time if w.cached_share is not None]
    if len(said) < 2 or said[0] - said[-1] <= DECAY_MARGIN:
        return None
    return said[0], said[-1]
