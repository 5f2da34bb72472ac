"""The clean-bench guard: refuse to measure a dirty machine, and record its state with every level.

Checks are small classes in an ordered list (pyperf's ``system`` operations): each says whether it can be read
here, what it observed, the threshold, and what to do. A check that cannot be read says "not available" and
never passes silently. Everything is read from a root directory (``/`` by default), so tests can use a fake
/proc and /sys tree.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from . import adapters
from .guard_results import FAIL, NA, PASS, WARN, CheckResult, GuardSnapshot
from .errors import TokenbenchError, UsageError


#: Model servers a bench must not share the machine with (regex on the command line).
#: The adapters' own patterns, then servers tokenbench has no adapter for.
SERVING_PATTERNS: list[tuple[str, str]] = [
    *adapters.process_patterns(),
    ("TGI", r"text-generation-(launcher|server)"),
    ("LM Studio", r"(?i)lm[ -]?studio|(^|/)lms\s+server"),
]


class GuardFailed(TokenbenchError):
    exit_code = 6


@dataclass(slots=True)
class GuardEnv:
    root: Path = Path("/")
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    target_pids: set[int] = field(default_factory=set)
    sample_s: float = 0.5

    def read(self, rel: str) -> str | None:
        try:
            return (self.root / rel.lstrip("/")).read_text(errors="replace")
        except OSError:
            return None

    def glob(self, pattern: str) -> list[Path]:
        return sorted(self.root.glob(pattern.lstrip("/")))

    def cfg(self, name: str) -> dict[str, Any]:
        return self.config.get(name, {})


def load_config(path: Path | None = None) -> dict[str, dict[str, Any]]:
    cfg = tomllib.loads(resources.files("tokenbench").joinpath("data/guard.toml").read_text())
    user = path or Path(platformdirs.user_config_dir("tokenbench")) / "guard.toml"
    if path is not None and not path.exists():
        raise UsageError(f"guard config {path} does not exist")
    if user.exists():
        try:
            over = tomllib.loads(user.read_text())
        except tomllib.TOMLDecodeError as e:
            raise UsageError(f"{user} is not valid TOML ({e})") from None
        _check_config(user, over, cfg)
        for k, v in over.items():
            cfg.setdefault(k, {}).update(v)
    return cfg


def _check_config(path: Path, over: dict[str, Any], defaults: dict[str, dict[str, Any]]) -> None:
    """A user's guard config, each key against the packaged one's: a check or a setting it does not have (a typo
    the guard would go on without), a severity other than fail or warn, or a negative threshold, refused in one
    line naming it."""
    for check, settings in over.items():
        if check not in defaults:
            said = f"[{check}]" if isinstance(settings, dict) else f"{check} = {settings!r}"
            raise UsageError(f"{path}: {said} is no check of the guard's: it has {', '.join(defaults)}")
        if not isinstance(settings, dict):  # `cpu_load = 1`: a key where a table of settings belongs
            example = next(iter(defaults[check]), "severity")
            raise UsageError(f"{path}: {check} = {settings!r} is a key, not a table: put its settings under a line "
                             f"[{check}] (e.g. {example} = ...)")
        for key, value in settings.items():
            known = defaults[check]
            where = f"{path}: [{check}] {key}"
            if key not in known:
                raise UsageError(f"{where} is no setting of this check: it has {', '.join(known)}")
            if key == "severity" and value not in ("fail", "warn"):
                raise UsageError(f'{where} = {value!r}: give "fail" (the bench is dirty) or "warn" (recorded)')
            if isinstance(known[key], (int, float)) and not isinstance(known[key], bool):
                if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                    raise UsageError(f"{where} = {value!r}: give a number of 0 or more, as {known[key]!r}")


class Check:
    name = ""

    def run(self, env: GuardEnv) -> CheckResult:  # pragma: no cover - interface
        raise NotImplementedError

    def na(self, why: str) -> CheckResult:
        return CheckResult(self.name, NA, why)

    def verdict(self, env: GuardEnv, ok: bool) -> str:
        return PASS if ok else (FAIL if env.cfg(self.name).get("severity", "fail") == "fail" else WARN)


def _descendants(env: GuardEnv, pids: set[int]) -> set[int]:
    """pids and all their descendants, from /proc/*/stat (parent is field 4)."""
    parent: dict[int, int] = {}
    for p in env.glob("proc/[0-9]*/stat"):
        # a process that ends between the listing and the read is gone (ESRCH): skipped, as one never listed
        text = env.read(str(p.relative_to(env.root))) or ""
        m = re.match(r"\d+ \(.*\) \S (\d+)", text)
        if m:
            parent[int(p.parent.name)] = int(m.group(1))
    out = set(pids)
    changed = True
    while changed:
        changed = False
        for child, par in parent.items():
            if par in out and child not in out:
                out.add(child)
                changed = True
    return out


