"""Weka / AgentX traces: captured Claude Code sessions, length-only, one JSON object per session (a folder of them is
one set). The format is kv-cache-tester's (callanjfox/kv-cache-tester, docs/trace_replay_tester.md "Trace Format";
its traces/ folder holds 739 of them); SemiAnalysis' AgentX/InferenceX replays them through AIPerf's ``weka_trace``
loader (ai-dynamo/aiperf, aiperf/dataset/loader/weka_trace_models.py and weka_trace.py).

    {"id": "trace_0001", "block_size": 64, "hash_id_scope": "local", "tool_tokens": 12974, "system_tokens": 4243,
     "requests": [
       {"t": 0.0, "type": "n", "model": "...", "in": 71175, "out": 169, "hash_ids": [1, 2, ...],
        "api_time": 7.34, "think_time": 0.0, "stop": "tool_use", "input_types": [...], "output_types": [...]},
       {"t": 19.0, "type": "s", ..., "ttft": 4.48},
       {"t": 134.2, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore", "status": "completed",
        "duration_ms": 126000, "requests": [{"t": 0.0, "type": "n", ...}, ...]}]}

``type`` ``n`` is a call, ``s`` a streamed call (``ttft`` where recorded), ``subagent`` a child session with its own
``requests`` (which may nest). ``t`` is seconds from the session's start; a subagent's own calls' ``t`` count from
the subagent's start (every one of the 63 subagents in the public set starts its calls at 0.0). ``api_time`` is the
call's send-to-end seconds, ``think_time`` the recorded pause before the call. Hash ids are ``local``: per session
(a subagent shares its parent's scope), so two sessions' ids never name the same block. Other keys are ignored.

Hash ids: Weka's cover ``floor(in / block_size)`` blocks (only whole blocks are hashed; the rest of the prompt is
an unhashed tail: all 49,334 calls of the public set), Mooncake's ``ceil`` (the partial last block hashed too).
Both are accepted, decided per call; any other count is refused.

Two traps, decided from the public traces (kv-cache-tester at 94f6046, traces/*.json: the 710 files under 4 MiB):

- A completed subagent's ``t`` is when it *returned*, not when it started (AIPerf's model calls it the spawn
  time; the data disagree). Its start is ``t - duration_ms / 1000``: for all 59 completed subagents that start lies
  0.0-1.1 s after the end (``t + api_time``) of the parent's call before it, subagents launched together share one
  start to 0.1 s, their calls' ``t`` run from 0 to about ``duration_ms``, and the parent's next call comes after the
  latest return. So tokenbench starts a completed subagent at ``t - duration_ms / 1000`` and has the parent's next
  call wait for it (``Subagent.joined_by``). An ``async_launched`` subagent (no ``duration_ms``: 4 in the set)
  starts at ``t`` and the parent does not wait (its next call comes seconds later while the subagent runs on).
- ``api_time`` is missing on 4,312 of the 8,466 streamed calls (51%; every non-streamed call has it), and then the
  next call's ``think_time`` does not count from that call's answer: it counts from the end of the last call that
  has an ``api_time`` (``t_next - (t_j + api_time_j) - think_time`` has median 0.01 s, 98% within 0.9 s, over the
  4,158 such pairs, while ``think_time`` exceeds the whole gap ``t_next - t_prev`` by 54 s at the median). So
  after such a call tokenbench does not use ``think_time``: the pause is ``t_next - t_prev`` less the call's
  estimated duration, at its trajectory's median seconds per output token over the calls that have an
  ``api_time`` (that estimate misses a recorded ``api_time`` by 1.2 s at the median; counting none misses by
  6.1 s), never below 0 (``pause_from="estimated-answer"``).

What those 710 files hold, as ``load_trajectories`` reads them: 49,334 calls (45.5 a session at the median,
subagents' included), 103,659 input tokens a call at the median, 6.04 billion in all, 96.3% of them in blocks an
earlier call of the same session already sent (the ideal cached share), 63 subagents in 17 sessions, at most 4 of
one session running at once.

Pauses (``Call.pause_s``): the first call's is its ``t``; after a call with an ``api_time`` the recorded
``think_time`` (else ``t - (t_prev + api_time_prev)``); for a call that waits for subagents, from the latest
return to its ``t``; never below 0. Calls of one list must not go back in time (refused: a trace lists its calls in
the order they were sent). The ``block`` a caller gives must match the file's ``block_size`` (a Weka trace
declares its own).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .boundary import (Refusal, as_hash_ids, as_list, as_milliseconds, as_obj, as_optional_seconds, as_optional_text,
                       as_seconds, as_text, as_tokens, parse_json, read_text, refuse, rounding_of)
from .model import Blocks, Call, HashIdChain, Subagent, Trajectory


@dataclass(slots=True)
class _Raw:
    """One call entry, checked."""

    where: str
    t: float
    n_in: int
    n_out: int
    blocks: Blocks
    api: float | None
    think: float | None
    ttft: float | None
    model: str | None


@dataclass(slots=True)
class _RawSub:
    where: str
    t: float
    duration_s: float | None
    completed: bool
    child: Trajectory


def load_weka(path: Path, block: int | None, read: tuple[bytes, str] | None = None
              ) -> tuple[str, tuple[Trajectory, ...], int | None]:
    """(sha256, trajectories, block size) of a Weka trace file (``read``: its bytes and text, where already read)
    or a folder of them (its ``.json`` files in name order; the digest covers their names and bytes)."""
    files = sorted(p for p in path.iterdir() if p.suffix.lower() == ".json" and p.is_file()) if path.is_dir() \
        else [path]
    if not files:
        raise UsageError(f"{path}: a folder with no .json trace in it")
    digest = hashlib.sha256()
    trees = []
    for f in files:
        raw, text = read if read is not None and f == path else read_text(f)
        if path.is_dir():
            digest.update(f.name.encode() + b"\0" + hashlib.sha256(raw).digest())
        else:
            digest.update(raw)
        try:
            trees.append(_trace(f, _document(text), block))
        except Refusal as r:
            raise refuse(f, r) from None
    sizes = {t.calls[0].blocks.size for t in trees if t.calls and t.calls[0].blocks}
    return digest.hexdigest(), tuple(trees), sizes.pop() if len(sizes) == 1 else None


def _document(text: str) -> Any:
    """A Weka trace's one JSON document. JSON lines (a record a line, as the line formats hold) are refused at the
    line where the second record starts, as a line format names a line, not as a file that is "not JSON"."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":
            raise Refusal("line", "a second JSON record: a Weka trace is one JSON object, not JSON lines (several "
                                  "traces: a folder of .json files)", e.lineno) from None
    except RecursionError:
        pass
    return parse_json(text)


