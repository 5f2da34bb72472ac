"""``--workers auto`` on this machine: how many load-generating workers a sweep starts, and why.

The cost of one send is measured here (``send_cost.send_cost_us``: the run's own client sends a wave to a sink on
the loopback, prompts about as long as the run's), then ``split.auto_workers`` takes the fewest workers whose share
of a wave of re-sends keeps its p90 send queue under ``SEND_QUEUE_GOAL_MS``, at least one per 64 streams, at most
one per core: half the cores where the server shares this machine (a loopback URL), the cores its processes may
not run on where they are pinned. The manifest keeps the why (``load.workers.auto``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..offered_load import Level
from ..servers import on_this_machine, server_cores
from .messages import ClientSpec
from .pool import WorkerPool
from .send_cost import send_cost_us
from .split import SEND_QUEUE_GOAL_MS, auto_workers, cap_workers, usable_core_ids, usable_cores
from ..layout import plural


async def choose_workers(url: str, levels: list[Level], spec: ClientSpec,
                         prompt_tokens: int) -> tuple[int, dict[str, Any]]:
    """The number of workers for ``levels`` against ``url``, and the reasons the manifest records."""
    cores = usable_cores()
    here = on_this_machine(url)
    theirs = server_cores(url) if here else None
    mine = usable_core_ids()
    free = len(mine - theirs) if theirs and mine is not None else 0
    shared = here and not free
    if shared:  # the server runs on these cores too (an embedded engine, a loopback URL): the client takes half
        cores = max(1, cores // 2)
    elif free:  # the server's processes are pinned to other cores (taskset, a cpuset): the client takes the rest
        cores = free
    of = plural(cores, "core") + (" (half this machine's: the server shares it)" if shared else
                                  f" (the server's processes keep to {plural(len(theirs or ()), 'core')} of their own)"
                                  if free else "")
    streams = max((lv.concurrency or lv.max_concurrency or 1) for lv in levels) if levels else 1
    send_us = await send_cost_us(spec, prompt_chars=4 * prompt_tokens) if streams > 1 and cores > 1 else None
    n = auto_workers(levels, cores, send_us)
    if levels and all(lv.open and not lv.max_concurrency for lv in levels):  # no streams: requests as they arrive
        fastest = max(lv.offered_rate or 0.0 for lv in levels)
        why = (f"an open loop of up to {fastest:g} requests/s with no cap on requests in flight: its sends come "
               f"one at a time as they arrive, not in waves of re-sends, on {of}")
    elif send_us is not None:
        why = (f"{streams} streams at {send_us:.0f} µs a send: the fewest workers whose wave of re-sends keeps its "
               f"p90 send queue under {SEND_QUEUE_GOAL_MS:g} ms, at least one per 64 streams, of {of}")
    else:
        why = f"{plural(streams, 'stream')} on {of}: one per 64 streams"
    return n, {"workers": n, "streams": streams, "cores": cores, "server_here": here, "shares_cores": shared,
               "send_us": round(send_us, 1) if send_us is not None else None,
               "send_queue_goal_ms": SEND_QUEUE_GOAL_MS, "why": why}


async def start_workers(spec: ClientSpec, url: str, workers: int | None, ray: str | None, levels: list[Level],
                        prompt_tokens: int, note: Callable[[str], None],
                        warn: Callable[[str], None]) -> tuple[WorkerPool | None, dict[str, Any] | None]:
    """The load-generating workers, or None to run every level in the driver's process; and, for ``--workers auto``
    on this machine (``workers`` None), how their number was chosen. A count given is held to what the levels
    and this machine's cores can use (``split.cap_workers``; on Ray, the cluster's CPUs), said in ``warn``."""
    n, auto = workers, None
    if n is None and not ray:
        n, auto = await choose_workers(url, levels, spec, prompt_tokens)
        note(f"--workers auto: {n} ({auto['why']})")
    elif n is not None:
        n, capped = cap_workers(n, levels, None if ray else usable_cores())
        if capped:
            warn(capped)
    if ray:
        from ..raypool import ray_pool

        pool = await ray_pool(ray, spec, n, warn)
    elif n is not None and n > 1:
        pool = await WorkerPool.local(spec, n)
    else:
        return None, auto
    note(f"load from {plural(pool.size, 'worker')} ({pool.kind})")
    return pool, auto
