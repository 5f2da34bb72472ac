"""Depth refuses impossible numbers: an unstable spread, a tg faster than the server's own timings, and depths
that do not fit the server's context (run what fits, mark the rest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.depth import Step, summarize_depth
from tokenbench.emitter import BackgroundEmitter
from tokenbench.store import Store


def test_a_spread_over_half_the_mean_is_flagged_with_its_repetitions() -> None:
    # What the embedded engine published on a busy machine: 40,000 ± 56,000 tok/s.
    steps = [Step(None, 0.1, 64, tg_s, 31) for tg_s in (0.0005, 0.012, 0.011)]
    _, lt = summarize_depth(0, 64, 32, steps)
    assert "unstable" in lt.flags
    assert lt.client.tg_tps_reps == [62000.0, 2583.33, 2818.18]
    assert "not a measurement" in lt.warnings[0] and "62,000.0" in lt.warnings[0]
    steady = [Step(None, 0.1, 64, tg_s, 31) for tg_s in (0.010, 0.011, 0.012)]
    _, lt = summarize_depth(0, 64, 32, steady)
    assert "unstable" not in lt.flags


def test_a_tg_faster_than_the_server_timings_allow_is_not_published() -> None:
    # chunks held back and sent together: the client sees 31 tokens in 1 ms, the server took 100 ms for them
    steps = [Step(None, 0.1, 64, 0.001, 31, server_tg_tps=310.0) for _ in range(3)]
    _, lt = summarize_depth(0, 64, 32, steps)
    assert lt.tg_tps is None and "exceeds_server_timings" in lt.flags
    assert lt.client.tg_tps_client == pytest.approx(31000.0)
    ok = [Step(None, 0.1, 64, 0.1, 31, server_tg_tps=300.0) for _ in range(3)]
    _, lt = summarize_depth(0, 64, 32, ok)
    assert lt.tg_tps == pytest.approx(310.0) and "exceeds_server_timings" not in lt.flags


def test_depths_beyond_the_slot_context_are_skipped_and_marked(emitter: BackgroundEmitter, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    emitter.configure(slot_ctx=2048)  # looks like llama-server with -c 2048
    out = tmp_path / "d.json"
    code = main(["depth", "--url", emitter.url, "--depths", "0,1k,4k", "--pp", "64", "--tg", "8",
                 "--repetitions", "2", "--json", str(out), "--guard", "off", "--no-metrics"])
    printed, err = capsys.readouterr()
    assert code == 5 and "run partial: some depths do not fit" in err, err  # kept and shown; a script is told
    doc = json.loads(out.read_text())
    # its closing line as sweep's, the run's status in it ("(depth)" stood there, the kind the command says itself)
    assert printed.splitlines()[-1] == f"run {doc['run_id']} (partial) saved in {Store().path}"
    # a depth's fill is said before it runs (at 65K on a slow box it takes minutes), and not a skipped one's
    said = (printed + err).splitlines()
    assert "depth 1024: filling 1,024 tokens of context, then pp64 and tg8, 2 times" in said, said
    assert not [line for line in said if line.startswith("depth 4096: filling")]
    assert doc["status"] == "partial" and "context" in doc["error"]
    by = {(lv["test"], lv["depth"]): lv for lv in doc["levels"]}
    assert by[("pp64", 1024)]["pp_tps"] > 0 and by[("tg8", 1024)]["status"] == "complete"
    assert by[("pp64", 4096)]["status"] == "skipped" and "exceeds_context" in by[("tg8", 4096)]["flags"]
    assert by[("tg8", 4096)]["tg_tps"] is None
    assert doc["manifest"]["engine"] == "llama.cpp"
    assert Store().resolve(doc["run_id"]).status == "partial"


def test_depths_beyond_vllms_max_model_len_are_skipped_and_name_its_flag(emitter: BackgroundEmitter,
                                                                         tmp_path: Path) -> None:
    emitter.configure(max_model_len=2048)  # vLLM's /v1/models says it, and it refuses a longer request with a 400
    out = tmp_path / "d.json"
    code = main(["depth", "--url", emitter.url, "--depths", "0,4k", "--pp", "64", "--tg", "8", "--repetitions", "1",
                 "--json", str(out), "--guard", "off", "--no-metrics"])
    assert code == 5
    doc = json.loads(out.read_text())
    assert doc["manifest"]["engine"] == "vllm" and doc["manifest"]["server"]["slot_ctx"] == 2048
    by = {(lv["test"], lv["depth"]): lv for lv in doc["levels"]}
    assert by[("tg8", 0)]["status"] == "complete" and by[("pp64", 4096)]["status"] == "skipped"
    why = next(f for f in by[("pp64", 4096)]["findings"] if f["code"] == "exceeds_context")
    assert "the 2048 tokens of context the server gives a request" in why["message"], why
    assert "--max-model-len" in why["remedy"], why
    # nothing was sent at the depth that does not fit: every request fit the server's context
    assert all(len(b["prompt"].split()) + b["max_tokens"] <= 2048 for b in emitter.emitter.requests_seen
               if "prompt" in b)


def test_depth_guard_strict_refuses_before_anything_runs(emitter: BackgroundEmitter, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    strict = tmp_path / "g.toml"
    strict.write_text("[free_memory]\nseverity = \"fail\"\nmin_free_gb = 1e9\n")  # no machine passes this
    code = main(["depth", "--url", emitter.url, "--depths", "0", "--pp", "8", "--tg", "4", "--guard", "strict",
                 "--guard-config", str(strict), "--no-metrics"])
    assert code != 0
    assert "the bench is dirty before depth 0" in capsys.readouterr().err
    assert emitter.emitter.requests_seen == []  # not even the warm-up ran
    assert Store().runs() == []  # and no failed run was left behind


def test_depth_says_a_warning_every_row_shares_once(emitter: BackgroundEmitter, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A dirty bench before every level: depth over HTTP printed the guard's line once per row (four times at two
    depths), where show and the llama-bench path said it once, naming its rows."""
    dirty = tmp_path / "g.toml"
    # no machine passes this; a check of severity "warn" only warns (the bench stays clean), so it fails: --guard
    # warn then records it and goes on. It read "warn", and the test passed only where other work made the bench
    # dirty beside it
    dirty.write_text("[free_memory]\nseverity = \"fail\"\nmin_free_gb = 1e9\n")
    assert main(["depth", "--url", emitter.url, "--depths", "0", "--pp", "8", "--tg", "4", "--repetitions", "1",
                 "--guard", "warn", "--guard-config", str(dirty), "--no-metrics"]) == 0
    said = [ln for ln in " ".join(capsys.readouterr().out.split("\n")).split("[") if "the guard found" in ln]
    assert len(said) == 1 and said[0].startswith("pp8 @ d0, tg4 @ d0] the guard found the bench dirty"), said


