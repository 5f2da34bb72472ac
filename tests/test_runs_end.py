"""Every run ends in a final state, and no secret reaches a file, the database, a report or a message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tokenbench import redact
from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter, EmitterProcess
from tokenbench.store import Store


def _start_sweep(url: str, db: Path, out: Path, *extra: str, sigint: Any = signal.SIG_DFL) -> subprocess.Popen[bytes]:
    """The CLI as its own process. ``sigint``: its Ctrl-C disposition (a shell's background job inherits SIG_IGN)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tokenbench", "sweep", "--url", url, "--input-len", "8", "--output-len", "4",
         "--concurrency", "1,2", "--requests", "200", "--warmup", "0", "--db", str(db), "--quiet", "--json",
         str(out), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )


def _wait_served(root: str, n: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with urllib.request.urlopen(root + "/stats") as r:
            if len(json.load(r)["stamps"]) >= n:
                return
        time.sleep(0.1)
    raise AssertionError("the sweep never got going")


@pytest.mark.parametrize("sig, sigint", [(signal.SIGTERM, signal.SIG_DFL), (signal.SIGHUP, signal.SIG_DFL),
                                         (signal.SIGTERM, signal.SIG_IGN)])
def test_sigterm_and_sighup_end_a_run_as_ctrl_c_does(sig: signal.Signals, sigint: Any, tmp_path: Path) -> None:
    """What `timeout`, Docker and CI cancellation send: the run used to stay 'running' with nothing printed and
    no JSON. Now: exit 130, the run interrupted, the level in progress kept and marked, the JSON written; also
    in a script's background job, where Ctrl-C itself is ignored."""
    db, out = tmp_path / "r.db", tmp_path / "r.json"
    with EmitterProcess("--itl", "0.05") as em:
        cli = _start_sweep(em.url, db, out, sigint=sigint)
        _wait_served(em.root, 8)
        cli.send_signal(sig)
        _, err = cli.communicate(timeout=30)
    assert cli.returncode == 130, err.decode()
    assert b"interrupted" in err and b"Traceback" not in err
    (run,) = Store(db).runs()
    assert run.status == "interrupted"
    ((_, _, status, summary),) = Store(db).levels(run.id)
    assert status == "interrupted" and summary.completed > 5
    assert json.loads(out.read_text())["status"] == "interrupted"


@pytest.mark.parametrize("apart_s", [0.002, 0.01])
def test_a_second_ctrl_c_while_the_run_stops_loses_nothing(apart_s: float, tmp_path: Path) -> None:
    """Ctrl-C twice, milliseconds apart, in a level: asyncio's handler raised the second as a KeyboardInterrupt
    wherever the run's wind-down was, and printed a traceback of the task it left; the run was stored but neither
    shown nor written (--json). The second is now said and held; the run is shown and written as after one."""
    db, out = tmp_path / "r.db", tmp_path / "r.json"
    with EmitterProcess("--itl", "0.05") as em:
        cli = subprocess.Popen(
            [sys.executable, "-m", "tokenbench", "sweep", "--url", em.url, "--input-len", "8", "--output-len", "4",
             "--concurrency", "1,2", "--requests", "200", "--warmup", "0", "--db", str(db), "--json", str(out),
             "--guard", "off"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        _wait_served(em.root, 8)
        cli.send_signal(signal.SIGINT)
        time.sleep(apart_s)
        cli.send_signal(signal.SIGINT)
        shown, err = (x.decode() for x in cli.communicate(timeout=30))
    # 130, or death by SIGINT where the second press came once the run was written, as the command exited (Python
    # ends on a KeyboardInterrupt nothing catches so): a shell reads both as 130
    assert cli.returncode in (130, -signal.SIGINT), err
    assert "Traceback" not in err and "unhandled exception" not in err, err
    assert json.loads(out.read_text())["status"] == "interrupted"
    (run,) = Store(db).runs()
    assert run.status == "interrupted" and f"run {run.id} (interrupted)" in " ".join(shown.split()), shown


def test_an_interrupt_after_the_run_ended_waits_for_its_json(tmp_path: Path) -> None:
    """Ctrl-C as the run's table was printed: the run was stored complete, and its JSON never written. One that
    comes once the run has ended is held while it is shown and written, then obeyed."""
    from tokenbench.cli import interrupts

    out = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt):
        with interrupts.held() as ctrl_c:
            assert ctrl_c.run(_returns(7)) == 7
            os.kill(os.getpid(), signal.SIGINT)  # delivered at the next bytecode: held
            out.write_text("written")
    assert out.read_text() == "written"
    with pytest.raises(KeyboardInterrupt), interrupts.held() as ctrl_c:  # the third press quits at once
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGINT)
        out.write_text("never")
    assert out.read_text() == "written"


async def _returns(value: int) -> int:
    return value


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_while_tokenbench_is_imported_ends_in_one_line(sig: signal.Signals) -> None:
    """Ctrl-C in a command's first few tenths of a second (Python reading tokenbench's modules, Rich's among
    them) printed a traceback, and SIGTERM then killed it (exit 143). Here the signal arrives as the command
    line's module is looked up, as it would mid-import. The command starts with Ctrl-C as a terminal gives it: a
    shell's background job (a CI script run with &) passes SIGINT on ignored, and Python then keeps ignoring it."""
    code = (f"import os, signal, sys\nsys.argv = ['tokenbench', 'runs']\nfrom tokenbench import entry\n"
            f"class Interrupting:\n    def find_spec(self, name, path=None, target=None):\n"
            f"        if name == 'tokenbench.cli':\n            os.kill(os.getpid(), {int(sig)})\n\n"
            f"sys.meta_path.insert(0, Interrupting())\nentry.run()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == 130 and done.stderr == "tokenbench: interrupted\n", done.stderr


def test_sigterm_while_prompts_are_built_ends_the_run_at_once(model_cache: Path, tmp_path: Path) -> None:
    """A local tokenizer builds a level's prompts without ever waiting, so the event loop never took the cancel
    SIGTERM asks for: `timeout` could not stop a sweep of 200,000 requests for the minutes its prompts took."""
    from tokenbench.engines import tiny

    tok = tiny.ensure(model_cache).hf_dir
    with EmitterProcess() as em:
        cli = subprocess.Popen([sys.executable, "-m", "tokenbench", "sweep", "--url", em.url, "--tokenizer", str(tok),
                                "--input-len", "64", "--output-len", "4", "--requests", "200000", "--warmup", "0",
                                "--db", str(tmp_path / "r.db"), "--guard", "off"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(4)  # past the start, into the prompts (about 90 s of them on 2 cores)
        cli.send_signal(signal.SIGTERM)
        try:
            _, err = cli.communicate(timeout=15)
        finally:
            cli.kill()
    assert cli.returncode == 130 and b"interrupted" in err and b"Traceback" not in err, err.decode()


def test_a_killed_run_reads_as_abandoned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kill -9 leaves no chance to close the run: its process mark says it is gone, so runs and show say
    'abandoned' instead of 'running' forever."""
    db, out = tmp_path / "r.db", tmp_path / "r.json"
    with EmitterProcess("--itl", "0.05") as em:
        cli = _start_sweep(em.url, db, out)
        _wait_served(em.root, 4)
        assert Store(db).runs()[0].status == "running"  # alive: still running
        cli.kill()
        cli.wait(timeout=10)
    (run,) = Store(db).runs()
    assert run.status == "abandoned" and "gone" in (run.error or "")
    assert main(["runs", "--db", str(db)]) == 0
    assert "abandoned" in capsys.readouterr().out


SECRET = "sk-tb-0123456789abcdef"


def _everything_written(tmp_path: Path, db: Path, out: str) -> str:
    """The database's bytes (and its WAL), every file under tmp_path, and what the CLI printed."""
    text = out
    for f in tmp_path.rglob("*"):
        if f.is_file():
            text += f.read_bytes().decode("utf-8", "replace")
    return text


def test_no_route_leaks_a_secret(emitter: BackgroundEmitter, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.db"
    common = ["--input-len", "8", "--output-len", "4", "--requests", "2", "--quiet", "--db", str(db)]
    # 1-2: the key as an option value, both spellings; 3: a secret-named field of --extra-body; 4: the environment
    assert main(["sweep", "--url", emitter.url, "--api-key", SECRET, *common, "--json", str(tmp_path / "a.json"),
                 "--extra-body", json.dumps({"api_key": SECRET, "top_k": 1})]) == 0
    assert main(["sweep", "--url", emitter.url, f"--api-key={SECRET}", *common,
                 "--json", str(tmp_path / "b.json")]) == 0
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert main(["sweep", "--url", emitter.url, *common, "--json", str(tmp_path / "c.json")]) == 0
    # the key reached the server each time: it is used, just never kept
    assert all(r.get("api_key", SECRET) == SECRET for r in emitter.emitter.requests_seen)
    assert main(["show", "--db", str(db), "--json", str(tmp_path / "show.json"),
                 Store(db).runs()[-1].id]) == 0
    # 5: an abbreviation, refused without echoing its value
    assert main(["sweep", "--url", emitter.url, "--api-ke", SECRET]) == 2
    # 6-7: a URL with userinfo, alone and with --api-key: refused, the credentials not repeated
    for extra in ([], ["--api-key", "x"]):
        assert main(["sweep", "--url", f"http://user:{SECRET}@127.0.0.1:9/v1", *extra, *common]) == 2
    captured = capsys.readouterr()
    leaked = _everything_written(tmp_path, db, captured.out + captured.err)
    at = leaked.find(SECRET)
    assert at < 0, leaked[max(0, at - 300):at + 50]
    assert "***" in json.loads((tmp_path / "a.json").read_text())["manifest"]["command"]


@pytest.mark.parametrize("argv, hidden", [
    (["tokenbench", "sweep", "--api-key", SECRET], "--api-key ***"),
    (["tokenbench", "sweep", f"--api-key={SECRET}"], "--api-key=***"),
    (["env", f"OPENAI_API_KEY={SECRET}", "vllm", "serve"], "OPENAI_API_KEY=***"),
    (["server", f"--hf-token={SECRET}"], "--hf-token=***"),
    (["curl", f"http://me:{SECRET}@host/v1"], "http://***@host/v1"),
    (["tokenbench", "coldstart", "--cmd", f"env HF_TOKEN={SECRET} llama-server --api-key {SECRET}"], "HF_TOKEN=***"),
    (["tokenbench", "sweep", '--extra-body={"api_key": "' + SECRET + '", "top_k": 1}'], '"api_key": "***"'),
    (["tokenbench", "sweep", "--extra-body", '{"accessToken": "' + SECRET + '"}'], '"accessToken": "***"'),
    (["curl", f"http://me:p@{SECRET}@host/v1"], "http://***@host/v1"),
    (["curl", f"http://host/v1?x=1&token={SECRET}"], "&token=***"),
])
def test_recorded_commands_hide_secrets(argv: list[str], hidden: str) -> None:
    line = redact.command(argv)
    assert SECRET not in line and hidden in line


def test_an_unknown_option_never_echoes_its_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", f"--api_key={SECRET}"]) == 2
    assert main(["runs", "--api-key", SECRET]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err and "--api_key=***" in err


def test_an_argument_error_shows_the_users_own_words(capsys: pytest.CaptureFixture[str]) -> None:
    """Only secrets are masked: "--concurrency *** --slo ***" hid the very words the user had to correct."""
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--concurrency", "8", "--slo", "tpot=50ms"]) == 2
    assert main(["runs", "--tokens", "200", "--api", "chat", "a.json", "--label=h100"]) == 2  # options of others
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("tokenbench: error: unrecognized arguments: --concurrency 8 --slo tpot=50ms;"), err
    assert "unrecognized arguments: --tokens 200 --api chat a.json --label=h100;" in err[1], err


@pytest.mark.parametrize("words, shown", [
    (["--api-key", SECRET], "--api-key ***"),  # `runs` has no --api-key: refused, as every spelling below
    ([f"--api-key={SECRET}"], "--api-key=***"),
    (["--api-ke", SECRET], "--api-ke ***"),  # an abbreviation, refused since abbreviations are off
    ([f"--api-ke={SECRET}"], "--api-ke=***"),
    (["--apikey", SECRET], "--apikey ***"),  # misspelt
    (["--hf-token", SECRET], "--hf-token ***"),
    (["--auth-token", SECRET], "--auth-token ***"),  # named like a secret
    (["--api-key", "-" + SECRET], "--api-key ***"),  # a value that starts with a dash
    ([f"OPENAI_API_KEY={SECRET}"], "OPENAI_API_KEY=***"),
    ([f"http://me:{SECRET}@host/v1"], "http://***@host/v1"),
    (["--extra-body", '{"api_key": "' + SECRET + '"}'], '--extra-body \'{"api_key": "***"}\''),
    ([SECRET], "unrecognized arguments: ***"),  # a bare word shaped like a key
])
def test_a_refused_secret_is_masked_and_the_words_around_it_shown(words: list[str], shown: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--limit", "8", *words, "--slo", "tpot=50ms"]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err and f"{shown} --slo tpot=50ms;" in err, err


@pytest.mark.parametrize("words, shown", [
    (["--agent-tok", "s3cr3tTOKENxyz123456"], "--agent-tok ***"),  # the host agent's token, abbreviated
    (["--agent-toke", "s3cr3tTOKENxyz123456"], "--agent-toke ***"),
    (["--agent-tokn=s3cr3tTOKENxyz123456"], "--agent-tokn=***"),  # misspelt
    (["--agenttoken", "s3cr3tTOKENxyz123456"], "--agenttoken ***"),
])
def test_a_misspelt_agent_token_is_masked(words: list[str], shown: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A token that is no key in shape (the agent's are the user's own words) showed in clear after a misspelt
    --agent-token: only options named like a secret, or close to one the tool knows, were masked."""
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", *words, "--requests", "2"]) == 2
    err = capsys.readouterr().err
    assert "s3cr3tTOKEN" not in err and f"{shown} " in err, err


def test_a_key_typed_for_a_command_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([SECRET, "--api-key", SECRET]) == 2
    err = capsys.readouterr().err
    assert SECRET not in err and "invalid choice: '***'" in err, err


def test_secret_named_body_fields_are_hidden_at_any_depth() -> None:
    body = {"api_key": SECRET, "top_k": 1, "nested": {"Authorization": SECRET, "x": [{"token": SECRET}]},
            "max_tokens": 4}
    out = redact.body(body)
    assert SECRET not in json.dumps(out) and out["top_k"] == 1 and out["max_tokens"] == 4


def test_a_crash_closes_the_run_and_prints_one_line(emitter: BackgroundEmitter, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug mid-sweep used to leave the run 'running' behind a traceback. Now the run is closed, failed, and the
    CLI says so in one line with exit 70."""
    from tokenbench import sweep

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("an unforeseen bug")

    monkeypatch.setattr(sweep, "peak_in_flight", boom)  # called after the first level with concurrency > 1
    db = tmp_path / "r.db"
    code = main(["sweep", "--url", emitter.url, "--concurrency", "2", "--requests", "4", "--input-len", "8",
                 "--output-len", "4", "--quiet", "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 70 and "internal error: RuntimeError: an unforeseen bug" in err and "Traceback" not in err
    (run,) = Store(db).runs()
    assert run.status == "failed" and "crashed" in (run.error or "")


def test_exit_codes_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for code in ("0 ", "2 ", "3 ", "5 ", "70 ", "130 "):
        assert f"\n  {code}" in out


def test_fit_s_help_says_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """fit answers in its exit code (0 fits, 1 does not, a hybrid split included), as the top-level help and the
    README say; its own --help said neither."""
    assert main(["fit", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Exit 0 when it fits, 1 when it does not (a hybrid split included)" in out, out


def test_sigterm_ends_a_depth_run_in_one_line(tmp_path: Path) -> None:
    """depth closes its run on any exception; the CLI used to let the KeyboardInterrupt out as a traceback."""
    db = tmp_path / "r.db"
    with EmitterProcess("--itl", "0.05") as em:
        cli = subprocess.Popen([sys.executable, "-m", "tokenbench", "depth", "--url", em.url, "--depths", "0,64,128",
                                "--pp", "16", "--tg", "64", "--repetitions", "5", "--db", str(db)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _wait_served(em.root, 3)
        cli.send_signal(signal.SIGTERM)
        _, err = cli.communicate(timeout=30)
    assert cli.returncode == 130 and b"Traceback" not in err, err.decode()
    (run,) = Store(db).runs()
    assert run.status in ("interrupted", "partial", "failed") and run.status != "running"


def test_a_misspelt_option_is_answered_with_the_one_meant_and_its_commands_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--hardwre", "nvidia-a30", "--model", "llama-3.1-8b"]) == 2
    assert main(["predict", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--zzz"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("tokenbench: error: unrecognized arguments: --hardwre nvidia-a30 (did you mean --hardware?); "
                      "see tokenbench predict --help"), err
    assert err[1] == "tokenbench: error: unrecognized arguments: --zzz; see tokenbench predict --help", err


def test_a_misspelt_command_is_answered_with_the_one_meant_and_a_bare_call_with_the_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["swep", "--requests", "4"]) == 2
    assert capsys.readouterr().err == "tokenbench: error: unknown command 'swep' (did you mean 'sweep'?); see tokenbench --help\n"
    assert main(["xyzzy"]) == 2  # near no command: argparse's list of them
    assert "invalid choice: 'xyzzy' (choose from 'sweep'," in capsys.readouterr().err
    assert main([]) == 2
    out, err = capsys.readouterr()
    *help_lines, last = err.splitlines()
    assert out == "" and help_lines[0].startswith("usage: tokenbench") and any(ln.split()[:1] == ["compare"] for ln in help_lines)
    assert last == "tokenbench: error: the following arguments are required: COMMAND; see tokenbench --help"


def test_format_json_says_where_json_is(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "demo", "--format", "json"]) == 2
    assert "JSON is --json FILE (- for stdout); see tokenbench show --help" in capsys.readouterr().err


def _closed_reader() -> int:
    """A pipe whose reader has gone: every write to it fails with EPIPE, as `tokenbench … | head -1` does once
    head has its line."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("json_to", ["file", "stdout"])
def test_a_reader_that_goes_away_neither_fails_the_command_nor_cuts_the_run(json_to: str, emitter: BackgroundEmitter,
                                                                            tmp_path: Path) -> None:
    """Rich's own answer to a broken pipe was exit 1 from inside the print: `sweep … | head -1` exited 1 for a
    run that had completed, and `runs | head -1` failed. Now the command prints nothing more, goes on to its end
    (the run measured and stored whole), and exits with its own code."""
    db, out = tmp_path / "r.db", tmp_path / "r.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("COLUMNS", None)
    stdout = _closed_reader()
    try:
        sweep = subprocess.run(
            [sys.executable, "-m", "tokenbench", "sweep", "--url", emitter.url, "--input-len", "8", "--output-len",
             "4", "--concurrency", "1,2", "--requests", "6", "--guard", "off", "--db", str(db), "--json",
             "-" if json_to == "stdout" else str(out)],
            stdout=stdout, stderr=subprocess.PIPE, env=env, timeout=120)
        runs = subprocess.run([sys.executable, "-m", "tokenbench", "runs", "--db", str(db)], stdout=stdout,
                              stderr=subprocess.PIPE, env=env, timeout=60)
    finally:
        os.close(stdout)
    assert sweep.returncode == 0 and b"Error" not in sweep.stderr, sweep.stderr.decode()
    (run,) = Store(db).runs()
    assert run.status == "complete"
    assert [status for _, _, status, _ in Store(db).levels(run.id)] == ["complete", "complete"]
    if json_to == "file":
        assert len(json.loads(out.read_text())["levels"]) == 2
    assert (runs.returncode, runs.stderr) == (0, b"")


@pytest.mark.parametrize("key, said", [(None, "asks for an API key (HTTP 401): pass --api-key or set OPENAI_API_KEY"),
                                       ("wrong", "refused the API key given (HTTP 401): check --api-key or "
                                                 "OPENAI_API_KEY")])
def test_a_server_that_wants_a_key_says_whether_one_was_given(key: str | None, said: str) -> None:
    """A run with no key and one with a wrong key were both told the server "refused the API key": pass one."""
    import asyncio

    import aiohttp
    from aiohttp import web

    from tokenbench.errors import EndpointError
    from tokenbench.servers import discover

    async def go() -> str:
        app = web.Application()
        app.router.add_get("/v1/models", lambda _: web.json_response({"error": "Invalid API Key"}, status=401))
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            async with aiohttp.ClientSession() as http:
                with pytest.raises(EndpointError) as e:
                    await discover(http, f"http://127.0.0.1:{port}/v1", key)
            return str(e.value)
        finally:
            await runner.cleanup()

    assert said in asyncio.run(go())


def test_https_to_a_server_that_waits_hints_at_plain_http() -> None:
    """https:// to llama-server (plain HTTP) waits out the timeout: the TLS hello gets no answer. It was told only
    "did not answer within 10 s"."""
    import asyncio

    import aiohttp

    from tokenbench.errors import EndpointError
    from tokenbench.servers import discover

    async def go() -> str:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 16)  # as a plain-HTTP server waits for a request line after a TLS hello

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with aiohttp.ClientSession() as http:
                with pytest.raises(EndpointError) as e:
                    await discover(http, f"https://127.0.0.1:{port}/v1", None, timeout=0.5)
            return str(e.value)
        finally:
            server.close()

    said = asyncio.run(go())
    assert "did not answer within 0.5 s: check --url (if it serves plain HTTP: http://, not https://)" in said
