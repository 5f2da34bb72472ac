"""The clean-bench guard's results as values (guard.py runs the checks): one check's result, and a snapshot of
all of them at one moment, as a level, a run and each load-generating node keep it. A snapshot reads back and
writes the keys, values and order it was stored with (keyed.Keyed); its checks are ``CheckResult``s, never dicts
read by string key."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from .keyed import Keyed

PASS, FAIL, WARN, NA = "pass", "fail", "warn", "not available"
#: The server host's check that stands for all of them where its agent did not answer: the host went unchecked.
AGENT_CHECK = "agent_answers"


@dataclass(slots=True)
class CheckResult:
    name: str
    status: str
    observed: str
    threshold: str = ""
    advice: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> CheckResult | None:
        """A stored check, or None for one of another shape (every field a string, none missing, none more)."""
        if isinstance(d, CheckResult):
            return d
        names = [f.name for f in fields(cls)]
        if not isinstance(d, dict) or list(d) != names or not all(isinstance(v, str) for v in d.values()):
            return None
        return cls(**d)


@dataclass(slots=True)
class GuardSnapshot(Keyed):
    """The guard's checks at one moment: whether none failed, each check's result, when it was taken (and, for a
    load-generating node's, the node). Checks of another shape in a foreign store are kept whole in ``extra``."""

    clean: bool | None = None
    checks: list[Any] | None = None  # CheckResult each
    taken: str | None = None
    node: str | None = None

    @classmethod
    def of(cls, results: list[CheckResult]) -> GuardSnapshot:
        """A snapshot taken now: clean when no check failed."""
        return cls.written(clean=not any(r.status == FAIL for r in results), checks=results,
                           taken=time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    @property
    def results(self) -> list[CheckResult]:
        return list(self.checks or [])

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.results if c.status == FAIL]

    @property
    def dirty(self) -> bool:
        return self.clean is False

    @property
    def unchecked(self) -> bool:
        """A server host's snapshot that is only its agent's silence: the host went unchecked, not found dirty."""
        return [c.name for c in self.failed] == [AGENT_CHECK]

    def update(self, d: dict[str, Any]) -> None:
        Keyed.update(self, d)
        if self.checks is not None:
            parsed = [CheckResult.from_dict(c) for c in self.checks]
            if all(c is not None for c in parsed):
                self.checks = parsed
            else:  # a check of another shape: the list kept whole, unread
                self.extra["checks"], self.checks = self.checks, None

    def to_dict(self) -> dict[str, Any]:
        out = Keyed.to_dict(self)
        if self.checks is not None:
            out["checks"] = [c.to_dict() for c in self.results]
        return out
