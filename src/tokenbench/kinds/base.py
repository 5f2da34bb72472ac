"""What a workload kind gives a sweep, and what a sweep gives it.

A sweep (``sweep.py``) conducts: it opens the endpoint, asks its level plan for the next level, warms up, measures,
summarises and stores. What is sent is the workload kind's, one module each (``lengths.py``, ``dataset.py``,
``trace.py``, ``sessions.py``): the levels its options ask for, the options it cannot run with (refused once,
here in the library, in one line), the manifest's workload entry, each request's fields and its prompts, and how
one level's measured phase runs (a stream of requests, or agents that each wait for their last answer).

A kind is a frozen value on the sweep's config (``SweepConfig.workload``). Once the endpoint is open the sweep binds
it (``Kind.bind``) to what the run learned: the server's adapter and slots, the tokenizer's prompt builder, the
seed. The bound kind (``Bound``) gives the run's request fields and prompts, and one ``LevelWork`` per level.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..client import Api
from ..engines.embedded import slot_context
from ..grace import Waiting
from ..offered_load import Level
from ..metrics import cached_counts
from ..records import RequestRecord

if TYPE_CHECKING:
    from ..client import StreamClient
    from ..endpoint import Endpoint
    from ..levels import ServingLevel
    from ..slo import SLO
    from ..workload import PromptBuilder

OnDone = Callable[[RequestRecord], None]
Note = Callable[[str], None]


class SweepOptions(Protocol):
    """The sweep options a kind reads: the levels asked for and what runs them (``SweepConfig`` is one)."""

    api: Api
    concurrency: list[int]
    rates: list[float]
    arrival: str
    max_concurrency: int | None
    requests: int | None
    duration_s: float | None
    grace_s: float | None
    warmup: int | None
    repetitions: int
    workers: int | None
    ray: str | None
    fixed_output: bool
    extra_body: dict[str, Any]
    slo: SLO | None


def warmups(opts: SweepOptions, level: Level) -> int:
    """Uncounted requests before a level: as asked, else one per concurrent slot (at most 4 in open loop); a
    schedule's (a trace's) warm-up plays its first arrivals, so at most as many as it holds (more left the rest
    of the warm-up prompts to be sent as the trace's first requests, and its last request unsent)."""
    n = opts.warmup if opts.warmup is not None else (level.concurrency or min(4, level.max_concurrency or 4))
    return n if level.schedule is None else min(n, len(level.schedule))


def request_levels(opts: SweepOptions) -> list[Level]:
    """Independent requests' levels: open loop at each rate, else closed loop at each concurrency."""
    arrival: Literal["poisson", "constant"] = "constant" if opts.arrival == "constant" else "poisson"
    if opts.rates:
        return [Level(rate=r, arrival=arrival, max_concurrency=opts.max_concurrency) for r in opts.rates]
    return [Level(concurrency=c) for c in opts.concurrency]


class PromptPool(Protocol):
    """A run's prompts, built ahead of the level (``prepare``) so building never delays a send; the workers
    (workers.WorkerPool) ``take`` theirs, the run's own loop asks for the ``next``."""

    longest: int  # the most tokens (prompt and output) of a request prepared so far (0: the kind's bound stands)

    async def prepare(self, n: int) -> None: ...

    async def next(self) -> tuple[int, Any]: ...

    async def take(self, n: int) -> list[tuple[int, Any]]: ...


class LevelLoad(Protocol):
    """What runs a level's measured phase (the sweep's): a stream of requests from a prompt pool, in this process
    or over the workers; or agents, in this process."""

    async def measured(self, level: Level, n: int | None, duration_s: float | None, seed: int,
                       records: list[RequestRecord], on_done: OnDone) -> None: ...

    async def agents(self, run: AgentRun, level: Level, records: list[RequestRecord]) -> None: ...

    #: where a level's records can go before its end (the store's requests table), so a soak need not hold
    #: every turn: each record handed here once, and never stored again at the end
    spill: Callable[[list[RequestRecord]], None] | None


class AgentRun(Protocol):
    """Agents that each wait for their last answer (sessions, replays): run them all, return the window;
    ``waiting`` is told, past a level's time, what is still in flight (grace.within_grace)."""

    async def run(self, waiting: Waiting | None = None) -> tuple[int, int]: ...


class LevelWork(Protocol):
    """One level (one repetition) of a bound kind."""

    planned: int | None  # measured requests planned (None: the level runs whole sessions)
    stoppable: bool  # a capacity search may stop it once its verdict is known

    def prepare(self, warm: int) -> int:
        """Prompts to build before the level, for ``warm`` warm-up requests and the measured phase."""
        ...

    async def measure(self, load: LevelLoad, level: Level, duration_s: float | None, seed: int,
                      records: list[RequestRecord], on_done: OnDone) -> None: ...

    def attach(self, summary: ServingLevel, records: list[RequestRecord]) -> None:
        """What the kind alone knows of the finished level, put on its summary."""
        ...

    def counted(self, records: list[RequestRecord], since_ns: int) -> tuple[int, int]:
        """Cached prompt tokens and prompt tokens, as the responses said, of every request the server counted
        from ``since_ns`` on: the measured ones (those a soak let go too), and any the level sent beside them (a
        background load), which its figures leave out and the server's counters hold."""
        ...

    def whole(self, records: list[RequestRecord]) -> list[list[RequestRecord]] | None:
        """The level's sessions that ran to their end, each its measured calls (None: the kind sends no
        sessions): the session objectives are judged on them."""
        ...


def sent_since(records: list[RequestRecord], since_ns: int) -> tuple[int, int]:
    """``LevelWork.counted`` over a level's own records."""
    return cached_counts([r for r in records if r.ok and r.sent_ns >= since_ns])


#: Prompts built before a level held for a duration, at most: the rest are built as it goes. A level of
#: ``--duration 2s --requests 1000000`` ends at whichever comes first, and built every prompt first (minutes).
PREBUILT_TIMED = 256


class RequestLevel:
    """A level of independent requests from the run's prompt pool: ``planned`` of them (or for the duration;
    ``timed``: the level also ends at its duration, so not every planned prompt may be sent)."""

    stoppable = True

    def __init__(self, planned: int | None, level: Level, timed: bool = False) -> None:
        self.planned, self.level, self.timed = planned, level, timed

    def prepare(self, warm: int) -> int:
        ahead = max(8, 2 * (self.level.concurrency or 4))
        if self.planned is None:
            return warm + ahead
        return warm + (min(self.planned, max(ahead, PREBUILT_TIMED)) if self.timed else self.planned)

    async def measure(self, load: LevelLoad, level: Level, duration_s: float | None, seed: int,
                      records: list[RequestRecord], on_done: OnDone) -> None:
        await load.measured(level, self.planned, duration_s, seed, records, on_done)

    def attach(self, summary: ServingLevel, records: list[RequestRecord]) -> None:
        pass

    def whole(self, records: list[RequestRecord]) -> list[list[RequestRecord]] | None:
        return None

    def counted(self, records: list[RequestRecord], since_ns: int) -> tuple[int, int]:
        return sent_since(records, since_ns)


@dataclass(slots=True)
class Binding:
    """What a kind is bound to once the endpoint is open."""

    endpoint: Endpoint
    opts: SweepOptions
    client: StreamClient
    builder: PromptBuilder
    seed: int
    note: Note
    warn: Note

    def length_fields(self, n: int) -> dict[str, Any]:
        """The fields that fix one request's output length at ``n`` as the server allows (none where the output is
        not fixed), the user's --extra-body on top."""
        ep, opts = self.endpoint, self.opts
        fixed = ep.info.adapter.output_length_fields(n, ep.eos_token_id, opts.api) if opts.fixed_output else {}
        return fixed | opts.extra_body


class Bound(Protocol):
    """A kind bound to one run."""

    #: the fields the client puts in every request ({} where each request carries its own)
    body_extras: dict[str, Any]
    #: the request fields the manifest records (a field that follows each request's length says so)
    recorded_fields: dict[str, Any]

    def workload_entry(self) -> dict[str, Any]:
        """The manifest's workload entry."""
        ...

    def prompts(self) -> PromptPool:
        """The run's prompt pool (warm-ups, and a request kind's measured requests); says what it read."""
        ...

    def level(self, level: Level, repetition: int, records: list[RequestRecord], on_done: OnDone) -> LevelWork: ...


class Kind(Protocol):
    """A workload kind: a frozen value on the sweep's config."""

    name: str
    #: its levels can be split over workers (independent requests); else it runs in this process
    splits: bool
    #: its levels hold more agents than the engine has slots on purpose (a cache-cliff search: the pool is what
    #: it measures), so a level past the slots is no level to rerun with more
    outgrows_slots: bool

    def refuse(self, opts: SweepOptions) -> None:
        """Raise ``UsageError`` in one line for an option this kind cannot run with."""
        ...

    def levels(self, opts: SweepOptions) -> list[Level]: ...

    def longest_request(self) -> int:
        """The most tokens (prompt and output) one request can need: what an engine's slot must hold."""
        ...

    def typical_input(self) -> int:
        """A typical prompt's tokens (what the cost of one send is measured with)."""
        ...

    def for_search(self) -> Kind:
        """The kind as a capacity search runs it: one level for each value it tries."""
        ...

    def for_slot(self, limit: int) -> tuple[int, Kind]:
        """The slot context an embedded engine whose model holds ``limit`` tokens starts with, and the kind as it
        runs there."""
        ...

    def bind(self, b: Binding) -> Bound: ...


def plain_slot(kind: Kind) -> tuple[int, Kind]:
    """A slot that holds the kind's longest request, the kind unchanged."""
    return slot_context(kind.longest_request()), kind
