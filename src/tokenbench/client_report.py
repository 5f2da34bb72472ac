"""What the client saw of itself during one level, typed: the JSON contract's ``client`` object
(``loadgen.ClientWatch.report`` writes it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keyed import Keyed


@dataclass(slots=True)
class ClientReport(Keyed):
    """What the client saw of itself during one level (loadgen.ClientWatch: its CPU, event-loop lag and requests
    in flight; with several workers, the busiest one's figures, every worker's and their clocks; with Ray, each
    node's guard), and for a llama-bench style depth level, its steps one by one. The JSON contract's ``client``
    object, written back with the keys, values and order it was read with (keyed.Keyed)."""

    cpu_pct: float | None = None
    loop_lag_samples: int | None = None
    loop_lag_ms_p50: float | None = None
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    #: CPU time the process was given during its event loop's longest stop (ms): near the stop, the process itself
    #: was busy (its longest garbage collection, beside it); near nothing, other work held the cores
    loop_stop_cpu_ms: float | None = None
    gc_ms_max: float | None = None  # the longest garbage collection in the level (ms)
    inflight_mean: float | None = None
    worker: str | None = None  # one worker's report: its name
    workers: list[Any] | None = None  # every worker's report
    clocks: list[Any] | None = None  # each worker's clock against the parent's
    node_guards: list[Any] | None = None  # Ray: each node's guard snapshot
    server_guard: dict[str, Any] | None = None  # the server host's guard snapshot, through its agent
    # a depth level's steps: the rate of each repetition, the fill and prompt times, the server's own timings
    pp_tps_reps: list[Any] | None = None
    tg_tps_reps: list[Any] | None = None
    fill_ms: list[Any] | None = None
    pp_ms: list[Any] | None = None
    server_pp_tps: float | None = None
    server_tg_tps: float | None = None
    tg_tps_client: float | None = None  # the client's tg rate, withheld above the server's (chunks held back)
