"""show prints every kind of run in the table that fits it, and the guard snapshot of any level; SLO verdicts
sit on their level's row; every command that prints a table can write JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench.guard_results import GuardSnapshot
from tokenbench.cli import main
from tokenbench.distribution import Distribution
from tokenbench.levels import DepthLevel, LevelSummary, ServingLevel
from tokenbench.slo import SLO
from tokenbench.sweep_table import format_sweep_markdown
from tokenbench.store import Store

DIRTY = {"clean": False, "checks": [
    {"name": "cpu_load", "status": "fail", "observed": "load 3.1", "threshold": "< 0.5", "advice": "stop the build"},
    {"name": "swap", "status": "ok", "observed": "0 MB", "threshold": "0", "advice": ""}]}


def _save(store: Store, rid: str, kind: str, manifest: dict[str, object], levels: list[LevelSummary],
          provenance: str = "measured") -> None:
    store.save_run(rid, kind, manifest.get("label"), manifest, provenance, levels, "0",  # type: ignore[arg-type]
                   "2026-01-01T00:00:00", "2026-01-01T00:01:00")


def test_show_prints_a_cold_start_as_its_boots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It printed an empty table: a cold start has no levels, only boots."""
    db = tmp_path / "r.db"
    boots = [{"n": 1, "healthy_s": 41.5, "first_token_s": 43.25, "model": "m", "error": None},
             {"n": 2, "healthy_s": 9.75, "first_token_s": None, "model": "m", "error": None}]
    _save(Store(db), "cs-1", "coldstart", {"label": "boot", "model": "m", "boots": boots}, [])
    assert main(["show", "boot", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "1 (cold)" in out and "41.50 s" in out and "43.25 s" in out and "9.75 s" in out
    assert "None" not in out


def test_show_marks_a_prediction_predicted_and_leaves_out_what_it_lacks(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    manifest = {"label": "h100-pred", "model": "gpt-oss-20b", "weights": "MXFP4", "kv": "FP8", "engine": "vllm",
                "hardware": "nvidia-h100-sxm", "backend": "vllm-cuda", "calibration": "fitted", "predicted": True,
                "workload": {"input_len": 4096, "output_len": 512}}
    lv = ServingLevel(concurrency=1, test="serve", output_throughput_tps=250.0,
                            ttft_ms=Distribution(n=0, p50=98.0), tpot_ms=Distribution(n=0, p50=3.9))
    _save(Store(db), "p-1", "predict", manifest, [lv], "predicted")
    depth = dict(manifest, label="h100-depth", workload={})
    _save(Store(db), "p-2", "predict", depth, [DepthLevel(concurrency=1, test="tg128", depth=8192, tg_tps=268.5)],
          "predicted")
    assert main(["show", "h100-pred", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED for gpt-oss-20b" in out and "PREDICTED (not measured)" in out and " 250 " in out
    assert main(["show", "h100-depth", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    # to the two figures a prediction's band supports
    assert "t/s (PREDICTED)" in out and " 270" in out and "268" not in out and "tg128 @ d8192" in out
    assert "None" not in out  # "None in / None out tokens; None API; tokenizer: None" before
    # a predict run whose stored manifest lost its mark: show said PREDICTED, report and compare said measured
    bare = {k: v for k, v in depth.items() if k != "predicted"} | {"label": "bare"}
    _save(Store(db), "p-3", "predict", bare, [DepthLevel(concurrency=1, test="tg128", depth=8192, tg_tps=300.0)])
    from tokenbench.report.facts import source
    from tokenbench.reader import load_result
    assert source(load_result(Store(db), "bare")) == "PREDICTED"
    assert main(["compare", "h100-depth", "bare", "--db", str(db)]) == 0
    assert "bare is PREDICTED, not measured" in capsys.readouterr().out


def test_show_guard_prints_each_levels_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The dirty_bench warning said "see its snapshot" and no command printed it."""
    db = tmp_path / "r.db"
    a = ServingLevel(concurrency=1, output_throughput_tps=10.0)
    b = ServingLevel(concurrency=4, output_throughput_tps=30.0)
    a.guard, b.guard = GuardSnapshot.from_dict({"clean": True, "checks": [DIRTY["checks"][1]]}), GuardSnapshot.from_dict(DIRTY)
    b.flags.append("dirty_bench")
    _save(Store(db), "s-1", "sweep", {"label": "box", "model": "m"}, [a, b])
    assert main(["show", "box", "--guard", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "level 1/2 (concurrency 1): clean" in out and "level 2/2 (concurrency 4): DIRTY" in out
    assert "load 3.1" in out and "stop the build" in out
    assert main(["show", "box", "--guard", "2", "--db", str(db), "--json", "-"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out) == [{"level": 2, "guard": DIRTY}] and "level 1/2" not in cap.err
    assert main(["show", "box", "--guard", "--format", "markdown", "--db", str(db)]) == 0
    md = capsys.readouterr().out  # each table under its level's verdict, as on a terminal (they were bare)
    assert "level 2/2 (concurrency 4): DIRTY\n\n| " in md and "level 1/2 (concurrency 1): clean\n\n| " in md
    assert main(["show", "box", "--guard", "3", "--db", str(db)]) == 2
    assert "--guard 3: run s-1 has levels 1..2" in capsys.readouterr().err
    _save(Store(db), "c-1", "coldstart", {"label": "boots", "model": "m"}, [])
    assert main(["show", "boots", "--guard", "1", "--db", str(db)]) == 2  # it said "has levels 1..0"
    assert "--guard 1: run c-1 has no levels (a coldstart run)" in capsys.readouterr().err
    assert main(["show", "box", "--db", str(db)]) == 0
    assert "dirty_bench" in capsys.readouterr().out  # on the row, not only below the table


#: A guard's snapshot as a machine running another server reads it: advice of a sentence and more.
BUSY = {"clean": False, "checks": [
    {"name": "serving_processes", "status": "fail", "observed": "llama.cpp server (pid 30555)",
     "threshold": "no other model server",
     "advice": "stop the other servers: they share memory bandwidth and compute with the one measured"},
    {"name": "free_memory", "status": "pass", "observed": "24.0 GB free (95%)", "threshold": ">= 2 GB and 10%",
     "advice": ""},
    {"name": "cpu_load", "status": "fail", "observed": "99% of all cores busy with other work", "threshold": "<= 15%",
     "advice": "other processes use the CPU: stop them (see top)"},
    {"name": "gpu_nvml", "status": "not available", "observed": "no NVIDIA GPU or NVML (pip install nvidia-ml-py)",
     "threshold": "", "advice": ""}]}


@pytest.mark.parametrize("columns", [80, None])
def test_show_guard_says_each_advice_readably_at_80_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             columns: int | None) -> None:
    """At 80 columns the Advice column was 14 wide: "stop the other servers: they share memory bandwidth and
    compute with the one measured" ran down seven lines of two or three words. Each advice reads as a sentence,
    under its own check's row where the table is too narrow for it beside the rest."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    db = tmp_path / "r.db"
    lv = ServingLevel(concurrency=1, output_throughput_tps=10.0)
    lv.guard = GuardSnapshot.from_dict(BUSY)
    _save(Store(db), "s-1", "sweep", {"label": "box", "model": "m"}, [lv])
    assert main(["show", "box", "--guard", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= (columns or 160), "\n".join(lines)
    text = "\n".join(lines)
    for check in BUSY["checks"]:
        if advice := str(check["advice"]):  # each advice's opening on one line ("stop the other" / "servers:")
            assert any(advice.split(":")[0] in ln for ln in lines), text
    assert len(lines) <= 16, text  # its title, the header and its rule, 4 checks and their advice: it was 22
    assert "DIRTY" in lines[0]


def test_slo_verdict_and_goodput_are_on_each_row() -> None:
    """They were computed into the JSON only, while the README promised them per level."""
    slo = SLO.parse("ttft_p99=2s")
    ok = ServingLevel(concurrency=1, output_throughput_tps=10.0, goodput_rps=0.5, slo=slo.describe(), slo_met=True)
    bad = ServingLevel(concurrency=8, output_throughput_tps=40.0, goodput_rps=0.25, slo=slo.describe(),
                             slo_met=False)
    md = format_sweep_markdown([ok, bad])
    head, row1, row2 = (ln for ln in md.splitlines() if ln.startswith("| ") and "---" not in ln)
    cols = [c.strip() for c in head.strip("|").split("|")]
    assert "SLO" in cols and "Goodput req/s" in cols
    at = cols.index("SLO")
    assert [c.strip() for c in row1.strip("|").split("|")][at:at + 2] == ["pass", "0.50"]
    assert [c.strip() for c in row2.strip("|").split("|")][at:at + 2] == ["FAIL", "0.25"]
    assert "SLO ttft_p99<=2000ms" in md
    assert "SLO" not in format_sweep_markdown([ServingLevel(concurrency=1, output_throughput_tps=10.0)])


def test_table_commands_write_json_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    store = Store(db)
    for rid, label, tps in (("a-1", "fast", 100.0), ("b-1", "slow", 25.0)):
        _save(store, rid, "sweep", {"label": label, "model": "m", **({"capacity": {"slo": "ttft_p90<=1s"}}
                                                                       if label == "slow" else {})},
              [ServingLevel(concurrency=1, output_throughput_tps=tps, ttft_ms=Distribution(n=10, p50=50.0))])
    assert main(["runs", "--db", str(db), "--json", "-"]) == 0
    cap = capsys.readouterr()
    assert {r["run_id"]: r["label"] for r in json.loads(cap.out)} == {"a-1": "fast", "b-1": "slow"}
    # the table's Kind is the command that made the run; the JSON keeps the stored kind beside it
    assert {r["run_id"]: (r["kind"], r["command"]) for r in json.loads(cap.out)} == {
        "a-1": ("sweep", "sweep"), "b-1": ("sweep", "capacity")}
    assert "a-1" in cap.err  # the table went to stderr
    assert main(["compare", "fast", "slow", "--db", str(db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    row = next(r for r in doc["rows"] if r["unit"] == "tok/s" and r["concurrency"] == 1)
    assert (row["a"], row["b"], row["ratio"], row["winner"]) == (100.0, 25.0, 4.0, "fast")
    assert main(["cost", "slow", "--price-per-hour", "0.9", "--db", str(db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["currency"] == "USD" and doc["points"][0]["cost_per_mtok"] == pytest.approx(0.9 / (25 * 3600) * 1e6)
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--db", str(db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    h100 = next(c for c in doc["excluded"] if c["box"] == "nvidia-h100-sxm")
    assert "pass --currency EUR" in h100["excluded"]  # one default currency (USD); the catalog price is in EUR
    assert main(["engines", "--json", "-"]) == 0
    assert {e["engine"] for e in json.loads(capsys.readouterr().out)} >= {"transformers", "vllm", "llama-server"}


def test_published_rows_show_what_they_have_not_zeros() -> None:
    """show of an imported published run printed rows of '1 | 0.0 | —': a prefill-only row at concurrency 1
    beside a serving row at concurrency 1, with nothing to tell them apart."""
    pre = ServingLevel(concurrency=1, test="serve", input_tokens_mean=512.0, prefill_tps=11378.0)
    dec = ServingLevel(concurrency=1, test="serve", given_decode_tps=77.0)
    srv = ServingLevel(concurrency=1, test="serve", input_tokens_mean=4096.0, output_throughput_tps=75.0,
                             ttft_ms=Distribution(n=0, p50=243.0))
    md = format_sweep_markdown([pre, dec, srv])
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in md.splitlines() if ln.startswith("| ")]
    head = rows[0]
    assert "Prompt tokens" in head and "Prefill tok/s" in head and "Decode tok/s" in head
    col = {h: i for i, h in enumerate(head)}
    assert rows[1][col["Prompt tokens"]] == "512" and rows[1][col["Prefill tok/s"]] == "11,378"
    assert rows[1][col["Aggregate output tok/s"]] == "—" and rows[2][col["Decode tok/s"]] == "77.0"
    assert rows[3][col["Aggregate output tok/s"]] == "75.0"
    assert "0.0 |" not in md


def test_recommend_marks_a_box_no_measurement_stands_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM on an AMD GPU has no published row: its figures are priors, and the ranking must say so."""
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "4", "--ttft-p99", "60s", "--price",
                 "amd-mi300x=2", "--price", "nvidia-l40s=0.9", "--db", str(tmp_path / "r.db"), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_box = {c["box"]: c for c in doc["ranked"]}
    assert any("UNCALIBRATED" in n for n in by_box["amd-mi300x"]["notes"])
    assert not any("UNCALIBRATED" in n for n in by_box["nvidia-l40s"]["notes"])
    assert all(" GiB of " in c["excluded"] for c in doc["excluded"] if "does not fit" in (c["excluded"] or ""))


def test_show_prints_a_quality_run_as_its_tasks_and_needle_grid(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """show of a quality run printed an empty table: it has items, not levels."""
    from tokenbench.quality.items import Item
    from tokenbench.quality.runner import task_summary

    db = tmp_path / "r.db"
    items = [Item("niah", i, f"k{i}", "p", status="pass" if i else "timeout", score=1.0 if i else None,
                  latency_ms=1500.0 + i, prompt_tokens=1000, expected_prompt_tokens=1000,
                  detail={"context": 1024, "depth": d, "usage_check": "ok"}) for i, d in enumerate((10, 50, 90))]
    store = Store(db)
    _save(store, "q-1", "quality", {"label": "strix", "model": "m", "summary": task_summary(items)}, [])
    store.save_quality_items("q-1", [it.to_row() for it in items])
    assert main(["show", "strix", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "niah" in out and "timeout 1.50 s" in out and "pass 1.50 s" in out and "1,000/1,000" in out
    assert "66.7" in out  # 2 of 3 passed: the timeout counts against the score


def test_catalog_and_fit_write_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware", "--json", "-"]) == 0
    hw = json.loads(capsys.readouterr().out)["entries"]
    assert any(e["id"] == "nvidia-h100-sxm" and e["mem_gb"] == 80 for e in hw)
    assert main(["models", "--json", "-"]) == 0
    assert any(e["id"] == "llama-3.1-8b" for e in json.loads(capsys.readouterr().out)["entries"])
    rc = main(["fit", "--hardware", "nvidia-rtx-4080", "--model", "llama-3.1-8b", "--weights", "F16",
               "--engine", "llama.cpp", "--context", "8192", "--json", "-"])
    f = json.loads(capsys.readouterr().out)
    assert rc == (0 if f["fits"] else 1)
    assert f["unit"] == "GiB" and f["usable_gb"] == 16.0
    assert f["fits_in_memory"] == (f["total_gb"] <= f["usable_gb"]) and 0 < f["max_context"] < 8192


def test_markdown_notes_are_paragraphs_of_their_own() -> None:
    """Pasted into Markdown, notes one under the other ran into one paragraph and the p99 footnote's "*" made a
    bullet: each is a paragraph, the mark escaped, "<=" kept as written and a tag made text."""
    from tokenbench.layout import md_paragraph

    assert md_paragraph("* p99 over fewer than 100 requests") == "\\* p99 over fewer than 100 requests"
    assert md_paragraph("SLO ttft_p99<=2000ms; a < b") == "SLO ttft_p99<=2000ms; a < b"
    assert md_paragraph("error <script>x</script>") == "error &lt;script>x&lt;/script>"
    slo = SLO.parse("ttft_p99=2s")
    md = format_sweep_markdown([ServingLevel(concurrency=1, output_throughput_tps=10.0, goodput_rps=0.5,
                                             slo=slo.describe(), slo_met=True)])
    tail = md.split("|\n\n", 1)[1].split("\n")
    assert tail[0] and all(not ln for ln in tail[1::2]) and all(tail[0::2]), md  # note, blank, note, ...


def test_a_count_of_one_reads_in_the_singular() -> None:
    """"1 agents", "1 subagents", "0 slot": a count and its noun, written in one place."""
    from tokenbench.layout import plural

    assert [plural(n, "agent") for n in (0, 1, 2)] == ["0 agents", "1 agent", "2 agents"]
    assert plural(1, "warm-up request") == "1 warm-up request" and plural(3, "slot") == "3 slots"


def test_an_open_loop_under_one_request_in_flight_has_no_per_agent_rate() -> None:
    """A trace at 3.35 requests a second read 46.3 tok/s aggregate and 810.8 per agent: under one request in
    flight on average, the aggregate over it is a request's own speed. A closed loop and a busier open loop keep
    theirs."""
    from tokenbench.sweep_table import sweep_rows

    levels = [ServingLevel(concurrency=None, rate=3.35, achieved_concurrency=0.057, output_throughput_tps=46.3,
                           completed=16),
              ServingLevel(concurrency=None, rate=20.0, achieved_concurrency=2.0, output_throughput_tps=400.0,
                           completed=64),
              ServingLevel(concurrency=4, output_throughput_tps=200.0, completed=32)]
    header, rows = sweep_rows(levels, "USD")
    col = header.index("Per-agent tok/s")
    assert [r[col] for r in rows] == ["—", "200.0", "50.0"]


def _one_read(concurrency: int, share: float | None, tpot_p50: float) -> ServingLevel:
    """A level some of whose answers came whole in one network read (``share``; None: a run stored with the flag
    alone), its median TPOT as measured."""
    from tokenbench.finding import Code, Finding

    s = ServingLevel(concurrency=concurrency, output_throughput_tps=900.0, completed=16,
                     ttft_ms=Distribution(n=16, p50=146.0, p99=177.0), tpot_ms=Distribution(n=16, p50=tpot_p50))
    s.add(Finding(Code.ONE_READ, "some answers arrived whole in one network read", observed=share, threshold=0.1,
                  unit="share", n=16))
    return s


def test_a_median_tpot_of_answers_that_came_whole_is_withheld_and_said_why() -> None:
    """make demo-vllm printed a median TPOT of 0.0 ms as a figure (12 of 16 answers whole in one read), and 2-token
    answers at concurrency 1 "single-stream decode 39,716 tok/s": the cell reads "—", the decode rate is none, a
    note under the table says why, and the JSON keeps what was measured."""
    from tokenbench.sweep_table import notes, single_stream_lines, sweep_rows

    half = _one_read(1, 0.5, 0.0252)  # halfway between a 0 and the next: 39,683 tok/s
    most = _one_read(2, 0.75, 0.0)
    header, rows = sweep_rows([half, most], "USD")
    assert [r[header.index("Median TPOT")] for r in rows] == ["—", "—"]
    assert single_stream_lines([half, most]) == ["Concurrency 1: no single-stream decode (its median TPOT is "
                                                 "withheld: one_read)"]
    assert half.decode_tps and half.decode_tps > 39_000  # the JSON's, unchanged
    said = [line for line in notes([half, most]) if "TPOT (—)" in line]
    assert said == ["[1,2] no median TPOT (—): half its answers or more arrived whole in one network read "
                    "(one_read): the median is their TPOT of 0, or halfway to it, not a decode; the JSON keeps "
                    "tpot_ms as measured"]
    assert half.to_dict()["tpot_ms"]["p50"] == 0.0252 and most.to_dict()["tpot_ms"]["p50"] == 0.0
    assert "no median TPOT (—)" in format_sweep_markdown([half, most])
    # fewer whole, the rest as fast: the median reads 0.0 ms; a run stored with the flag alone and a median of 0
    for s in (_one_read(1, 0.25, 0.02), _one_read(1, None, 0.0)):
        header, rows = sweep_rows([s], "USD")
        assert rows[0][header.index("Median TPOT")] == "—"
        assert any("reads 0.0 ms where answers arrived whole" in line for line in notes([s]))
        assert "no single-stream decode" in single_stream_lines([s])[0]


def test_a_decode_rate_some_whole_answers_pull_up_is_said_to_read_high() -> None:
    from tokenbench.sweep_table import notes, single_stream_lines, sweep_rows

    few = _one_read(1, 0.2, 8.0)  # 1 in 5 answers whole: the median is the seen ones', pulled down
    header, rows = sweep_rows([few], "USD")
    assert rows[0][header.index("Median TPOT")] == "8.0 ms"
    assert single_stream_lines([few]) == ["Concurrency 1: single-stream decode 125.0 tok/s (1 / median TPOT; "
                                          "reads high: 20% of its answers came whole in one read, one_read)"]
    assert not any("TPOT (—)" in line for line in notes([few]))
    clean = ServingLevel(concurrency=1, output_throughput_tps=100.0, completed=16,
                         tpot_ms=Distribution(n=16, p50=10.0))
    assert single_stream_lines([clean]) == ["Concurrency 1: single-stream decode 100.0 tok/s (1 / median TPOT)"]


def test_a_per_agent_rate_withheld_is_said_under_the_table() -> None:
    """A sweep at 0.5, 1 and 2/s showed "—" under Per-agent tok/s at the first two rates and 189.7 at the third,
    with no word why: a note under the table says it, with each level's requests in flight."""
    from tokenbench.sweep_table import notes, sweep_rows

    levels = [ServingLevel(concurrency=None, rate=r, achieved_concurrency=held, output_throughput_tps=tps,
                           completed=12) for r, held, tps in ((0.5, 0.42, 62.0), (1.0, 0.81, 73.6), (2.0, 1.37, 260.3))]
    header, rows = sweep_rows(levels, "USD")
    assert [r[header.index("Per-agent tok/s")] for r in rows] == ["—", "—", "190.0"]
    said = [line for line in notes(levels) if "per-agent" in line]
    assert said == ["[0.5/s,1/s] no per-agent tok/s (—): under one request in flight on average (0.42, 0.81); the "
                    "aggregate divided by that would be one request's own speed, above the aggregate"]
    assert not [line for line in notes(levels[2:]) if "per-agent" in line]  # every row has its figure


def test_a_flag_the_table_shows_is_said_under_it() -> None:
    """A note's flag (phase_locked, no_plateau) is in the Flags column: its finding is said under the table too,
    once per text with the levels it is on; the p99 estimate, failed requests and an interrupt keep their own
    lines."""
    from tokenbench.finding import Code, Finding
    from tokenbench.levels import ServingLevel
    from tokenbench.sweep_table import notes

    a, b = ServingLevel(concurrency=2), ServingLevel(concurrency=4)
    for s in (a, b):
        s.add(Finding(Code.PHASE_LOCKED, "the closed loop fell into waves it kept", "--phase staggered",
                      severity="note"))
        s.add(Finding(Code.P99_ESTIMATE, "p99 over 8 requests is an estimate", severity="note"))
    said = notes([a, b])
    assert "[2,4] phase_locked: the closed loop fell into waves it kept; --phase staggered" in said
    assert not any("p99_estimate" in line for line in said)


def test_requests_cut_by_an_interrupt_are_shown_apart_from_those_that_failed() -> None:
    """Ctrl-C ends the requests in flight as "interrupted": the table read them as failed (OK/failed 8/4), as if
    the server had failed four. They are shown apart, and the failed requests' line names only the server's."""
    from tokenbench.sweep_table import notes, sweep_rows

    s = ServingLevel(concurrency=4, completed=20, failed=5, errors={"interrupted": 4, "http_500": 1},
                     output_throughput_tps=80.0)
    header, rows = sweep_rows([s], "USD")
    assert rows[0][header.index("OK/failed")] == "20/1, 4 cut"
    said = notes([s])
    assert "[4] failed requests: http_500: 1" in said
    assert any(line.startswith("[4] 4 cut: in flight at the interrupt") for line in said)
    whole = ServingLevel(concurrency=4, completed=20, failed=1, errors={"http_500": 1})
    assert whole.ok_failed() == "20/1" and not any("cut" in line for line in notes([whole]))


def test_small_replay_times_and_spans_read_as_the_rest() -> None:
    """A tree of fast calls read "tree time p50 0.029 s" where every other time is in ms, and trajectories that
    all start at once read "starting over 0 s"."""
    from tokenbench.offered_load import Level
    from tokenbench.replay_table import seconds

    assert seconds(0.029) == "29.0 ms" and seconds(0.29) == "290 ms" and seconds(12.34) == "12.3 s"
    assert Level(schedule=(0.0, 0.0, 0.0), cache="warm").describe() == "replay of 3 trajectories, all started at once"
    assert Level(schedule=(0.0, 2.5), cache="warm").describe() == "replay of 2 trajectories starting over 2.5 s"


@pytest.mark.parametrize("kind, what", [("depth", "depth"), ("sweep", "level")])
def test_a_run_that_finished_nothing_says_so_not_an_empty_table(kind: str, what: str, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A depth run interrupted in its first depth printed the headings of an empty sweep table."""
    db = tmp_path / "r.db"
    store = Store(db)
    store.create_run("r-1", kind, "box", "2026-12-06T10:00:00", "0", {"model": "m"})
    store.finish_run("r-1", "interrupted", "2026-12-06T10:00:03", "interrupted (Ctrl-C, SIGTERM or SIGHUP)")
    assert main(["show", "r-1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"no {what} finished before the run ended" in out and "Concurrency" not in out, out
