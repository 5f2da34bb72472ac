"""``tokenbench agent`` on the loopback, in this process and as a command: its guard, power and host answers read
through ``AgentClient`` as typed values; each way it fails (a wrong token, an agent not there, one too slow, an
answer not its own) one line; a source that stops mid-level leaves the other figures whole; and, with a real
llama-server beside it, the guard refusing a busy host and passing a quiet one."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tokenbench import guard
from tokenbench.guard_results import GuardSnapshot
from tokenbench.cli import main
from tokenbench.engines.launch import free_port
from tokenbench.hostagent.client import AgentClient, AgentError, agent_url
from tokenbench.hostagent.host import HostSnapshot
from tokenbench.hostagent.server import Agent, AgentConfig
from tokenbench.power.base import PowerSource, Scope
from tokenbench.power.sampler import LocalMeter
from tokenbench.power.command import CommandSource

TOKEN = "s3cret-agent-token"
T = TypeVar("T")


class Steady(PowerSource):
    """A 250 W box with an energy counter, on the real clock."""

    name = "steady"
    measures = Scope.WHOLE_BOX
    counter = True
    note = "a counter that grows 250 J a second"

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        return {"box": 250.0}, {"box": 250.0 * (time.monotonic() - self.t0)}, {}


def run_agent(body: Callable[[AgentClient, str], Awaitable[T]], sources: list[PowerSource] | None = None,
              cfg: AgentConfig | None = None, token: str = TOKEN, notes: tuple[str, ...] = ()) -> T:
    """Start the agent's app on a loopback port of this process, run ``body`` with a client, stop it all."""
    async def go() -> T:
        meter = LocalMeter(sources if sources is not None else [Steady()], interval_s=0.1, notes=notes).start()
        server = TestServer(Agent(cfg or AgentConfig(TOKEN, guard_sample_s=0.05), meter).app(), host="127.0.0.1")
        await server.start_server()
        url = f"http://127.0.0.1:{server.port}"
        try:
            async with AgentClient(url, token, timeout_s=10) as client:
                return await body(client, url)
        finally:
            await server.close()
            await meter.close()

    return asyncio.run(go())


def one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and text, text
    return text


# ---- the three answers ---------------------------------------------------------------------------------------------

def test_guard_over_the_agent_is_the_hosts_snapshot() -> None:
    snap = run_agent(lambda c, url: c.guard())
    assert isinstance(snap, GuardSnapshot) and isinstance(snap.clean, bool)
    assert {r.name for r in snap.results} == {"serving_processes", "free_memory", "swap_activity", "cpu_load",
                                              "gpu_nvml", "gpu_amd", "temperature", "fans", "cpu_governor",
                                              "power_cap"}
    assert all(isinstance(r, guard.CheckResult) for r in snap.results)


@pytest.mark.alone  # any server-like process of a test beside it is found too
def test_the_guard_does_not_count_the_servers_own_processes() -> None:
    # a process whose command line is a llama.cpp server's, on this host
    other = subprocess.Popen(["bash", "-c", "exec -a llama-server sleep 30"])
    try:
        time.sleep(0.3)

        async def both(c: AgentClient, url: str) -> GuardSnapshot:
            return await c.guard()

        dirty = run_agent(both)
        check = {r.name: r for r in dirty.results}["serving_processes"]
        assert check.status == "fail" and f"pid {other.pid}" in check.observed
        clean = run_agent(both, cfg=AgentConfig(TOKEN, pids={other.pid}, guard_sample_s=0.05))
        assert {r.name: r for r in clean.results}["serving_processes"].status == "pass"
    finally:
        other.kill()
        other.wait()


def test_power_mark_then_interval_from_the_hosts_clock() -> None:
    async def level(c: AgentClient, url: str) -> Any:
        now = await c.power()
        mark = await c.mark()
        await asyncio.sleep(1.0)
        return now, mark, await c.power(mark)

    now, mark, rep = run_agent(level)
    assert [s.name for s in now.sources] == ["steady"] and now.sources[0].counter
    assert now.latest[0].source == "steady" and now.latest[0].watts == {"box": 250.0}
    (iv,) = rep.intervals
    assert iv.source == "steady" and iv.method == "counter" and not iv.partial and iv.start == mark
    assert iv.mean_w == pytest.approx(250.0, rel=1e-3)
    assert iv.joules == pytest.approx(250.0 * iv.covered_s, rel=1e-3)
    assert iv.covered_s >= 0.9 and len(rep.readings) >= 5


