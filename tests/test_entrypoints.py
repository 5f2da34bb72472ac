"""Library entry points the CLI only parses for: llama-bench runs, speculative decoding, the embedded
engine's slot context."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from tokenbench.engines.embedded import slot_context
from tokenbench.engines import llamabench
from tokenbench.engines.llamabench import LlamaBenchConfig, run_llama_bench
from tokenbench.errors import UsageError
from tokenbench.reader import load_result
from tokenbench.store import Store

DATA = Path(__file__).parent / "data"


def test_llama_bench_runs_and_is_imported_with_its_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A llama-bench of the user's runs with the options given and no others, whatever the cores."""
    monkeypatch.setattr(llamabench, "llama_repack_crashes", lambda: True)
    exe = tmp_path / "llama-bench"
    exe.write_text(f"#!{sys.executable}\nimport sys\nprint(open({str(DATA / 'llama_bench.json')!r}).read())\n"
                   "open(sys.argv[0] + '.args', 'w').write(' '.join(sys.argv[1:]))\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    store = Store(tmp_path / "r.db")
    notes: list[str] = []
    cfg = LlamaBenchConfig(str(exe), str(model), [0, 4096], pp=64, tg=16, repetitions=2, options=["-fa", "1"])
    res = load_result(store, run_llama_bench(cfg, store, notes.append))
    assert res.kind == "bench" and res.outcomes and res.manifest.extra["llama_bench"]["options"] == ["-fa", "1"]
    args = (tmp_path / "llama-bench.args").read_text()
    assert args == f"-m {model} -p 64 -n 16 -d 0,4096 -r 2 -fa 1 -o json" and notes[0].startswith("running ")


@pytest.mark.parametrize(("amx", "options", "repack"), [
    (True, [], ["--repack", "0"]),  # the embedded build crashes repacking quantized weights into AMX tiles
    (False, [], []),
    (True, ["--repack", "1"], ["--repack", "1"]),  # as the user asked
])
def test_the_built_llama_bench_repacks_no_weights_where_it_crashes(monkeypatch: pytest.MonkeyPatch, amx: bool,
                                                                   options: list[str], repack: list[str]) -> None:
    monkeypatch.setattr(llamabench, "llama_repack_crashes", lambda: amx)
    cmd = llamabench.command(LlamaBenchConfig("built", "m.gguf", [0], options=options), "/tools/llama-bench", "m.gguf")
    assert [a for i, a in enumerate(cmd) if "--repack" in cmd[i - 1:i + 1]] == repack


def test_llama_bench_failure_is_one_line(tmp_path: Path) -> None:
    cfg = LlamaBenchConfig(str(tmp_path / "missing"), str(tmp_path / "m.gguf"), [0])
    with pytest.raises(UsageError, match="cannot run"):
        run_llama_bench(cfg, Store(tmp_path / "r.db"), lambda t: None)


def test_speculation_from_acceptance_or_its_length() -> None:
    from tokenbench.predict.calibration import Calibration
    from tokenbench.predict.setup import Setup
    from tokenbench.predict.runs import DEFAULT_DRAFT_COST, speculation
    from tokenbench.predict.specs import Catalog

    cat = Catalog.load()
    hw, model = next(iter(cat.hardware)), next(m for m, spec in cat.models.items() if not spec.mtp)
    s = Setup.make(cat, Calibration.packaged(), hw, model, "BF16", "AUTO", "vllm", check=False)
    a = speculation(s, 4, 0.8, None, None)
    assert a.draft_cost == DEFAULT_DRAFT_COST and a.tokens_per_pass == pytest.approx((1 - 0.8 ** 5) / 0.2)
    b = speculation(s, 4, None, a.tokens_per_pass, None)
    assert b.acceptance == pytest.approx(0.8) and b.speedup == pytest.approx(a.speedup)
    with pytest.raises(UsageError, match="one of"):
        speculation(s, 4, 0.8, 3.0, None)


def test_slot_context_rounds_up_to_a_kv_block() -> None:
    assert slot_context(128 + 64) == 2048  # never below the minimum
    assert slot_context(4096 + 512) == 4864  # 4672 with the template's margin, rounded up to 19 blocks
    assert slot_context(32768 + 64, margin=256) == 33280


def test_one_step_runner_for_builds_and_installs() -> None:
    """llamacpp_build._run and vllm_env._step were two copies of this."""
    from tokenbench.engines.steps import ninja_progress, pip_progress, run_step
    from tokenbench.errors import EngineError

    said: list[str] = []
    script = "print('[1/10] a'); print('[2/10] b'); print('[5/10] c'); print('Collecting x')"
    run_step([sys.executable, "-c", script], said.append, "never", ninja_progress("  build"))
    assert said == ["  build: 10% (1/10)", "  build: 20% (2/10)", "  build: 50% (5/10)"]
    assert pip_progress("Collecting torch==2\n") == "    Collecting torch==2" and pip_progress("x") is None
    with pytest.raises(EngineError, match=r"(?s)step failed \(exit 3\):\n.*line 2"):
        run_step([sys.executable, "-c", "print('line 1'); print('line 2'); raise SystemExit(3)"], said.append,
                 "step failed")


def test_run_log_closes_a_run_once_with_the_state_its_end_gives(tmp_path: Path) -> None:
    """One lifecycle for sweep, depth and quality: the run an exception ends is closed and named on it."""
    import asyncio

    from tokenbench.endpoint import RunLog
    from tokenbench.results import Manifest
    from tokenbench.errors import EndpointError

    store = Store(tmp_path / "r.db")
    cases = [(asyncio.CancelledError(), False, "interrupted", "interrupted (Ctrl-C, SIGTERM or SIGHUP)"),
             (EndpointError("the server went away"), True, "partial", "the server went away"),
             (ValueError("bug"), False, "failed", "crashed: ValueError: bug")]
    for i, (exc, done, status, error) in enumerate(cases):
        log = RunLog(store, f"run-{i}", "sweep", "box")
        log.create(Manifest(started="2026-01-01T00:00:00+00:00"))
        stop = log.abort(exc, done)
        row = store.resolve(f"run-{i}")
        assert (row.status, row.error) == (status, error)
        assert row.manifest["finished"] is not None
        # a user-facing error carries its run in typed attributes (no setattr); a bug, in a note on its
        # traceback; an interrupt is answered with a RunInterrupted carrying the run, raised in its place
        if isinstance(exc, EndpointError):
            assert stop is None and exc.run_id == f"run-{i}" and exc.result is not None
            assert (exc.result.run_id, exc.result.status) == (f"run-{i}", "partial")
        elif isinstance(exc, ValueError):
            assert stop is None and exc.__notes__ == [f"run run-{i} was closed as failed"]
        else:
            assert stop is not None and stop.run_id == f"run-{i}" and stop.exit_code == 130
            assert stop.result is not None and stop.result.status == "interrupted"
    never = RunLog(store, "never", "sweep", None)
    assert never.abort(KeyboardInterrupt(), False) is None  # not created: nothing to close, the interrupt stays
    early = EndpointError("refused before the run was stored")
    never.abort(early, False)
    assert early.run_id is None and len(store.runs()) == 3


def test_the_embedded_engine_points_each_run_config_at_itself(tmp_path: Path) -> None:
    """sweep, depth and quality each did this by hand; no engine is started here."""
    from types import SimpleNamespace

    from tokenbench.depth import DepthConfig
    from tokenbench.engines.embedded import Embedded, EmbeddedSpec
    from tokenbench.quality.runner import QualityConfig
    from tokenbench.sweep import SweepConfig

    running = SimpleNamespace(base_url="http://127.0.0.1:5/v1", model="tiny", startup_s=1.5, command=["srv"],
                              proc=SimpleNamespace(pid=4242))
    model = SimpleNamespace(hf_dir=tmp_path / "hf", name="tiny-llama")
    emb = Embedded(EmbeddedSpec("llama-server", quant="Q8_0"), running, model)  # type: ignore[arg-type]
    for cfg in (SweepConfig(url=""), DepthConfig(url="", depths=[0]), QualityConfig(url="", tasks=["niah"])):
        emb.configure(cfg)
        assert (cfg.url, cfg.model, cfg.tokenizer) == ("http://127.0.0.1:5/v1", "tiny", str(tmp_path / "hf"))
        assert cfg.embedded is not None and cfg.embedded["startup_s"] == 1.5 and cfg.embedded["quant"] == "Q8_0"
        assert getattr(cfg, "target_pids", {4242}) == {4242}
    given = SweepConfig(url="", tokenizer="/my/tokenizer.json")
    emb.configure(given)
    assert given.tokenizer == "/my/tokenizer.json"  # a tokenizer the user gave wins


def test_an_error_whose_run_cannot_be_read_back_goes_on_without_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The error that ends a run may be the store's own: reading the run back must not replace that error."""
    import sqlite3

    from tokenbench import endpoint
    from tokenbench.errors import EndpointError
    from tokenbench.results import Manifest

    def broken(*a: object, **kw: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    store = Store(tmp_path / "r.db")
    log = endpoint.RunLog(store, "run-x", "sweep", None)
    log.create(Manifest(started="2026-01-01T00:00:00+00:00"))
    monkeypatch.setattr(endpoint, "load_result", broken)
    err = EndpointError("the server went away")
    assert log.abort(err, True) is None
    assert err.run_id == "run-x" and err.result is None and store.resolve("run-x").status == "partial"
    stop = endpoint.RunLog(store, "run-y", "sweep", None)
    stop.create(Manifest(started="2026-01-01T00:00:00+00:00"))
    interrupted = stop.abort(KeyboardInterrupt(), False)
    assert interrupted is not None and interrupted.run_id == "run-y" and interrupted.result is None


def test_a_tools_own_environment_is_made_once_and_marked_with_its_version(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """vllm_env and aiperf_env are one ToolEnv each (aiperf_env had written vllm_env's handling again)."""
    from tokenbench.engines.toolenv import ToolEnv
    from tokenbench.errors import EngineError

    env = ToolEnv("Probe", "TOKENBENCH_PROBE_ENV", "probe-env", "nothing", "print('4.2')")
    monkeypatch.setenv("TOKENBENCH_PROBE_ENV", str(tmp_path / "empty"))
    with pytest.raises(EngineError, match="holds no Python environment"):
        env.make(lambda t: None, "tiny", lambda e, say: None)
    monkeypatch.setenv("TOKENBENCH_PROBE_ENV", str(tmp_path / "env"))
    installed: list[Path] = []
    said: list[str] = []
    (tmp_path / "env").mkdir()
    import venv
    venv.EnvBuilder(with_pip=False).create(tmp_path / "env")  # made beforehand: the variable points at a real one
    assert not env.ready() and env.version() is None
    assert env.make(said.append, "tiny", lambda e, say: installed.append(e.python())) == "4.2"
    assert env.ready() and env.version() == "4.2" and installed == [tmp_path / "env" / "bin" / "python"]
    assert said[-1] == "Probe 4.2 ready"
    broken = ToolEnv("Broken", "TOKENBENCH_PROBE_ENV", "probe-env", "nothing", "import no_such_module_here")
    with pytest.raises(EngineError, match="does not import nothing: ModuleNotFoundError"):
        broken.make(said.append, "tiny", lambda e, say: None)


def test_the_embedded_model_says_building_only_when_it_builds(tmp_path: Path,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    # Embedded.start says "building ..." only where tiny.is_built is False: a first run, or a build killed half way
    from tokenbench.engines import tiny

    assert not tiny.is_built(tmp_path)
    (tmp_path / tiny.BUILD_VERSION).mkdir()  # a build killed half way leaves no BUILD marker
    assert not tiny.is_built(tmp_path)
    model = tiny.ensure(tmp_path)
    assert tiny.is_built(tmp_path) and (model.hf_dir / "config.json").is_file()
    # transformers' "Writing model shards" bar, a carriage-return line, came out in make demo's piped output
    assert "model shards" not in capfd.readouterr().err


def test_a_quant_type_llama_quantize_refuses_is_the_users_word(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """--quant Q9 exited 4 (an engine that failed to build) with the tool's raw line; it is a usage error, and
    the types the tool knows are named from its own --help."""
    from tokenbench.engines import llamacpp_build
    from tokenbench.errors import EngineError

    exe = tmp_path / "llama-quantize"
    exe.write_text(f"#!{sys.executable}\nimport sys\n"
                   "if sys.argv[1] == '--help':\n"
                   "    print(' allowed quantization types\\n   2  or  Q4_0    :  4.34G\\n   7  or  Q8_0    :  7.96G')\n"
                   "    sys.exit(1)\n"
                   "if sys.argv[3] == 'BROKEN':\n"
                   "    sys.exit(3)\n"
                   "print(f\"main: invalid ftype '{sys.argv[3]}'\", file=sys.stderr)\n"
                   "sys.exit(1)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(llamacpp_build, "tool", lambda name: exe)
    src = tmp_path / "m.gguf"
    with pytest.raises(UsageError, match=r"^--quant Q9: llama-quantize knows no such type; it knows Q4_0, Q8_0$"):
        llamacpp_build.quantize(src, tmp_path / "q9.gguf", "Q9")
    with pytest.raises(EngineError, match="llama-quantize BROKEN failed: it printed nothing"):
        llamacpp_build.quantize(src, tmp_path / "b.gguf", "BROKEN")
