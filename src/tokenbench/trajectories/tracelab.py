"""TraceLab rows: length-only Claude Code and Codex sessions, one JSONL row per model call ("round"), as TraceLab
publishes them (uw-syfi/TraceLab, README.md "Data format" and example_sessions/sanitized/README.md; the release
``syfi_coding_trace.jsonl.gz``, 357,161 rounds of 8,058 sessions; the sample example_sessions/sanitized/
round_trace.jsonl). AIPerf replays them (ai-dynamo/aiperf, aiperf/dataset/loader/tracelab_trace.py and
_tracelab_convert.py).

    {"provider": "claude", "session_id": "claude:92ee...", "round_index": 0, "model": "...",
     "input_tokens_total": 32272, "prefix_tokens": 27217, "newly_append_tokens": 5055, "output_tokens": 931,
     "timing_events": [{"event_type": "user_message", "timestamp": "2026-06-01T05:40:20.151Z"},
                       {"event_type": "tool_call", "timestamp": "2026-06-01T05:40:30.836Z", ...}],
     "tools": [{"tool_name": "Bash", "tool_wall_latency_ms": 860, "tool_internal_latency_ms": null, ...}]}

``input_tokens_total = prefix_tokens + newly_append_tokens`` (refused otherwise): ``prefix_tokens`` is what the
recording service served from its prompt cache (Claude's cache read, Codex's cached tokens), so it is at most the
prefix the round shares with the one before (a cache that had evicted it reads as a shorter prefix).

Rows are grouped by ``session_id`` (they need not be together in the file) and ordered by when they were sent,
``round_index`` breaking ties (the file's ``round_index`` can disagree with its timestamps, as AIPerf notes; a row
out of order is put in place, not refused). A round was sent at its latest input event (``user_message`` or
``tool_result``: a round fed by parallel tool results waits for the last), or at its first event where it has no
input event; it ended at its last output event (``reasoning``, ``text``, ``tool_call``). Its pause is from the end
of the round before to its send; its ``start_s`` from the session's first send, whose wall-clock time is the
trajectory's ``epoch_s``, so sessions replayed at recorded times overlap as they did. A row with no timestamped
event, or with no prompt tokens, is skipped and counted (``TrajectorySet.skipped``). ``tools`` become the call's
``ToolUse`` (the tool's own latency where recorded, else the wall latency).

Hash ids: TraceLab records none, so they are made per session at ``block`` tokens a block (64 by default, AIPerf's
default; the file records no block size): a round keeps the first ``prefix_tokens // block`` ids of the round before
and takes new ids for the rest, ``floor(input_tokens_total / block)`` in all (floor rounding). TraceLab links no
subagent to its parent (a subagent is a session of its own); tokenbench does not guess the link (AIPerf infers it
from a spawning tool call's time window): each session is a trajectory of its own.
"""

from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .boundary import Refusal, as_list, as_milliseconds, as_obj, as_optional_text, as_text, as_tokens, json_lines, refuse
from .model import Blocks, Call, HashIdChain, ToolUse, Trajectory

#: Tokens a hash id names where the caller gives no block size (AIPerf's default for TraceLab).
DEFAULT_BLOCK = 64
INPUT_EVENTS = frozenset({"user_message", "tool_result"})
OUTPUT_EVENTS = frozenset({"reasoning", "text", "tool_call"})
NO_EVENTS = "with no timestamped event"
NO_PROMPT = "with no prompt tokens"


@dataclass(slots=True, frozen=True)
class _Round:
    line: int
    round_index: int
    sent: float  # POSIX seconds
    end: float | None
    n_in: int
    prefix: int
    n_out: int
    model: str | None
    tools: tuple[ToolUse, ...]


def load_tracelab(path: Path, text: str, block: int | None) -> tuple[tuple[Trajectory, ...], Counter[str]]:
    size = block or DEFAULT_BLOCK
    sessions: dict[str, list[_Round]] = {}
    skipped: Counter[str] = Counter()
    for line, row in json_lines(path, text):
        try:
            sid = as_text(row.get("session_id"), "session_id", allow_empty=False)
            r = _round(row, line, skipped)
        except Refusal as e:
            raise refuse(path, e.at(line)) from None
        if r is not None:
            sessions.setdefault(sid, []).append(r)
    trees = tuple(_session(path, sid, rounds, size) for sid, rounds in sessions.items())
    return trees, skipped


