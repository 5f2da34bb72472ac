"""The command line, in-process through main(argv)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter

ROOT = Path(__file__).resolve().parents[1]

CONTRACT_LEVEL_KEYS = {
    "concurrency", "rate", "completed", "failed", "errors", "duration_s", "output_throughput_tps",
    "per_agent_tps", "request_throughput_rps", "input_tokens_mean", "output_tokens_mean",
    "output_tokens_source", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "ttfb_ms", "time_to_first_answer_ms",
    "flags", "cost_per_mtok",
}
DIST_KEYS = {"mean", "p50", "p90", "p95", "p99", "n"}

EXAMPLES = Path(__file__).parent.parent / "examples"


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--concurrency", "1,x"], "not a comma-separated list of integers"),
        (["--concurrency", "0"], "needs positive integers"),
        (["--rate", "1", "--concurrency", "2"], "not both"),
        (["--slo", "latency=1s"], "unknown SLO metric"),
        (["--extra-body", "{bad"], "--extra-body is not valid JSON"),
        (["--shape", "huge"], "unknown shape"),
        (["--duration", "soon"], "is not a duration"),
        (["--requests", "0"], "is not a positive whole number"),
        (["--label", " "], "a label needs at least one character that is not a space"),
        # an option of the other loop, or an entry left out, would change nothing: refused, not dropped
        (["--concurrency", "1,,2"], "has an empty entry"),
        (["--rate", "1,"], "has an empty entry"),
        # a level twice: its notes, labelled by the level's value, could not be told apart ("[2] ..." twice)
        (["--concurrency", "1,2,2"], "lists 2 more than once: give each value once"),
        (["--rate", "0.5,1,0.5"], "lists 0.5 more than once"),
        # vllm bench serve's default rate: what a migrating user types, answered with tokenbench's way to say it
        (["--rate", "inf"], "give --concurrency N --requests N"),
        (["--rate", "-1"], "needs positive numbers"),
        (["--concurrency", "2", "--arrival", "constant"], "--arrival shapes the open loop of --rate"),
        (["--concurrency", "2", "--max-concurrency", "1"], "drop --max-concurrency"),
        (["--rate", "2", "--phase", "staggered"], "which --rate does not send: drop --phase"),
        (["--trace", str(EXAMPLES / "mooncake-trace.jsonl"), "--trace-block", "64", "--phase", "staggered"],
         "which a trace workload does not"),
    ],
)
def test_bad_input_one_line_error_nonzero_exit(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["sweep", "--url", "http://127.0.0.1:9/v1", *argv], capsys)
    assert code != 0
    assert message in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tokenbench: error:")


def test_an_empty_label_to_save_a_prediction_under_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """predict --save '' stored nothing and said nothing."""
    code, _, err = run(["predict", "--hardware", "h100-sxm", "--model", "llama-3.1-8b", "--save", ""], capsys)
    assert code == 2 and "argument --save: a label needs at least one character" in err


@pytest.mark.parametrize("argv", [["--tpot", "fast"], ["--ttft-p99=-2s"], ["--tpot", "0ms"]])
def test_recommend_refuses_an_slo_that_is_no_latency(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """--tpot fast ended in an internal error (exit 70): the limit is read where the option is."""
    code, _, err = run(["recommend", "--model", "llama-3.1-8b", *argv], capsys)
    assert code == 2 and "is not a latency: write e.g. 2s" in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("tokenbench: error:")


def test_unreachable_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["sweep", "--url", "http://127.0.0.1:9/v1", "--quiet"], capsys)
    assert code == 3 and "cannot reach" in err and len(err.strip().splitlines()) == 1


def test_sweep_table_json_runs_show(emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emitter.configure(ttft_s=0.01, itl_s=0.001)
    out_json = tmp_path / "result.json"
    db = tmp_path / "results.db"
    code, out, err = run(
        ["sweep", "--url", emitter.url, "--input-len", "16", "--output-len", "8", "--concurrency", "1,2",
         "--requests", "4", "--json", str(out_json), "--db", str(db), "--label", "emit", "--quiet",
         "--price-per-hour", "1.79", "--currency", "EUR", "--api-key", "sk-very-secret"],
        capsys,
    )
    assert code == 0, err
    for col in ("Concurrency", "Aggregate output tok/s", "Per-agent tok/s", "Median TTFT", "P99 TTFT",
                "Median TPOT", "EUR/M output"):
        assert col in out
    assert "Concurrency 1: prefill" in out and "single-stream decode" in out
    doc = json.loads(out_json.read_text())
    assert doc["tool"] == "tokenbench" and doc["kind"] == "sweep" and doc["run_id"]
    for key in ("endpoint", "model", "engine", "engine_version", "label", "command", "started", "finished",
                "workload", "machine"):
        assert key in doc["manifest"]
    assert len(doc["levels"]) == 2
    for level in doc["levels"]:
        assert CONTRACT_LEVEL_KEYS <= set(level)
        assert DIST_KEYS <= set(level["ttft_ms"])
        assert level["completed"] == 4 and level["output_tokens_mean"] == 8
        sustained = (level["plateau"] or level)["output_throughput_tps"]  # the rate the table shows
        assert level["cost_per_mtok"] == pytest.approx(1.79 / (sustained * 3600) * 1e6)
    # The API key was sent but is in no result file or database.
    assert emitter.emitter.requests_seen
    assert b"sk-very-secret" not in out_json.read_bytes()
    assert all(b"sk-very-secret" not in p.read_bytes() for p in tmp_path.glob("results.db*"))
    assert "--api-key ***" in doc["manifest"]["command"]

    code, out, _ = run(["runs", "--db", str(db)], capsys)
    assert code == 0 and doc["run_id"] in out and "emit" in out
    code, out2, _ = run(["show", "emit", "--db", str(db), "--format", "markdown"], capsys)
    # the run's heading (model, engine, workload) above the table, as the table view has it, a paragraph apart
    head, blank, table = out2.splitlines()[:3]
    assert code == 0 and head.startswith("model emitter; engine vllm") and "16 in / 8 out tokens" in head
    assert blank == "" and table.startswith("| Concurrency |")
    code, _, err = run(["show", "nope", "--db", str(db)], capsys)
    assert code != 0 and "no run 'nope'" in err


def test_a_failed_slo_says_which_objective_and_a_bare_limit_says_it_judges_no_level(
        emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A per-request limit (tpot=...) counts toward goodput only: a level within every level objective passes
    whatever its TPOT, and the table says so under it (it read "SLO pass" at a median TPOT five times the limit,
    with nothing said). A level that fails names each objective it missed, its value against the limit."""
    emitter.configure(ttft_s=0.02, itl_s=0.002)
    code, out, err = run(["sweep", "--url", emitter.url, "--input-len", "16", "--output-len", "8", "--concurrency",
                          "1", "--requests", "6", "--slo", "ttft_p50=5ms,e2e_p99=10s,tpot=1ms", "--db",
                          str(tmp_path / "r.db"), "--guard", "off"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert "tpot<=1ms: a per-request limit, counted in goodput, never in the verdict; a percentile (e.g. " \
        "tpot_p90) holds the level to it" in text
    assert "[1] SLO FAIL: ttft_p50 " in text and "against <= 5 ms (6 of 6 over)" in text
    assert "e2e_p99" not in text.split("SLO FAIL:", 1)[1]  # a met objective is not named among the missed


def test_api_key_from_environment_is_not_stored(emitter: BackgroundEmitter, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-secret")
    db = tmp_path / "k.db"
    code, _, err = run(["sweep", "--url", emitter.url, "--input-len", "8", "--output-len", "2",
                        "--requests", "2", "--db", str(db), "--quiet"], capsys)
    assert code == 0, err
    assert all(b"sk-env-secret" not in p.read_bytes() for p in tmp_path.glob("k.db*"))


def test_failed_run_keeps_partial_json(emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emitter.configure(fault="truncate", truncate_to=4, fault_from=1)
    out_json = tmp_path / "r.json"
    code, out, err = run(["sweep", "--url", emitter.url, "--input-len", "32", "--output-len", "2",
                          "--requests", "2", "--json", str(out_json), "--quiet"], capsys)
    assert code == 5
    assert "truncates the prompt" in err
    doc = json.loads(out_json.read_text())
    assert doc["status"] == "failed" and doc["levels"][0]["status"] == "failed"
    assert "prompt_truncated" in doc["levels"][0]["flags"]


def test_extra_body_with_a_number_too_long_to_convert_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    """json.loads raises a plain ValueError (no .msg) for a 5,000-digit integer: that was a crash (exit 70)."""
    body = '{"seed": ' + "1" * 5000 + "}"
    code, _, err = run(["sweep", "--url", "http://127.0.0.1:9/v1", "--extra-body", body], capsys)
    assert code == 2 and "--extra-body is not valid JSON (Exceeds the limit" in err and len(err.splitlines()) == 1


def test_runs_given_twice_are_all_kept() -> None:
    """--price and --owned repeat, so a user repeats --runs too: the second took the first's place, and the runs it
    named were dropped without a word."""
    from tokenbench.cli.parser import build_parser

    p = build_parser()
    assert p.parse_args(["recommend", "--model", "x", "--runs", "a", "--runs", "b", "c"]).runs == ["a", "b", "c"]
    assert p.parse_args(["calibrate", "--runs", "a", "--runs", "b", "--out", "x.toml"]).runs == ["a", "b"]
    assert p.parse_args(["recommend", "--model", "x"]).runs == []


def test_runs_names_a_capacity_search_by_its_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A capacity search is stored as the sweep it ran: the list called it "sweep"."""
    from tokenbench.store import Store

    monkeypatch.setenv("COLUMNS", "120")
    store = Store(tmp_path / "r.db")
    store.save_run("run-cap", "sweep", "cap", {"label": "cap", "capacity": {"axis": "concurrency"}}, "measured", [],
                   "0", "2026", "2026")
    store.save_run("run-plain", "sweep", "plain", {"label": "plain"}, "measured", [], "0", "2026", "2026")
    assert main(["runs", "--db", str(tmp_path / "r.db")]) == 0
    rows = {ln.split()[0]: ln.split() for ln in capsys.readouterr().out.splitlines() if ln.split()[:1] and
            ln.split()[0].startswith("run-")}
    assert "capacity" in rows["run-cap"] and "sweep" not in rows["run-cap"] and "sweep" in rows["run-plain"], rows



#: What only running a command needs: the HTTP client and its aiohttp, Rich's console, the load generator, the
#: results and their store, the metrics parser, any array library.
RUN_ONLY = ("aiohttp", "rich.console", "tokenbench.client", "tokenbench.loadgen", "tokenbench.results",
            "tokenbench.store", "prometheus_client", "numpy", "scipy")


@pytest.mark.parametrize("argv", [
    ["--help"], ["sweep", "--help"], ["quality", "compare", "--help"], ["engines", "serve", "--help"],
    ["swep"], ["sweep", "--concurency", "4"], ["recommend", "--ttft-p99", "2"], ["--version"],
])
def test_help_and_a_bad_argument_import_only_the_grammar(argv: list[str]) -> None:
    """``--help`` and an argument error build the parser and stop: they import each command's grammar
    (``cli/grammar/``), never a command's own module nor what it runs with (which took half a second of a 2-core
    machine before the first line of help)."""
    code = ("import contextlib, io, sys\nfrom tokenbench.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    main(sys.argv[1:])\n"
            "print('\\n'.join(sorted(sys.modules)))")
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, check=True,
                          env=env)
    loaded = proc.stdout.split()
    heavy = [m for m in loaded if any(m == r or m.startswith(r + ".") for r in RUN_ONLY)]
    commands = [m for m in loaded
                if m.startswith("tokenbench.cli.") and m.split(".")[2] not in ("parser", "options", "grammar")]
    assert "tokenbench.cli.parser" in loaded and not heavy and not commands, f"{argv} imported {heavy + commands}"


#: What only a command that talks to a server needs: the HTTP client, its aiohttp, the load generator.
SEND_ONLY = ("aiohttp", "tokenbench.client", "tokenbench.loadgen", "tokenbench.servers", "tokenbench.sweep")


def test_the_commands_that_read_a_store_or_the_catalogs_import_no_http_client(tmp_path: Path) -> None:
    """A prediction saved, shown, compared and listed, the catalogs, fit and recommend talk to no server: they
    never import the HTTP client and the load generator (a third of such a command's start, where a run's
    result type once imported them)."""
    code = ("import contextlib, io, sys\nfrom tokenbench.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            "    code = main(sys.argv[1:])\n"
            "print(code, *sorted(sys.modules))")
    env = {**os.environ, "TOKENBENCH_DB": str(tmp_path / "r.db"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    predict = ["predict", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--concurrency", "1,4", "--save"]
    for argv in ([*predict, "p1"], [*predict, "p2"], ["show", "p1"], ["show", "p1", "--format", "markdown"],
                 ["compare", "p1", "p2"], ["runs"], ["hardware"], ["models"],
                 ["fit", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b"],
                 ["recommend", "--model", "llama-3.1-8b"]):
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60,
                              check=True, env=env)
        exit_code, *loaded = proc.stdout.split()
        heavy = sorted({r for m in loaded for r in SEND_ONLY if m == r or m.startswith(r + ".")})
        assert exit_code == "0" and not heavy, f"{argv}: exit {exit_code}, imported {heavy}"


def test_a_number_past_the_bound_is_told_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """--price-per-hour 1e12 was told "'1e12' is not a positive number": it is one; the bound is what refused it."""
    assert main(["cost", "x", "--price-per-hour", "1e12"]) == 2
    err = capsys.readouterr().err
    assert "'1e12' is more than tokenbench takes (2,147,483,648 at most)" in err and len(err.splitlines()) == 1


def test_a_sweeps_prices_under_a_cent_keep_what_tells_them_apart(emitter: BackgroundEmitter, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Two decimals wrote 0.011 and 0.0087 USD/M both as "0.01", and a column of one value is said once above the
    table: levels of different prices read as one. Under 1, a price keeps two significant digits, as cost's do."""
    from tokenbench.cells import money

    assert [money(v) for v in (0.011, 0.0087, 0.000062, 0.65, 12.345, 0.0)] == \
        ["0.011", "0.0087", "0.000062", "0.65", "12.35", "0.00"]
    out_json = tmp_path / "r.json"
    # tokens 20 ms apart: each level's rate is the emitter's timing (4 streams about 4x one), not what a process
    # shared with other tests' load computes (the default's fast tokens read 1 and 4 streams within 4% of each other)
    emitter.configure(itl_s=0.02)
    code, out, err = run(["sweep", "--url", emitter.url, "--input-len", "16", "--output-len", "8", "--concurrency",
                          "1,4", "--requests", "8", "--price-per-hour", "0.01", "--json", str(out_json), "--db",
                          str(tmp_path / "r.db"), "--quiet"], capsys)
    assert code == 0, err
    costs = [lv["cost_per_mtok"] for lv in json.loads(out_json.read_text())["levels"]]
    assert all(c < 0.1 for c in costs) and money(costs[0]) != money(costs[1]), costs
    assert all(money(c) in out for c in costs), out
