"""The server host's snapshot, as ``machine.py`` takes the client's, with what a bench on that host turns on:
temperatures, CPU governors, AMD GPUs' load and clocks, and the power sources the agent reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__, machine
from ..keyed import Keyed


@dataclass(slots=True)
class HostSnapshot(Keyed):
    """The server host now, typed; a key this type does not name (a newer agent's) is kept whole in ``extra``."""

    hostname: str | None = None
    os: str | None = None
    python: str | None = None
    cpu_model: str | None = None
    cpu_count_logical: int | None = None
    cpu_count_physical: int | None = None
    cpu_freq_mhz: float | None = None
    load_avg: list[Any] | None = None
    mem_total_gib: float | None = None
    mem_available_gib: float | None = None
    swap_used_gib: float | None = None
    gpus: list[Any] | None = None  # NVIDIA, as nvidia-smi lists them
    amd_gpus: list[Any] | None = None  # {card, busy_pct, vram_used_gb, sclk}
    temperatures: dict[str, Any] | None = None  # {"chip/label": degrees C}
    cpu_governors: list[Any] | None = None
    power_sources: list[Any] | None = None  # SourceInfo.to_dict() each
    power_notes: list[Any] | None = None  # why a source is not read
    tokenbench: str | None = None


def temperatures() -> dict[str, float]:
    """Every temperature sensor psutil reads, "chip/label" -> degrees C."""
    import psutil

    try:
        sensors = psutil.sensors_temperatures()
    except (AttributeError, OSError):  # not on this platform
        return {}
    return {f"{chip}/{t.label or i}": float(t.current) for chip, ts in sensors.items() for i, t in enumerate(ts)}


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def governors(root: Path = Path("/")) -> list[str]:
    return sorted({g for p in root.glob("sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")
                   if (g := _read(p))})


def amd_gpus(root: Path = Path("/")) -> list[dict[str, Any]]:
    """AMD GPUs from the DRM sysfs: busy share, VRAM in use, the shader clock now (``pp_dpm_sclk``'s starred line)."""
    out = []
    for busy in sorted(root.glob("sys/class/drm/card*/device/gpu_busy_percent")):
        dev = busy.parent
        entry: dict[str, Any] = {"card": dev.parent.name}
        if (b := _read(busy)) and b.isdigit():
            entry["busy_pct"] = int(b)
        if (used := _read(dev / "mem_info_vram_used")) and used.isdigit():
            entry["vram_used_gb"] = round(int(used) / 1e9, 2)
        sclk = next((line.split(":", 1)[-1].replace("*", "").strip() for line in (_read(dev / "pp_dpm_sclk") or "")
                     .splitlines() if line.rstrip().endswith("*")), None)
        if sclk:
            entry["sclk"] = sclk
        out.append(entry)
    return out


def host_snapshot(power_sources: list[dict[str, Any]], power_notes: list[str]) -> HostSnapshot:
    """This host now (blocking: nvidia-smi runs for the NVIDIA GPUs)."""
    snap = HostSnapshot.from_dict(machine.snapshot())
    snap.put(amd_gpus=amd_gpus(), temperatures=temperatures(), cpu_governors=governors(),
             power_sources=power_sources, power_notes=power_notes, tokenbench=__version__)
    return snap
