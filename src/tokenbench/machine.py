"""A snapshot of the machine the client runs on, stored with every run."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from typing import Any

import psutil


def _gpus() -> list[dict[str, Any]]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total,memory.used,utilization.gpu,temperature.gpu,driver_version",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) >= 6:
            gpus.append({"name": f[0], "memory_total_mib": f[1], "memory_used_mib": f[2],
                         "utilization_pct": f[3], "temperature_c": f[4], "driver": f[5]})
    return gpus


def snapshot() -> dict[str, Any]:
    vm = psutil.virtual_memory()
    sw = psutil.swap_memory()
    freq = psutil.cpu_freq()
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    cpu_model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "cpu_count_logical": psutil.cpu_count(),
        "cpu_count_physical": psutil.cpu_count(logical=False),
        "cpu_freq_mhz": round(freq.current) if freq else None,
        "load_avg": list(load) if load else None,
        "mem_total_gib": round(vm.total / 2**30, 2),
        "mem_available_gib": round(vm.available / 2**30, 2),
        "swap_used_gib": round(sw.used / 2**30, 2),
        "gpus": _gpus(),
    }
