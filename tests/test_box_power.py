"""Numbers about the box under test, read on the box: a sweep with --agent reads each level's power through the
server host's agent and checks that host's guard before every level; a server on another machine with no meter
has no power figure (this machine's would describe the client); an agent that stops mid-run costs the power figure,
said in one line, and nothing else. Against the emitter, and an agent on the loopback in a thread of its own."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.cli.power import power_plan
from tokenbench.emitter import BackgroundEmitter
from tokenbench.hostagent.server import AgentConfig, serve
from tokenbench.power.base import PowerSource, Scope
from tokenbench.power.sampler import LocalMeter

TOKEN = "box-token-123456"
WARN_ONLY = ("serving_processes", "free_memory", "swap_activity", "cpu_load", "gpu_nvml", "gpu_amd", "temperature",
             "fans", "cpu_governor", "power_cap")


class Steady(PowerSource):
    """A box that draws 250 W, on an energy counter."""

    name = "steady"
    measures = Scope.WHOLE_BOX
    counter = True
    note = ""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        return {"box": 250.0}, {"box": 250.0 * (time.monotonic() - self.t0)}, {}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def agent(cfg: AgentConfig | None = None) -> Iterator[tuple[str, threading.Event]]:
    """``tokenbench agent`` on a loopback port, in a thread with its own event loop; the event stops it."""
    port = _port()
    stop_now = threading.Event()
    ready = threading.Event()

    def run() -> None:
        async def go() -> None:
            stop = asyncio.Event()

            async def watch() -> None:
                while not stop_now.is_set():
                    await asyncio.sleep(0.02)
                stop.set()

            task = asyncio.get_running_loop().create_task(watch())
            conf = cfg or AgentConfig(TOKEN, port=port, guard_sample_s=0.05)
            conf.port = port
            await serve(conf, LocalMeter([Steady()], 0.05), lambda url: ready.set(), stop)
            await task

        asyncio.run(go())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}", stop_now
    finally:
        stop_now.set()
        thread.join(10)


def sweep(emitter: BackgroundEmitter, tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "r.json"
    code = main(["sweep", "--url", emitter.url, "--quiet", "--no-metrics", "--concurrency", "2", "--requests", "8",
                 "--input-len", "16", "--output-len", "24", "--json", str(out), *argv])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_power_and_the_guard_are_read_on_the_server_host(emitter: BackgroundEmitter, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Also: the run says above its table where power and the guard were read (a sweep through an agent printed
    "(whole box)" as a local meter would), and records none of this machine's sources ("auto" read as the
    agent's)."""
    emitter.configure(itl_s=0.01)
    with agent() as (url, _):
        code, doc = sweep(emitter, tmp_path, "--agent", url, "--agent-token", TOKEN, "--guard", "warn")
    assert code == 0, doc
    man = doc["manifest"]
    assert man["power"]["read"] == "agent" and man["power"]["agent"] == url and TOKEN not in json.dumps(doc)
    assert man["power"]["sources"] is None
    said = " ".join(capsys.readouterr().out.split())
    assert f"power and the guard read on the server host, through its agent at {url}" in said, said
    assert main(["show", doc["run_id"]]) == 0
    assert f"through its agent at {url}" in " ".join(capsys.readouterr().out.split())
    assert man["server_host"] and man["server_host"]["power_sources"]
    lv = doc["levels"][0]
    tele = lv["telemetry"]
    assert tele["power_source"] == "steady" and tele["power_measures"] == Scope.WHOLE_BOX.value
    assert tele["gpu_power_w_mean"] == pytest.approx(250.0, rel=0.02)
    # joules per token: the box's mean draw over the level's own span, per output token it made; the inverse of
    # the output tok/s per W beside it (with --workers the interval ran past the level, and they read 0.49 and
    # 2.13). The energy is the whole interval's, which the agent reads from the level's start to past its end: on
    # a loaded machine it ran 9% longer than the level, so the two are held apart, not to each other
    span = tele["gpu_power_w_mean"] * lv["duration_s"]
    assert tele["j_per_output_token"] == pytest.approx(span / lv["total_output_tokens"])
    assert span * 0.98 <= tele["energy_j"] <= span * 1.5, (tele["energy_j"], span)
    assert tele["j_per_output_token"] * tele["output_tokens_per_watt"] == pytest.approx(1.0)
    assert lv["client"]["server_guard"]["checks"]
    # an owned box is priced at the draw each level measured: cost asked for --watts the run had read
    out = tmp_path / "cost.json"
    assert main(["cost", doc["run_id"], "--owned", "--purchase", "2500", "--kwh-price", "0.3", "--json", str(out)]) == 0
    priced = json.loads(out.read_text())
    assert "the watts each level measured (whole box)" in priced["pricing"], priced["pricing"]
    (point,) = priced["points"]
    hourly = 2500 / (3 * 365 * 24) + tele["gpu_power_w_mean"] / 1000 * 0.3
    assert point["cost_per_mtok"] == pytest.approx(hourly / (point["output_tps"] * 3600) * 1e6)


