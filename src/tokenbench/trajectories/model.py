"""The typed model of recorded agent trajectories, whatever file they came from: a replayer drives these values and
never the source format.

A ``Trajectory`` is one session tree: its model calls in order and its subagents, each a ``Subagent`` that holds a
child trajectory and its anchor in the parent (after which parent call it starts, when, and which parent call
waits for its return). A ``Call`` is one model call: token counts, the pause before it, its recorded start offset,
and either length-only data (``Blocks``: hash ids over blocks of prompt tokens) or full text (``Message`` objects,
tool schemas). A ``TrajectorySet`` is what one file or folder held, with the figures a run's manifest records
(``figures.Figures``).

Memory follows the distinct data, not the re-sent data: a call's hash ids are a view (``HashIds``) on a buffer that
the next call of the same trajectory extends in place when it re-sends the same prefix, and a full-text call's
messages are the same ``Message`` objects as the call before's, so a 100-call session that re-sends its history
holds each message once.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from ..chat import Message

if TYPE_CHECKING:
    from .figures import Figures

TrajectoryFormat = Literal["weka", "mlcommons", "tracelab", "session-log"]
#: The formats this package reads.
TRAJECTORY_FORMATS: tuple[TrajectoryFormat, ...] = ("weka", "mlcommons", "tracelab", "session-log")
#: Every name ``--trace-format`` takes: trace.py's two open-loop formats, then the trajectory formats.
TRACE_FORMATS: tuple[str, ...] = ("mooncake", "csv", *TRAJECTORY_FORMATS)

#: How a call's hash ids cover its prompt: ``floor`` hashes only whole blocks (``in // block`` ids, the rest of the
#: prompt an unhashed tail, as Weka traces and vLLM's prefix cache count); ``ceil`` hashes the partial last block
#: too (``ceil(in / block)`` ids, as Mooncake traces count).
Rounding = Literal["floor", "ceil"]
#: What a call's pause counts from: ``start`` (the trajectory's start: its first call), ``answer`` (the previous
#: call's recorded end), ``estimated-answer`` (the previous call's end where the file did not record it: see the
#: format's module), ``subagents`` (the return of the subagents this call waits for).
PauseFrom = Literal["start", "answer", "estimated-answer", "subagents"]
#: Raw JSON as the file holds it: only a message's content parts and tool schemas, which are the payload.
JSON = Any


class HashIds(Sequence[int]):
    """A call's hash ids: the first ``n`` ids of a buffer that later calls of its trajectory may extend (never
    change), so calls that re-send a prefix share its ids."""

    __slots__ = ("_buf", "_n")

    def __init__(self, buf: array[int], n: int | None = None) -> None:
        self._buf = buf
        self._n = len(buf) if n is None else n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice):
            return tuple(self.array()[i])
        if not -self._n <= i < self._n:
            raise IndexError("hash id index out of range")
        return self._buf[i % self._n]

    def __iter__(self) -> Iterator[int]:
        return iter(self.array())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, HashIds):
            return self.array() == other.array()
        return isinstance(other, Sequence) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"HashIds({list(self.array())})"

    def array(self) -> array[int]:
        """The ids as a (copied) machine array."""
        return self._buf[: self._n]

    def shares_buffer(self, other: HashIds) -> bool:
        return self._buf is other._buf


class HashIdChain:
    """Makes one trajectory's ``HashIds`` in call order: ids that begin with the last call's ids extend its buffer
    in place; any other ids start a buffer of their own."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: HashIds | None = None

    def add(self, ids: array[int]) -> HashIds:
        last = self._last
        if last is not None and last._n == len(last._buf) and len(ids) >= last._n and ids[: last._n] == last._buf:
            last._buf.extend(ids[last._n:])
            out = HashIds(last._buf, len(ids))
        else:
            out = HashIds(ids)
        self._last = out
        return out


@dataclass(frozen=True, slots=True)
class Blocks:
    """A length-only call's prompt as blocks: ``hash_ids[i]`` names block i of ``size`` tokens; two calls of one
    trajectory tree that list the same leading ids send the same leading tokens (ids are per tree: the replayer
    salts each tree)."""

    hash_ids: HashIds
    size: int  # tokens per block
    rounding: Rounding
    input_tokens: int

    @property
    def partial(self) -> int:
        """Tokens of the prompt's last, partial block: hashed (the last id's block) under ``ceil``, an unhashed
        tail under ``floor``; 0 when the prompt fills its blocks."""
        n = len(self.hash_ids)
        if self.rounding == "ceil":
            last = self.input_tokens - self.size * (n - 1) if n else 0
            return 0 if last == self.size else last
        return self.input_tokens - self.size * n

    def block_tokens(self) -> list[int]:
        """Tokens in each hashed block: whole blocks, then under ``ceil`` the partial last one."""
        n = len(self.hash_ids)
        if self.rounding == "ceil" and n:
            return [self.size] * (n - 1) + [self.input_tokens - self.size * (n - 1)]
        return [self.size] * n


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool the call's answer ran, where the format records it without text: its name and how long it took."""

    name: str
    seconds: float | None