def _trace(path: Path, doc: Any, block: int | None) -> Trajectory:
    d = as_obj(doc, "file")
    for name in ("id", "block_size", "requests"):
        if name not in d:
            raise Refusal(name, "missing")
    tid = as_text(d["id"], "id", allow_empty=False)
    size = as_tokens(d["block_size"], "block_size")
    if block is not None and block != size:
        raise Refusal("block_size", f"the file's {size} disagrees with the block size asked for ({block}): a Weka "
                                    "trace declares its own")
    scope = d.get("hash_id_scope", "local")
    if scope != "local":
        raise Refusal("hash_id_scope", f"{scope!r}: tokenbench reads per-trace hash ids (\"local\")")
    return _trajectory(path, tid, "requests", d["requests"], size, None)


def _trajectory(path: Path, tid: str, where: str, value: Any, size: int, kind: str | None) -> Trajectory:
    entries = as_list(value, where)
    chain = HashIdChain()
    raws: list[_Raw | _RawSub] = []
    seen: set[str] = set()
    for i, e in enumerate(entries):
        at = f"{where}[{i}]"
        try:
            kind_of = as_obj(e, "type").get("type")
            if kind_of == "subagent":
                raws.append(_subagent(path, tid, at, e, size, seen))
            elif kind_of in ("n", "s"):
                raws.append(_call(at, e, size, chain))
            else:
                raise Refusal("type", f"{kind_of!r} is not n, s or subagent")
        except Refusal as r:
            raise r.under(at) from None
    return _assemble(path, tid, where, raws, kind)


def _call(at: str, e: dict[str, Any], size: int, chain: HashIdChain) -> _Raw:
    for name in ("t", "in", "out"):
        if name not in e:
            raise Refusal(name, "missing")
    n_in = as_tokens(e["in"], "in")
    ids = as_hash_ids(e.get("hash_ids", []), "hash_ids")
    rounding = rounding_of(len(ids), n_in, size, "hash_ids")
    return _Raw(at, as_seconds(e["t"], "t"), n_in, as_tokens(e["out"], "out", minimum=0),
                Blocks(chain.add(ids), size, rounding, n_in), as_optional_seconds(e.get("api_time"), "api_time"),
                as_optional_seconds(e.get("think_time"), "think_time"), as_optional_seconds(e.get("ttft"), "ttft"),
                as_optional_text(e.get("model"), "model"))


