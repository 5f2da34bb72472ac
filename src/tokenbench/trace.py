"""A timestamped request trace, replayed in open loop: the typed boundary for a trace file, and the prompts that
reproduce its prefix sharing token for token.

Two formats:
- Mooncake's JSONL (kvcache-ai/Mooncake, FAST'25; the format AIPerf's ``mooncake_trace`` reads): one object a line,
  ``{"timestamp": ms, "input_length": N, "output_length": M, "hash_ids": [ints]}``. Each hash id names one block
  of ``block`` prompt tokens (512 by default); two requests that list the same id share that block, and the last
  block of a request is partial (``input_length - block * (len(hash_ids) - 1)`` tokens). ``hash_ids`` may be
  absent: that request shares nothing. Other keys are ignored.
- CSV with the header ``timestamp,input_length,output_length`` (timestamp in ms): no sharing.

A malformed trace is refused in one line that names the file, the line and the field (``UsageError``).

The prompts (``TracePrompts``): each hash id maps to one block of text, seeded by the run's seed and the hash id,
that tokenizes to exactly ``block`` tokens in the form it takes inside a prompt (with the space that separates it
from the block before). A request's prompt is its blocks concatenated, the last one cut to its partial length, so
requests that list the same leading ids send the same leading tokens and a prefix cache can serve them. Every
prompt's count is checked with the tokenizer, and the tail fixed where a tokenizer merged across a boundary.
"""

from __future__ import annotations

import asyncio
import csv
import hashlib
import json
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from .client import PreparedRequest
from .errors import UsageError
from .jsontext import json_fault
from .layout import plural
from .workload import PromptBuilder

#: Tokens per hash id, as Mooncake's traces and AIPerf's mooncake_trace loader count them.
DEFAULT_BLOCK = 512
#: The longest prompt or output a trace line may ask for: far beyond any served context, and a bound on the time
#: spent building prompts for a hostile file.
MAX_LENGTH = 1 << 22
CSV_HEADER = ("timestamp", "input_length", "output_length")

TraceFormat = Literal["mooncake", "csv"]
#: A line read: (timestamp ms, input length, output length, hash ids), or why it is refused.
_Parsed = tuple[float, int, int, tuple[int, ...]]


@dataclass(slots=True, frozen=True)
class TraceRequest:
    """One line of a trace."""

    line: int  # 1-based line in the file
    timestamp_ms: float  # arrival, ms, as the file says
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...] = ()

    def block_tokens(self, block: int) -> list[int]:
        """Tokens of each of its blocks: full blocks, then the partial last one."""
        n = len(self.hash_ids)
        return [block] * (n - 1) + [self.input_length - block * (n - 1)] if n else []