def test_depth_through_llama_bench_takes_the_guard_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--llama-bench ran and published whatever the guard said; strict now refuses before llama-bench runs, and
    warn keeps the snapshot with each level, flagged dirty_bench."""
    import stat
    import sys

    ran = tmp_path / "ran"
    fake = tmp_path / "llama-bench"
    fake.write_text(f"#!{sys.executable}\nopen({str(ran)!r}, 'w').close()\n"
                    f"print(open({str(Path(__file__).parent / 'data' / 'llama_bench.json')!r}).read())\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    dirty = tmp_path / "g.toml"
    dirty.write_text("[free_memory]\nseverity = \"fail\"\nmin_free_gb = 1e9\n")  # no machine passes this
    base = ["depth", "--llama-bench", str(fake), "--model-file", "m.gguf", "--depths", "0", "--guard-config",
            str(dirty), "--db", str(tmp_path / "d.db")]
    assert main([*base, "--guard", "strict"]) == 6
    assert "the bench is dirty before llama-bench" in capsys.readouterr().err and not ran.exists()
    out = tmp_path / "d.json"
    assert main([*base, "--guard", "warn", "--json", str(out)]) == 0 and ran.exists()
    levels = json.loads(out.read_text())["levels"]
    assert levels and all("dirty_bench" in lv["flags"] and lv["guard"]["clean"] is False for lv in levels), levels
    # which checks failed, and the command that prints the snapshot (the rows were flagged with no word why)
    said = " ".join(capsys.readouterr().out.split())
    run_id = json.loads(out.read_text())["run_id"]
    assert "the guard found the bench dirty before this level (" in said and "free_memory" in said  # (a busy
    # machine fails cpu_load beside it)
    assert f"'tokenbench show {run_id} --guard' prints the snapshots" in said


def test_llama_options_are_spelled_for_each_tool() -> None:
    import argparse

    from tokenbench.cli.common import llama_options
    from tokenbench.engines import launch, tiny

    a = argparse.Namespace(threads=3, flash_attn="1", batch_size=None, ubatch_size=256, cache_type_k="q8_0",
                           cache_type_v=None, n_gpu_layers=None)
    assert llama_options(a) == ["-t", "3", "-fa", "1", "-ub", "256", "-ctk", "q8_0"]  # llama-bench: 0/1
    server = llama_options(a, server=True)
    assert server == ["-t", "3", "-fa", "on", "-ub", "256", "-ctk", "q8_0"]  # llama-server: on/off
    model = tiny.TinyModel(hf_dir=Path("hf"), gguf_path=Path("m.gguf"), eos_token_id=1)
    from tokenbench.engines import llamacpp_build

    if llamacpp_build.tool("llama-server") is None:
        return  # the command line needs the built binary's path
    argv = launch.command("llama-server", model, 8080, extra=tuple(server)).argv
    # given after tokenbench's own -t, so the user's value wins
    assert argv[-len(server):] == server and argv.index("-t") < len(argv) - len(server)


@pytest.mark.parametrize("args, says", [
    (["--depths", "0,0"], "--depths gives 0 twice: each depth once, and --repetitions for more passes"),
    (["--depths", " , "], "--depths is empty"),
    (["--llama-bench", "--depths", "0"], "--llama-bench runs llama-bench on this machine; --url measures a server"),
    (["-t", "4", "-fa", "1"], "-t, -fa: set on the server you started, not over HTTP"),
])
def test_depth_refuses_what_it_would_misread_or_ignore(args: list[str], says: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--depths 0,0 sent the same prompts twice: the second pass came from the prompt cache and published 135,804
    prompt tok/s; --llama-bench with --url ran llama-bench here, the llama options over HTTP were recorded and not
    applied, and an empty --depths took the defaults."""
    assert main(["depth", "--url", "http://127.0.0.1:9/v1", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_a_dirty_bench_flags_every_row_it_measured_over_http(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """--guard warn: the tg row of a dirty depth read clean (no flag) while its own guard snapshot said dirty, and
    show --guard called it DIRTY."""
    dirty = tmp_path / "g.toml"
    dirty.write_text("[free_memory]\nseverity = \"fail\"\nmin_free_gb = 1e9\n")  # no machine passes this
    out = tmp_path / "d.json"
    assert main(["depth", "--url", emitter.url, "--depths", "0", "--pp", "8", "--tg", "4", "--repetitions", "1",
                 "--guard", "warn", "--guard-config", str(dirty), "--no-metrics", "--json", str(out)]) == 0
    levels = json.loads(out.read_text())["levels"]
    assert [lv["test"] for lv in levels] == ["pp8", "tg4"]
    assert all("dirty_bench" in lv["flags"] and lv["guard"]["clean"] is False for lv in levels), levels


def test_a_llama_bench_that_crashes_is_an_engine_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama-bench killed by SIGSEGV (a quantized tiny model the build cannot run) was "exited with -11", exit 2:
    bad arguments, which it was not."""
    import stat

    fake = tmp_path / "llama-bench"
    fake.write_text("#!/bin/sh\necho 'load_tensors: loading model' >&2\nkill -SEGV $$\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    assert main(["depth", "--llama-bench", str(fake), "--model-file", "m.gguf", "--depths", "0", "--guard", "off",
                 "--db", str(tmp_path / "d.db")]) == 4
    err = capsys.readouterr().err
    assert "llama-bench crashed (SIGSEGV) on m.gguf: load_tensors: loading model" in err
