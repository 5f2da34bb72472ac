"""Quality beside speed: compare, report and recommend find each box's quality run by the speed run's
label and show the paired verdict; recommend --parity-with keeps only boxes shown to match a reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.distribution import Distribution
from tokenbench.levels import ServingLevel
from tokenbench.quality.items import Item
from tokenbench.quality.runner import task_summary
from tokenbench.store import Store

MODEL = "qwen3.6-35b-a3b"


def _speed(store: Store, label: str, tps: float) -> None:
    lv = ServingLevel(concurrency=16, test="serve", output_throughput_tps=tps,
                            ttft_ms=Distribution(n=16, p50=500.0, p99=900.0), tpot_ms=Distribution(n=16, p50=20.0),
                            input_tokens_mean=4096.0, output_tokens_mean=512.0, completed=16)
    store.save_run(f"s-{label}", "sweep", label, {"label": label, "model": MODEL, "price_per_hour": 2.0}, "measured",
                   [lv], "0", "2026-01-01T00:00:00", "2026-01-01T00:01:00")


def _quality(store: Store, label: str, wrong_every: int | None, api: str | None = None, model: str = MODEL,
             answer: str = "the needle is 42") -> None:
    """16 needle cells; every ``wrong_every``-th answered wrong; made with ``api`` (None: not recorded); each
    answer ``answer``, the first cell's excepted (its own), so outputs pair for agreement."""
    items = [Item("niah", i, f"cell{i}", "p", status="fail" if wrong_every and i % wrong_every == 0 else "pass",
                  score=0.0 if wrong_every and i % wrong_every == 0 else 1.0, latency_ms=100.0,
                  response=answer if i else "the needle is 42", detail={"context": 1024, "depth": 50})
             for i in range(16)]
    workload = {"workload": {"tasks": ["niah"], "api": api, "max_tokens": 64}} if api else {}
    store.save_run(f"q-{label}", "quality", label, {"label": label, "model": model, "seed": 0, **workload,
                                                     "summary": task_summary(items)}, "measured", [], "0",
                   "2026-01-02T00:00:00", "2026-01-02T00:01:00")
    store.save_quality_items(f"q-{label}", [it.to_row() for it in items])


@pytest.fixture
def db(tmp_path: Path) -> str:
    store = Store(tmp_path / "r.db")
    _speed(store, "fast", 800.0)
    _speed(store, "slow", 300.0)
    _quality(store, "fast", None)
    _quality(store, "slow", 2)  # half the needles wrong
    _quality(store, "ref", None)
    return str(tmp_path / "r.db")


