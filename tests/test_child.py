"""A server tokenbench starts ends when tokenbench is killed outright (kill -9, the OOM killer), instead of
living on in its own session holding its port, memory and cores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tokenbench.errors import EngineError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has ended; only its parent's wait is left
    except FileNotFoundError:
        return False


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _parent(tmp_path: Path, code: str) -> tuple[subprocess.Popen[str], int]:
    """A Python process that starts a child server with ``code`` and prints the child's pid."""
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip().isdigit(), line
    return parent, int(line)


def test_a_started_server_ends_when_tokenbench_is_killed(tmp_path: Path) -> None:
    """``engines serve``, a sweep's embedded engine and ``coldstart`` start their server through ``spawn``: in a
    session of its own (Ctrl-C at the terminal does not reach it), and SIGTERM to it when its parent dies."""
    parent, pid = _parent(tmp_path, "import subprocess, sys, time\n"
                                    "from tokenbench.engines.child import spawn\n"
                                    "p = spawn(['sleep', '60'], subprocess.DEVNULL)\n"
                                    "print(p.pid, flush=True); time.sleep(60)")
    try:
        assert _alive(pid) and os.getsid(pid) == pid  # a session of its own
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert _gone_within(pid, 10), "the server outlived the process that started it"
    finally:
        parent.kill()
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_plain_popen_would_have_left_it_running(tmp_path: Path) -> None:
    """The same child started as before (a session of its own, nothing more) outlives a killed parent: what the
    test above would read without the kernel's signal."""
    parent, pid = _parent(tmp_path, "import subprocess, time\n"
                                    "p = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
                                    "print(p.pid, flush=True); time.sleep(60)")
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert not _gone_within(pid, 1)
    finally:
        parent.kill()
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_while_an_engine_starts_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the embedded engine was still starting (vLLM compiling, a minute in) left it running on its
    own with parent 1: the wait for its health had no way out but success. It is stopped, and the interrupt goes
    on up to the command."""
    from tokenbench.engines import launch

    monkeypatch.setenv("TOKENBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(launch, "command", lambda *a, **k: launch.Launch(["sleep", "60"], "m"))
    started: list[int] = []
    real = launch.spawn

    def spawn(*a: object, **k: object) -> subprocess.Popen[bytes]:
        p = real(*a, **k)  # type: ignore[arg-type]
        started.append(p.pid)
        return p

    calls = iter([False, False])
    monkeypatch.setattr(launch, "spawn", spawn)
    monkeypatch.setattr(launch, "http_ok", lambda url: next(calls, None) or (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        launch.start("transformers", object(), timeout_s=30)  # type: ignore[arg-type]
    (pid,) = started
    assert not _alive(pid), "the engine outlived the interrupted start"


@pytest.mark.parametrize("engine, module, extra", [("llama-cpp-python", "llama_cpp", "llama-cpp-python"),
                                                   ("transformers", "transformers", "engine")])
def test_an_engine_whose_package_is_missing_is_refused_with_its_install(engine: str, module: str, extra: str,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--engine llama-cpp-python without its package started the server anyway, which died at its import: "exited
    with code 1 while starting", a ModuleNotFoundError in its log, and no word of how to install it."""
    import importlib.util

    from tokenbench.engines import launch
    from tokenbench.errors import EngineError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a))
    monkeypatch.setattr(launch, "spawn", lambda *a, **k: pytest.fail("started an engine that cannot import"))
    with pytest.raises(EngineError, match=rf"needs the '{extra}' extra: pip install -e '\.\[{extra}\]'"):
        launch.start(engine, object(), timeout_s=30)  # type: ignore[arg-type]


def test_engines_serve_gives_vllm_its_kv_pool(model_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """capacity.md's vLLM cache cliff needs a small KV pool, which `engines serve vllm` could not ask for: its
    --kv-blocks N reaches vLLM as --num-gpu-blocks-override N. (That vLLM serves the pool it is given, 32 blocks
    of 128 tokens as its /metrics said, and a cache-cliff search on it kept 5 sessions warm, was run by hand; a
    real start here would be one more vLLM start in the suite.) Where the command stops, the start is refused."""
    from tokenbench.cli import main
    from tokenbench.engines import launch

    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))
    given: list[tuple[str, ...]] = []

    def start(engine: str, model: object, **kw: Any) -> None:
        given.append(tuple(kw["extra"]))
        raise EngineError("stopped here: the command line is what this test reads")

    monkeypatch.setattr(launch, "start", start)
    assert main(["engines", "serve", "vllm", "--kv-blocks", "32", "--port", "0"]) != 0
    assert main(["engines", "serve", "llama-server", "--cache-ram", "0", "--port", "0"]) != 0
    assert given == [("--num-gpu-blocks-override", "32"), ("--cache-ram", "0")], given
    assert "stopped here" in capsys.readouterr().err
