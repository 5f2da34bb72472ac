"""``tokenbench compare``'s one library call (``compare_runs``): both runs read from the store, compared level by
level (``levels``), turn by turn where both are agent-session runs (``sessions``), their capacities (``capacity``)
and their quality beside."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..results import RunResult
from ..session_view import is_replay_run, is_session_run
from .capacity import CapacityComparison, compare_capacity
from .levels import Comparison, compare, points
from .replays import ReplayComparison, compare_replays
from .sessions import SessionComparison, compare_sessions

if TYPE_CHECKING:
    from ..quality.parity import Beside

@dataclass(frozen=True, slots=True)
class CompareConfig:
    """The two runs ``tokenbench compare`` sets side by side (ids, id prefixes or labels), the effective-serving
    line's workload (``agents`` asking for ``tokens`` each) and the results database (None: $TOKENBENCH_DB or the
    user data dir)."""

    a: str
    b: str
    agents: int = 16
    tokens: int = 200
    latest: bool = False  # a label several runs share means the newest of them
    db: str | None = None


@dataclass(slots=True)
class Compared:
    """What ``compare_runs`` found: the rows (every kind of run), the turns and levels of two agent-session runs,
    both boxes' capacities within their SLOs and their quality (None where they have none)."""

    run_a: RunResult
    run_b: RunResult
    comparison: Comparison
    sessions: SessionComparison | None = None
    replays: ReplayComparison | None = None
    capacity: CapacityComparison | None = None
    quality: Beside | None = None

    def to_dict(self) -> dict[str, Any]:
        """``compare --json``: the rows, the quality and the capacities (null where either run has none), and a
        session comparison's turns and levels."""
        doc = self.comparison.to_dict()
        doc["quality"] = self.quality.to_dict() if self.quality is not None else None
        doc["capacity"] = self.capacity.to_dict() if self.capacity is not None else None
        if self.replays is not None:
            doc["replays"] = self.replays.to_dict()
        if self.sessions is not None:
            doc["sessions"] = asdict(self.sessions)
            for block, b in zip(doc["sessions"]["blocks"], self.sessions.blocks):
                for turn, t in zip(block["turns"], b.turns):
                    turn.update(warm_ratio=t.warm_ratio, busted_ratio=t.busted_ratio)
        return {"tool": "tokenbench", "kind": "compare", **doc}


def compare_runs(cfg: CompareConfig) -> Compared:
    """``tokenbench compare``'s work: both runs read from the store, compared row by row (two agent-session runs
    also turn by turn), their capacities and quality beside. A session run beside one that is not, or two runs
    that share nothing to compare, is a UsageError."""
    from ..quality.parity import beside
    from ..reader import REPORTED, load_result
    from ..session_view import mismatch
    from ..store import Store

    store = Store(cfg.db, readonly=True)
    ra, rb = (load_result(store, ref, latest=cfg.latest, kinds=REPORTED, command="compare") for ref in (cfg.a, cfg.b))
    labels = ra.manifest.label, rb.manifest.label  # quality is found by label
    ra, rb = _apart(ra, rb)
    replays = compare_replays(ra, rb, store) if is_replay_run(ra) or is_replay_run(rb) else None
    why = mismatch(ra, rb)  # a session run beside a plain sweep: refused in one line
    if why is not None:
        raise UsageError(why)
    sessions = compare_sessions(ra, rb) if is_session_run(ra) and replays is None else None
    c = compare(ra, rb, cfg.agents, cfg.tokens, store)
    cap = compare_capacity(ra, rb)  # both runs answer how many agents their box serves within an SLO
    # a sweep beside a llama-bench run once printed an empty table; two capacity searches compare their capacities
    if sessions is None and replays is None and not c.rows and len(c.effective) < 2 and cap is None:
        raise UsageError(f"runs {ra.run_id} and {rb.run_id} share no operating point to compare: the first has "
                         f"{points(ra)}; the second {points(rb)}")
    return Compared(ra, rb, c, sessions, replays, cap, beside(store, *labels))


def _apart(a: RunResult, b: RunResult) -> tuple[RunResult, RunResult]:
    """Two runs of one label (the same command run twice) named by label and run id, so every line of the
    comparison says which side it is; otherwise as they are."""
    if a.run_id == b.run_id or a.manifest.label is None or a.manifest.label != b.manifest.label:
        return a, b
    from dataclasses import replace

    def named(r: RunResult) -> RunResult:
        return replace(r, manifest=replace(r.manifest, label=f"{r.manifest.label} {r.run_id}"))

    return named(a), named(b)
