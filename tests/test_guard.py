"""The clean-bench guard against a fake /proc and /sys tree, and against real processes."""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import pytest

from tokenbench import guard
from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.store import Store


def fake_tree(root: Path, *, avail_kb: int = 20_000_000, hot_mc: int = 45000, governor: str = "performance",
              procs: dict[int, str] | None = None, busy_pct: float = 1.0, gpu_busy: int = 0) -> Path:
    (root / "proc").mkdir(parents=True)
    (root / "proc/meminfo").write_text(f"MemTotal: 32000000 kB\nMemFree: 1000 kB\nMemAvailable: {avail_kb} kB\n")
    (root / "proc/vmstat").write_text("pswpin 100\npswpout 50\n")
    total = 100_000
    busy = int(total * busy_pct / 100)
    (root / "proc/stat").write_text(f"cpu  {busy} 0 0 {total - busy} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")
    for pid, cmd in ({1: "/sbin/init"} | (procs or {})).items():
        d = root / f"proc/{pid}"
        d.mkdir()
        (d / "cmdline").write_bytes(cmd.replace(" ", "\0").encode() + b"\0")
        (d / "stat").write_text(f"{pid} (x) S 1 0 0\n")
    hw = root / "sys/class/hwmon/hwmon0"
    hw.mkdir(parents=True)
    (hw / "name").write_text("k10temp\n")
    (hw / "temp1_input").write_text(f"{hot_mc}\n")
    (hw / "fan1_input").write_text("1200\n")
    cpu = root / "sys/devices/system/cpu/cpu0/cpufreq"
    cpu.mkdir(parents=True)
    (cpu / "scaling_governor").write_text(governor + "\n")
    rapl = root / "sys/class/powercap/intel-rapl:0"
    rapl.mkdir(parents=True)
    (rapl / "constraint_0_power_limit_uw").write_text("120000000\n")
    card = root / "sys/class/drm/card0/device"
    card.mkdir(parents=True)
    (card / "gpu_busy_percent").write_text(f"{gpu_busy}\n")
    (card / "mem_info_vram_used").write_text("2000000000\n")
    return root


def run(root: Path, **kw: object) -> dict[str, guard.CheckResult]:
    env = guard.GuardEnv(root=root, config=guard.load_config(), sample_s=0.01, **kw)  # type: ignore[arg-type]
    return {r.name: r for r in guard.run_checks(env)}


def test_clean_fake_machine_every_check_reads(tmp_path: Path) -> None:
    r = run(fake_tree(tmp_path))
    assert {k: v.status for k, v in r.items()} == {
        "serving_processes": "pass", "free_memory": "pass", "swap_activity": "pass", "cpu_load": "pass",
        "gpu_nvml": "not available", "gpu_amd": "pass", "temperature": "pass", "fans": "pass",
        "cpu_governor": "pass", "power_cap": "pass",
    }
    assert r["free_memory"].observed == "20.5 GB free (62%)"
    assert r["temperature"].observed == "hottest k10temp/temp1 45 C (1 sensors)"
    assert r["fans"].observed == "k10temp/fan1 1200 rpm"
    assert r["power_cap"].observed == "intel-rapl:0 120 W"
    assert r["gpu_amd"].observed == "card0 0% busy, 2.0 GB VRAM used"


def test_dirty_fake_machine_each_failure_says_what_to_do(tmp_path: Path) -> None:
    r = run(fake_tree(tmp_path, avail_kb=500_000, hot_mc=97000, governor="powersave", busy_pct=60, gpu_busy=80,
                      procs={4242: "/opt/llama/llama-server -m x.gguf", 4343: "python -m vllm.entrypoints.openai.api_server",
                             4444: "/usr/bin/bash"}))
    assert r["serving_processes"].status == "fail"
    assert r["serving_processes"].observed == "llama.cpp server (pid 4242), vLLM (pid 4343)"
    # no server named as the one measured: either may be it, and the advice says how to name it
    assert "tokenbench guard --url URL" in r["serving_processes"].advice
    assert r["free_memory"].status == "fail" and r["temperature"].status == "fail"
    assert r["cpu_load"].status == "fail" and r["gpu_amd"].status == "fail"
    assert r["cpu_governor"].status == "warn"  # recorded, does not make the bench dirty by default
    assert "cpupower frequency-set -g performance" in r["cpu_governor"].advice
    assert all(v.advice for v in r.values() if v.status == "fail")


def test_the_target_and_its_children_are_not_counted(tmp_path: Path) -> None:
    root = fake_tree(tmp_path, procs={4242: "llama-server -m x.gguf", 4243: "llama-server --child"})
    (root / "proc/4243/stat").write_text("4243 (llama-server) S 4242 0 0\n")
    assert run(root, target_pids={4242})["serving_processes"].status == "pass"