def test_a_dirty_server_host_refuses_a_strict_run_naming_the_host(emitter: BackgroundEmitter, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    stray = subprocess.Popen(["bash", "-c", "exec -a llama-server sleep 30"])  # another server on the host
    try:
        time.sleep(0.3)
        # this machine's guard only records (the test runs beside the stray process); the host's refuses
        lenient = tmp_path / "guard.toml"
        lenient.write_text("".join(f"[{name}]\nseverity = \"warn\"\n" for name in WARN_ONLY))
        with agent() as (url, _):
            code, _doc = sweep(emitter, tmp_path, "--agent", url, "--agent-token", TOKEN, "--guard", "strict",
                               "--guard-config", str(lenient))
    finally:
        stray.kill()
        stray.wait()
    err = capsys.readouterr().err
    assert code != 0 and "server host" in err and url in err and "serving_processes" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_an_agent_that_stops_mid_run_costs_the_power_figure_only(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(itl_s=0.02)
    with agent() as (url, stop):
        threading.Timer(0.6, stop.set).start()  # the host goes away during the first level
        code, doc = sweep(emitter, tmp_path, "--agent", url, "--agent-token", TOKEN, "--guard", "off")
    assert code == 0, doc
    tele = doc["levels"][0]["telemetry"]
    assert tele["gpu_power"] == "not available" and "\n" not in tele["power_note"] and tele["power_note"]
    assert doc["levels"][0]["completed"] == 8  # the load and its figures are kept


def test_an_agent_gone_before_a_level_flags_that_level_and_the_run_goes_on(
        emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the guard on, the host's check before the second level met no agent and ended the run (exit 3, the
    second level never ran). Now that level runs, flagged: its host went unchecked; each level's missing or
    partial power figure is said under the table, where only the JSON said it."""
    emitter.configure(itl_s=0.02)
    out = tmp_path / "r.json"
    lenient = tmp_path / "guard.toml"  # this machine's guard only records: the test runs beside other work
    lenient.write_text("".join(f"[{name}]\nseverity = \"warn\"\n" for name in WARN_ONLY))
    db = tmp_path / "r.db"

    def after_the_first_level(stop: threading.Event) -> None:  # the host goes away once the first level is stored
        while not stop.is_set():
            if db.exists():
                with contextlib.closing(sqlite3.connect(db)) as con, contextlib.suppress(sqlite3.Error):
                    if con.execute("SELECT count(*) FROM levels").fetchone()[0] >= 1:
                        stop.set()
            time.sleep(0.02)

    with agent() as (url, stop):
        threading.Thread(target=after_the_first_level, args=(stop,), daemon=True).start()
        code = main(["sweep", "--url", emitter.url, "--no-metrics", "--concurrency", "2,1", "--requests", "8",
                     "--input-len", "16", "--output-len", "24", "--json", str(out), "--agent", url, "--agent-token",
                     TOKEN, "--guard", "warn", "--guard-config", str(lenient), "--db", str(db)])
    shown = capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert code == 0 and [lv["completed"] for lv in doc["levels"]] == [8, 8], shown
    second = doc["levels"][1]
    first = doc["levels"][0]
    # the host's own guard may find this busy machine dirty (its agent keeps the default config): not the point
    assert "unchecked" not in json.dumps(first["findings"]) and first["telemetry"]["power_source"], first["findings"]
    # a host nobody could check is said as such, not as a dirty bench
    assert "host_unchecked" in second["flags"] and "dirty_bench" not in second["flags"], second["flags"]
    said = " ".join(f["message"] for f in second["findings"])
    assert "the guard could not check the server host before this level (cannot reach" in said, said
    lines = " ".join(shown.split())
    assert f"[1] no power figure: cannot reach the agent at {url}" in lines and "[2] no power" not in lines, lines
    # show --guard printed the client's snapshot alone, titled as the level's: a host found dirty read "clean"
    assert main(["show", doc["run_id"], "--guard", "--db", str(db)]) == 0
    titles = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("level ")]
    assert [t.split(": ")[0] for t in titles] == [
        "level 1/2 (concurrency 2), this machine (the client)", "level 1/2 (concurrency 2), the server host",
        "level 2/2 (concurrency 1), this machine (the client)", "level 2/2 (concurrency 1), the server host"], titles
    # the host nobody could check is no dirty host: its level is flagged host_unchecked, not dirty_bench
    assert titles[3].endswith("the server host: UNCHECKED (its agent did not answer)"), titles


def test_a_wrong_token_is_one_line_before_anything_runs(emitter: BackgroundEmitter, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with agent() as (url, _):
        code, _doc = sweep(emitter, tmp_path, "--agent", url, "--agent-token", "wrong-token-0000")
    err = capsys.readouterr().err
    assert code != 0 and len(err.strip().splitlines()) == 1 and "token" in err.lower(), err
    assert "wrong-token-0000" not in err


def _plan(url: str | None, *argv: str) -> Any:
    p = argparse.ArgumentParser()
    p.add_argument("--url")
    from tokenbench.cli.grammar.power import add_power_options

    add_power_options(p)
    a = p.parse_args(["--url", url, *argv] if url else list(argv))
    return power_plan(a, list(argv))


def test_power_is_read_where_the_box_is() -> None:
    # a server elsewhere, no meter named: no figure (this machine's would be the client's)
    assert _plan("http://gpu-box.example:8000/v1").describe()["read"] == "none"
    # the server here (embedded, or a loopback URL): this machine's sources
    assert _plan(None).describe()["read"] == "this machine"
    assert _plan("http://127.0.0.1:8000/v1").describe()["read"] == "this machine"
    # a meter the user names, for a server anywhere
    assert _plan("http://gpu-box.example:8000/v1", "--power-cmd", "echo 300").describe()["read"] == "command"
    from tokenbench.errors import UsageError

    with pytest.raises(UsageError, match="--idle-power measures the box under test"):
        _plan("http://gpu-box.example:8000/v1", "--idle-power", "10s")


def test_a_levels_power_line_names_what_the_meter_measures_and_its_share_above_idle(
        emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A whole-box meter's figure was labelled "GPU power" in capacity's answer, and --idle-power's share above
    idle was in the JSON only. Each level's power line now names what its meter measures and that share."""
    emitter.configure(itl_s=0.01)
    with agent() as (url, _):
        code = main(["capacity", "--url", emitter.url, "--no-metrics", "--concurrency", "1:2", "--requests", "8",
                     "--input-len", "16", "--output-len", "24", "--slo", "ttft_p90=5s", "--agent", url,
                     "--agent-token", TOKEN, "--guard", "off", "--idle-power", "0.3s"])
    said = " ".join(capsys.readouterr().out.split())
    assert code == 0, said
    # the steady box draws 250 W idle or not: none of a level's watts are above idle
    assert "J/token" in said and "tok/s per W (whole box), 0% of it above the idle 250 W" in said, said
    assert "agents per kW (whole box power)" in said and "GPU power" not in said, said
