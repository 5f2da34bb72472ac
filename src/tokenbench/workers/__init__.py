"""Load generation on every core (``--workers N``) and on many machines (``--ray ADDRESS``).

One client process on one event loop tops out near 250k chunks/s and, when a whole wave of streams is
re-sent at once, queues the later sends behind the earlier ones. Here a level is split over
workers, each a :class:`LoadWorker` with its own event loop, session and client, running the same
``loadgen.run_phase`` as a single-process sweep. The driver (the sweep) hands each worker its share and its
prompts, drains finished records and merges them into one level.

One module per part:

- ``split.py``: a level's exact split over N workers (weighed by their send queues once measured), and how
  many workers ``--workers auto`` starts;
- ``send_cost.py``: the client's own cost of one send, measured here, that ``--workers auto`` sizes by;
- ``clocks.py``: each process's clock sample, for merging stamps taken on other machines;
- ``messages.py``: what the driver and a worker send each other (``ClientSpec``, ``PhaseTask``, ``Drained``,
  ``WorkerReport``);
- ``worker.py``: ``LoadWorker``, which runs its share of each phase (in a local process or a Ray actor);
- ``handle.py``: the driver's side of one worker (``Handle``) and its failure (``WorkerLost``);
- ``process.py``: a worker as a local process, the child's entry and the driver's ``ProcessHandle``;
- ``pool.py``: ``WorkerPool``, the driver: starts each phase everywhere at one instant, drains and merges.

The names below are the package's public ones; ``raypool.py`` places the same workers as Ray actors.
"""

from __future__ import annotations

from .clocks import ClockSample, boot_id, clock_sample
from .handle import Handle, WorkerLost
from .messages import ClientSpec, Drained, PhaseTask, WorkerReport
from .pool import DRAIN_PERIOD_S, START_LEAD_S, MergedPhase, PromptFeed, WorkerPool
from .process import ProcessHandle, child_main
from .send_cost import send_cost_us
from .split import (SEND_QUEUE_GOAL_MS, STREAMS_PER_WORKER, auto_workers, cap_workers, parse_workers, send_weights,
                    split_level, usable_core_ids, usable_cores, usable_streams, wave_queue_p90_ms, worker_shares,
                    workers_for_sends)
from .worker import LoadWorker

__all__ = [
    "DRAIN_PERIOD_S", "SEND_QUEUE_GOAL_MS", "START_LEAD_S", "STREAMS_PER_WORKER", "ClientSpec", "ClockSample",
    "Drained", "Handle", "LoadWorker", "MergedPhase", "PhaseTask", "ProcessHandle", "PromptFeed", "WorkerLost",
    "WorkerPool", "WorkerReport", "auto_workers", "boot_id", "cap_workers", "child_main", "clock_sample", "parse_workers",
    "send_cost_us", "send_weights", "split_level", "usable_core_ids", "usable_cores", "usable_streams", "wave_queue_p90_ms",
    "worker_shares",
    "workers_for_sends",
]
