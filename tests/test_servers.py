"""The engine tests' shared servers (servers.py): a server started ahead, beside a test that times nothing, is the
one a later test gets; a start that failed there fails the test that asks for it; and none outlives the session.
The servers here are plain processes (a ``sleep``) in place of an engine: what is checked is when each starts, is
handed out and is stopped, not what it serves."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import servers
from servers import Config, Servers
from tokenbench.engines.child import spawn
from tokenbench.engines.launch import EngineError, RunningEngine


class _Launches:
    """``launch.start`` as the shared servers call it: a process per start, in the order asked, each taking
    ``seconds``; a configuration in ``failing`` does not start."""

    def __init__(self, tmp_path: Path, seconds: float) -> None:
        self.tmp_path, self.seconds = tmp_path, seconds
        self.failing: tuple[Config, ...] = ()
        self.started: list[tuple[str, int, RunningEngine]] = []
        self.threads: list[str] = []

    def __call__(self, engine: str, model: Any, parallel: int = 1, ctx: int = 8192,
                 extra: tuple[str, ...] = ()) -> RunningEngine:
        self.threads.append(threading.current_thread().name)
        time.sleep(self.seconds)
        if Config(engine, "tiny", parallel, ctx, extra) in self.failing:
            raise EngineError(f"the {engine} engine exited with code 1 while starting")
        log = self.tmp_path / f"{len(self.started)}.log"
        with open(log, "wb") as out:
            proc = spawn(["sleep", "60"], out, None)
        running = RunningEngine(engine, "http://127.0.0.1:9/v1", "m", proc, log, self.seconds)
        self.started.append((engine, parallel, running))
        return running


class _Models:
    def model(self, size: str) -> str:
        return size


@pytest.fixture
def launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _Launches:
    made = _Launches(tmp_path, seconds=0.2)
    monkeypatch.setattr(servers.launch, "start", made)
    return made


VLLM, OTHER = Config("vllm", "tiny", parallel=4), Config("vllm", "tiny", parallel=8)


def test_a_server_started_ahead_is_the_one_a_later_test_gets(launches: _Launches) -> None:
    pool = Servers(_Models())  # type: ignore[arg-type]
    t0 = time.perf_counter()
    pool.prestart([VLLM, OTHER, VLLM])
    assert time.perf_counter() - t0 < launches.seconds  # the caller goes on at once
    first = pool.get(VLLM)
    assert pool.get(OTHER).server.proc.pid != first.server.proc.pid
    assert pool.get(VLLM) is first and [p for _, p, _ in launches.started] == [4, 8]  # each started once
    assert all(name.startswith("prestart") for name in launches.threads)
    pool.stop_all()
    assert all(r.proc.poll() is not None for _, _, r in launches.started)


def test_a_start_that_failed_ahead_fails_the_test_that_asks(launches: _Launches) -> None:
    launches.failing = (VLLM,)
    pool = Servers(_Models())  # type: ignore[arg-type]
    pool.prestart([VLLM, OTHER])
    with pytest.raises(EngineError, match="while starting"):
        pool.get(VLLM)
    assert pool.get(OTHER).server.alive()
    pool.stop_all()
    assert [r.proc.poll() is not None for _, _, r in launches.started] == [True]


def test_servers_started_ahead_and_never_asked_for_are_stopped(launches: _Launches) -> None:
    """The start under way when the session ends is waited for and stopped; the ones not begun never start."""
    launches.seconds = 1.0
    pool = Servers(_Models())  # type: ignore[arg-type]
    pool.prestart([VLLM, OTHER])
    time.sleep(0.3)  # the first start under way, the second queued
    pool.stop_all()
    assert [p for _, p, _ in launches.started] == [4]
    assert launches.started[0][2].proc.poll() is not None
    assert not pool.running and not pool.starting
    assert subprocess.run(["pgrep", "-f", "^sleep 60$", "-s", str(launches.started[0][2].proc.pid)],
                          capture_output=True, check=False).returncode == 1  # its session is gone too
