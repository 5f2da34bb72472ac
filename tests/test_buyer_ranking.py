"""recommend ranks honestly: a figure an SLO needs and nobody measured or predicted is unknown, never a pass; a stored
prediction is PREDICTED wherever it shows; sessions and fixed-length runs are never ranked against each other; the
boxes a buyer priced are always listed with their figures; prices name boxes through the catalog's alias table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.pricing import Pricing
from tokenbench.distribution import Distribution
from tokenbench.levels import ServingLevel
from tokenbench.reader import load_result
from tokenbench.store import Store

STRIX = ["predict", "--hardware", "strix-halo", "--model", "qwen3.6-35b-a3b", "--engine", "llama.cpp", "--kv", "q8_0",
         "--parallel", "16", "--concurrency", "1,8,16", "--save", "strix-plain"]
RECOMMEND = ["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "8", "--currency", "EUR"]


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*argv, "--json", "-"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _find(doc: dict, box: str) -> dict:
    return next(c for c in doc["ranked"] + doc["excluded"] + doc["closest"] if c["box"] == box)


@pytest.fixture
def strix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    db = str(tmp_path / "r.db")
    assert main([*STRIX, "--db", db]) == 0
    capsys.readouterr()
    return db


def test_a_stored_prediction_is_predicted_and_judged_on_its_own_figures(strix: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The Strix Halo prediction ranked first under TTFT p99 <= 100 ms with its p99 cell empty and its source
    "measured", while its own median TTFT was 8 s. It is PREDICTED, keeps its p99 (the slowest prompt of the
    loop's start) and misses; the box priced is listed with its figures."""
    args = [*RECOMMEND, "--runs", "strix-plain", "--owned", "strix-plain=2500:3:120", "--db", strix]
    doc = _json([*args, "--ttft-p99", "100ms"], capsys)
    mine = _find(doc, "strix-plain")
    assert mine["source"] == "predicted" and mine not in doc["ranked"] and mine["priced"]
    assert mine["excluded"].startswith("misses TTFT p99: ") and mine["ttft_p99_ms"] > mine["ttft_p50_ms"] > 8000
    assert main([*args, "--ttft-p99", "100ms"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "your box strix-plain (llama.cpp Q4_K_M, PREDICTED): misses TTFT p99: " in out
    assert "76 tok/s" in out and "EUR 0.48/M output" in out  # its figures, with units, whatever its verdict


def test_capacity_judges_a_stored_prediction_as_predicted(strix: str) -> None:
    from tokenbench.recommend import Workload, measured

    run = load_result(Store(strix), "strix-plain")
    (c,) = measured([run], Workload("qwen3.6-35b-a3b", 8, 4096, 512, tpot_ms=100.0),
                    {"strix-plain": Pricing(currency="EUR", price_per_hour=0.1)}, capacity=True)
    assert c.capacity == 8 and c.source == "predicted" and c.mark == "PREDICTED" and not c.excluded and c.priced


def _median_only(store: Store) -> None:
    """A serving level as a published write-up gives it: a median TTFT, no p99."""
    lv = ServingLevel(concurrency=8, test="serve", output_throughput_tps=1163.0, ttft_ms=Distribution(n=0, p50=231.0),
                      tpot_ms=Distribution(n=0, p50=6.4), input_tokens_mean=4096.0, output_tokens_mean=512.0)
    store.save_run("run-seed", "sweep", "seed", {"label": "seed", "model": "qwen3.6-35b-a3b"}, "measured", [lv], "0",
                   "2026", "2026")


def test_a_run_without_a_p99_never_passes_a_p99_slo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A p99 is never below the median: a median over the limit misses; under it the p99 is unknown, said why,
    out of the ranking, in --capacity too (where it was "meets the SLOs at no level")."""
    from tokenbench.recommend import Workload, measured

    db = str(tmp_path / "r.db")
    _median_only(Store(db))
    args = [*RECOMMEND, "--runs", "seed", "--price", "seed=1.79", "--db", db]
    doc = _json([*args, "--ttft-p99", "100ms"], capsys)
    mine = _find(doc, "seed")
    assert mine["excluded"] == "misses TTFT p99: its median alone is 231 ms > 100 ms" and mine["source"] == "measured"
    doc = _json([*args, "--ttft-p99", "2s"], capsys)
    mine = _find(doc, "seed")
    assert mine not in doc["ranked"] and mine["excluded"] == "TTFT p99 unknown: the run stored no TTFT p99"
    (c,) = measured([load_result(Store(db), "seed")], Workload("qwen3.6-35b-a3b", 8, 4096, 512, ttft_p99_ms=2000.0),
                    {}, capacity=True)
    assert c.excluded == "TTFT p99 unknown: the run stored no TTFT p99" and c.capacity is None
    doc = _json([*args, "--tpot", "10ms"], capsys)  # a figure it has: judged on it
    assert _find(doc, "seed") in doc["ranked"]


def test_a_session_run_is_ranked_only_on_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.db")
    assert main(["predict", "--hardware", "h100", "--model", "qwen3.6-35b-a3b", "--weights", "FP8", "--kv", "fp8",
                 "--sessions", "--turns", "3", "--concurrency", "1,4", "--save", "h100-sessions", "--db", db]) == 0
    capsys.readouterr()
    plain = _json([*RECOMMEND, "--runs", "h100-sessions", "--price", "h100-sessions=1.79", "--db", db], capsys)
    assert _find(plain, "h100-sessions")["excluded"] == \
        "an agent-session run: rank it on sessions (recommend --sessions)"
    sessions = _json([*RECOMMEND, "--sessions", "--turns", "3", "--ttft-p99", "30s", "--runs", "h100-sessions",
                      "--price", "h100-sessions=1.79", "--db", db], capsys)
    mine = _find(sessions, "h100-sessions")
    assert mine["excluded"] is None and mine["capacity"] == 4 and mine["at_least"]
    assert not [n for n in mine["notes"] if n.startswith("measured with")]
    # sessions of another shape are ranked with what the run's were (a 3-turn run was ranked for 10 turns, unsaid)
    other = _json([*RECOMMEND, "--sessions", "--turns", "10", "--shared-prefix", "1024", "--ttft-p99", "30s",
                   "--runs", "h100-sessions", "--price", "h100-sessions=1.79", "--db", db], capsys)
    assert "measured with turns 3, shared prefix 512" in _find(other, "h100-sessions")["notes"]


@pytest.mark.parametrize("option, box", [("--price", "h100=1.79"), ("--owned", "strix-halo=2500:3:120"),
                                         ("--price", "ryzen-ai-max-395=0.5")])
def test_prices_name_boxes_through_the_alias_table(option: str, box: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--price h100=1.79 and --owned strix-halo=... were dropped without a word."""
    ident = {"h100": "nvidia-h100-sxm", "strix-halo": "amd-ryzen-ai-max-395",
             "ryzen-ai-max-395": "amd-ryzen-ai-max-395"}[box.split("=")[0]]
    doc = _json([*RECOMMEND, option, box], capsys)
    mine = _find(doc, ident)
    assert mine["priced"] and (mine["cost_per_mtok"] or mine["excluded"])
    assert main([*RECOMMEND, option, box]) == 0
    out = capsys.readouterr().out
    assert ident in out and "no box fits, meets the SLOs and has a price" not in out


def test_an_unknown_box_in_a_price_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*RECOMMEND, "--price", "nosuch=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--price nosuch=...: unknown hardware 'nosuch'" in err
    assert main([*RECOMMEND, "--owned", "h10=2500:3:120"]) == 2
    assert "did you mean" in capsys.readouterr().err


def test_the_hardware_list_shows_every_alias(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware", "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "(also: h100, h100-sxm)" in out and "(also: strix-halo, ryzen-ai-max-395)" in out


def test_the_agent_question_in_the_docs_prints_what_they_show() -> None:
    """The seed question as one command (docs/compare.md, "The agent question"): all prediction, no server; its
    output at the 80 columns the page shows it at is the block after it, so a change that moves the answer
    moves the page, and the page's reading of it is checked again."""
    import os
    import shlex
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_readme import blocks, commands

    found = [(i, t) for i, (_, t) in enumerate(blocks()) if "recommend --model qwen3.6-35b-a3b --sessions --agents 16 --turns 20" in t]
    assert len(found) == 1
    i, text = found[0]
    [command] = commands(text)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", COLUMNS="80")
    out = subprocess.run(shlex.split(command), env=env, capture_output=True, text=True, timeout=300, check=True)
    lines = [ln.rstrip() for ln in out.stdout.rstrip("\n").splitlines()]
    assert lines == [ln.rstrip() for ln in blocks()[i + 1][1].rstrip("\n").splitlines()]
    assert max(len(ln) for ln in lines) <= 80
    said = " ".join(lines)
    for box in ("nvidia-h100-sxm", "amd-ryzen-ai-max-395"):  # each with its source, its agents' range and band
        assert box in said
    assert "Source: PREDICTED" in said and "bands of the predicted figures" in said and "for 16 agents:" in said
    # the Strix Halo's team at the slow end of its band (1 agent a box) is said beside the estimate's six boxes
    assert "amd-ryzen-ai-max-395 x6 (x16 at the slow end of its bands)" in said


def test_a_box_is_one_setup_whether_its_capacity_is_searched_or_not(capsys: pytest.CaptureFixture[str]) -> None:
    """The A100 80 GB was vLLM AWQ asked for 40 agents, and vLLM BF16 with --capacity (which fitted one agent, so
    never tried 4-bit) at 3 agents; and an A30 vLLM could not hold one session of 45K tokens on was "does not fit",
    where llama.cpp's server with Q4_K_M holds it, as `fit` says. Both modes now take 4-bit where BF16 does not
    hold the agents asked, and a GPU vLLM holds not one agent on is predicted on llama.cpp."""
    session = ["--sessions", "--turns", "20", "--shared-prefix", "4000", "--input-len", "2000", "--tool-len",
               "uniform:300-3000", "--output-len", "400", "--ttft-p99", "10s", "--tpot", "50ms"]
    asked = ["recommend", "--model", "qwen3-30b-a3b-2507", "--agents", "40"]
    plain = _json(asked, capsys)
    searched = _json([*asked, "--capacity", "--tpot", "50ms"], capsys)
    sessions = _json([*asked, *session], capsys)
    setups = [_find(doc, "nvidia-a100-sxm-80gb")["setup"] for doc in (plain, searched, sessions)]
    assert setups == ["vllm AWQ"] * 3, setups
    a30 = _find(sessions, "nvidia-a30")
    assert a30["setup"].startswith("llama.cpp cuda Q4_K_M") and a30["kv"] == "q8_0" and a30["capacity"], a30
    assert main(["fit", "--hardware", "nvidia-a30", "--model", "qwen3-30b-a3b-2507", "--weights", "Q4_K_M",
                 "--kv", "q8_0", "--engine", "llama.cpp", "--context", "45350"]) == 0


def test_figures_that_round_alike_get_the_decimals_that_tell_them_apart() -> None:
    from tokenbench.layout import apart

    assert apart(6.2, 5.1) == ("6", "5") and apart(24.18, 24.0) == ("24.2", "24.0")
    assert apart(24.004, 24.0) == ("24.00", "24.00") and apart(1234.6, 1234.4) == ("1,235", "1,234")


def test_a_capacity_that_memory_stops_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    """An H100 read "agents 19" with no range, beside `predict --sessions`' 34 sessions kept warm, and nothing said
    why: its capacity is memory's, every session at its last turn at once, which no band of the speed moves."""
    args = ["recommend", "--model", "qwen3-30b-a3b-2507", "--agents", "40", "--sessions", "--turns", "20",
            "--shared-prefix", "4000", "--input-len", "2000", "--tool-len", "uniform:300-3000", "--output-len", "400",
            "--ttft-p99", "10s", "--tpot", "50ms", "--price", "nvidia-h100-sxm=2.5"]
    doc = _json(args, capsys)
    # the JSON's workload is the session's: no request lengths of 0, no draw whose unused fields read a mean of 0
    w = doc["workload"]
    assert w["input_len"] is None and w["sessions"]["tool_len"] == 1650, w
    assert w["sessions"]["tool"] == {"kind": "uniform", "unit": "tokens", "text": "uniform 300-3000", "low": 300.0,
                                     "high": 3000.0}, w
    h100 = _find(doc, "nvidia-h100-sxm")
    assert "memory-bound" in h100["notes"] and h100["capacity_band"][:2] == [h100["capacity"]] * 2, h100
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert ("memory-bound: nvidia-h100-sxm: one agent more does not fit beside the weights, with every session at "
            "its last turn at once (45,350 tokens each)") in said, said


def test_a_priced_box_that_serves_no_agent_says_at_how_many_its_figures_are(
        capsys: pytest.CaptureFixture[str]) -> None:
    """"your box amd-ryzen-ai-max-395 ...: misses TTFT p99: 14,488 ms > 10,000 ms; 15 tok/s" did not say those
    were one agent's figures."""
    assert main(["recommend", "--model", "qwen3-30b-a3b-2507", "--agents", "40", "--sessions", "--turns", "20",
                 "--shared-prefix", "4000", "--input-len", "2000", "--tool-len", "1650", "--output-len", "400",
                 "--ttft-p99", "10s", "--owned", "strix-halo=2500:3:120"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert re.search(r"your box amd-ryzen-ai-max-395 \([^)]*\): misses TTFT p99: [\d,]+ ms > 10,000 ms; at 1 agent, ",
                     said), said