def _serving_advice(env: GuardEnv) -> str:
    said = "stop the other servers: they share memory bandwidth and compute with the one measured"
    if env.target_pids:
        return said
    # nothing named as the server measured: the one found may be it
    return (f"{said}; if one is the server you measure, name it (tokenbench guard --url URL; on a server host, "
            "tokenbench agent --port-of-server PORT)")


class ServingProcesses(Check):
    name = "serving_processes"

    def run(self, env: GuardEnv) -> CheckResult:
        procs = env.glob("proc/[0-9]*/cmdline")
        if not procs:
            return self.na("no /proc to read")
        skip = _descendants(env, env.target_pids) | {os.getpid()} if env.root == Path("/") else _descendants(env, env.target_pids)
        found = []
        for p in procs:
            pid = int(p.parent.name)
            if pid in skip:
                continue
            try:
                cmd = p.read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            for label, pat in SERVING_PATTERNS:
                if cmd and re.search(pat, cmd):
                    found.append(f"{label} (pid {pid})")
                    break
        ok = not found
        return CheckResult(self.name, self.verdict(env, ok), ", ".join(found) or "none besides the target",
                           "no other model server", "" if ok else _serving_advice(env))


def _meminfo(env: GuardEnv) -> dict[str, int]:
    text = env.read("proc/meminfo") or ""
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        parts = v.split()
        if parts and parts[0].isdigit():
            out[k.strip()] = int(parts[0]) * 1024
    return out


class FreeMemory(Check):
    name = "free_memory"

    def run(self, env: GuardEnv) -> CheckResult:
        m = _meminfo(env)
        if "MemAvailable" not in m or not m.get("MemTotal"):
            return self.na("no MemAvailable in /proc/meminfo")
        c = env.cfg(self.name)
        gb, pct = m["MemAvailable"] / 1e9, 100 * m["MemAvailable"] / m["MemTotal"]
        ok = gb >= c.get("min_free_gb", 2.0) and pct >= c.get("min_free_pct", 10.0)
        return CheckResult(self.name, self.verdict(env, ok), f"{gb:.1f} GB free ({pct:.0f}%)",
                           f">= {c.get('min_free_gb', 2.0):g} GB and {c.get('min_free_pct', 10.0):g}%",
                           "" if ok else "free memory: a model server short of it swaps or evicts its cache")


def _vmstat_swap(env: GuardEnv) -> int | None:
    text = env.read("proc/vmstat")
    if text is None:
        return None
    vals = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
    if "pswpin" not in vals:
        return None
    return int(vals["pswpin"]) + int(vals.get("pswpout", 0))


