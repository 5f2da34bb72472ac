"""Power sources against the kernel's real sysfs and powercap layout (built in tmp_path, names and values as real
machines print them), fake NVML and amdsmi modules, real Prometheus pages on the loopback and real commands; the
intervals they give (counters with wrap-around, watts integrated, partial when a source stops); the auto choice; and
the real files of this machine where it has them."""

from __future__ import annotations

import asyncio
import http.server
import os
import shlex
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tokenbench.power.base import PowerError, Reading, Scope
from tokenbench.power.choose import discover, open_sources
from tokenbench.power.interval import Interval, above_idle, integrate
from tokenbench.power.sampler import BackgroundSampler, LocalMeter, measure_idle
from tokenbench.power.amd import AmdHwmonSource, AmdSmiSource, amdgpu_hwmons
from tokenbench.power.command import CommandSource, parse_watts
from tokenbench.power.nvml import NvmlSource
from tokenbench.power.rapl import RaplSource
from tokenbench.power.report import PowerReport, report
from tokenbench.power.url import UrlSource

RAPL_RANGE_UJ = 262143328850  # max_energy_range_uj of a real package-0 zone


class Clock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# ---- the kernel's layouts ------------------------------------------------------------------------------------------

def _link(link: Path, target: str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _files(d: Path, files: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text + "\n")
    return d


def rapl_tree(root: Path, packages: int = 1, energy_uj: int = 124599532281, dram: bool = False,
              psys: bool = False) -> Path:
    """/sys/devices/virtual/powercap/intel-rapl/intel-rapl:N[/intel-rapl:N:M] and their /sys/class/powercap links."""
    base = root / "sys/devices/virtual/powercap/intel-rapl"
    _files(base, {"enabled": "1"})
    _link(root / "sys/class/powercap/intel-rapl", "../../devices/virtual/powercap/intel-rapl")
    zone = {"energy_uj": str(energy_uj), "max_energy_range_uj": str(RAPL_RANGE_UJ), "enabled": "1",
            "constraint_0_name": "long_term", "constraint_0_power_limit_uw": "125000000",
            "constraint_0_time_window_us": "999424"}
    for n in range(packages):
        _files(base / f"intel-rapl:{n}", {"name": f"package-{n}", **zone})
        _link(root / f"sys/class/powercap/intel-rapl:{n}", f"../../devices/virtual/powercap/intel-rapl/intel-rapl:{n}")
        subs = ["dram"] if dram else ["core", "uncore"]
        for m, sub in enumerate(subs):
            _files(base / f"intel-rapl:{n}/intel-rapl:{n}:{m}",
                   {"name": sub, "energy_uj": "23893449269", "max_energy_range_uj": str(RAPL_RANGE_UJ)})
            _link(root / f"sys/class/powercap/intel-rapl:{n}:{m}",
                  f"../../devices/virtual/powercap/intel-rapl/intel-rapl:{n}/intel-rapl:{n}:{m}")
    if psys:
        _files(base / f"intel-rapl:{packages}", {"name": "psys", **zone})
        _link(root / f"sys/class/powercap/intel-rapl:{packages}",
              f"../../devices/virtual/powercap/intel-rapl/intel-rapl:{packages}")
    # the MMIO interface of the same package: power limits only, never counted twice
    _files(root / "sys/devices/virtual/powercap/intel-rapl-mmio/intel-rapl-mmio:0",
           {"name": "package-0", "constraint_0_power_limit_uw": "125000000"})
    _link(root / "sys/class/powercap/intel-rapl-mmio:0",
          "../../devices/virtual/powercap/intel-rapl-mmio/intel-rapl-mmio:0")
    return root


def set_energy(root: Path, zone: str, uj: int) -> None:
    (root / "sys/class/powercap" / zone / "energy_uj").write_text(f"{uj}\n")


def hwmon(root: Path, n: int, name: str, files: dict[str, str], pci: str | None = None) -> Path:
    """/sys/class/hwmon/hwmonN -> the device's hwmon directory, with ``device`` pointing at the PCI device."""
    if pci is not None:
        dev = root / f"sys/devices/pci0000:00/0000:00:08.1/{pci}"
        d = _files(dev / f"hwmon/hwmon{n}", {"name": name, **files})
        _link(d / "device", f"../../../{pci}")
        _link(root / f"sys/class/hwmon/hwmon{n}", f"../../devices/pci0000:00/0000:00:08.1/{pci}/hwmon/hwmon{n}")
        return d
    d = _files(root / f"sys/devices/virtual/thermal/hwmon{n}", {"name": name, **files})
    _link(root / f"sys/class/hwmon/hwmon{n}", f"../../devices/virtual/thermal/hwmon{n}")
    return d


def strix_halo(root: Path, uw: int = 48_032_000) -> Path:
    """An APU's amdgpu sensor (vddnb present: the driver exposes it on APUs only), beside the CPU's k10temp."""
    hwmon(root, 0, "k10temp", {"temp1_input": "51250", "temp1_label": "Tctl"}, pci="0000:00:18.3")
    return hwmon(root, 4, "amdgpu", {"power1_input": str(uw), "in0_input": "1231", "in0_label": "vddgfx",
                                     "in1_input": "1003", "in1_label": "vddnb", "temp1_input": "47000",
                                     "temp1_label": "edge", "freq1_input": "600000000", "freq1_label": "sclk"},
                 pci="0000:c3:00.0")


def radeon_dgpu(root: Path, n: int = 2, uw: int = 23_040_000, pci: str = "0000:03:00.0") -> Path:
    return hwmon(root, n, "amdgpu", {"power1_average": str(uw), "power1_cap": "303000000",
                                     "power1_cap_max": "303000000", "in0_input": "806", "in0_label": "vddgfx",
                                     "temp1_input": "38000", "temp1_label": "edge", "fan1_input": "0"}, pci=pci)


# ---- RAPL ----------------------------------------------------------------------------------------------------------

def test_rapl_reads_the_package_counters_and_not_core_uncore_or_mmio(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path)
    src = RaplSource(root)
    assert list(src.zones) == ["package-0"] and src.measures is Scope.CPU_PACKAGE and src.counter
    r = src.read()
    assert r.ok and r.joules == {"package-0": 124599.532281} and r.wraps == {"package-0": RAPL_RANGE_UJ / 1e6}
    assert r.watts == {} and "not GPUs" in src.note


def test_rapl_two_sockets_count_packages_and_dram(tmp_path: Path) -> None:
    src = RaplSource(rapl_tree(tmp_path, packages=2, dram=True))
    assert list(src.zones) == ["package-0", "dram", "package-1", "dram intel-rapl:1:0"]


def test_rapl_psys_is_not_added_to_the_packages(tmp_path: Path) -> None:
    assert list(RaplSource(rapl_tree(tmp_path, psys=True)).zones) == ["package-0"]


def test_rapl_counter_wrap_around_is_counted_round_its_range(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path, energy_uj=RAPL_RANGE_UJ - 5_000_000)  # 5 J before the wrap
    clock = Clock()
    s = BackgroundSampler(RaplSource(root), interval_s=1.0, clock=clock)
    start = clock.t
    s.read_now()
    for uj in (RAPL_RANGE_UJ - 1_000_000, 2_000_000, 10_000_000):  # +4 J, wrap +3 J, +8 J
        clock.t += 1.0
        set_energy(root, "intel-rapl:0", uj)
        s.read_now()
    iv = s.interval(start, clock.t)
    assert iv.method == "counter" and not iv.partial
    assert iv.joules == pytest.approx(15.0) and iv.mean_w == pytest.approx(5.0)


def test_rapl_wrap_between_two_readings_only(tmp_path: Path) -> None:
    a = Reading("rapl", 0.0, joules={"package-0": 262140.0}, wraps={"package-0": RAPL_RANGE_UJ / 1e6})
    b = Reading("rapl", 10.0, joules={"package-0": 997.0}, wraps={"package-0": RAPL_RANGE_UJ / 1e6})
    assert integrate([a, b]).joules == pytest.approx(997.0 + RAPL_RANGE_UJ / 1e6 - 262140.0)


def test_rapl_root_only_is_one_line_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = rapl_tree(tmp_path)
    energy = root / "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj"
    if os.geteuid() == 0:  # root reads a 0400 file anyway: the kernel's refusal is stood in for
        real = Path.read_text

        def refused(self: Path, *a: Any, **kw: Any) -> str:
            if self.name == "energy_uj":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self, *a, **kw)
        monkeypatch.setattr(Path, "read_text", refused)
    else:
        energy.chmod(0)
    with pytest.raises(PowerError) as e:
        RaplSource(root)
    msg = str(e.value)
    assert "\n" not in msg and "readable by root only" in msg and "energy_uj" in msg
    sources, notes = discover(root, ("rapl",))
    assert sources == [] and "readable by root only" in notes[0]


