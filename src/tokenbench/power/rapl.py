"""Intel and AMD CPUs through RAPL, as the kernel's powercap framework exposes it.

``/sys/class/powercap/intel-rapl:N`` is a package zone (``name`` ``package-N``, or ``psys`` for the platform on some
Intel laptops), ``intel-rapl:N:M`` its subzones (``core``, ``uncore``, ``dram``); AMD's RAPL driver registers the
same ``intel-rapl`` zone names. Each zone's ``energy_uj`` is an energy counter in microjoules that goes back to 0
after ``max_energy_range_uj``: exact over an interval, its wrap counted. The figure is the packages' and, where the
CPU reports it apart, DRAM's: core and uncore are inside the package, psys covers them, so neither is added.

Since Linux 5.10 ``energy_uj`` is readable by root only (a side channel on what the CPU computes): as another user
the source says so in one line and is not used."""

from __future__ import annotations

import re
from pathlib import Path

from .base import PowerError, PowerSource, Scope, read_microunits

ZONE = re.compile(r"intel-rapl:\d+(:\d+)?$")
ROOT_ONLY = ("is readable by root only on this kernel (Linux 5.10 and later): run as root, or "
             "`sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj` until the next boot")


def zones(root: Path) -> dict[str, Path]:
    """Each RAPL zone under ``root``/sys/class/powercap by its ``name`` (``package-0``, ``dram``...), qualified by the
    zone where a name repeats (two sockets' DRAM)."""
    found: dict[str, Path] = {}
    for d in sorted((root / "sys/class/powercap").glob("intel-rapl:*"), key=lambda p: p.name):
        if not ZONE.match(d.name):
            continue
        try:
            name = (d / "name").read_text().strip()
        except OSError:
            continue
        found[name if name not in found else f"{name} {d.name}"] = d
    return found


def counted(names: list[str]) -> list[str]:
    """The zones whose sum is the CPUs' draw: packages and DRAM; psys alone where there is no package."""
    out = [n for n in names if n.startswith("package") or n.startswith("dram")]
    return out or [n for n in names if n.startswith("psys")]


class RaplSource(PowerSource):
    """The RAPL package (and DRAM) zones under ``root`` (``/`` on a real machine), each a channel."""

    name = "rapl"
    measures = Scope.CPU_PACKAGE
    counter = True

    def __init__(self, root: Path = Path("/")) -> None:
        found = zones(root)
        names = counted(list(found))
        if not names:
            raise PowerError(f"rapl: no RAPL zone in {root / 'sys/class/powercap'} (no intel-rapl driver, or not x86)")
        self.zones = {n: found[n] for n in names}
        self.wraps: dict[str, float] = {}
        for n, d in self.zones.items():
            try:
                read_microunits(d / "energy_uj")
                self.wraps[n] = read_microunits(d / "max_energy_range_uj")
            except PermissionError:
                raise PowerError(f"rapl: {d / 'energy_uj'} {ROOT_ONLY}") from None
            except (OSError, ValueError) as e:
                raise PowerError(f"rapl: {d.name} cannot be read ({e})") from None
        self.note = f"RAPL energy counters of {', '.join(self.zones)}: the CPUs only, not GPUs, drives, fans or " \
            "the power supply"

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        joules = {}
        for n, d in self.zones.items():
            try:
                joules[n] = read_microunits(d / "energy_uj")
            except PermissionError:
                raise PowerError(f"rapl: {d / 'energy_uj'} {ROOT_ONLY}") from None
        return {}, joules, dict(self.wraps)
