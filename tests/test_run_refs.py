"""Run references are unambiguous: a label several runs share is refused with the candidates (unless --latest),
and a run of the wrong kind is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.levels import DepthLevel, ServingLevel
from tokenbench.store import Store


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "r.db"
    store = Store(db)
    for i, kind in enumerate(("sweep", "sweep", "bench")):
        lv = DepthLevel(test="tg128", tg_tps=50.0) if kind == "bench" else ServingLevel(concurrency=1, given_decode_tps=50.0)
        store.save_run(f"run-{i}", kind, "box" if i < 2 else "mini", {"model": "m"}, "measured", [lv], "0",
                       f"2026-01-0{i + 1}T00:00:00", f"2026-01-0{i + 1}T00:01:00")
    return db


def test_a_shared_label_is_refused_with_its_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(_db(tmp_path))
    assert main(["show", "box", "--db", db]) == 2
    err = capsys.readouterr().err
    assert "label 'box' names 2 runs: run-1 (sweep" in err and "run-0 (sweep" in err and "--latest" in err
    assert main(["show", "box", "--db", db, "--latest"]) == 0
    assert "run run-1 " in capsys.readouterr().out  # the newest



def test_a_shared_label_names_each_runs_own_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A capacity search is stored as the sweep it ran: the candidates of a shared label read "capacity", as the
    runs list does, not "sweep"."""
    store = Store(tmp_path / "r.db")
    for i in range(2):
        store.save_run(f"cap-{i}", "sweep", "box", {"model": "m", "capacity": {"axis": "concurrency"}}, "measured",
                       [ServingLevel(concurrency=1)], "0", f"2026-01-0{i + 1}T00:00:00", f"2026-01-0{i + 1}T00:01:00")
    assert main(["show", "box", "--db", str(store.path)]) == 2
    err = capsys.readouterr().err
    assert "cap-1 (capacity, " in err and "cap-0 (capacity, " in err and "(sweep" not in err


