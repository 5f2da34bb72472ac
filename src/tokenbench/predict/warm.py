"""How many live agent sessions a box's KV cache keeps warm, predicted: where ``capacity --cache-cliff`` would
find the cliff on a box you do not own, from the same arithmetic its answer prints beside a measured cliff.

A session holds its context's KV cache between its turns; live sessions are at every stage at once, so a
session's share of the cache is its KV at its mean context over the turns (``memory.kv_bytes``, the model's
layers, KV heads and the KV format). The pool:

- a batching engine (vLLM, SGLang): the memory left beside the weights and the engine's own (``memory.fit``'s
  free memory at one sequence), shared by every session block by block;
- llama.cpp's server: one session a slot (``--parallel``), and its host prompt cache (``--cache-ram``, 8192 MiB
  by default) restoring as many more as it holds whole (each saved at its last turn's size), within the box's
  free memory.

The band is the engine's own memory, which the arithmetic estimates and no published row measures: the pool
taken 10% smaller and larger (``POOL_BAND``). The KV bytes of a token are the model's, exactly."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from . import memory
from .session import SessionPrediction
from .setup import Setup
from ..layout import plural

GIB = 1 << 30
MIB = 1 << 20
#: llama-server's host prompt cache when --cache-ram is not given (its default, MiB).
LLAMA_CACHE_RAM_MIB = 8192
#: The pool's band: the engine's own memory (activations, graphs, allocator slack) is estimated, not measured.
POOL_BAND = 0.10


@dataclass(frozen=True, slots=True)
class WarmPrediction:
    """Sessions kept warm, its band, and the arithmetic behind it."""

    holds: int
    low: int
    high: int
    session_tokens: float  # mean context over a session's turns
    session_mib: float  # its KV cache at that context
    pool_mib: float  # what holds the sessions' KV
    how: str  # the pool in words

    def lines(self) -> list[str]:
        if self.pool_mib <= 0:
            return ["cache (PREDICTED): no room for a session's KV cache beside the weights and the engine's own "
                    "memory: the model does not fit this box as asked"]
        # the cliff is one session past the warm count, at either end of the band as at the estimate
        band = f" (band {self.low + 1:,}-{self.high + 1:,})" if (self.low, self.high) != (self.holds, self.holds) else ""
        return [f"cache (PREDICTED): {self.holds:,} live sessions stay warm, the cliff at {self.holds + 1:,}{band}",
                f"  the pool: {self.how}",
                f"  a session: {self.session_mib:,.0f} MiB of KV cache at its mean context of "
                f"{self.session_tokens:,.0f} tokens"]

    def past(self, agents: int) -> str | None:
        """What a table of ``agents`` agents must say where they pass the sessions kept warm: its cached figures
        assume every session stays warm (None where they do)."""
        if self.pool_mib <= 0 or agents <= self.holds:
            return None
        return (f"{agents:,} agents pass the {self.holds:,} live sessions the cache keeps warm (predicted; the cliff "
                f"at {self.holds + 1:,}): the cached figures assume every session stays warm, and past the cliff "
                "a turn is prefilled whole, as the uncached ones are")

    def to_dict(self) -> dict[str, Any]:
        """The fields, and the cliff the line says with its band (one session past the warm count and its band's
        ends): the JSON held only the warm count's band, 10-13, beside a line that said the cliff's, 11-14."""
        return {**asdict(self), "cliff": self.holds + 1, "cliff_low": self.low + 1, "cliff_high": self.high + 1}


def predict_warm(s: Setup, p: SessionPrediction, cache_ram_mib: int | None = None) -> WarmPrediction:
    """The live sessions ``s``'s box keeps warm for sessions of ``p``'s shape (``cache_ram_mib``: llama-server's
    --cache-ram as given; None its default)."""
    contexts = [t.context + p.shape.output for t in p.turns]
    mean = sum(contexts) / len(contexts)
    per = memory.kv_bytes(s.model, s.quant, round(mean)) + memory.state_bytes(s.model)
    f = s.fit(round(mean), 1)
    free = max(0.0, (f.usable_gb - f.weights_gb - f.overhead_gb) * GIB)
    if s.kind == "batching":
        def holds(pool: float) -> int:
            return int(pool // per) if per > 0 else 0
        how = f"{free / GIB:,.1f} GiB beside the weights and the engine's own memory"
        return WarmPrediction(holds(free), holds(free * (1 - POOL_BAND)), holds(free * (1 + POOL_BAND)), mean,
                              per / MIB, free / MIB, how)
    slots = max(1, s.parallel)
    last = memory.kv_bytes(s.model, s.quant, contexts[-1]) + memory.state_bytes(s.model)
    spare = max(0.0, free - slots * last)  # the host cache lives in the same memory on one box
    unlimited = cache_ram_mib == -1  # llama-server's -1: no limit of its own, the box's memory the only one
    ram = (spare if unlimited else (LLAMA_CACHE_RAM_MIB if cache_ram_mib is None else cache_ram_mib) * MIB) \
        if s.prompt_cache else 0
    room = min(float(ram), spare)

    def restored(r: float) -> int:
        return int(r // last) if last > 0 else 0
    said = "-1: the box's free memory, no limit of its own" if unlimited else ""
    how = f"{plural(slots, 'slot')} (--parallel)" + (
        f" and {ram / MIB:,.0f} MiB of host prompt cache (--cache-ram{said and ' ' + said}), {last / MIB:,.0f} MiB "
        "a session saved at its last turn" if ram or unlimited else ", no host prompt cache (--cache-ram 0)")
    if restored(spare) > restored(room):  # the setting, not the box, is the limit
        how += (f"; the box's free memory would hold {slots + restored(spare):,} with --cache-ram "
                f"{int(spare // MIB)} (MiB)")  # as llama-server takes it: no thousands separator
    return WarmPrediction(slots + restored(room), slots + restored(room * (1 - POOL_BAND)),
                          slots + restored(room * (1 + POOL_BAND)), mean, per / MIB, (slots * last + room) / MIB, how)
