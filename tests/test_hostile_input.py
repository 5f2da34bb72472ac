"""A careless user and hostile names: bad arguments are one-line errors before any work, and no name breaks
output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench.errors import UsageError

from tokenbench.cli import main
from tokenbench.cli.common import seconds
from tokenbench.emitter import BackgroundEmitter
from tokenbench.layout import md_escape

DEAD = "http://127.0.0.1:9/v1"  # nothing listens: an argument error must come before any attempt to connect


@pytest.mark.parametrize("argv", [
    ["sweep", "--url", DEAD, "--input-len", "0"],
    ["sweep", "--url", DEAD, "--engine", "vllm"],  # the embedded engine's choice, which --url replaces: ignored
    ["depth", "--url", DEAD, "--model-size=small"],
    ["capacity", "--url", DEAD, "--slo", "ttft_p99=2s", "--quant", "Q8_0"],
    ["engines", "serve", "llama-server", "--ctx", "100000", "--port", "0"],  # past the embedded model's 8,192
    ["engines", "serve", "llama-server", "--ctx", "10", "--port", "0"],  # llama-server raises it to 256: said "10"
    ["depth", "--tg", "1"],  # refused before the embedded engine starts
    ["engines", "--port", "8090"],  # serve's options without serve: nothing would listen there
    ["engines", "build", "llama-server", "--cache-ram", "0"],
    ["engines", "serve", "vllm", "--kv-blocks", "8", "--port", "0"],  # 1,024 tokens: less than one --ctx (4,096)
    ["engines", "serve", "llama-server", "--kv-blocks", "32", "--port", "0"],  # vLLM's pool: llama-server has none
    ["engines", "build", "vllm", "--kv-blocks", "32"],
    ["calibrate", "--out", "/no-such-dir-tb/x.toml"],
    ["sweep", "--engine", "llama-server", "--model", "nosuch-model"],  # measured the embedded one under that name
    ["depth", "--model", "qwen3.6-27b"],  # refused before the fit's minute, not after it
    ["import", str(Path(__file__).parent / "data" / "llama_bench.json"), "--db", "/no-such-dir-tb/x.db"],  # a typo made a new database
    ["sweep", "--url", DEAD, "--output-len", "-4"],
    ["sweep", "--url", DEAD, "--warmup", "-1"],
    ["sweep", "--url", DEAD, "--temperature", "-1"],
    ["sweep", "--url", DEAD, "--price-per-hour", "-2"],
    ["sweep", "--url", DEAD, "--currency", "EURO"],
    ["sweep", "--url", DEAD, "--rate", "nan"],
    ["sweep", "--url", DEAD, "--duration", "inf"],
    ["sweep", "--url", "ftp://host/v1"],
    ["cost", "--tps", "-5", "--price-per-hour", "2"],
    ["fit", "--context", "-5"],
    ["predict", "--input-len", "-100"],
    ["fit", "--context", "infk"],
    ["depth", "--url", DEAD, "--depths", "0,nank"],
    ["depth", "--url", DEAD, "--depths", "9" * 400],
    ["runs", "--limit", "9223372036854775808"],
    ["sweep", "--url", "http://127.0.0.1:99999/v1"],
])
def test_bad_arguments_are_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error" in err and "Traceback" not in err
    assert "cannot reach" not in err  # refused before any work


def test_a_bare_duration_is_refused() -> None:
    """`--duration 60` measured 60 ms and `--timeout 600` meant 0.6 s; then a bare number was seconds here and
    milliseconds in an SLO. Every duration now takes its unit, and a bare one is refused in one line."""
    for text in ("60", "600"):
        with pytest.raises(UsageError, match=rf"--timeout '{text}' has no unit: write {text}ms or {text}s"):
            seconds(text, "--timeout")
        # each suggested in the units its values are likely in: a search's budget is not 30ms
        with pytest.raises(UsageError, match=rf"--budget '{text}' has no unit: write {text}m or {text}h"):
            seconds(text, "--budget", ("m", "h"))
    assert seconds("500ms", "--timeout") == 0.5 and seconds("2m", "--duration") == 120.0 and seconds("60s", "x") == 60


def test_an_output_file_that_cannot_be_written_is_refused_first(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--url", DEAD, "--json", str(tmp_path / "no" / "such" / "dir" / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "cannot reach" not in err
    assert main(["depth", "--url", DEAD, "--json", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("label", ["[/bold]", "[red]x[/]", "$x^$", "a\n# injected"])
def test_hostile_labels_break_no_output(label: str, emitter: BackgroundEmitter, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.db")
    assert main(["sweep", "--url", emitter.url, "--label", label, "--requests", "2", "--input-len", "8",
                 "--output-len", "4", "--quiet", "--db", db]) == 0, capsys.readouterr().err
    assert main(["runs", "--db", db]) == 0
    assert label.splitlines()[0] in capsys.readouterr().out  # shown as text, not read as a style
    assert main(["show", label, "--db", db, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "\n# injected" not in md
    pytest.importorskip("matplotlib")
    assert main(["report", label, "--db", db, "--html", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err


def test_md_escape_keeps_a_name_on_one_line() -> None:
    assert md_escape("a\n# b|c<d>") == "a # b\\|c&lt;d>"
    # what is no markup stays as written: a file read raw says "<=", not "&lt;="
    assert md_escape("TTFT p90 <= 5 s; a < b & c > d") == "TTFT p90 <= 5 s; a < b & c > d"
    assert md_escape("</table><!-- x --> &amp; &#60;") == "&lt;/table>&lt;!-- x --> &amp;amp; &amp;#60;"


def test_max_error_rate_json_is_valid(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main(["sweep", "--url", emitter.url, "--requests", "2", "--input-len", "8", "--output-len", "4",
                 "--quiet", "--db", str(tmp_path / "r.db"), "--json", str(out)]) == 0
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


def test_concurrency_beyond_the_open_file_limit_is_refused_with_advice(tmp_path: Path) -> None:
    """With 256 open files allowed (macOS's default; here the hard limit too), concurrency 512 crashed with
    'Too many open files'. Now: one line with the ulimit to set, before any request."""
    import resource
    import subprocess
    import sys

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    proc = subprocess.run([sys.executable, "-m", "tokenbench", "sweep", "--url", DEAD, "--concurrency", "512",
                           "--db", str(tmp_path / "r.db")], capture_output=True, text=True, preexec_fn=low,
                          timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "ulimit -n 576" in proc.stderr and "cannot reach" not in proc.stderr


def test_coldstart_refuses_a_port_already_taken(emitter: BackgroundEmitter, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """It used to time the server already there instead of the one it started."""
    assert main(["coldstart", "--url", emitter.url, "--cmd", "sleep 60", "--db", str(tmp_path / "r.db")]) == 2
    assert "already answers" in capsys.readouterr().err


def test_report_and_predict_outputs_and_inputs_are_checked_first(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """--html into a missing directory, --png onto an existing file, and a missing --calibration used to fail
    with a traceback, after the work."""
    db = tmp_path / "r.db"
    assert main(["import", str(Path(__file__).parent / "data" / "vllm_serve_result.json"), "--db", str(db)]) == 0
    capsys.readouterr()
    run = __import__("tokenbench.store", fromlist=["Store"]).Store(db).runs()[0].id
    assert main(["report", run, "--db", str(db), "--html", str(tmp_path / "no" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "a.png").write_text("x")
    assert main(["report", run, "--db", str(db), "--png", str(tmp_path / "a.png")]) == 2
    assert "is a file" in capsys.readouterr().err
    # a tree of missing folders is a typo: --png made it all, where --html refuses a missing directory
    assert main(["report", run, "--db", str(db), "--png", str(tmp_path / "no" / "such" / "pngs")]) == 2
    assert "the directory" in capsys.readouterr().err and not (tmp_path / "no").exists()
    # a parent that is a file, not a missing folder; a place the checks pass and the write cannot (procfs): one
    # line and exit 2, where the second was an internal error (exit 70)
    assert main(["report", run, "--db", str(db), "--png", "/dev/null/pngs"]) == 2
    assert "/dev/null is not a directory" in capsys.readouterr().err
    assert main(["report", run, "--db", str(db), "--png", "/proc/tokenbench-pngs"]) == 2
    assert "--png /proc/tokenbench-pngs: cannot write it (" in capsys.readouterr().err
    assert main(["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                 "--calibration", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert "--calibration" in err and "Traceback" not in err
    # predict's --json was written after the table was printed and the run saved: exit 70, the run stored anyway
    for out, said in [(tmp_path / "no" / "p.json", "does not exist; create it first"), (tmp_path, "is a directory")]:
        assert main(["predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--db", str(db), "--save",
                     "p", "--json", str(out)]) == 2
        printed = capsys.readouterr()
        assert said in printed.err and printed.out == "", printed
    assert [r.id for r in __import__("tokenbench.store", fromlist=["Store"]).Store(db).runs()] == [run]


def test_an_error_is_one_line_in_a_pipe_and_wrapped_between_words_on_a_terminal(tmp_path: Path) -> None:
    """Scripts grep the one line a pipe gets; a terminal cut a 300-character error mid-word, so there it is
    wrapped between words to the terminal's width (a real pseudo-terminal, 60 columns)."""
    import os
    import pty
    import subprocess
    import sys

    argv = [sys.executable, "-m", "tokenbench", "show", "x", "--db", str(tmp_path)]
    env = {**os.environ, "COLUMNS": "60", "LINES": "24"}
    piped = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert piped.returncode == 2 and len(piped.stderr.strip().splitlines()) == 1, piped.stderr
    said = piped.stderr.strip()
    assert len(said) > 60
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=follower, env=env)
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other side closed: everything was read
            break
        if not chunk:
            break
        out += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 2
    lines = out.decode().replace("\r\n", "\n").strip().splitlines()
    # a word longer than the width (a path) stands alone on its line, whole
    assert len(lines) > 1 and all(len(ln) <= 60 or " " not in ln.strip() for ln in lines), lines
    assert " ".join(ln.strip() for ln in lines) == said  # the same words, none cut


