"""AMD GPUs and APUs: the ``amdsmi`` library where installed, else the amdgpu driver's hwmon sensors.

hwmon, as the kernel documents it (``drivers/gpu/drm/amd/pm/amdgpu_pm.c``): a directory
``/sys/class/hwmon/hwmonN`` whose ``name`` is ``amdgpu`` holds ``power1_average`` (average power used by the SoC)
and, on newer kernels, ``power1_input`` (instantaneous), both in microwatts. On an APU (a Strix Halo, say) "this
includes the CPU": the sensor reads the whole package, GPU and CPU cores together, not the GPU alone. An APU is told
by ``in1_input``/``in1_label`` (vddnb, the northbridge voltage), which the driver exposes on APUs only.

``power1_average`` is preferred where both are exposed: the firmware averages it continuously, so sampling it every
half second does not alias a bursty decode loop the way single instantaneous values can. Neither is a counter: the
watts are sampled and integrated. amdsmi's energy accumulator, where the library has it, is a counter."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .base import PowerError, PowerSource, Scope, read_microunits
from ..layout import plural

APU_NOTE = "on an APU the amdgpu sensor reads the whole package (GPU and CPU cores), not the GPU alone"
#: amdsmi marks a field the device does not report with UINT32_MAX (or the text "N/A").
_UNSUPPORTED = 0xFFFFFFFF


def amdgpu_hwmons(root: Path) -> list[Path]:
    """The amdgpu hwmon directories under ``root``/sys/class/hwmon, in hwmon order."""
    out = []
    for d in sorted((root / "sys/class/hwmon").glob("hwmon*"), key=lambda p: (len(p.name), p.name)):
        try:
            if (d / "name").read_text().strip() == "amdgpu":
                out.append(d)
        except OSError:
            continue
    return out


def is_apu(hwmon: Path) -> bool:
    """The driver exposes vddnb (in1) on APUs only."""
    try:
        return (hwmon / "in1_label").read_text().strip() == "vddnb" or (hwmon / "in1_input").exists()
    except OSError:
        return (hwmon / "in1_input").exists()


def _device(hwmon: Path) -> str:
    dev = hwmon / "device"
    return os.path.basename(os.path.realpath(dev)) if dev.exists() else hwmon.name


class AmdHwmonSource(PowerSource):
    """Every amdgpu hwmon sensor under ``root`` (``/`` on a real machine), each a channel named by its PCI device."""

    name = "amdgpu"

    def __init__(self, root: Path = Path("/")) -> None:
        self.files: dict[str, Path] = {}
        for d in amdgpu_hwmons(root):
            f = next((d / n for n in ("power1_average", "power1_input") if (d / n).exists()), None)
            if f is not None:
                self.files[f"amdgpu {_device(d)}"] = f
        if not self.files:
            raise PowerError("amdgpu: no amdgpu hwmon power sensor (power1_average, power1_input) in "
                             f"{root / 'sys/class/hwmon'}")
        apus = [f for f in self.files.values() if is_apu(f.parent)]
        self.measures = Scope.APU_PACKAGE if apus else Scope.GPU_BOARD
        kinds = sorted({f.name for f in self.files.values()})
        self.note = f"amdgpu hwmon {', '.join(kinds)} ({plural(len(self.files), 'device')})" \
            + (f"; {APU_NOTE}" if apus else "; the GPU's socket power as its driver reports it")
        for ch, f in self.files.items():  # readable now, or say why at once
            try:
                read_microunits(f)
            except (OSError, ValueError) as e:
                raise PowerError(f"amdgpu: {f} cannot be read ({e})") from None

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        return {ch: read_microunits(f) for ch, f in self.files.items()}, {}, {}


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < _UNSUPPORTED else None


class AmdSmiSource(PowerSource):
    """AMD GPUs and APUs through the ``amdsmi`` library: each device's energy accumulator where it reads, else its
    socket power sampled. ``amdsmi``: the module, for tests; ``root``: where to tell an APU by its hwmon."""

    name = "amdsmi"

    def __init__(self, amdsmi: Any = None, root: Path = Path("/")) -> None:
        if amdsmi is None:
            try:
                import amdsmi  # type: ignore[no-redef]
            except ImportError:
                raise PowerError("amdsmi: the amdsmi library is not installed (it comes with ROCm)") from None
        self.smi = amdsmi
        try:
            self.smi.amdsmi_init()
            self.handles = {f"gpu{i}": h for i, h in enumerate(self.smi.amdsmi_get_processor_handles())}
        except Exception as e:  # no driver, no device, no permission
            raise PowerError(f"amdsmi: no AMD GPU through amdsmi ({type(e).__name__}: {e})") from None
        if not self.handles:
            raise PowerError("amdsmi: amdsmi sees no device")
        self.counter = all(self._energy(h) is not None for h in self.handles.values())
        apu = any(is_apu(d) for d in amdgpu_hwmons(root))
        self.measures = Scope.APU_PACKAGE if apu else Scope.GPU_BOARD
        self.note = ("energy accumulators" if self.counter else "socket power, sampled") + \
            f" of {plural(len(self.handles), 'device')}" + (f"; {APU_NOTE}" if apu else "")

    def _energy(self, h: Any) -> float | None:
        try:
            d = self.smi.amdsmi_get_energy_count(h)
            count = d.get("energy_accumulator", d.get("power"))
            res = d.get("counter_resolution")
            if _number(count) is None or not isinstance(res, (int, float)) or res <= 0:
                return None
            return float(count) * float(res) / 1e6  # counts of counter_resolution microjoules
        except Exception:  # not supported on this device
            return None

    def _watts(self, h: Any) -> float | None:
        info = self.smi.amdsmi_get_power_info(h)
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            w = _number(info.get(key)) if isinstance(info, dict) else None
            if w is not None:
                return w
        return None

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        watts, joules = {}, {}
        for ch, h in self.handles.items():
            w = self._watts(h)
            if w is not None:
                watts[ch] = w
            elif not self.counter:
                raise PowerError(f"amdsmi: {ch} reports no socket power")
            if self.counter:
                j = self._energy(h)
                if j is None:
                    raise PowerError(f"amdsmi: {ch} energy accumulator unreadable")
                joules[ch] = j
        return (watts if len(watts) == len(self.handles) else {}), joules, {}

    def close(self) -> None:
        try:
            self.smi.amdsmi_shut_down()
        except Exception:  # already shut down
            pass


def open_amd(root: Path = Path("/"), amdsmi: Any = None) -> PowerSource:
    """amdsmi where installed and it sees a device, else the hwmon sensors; a PowerError saying both whys. Under a
    ``root`` other than ``/`` (a copy of a machine's /sys) only the sensors are read: amdsmi reads the real one."""
    if root != Path("/") and amdsmi is None:
        return AmdHwmonSource(root)
    try:
        return AmdSmiSource(amdsmi, root)
    except PowerError as smi:
        try:
            return AmdHwmonSource(root)
        except PowerError as hw:
            raise PowerError(f"{hw}; {smi}") from None