def _cpu_times(env: GuardEnv) -> tuple[int, int] | None:
    text = env.read("proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    f = [int(x) for x in text.splitlines()[0].split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f), idle


class Sampled:
    """Counters read twice, ``sample_s`` apart, shared by the checks that need a rate."""

    def __init__(self, env: GuardEnv) -> None:
        self.swap0, self.cpu0 = _vmstat_swap(env), _cpu_times(env)
        own0 = _own_cpu(env)
        time.sleep(env.sample_s)
        self.swap1, self.cpu1 = _vmstat_swap(env), _cpu_times(env)
        self.own = max(0.0, _own_cpu(env) - own0)
        self.dt = env.sample_s


def _own_cpu(env: GuardEnv) -> float:
    """CPU seconds used by this process and by the server being measured (its whole process tree: vLLM runs
    its engine and workers as children), which are not "other work"."""
    if env.root != Path("/"):
        return 0.0
    t = os.times()
    ticks = 0
    for pid in _descendants(env, env.target_pids) if env.target_pids else ():
        try:
            text = (env.root / "proc" / str(pid) / "stat").read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[-1].split()
        if len(fields) > 12:
            ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return t.user + t.system + ticks / hz


class SwapActivity(Check):
    name = "swap_activity"

    def __init__(self, s: Sampled) -> None:
        self.s = s

    def run(self, env: GuardEnv) -> CheckResult:
        if self.s.swap0 is None or self.s.swap1 is None:
            return self.na("no pswpin/pswpout in /proc/vmstat")
        rate = (self.s.swap1 - self.s.swap0) / self.s.dt
        lim = env.cfg(self.name).get("max_pages_per_s", 10.0)
        ok = rate <= lim
        return CheckResult(self.name, self.verdict(env, ok), f"{rate:.0f} pages/s swapped", f"<= {lim:g} pages/s",
                           "" if ok else "the machine is swapping: free memory before measuring")


class CpuLoad(Check):
    name = "cpu_load"

    def __init__(self, s: Sampled) -> None:
        self.s = s

    def run(self, env: GuardEnv) -> CheckResult:
        if self.s.cpu0 is None or self.s.cpu1 is None:
            return self.na("no /proc/stat")
        total = self.s.cpu1[0] - self.s.cpu0[0]
        idle = self.s.cpu1[1] - self.s.cpu0[1]
        if total <= 0:
            busy = _static_busy(env)
            if busy is None:
                return self.na("/proc/stat did not advance")
        else:
            ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
            own_ticks = self.s.own * ticks
            busy = 100.0 * max(0.0, total - idle - own_ticks) / total
        lim = env.cfg(self.name).get("max_other_pct", 15.0)
        ok = busy <= lim
        return CheckResult(self.name, self.verdict(env, ok), f"{busy:.0f}% of all cores busy with other work",
                           f"<= {lim:g}%", "" if ok else "other processes use the CPU: stop them (see top)")


def _static_busy(env: GuardEnv) -> float | None:
    """A fake or frozen /proc/stat: the share of busy time since boot."""
    c = _cpu_times(env)
    if not c or not c[0]:
        return None
    return 100.0 * (c[0] - c[1]) / c[0]


class GpuNvml(Check):
    name = "gpu_nvml"

    def run(self, env: GuardEnv) -> CheckResult:
        if env.root != Path("/"):
            return self.na("NVML reads the real machine only")
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:  # no library, no driver, no GPU: all mean not available
            return self.na("no NVIDIA GPU or NVML (pip install nvidia-ml-py)")
        c = env.cfg(self.name)
        notes, ok = [], True
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
            temp = pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
            others = sum((p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                         if p.pid not in env.target_pids) / 1e9
            try:
                cap = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000
                notes.append(f"gpu{i} power cap {cap:.0f} W")
            except Exception:
                pass
            notes.append(f"gpu{i} {util}% busy, {temp} C, {others:.1f} GB held by other processes")
            ok &= util <= c.get("max_util_pct", 10) and others <= c.get("max_other_mem_gb", 1.0) \
                and temp <= c.get("max_temp_c", 80)
        return CheckResult(self.name, self.verdict(env, ok), "; ".join(notes),
                           f"<= {c.get('max_util_pct', 10):g}% busy, <= {c.get('max_other_mem_gb', 1.0):g} GB others, "
                           f"<= {c.get('max_temp_c', 80):g} C", "" if ok else "another job uses the GPU or it is hot")


class GpuAmd(Check):
    name = "gpu_amd"

    def run(self, env: GuardEnv) -> CheckResult:
        cards = [p for p in env.glob("sys/class/drm/card*/device/gpu_busy_percent")]
        if not cards:
            return self.na("no AMD GPU in /sys/class/drm")
        lim = env.cfg(self.name).get("max_busy_pct", 10.0)
        obs, ok = [], True
        for p in cards:
            busy = float(p.read_text().strip() or 0)
            used = p.parent / "mem_info_vram_used"
            gb = f", {int(used.read_text()) / 1e9:.1f} GB VRAM used" if used.exists() else ""
            obs.append(f"{p.parent.parent.name} {busy:.0f}% busy{gb}")
            ok &= busy <= lim
        return CheckResult(self.name, self.verdict(env, ok), "; ".join(obs), f"<= {lim:g}% busy",
                           "" if ok else "another job uses the GPU")


def _hwmon(env: GuardEnv, kind: str) -> list[tuple[str, float]]:
    out = []
    for p in env.glob(f"sys/class/hwmon/hwmon*/{kind}*_input"):
        try:
            v = float(p.read_text().strip())
        except (OSError, ValueError):
            continue
        name = (p.parent / "name").read_text().strip() if (p.parent / "name").exists() else p.parent.name
        out.append((f"{name}/{p.name.split('_')[0]}", v))
    return out


class Temperature(Check):
    name = "temperature"

    def run(self, env: GuardEnv) -> CheckResult:
        temps = [(n, v / 1000) for n, v in _hwmon(env, "temp")]
        if not temps:
            return self.na("no hwmon temperature sensors")
        lim = env.cfg(self.name).get("max_c", 85.0)
        hot = max(temps, key=lambda t: t[1])
        ok = hot[1] <= lim
        return CheckResult(self.name, self.verdict(env, ok), f"hottest {hot[0]} {hot[1]:.0f} C ({len(temps)} sensors)",
                           f"<= {lim:g} C", "" if ok else "let the machine cool down: hot parts throttle")


class Fans(Check):
    name = "fans"

    def run(self, env: GuardEnv) -> CheckResult:
        fans = _hwmon(env, "fan")
        if not fans:
            return self.na("no hwmon fan sensors")
        lim = env.cfg(self.name).get("min_rpm", 0.0)
        ok = all(v >= lim for _, v in fans)
        return CheckResult(self.name, self.verdict(env, ok), ", ".join(f"{n} {v:.0f} rpm" for n, v in fans),
                           f">= {lim:g} rpm" if lim else "reported", "" if ok else "a fan is slow or stopped")


class CpuGovernor(Check):
    name = "cpu_governor"

    def run(self, env: GuardEnv) -> CheckResult:
        files = env.glob("sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor")
        if not files:
            return self.na("no cpufreq governor exposed")
        govs = sorted({f.read_text().strip() for f in files})
        allowed = env.cfg(self.name).get("allowed", ["performance"])
        ok = all(g in allowed for g in govs)
        return CheckResult(self.name, self.verdict(env, ok), ", ".join(govs), " or ".join(allowed),
                           "" if ok else "set the governor: cpupower frequency-set -g performance")


class PowerCap(Check):
    name = "power_cap"

    def run(self, env: GuardEnv) -> CheckResult:
        caps = []
        for p in env.glob("sys/class/powercap/*/constraint_0_power_limit_uw"):
            caps.append(f"{p.parent.name} {int(p.read_text().strip()) / 1e6:.0f} W")
        for p in env.glob("sys/class/hwmon/hwmon*/power1_cap"):
            caps.append(f"{p.parent.name} {int(p.read_text().strip()) / 1e6:.0f} W")
        if not caps:
            return self.na("no power cap readable (powercap, hwmon)")
        return CheckResult(self.name, PASS, ", ".join(caps), "recorded", "")


def run_checks(env: GuardEnv) -> list[CheckResult]:
    s = Sampled(env)
    checks: list[Check] = [ServingProcesses(), FreeMemory(), SwapActivity(s), CpuLoad(s), GpuNvml(), GpuAmd(),
                           Temperature(), Fans(), CpuGovernor(), PowerCap()]
    return [c.run(env) for c in checks]


def dirty(results: list[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == FAIL]


def snapshot(env: GuardEnv) -> GuardSnapshot:
    return GuardSnapshot.of(run_checks(env))


async def snapshot_before(mode: str, config: Any, target_pids: set[int], where: str) -> GuardSnapshot | None:
    """The guard's snapshot before a run or a level, or None with mode "off". Strict mode refuses a dirty bench
    (``GuardFailed``); warn mode records it, and the level's findings say so (findings.guard_finding)."""
    if mode == "off":
        return None
    env = GuardEnv(config=config or load_config(), target_pids=target_pids)
    snap = await asyncio.to_thread(snapshot, env)
    refuse_if_dirty(mode, snap, where)
    return snap


def refuse_if_dirty(mode: str, snap: GuardSnapshot, where: str) -> None:
    """Strict mode's one rule, for this machine's snapshot and for each load-generating node's: a dirty bench
    is refused (``GuardFailed``) before anything of what it would measure is stored."""
    if mode == "strict" and snap.dirty:
        raise GuardFailed(refuse_message(snap, where))


def refuse_message(snap: GuardSnapshot, where: str) -> str:
    parts = "; ".join(f"{c.name}: {c.observed} ({c.advice})" for c in snap.failed)
    return f"the bench is dirty {where}: {parts}; fix it, or run with --guard warn to record and go on"


def refuse_dirty_nodes(mode: str, node_snaps: list[GuardSnapshot], where: str) -> None:
    """Strict mode refuses a dirty load-generating node as it refuses a dirty driver (``guard.refuse_if_dirty``);
    warn mode records it and the level's findings say so."""
    for snap in node_snaps:
        refuse_if_dirty(mode, snap, f"on load-generating node {snap.node} {where}")