@pytest.mark.parametrize(("argv", "said"), [
    (["sweep", "--url", DEAD, "--duration", "-5s"], "--duration must be positive"),
    (["sweep", "--url", DEAD, "--duration", "-5"], "write 5s or 5m"),
    (["capacity", "--url", DEAD, "--slo", "ttft_p90=1s", "--budget", "30"], "--budget '30' has no unit: write 30m or 30h"),
    # 0s is no pause (documented), so a negative cap is not "must be positive"
    (["sweep", "--url", DEAD, "--trace", str(Path(__file__).resolve().parents[1] / "examples" / "trajectories"
                                              / "mlcommons-agentic.jsonl"), "--max-think", "-1s"],
     "--max-think '-1s' is negative"),
    (["capacity", "--url", DEAD, "--slo", "ttft_p90=1s", "--budget", "-30m"], "--budget"),
    (["sweep", "--url", DEAD, "--sessions", "2", "--think-time", "-2s"], "--think-time"),
])
def test_a_negative_value_with_its_unit_is_refused_by_what_the_option_takes(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    """argparse read "-5s" as an option and said only "expected one argument"; now the option's own check says
    what it takes."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and said in err and "expected one argument" not in err, err


def test_a_llama_bench_that_fails_silently_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    """It read "llama-bench exited with 1: " with nothing after the colon."""
    assert main(["depth", "--llama-bench", "/bin/false", "--model-file", "x.gguf", "--guard", "off"]) == 2
    assert capsys.readouterr().err.strip().endswith("tokenbench: error: llama-bench exited with 1: it printed nothing")


def test_engines_serve_says_what_parallel_means_to_each_engine() -> None:
    """engines serve transformers said "4 at a time", and a capacity search then ran 16 requests together on it:
    Transformers serve sizes its KV cache by --parallel and admits every request. Each engine's banner says what
    the number is to it."""
    from tokenbench.cli.engines import _at_once

    assert _at_once("llama-server", 4, 4096) == "4 at a time, 4,096 tokens each"
    assert _at_once("vllm", 8, 2048) == "8 at a time, 2,048 tokens each"
    assert "at a time" not in _at_once("transformers", 4, 4096) and "admits every request" in _at_once(
        "transformers", 4, 4096)
    assert _at_once("llama-cpp-python", 4, 4096).startswith("one request at a time")
