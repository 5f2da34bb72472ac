"""Mixed tenants: live agent sessions with a batch load beside them (``sweep --sessions N --background RATE``).

A batch job run beside a live agent conversation can evict it: its prompts, none of which the cache has seen, take
the slots and blocks the sessions' histories were kept in (an owner of an MLX server saw one evicted by a sweep).
The background is a plain sweep's load: unique prompts of a fixed length, sent open loop at ``rate`` requests a
second (Poisson arrivals) for as long as the level's sessions run, through the same client. Its requests are kept
apart from the sessions' turns, so the level's figures are the sessions'; the background's own are said beside
them (``BackgroundStats``). What it did to the sessions is the same sessions run alone, side by side: ``compare``
of the two runs (one ``--seed``, so the sessions are the same texts).

Each prompt is one text of ``input_len`` tokens built once, behind a marker of its own from its first character,
so no prefix cache can serve any of it (the busted baseline's way)."""

from __future__ import annotations

import asyncio
import random
from functools import partial
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .distribution import Distribution, Sketch
from .errors import UsageError
from .records import RequestRecord

if TYPE_CHECKING:
    from .client import StreamClient
    from .workload import PromptBuilder

NS_PER_MS = 1_000_000
#: The most requests a second the background is sent at: one process sends it open loop beside the sessions'
#: turns, and past this it buries the server under unique prompts rather than loading it (1e6/s sent 429,132
#: requests in a minute and left a llama-server unresponsive).
MAX_RATE = 100.0
#: The most background requests in flight at once: an arrival while this many are is not sent, and is counted
#: (``unsent``) as the client's shortfall, as an open loop's lateness is.
MAX_IN_FLIGHT = 64


def rate_text(rate: float) -> str:
    """Requests a second as the tables write them: 0.5, 20, 1,000."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


@dataclass(frozen=True, slots=True)
class Background:
    """The batch load beside the sessions."""

    rate: float  # requests a second, open loop
    input_len: int = 1024
    output_len: int = 128

    def describe(self) -> str:
        return f"beside {rate_text(self.rate)} req/s of unique {self.input_len}-token prompts ({self.output_len} out)"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def parse(cls, text: str) -> Background:
        """``2`` or ``2,1024,128``: requests a second, and optionally each one's input and output tokens."""
        parts = [p.strip() for p in text.split(",")]
        try:
            rate = float(parts[0])
            lengths = [int(p) for p in parts[1:]]
        except ValueError:
            rate, lengths = -1.0, []
        if not rate > 0 or len(parts) not in (1, 3) or any(n <= 0 for n in lengths):
            raise UsageError(f"--background {text}: give RATE or RATE,INPUT,OUTPUT, e.g. --background 2 or "
                             "--background 2,1024,128 (requests a second, tokens in and out)")
        if rate > MAX_RATE:
            raise UsageError(f"--background {text}: give at most {MAX_RATE:g} requests/s (one process sends them "
                             "beside the sessions; more buries the server rather than loads it)")
        return cls(rate, *lengths)


@dataclass(slots=True)
class BackgroundStats:
    """What the background load did while the sessions ran."""

    rate: float
    input_len: int
    output_len: int
    sent: int
    ok: int
    failed: int  # cut by the level's end included
    ttft_ms: Distribution
    unsent: int = 0  # arrivals not sent: MAX_IN_FLIGHT were in flight (the client's shortfall)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BackgroundStats | None:
        try:
            fields = {k: d[k] for k in cls.__dataclass_fields__ if k != "unsent"}
            fields["unsent"] = int(d.get("unsent", 0))
            fields["ttft_ms"] = Distribution(**d["ttft_ms"])
            return cls(**fields)
        except (KeyError, TypeError):
            return None

    def line(self) -> str:
        ttft = f", TTFT p50 {self.ttft_ms.p50:,.0f} ms" if self.ttft_ms.p50 is not None else ""
        short = (f", {self.unsent:,} not sent ({MAX_IN_FLIGHT} in flight already: the client's shortfall)"
                 if self.unsent else "")
        return (f"background: {rate_text(self.rate)} req/s of unique {self.input_len:,}-token prompts: "
                f"{self.sent:,} sent, {self.ok:,} finished{ttft}{short} (not in the sessions' figures)")


class BackgroundLoad:
    """Sends the background while the level's sessions run: ``run`` until cancelled, then ``stats``."""

    def __init__(self, bg: Background, client: StreamClient, builder: PromptBuilder,
                 fields: Callable[[int], dict[str, Any]], seed: int, tag: str) -> None:
        self.bg, self.client, self.builder, self.fields = bg, client, builder, fields
        self.rng = random.Random(f"{seed}/{tag}/background")
        self.tag = tag
        # each request folded as it ends (a soak's background runs as long as the soak): no record is kept
        self.sent = self.ok = self.failed = self.unsent = 0
        self.cached = self.prompt = 0  # cached prompt tokens and prompt tokens, of the answers that said
        self.ttft = Sketch()
        self._text: str | None = None

    async def prepare(self) -> None:
        if self._text is None:
            self._text, _ = await self.builder.exact("", self.bg.input_len, self.rng)

    async def run(self) -> None:
        assert self._text is not None, "prepare() first"
        from .client import PreparedRequest  # aiohttp's: not for what only reads a level's BackgroundStats

        sends: set[asyncio.Task[RequestRecord]] = set()
        try:
            while True:
                await asyncio.sleep(self.rng.expovariate(self.bg.rate))
                if len(sends) >= MAX_IN_FLIGHT:
                    self.unsent += 1
                    continue
                marker = f"{self.rng.getrandbits(64):016x} "
                rec = RequestRecord(index=self.sent)
                self.sent += 1
                req = PreparedRequest(marker + self._text, self.bg.output_len, self.bg.input_len,
                                      self.fields(self.bg.output_len))
                task = asyncio.create_task(self.client.send(req, rec))
                sends.add(task)
                task.add_done_callback(sends.discard)
                task.add_done_callback(partial(self._ended, rec))
        finally:  # the sessions ended: what is still in flight is cut, not waited for
            for t in list(sends):
                t.cancel()
            await asyncio.gather(*sends, return_exceptions=True)

    def _ended(self, r: RequestRecord, _: object) -> None:
        """A background request answered, failed or cut by the level's end."""
        if not r.ok:
            self.failed += 1
            return
        self.ok += 1
        if r.ttft_ns is not None:
            self.ttft.add(r.ttft_ns / NS_PER_MS)
        if r.said_cached:
            self.cached, self.prompt = self.cached + (r.cached_tokens or 0), self.prompt + (r.input_tokens or 0)

    def stats(self) -> BackgroundStats:
        return BackgroundStats(self.bg.rate, self.bg.input_len, self.bg.output_len, self.sent, self.ok, self.failed,
                               self.ttft.distribution(), self.unsent)