def test_rapl_zone_vanishing_mid_interval_marks_the_figure_partial(tmp_path: Path) -> None:
    root = rapl_tree(tmp_path)
    clock = Clock()
    s = BackgroundSampler(RaplSource(root), interval_s=0.5, clock=clock)
    start = clock.t
    for i in range(5):
        set_energy(root, "intel-rapl:0", 124599532281 + i * 50_000_000)  # 100 W at 0.5 s
        s.read_now()
        clock.t += 0.5
    (root / "sys/devices/virtual/powercap/intel-rapl/intel-rapl:0/energy_uj").unlink()
    for _ in range(10):
        s.read_now()
        clock.t += 0.5
    iv = s.interval(start)
    assert iv.partial and iv.joules == pytest.approx(200.0) and iv.mean_w == pytest.approx(100.0)
    assert iv.covered_s == pytest.approx(2.0) and iv.seconds == pytest.approx(7.5)
    assert "\n" not in iv.note and "energy_uj: no such file" in iv.note and "cover 2.0 s of the 7.5 s" in iv.note


# ---- amdgpu hwmon and amdsmi ---------------------------------------------------------------------------------------

def test_strix_halo_apu_sensor_reads_the_whole_package(tmp_path: Path) -> None:
    strix_halo(tmp_path)
    src = AmdHwmonSource(tmp_path)
    assert src.measures is Scope.APU_PACKAGE and "whole package" in src.note and "power1_input" in src.note
    r = src.read()
    assert r.ok and r.watts == {"amdgpu 0000:c3:00.0": pytest.approx(48.032)} and not src.counter


