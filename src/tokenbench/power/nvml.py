"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``): board power per GPU, summed.

Where the driver keeps it (Volta and later), ``nvmlDeviceGetTotalEnergyConsumption`` is an energy counter in
millijoules since the driver was loaded: exact over any interval. Elsewhere the board's power now
(``nvmlDeviceGetPowerUsage``, milliwatts) is sampled. Either reads the GPU board only: not the CPUs, memory, fans or
power supply of the box (a Grace Hopper or DGX Spark module's CPU side is not in it)."""

from __future__ import annotations

from typing import Any

from .base import PowerError, PowerSource, Scope
from ..layout import plural


def _load() -> Any:
    try:
        import pynvml
    except ImportError:
        raise PowerError("nvml: pynvml is not installed (pip install nvidia-ml-py)") from None
    return pynvml


class NvmlSource(PowerSource):
    """Every NVIDIA GPU of this machine (or those of ``indices``). ``nvml``: the module, for tests."""

    name = "nvml"
    measures = Scope.GPU_BOARD

    def __init__(self, nvml: Any = None, indices: list[int] | None = None) -> None:
        self.nvml = nvml if nvml is not None else _load()
        try:
            self.nvml.nvmlInit()
            count = self.nvml.nvmlDeviceGetCount()
            self.handles = {f"gpu{i}": self.nvml.nvmlDeviceGetHandleByIndex(i)
                            for i in (indices if indices is not None else range(count))}
        except Exception as e:  # no driver, no GPU, a lost device: all mean no NVML power here
            raise PowerError(f"nvml: no NVIDIA GPU or driver here ({type(e).__name__}: {e})") from None
        if not self.handles:
            raise PowerError("nvml: NVML sees no GPU")
        self.counter = all(self._energy(h) is not None for h in self.handles.values())
        self.note = ("GPU boards' energy counters" if self.counter else "GPU boards' power, sampled") + \
            f" ({plural(len(self.handles), 'GPU')}, summed)"

    def _energy(self, h: Any) -> float | None:
        try:
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(h)) / 1000.0
        except Exception:  # NVML_ERROR_NOT_SUPPORTED before Volta, and on some boards
            return None

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        watts: dict[str, float] = {}
        joules: dict[str, float] = {}
        for ch, h in self.handles.items():
            try:
                watts[ch] = float(self.nvml.nvmlDeviceGetPowerUsage(h)) / 1000.0
            except Exception as e:
                if not self.counter:
                    raise PowerError(f"nvml: {ch} power unreadable ({type(e).__name__}: {e})") from None
            if self.counter:
                j = self._energy(h)
                if j is None:
                    raise PowerError(f"nvml: {ch} energy counter unreadable")
                joules[ch] = j
        # a sum of some GPUs' watts is no box's: all of them or none (the counters carry the figure)
        return (watts if len(watts) == len(self.handles) else {}), joules, {}

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # already shut down, or the driver went away: nothing to let go of
            pass