@dataclass(slots=True, frozen=True)
class Trace:
    path: Path
    sha256: str
    format: TraceFormat
    block: int
    requests: tuple[TraceRequest, ...]
    lines_in_file: int  # requests the file holds (``requests`` may be its first few)

    def head(self, n: int | None) -> Trace:
        """Its first ``n`` requests (all of them for None)."""
        return self if n is None or n >= len(self.requests) else replace(self, requests=self.requests[:n])

    @property
    def span_s(self) -> float:
        """First arrival to last, seconds, at the file's own pace."""
        return (self.requests[-1].timestamp_ms - self.requests[0].timestamp_ms) / 1000.0

    def schedule(self, speed: float = 1.0) -> tuple[float, ...]:
        """Each request's send time, seconds after the level starts: the first request at once (the first
        timestamp is the origin, as AIPerf's --fixed-schedule-auto-offset), the rest at ``timestamp / speed``."""
        t0 = self.requests[0].timestamp_ms
        return tuple((r.timestamp_ms - t0) / 1000.0 / speed for r in self.requests)

    @property
    def distinct_blocks(self) -> int:
        return len({h for r in self.requests for h in r.hash_ids})

    @property
    def input_tokens(self) -> int:
        return sum(r.input_length for r in self.requests)

    def ideal_cached_share(self) -> float:
        """The share of its prompt tokens an unbounded prefix cache could serve: each request's leading blocks
        whose whole prefix of hash ids an earlier request already sent (a partial block as far as the earlier one
        went). Mooncake's hash ids are chained (an id stands for its whole prefix), so there it is simply the
        tokens in blocks seen before."""
        seen: dict[tuple[int, int], tuple[int, int]] = {}  # (parent node, hash id) -> (node, tokens sent)
        hits = 0
        for r in self.requests:
            parent, serving = 0, True
            for h, t in zip(r.hash_ids, r.block_tokens(self.block)):
                node, sent = seen.get((parent, h), (len(seen) + 1, 0))
                if serving:
                    got = min(t, sent)
                    hits += got
                    serving = got == t
                seen[(parent, h)] = (node, max(sent, t))
                parent = node
        total = self.input_tokens
        return hits / total if total else 0.0

    def describe(self, speed: float) -> dict[str, Any]:
        """What a run's manifest records of the trace it replayed."""
        return {
            "path": str(self.path), "sha256": self.sha256, "format": self.format,
            "requests": len(self.requests), "requests_in_file": self.lines_in_file,
            "span_s": round(self.span_s, 3), "speed": speed, "replay_s": round(self.span_s / speed, 3),
            "block": self.block, "distinct_blocks": self.distinct_blocks,
            "ideal_cached_share": round(self.ideal_cached_share(), 4),
            "first_timestamp_ms": self.requests[0].timestamp_ms,
            "input_tokens": self.input_tokens, "output_tokens": sum(r.output_length for r in self.requests),
        }

    @property
    def max_input(self) -> int:
        return max(r.input_length for r in self.requests)

    @property
    def max_output(self) -> int:
        return max(r.output_length for r in self.requests)

    @property
    def median_lengths(self) -> tuple[int, int]:
        return (int(statistics.median(r.input_length for r in self.requests)),
                int(statistics.median(r.output_length for r in self.requests)))


# ---- the typed boundary -----------------------------------------------------------------------------------------

