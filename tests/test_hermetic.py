"""The suite pins its own environment: no result depends on the caller's terminal, locale, zone, home or
``TOKENBENCH_*`` variables. With ``COLUMNS=80`` exported, as many shells and CI systems do, five CLI
tests used to fail: their tables were drawn at the caller's width instead of a pipe's 160 columns.

`make test` runs the whole suite under such an environment (``HOSTILE_ENV`` in the Makefile); the tests here
prove it in a minute, in a subprocess, for the tests that read the terminal."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import KEPT_VARIABLES

ROOT = Path(__file__).resolve().parents[1]

#: What a caller's shell may export: a narrow terminal, no colour and forced colour, an ASCII locale (Python's
#: UTF-8 mode off), a zone fourteen hours ahead, and tokenbench's own variables pointing nowhere (a database that
#: cannot be written, a catalog, model cache and tools that do not exist, the debug switch that turns exit 70
#: into a traceback). The Makefile's HOSTILE_ENV is the same.
HOSTILE = {
    "COLUMNS": "80", "LINES": "24", "TERM": "dumb", "NO_COLOR": "1", "FORCE_COLOR": "1", "LANG": "C",
    "LC_ALL": "C", "PYTHONUTF8": "0", "TZ": "Pacific/Kiritimati", "TOKENBENCH_DB": "/proc/tokenbench/results.db",
    "TOKENBENCH_CATALOG": "/proc/tokenbench/catalog.toml", "TOKENBENCH_CACHE": "/proc/tokenbench/cache",
    "TOKENBENCH_TOOLS": "/proc/tokenbench/tools", "TOKENBENCH_DEBUG": "1",
}

#: The tests that read the caller's terminal before the suite pinned it, and a few more that print tables.
CLI_TESTS = [
    "tests/test_cli.py::test_sweep_table_json_runs_show",
    "tests/test_compare_cost_report.py::test_recommend_ranks_by_cost_and_says_why_others_are_out",
    "tests/test_depth_telemetry_coldstart.py::test_sweep_samples_metrics_into_the_store",
    "tests/test_predict.py::test_cli_fit_predict_and_errors",
    "tests/test_quality_beside.py::test_compare_prints_the_quality_verdict_beside_the_speed",
    "tests/test_runs_end.py::test_a_crash_closes_the_run_and_prints_one_line",
    "tests/test_run_refs.py::test_runs_keeps_ids_whole_at_80_columns",
]


def _pytest(tests: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # this tree's sources first, whichever checkout the virtual environment was installed from
    path = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    # the caller's own pytest options (PYTEST_ADDOPTS: another -q hides the count this reads) are not the tests'
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, **env, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "base"), *tests],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize("width", ["80", "40"])
def test_the_cli_tests_pass_whatever_the_callers_environment(tmp_path: Path, width: str) -> None:
    home = tmp_path / "home"  # an empty home: no user config, data or cache dir of tokenbench's
    home.mkdir()
    proc = _pytest(CLI_TESTS, {**HOSTILE, "COLUMNS": width, "HOME": str(home), "TOKENBENCH_JUNK": "x"}, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"{len(CLI_TESTS)} passed" in proc.stdout


def test_the_suite_pins_its_environment() -> None:
    """What every test starts from (tests/conftest.py): a pipe's width, no colour switches, UTF-8, UTC, and no
    tokenbench variable but the suite's own knobs and those each test sets."""
    for var in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
                "PYTHONIOENCODING", "LC_ALL"):
        assert var not in os.environ, var
    assert os.environ["TERM"] == "dumb" and os.environ["LANG"] == "C.UTF-8" and os.environ["TZ"] == "UTC"
    assert not any(k.startswith("LC_") for k in os.environ)
    own = {k for k in os.environ if k.startswith("TOKENBENCH_")}
    assert own <= {*KEPT_VARIABLES, "TOKENBENCH_DB", "TOKENBENCH_TOOLS"}, own  # DB: the autouse fixture's