def _timestamp(value: Any, name: str) -> float:
    raw = as_text(value, name, allow_empty=False)
    try:
        dt = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise Refusal(name, f"{raw!r} is not an ISO 8601 time") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)).timestamp()


def _round(row: dict[str, Any], line: int, skipped: Counter[str]) -> _Round | None:
    for name in ("round_index", "input_tokens_total", "prefix_tokens", "newly_append_tokens", "output_tokens"):
        if name not in row:
            raise Refusal(name, "missing")
    idx = row["round_index"]
    if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
        raise Refusal("round_index", f"{idx!r} is not a whole number from 0")
    n_in = as_tokens(row["input_tokens_total"], "input_tokens_total", minimum=0)
    prefix = as_tokens(row["prefix_tokens"], "prefix_tokens", minimum=0)
    new = as_tokens(row["newly_append_tokens"], "newly_append_tokens", minimum=0)
    if prefix + new != n_in:
        raise Refusal("input_tokens_total", f"{n_in} is not prefix_tokens + newly_append_tokens ({prefix} + {new})")
    n_out = as_tokens(row["output_tokens"], "output_tokens", minimum=0)
    ins, outs, other = _events(row.get("timing_events", []))
    tools = _tools(row.get("tools", []))
    if not (ins or outs or other) or not n_in:
        skipped[NO_EVENTS if n_in else NO_PROMPT] += 1
        return None
    sent = max(ins) if ins else min(outs + other)
    return _Round(line, idx, sent, max(outs) if outs else None, n_in, prefix, n_out,
                  as_optional_text(row.get("model"), "model"), tools)


def _events(value: Any) -> tuple[list[float], list[float], list[float]]:
    """Times of the input events, the output events and the rest (``usage_report``, unknown kinds)."""
    ins: list[float] = []
    outs: list[float] = []
    other: list[float] = []
    if value is None:
        return ins, outs, other
    for i, e in enumerate(as_list(value, "timing_events", allow_empty=True)):
        name = f"timing_events[{i}]"
        ev = as_obj(e, name)
        if ev.get("timestamp") is None:
            continue
        at = _timestamp(ev["timestamp"], f"{name}.timestamp")
        kind = as_text(ev.get("event_type"), f"{name}.event_type")
        (ins if kind in INPUT_EVENTS else outs if kind in OUTPUT_EVENTS else other).append(at)
    return ins, outs, other


def _tools(value: Any) -> tuple[ToolUse, ...]:
    out = []
    for i, t in enumerate(as_list(value, "tools", allow_empty=True) if value is not None else ()):
        name = f"tools[{i}]"
        tool = as_obj(t, name)
        ms = tool.get("tool_internal_latency_ms")
        field = "tool_internal_latency_ms"
        if ms is None:
            ms, field = tool.get("tool_wall_latency_ms"), "tool_wall_latency_ms"
        secs = None if ms is None else as_milliseconds(ms, f"{name}.{field}")
        out.append(ToolUse(as_text(tool.get("tool_name"), f"{name}.tool_name", allow_empty=False), secs))
    return tuple(out)


def _session(path: Path, sid: str, rounds: list[_Round], size: int) -> Trajectory:
    rounds.sort(key=lambda r: (r.sent, r.round_index))
    chain = HashIdChain()
    minted = 0
    prev_ids = array("q")
    epoch = rounds[0].sent
    calls = []
    for k, r in enumerate(rounds):
        n = r.n_in // size
        keep = min(r.prefix // size, len(prev_ids), n)
        ids = prev_ids[:keep] + array("q", range(minted + 1, minted + 1 + n - keep))
        minted += n - keep
        prev_ids = ids
        before = rounds[k - 1] if k else None
        if before is None:
            pause, since = 0.0, "start"
        elif before.end is not None:
            pause, since = r.sent - before.end, "answer"
        else:
            pause, since = r.sent - before.sent, "estimated-answer"
        calls.append(Call(
            k, f"line {r.line}", r.n_in, r.n_out, max(0.0, pause), since,  # type: ignore[arg-type]
            start_s=r.sent - epoch, duration_s=max(0.0, r.end - r.sent) if r.end is not None else None,
            cached_tokens=r.prefix, model=r.model, blocks=Blocks(chain.add(ids), size, "floor", r.n_in),
            tool_uses=r.tools))
    return Trajectory(sid, "tracelab", path, f"line {rounds[0].line}", tuple(calls), epoch_s=epoch)
