"""A finding: what a level's numbers cannot say by themselves, as a typed value (hyperfine's ``Warnings``,
guidellm's ``BenchmarkWarning``): a code from a closed set, a message, a remedy, and the observed value against its
threshold, with its unit and the number of samples it rests on. The rules that raise them are ``findings.py``'s.

``flags`` and ``warnings`` of the JSON result contract are a view of a level's findings (``LevelSummary.add``
keeps them), so scripts that read them keep working and stored runs made before findings still load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Literal


class Code(StrEnum):
    """The closed set of findings. The value is the flag of the JSON contract: extend, never rename."""

    MULTI_TOKEN_CHUNKS = "multi_token_chunks"
    USAGE_ABSENT = "usage_absent"
    OUTPUT_SHORT = "output_short"
    PROMPT_TRUNCATED = "prompt_truncated"
    P99_ESTIMATE = "p99_estimate"
    ERRORS = "errors"
    INTERRUPTED = "interrupted"
    DIRTY_BENCH = "dirty_bench"
    CLIENT_BOUND = "client_bound"
    SLOTS_EXCEEDED = "slots_exceeded"
    CONCURRENCY_NOT_REACHED = "concurrency_not_reached"
    ERROR_RATE = "error_rate"
    UNSTABLE = "unstable"
    CONTEXT_NOT_WARM = "context_not_warm"
    TIMINGS_DISAGREE = "timings_disagree"
    EXCEEDS_SERVER_TIMINGS = "exceeds_server_timings"
    EXCEEDS_CONTEXT = "exceeds_context"
    WORKER_LOST = "worker_lost"
    CACHE_COUNTS_DISAGREE = "cache_counts_disagree"
    STOPPED_EARLY = "stopped_early"
    CONTEXT_OVERFLOW = "context_overflow"
    NO_PLATEAU = "no_plateau"
    DRIFT = "drift"
    TAIL_CLUSTER = "tail_cluster"
    RATE_BELOW_TPOT = "rate_below_tpot"
    PHASE_LOCKED = "phase_locked"
    CACHE_DECAY = "cache_decay"
    ONE_READ = "one_read"
    DECODE_PAST_PREFILL = "decode_past_prefill"
    OVER_OFFERED = "over_offered"
    UNANSWERED = "unanswered"
    HOST_UNCHECKED = "host_unchecked"
    RATE_NOT_SUSTAINED = "rate_not_sustained"
    SERVER_GONE = "server_gone"
    PAST_CACHE_CLIFF = "past_cache_cliff"


#: "warning": shown and listed in ``warnings``; "note": a flag only (an estimate, a state), no text of its own.
Severity = Literal["warning", "note"]


@dataclass(frozen=True, slots=True)
class Finding:
    code: Code
    message: str
    remedy: str = ""
    observed: float | None = None
    threshold: float | None = None
    unit: str = ""
    n: int | None = None  # the samples the observed value rests on
    severity: Severity = "warning"

    @property
    def text(self) -> str:
        """The finding as one line: what was seen, then what to do (the ``warnings`` entry)."""
        return f"{self.message}; {self.remedy}" if self.remedy else self.message

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "code": self.code.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding | None:
        """A stored finding, or None for a code this version does not know (a newer tool wrote it)."""
        try:
            code = Code(d["code"])
        except (KeyError, ValueError, TypeError):
            return None
        known = set(cls.__dataclass_fields__) - {"code"}
        try:
            return cls(code=code, **{k: v for k, v in d.items() if k in known})
        except TypeError:  # a field of another shape: the flag and warning still say it
            return None