def test_a_process_that_ends_while_the_guard_reads_is_skipped(tmp_path: Path) -> None:
    """A process can end between the listing of /proc and the read of its stat, which then fails (ESRCH, an
    OSError: here a stat that cannot be read as a file); a process name need not be UTF-8. Neither stops the
    guard, and the target's children are still found."""
    root = fake_tree(tmp_path, procs={4242: "llama-server -m x.gguf", 4243: "llama-server --child",
                                      4244: "sleep 1", 4245: "vllm serve m"})
    (root / "proc/4243/stat").write_bytes(b"4243 (llama-\xff) S 4242 0 0\n")
    (root / "proc/4244/stat").unlink()
    (root / "proc/4244/stat").mkdir()  # reading it fails as reading a vanished process's stat does
    r = run(root, target_pids={4242})["serving_processes"]
    assert r.status == "fail" and r.observed == "vLLM (pid 4245)", r.observed
    assert "--url" not in r.advice and r.advice.startswith("stop the other servers")  # the measured one is named


def test_missing_tree_is_not_available_never_pass(tmp_path: Path) -> None:
    r = run(tmp_path)
    assert all(v.status == "not available" for v in r.values()), {k: v.status for k, v in r.items()}


def test_thresholds_from_a_toml_file(tmp_path: Path) -> None:
    cfg = tmp_path / "guard.toml"
    cfg.write_text("[temperature]\nmax_c = 40.0\n[cpu_governor]\nseverity = 'fail'\nallowed = ['schedutil']\n")
    env = guard.GuardEnv(root=fake_tree(tmp_path / "t"), config=guard.load_config(cfg), sample_s=0.01)
    r = {x.name: x for x in guard.run_checks(env)}
    assert r["temperature"].status == "fail" and r["temperature"].threshold == "<= 40 C"
    assert r["cpu_governor"].status == "fail"


@pytest.mark.alone  # any server-like process of a test beside it is found too
def test_a_real_second_server_process_is_found() -> None:
    # a real process whose command line is a llama.cpp server's (bash's exec -a sets argv[0])
    p = subprocess.Popen(["bash", "-c", "exec -a llama-server sleep 30"])
    try:
        time.sleep(0.3)
        env = guard.GuardEnv(config=guard.load_config(), sample_s=0.05)
        r = {x.name: x for x in guard.run_checks(env)}
        assert r["serving_processes"].status == "fail" and f"pid {p.pid}" in r["serving_processes"].observed
        env.target_pids = {p.pid}
        assert guard.ServingProcesses().run(env).status == "pass"
    finally:
        p.kill()
        p.wait()


def test_guard_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = fake_tree(tmp_path / "c")
    assert main(["guard", "--root", str(clean), "--json", str(tmp_path / "g.json")]) == 0
    assert "clean: ready to measure" in capsys.readouterr().out
    assert json.loads((tmp_path / "g.json").read_text())["clean"] is True
    dirty = fake_tree(tmp_path / "d", procs={7: "ollama serve"})
    assert main(["guard", "--root", str(dirty)]) == 1
    out = capsys.readouterr().out
    assert "DIRTY" in out and "Ollama (pid 7)" in out
    # a --json it cannot write is bad input, said in one line before the checks: it ended in an internal error
    # (exit 70) after them
    assert main(["guard", "--root", str(clean), "--json", str(tmp_path / "no" / "g.json")]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.strip().count("\n") == 0 and "the directory" in said.err, said
    # a --url that names no port names no server: the checks ran without it, and the server measured, counted as
    # other work, read dirty (exit 1)
    for url, why in (("notaurl", "give the measured server's URL with its port"), ("", "with its port"),
                     ("ftp://x", "only http:// and https://")):
        assert main(["guard", "--root", str(clean), "--url", url]) == 2
        said = capsys.readouterr()
        assert said.out == "" and why in said.err and said.err.strip().count("\n") == 0, said


def test_guard_help_states_its_exit_codes() -> None:
    """A script reads guard's exit code; its --help said none of them but "exit 1 if not" in the command list."""
    from tokenbench.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["guard"].format_help().split())
    for said in ("Exit 0 when it is clean", "1 when it is dirty", "2 on bad arguments or input",
                 "130 when interrupted", "--json is written on 0 and 1"):
        assert said in text, text