def test_radeon_dgpu_reads_power1_average_as_a_gpu_board(tmp_path: Path) -> None:
    hwmon(tmp_path, 0, "nvme", {"temp1_input": "35850"}, pci="0000:01:00.0")
    radeon_dgpu(tmp_path)
    src = AmdHwmonSource(tmp_path)
    assert src.measures is Scope.GPU_BOARD and src.read().watts == {"amdgpu 0000:03:00.0": pytest.approx(23.04)}
    assert [d.name for d in amdgpu_hwmons(tmp_path)] == ["hwmon2"]


def test_average_is_preferred_where_both_are_exposed_and_two_cards_sum(tmp_path: Path) -> None:
    d = radeon_dgpu(tmp_path, 2, uw=100_000_000)
    (d / "power1_input").write_text("180000000\n")
    radeon_dgpu(tmp_path, 3, uw=50_000_000, pci="0000:04:00.0")
    r = AmdHwmonSource(tmp_path).read()
    assert r.total_w == pytest.approx(150.0) and len(r.watts) == 2


def test_no_amdgpu_sensor_says_where_it_looked(tmp_path: Path) -> None:
    hwmon(tmp_path, 0, "k10temp", {"temp1_input": "51250"})
    with pytest.raises(PowerError, match=r"^amdgpu: no amdgpu hwmon power sensor"):
        AmdHwmonSource(tmp_path)


def test_amdgpu_sensor_gone_mid_interval_sampled_figure_is_partial(tmp_path: Path) -> None:
    d = strix_halo(tmp_path, uw=60_000_000)
    clock = Clock()
    s = BackgroundSampler(AmdHwmonSource(tmp_path), interval_s=0.5, clock=clock)
    start = clock.t
    for i in range(9):
        if i == 4:
            (d / "power1_input").write_text("")  # the driver in reset answers nothing
        if i == 5:
            (d / "power1_input").write_text("60000000\n")
        s.read_now()
        clock.t += 0.5
    iv = s.interval(start, clock.t - 0.5)
    assert iv.method == "sampled" and iv.partial and iv.mean_w == pytest.approx(60.0) and iv.samples == 8
    assert "not a whole number" in iv.note and "\n" not in iv.note