@dataclass(frozen=True, slots=True)
class Call:
    """One model call. Token counts are None where the format records none (full text: the replayer counts).
    ``start_s``: the recorded send time, seconds after its trajectory's start (None: the format records no
    times). ``pause_s``: the pause before it, from what ``pause_from`` says to the send, as the format's module
    documents it."""

    index: int  # place in its trajectory, from 0
    where: str  # where it is in the file: "line 17", "requests[3]"
    input_tokens: int | None
    output_tokens: int | None
    pause_s: float
    pause_from: PauseFrom
    start_s: float | None = None
    duration_s: float | None = None  # recorded send to last byte, where recorded
    ttft_s: float | None = None  # recorded send to first byte, where recorded
    cached_tokens: int | None = None  # prompt tokens the recording server served from its cache, where recorded
    model: str | None = None
    blocks: Blocks | None = None  # length-only formats
    messages: tuple[Message, ...] = ()  # full-text formats: the request's messages, in order
    tools: tuple[JSON, ...] | None = None  # the request's tool schemas, raw JSON (shared between calls)
    tool_choice: JSON = None
    answer: Message | None = None  # the recorded output, where the format has it
    tool_uses: tuple[ToolUse, ...] = ()

    @property
    def answer_text(self) -> str:
        """The recorded answer as a tokenizer counts it: its reasoning, text and tool calls (a reasoning model
        generates all three), "" where none is recorded."""
        a = self.answer
        if a is None:
            return ""
        parts = [a.reasoning_content or "", a.content if isinstance(a.content, str) else ""]
        parts += [c.name + c.arguments for c in a.tool_calls]
        return " ".join(p for p in parts if p)

    @property
    def sent_for_one(self) -> bool:
        """A call recorded with no output (cut off, or failed, where it was recorded: 0 tokens and no answer's
        text), which a replay sends for 1 token, the least a server generates."""
        recorded = self.output_tokens == 0 or (self.output_tokens is None and self.answer is not None)
        return recorded and not self.answer_text


@dataclass(frozen=True, slots=True)
class Subagent:
    """A child trajectory and its anchor in the parent's clock. ``after_call``: the parent call after whose answer
    it starts (None: before the parent's first call); ``start_s``: its start, seconds after the parent's start;
    ``delay_s``: from that call's end to its start; ``joined_by``: the parent call that waits for its return (None:
    the parent does not wait); ``end_s``: its return, where recorded."""

    trajectory: Trajectory
    after_call: int | None
    start_s: float | None
    delay_s: float
    joined_by: int | None
    end_s: float | None = None


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One session tree. ``id``: stable across loads (the recorded id, a subagent's qualified by its parent's);
    ``where``: where it starts in the file; ``epoch_s``: its recorded wall-clock start (POSIX seconds), where the
    format records one; ``kind``: a subagent's type, where recorded."""

    id: str
    format: TrajectoryFormat
    path: Path
    where: str
    calls: tuple[Call, ...]
    subagents: tuple[Subagent, ...] = ()
    epoch_s: float | None = None
    kind: str | None = None

    def walk(self) -> Iterator[tuple[float | None, Trajectory]]:
        """Itself and every nested subagent's trajectory, each with its start in this trajectory's clock (None
        where a start is not recorded)."""
        yield 0.0, self
        for sub in self.subagents:
            for offset, t in sub.trajectory.walk():
                yield (None if sub.start_s is None or offset is None else sub.start_s + offset), t

    def timeline(self) -> list[tuple[float, Trajectory, Call]]:
        """Every call of the tree in the order it was sent: (start in this trajectory's clock, its trajectory, the
        call). Where times are not recorded, a trajectory's calls follow its parent's, in order."""
        out: list[tuple[float, int, Trajectory, Call]] = []
        for offset, t in self.walk():
            for c in t.calls:
                at = c.start_s if c.start_s is not None else float(c.index)
                out.append(((offset or 0.0) + at, len(out), t, c))
        out.sort(key=lambda x: (x[0], x[1]))
        return [(at, t, c) for at, _, t, c in out]


@dataclass(frozen=True, slots=True)
class TrajectorySet:
    """What one file (or folder of Weka files) held. ``skipped``: (reason, rows) the loader passed over, as the
    format's module documents."""

    path: Path
    sha256: str  # of the file's bytes; of a folder, of its files' names and bytes in name order
    format: TrajectoryFormat
    trajectories: tuple[Trajectory, ...]
    figures: Figures
    block: int | None = None  # tokens per hash id block, for length-only formats
    skipped: tuple[tuple[str, int], ...] = field(default=())
    #: hash ids name one block whichever tree sent it (a session log's: one key for the whole recording), so
    #: trees share the blocks they recorded sharing (an agent's system prompt); else they are each tree's own
    shared_blocks: bool = False

    def describe(self) -> dict[str, Any]:
        """What a run's manifest records of the trajectories it replayed."""
        return {"path": str(self.path), "sha256": self.sha256, "format": self.format, "block": self.block,
                **self.figures.to_dict(), "skipped": dict(self.skipped)}