def test_host_snapshot_names_the_host_and_its_sources() -> None:
    snap = run_agent(lambda c, url: c.host(), notes=("rapl: none here",))
    assert isinstance(snap, HostSnapshot) and snap.hostname == socket.gethostname()
    assert snap.cpu_count_logical == os.cpu_count() and snap.mem_total_gib and snap.tokenbench
    assert snap.power_sources == [Steady().info().to_dict()] and snap.power_notes == ["rapl: none here"]


def test_a_source_stopping_mid_level_is_one_line_and_the_others_are_kept(tmp_path: Path) -> None:
    meter_file = tmp_path / "watts"
    meter_file.write_text("180 W\n")

    async def level(c: AgentClient, url: str) -> Any:
        mark = await c.mark()
        await asyncio.sleep(0.6)
        meter_file.unlink()  # the user's meter goes away mid-level
        await asyncio.sleep(1.0)
        return await c.intervals(mark)

    steady, cmd = run_agent(level, sources=[Steady(), CommandSource(f"cat {meter_file}")])
    assert steady.source == "steady" and not steady.partial and steady.mean_w == pytest.approx(250.0, rel=1e-3)
    assert cmd.source == "command" and cmd.partial and cmd.mean_w == pytest.approx(180.0)
    assert "command: cat exited 1" in one_line(AssertionError(cmd.note)) and 0.3 < cmd.covered_s < 1.0


# ---- refusals ------------------------------------------------------------------------------------------------------

def test_a_wrong_token_is_the_clients_one_line_error() -> None:
    async def ask(c: AgentClient, url: str) -> None:
        await c.guard()

    with pytest.raises(AgentError) as e:
        run_agent(ask, token="not-the-token")
    assert "refused the token (wrong bearer token" in one_line(e.value) and "--agent-token" in str(e.value)
    assert "not-the-token" not in str(e.value)


def test_the_door_401_404_405_over_plain_http() -> None:
    async def raw(c: AgentClient, url: str) -> list[tuple[int, Any]]:
        out = []
        async with aiohttp.ClientSession() as s:
            for method, path, headers in (("GET", "/v1/power", {}), ("GET", "/v1/power", {"Authorization": "Basic x"}),
                                          ("GET", "/v1/nope", {"Authorization": f"Bearer {TOKEN}"}),
                                          ("GET", "/", {"Authorization": f"Bearer {TOKEN}"}),
                                          ("POST", "/v1/guard", {"Authorization": f"Bearer {TOKEN}"}),
                                          ("GET", "/v1/power?since=nan", {"Authorization": f"Bearer {TOKEN}"}),
                                          # marks it never answered: not yet come, and from before it started
                                          ("GET", "/v1/power?since=1e308", {"Authorization": f"Bearer {TOKEN}"}),
                                          ("GET", "/v1/power?since=-5", {"Authorization": f"Bearer {TOKEN}"}),
                                          # the scheme in any case (RFC 7235): the token was read as missing
                                          ("GET", "/v1/nope", {"Authorization": f"bearer {TOKEN}"})):
                async with s.request(method, url + path, headers=headers) as r:
                    out.append((r.status, (await r.json())["error"]))
        with pytest.raises(AgentError) as e:
            await c.get("/v1/nope")
        assert "HTTP 404: no such path /v1/nope" in one_line(e.value)
        return out

    answers = run_agent(raw)
    assert [s for s, _ in answers] == [401, 401, 404, 404, 405, 400, 400, 400, 404]
    assert all("give a mark this agent answered" in said for _, said in answers[5:8])
    assert answers[0][1].startswith("no bearer token") and "GET only" in answers[4][1]
    assert all("\n" not in said for _, said in answers)


def test_an_agent_not_there_is_one_line() -> None:
    async def go() -> None:
        async with AgentClient(f"http://127.0.0.1:{free_port()}", TOKEN, timeout_s=3) as c:
            await c.host()

    with pytest.raises(AgentError) as e:
        asyncio.run(go())
    assert one_line(e.value).startswith("cannot reach the agent at http://127.0.0.1:") and "--host" in str(e.value)


def _stub(handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
          call: Callable[[AgentClient], Awaitable[Any]], timeout_s: float = 5) -> None:
    async def go() -> None:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with AgentClient(f"http://127.0.0.1:{server.port}", TOKEN, timeout_s=timeout_s) as c:
                await call(c)
        finally:
            await server.close()

    asyncio.run(go())