class FakeAmdSmi:
    def __init__(self, accumulator: bool = True) -> None:
        self.count, self.accumulator = 1_000_000, accumulator

    def amdsmi_init(self) -> None: ...

    def amdsmi_shut_down(self) -> None: ...

    def amdsmi_get_processor_handles(self) -> list[str]:
        return ["h0"]

    def amdsmi_get_energy_count(self, h: str) -> dict[str, Any]:
        if not self.accumulator:
            raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")
        return {"energy_accumulator": self.count, "counter_resolution": 15.3, "timestamp": 0}

    def amdsmi_get_power_info(self, h: str) -> dict[str, Any]:
        return {"socket_power": "N/A", "current_socket_power": 0xFFFFFFFF, "average_socket_power": 95}


def test_amdsmi_energy_accumulator_and_socket_power(tmp_path: Path) -> None:
    strix_halo(tmp_path)
    smi = FakeAmdSmi()
    src = AmdSmiSource(smi, tmp_path)
    assert src.counter and src.measures is Scope.APU_PACKAGE
    r = src.read()
    assert r.joules == {"gpu0": pytest.approx(15.3)} and r.watts == {"gpu0": 95.0}
    plain = AmdSmiSource(FakeAmdSmi(accumulator=False), tmp_path / "none")
    assert not plain.counter and plain.measures is Scope.GPU_BOARD and plain.read().watts == {"gpu0": 95.0}


# ---- NVML ----------------------------------------------------------------------------------------------------------

class FakeNvml:
    """pynvml's calls tokenbench makes: two GPUs, energy in mJ, power in mW."""

    def __init__(self, energy: bool = True, gpus: int = 2) -> None:
        self.energy, self.gpus, self.mj, self.mw = energy, gpus, 5_000_000, 350_000
        self.shut = False

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        if not self.energy:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.mj + h

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self.mw


def test_nvml_energy_counters_per_gpu_summed() -> None:
    nv = FakeNvml()
    src = NvmlSource(nv)
    assert src.counter and src.measures is Scope.GPU_BOARD and "2 GPUs, summed" in src.note
    clock = Clock()
    a = src.read(clock)
    nv.mj += 700_000  # 700 J each
    clock.t += 2.0
    b = src.read(clock)
    iv = integrate([a, b])
    assert iv.joules == pytest.approx(1400.0) and iv.mean_w == pytest.approx(700.0)
    assert b.watts == {"gpu0": 350.0, "gpu1": 350.0}
    src.close()
    assert nv.shut


def test_nvml_without_energy_counter_samples_power() -> None:
    src = NvmlSource(FakeNvml(energy=False, gpus=1))
    assert not src.counter and "power, sampled" in src.note
    rs = [Reading("nvml", t, {"gpu0": w}) for t, w in ((0.0, 100.0), (1.0, 300.0), (2.0, 300.0))]
    iv = integrate(rs)
    assert iv.method == "sampled" and iv.joules == pytest.approx(500.0) and src.read().watts == {"gpu0": 350.0}


def test_nvml_on_this_machine_is_a_source_or_one_line() -> None:
    try:
        src = NvmlSource()
    except PowerError as e:
        assert str(e).startswith("nvml: ") and "\n" not in str(e)
        return
    r = src.read()  # a machine with an NVIDIA GPU: a real reading
    src.close()
    assert r.ok and r.watts


# ---- a Prometheus page ---------------------------------------------------------------------------------------------

DCGM = """# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-5fd4f087-86f3-7a43-b711-4771313afc50",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-box",DCGM_FI_DRIVER_VERSION="535.129.03"} 71.323000
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-0b8b6ebc-a4c5-3e41-9b16-4b0e06f1f4ce",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-box",DCGM_FI_DRIVER_VERSION="535.129.03"} 69.677000
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-5fd4f087-86f3-7a43-b711-4771313afc50",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-box"} {e0}
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-0b8b6ebc-a4c5-3e41-9b16-4b0e06f1f4ce",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-box"} 3713296843
"""
NODE = """# HELP node_hwmon_power_average_watt Hardware monitor for power usage in watts (average)
# TYPE node_hwmon_power_average_watt gauge
node_hwmon_power_average_watt{chip="0000:c3:00_0",sensor="power1"} 48.032
# HELP node_rapl_package_joules_total Current RAPL package value in joules
# TYPE node_rapl_package_joules_total counter
node_rapl_package_joules_total{index="0",path="/host/sys/class/powercap/intel-rapl:0"} {j}
# HELP node_rapl_dram_joules_total Current RAPL dram value in joules
# TYPE node_rapl_dram_joules_total counter
node_rapl_dram_joules_total{index="0",path="/host/sys/class/powercap/intel-rapl:0:0"} 2345.5
"""


