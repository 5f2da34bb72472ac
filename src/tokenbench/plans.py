"""Which level a sweep runs next: the seam a search plugs into. A plan is given the levels run so far and names
the next (``FixedPlan``: the levels the options list, in order; ``capacity.CapacitySearch``: a search), may stop a
level early once its verdict is known (``LevelStop``), records how it planned in the manifest and says how the run
ended. The sweep conducts whichever plan it is given and never names a search."""

from __future__ import annotations

from typing import Protocol

from .kinds.base import OnDone
from .levels import ServingLevel
from .offered_load import Level
from .records import RequestRecord
from .results import LevelOutcome, Manifest


class LevelStop(Protocol):
    """A plan's watch on one level: it sees each finished request (``wrap``), says when to stop sending
    (``halted``) and why (``reason``), whether the level was cut short of a verdict (``cut``), and puts what it
    decided on the summary (``apply``)."""

    reason: str | None
    cut: bool

    def wrap(self, on_done: OnDone | None) -> OnDone: ...

    def halted(self) -> bool: ...

    def apply(self, summary: ServingLevel) -> None: ...


class LevelPlan(Protocol):
    """Which level a sweep runs next, given the levels run so far: a fixed list (``FixedPlan``) or a search, which
    may also stop a level early (``stop``), records how it planned in the manifest (``annotate``) and says how the
    run ended (``verdict``)."""

    total: int | None  # levels, where known beforehand ("level 2/5")

    def widest(self) -> int:
        """The most requests any of its levels keeps in flight."""
        ...

    def next_level(self, outcomes: list[LevelOutcome]) -> Level | None: ...

    def stop(self, level: Level, planned: int | None, records: list[RequestRecord]) -> LevelStop | None: ...

    def annotate(self, manifest: Manifest) -> None: ...

    def verdict(self, outcomes: list[LevelOutcome], manifest: Manifest) -> tuple[str, str | None]: ...


class FixedPlan:
    """The levels the options list, in order."""

    def __init__(self, levels: list[Level]) -> None:
        self.levels = levels
        self.total: int | None = len(levels)

    def widest(self) -> int:
        return max([lv.concurrency or lv.max_concurrency or 1 for lv in self.levels], default=1)

    def next_level(self, outcomes: list[LevelOutcome]) -> Level | None:
        return self.levels[len(outcomes)] if len(outcomes) < len(self.levels) else None

    def stop(self, level: Level, planned: int | None, records: list[RequestRecord]) -> LevelStop | None:
        return None

    def annotate(self, manifest: Manifest) -> None:
        pass

    def verdict(self, outcomes: list[LevelOutcome], manifest: Manifest) -> tuple[str, str | None]:
        """Complete when every level is; partial when some are; failed when none is."""
        failed = [o for o in outcomes if o.status != "complete"]
        if not failed:
            return "complete", None
        status = "partial" if len(failed) < len(outcomes) else "failed"
        return status, f"{len(failed)} of {len(outcomes)} levels failed: " + "; ".join(
            f"{o.level.describe()}: {', '.join(o.summary.flags) or o.status}" for o in failed)