def test_last_names_the_newest_run_of_the_kinds_a_command_takes(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """After a sweep a user asks for it again: "last" is the newest run, and for a command that takes some
    kinds only, the newest of those; a run labelled "last" keeps its label."""
    db = _db(tmp_path)
    store = Store(db)
    assert store.resolve("last").id == "run-2"  # the bench run, newest
    assert store.resolve("last", kinds=("sweep",)).id == "run-1"
    assert main(["show", "last", "--db", str(db)]) == 0 and "run run-2 " in capsys.readouterr().out
    store.save_run("run-9", "sweep", "last", {"model": "m"}, "measured", [ServingLevel(concurrency=1)], "0",
                   "2025-12-01T00:00:00", "2025-12-01T00:01:00")
    assert store.resolve("last").id == "run-9"
    empty = Store(tmp_path / "none.db")
    with pytest.raises(Exception, match="no run 'last'"):
        empty.resolve("last")

def test_a_run_of_the_wrong_kind_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """compare once picked a depth run beside a sweep and printed an empty table; it compares runs of any kind
    that share an operating point (or that each have a decode rate for the effective-serving line), and says why
    when they share nothing. recommend ranks load levels only."""
    db = str(_db(tmp_path))
    store = Store(db)
    store.save_run("run-3", "depth", "deep", {"model": "m"}, "measured",
                   [DepthLevel(concurrency=1, test="pp512", depth=4096, pp_tps=900.0)], "0",
                   "2026-01-04T00:00:00", "2026-01-04T00:01:00")
    assert main(["compare", "run-0", "deep", "--db", db]) == 2
    err = capsys.readouterr().err
    assert ("runs run-0 and run-3 share no operating point to compare: the first has concurrency 1; the second "
            "pp512 at depth 4096") in err and err.count("\n") == 1
    assert main(["compare", "run-0", "mini", "--db", db]) == 0  # no shared row; each has a decode rate
    out = capsys.readouterr().out
    assert "share no operating point" in out and "one sequential stream at 50.0 tok/s" in out and "Metric" not in out
    # a llama-bench run's decode rate prices as any rate does (a published.csv import is one: cost refused it)
    assert main(["cost", "mini", "--price-per-hour", "2", "--db", db, "--format", "markdown"]) == 0
    assert "| 50.0 | 11.11 |" in capsys.readouterr().out  # 2 / (50 x 3600 / 1e6)
    assert main(["recommend", "--model", "llama-3.1-8b", "--runs", "mini", "--ttft-p99", "2s", "--db", db]) == 2
    assert "run mini is a bench run: recommend takes sweep or predict runs" in capsys.readouterr().err


def test_every_option_has_help_and_says_its_default() -> None:
    import argparse

    from tokenbench.cli.parser import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in sub.choices.items():
        text = sp.format_help()
        for a in sp._actions:
            if a.option_strings and a.dest != "help" and a.help != argparse.SUPPRESS:
                assert a.help, f"{name} {a.option_strings[-1]} has no help"
                if a.default not in (None, False) and isinstance(a.default, (int, float, str)):
                    assert "default" in a.help or "default" in text, (name, a.option_strings)
    assert "(default: USD)" in sub.choices["sweep"].format_help()


def test_piped_progress_is_one_line_per_level_as_it_finishes(tmp_path: Path) -> None:
    """Piped into a file or a CI log, a sweep printed nothing until the end; now each level's line, with
    level k of N and the elapsed time, comes as the level finishes."""
    import subprocess
    import sys

    from tokenbench.emitter import EmitterProcess

    with EmitterProcess("--itl", "0.01") as em:
        proc = subprocess.Popen([sys.executable, "-m", "tokenbench", "sweep", "--url", em.url, "--concurrency", "1,2",
                                 "--requests", "4", "--input-len", "8", "--output-len", "4", "--db",
                                 str(tmp_path / "r.db")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        first = ""
        while "elapsed" not in first:  # the level's line, wrapped to 80 columns where piped
            line = proc.stderr.readline()
            assert line, "stderr ended without a level line"
            first = first + " " + line.strip() if "tok/s" in first or "tok/s" in line else ""
        rest, _ = proc.communicate(timeout=60)[1], None
    assert proc.returncode == 0
    assert "level 1/2 concurrency 1:" in first and "tok/s" in first and "s elapsed" in first
    assert "level 2/2 concurrency 2:" in rest


def test_a_stalled_level_in_a_log_says_how_far_it_is_while_it_waits(capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """Piped, a level whose server stalls said nothing until each request reached the stall limit (a minute
    each by default): every HEARTBEAT_S of a running level it says how many answered, and nothing once it ended."""
    from tokenbench.cli import main
    from tokenbench.cli.sweep import RichReporter
    from tokenbench.emitter import BackgroundEmitter, EmitterConfig

    monkeypatch.setattr(RichReporter, "HEARTBEAT_S", 0.5)
    with BackgroundEmitter(EmitterConfig(fault="stall", fault_from=4, fault_after=1)) as em:  # after the warm-up
        code = main(["sweep", "--url", em.url, "--concurrency", "1", "--requests", "3", "--input-len", "8",
                     "--output-len", "4", "--stall-timeout", "1600ms", "--max-error-rate", "1", "--db",
                     str(tmp_path / "r.db")])
    err = capsys.readouterr().err
    assert code == 0, err
    lines = err.splitlines()
    beats = [i for i, ln in enumerate(lines) if "answered after" in ln]
    assert beats and all(lines[i].startswith("concurrency 1: 2/3 answered after ") for i in beats), err
    ended = next(i for i, ln in enumerate(lines) if "tok/s" in ln)  # the level's own line: none after it
    assert max(beats) < ended, err


def test_the_live_bar_of_a_timed_level_counts_time_not_an_unknown_total() -> None:
    """With --duration the bar read '54/?'; now it fills with time and says how many requests finished."""
    import io

    from rich.console import Console

    from tokenbench.cli.sweep import RichReporter
    from tokenbench.records import RequestRecord

    buf = io.StringIO()
    rep = RichReporter(Console(file=buf, force_terminal=True, width=120), enabled=True)
    rep.level_start("concurrency 4", None, 30.0)
    for i in range(3):
        rep.request_done(RequestRecord(index=i, phase="measured"))
    assert rep.progress is not None
    task = rep.progress.tasks[0]
    assert task.total == 30.0 and 0 <= task.completed < 30 and task.fields["count"].startswith("3 requests, ")
    rep.close()
    rep.level_start("concurrency 8", 16, None)
    rep.request_done(RequestRecord(index=0, phase="measured"))
    assert rep.progress is not None
    assert rep.progress.tasks[-1].fields["count"] == "1/16" and rep.progress.tasks[-1].completed == 1
    rep.close()
    assert "/?" not in buf.getvalue() and "left" in buf.getvalue()


def test_runs_keeps_ids_whole_at_80_columns(tmp_path: Path) -> None:
    import subprocess
    import sys

    db = _db(tmp_path)
    Store(db).save_run("20261122-101010-abcd", "sweep", "a-rather-long-label-for-a-box", {"model": "org/a-long-model-name-8B"},
                       "measured", [], "0", "2026-01-09T00:00:00", "2026-01-09T00:00:00")
    out = subprocess.run([sys.executable, "-m", "tokenbench", "runs", "--db", str(db)], capture_output=True,
                         text=True, env={**__import__("os").environ, "COLUMNS": "80"}, check=True).stdout
    assert "20261122-101010-abcd" in out and "complete" in out


def test_json_to_stdout_leaves_stdout_pure_json(tmp_path: Path) -> None:
    """`--json -`: the JSON alone on stdout, for a pipe into jq; the table goes to stderr."""
    import json
    import subprocess
    import sys

    from tokenbench.emitter import EmitterProcess

    db = str(tmp_path / "r.db")
    with EmitterProcess() as em:
        out = subprocess.run([sys.executable, "-m", "tokenbench", "sweep", "--url", em.url, "--requests", "2",
                              "--input-len", "8", "--output-len", "4", "--quiet", "--db", db, "--json", "-"],
                             capture_output=True, text=True, timeout=120, check=True)
    doc = json.loads(out.stdout)
    assert doc["levels"][0]["completed"] == 2 and "Concurrency" in out.stderr
    shown = subprocess.run([sys.executable, "-m", "tokenbench", "show", doc["run_id"], "--db", db, "--json", "-"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(shown.stdout)["run_id"] == doc["run_id"]


def test_a_sweep_table_at_80_columns_cuts_no_number_and_no_flag() -> None:
    """At 80 columns the table dropped its Flags column and cut '831 ms' to '83…'; now it turns vertical."""
    import io

    from rich.console import Console

    from tokenbench.sweep_table import print_sweep, sweep_rows

    lv = ServingLevel(concurrency=16, output_throughput_tps=77425.0, completed=64)
    lv.flags += ["dirty_bench", "client_bound"]
    for width in (80, 200):
        buf = io.StringIO()
        print_sweep(Console(file=buf, width=width), [lv], "EUR")
        out = buf.getvalue()
        assert "…" not in out and "dirty_bench" in out and "client_bound" in out and "77,425" in out
        header, rows = sweep_rows([lv], "EUR")
        assert all(cell in out for cell in rows[0] if cell)


def test_a_long_value_wraps_between_words_under_its_column() -> None:
    """predict --against printed a 165-character Flags line at 80 columns; it wraps, no word or number cut: in
    its column of the table (it was one block per row, a card, until tables learned to wrap their text)."""
    import io

    from rich.console import Console

    from tokenbench.console import print_table

    flag = ("likely software bottleneck: measured is 8% of what llamacpp-cuda's calibration predicts for this "
            "shape (3% of the ceiling); not a hardware limit")
    buf = io.StringIO()
    print_table(Console(file=buf, width=80), ["Host", "Model", "Measured", "Predicted", "Flags"],
                [["L40S 48GB", "llama-3.1-8b", "1,234.5 tok/s", "15,000", flag]])
    lines = buf.getvalue().splitlines()
    assert all(len(ln) <= 80 for ln in lines)
    assert lines[0].split() == ["Host", "Model", "Measured", "Predicted", "Flags"]  # a table, not a card
    col = lines[2].index("likely")
    tail = lines[2:]
    assert "L40S 48GB" in lines[2] and "1,234.5 tok/s" in lines[2] and "15,000" in lines[2]
    assert all(ln[:col].strip() == "" for ln in tail[1:]) and len(tail) > 1
    assert " ".join(ln[col:].strip() for ln in tail) == flag
    # a column named by a 64-character run label: each value goes on the lines under its name
    label = "A: strix-halo-radeon-8060s-llama-cpp-vulkan-gpt-oss-20b-2026-11-23"
    buf = io.StringIO()
    print_table(Console(file=buf, width=80), ["Test", label, "Winner"], [["pp512", "1,287", "→ " + label[3:]]])
    lines = buf.getvalue().splitlines()
    assert all(len(ln) <= 80 for ln in lines) and "    1,287" in lines and f"    → {label[3:]}" in lines


@pytest.mark.parametrize("columns", ["80", "160"])
def test_runs_at_80_columns_is_a_table_whose_ids_say_when(tmp_path: Path, columns: str) -> None:
    """At 80 columns `runs` printed a block of 8 lines per run: the run id, never cut, and its start left no room
    for a table. The id holds the start (UTC, to the second), so a narrow terminal gets the table without the
    Started column and one line that says where the start is; a wide one keeps the column."""
    import subprocess
    import sys

    db = tmp_path / "ids.db"
    for run_id, kind, label, model, engine in (
            ("20261122-101010-abcd", "sweep", "a-rather-long-label-for-a-box", "org/a-long-model-name-8B", "vllm"),
            ("20261123-090807-ef01", "depth", "b", "other-org/model-70B", "llama.cpp cuda")):
        started = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:{run_id[11:13]}:{run_id[13:15]}+00:00"
        Store(db).save_run(run_id, kind, label, {"model": model, "engine": engine}, "measured", [], "0", started,
                           started)
    out = subprocess.run([sys.executable, "-m", "tokenbench", "runs", "--db", str(db)], capture_output=True,
                         text=True, env={**__import__("os").environ, "COLUMNS": columns}, check=True).stdout
    lines = out.splitlines()
    assert max(map(len, lines)) <= int(columns)
    rule = next(i for i, ln in enumerate(lines) if set(ln.strip()) == {"━"})  # a table, not a block per run
    assert "Run" in lines[rule - 1] and "Label" in lines[rule - 1]
    assert any(ln.startswith(" 20261122-101010-abcd ") for ln in lines) and "20261123-090807-ef01" in out
    if columns == "80":
        assert "Started" not in lines[rule - 1] and "Started: the date and time in each run id (UTC)" in out
    else:
        assert "Started" in lines[rule - 1] and "2026-11-22 10:10Z" in out and "each run id" not in out


def test_runs_writes_a_local_model_directory_by_its_last_parts(tmp_path: Path) -> None:
    """Transformers' server names its model by the directory it loaded: the runs table writes the last parts of
    that path, so the quick start's runs still make a table at 80 columns; a hub id stays whole."""
    import subprocess
    import sys

    from tokenbench.cli.runs import MODEL_PATH_CELL, model_cell

    assert model_cell("/root/.cache/tokenbench/tiny-llama-v2/hf") == "…/tiny-llama-v2/hf"
    assert model_cell("Qwen/Qwen3.6-35B-A3B-FP8") == "Qwen/Qwen3.6-35B-A3B-FP8"
    assert model_cell("/m/hf") == "/m/hf"
    assert model_cell("/a/" + "x" * 40) == "…/" + "x" * 40  # a last part too long for the cell is kept whole
    assert all(len(model_cell(p)) <= MODEL_PATH_CELL for p in ("/srv/models/llama-3.1-8b-instruct/hf", "/a/b/c/d/e/f/g"))
    db = tmp_path / "local.db"
    for run_id in ("20261202-140225-8ad4", "20261202-140347-8ab7"):
        started = f"{run_id[:4]}-{run_id[4:6]}-{run_id[6:8]}T{run_id[9:11]}:{run_id[11:13]}:{run_id[13:15]}+00:00"
        Store(db).save_run(run_id, "sweep", "demo", {"model": "/root/.cache/tokenbench/tiny-llama-v2/hf",
                                                     "engine": "transformers"}, "measured", [], "0", started, started)
    out = subprocess.run([sys.executable, "-m", "tokenbench", "runs", "--db", str(db)], capture_output=True,
                         text=True, env={**__import__("os").environ, "COLUMNS": "80"}, check=True).stdout
    lines = out.splitlines()
    assert max(map(len, lines)) <= 80 and any(set(ln.strip()) == {"━"} for ln in lines), out  # a table
    assert "…/tiny-llama-v2/hf" in out and "/root/" not in out, out


def test_the_progress_bar_says_the_time_left_whole_at_80_columns() -> None:
    """At 80 columns Rich cut both times to "0:00:…": a narrow terminal gets a short bar and the time left only."""
    import io

    from rich.console import Console

    from tokenbench.cli.sweep import RichReporter
    from tokenbench.records import RequestRecord

    for width in (80, 160):
        rep = RichReporter(Console(file=io.StringIO(), force_terminal=True, width=width), enabled=True)
        rep.level_start("level 2/4 concurrency 4", 16, None)
        for i in range(8):
            rep.request_done(RequestRecord(index=i, phase="measured"))
        assert rep.progress is not None
        rep.progress.update(rep.task, info="55.3 tok/s, TTFT p50 33 ms")
        shown = Console(file=io.StringIO(), width=width, color_system=None)
        with shown.capture() as cap:
            shown.print(rep.progress.get_renderable())
        line = cap.get().rstrip("\n")
        rep.close()
        assert "…" not in line and "8/16" in line and "55.3 tok/s, TTFT p50 33 ms" in line and " left " in line, line
        assert len(line) <= width



def test_a_finished_level_at_80_columns_is_a_whole_line_above_the_bar() -> None:
    """An open loop's finished level at 80 columns read "level 1/3 rate 0.5/s poiss… 11 requests, 20/20… 62.0
    tok/s, TTFT p50 19 ms  le…": its figures, bar and times did not fit one row. Its row gives way to its line,
    printed whole above the live bar, as a piped run prints it."""
    import io

    from rich.console import Console

    from tokenbench.cli.sweep import RichReporter
    from tokenbench.distribution import Distribution
    from tokenbench.levels import ServingLevel
    from tokenbench.records import RequestRecord

    out = io.StringIO()
    rep = RichReporter(Console(file=out, force_terminal=True, width=80, color_system=None), enabled=True)
    rep.level_start("level 1/3 rate 0.5/s poisson", None, 20.0)
    for i in range(11):
        rep.request_done(RequestRecord(index=i, phase="measured"))
    rep.level_end(ServingLevel(concurrency=None, rate=0.5, completed=11, output_throughput_tps=62.0,
                               ttft_ms=Distribution(n=11, p50=19.0)))
    assert rep.progress is not None and not rep.progress.tasks[0].visible
    rep.close()
    said = [ln for ln in out.getvalue().splitlines() if "62.0 tok/s" in ln]
    assert said and said[0].startswith("level 1/3 rate 0.5/s poisson: 62.0 tok/s, TTFT p50 19 ms, 11 ok")
    assert all("…" not in ln and len(ln) <= 80 for ln in said)


def test_a_level_where_nothing_answered_shows_no_ttft_not_zero() -> None:
    """Every request of a --duration level cut at its end: no TTFT was measured, and the level's line said
    "TTFT p50 0 ms" where its table row shows "—"."""
    import io

    from rich.console import Console

    from tokenbench.cli.sweep import RichReporter
    from tokenbench.distribution import Distribution
    from tokenbench.grace import LEVEL_END
    from tokenbench.levels import ServingLevel

    buf = io.StringIO()
    rep = RichReporter(Console(file=buf, width=80), enabled=True)
    rep.level_start("level 1/1 concurrency 4", None, 5.0)
    level = ServingLevel(concurrency=4, completed=0, failed=4, output_throughput_tps=0.0,
                         ttft_ms=Distribution(n=0))
    level.errors = {LEVEL_END: 4}
    rep.level_end(level)
    said = " ".join(ln.strip() for ln in buf.getvalue().splitlines())
    assert "TTFT p50 —" in said and "0 ms" not in said, said


def test_a_level_of_whole_sessions_says_no_time_left() -> None:
    """Agent sessions run whole sessions, no count or time to reach: the bar read "8 requests  left " with
    nothing after it."""
    import io

    from rich.console import Console

    from tokenbench.cli.sweep import RichReporter
    from tokenbench.records import RequestRecord

    rep = RichReporter(Console(file=io.StringIO(), force_terminal=True, width=80), enabled=True)
    rep.level_start("level 1/2 2 agents, cache warm", None, None)
    for i in range(8):
        rep.request_done(RequestRecord(index=i, phase="measured"))
    assert rep.progress is not None
    shown = Console(file=io.StringIO(), width=80, color_system=None)
    with shown.capture() as cap:
        shown.print(rep.progress.get_renderable())
    rep.close()
    line = cap.get().rstrip()
    assert line.endswith("8 requests") and "left" not in line, line

def test_a_piped_sweep_s_level_line_keeps_within_80_columns() -> None:
    import io

    from rich.console import Console

    from tokenbench.cli.sweep import RichReporter
    from tokenbench.distribution import Distribution
    from tokenbench.levels import ServingLevel

    buf = io.StringIO()
    rep = RichReporter(Console(file=buf, width=80), enabled=True)  # not a terminal: a line a level
    rep.level_start("level 3/5 concurrency 16 prompt=4096 output=512", None, 30.0)
    level = ServingLevel(concurrency=16, completed=480, failed=3, output_throughput_tps=1234.5,
                         ttft_ms=Distribution(n=480, p50=812.0))
    level.flags = ["client_bound", "concurrency_not_reached"]
    rep.level_end(level)
    lines = buf.getvalue().splitlines()
    assert len(lines) > 1 and all(len(ln) <= 80 for ln in lines), lines
    assert lines[0].startswith("level 3/5") and all(ln.startswith("  ") for ln in lines[1:])
    said = " ".join(ln.strip() for ln in lines)
    assert "1,234.5 tok/s" in said and "480 ok" in said and "client_bound, concurrency_not_reached" in said


@pytest.mark.parametrize("terminal", [True, False])
def test_progress_notes_wrap_at_a_terminal_and_stay_whole_in_a_log(terminal: bool) -> None:
    """A note longer than the terminal ("building the embedded small model (cached after this first run) in
    /root/.cache/tokenbench …") was cut mid-word by an 80-column terminal; piped, a log keeps it on one line."""
    import io

    from rich.console import Console

    from tokenbench.cli.common import notifier

    out = io.StringIO()
    note = notifier(Console(file=out, width=80, force_terminal=terminal, no_color=True))
    text = ("agreement: 8 greedy outputs stored; compare two runs with 'tokenbench quality compare A B' to see "
            "whether the same model answers the same on another box")
    note(text)
    lines = out.getvalue().rstrip("\n").split("\n")
    if terminal:
        assert len(lines) > 1 and all(len(line) <= 80 for line in lines) and lines[1].startswith("  ")
        assert " ".join(line.strip() for line in lines) == text
    else:
        assert lines == [text]