class _Refusal(Exception):
    """One field of one line is wrong; ``load_trace`` names the file and the line."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")


def _length(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Refusal(name, f"{value!r} is not a whole number of tokens")
    if value < 1:
        raise _Refusal(name, f"{value} is not a positive number of tokens")
    if value > MAX_LENGTH:
        raise _Refusal(name, f"{value} tokens is more than a trace line may ask for ({MAX_LENGTH:,})")
    return value


def _timestamp(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Refusal("timestamp", f"{value!r} is not a number of milliseconds")
    if value < 0:
        raise _Refusal("timestamp", f"{value} is negative")
    return float(value)


def _hash_ids(value: Any, input_length: int, block: int) -> tuple[int, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or any(isinstance(h, bool) or not isinstance(h, int) for h in value):
        raise _Refusal("hash_ids", "not a list of whole numbers")
    n = len(value)
    if n and block * (n - 1) >= input_length:
        raise _Refusal("hash_ids", f"{plural(n, 'block')} of {block} tokens need{'s' if n == 1 else ''} more than {block * (n - 1)} input tokens, "
                                   f"and input_length is {input_length} (another --trace-block?)")
    if n and input_length > block * n:
        raise _Refusal("hash_ids", f"{plural(n, 'block')} of {block} tokens hold{'s' if n == 1 else ''} at most {block * n} input tokens, and "
                                   f"input_length is {input_length} (another --trace-block?)")
    return tuple(value)


def _mooncake_line(text: str, block: int) -> _Parsed:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise _Refusal("line", f"not JSON ({json_fault(e, line=False)})") from None
    except RecursionError:
        raise _Refusal("line", "not JSON (nested too deep)") from None
    if not isinstance(obj, dict):
        raise _Refusal("line", "not a JSON object")
    for name in ("timestamp", "input_length", "output_length"):
        if name not in obj:
            raise _Refusal(name, "missing")
    ts = _timestamp(obj["timestamp"])
    n_in = _length(obj["input_length"], "input_length")
    n_out = _length(obj["output_length"], "output_length")
    return ts, n_in, n_out, _hash_ids(obj.get("hash_ids"), n_in, block)


def _csv_value(text: str) -> Any:
    """A CSV cell as the number it reads as (a whole number first), else its text, for the field checks."""
    t = text.strip()
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    return t


def _csv_rows(text: str) -> list[tuple[int, _Parsed | _Refusal]]:
    lines = text.splitlines()
    first = next((k for k, ln in enumerate(lines) if ln.strip()), None)
    if first is None:
        return []
    header = [h.strip().lower() for h in next(csv.reader([lines[first]]))]
    if tuple(header[:3]) != CSV_HEADER:
        raise _LineRefusal(first + 1, _Refusal("header", f"a CSV trace starts with the header {','.join(CSV_HEADER)}"))
    out: list[tuple[int, _Parsed | _Refusal]] = []
    for k in range(first + 1, len(lines)):
        if not lines[k].strip():
            continue
        cells = next(csv.reader([lines[k]]))
        if len(cells) != len(header):
            out.append((k + 1, _Refusal("line", f"{len(cells)} fields where the header names {len(header)}")))
            continue
        try:
            v = {name: _csv_value(cells[i]) for i, name in enumerate(CSV_HEADER)}
            n_in = _length(v["input_length"], "input_length")
            out.append((k + 1, (_timestamp(v["timestamp"]), n_in, _length(v["output_length"], "output_length"), ())))
        except _Refusal as e:
            out.append((k + 1, e))
    return out


class _LineRefusal(Exception):
    def __init__(self, line: int, refusal: _Refusal) -> None:
        super().__init__(str(refusal))
        self.line = line


def _format(path: Path, text: str) -> TraceFormat:
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".json", ".ndjson"):
        return "mooncake"
    first = text.lstrip()[:1]
    return "mooncake" if first in ("{", "[") else "csv"


def _rows(fmt: TraceFormat, text: str, block: int) -> list[tuple[int, _Parsed | _Refusal]]:
    if fmt == "csv":
        return _csv_rows(text)
    out: list[tuple[int, _Parsed | _Refusal]] = []
    for k, line in enumerate(text.splitlines()):
        if line.strip():
            try:
                out.append((k + 1, _mooncake_line(line, block)))
            except _Refusal as e:
                out.append((k + 1, e))
    return out


def load_trace(path: str | Path, block: int = DEFAULT_BLOCK, fmt: TraceFormat | None = None) -> Trace:
    """Read and check a trace file, in ``fmt`` where named (``--trace-format``), else the format its name or first
    character says; refuse a malformed one in one line naming the file, the line and the field."""
    p = Path(path)
    if block < 1:
        raise UsageError(f"--trace-block must be at least 1 token, not {block}")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UsageError(f"--trace {p}: cannot read it ({e.strerror or type(e).__name__})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UsageError(f"{p}: not UTF-8 text (byte {e.start})") from None
    fmt = fmt or _format(p, text)
    try:
        rows = _rows(fmt, text, block)
    except _LineRefusal as e:
        raise UsageError(f"{p}:{e.line}: {e}") from None
    requests: list[TraceRequest] = []
    for line, row in rows:
        if isinstance(row, _Refusal):
            raise UsageError(f"{p}:{line}: {row}")
        ts, n_in, n_out, hids = row
        if requests and ts < requests[-1].timestamp_ms:
            raise UsageError(f"{p}:{line}: timestamp: {ts:g} ms is before line {requests[-1].line}'s "
                             f"{requests[-1].timestamp_ms:g} ms (a trace is in the order it arrived)")
        requests.append(TraceRequest(line, ts, n_in, n_out, hids))
    if not requests:
        raise UsageError(f"{p}: an empty trace: no requests in it")
    return Trace(p, hashlib.sha256(raw).hexdigest(), fmt, block, tuple(requests), len(requests))


# ---- the prompts -------------------------------------------------------------------------------------------------

#: The request fields of one trace request, by its output length (the adapter's, warm cache, the user's on top).
Fields = Callable[[int], dict[str, Any]]


class TracePrompts:
    """A trace's prompts, every one built before the level starts, so building never delays a send. The first
    ``warmups`` are warm-up requests: prompts unique to this run, of the trace's first requests' lengths, that
    share no block (so they warm the server without warming its cache for the trace); then the trace in order."""

    def __init__(self, builder: PromptBuilder, trace: Trace, fields: Fields, warmups: int = 0) -> None:
        self.builder, self.trace, self.fields, self.warmups = builder, trace, fields, warmups
        self.pool: list[tuple[int, PreparedRequest]] = []
        self.built = 0
        self._blocks: dict[int, tuple[str, list[int]]] = {}  # hash id -> (text as inside a prompt, its ids)
        #: prompts whose count the tokenizer put off the trace's, then fixed at the tail
        self.fixed = 0
        self.longest = 0  # not followed: the trace's own longest request stands for it

    async def prepare(self, n: int) -> None:
        while self.built < min(n, self.warmups + len(self.trace.requests)):
            k = self.built
            if k < self.warmups:
                r = self.trace.requests[k % len(self.trace.requests)]
                text, count = await self._unique(f"warmup/{k}", r.input_length)
                # indexed after the trace's own requests, whose index is their place in the trace
                self.pool.append((len(self.trace.requests) + k, PreparedRequest(text, r.output_length, count, self.fields(r.output_length))))
            else:
                i = k - self.warmups
                r = self.trace.requests[i]
                text, count = await self.prompt(i)
                self.pool.append((i, PreparedRequest(text, r.output_length, count, self.fields(r.output_length))))
            self.built += 1
            if k % 64 == 63:  # a local tokenizer never waits: let an interrupt (Ctrl-C, SIGTERM) through
                await asyncio.sleep(0)

    async def next(self) -> tuple[int, PreparedRequest]:
        if not self.pool:
            await self.prepare(self.built + 1)
        if not self.pool:
            raise IndexError("the trace has no more requests")
        return self.pool.pop(0)

    async def take(self, n: int) -> list[tuple[int, PreparedRequest]]:
        await self.prepare(self.built + n - len(self.pool))
        out, self.pool = self.pool[:n], self.pool[n:]
        return out

    async def prompt(self, i: int) -> tuple[str, int]:
        """Request ``i``'s prompt and its token count: its blocks, or a prompt of its own without hash ids."""
        r = self.trace.requests[i]
        if not r.hash_ids:
            return await self._unique(f"trace/{i}", r.input_length)
        parts = []
        for h, t in zip(r.hash_ids, r.block_tokens(self.trace.block)):
            text, ids = await self.block(h)
            parts.append(text if t == len(ids) else _spaced(await self.builder.tok.decode(ids[:t])))
        prompt = "".join(parts)
        count = len(await self.builder.tok.encode(prompt))
        if count == r.input_length:
            return prompt, count
        # the tokenizer merged across a block boundary: keep the blocks, fix the tail to the exact count
        self.fixed += 1
        return await self.builder.exact(prompt + " ", r.input_length, self._rng(f"fix/{i}"))

    async def block(self, h: int) -> tuple[str, list[int]]:
        """Hash id ``h``'s block: text that encodes to exactly ``block`` tokens as it stands inside a prompt,
        seeded by the run's seed and the id alone (so every request listing ``h`` sends the same tokens)."""
        if h not in self._blocks:
            text, _ = await self.builder.exact(" ", self.trace.block, random.Random(f"{self.builder.seed}/block/{h}"))
            text = _spaced(text)
            self._blocks[h] = (text, await self.builder.tok.encode(text))
        return self._blocks[h]

    async def _unique(self, key: str, n: int) -> tuple[str, int]:
        return await self.builder.exact("", n, self._rng(key))

    def _rng(self, key: str) -> random.Random:
        return random.Random(f"{self.builder.seed}/{self.builder.run_tag}/{key}")


def _spaced(text: str) -> str:
    """A block as it stands inside a prompt: after a space, so it never runs into the block before (a tokenizer
    whose decoding drops a leading space, as the servers' detokenize endpoints may, would lose it)."""
    return text if text.startswith(" ") else " " + text