def test_an_agent_too_slow_is_one_line() -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(3)
        return web.json_response({})

    with pytest.raises(AgentError) as e:
        _stub(slow, lambda c: c.power(), timeout_s=0.3)
    assert one_line(e.value).endswith("did not answer /v1/power within 0.3 s")


@pytest.mark.parametrize("body,said", [
    ("<html>a router's login page</html>", "something other than its JSON"),
    ('{"now": "yesterday"}', "shape this tokenbench does not read"),
    ('{"now": 1.0, "latest": [{"source": "x", "t": 1.0, "watts": {"a": "hot"}}]}', "watts is not an object of numbers"),
    ('[1, 2]', "something other than its JSON"),
])
def test_an_answer_not_the_agents_is_one_line(body: str, said: str) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(text=body, content_type="application/json")

    with pytest.raises(AgentError) as e:
        _stub(answer, lambda c: c.power())
    assert said in one_line(e.value)


def test_a_guard_answer_of_another_shape_is_one_line() -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"snapshot": {"clean": True, "checks": [{"name": 1}]}})

    with pytest.raises(AgentError) as e:
        _stub(answer, lambda c: c.guard())
    assert "checks of another shape" in one_line(e.value)


def test_agent_urls() -> None:
    assert agent_url("gpu-box:8765/") == "http://gpu-box:8765"
    for bad in ("ftp://gpu-box:8765", "http://gpu-box:99999", "http://"):
        with pytest.raises(AgentError):
            agent_url(bad)


