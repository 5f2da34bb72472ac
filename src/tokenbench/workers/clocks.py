"""Clocks of the workers' stamps.

Every stamp is ``time.perf_counter_ns()``: CLOCK_MONOTONIC on Linux, one clock for every process of a machine, so
records from local workers merge with no correction. A worker on another machine has its own monotonic clock: the
driver reads the worker's wall clock between two readings of its own (an NTP-style exchange,
``pool.WorkerPool.sync_clocks``), takes the skew as the difference from the midpoint, and maps that worker's
stamps onto its own clock through the two wall clocks. Latencies of one request (TTFT, TPOT, ITL) never cross
machines and are exact; only the level's window, and so its throughput, carries the error: at most half the
exchange's round trip, reported per worker as ``clock_uncertainty_ms``. Workers on the driver's machine (same boot
id) need no mapping.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class ClockSample:
    mono_ns: int
    wall_ns: int
    host: str
    boot_id: str
    pid: int
    node: str  # a Ray node id, or for local processes the boot id: where the guard is run once


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def clock_sample(node: str | None = None) -> ClockSample:
    boot = boot_id()
    return ClockSample(time.perf_counter_ns(), time.time_ns(), socket.gethostname(), boot, os.getpid(), node or boot)