def test_sweep_records_the_guard_before_each_level_and_strict_refuses(emitter: BackgroundEmitter, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "g.db"
    args = ["sweep", "--url", emitter.url, "--input-len", "8", "--output-len", "2", "--requests", "2",
            "--concurrency", "1,2", "--quiet", "--db", str(db)]
    assert main(args) == 0
    capsys.readouterr()
    (run_row,) = Store(db).runs()
    levels = Store(db).levels(run_row.id)
    assert all(s.guard and {c.name for c in s.guard.results} >= {"serving_processes", "cpu_load"} for *_, s in levels)
    # detached from pytest: the emitter runs in this process, which is the target, and the target's
    # children are rightly not counted against the bench
    out = subprocess.run(["bash", "-c", "(exec -a llama-server sleep 30) >/dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, check=True)
    pid = int(out.stdout.strip())
    try:
        time.sleep(0.3)
        assert main([*args, "--guard", "strict"]) == 6
        err = capsys.readouterr().err
        assert "the bench is dirty before the run: serving_processes: llama.cpp server" in err
        assert len(Store(db).runs()) == 1  # refused before anything was stored
        assert main([*args, "--guard", "warn"]) == 0
        assert "dirty_bench" in capsys.readouterr().out
    finally:
        import os
        import signal

        os.kill(pid, signal.SIGKILL)


@pytest.mark.engine
def test_a_real_llama_server_beside_the_target_is_found(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import need_engine
    from tokenbench.engines import launch, tiny

    need_engine("llama-server")
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))
    # a server of its own, not a shared one (conftest.py): the only serving process here, the one to be found
    with launch.start("llama-server", tiny.ensure()) as other:
        env = guard.GuardEnv(config=guard.load_config(), sample_s=0.05)
        r = guard.ServingProcesses().run(env)
        assert r.status == "fail" and f"llama.cpp server (pid {other.proc.pid})" in r.observed
        env.target_pids = {other.proc.pid}  # the server being measured is not counted against the bench
        assert guard.ServingProcesses().run(env).status == "pass"


@pytest.mark.alone  # the tests beside it are other work: 99% against 69% busy, where one core is 50 points
@pytest.mark.alone  # it reads the whole machine's CPU: a test busy beside it took the child's core from it
def test_the_measured_servers_own_children_are_not_other_work() -> None:
    # vLLM runs its engine and workers as child processes: their CPU is the target's, not another job's.
    import sys

    busy_child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])"
    parent = subprocess.Popen([sys.executable, "-c", busy_child])
    try:
        time.sleep(0.5)
        cfg = guard.load_config()
        env = guard.GuardEnv(config=cfg, sample_s=1.0)
        other = guard.CpuLoad(guard.Sampled(env)).run(env)
        env = guard.GuardEnv(config=cfg, sample_s=1.0, target_pids={parent.pid})
        target = guard.CpuLoad(guard.Sampled(env)).run(env)
        busy = [float(r.observed.split("%")[0]) for r in (other, target)]
        assert busy[0] - busy[1] > 30, (other.observed, target.observed)  # one core of two, minus noise
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


def test_strict_refuses_a_dirty_load_generating_node_as_it_refuses_the_driver(tmp_path: Path) -> None:
    """--workers on Ray: each node's snapshot comes back to the driver; strict used to only mark the level for a
    dirty node while refusing a dirty driver. Now the driver refuses the level, naming the node and the check."""
    from tokenbench.guard import refuse_dirty_nodes

    def snap(name: str, **kw: object) -> guard.GuardSnapshot:
        env = guard.GuardEnv(root=fake_tree(tmp_path / name, **kw), config=guard.load_config(),  # type: ignore[arg-type]
                             sample_s=0.01)
        s = guard.snapshot(env)
        s.put(node=f"{name} (0123abcd)")
        return s

    clean, dirty = snap("gen-a"), snap("gen-b", avail_kb=500_000)
    assert clean.clean and dirty.dirty
    refuse_dirty_nodes("warn", [clean, dirty], "before level concurrency 8")  # recorded: the level is marked
    refuse_dirty_nodes("off", [dirty], "before level concurrency 8")
    refuse_dirty_nodes("strict", [clean], "before level concurrency 8")
    with pytest.raises(guard.GuardFailed, match=r"dirty on load-generating node gen-b \(0123abcd\) before level "
                                                r"concurrency 8: free_memory: .*--guard warn"):
        refuse_dirty_nodes("strict", [clean, dirty], "before level concurrency 8")


@pytest.mark.parametrize(("toml", "said"), [
    ("[cpu_load]\nmax_percent = -5\n", "[cpu_load] max_percent is no setting of this check"),
    ('[cpu_load]\nseverity = "bogus"\n', 'give "fail" (the bench is dirty) or "warn"'),
    ("[cpu_load]\nmax_other_pct = -5\n", "max_other_pct = -5: give a number of 0 or more"),
    ('[cpu_load]\nmax_other_pct = "lots"\n', "give a number of 0 or more"),
    ("[nope]\nx = 1\n", "[nope] is no check of the guard's"),
    ("nope = 1\n", "nope = 1 is no check of the guard's"),  # a key, not a table: not said as "[nope]"
    ("cpu_load = 1\n", "cpu_load = 1 is a key, not a table: put its settings under a line [cpu_load]"),
])
def test_a_guard_config_with_what_the_guard_does_not_know_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, said: str) -> None:
    """An unknown key was ignored, severity "bogus" read as warn and a negative limit shown as "<= -5%": each is
    refused in one line naming it; a config the guard knows still runs."""
    from tokenbench.cli import main

    cfg = tmp_path / "g.toml"
    cfg.write_text(toml)
    assert main(["guard", "--guard-config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and said in err, err
    cfg.write_text('[cpu_load]\nseverity = "warn"\nmax_other_pct = 100\n')
    assert main(["guard", "--guard-config", str(cfg)]) in (0, 1)