@pytest.mark.parametrize("encoding", [{"LC_ALL": "C", "PYTHONUTF8": "0"}, {"PYTHONIOENCODING": "ascii"}])
@pytest.mark.parametrize("args", [
    ["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3.6-27b", "--weights", "FP8", "--concurrency", "1,16"],
    ["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "16", "--ttft-p99", "2s", "--currency", "EUR"],
    ["hardware"],
    ["sweep", "--help"],
    ["recommend", "--model", "qwen3.6-35b-a3b", "--slo", "tpot=50ms"],
])
def test_an_ascii_terminal_gets_ascii_not_a_crash(tmp_path: Path, encoding: dict[str, str], args: list[str]) -> None:
    """An output that cannot encode "—", "±" or "≤" (a C locale with UTF-8 mode off, PYTHONIOENCODING=ascii)
    gets ASCII spellings of them; it used to end in a UnicodeEncodeError (exit 70, or a traceback from --help)."""
    env = {**os.environ, **encoding, "TOKENBENCH_DB": str(tmp_path / "r.db"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "tokenbench", *args], env=env, capture_output=True, timeout=120,
                          check=False)
    out, err = proc.stdout.decode("ascii"), proc.stderr.decode("ascii")  # raises on anything but ASCII
    assert proc.returncode == (2 if "--slo" in args else 0), err
    assert "Error" not in err and "Traceback" not in err and "\\u" not in out + err
    if args[0] == "predict":
        assert "+/-" in out  # "77.5 ±4%" as ASCII, not "77.5 ?4%"
        rows = [line for line in out.splitlines() if "|" in line or line.startswith("-")]
        # spelt before measured: every row's column breaks in one place (a row's last cell is not padded)
        breaks = {tuple(i for i, c in enumerate(r) if c == ("|" if "|" in r else "+")) for r in rows}
        assert len(rows) >= 4 and len(breaks) == 1, rows
        # no band cut short ("+/-5"); one held at the physical limit reads "+66/-62%" (its minus sign spelt "-")
        assert all(re.search(r"\d ms (\+/-\d+%|\+\d+/-\d+%)( \(wide\))?\|", r) for r in rows[2:]), rows
    if "--slo" in args:
        assert "unrecognized arguments: --slo tpot=50ms;" in err  # the user's words, in ASCII as typed


@pytest.mark.parametrize("capture", [["-s"], []])
def test_a_tests_own_prints_pass_under_an_ascii_locale_with_capture_off(tmp_path: Path, capture: list[str]) -> None:
    """``pytest -s``, or ``capsys.disabled()``, hands a test's prints to the process's stdout, ASCII under
    ``LC_ALL=C`` with Python's UTF-8 mode off: a table's rules printed there failed the test at the stream's next
    flush (14 engine tests did under -s, each after passing its own asserts). The suite's configuration
    (tests/conftest.py, loaded here as a plugin) lets such a print through, escaped."""
    (tmp_path / "test_prints.py").write_text(
        "def test_prints_a_rule(capsys):\n"
        "    with capsys.disabled():\n"
        "        print('━━ rule ━━', flush=True)\n")
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])
    env = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, **HOSTILE, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", *capture, "-p", "no:cacheprovider", "-p", "conftest",
                           "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "base"),
                           str(tmp_path / "test_prints.py")],
                          cwd=tmp_path, env=env, capture_output=True, timeout=120, check=False)
    out = proc.stdout.decode("ascii", "replace")
    assert proc.returncode == 0 and "1 passed" in out, (out + proc.stderr.decode("ascii", "replace"))[-3000:]
    assert "\\u2501\\u2501 rule" in out, out[-3000:]


def test_a_piped_run_writes_its_progress_at_the_tables_width(tmp_path: Path) -> None:
    """Piped into one log (2>&1), a sweep's tables kept 160 columns and its progress lines broke at 80, a level's
    figures running onto a second line: both now take the table's width where no terminal gives one."""
    from tokenbench.emitter import BackgroundEmitter

    env = {**os.environ, "TOKENBENCH_DB": str(tmp_path / "r.db"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    with BackgroundEmitter() as em:
        proc = subprocess.run([sys.executable, "-m", "tokenbench", "sweep", "--url", em.url, "--concurrency", "1",
                               "--requests", "4", "--input-len", "16", "--output-len", "8", "--guard", "off"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("concurrency 1: ") and " tok/s, " in ln]
    assert len(line) > 80 and line.endswith("elapsed)"), proc.stdout