def _subagent(path: Path, tid: str, at: str, e: dict[str, Any], size: int, seen: set[str]) -> _RawSub:
    if "t" not in e:
        raise Refusal("t", "missing")
    if "requests" not in e:
        raise Refusal("requests", "missing (a subagent lists its own calls)")
    t = as_seconds(e["t"], "t")
    dur = e.get("duration_ms")
    duration = None if dur is None else as_milliseconds(dur, "duration_ms")
    status = as_optional_text(e.get("status"), "status")
    agent = as_optional_text(e.get("agent_id"), "agent_id") or at
    sid = f"{tid}/{agent}" if f"{tid}/{agent}" not in seen else f"{tid}/{at}"
    seen.add(sid)
    if duration is not None and duration > t:
        raise Refusal("duration_ms", f"{dur:g} ms is longer than the {t:g} s before it returned (t)")
    try:
        child = _trajectory(path, sid, "requests", e["requests"], size,
                            as_optional_text(e.get("subagent_type"), "subagent_type"))
    except Refusal as r:
        if r.field == "requests" and r.why == "an empty list":
            raise Refusal("requests", "an empty list: a subagent with no calls") from None
        raise
    completed = duration is not None and status != "async_launched"
    return _RawSub(at, t, duration, completed, child)


def _rate(calls: list[_Raw]) -> float | None:
    """Median recorded seconds per output token, for a call whose ``api_time`` is missing."""
    rates = [c.api / c.n_out for c in calls if c.api is not None and c.n_out > 0]
    return statistics.median(rates) if rates else None


def _end(c: _Raw, rate: float | None) -> tuple[float, bool]:
    """A call's end, and whether it is estimated."""
    if c.api is not None:
        return c.t + c.api, False
    return c.t + (rate * c.n_out if rate else 0.0), True


def _assemble(path: Path, tid: str, where: str, raws: list[_Raw | _RawSub], kind: str | None) -> Trajectory:
    calls_raw = [r for r in raws if isinstance(r, _Raw)]
    rate = _rate(calls_raw)
    calls: list[Call] = []
    subs: list[Subagent] = []
    waiting: list[float] = []  # returns the next call waits for
    prev: _Raw | None = None
    for r in raws:
        if isinstance(r, _RawSub):
            subs.append(_anchor(r, prev, len(calls), rate, bool(calls_raw[len(calls):])))
            if r.completed:
                waiting.append(r.t)
            continue
        if prev is not None and r.t < prev.t:
            raise Refusal(f"{r.where}.t", f"{r.t:g} s is before {prev.where}'s {prev.t:g} s (a trace lists its "
                                           "calls in the order they were sent)")
        calls.append(_typed(r, len(calls), prev, waiting, rate))
        waiting, prev = [], r
    return Trajectory(tid, "weka", path, where, tuple(calls), tuple(subs), kind=kind)


def _typed(r: _Raw, index: int, prev: _Raw | None, waiting: list[float], rate: float | None) -> Call:
    if prev is None:
        pause, since = r.t, "start"
    elif waiting:
        pause, since = r.t - max(waiting), "subagents"
    elif prev.api is not None:
        pause, since = (r.think if r.think is not None else r.t - prev.t - prev.api), "answer"
    else:
        pause, since = r.t - _end(prev, rate)[0], "estimated-answer"
    return Call(index, r.where, r.n_in, r.n_out, max(0.0, pause), since,  # type: ignore[arg-type]
                start_s=r.t, duration_s=r.api, ttft_s=r.ttft, model=r.model, blocks=r.blocks)


def _anchor(s: _RawSub, prev: _Raw | None, calls_before: int, rate: float | None, parent_goes_on: bool
            ) -> Subagent:
    start = s.t - s.duration_s if s.completed and s.duration_s is not None else s.t
    after = calls_before - 1 if prev is not None else None
    delay = start - _end(prev, rate)[0] if prev is not None else start
    joined = calls_before if s.completed and parent_goes_on else None
    return Subagent(s.child, after, start, max(0.0, delay), joined, s.t if s.completed else None)