def test_compare_prints_the_quality_verdict_beside_the_speed(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "fast", "slow", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "quality (runs q-fast and q-slow): niah: fast better (100.0 vs 50.0 points, p = 0.0078, 16 items)" in out
    assert main(["compare", "fast", "slow", "--db", db, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["quality"]["tasks"][0]["scores"]["verdict"] == "A better"
    # --latest takes the newest run of a kind compare takes: it took the newer quality run and refused it
    assert main(["compare", "fast", "slow", "--latest", "--db", db]) == 0
    assert "quality (runs q-fast and q-slow)" in capsys.readouterr().out


def test_the_quality_line_beside_speed_says_outputs_that_differ_as_well_as_the_score(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On real servers a needle task read "niah: same within noise (0.0 vs 0.0 points, p = 1, 6 items)" beside
    the speed table and in the report, where quality compare found its outputs differ beyond the floor: the line
    said the score's verdict alone."""
    store = Store(tmp_path / "r.db")
    _speed(store, "a", 800.0)
    _speed(store, "b", 300.0)
    _quality(store, "a", None)
    _quality(store, "b", None, answer="a needle, I think")  # the same scores, 15 of 16 outputs not the same
    assert main(["compare", "a", "b", "--db", str(tmp_path / "r.db")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "niah: same within noise (100.0 vs 100.0 points, p = 1, 16 items); outputs different: 1 of 16 outputs " \
        "identical" in said, said


def test_quality_compare_warns_of_two_models_and_a_run_that_did_not_finish(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """quality compare of the tiny model against the small one blamed the difference on the box without a word,
    and two interrupted runs read "same within noise on every task" with only a note at the end."""
    db = str(tmp_path / "r.db")
    store = Store(db)
    _quality(store, "tiny", None, model="tokenbench-tiny-llama")
    _quality(store, "small", None, model="tokenbench-small-llama")
    store.finish_run("q-small", "interrupted", "2026-01-02T00:01:00")
    assert main(["quality", "compare", "tiny", "small", "--db", db]) == 0
    out = capsys.readouterr().out.splitlines()
    verdict = next(i for i, line in enumerate(out) if line.startswith("verdict: "))
    warned = " ".join(" ".join(out[:verdict]).split())  # before the verdict, where it is read
    assert "warning: the two sides ran different models (tokenbench-tiny-llama vs tokenbench-small-llama): a " \
        "difference below is the models' as much as the boxes'" in warned, out
    assert "warning: small is interrupted, not complete: only the items both runs finished are compared" in warned
    # an item in one run only, said in the singular, its causes among them a run that did not finish
    items = [Item("niah", 0, "cell0", "p", status="pass", score=1.0, response="the needle is 42")]
    store.save_run("q-one", "quality", "one", {"label": "one", "model": "tokenbench-tiny-llama", "seed": 0,
                                                "summary": task_summary(items)}, "measured", [], "0",
                   "2026-01-02T00:00:00", "2026-01-02T00:01:00")
    store.save_quality_items("q-one", [it.to_row() for it in items])
    store.finish_run("q-one", "interrupted", "2026-01-02T00:01:00")
    assert main(["quality", "compare", "tiny", "one", "--db", db]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "niah: 15 items are in one run only (different contexts or depths, or a run that did not finish?)" \
        in said, said
    _quality(store, "tiny-again", None, model="tokenbench-tiny-llama")
    assert main(["quality", "compare", "tiny", "tiny-again", "--db", db]) == 0
    assert "warning" not in capsys.readouterr().out


def test_compare_of_quality_runs_points_at_quality_compare(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "q-fast", "q-slow", "--db", db]) == 2
    assert "run fast is a quality run: compare takes sweep or predict or depth or bench runs ('tokenbench quality " \
        "compare' compares quality runs)" in " ".join(capsys.readouterr().err.split())
    assert main(["cost", "q-fast", "--price-per-hour", "2", "--db", db]) == 2
    assert "quality compare" not in capsys.readouterr().err  # cost has no such command to point at


def test_a_box_without_a_quality_run_is_compared_on_speed_alone(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "r.db")
    _speed(store, "a", 800.0)
    _speed(store, "b", 300.0)
    _quality(store, "a", None)
    assert main(["compare", "a", "b", "--db", str(tmp_path / "r.db")]) == 0
    assert "quality" not in capsys.readouterr().out


def test_report_shows_quality_in_the_comparison(db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "r.html"
    assert main(["report", "fast", "slow", "--html", str(page), "--db", db]) == 0
    text = page.read_text()
    assert "<b>Quality:</b> niah: fast better (100.0 vs 50.0 points, p = 0.0078, 16 items)" in text


def test_recommend_parity_keeps_only_boxes_shown_to_match(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["recommend", "--model", MODEL, "--agents", "16", "--ttft-p99", "60s", "--runs", "fast", "slow",
                 "--parity-with", "ref", "--currency", "EUR", "--db", db, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["box"] for c in doc["ranked"]] == ["fast"]
    assert any(n.startswith("quality as ref: niah: same within noise") for n in doc["ranked"][0]["notes"])
    why = {c["box"]: c["excluded"] for c in doc["excluded"]}
    assert why["slow"] == "quality below ref on niah: 50.0 vs 100.0 points, p = 0.0078"
    assert why["nvidia-h100-sxm"].startswith("quality not measured")
    assert main(["recommend", "--model", MODEL, "--runs", "fast", "--parity-with", "nobody", "--db", db]) == 2
    assert "--parity-with nobody: no quality run labelled 'nobody'" in capsys.readouterr().err


@pytest.fixture
def apart(tmp_path: Path) -> str:
    """fast's quality run made with --api completions, slow's (half its needles wrong) and ref's with --api
    chat: the prompts sent differ, so no verdict could be the boxes'."""
    store = Store(tmp_path / "r.db")
    _speed(store, "fast", 800.0)
    _speed(store, "slow", 300.0)
    _quality(store, "fast", None, api="completions")
    _quality(store, "slow", 2, api="chat")
    _quality(store, "ref", None, api="completions")
    return str(tmp_path / "r.db")


NO_VERDICT = ("the quality runs were made with different settings (--api completions and --api chat): the "
              "prompts sent differ, so no quality verdict is given")


def test_compare_gives_no_quality_verdict_on_runs_made_with_other_settings(
        apart: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A completions run beside a chat run read "niah: fast better": the chat template's, not the box's."""
    assert main(["compare", "fast", "slow", "--db", apart]) == 0
    out = capsys.readouterr().out
    assert "better" not in out and f"quality (runs q-fast and q-slow): {NO_VERDICT}" in " ".join(out.split())
    assert main(["compare", "fast", "slow", "--db", apart, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)["quality"]
    assert doc["tasks"] == [] and doc["no_verdict"] == NO_VERDICT


def test_report_gives_no_quality_verdict_on_runs_made_with_other_settings(apart: str, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    assert main(["report", "fast", "slow", "--html", str(page), "--db", apart]) == 0
    text = page.read_text()
    assert "<b>Quality:</b> " + NO_VERDICT in text and "fast better" not in text


def test_recommend_parity_names_other_settings_not_worse_quality(apart: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """slow's chat run read "quality below ref on niah" against ref's completions run: no verdict was there to
    be had, so slow is left out for that, with the rerun that would give one."""
    assert main(["recommend", "--model", MODEL, "--agents", "16", "--ttft-p99", "60s", "--runs", "fast", "slow",
                 "--parity-with", "ref", "--currency", "EUR", "--db", apart, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [c["box"] for c in doc["ranked"]] == ["fast"]
    why = {c["box"]: c["excluded"] for c in doc["excluded"]}
    assert why["slow"] == ("parity with ref not shown: the quality runs were made with different settings (--api "
                           "chat and --api completions): the prompts sent differ, so no quality verdict is given; "
                           "rerun slow's with --api completions")


def test_quality_compare_in_markdown_keeps_its_lines_out_of_the_tables(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The floor's line came straight under the agreement table, so a Markdown renderer read it as one more row,
    and the verdict was wrapped at the terminal's width inside a paragraph meant to be pasted whole."""
    monkeypatch.setenv("COLUMNS", "80")
    db = str(tmp_path / "r.db")
    store = Store(db)
    _quality(store, "a", None)
    _quality(store, "b", 2, answer="a needle, I think")
    assert main(["quality", "compare", "a", "b", "--db", db, "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    verdict = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert lines[verdict + 1] == "" and len(lines[verdict]) > 80, lines  # one line, a blank after it
    for i, line in enumerate(lines[1:], 1):  # every table ends before a line that is not a row of it
        if lines[i - 1].startswith("|") and line and not line.startswith("|"):
            raise AssertionError(f"line {i} follows a table without a blank line: {line!r}")