@pytest.fixture
def page() -> Iterator[tuple[str, dict[str, Any]]]:
    """A real HTTP server on the loopback serving ``state['text']`` at /metrics (``state['status']`` its code)."""
    state: dict[str, Any] = {"text": "", "status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state["auth"] = self.headers.get("Authorization")
            body = state["text"].encode()
            self.send_response(state["status"])
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None: ...

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", state
    finally:
        srv.shutdown()
        srv.server_close()


def test_dcgm_energy_counter_in_millijoules(page: tuple[str, dict[str, Any]]) -> None:
    url, state = page
    state["text"] = DCGM.replace("{e0}", "5000000")
    src = UrlSource(url)
    assert src.counter and src.measures is Scope.GPU_BOARD and "DCGM" in src.note
    a = src.read()
    state["text"] = DCGM.replace("{e0}", "5900000")  # +900 J on gpu 0
    b = src.read()
    assert integrate([a, Reading(b.source, a.t + 3.0, joules=b.joules)]).mean_w == pytest.approx(300.0)


def test_a_page_behind_basic_auth_is_read_with_the_urls_user_and_password(page: tuple[str, dict[str, Any]]) -> None:
    """http://u:pw@host/metrics read "Name or service not known" for 127.0.0.1: urllib took "u:pw@127.0.0.1" for
    the host. The user and password go as HTTP Basic auth, as curl sends them."""
    import base64

    url, state = page
    state["text"] = DCGM.split("# HELP DCGM_FI_DEV_TOTAL")[0]
    src = UrlSource(url.replace("http://", "http://u%40x:p%3Aw@"))
    assert src.read().total_w == pytest.approx(141.0)
    assert state["auth"] == "Basic " + base64.b64encode(b"u@x:p:w").decode()


def test_a_meters_password_reaches_no_file(page: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    """The run's manifest kept --power-url as typed, its exporter's password with it, in the JSON and the store;
    --power-cmd's key alike."""
    from tokenbench.cli import main
    from tokenbench.emitter import BackgroundEmitter

    url, state = page
    state["text"] = DCGM.split("# HELP DCGM_FI_DEV_TOTAL")[0]
    db, out = tmp_path / "r.db", tmp_path / "r.json"
    with BackgroundEmitter() as em:
        for meter in (["--power-url", url.replace("http://", "http://u:SECRETPW99@")],
                      ["--power-cmd", f"{sys.executable} -c \"print('150 W')\" --api-key SECRETPW99abcdef"]):
            assert main(["sweep", "--url", em.url, "--requests", "2", "--guard", "off", "--quiet", "--db", str(db),
                         "--json", str(out), *meter]) == 0
            assert "SECRETPW99" not in out.read_text()  # the manifest, and the level's note of its meter
            assert (tmp_path / "r.json").read_text().count("***") >= 1
    assert all(b"SECRETPW99" not in f.read_bytes() for f in tmp_path.glob("r.db*"))


def test_dcgm_power_only_is_sampled(page: tuple[str, dict[str, Any]]) -> None:
    url, state = page
    state["text"] = DCGM.split("# HELP DCGM_FI_DEV_TOTAL")[0]
    src = UrlSource(url)
    assert not src.counter and src.read().total_w == pytest.approx(141.0)


def test_node_exporter_rapl_with_dram_then_hwmon(page: tuple[str, dict[str, Any]]) -> None:
    url, state = page
    state["text"] = NODE.replace("{j}", "140950.466006")
    src = UrlSource(url)
    assert src.counter and src.measures is Scope.CPU_PACKAGE
    assert src.read().joules == {"node_rapl_package_joules_total": 140950.466006, "node_rapl_dram_joules_total": 2345.5}
    state["text"] = NODE.split("# HELP node_rapl_package")[0]
    hw = UrlSource(url)
    assert not hw.counter and hw.read().watts == {"node_hwmon_power_average_watt": 48.032}


def test_node_exporter_rapl_wrap_without_range_is_a_partial_reset(page: tuple[str, dict[str, Any]]) -> None:
    url, state = page
    rs = []
    for t, j in enumerate((262000.0, 262100.0, 50.0, 150.0)):
        state["text"] = NODE.replace("{j}", str(j))
        r = UrlSource(url).read()
        rs.append(Reading(r.source, float(t), joules={"node_rapl_package_joules_total": j}))
    iv = integrate(rs)
    assert iv.partial and iv.joules == pytest.approx(200.0) and "went back" in iv.note


def test_a_page_without_power_or_not_prometheus_is_refused_in_one_line(page: tuple[str, dict[str, Any]]) -> None:
    url, state = page
    state["text"] = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n"
    with pytest.raises(PowerError, match=r"^url: .* has no power metric"):
        UrlSource(url)
    state["text"] = "<html>not metrics</html>{"
    with pytest.raises(PowerError, match="not a Prometheus page"):
        UrlSource(url)
    state["status"] = 503
    with pytest.raises(PowerError, match="answered HTTP 503"):
        UrlSource(url)


def test_a_page_going_down_mid_interval_leaves_a_partial_figure(page: tuple[str, dict[str, Any]]) -> None:
    url, state = page
    state["text"] = DCGM.split("# HELP DCGM_FI_DEV_TOTAL")[0]
    clock = Clock()
    s = BackgroundSampler(UrlSource(url, timeout_s=1.0), interval_s=0.5, clock=clock)
    start = clock.t
    for i in range(8):
        if i == 4:
            state["status"] = 502
        s.read_now()
        clock.t += 0.5
    iv = s.interval(start, clock.t - 0.5)
    assert iv.partial and iv.mean_w == pytest.approx(141.0) and "HTTP 502" in iv.note and "\n" not in iv.note


def test_an_unreachable_page_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(PowerError) as e:
        UrlSource(f"http://127.0.0.1:{port}/metrics", timeout_s=1.0)
    assert str(e.value).startswith("url: cannot read http://127.0.0.1:") and "\n" not in str(e.value)
    with pytest.raises(PowerError, match="not an http"):
        UrlSource("file:///etc/passwd")


# ---- a command -----------------------------------------------------------------------------------------------------

def _py(code: str) -> str:
    return shlex.join([sys.executable, "-c", code])


@pytest.mark.parametrize("text,watts", [("312.5 W\n", 312.5), ("312.5W", 312.5), ("  48 ", 48.0),
                                        ("1.2e3 watts", 1200.0), (".5", 0.5)])
def test_watts_printed(text: str, watts: float) -> None:
    assert parse_watts(text) == watts


@pytest.mark.parametrize("text", ["", "n/a", "-5 W", "312.5 kW", "312.5 W\n310 W", "power: 312 W"])
def test_not_watts(text: str) -> None:
    with pytest.raises(ValueError, match="not a number of watts"):
        parse_watts(text)


def test_what_a_meter_printed_is_quoted_without_its_secrets() -> None:
    """A command that printed its own request (a curl -v, a wrapper's usage line) had the key in the error."""
    with pytest.raises(ValueError) as e:
        parse_watts("Authorization: Bearer SECRETPW99abcdef for http://u:pw2secret@meter/x")
    assert "SECRETPW99" not in str(e.value) and "pw2secret" not in str(e.value) and "***" in str(e.value)


def test_a_command_meter_is_read_without_a_shell(tmp_path: Path) -> None:
    src = CommandSource(_py("print('312.5 W')"))
    assert src.measures is Scope.WHOLE_BOX and src.read().watts == {"meter": 312.5}
    marker = tmp_path / "x"
    # what the user typed runs as words: "; touch" is an argument of echo, never a second command
    with pytest.raises(PowerError) as e:
        CommandSource(f"echo 5; touch {marker}")
    assert "not a number of watts" in str(e.value) and not marker.exists() and "\n" not in str(e.value)


def test_a_command_that_cannot_be_read_is_refused_in_its_own_words(tmp_path: Path) -> None:
    cases = {"no-such-meter-7f3a": "not found", _py("print('idle')"): "printed 'idle'",
             _py("import sys; sys.exit('meter offline')"): "exited 1: meter offline",
             "'unbalanced": "cannot be split", "": "is empty"}
    for cmd, said in cases.items():
        with pytest.raises(PowerError) as e:
            CommandSource(cmd)
        assert said in str(e.value) and "\n" not in str(e.value), (cmd, str(e.value))
    with pytest.raises(PowerError, match="did not finish within 0.3 s"):
        CommandSource(_py("import time; time.sleep(5)"), timeout_s=0.3)


def test_a_command_failing_mid_interval_leaves_a_partial_figure(tmp_path: Path) -> None:
    f = tmp_path / "watts"
    f.write_text("200 W\n")
    clock = Clock()
    s = BackgroundSampler(CommandSource(f"cat {f}"), interval_s=0.5, clock=clock)
    start = clock.t
    for i in range(6):
        if i == 3:
            f.unlink()
        s.read_now()
        clock.t += 0.5
    iv = s.interval(start, clock.t - 0.5)
    assert iv.partial and iv.joules == pytest.approx(200.0) and iv.covered_s == pytest.approx(1.0)
    assert "command: cat exited 1" in iv.note and "\n" not in iv.note


# ---- intervals, idle, the report -----------------------------------------------------------------------------------

def test_counters_cover_an_interval_across_a_failed_read() -> None:
    rs = [Reading("x", 0.0, joules={"a": 0.0}), Reading("x", 1.0, error="x: busy"),
          Reading("x", 2.0, joules={"a": 400.0})]
    iv = integrate(rs, 0.0, 2.0)
    assert not iv.partial and iv.mean_w == 200.0 and "counters still cover" in iv.note


def test_fewer_than_two_readings_give_no_figure() -> None:
    iv = integrate([Reading("x", 0.0, error="x: gone")], 0.0, 10.0)
    assert iv.joules is None and iv.mean_w is None and iv.partial and iv.note == "x: gone"
    assert integrate([], 0.0, 1.0, source="x").note == "x: fewer than two readings in the interval"


def test_interval_telemetry_keys_and_scaling_of_a_partial_one() -> None:
    iv = Interval("nvml", "GPU board", 0.0, 10.0, 1000.0, 200.0, "sampled", 11, 5.0, True, "nvml: gone")
    t = iv.telemetry(output_tokens=4000, seconds=10.0)
    assert t == {"gpu_power_w_mean": 200.0, "energy_j": 1000.0, "j_per_output_token": 0.5,
                 "output_tokens_per_watt": 2.0}
    assert Interval.from_dict(iv.to_dict()) == iv
    # an interval longer than the level (--workers: their start and drain): per token, the draw over the level
    longer = Interval("agent", "whole box", 0.0, 3.14, 471.0, 150.0, "counter", 30, 3.14, False, "")
    t = longer.telemetry(output_tokens=960, seconds=3.0)
    assert t["j_per_output_token"] == pytest.approx(150.0 * 3.0 / 960)
    assert t["j_per_output_token"] * t["output_tokens_per_watt"] == pytest.approx(1.0)
    none = Interval("x", "", 0.0, 1.0, None, None, "none", 0, 0.0, True, "x")
    assert none.telemetry(10, 1.0) == {"gpu_power": "not available"}


def test_above_idle_share() -> None:
    idle = Interval("rapl", "CPU package", 0.0, 30.0, 1500.0, 50.0, "counter", 61, 30.0, False)
    load = Interval("rapl", "CPU package", 40.0, 100.0, 12000.0, 200.0, "counter", 121, 60.0, False)
    a = above_idle(load, idle)
    assert a is not None and a.share == pytest.approx(0.75) and a.joules_above == pytest.approx(9000.0)
    assert a.to_dict()["above_idle_w"] == 150.0
    assert above_idle(load, Interval("nvml", "", 0, 1, 1.0, 1.0, "counter", 2, 1.0, False)) is None


def test_measure_idle_then_a_level_on_a_local_meter() -> None:
    async def go() -> tuple[list[Interval], list[Interval]]:
        meter = LocalMeter([CommandSource(_py("print(40)"))], interval_s=0.1).start()
        try:
            idle = await measure_idle(meter, 0.5)
            mark = await meter.mark()
            await asyncio.sleep(0.4)
            return idle, await meter.intervals(mark)
        finally:
            await meter.close()

    idle, load = asyncio.run(go())
    assert idle[0].mean_w == pytest.approx(40.0) and idle[0].samples >= 3 and not idle[0].partial
    assert load[0].mean_w == pytest.approx(40.0)
    a = above_idle(load[0], idle[0])
    assert a is not None and a.share == pytest.approx(0.0)


def test_report_round_trips_and_malformed_answers_are_refused(tmp_path: Path) -> None:
    clock = Clock()
    s = BackgroundSampler(RaplSource(rapl_tree(tmp_path)), clock=clock)
    mark = report([s], ["nvml: none here"])
    assert [r.source for r in mark.latest] == ["rapl"] and mark.since is None
    rep = report([s], ["nvml: none here"], since=clock.t - 1)
    assert PowerReport.from_dict(rep.to_dict()) == rep and len(rep.intervals) == 1
    for bad in ({}, {"now": "x"}, {"now": 1.0, "latest": [{"source": "x"}]}, {"now": 1.0, "sources": {}},
                {"now": 1.0, "intervals": [{"source": "x"}]}, {"now": True}):
        with pytest.raises(ValueError):
            PowerReport.from_dict(bad)


# ---- choosing ------------------------------------------------------------------------------------------------------

def test_auto_prefers_amdgpu_over_rapl_and_all_takes_both(tmp_path: Path) -> None:
    strix_halo(tmp_path)
    rapl_tree(tmp_path)
    found, notes = discover(tmp_path, first_only=True)
    assert [s.name for s in found] == ["amdgpu"] and notes == ["nvml: NVML reads the real machine only"]
    every, _ = open_sources("all", root=tmp_path)
    assert [s.name for s in every] == ["amdgpu", "rapl"]
    auto, _ = open_sources("auto", root=tmp_path)
    assert [s.name for s in auto] == ["amdgpu"]
    assert [s.name for s in open_sources("rapl", root=tmp_path)[0]] == ["rapl"]


def test_auto_falls_to_rapl_and_a_named_missing_source_is_one_line(tmp_path: Path) -> None:
    rapl_tree(tmp_path)
    assert [s.name for s in open_sources("auto", root=tmp_path)[0]] == ["rapl"]
    with pytest.raises(PowerError, match=r"^amdgpu: no amdgpu hwmon"):
        open_sources("amd", root=tmp_path)
    with pytest.raises(PowerError, match="use one of"):
        open_sources("gpu", root=tmp_path)
    assert open_sources("none", root=tmp_path) == ([], [])


def test_a_command_or_page_given_replaces_auto_but_not_a_named_source(tmp_path: Path) -> None:
    rapl_tree(tmp_path)
    cmd = _py("print(10)")
    assert [s.name for s in open_sources("auto", cmd=cmd, root=tmp_path)[0]] == ["command"]
    assert [s.name for s in open_sources("rapl", cmd=cmd, root=tmp_path)[0]] == ["command", "rapl"]


# ---- the real files of this machine --------------------------------------------------------------------------------

def test_real_powercap_of_this_machine() -> None:
    if not list(Path("/sys/class/powercap").glob("intel-rapl:*")):
        pytest.skip("this machine exposes no RAPL zone in /sys/class/powercap (no intel-rapl driver: a VM, or not "
                    "x86)")
    try:
        src = RaplSource()
    except PowerError as e:  # as another user on Linux 5.10+: one line that says so
        assert "\n" not in str(e) and str(e).startswith("rapl: ")
        return
    a = src.read()
    assert a.ok and all(j >= 0 for j in a.joules.values()) and all(w > 0 for w in a.wraps.values())


def test_real_hwmon_of_this_machine() -> None:
    if not Path("/sys/class/hwmon").exists():
        pytest.skip("this machine has no /sys/class/hwmon")
    if not amdgpu_hwmons(Path("/")):
        pytest.skip("this machine has hwmon sensors but no amdgpu one")
    r = AmdHwmonSource().read()
    assert r.ok and r.total_w is not None and r.total_w > 0


def test_a_value_no_box_draws_is_a_failed_reading_not_a_figure() -> None:
    class Broken(CommandSource):
        def __init__(self, watts: dict[str, float], joules: dict[str, float]) -> None:
            self.parts = watts, joules

        def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
            return self.parts[0], self.parts[1], {}

    for w, j, said in (({"meter": float("nan")}, {}, "meter read nan W"), ({"meter": 5e9}, {}, "read 5000000000.0 W"),
                       ({}, {"a": -1.0}, "a counted -1.0 J"), ({}, {}, "no usable value")):
        r = Broken(w, j).read()
        assert not r.ok and said in (r.error or "") and r.error.startswith("command: ")


def test_a_power_url_that_is_no_url_names_the_option() -> None:
    with pytest.raises(PowerError) as e:
        UrlSource("notaurl")
    assert str(e.value) == "url: notaurl is not an http:// or https:// URL: give --power-url one"