@pytest.mark.parametrize("words, said", [
    # the agent's client refused the header beside URL credentials: "internal error: ValueError", exit 70
    (["--agent", "http://user:PASSWORDsecret99@127.0.0.1:18765", "--agent-token", "t" * 20],
     "--agent http://***@127.0.0.1:18765 carries credentials"),
    # an unset $AGENT_URL measured with no agent, unsaid
    (["--agent", "", "--agent-token", "t" * 20], "--agent is empty"),
    (["--agent-token-file", "agent.token"], "--agent-token-file is the token of --agent"),
    (["--power-cmd", ""], "--power-cmd is empty"),  # an unset variable read no meter, unsaid
    (["--power-url", " "], "--power-url is empty"),
])
def test_agent_options_that_cannot_be_used_are_refused_before_anything_runs(
        words: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["sweep"], ["capacity", "--slo", "ttft_p99=2s"]):
        assert main([*command, "--url", "http://127.0.0.1:9/v1", *words]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1 and "PASSWORDsecret99" not in err, err


# ---- the command ---------------------------------------------------------------------------------------------------

def test_agent_help_and_a_missing_token(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--token-file" in out and "--port-of-server" in out and "127.0.0.1" in out
    assert main(["agent"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("tokenbench: error: tokenbench agent needs a token") and "\n" not in err
    assert main(["agent", "--token", " "]) == 2
    assert "--token is empty" in capsys.readouterr().err
    assert main(["agent", "--token", "abc"]) == 2  # it was taken, for a service a network reaches
    assert "a token of 3 characters is guessed in moments; give one of 16 or more" in capsys.readouterr().err
    assert main(["agent", "--token", "a", "--token-file", "f"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["agent", "--token", "t" * 20, "--port-of-server", "0"]) == 2  # it named no server, unsaid
    assert "'0' names no server" in capsys.readouterr().err
    assert main(["agent", "--token", "t" * 20, "--power-cmd", ""]) == 2
    assert "--power-cmd is empty" in capsys.readouterr().err
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that was a process and is none now
    assert main(["agent", "--token", "t" * 20, "--pid", str(os.getpid()), "--pid", str(gone.pid)]) == 2
    err = capsys.readouterr().err
    assert f"--pid {gone.pid}: no such process on this host" in err and len(err.strip().splitlines()) == 1


def test_the_command_makes_a_token_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    """Also: --port 0 takes any free port, and the line that says where it serves names it (record and engines
    serve took 0; the agent refused it)."""
    token_file = tmp_path / "agent.token"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"), PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "tokenbench", "agent", "--port", "0", "--token-file",
                          str(token_file), "--power", "none", "--power-cmd", "echo 75 W"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = []
        assert p.stdout is not None
        while not any("serving" in line for line in lines):
            line = p.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
        token = token_file.read_text().strip()
        assert oct(token_file.stat().st_mode & 0o777) == "0o600" and token in "".join(lines)
        port = int(re.search(r"serving http://127\.0\.0\.1:(\d+) ", lines[-1])[1])  # type: ignore[index]
        assert port > 0

        async def ask() -> Any:
            async with AgentClient(f"127.0.0.1:{port}", token) as c:
                return await c.power()

        rep = asyncio.run(ask())
        assert [s.name for s in rep.sources] == ["command"] and rep.latest[0].watts == {"meter": 75.0}
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 0
        assert "stopped" in p.stdout.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ---- a real llama-server beside the agent --------------------------------------------------------------------------

BURN = "import time\nend = time.time() + 30\nwhile time.time() < end:\n    pass\n"


@pytest.mark.engine
def test_the_agents_guard_refuses_a_busy_host_beside_a_real_llama_server(model_cache: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import need_engine
    from tokenbench.engines import launch, tiny

    need_engine("llama-server")
    monkeypatch.setenv("TOKENBENCH_CACHE", str(model_cache))
    # One burner per core makes the whole host busy; the threshold sits between that and the background noise
    # of a shared test machine, and the quiet verdict gets a few tries at it.
    cfg = guard.load_config()
    cfg.setdefault("cpu_load", {})["max_other_pct"] = 60.0
    # a server of its own, not a shared one (conftest.py): the host is quiet only with no other serving process
    with launch.start("llama-server", tiny.ensure()) as server:
        port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
        agent_cfg = AgentConfig(TOKEN, server_port=port, guard_config=cfg, guard_sample_s=1.0)

        async def quiet(c: AgentClient, url: str) -> GuardSnapshot:
            for _ in range(5):
                snap = await c.guard()
                if not snap.dirty:
                    break
                await asyncio.sleep(2)
            return snap

        snap = run_agent(quiet, sources=[], cfg=agent_cfg)
        checks = {r.name: r for r in snap.results}
        assert not snap.dirty, [f"{r.name}: {r.observed}" for r in snap.failed]
        assert checks["serving_processes"].status == "pass"  # the llama-server measured is the target, not another
        burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(os.cpu_count() or 1)]
        try:
            time.sleep(0.5)
            busy = run_agent(lambda c, url: c.guard(), sources=[], cfg=agent_cfg)
        finally:
            for b in burners:
                b.kill()
                b.wait()
        assert busy.dirty and [r.name for r in busy.failed] == ["cpu_load"], busy.to_dict()
        with pytest.raises(guard.GuardFailed, match="the bench is dirty on the server host: cpu_load"):
            guard.refuse_if_dirty("strict", busy, "on the server host")


def test_a_runs_power_is_read_by_the_agent_or_by_this_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import argparse

    from tokenbench.cli.grammar.power import add_power_options
    from tokenbench.cli.power import idle_seconds, power_plan
    from tokenbench.errors import UsageError

    p = argparse.ArgumentParser()
    p.add_argument("--url")
    add_power_options(p)

    def plan(*argv: str) -> Any:
        return power_plan(p.parse_args(list(argv)), list(argv))

    monkeypatch.delenv("TOKENBENCH_AGENT_TOKEN", raising=False)
    with pytest.raises(UsageError, match="--agent needs the agent's token"):
        plan("--agent", "http://gpu-box:8765")
    for mine in (["--power-cmd", "echo 1"], ["--power", "rapl"], ["--power=auto"]):
        with pytest.raises(UsageError, match="give --power, --power-url or --power-cmd to `tokenbench agent` there"):
            plan("--agent", "gpu-box:8765", "--agent-token", "t", *mine)
    monkeypatch.setenv("TOKENBENCH_AGENT_TOKEN", "from-env")
    remote = plan("--agent", "gpu-box:8765")
    assert remote.agent == "gpu-box:8765" and remote.agent_token == "from-env" and remote.describe()["read"] == "agent"
    (tmp_path / "t").write_text("from-file\n")
    assert plan("--agent", "gpu-box", "--agent-token-file", str(tmp_path / "t")).agent_token == "from-file"
    local = plan("--power-cmd", "echo 90 W", "--idle-power", "30s")
    assert local.agent is None and local.cmd == "echo 90 W" and local.idle_s == 30.0
    assert idle_seconds(p.parse_args(["--idle-power", "30s"])) == 30.0
    with pytest.raises(UsageError, match="not a duration"):
        idle_seconds(p.parse_args(["--idle-power", "soon"]))


def test_a_run_through_an_agent_without_a_meter_says_the_agents_reasons() -> None:
    """The agent's host reads no power: each level's note gives the agent's own reasons, not advice to pass
    --agent, which the run did."""
    from tokenbench.emitter import BackgroundEmitter
    from tokenbench.kinds.lengths import LengthsKind
    from tokenbench.serverhost import PowerPlan
    from tokenbench.store import Store
    from tokenbench.sweep import SweepConfig, run_sweep

    with BackgroundEmitter() as em, tempfile.TemporaryDirectory() as d:
        async def body(_: AgentClient, url: str) -> Any:
            cfg = SweepConfig(url=em.url, workload=LengthsKind.fixed(8, 4), requests=4, guard="off",
                              power=PowerPlan(agent=url, agent_token=TOKEN))
            return await run_sweep(cfg, Store(Path(d) / "r.db"))

        res = run_agent(body, sources=[], notes=("no RAPL counters here",))
    (level,) = res.outcomes
    tele = level.summary.telemetry
    assert tele is not None and tele.gpu_power == "not available"
    assert tele.power_note == "the server host has no power source its agent reads (no RAPL counters here)"
    # said under the table once: a run given an agent for its power heard nothing of it where it had none
    from tokenbench.sweep_table import notes

    said = [n for n in notes([o.summary for o in res.outcomes] * 2) if "power" in n]
    assert said == ["no power figure: the server host has no power source its agent reads (no RAPL counters here)"]


def test_an_agents_idle_figure_is_not_said_to_be_missing() -> None:
    """--idle-power with an agent whose meter reads: the run said "no idle figure, as no meter reads the box under
    test", then priced its energy above the idle the agent had measured."""
    from tokenbench.emitter import BackgroundEmitter
    from tokenbench.kinds.lengths import LengthsKind
    from tokenbench.progress import QuietReporter
    from tokenbench.serverhost import PowerPlan
    from tokenbench.store import Store
    from tokenbench.sweep import SweepConfig, run_sweep

    class Warned(QuietReporter):
        def __init__(self) -> None:
            self.warned: list[str] = []

        def warn(self, text: str) -> None:
            self.warned.append(text)

    told = Warned()
    with BackgroundEmitter() as em, tempfile.TemporaryDirectory() as d:
        async def body(_: AgentClient, url: str) -> Any:
            cfg = SweepConfig(url=em.url, workload=LengthsKind.fixed(8, 4), requests=4, guard="off",
                              power=PowerPlan(agent=url, agent_token=TOKEN, idle_s=0.3))
            return await run_sweep(cfg, Store(Path(d) / "r.db"), told)

        res = run_agent(body)
    assert res.manifest.power and res.manifest.power.get("idle"), res.manifest.power
    assert not any("idle" in w for w in told.warned), told.warned


def test_a_refused_agent_leaves_no_connection_open() -> None:
    """An agent not there, a URL that is no agent, a name that resolves nowhere: one line, exit 3, and nothing
    after it (the agent's HTTP session was left open: "Unclosed client session" under it)."""
    script = """
import sys, tempfile
from tokenbench.emitter import BackgroundEmitter
from tokenbench.cli import main
with BackgroundEmitter() as em, tempfile.TemporaryDirectory() as d:
    for agent in ["http://127.0.0.1:9", "notaurl.invalid", em.url.rsplit("/v1", 1)[0]]:
        code = main(["sweep", "--url", em.url, "--requests", "2", "--quiet", "--db", d + "/r.db", "--agent", agent,
                     "--agent-token", "x"])
        print("exit", code, file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-X", "dev", "-c", script], capture_output=True, text=True, timeout=120)
    err = done.stderr
    assert err.count("exit 3") == 3 and err.count("tokenbench: error:") == 3, err
    assert "Unclosed" not in err and "Traceback" not in err, err


def test_idle_power_without_a_power_source_says_there_is_no_idle_figure(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tokenbench.emitter import BackgroundEmitter

    with BackgroundEmitter() as em:
        assert main(["sweep", "--url", em.url, "--requests", "2", "--quiet", "--db", str(tmp_path / "r.db"),
                     "--idle-power", "1s", "--power", "none"]) == 0
    said = " ".join(capsys.readouterr().err.split())
    assert "--idle-power: no idle figure, as no meter reads the box under test" in said


def test_an_agent_given_as_the_server_is_named_for_what_it_is() -> None:
    """--url at the agent's port: the agent refuses the run's key (401) as an OpenAI server would, and "pass
    --api-key" sent the user the wrong way."""
    from tokenbench.errors import EndpointError
    from tokenbench.servers import discover

    async def body(_: AgentClient, url: str) -> str:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(EndpointError) as e:
                await discover(http, url + "/v1")
        return one_line(e.value)

    said = run_agent(body)
    assert "is a tokenbench agent, not a model server: give the server's own URL as --url" in said
