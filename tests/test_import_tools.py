"""Other tools' outputs, imported: each format on a real file of that tool's output (tests/data/README.md says how
each was made, and with which version), its figures where tokenbench's definitions put them, and its malformed
variants refused in one line that names the file, the line (where it has lines) and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

import pytest

from tokenbench.cli import main
from tokenbench.importers import import_file
from tokenbench.levels import DepthLevel, ServingLevel
from tokenbench.reader import load_result
from tokenbench.store import Store

DATA = Path(__file__).parent / "data"
AIPERF, AIPERF_JSONL = DATA / "aiperf" / "profile_export_aiperf.json", DATA / "aiperf" / "profile_export.jsonl"
INFERENCE_PERF = DATA / "inference_perf" / "per_request_lifecycle_metrics.json"


def _levels(store: Store, rid: str) -> list[Any]:
    return [s for *_, s in store.levels(rid)]


# --- AIPerf ----------------------------------------------------------------------------------------------------

def test_aiperf_summary_keeps_its_figures_under_tokenbenchs_names(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, AIPERF)
    doc = json.loads(AIPERF.read_text())
    assert fmt == "aiperf"
    (s,) = _levels(store, rid)
    assert isinstance(s, ServingLevel) and (s.concurrency, s.completed, s.failed) == (4, 12, 0)
    assert s.output_throughput_tps == doc["output_token_throughput"]["avg"]
    assert s.ttft_ms.p50 == doc["time_to_first_token"]["p50"]
    # AIPerf's "inter_token_latency" is tokenbench's TPOT; its "inter_chunk_latency" is tokenbench's ITL
    assert s.tpot_ms.p50 == doc["inter_token_latency"]["p50"] and s.itl_ms.p50 == doc["inter_chunk_latency"]["p50"]
    m = store.resolve(rid).manifest
    assert (m["tool"], m["tool_version"], m["model"]) == ("aiperf", "0.13.0", "emitter")
    assert "inter_token_latency" in m["definitions"]["tpot_ms"] and "TPOT" in m["definitions"]["tpot_ms"]
    # the lengths asked for, whole numbers as a sweep states them (its config writes 64.0)
    assert (m["workload"]["input_len"], m["workload"]["output_len"]) == (64, 12)
    assert type(m["workload"]["input_len"]) is int
    assert store.requests(rid) == []  # a summary keeps no requests


def test_aiperf_records_make_the_level_aiperf_summarised(tmp_path: Path) -> None:
    """The per-request export through tokenbench's definitions gives AIPerf's own summary of the same run: the
    definitions are reconciled, not merely renamed. Its requests are stored, so compare resamples them."""
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, AIPERF_JSONL, "aiperf-records")
    doc = json.loads(AIPERF.read_text())
    assert fmt == "aiperf"
    (s,) = _levels(store, rid)
    assert s.concurrency == 4  # the summary beside it says the load
    for ours, theirs in (("ttft_ms", "time_to_first_token"), ("tpot_ms", "inter_token_latency"),
                         ("itl_ms", "inter_chunk_latency"), ("e2e_ms", "request_latency")):
        for stat, their_stat in (("p50", "p50"), ("p99", "p99"), ("mean", "avg"), ("max", "max")):
            assert getattr(getattr(s, ours), stat) == pytest.approx(doc[theirs][their_stat], rel=1e-6), (ours, stat)
    assert s.output_throughput_tps == pytest.approx(doc["output_token_throughput"]["avg"], rel=0.02)
    assert (s.completed, s.input_tokens_mean, s.output_tokens_mean) == (12, doc["input_sequence_length"]["avg"],
                                                                         doc["output_sequence_length"]["avg"])
    assert len(store.request_times(rid, 0)) == 12


def test_aiperf_records_alone_take_the_load_from_the_requests_in_flight(tmp_path: Path) -> None:
    alone = tmp_path / "export.jsonl"
    shutil.copy(AIPERF_JSONL, alone)
    store = Store(tmp_path / "i.db")
    _, (rid,) = import_file(store, alone)
    (s,) = _levels(store, rid)
    assert s.concurrency == 4 and "in flight" in store.resolve(rid).manifest["load_from"]


# --- vllm bench serve --save-detailed ---------------------------------------------------------------------------

def test_vllm_detailed_requests_give_vllms_own_figures(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, DATA / "vllm_serve_detailed.json")
    d = json.loads((DATA / "vllm_serve_detailed.json").read_text())
    assert fmt == "vllm bench serve"
    (s,) = _levels(store, rid)
    assert (s.concurrency, s.completed, s.failed) == (4, 16, 0)
    # vLLM's TTFT, TPOT ((latency - TTFT) / (output - 1)) and ITL are tokenbench's: recomputed from the requests
    assert s.ttft_ms.p50 == pytest.approx(d["median_ttft_ms"], rel=1e-6)
    assert s.tpot_ms.p50 == pytest.approx(d["median_tpot_ms"], rel=1e-6)
    assert s.itl_ms.mean == pytest.approx(d["mean_itl_ms"], rel=1e-6)
    assert s.input_tokens_mean == pytest.approx(d["total_input_tokens"] / 16)
    assert len(store.request_times(rid, 0)) == 16
    m = store.resolve(rid).manifest
    assert m["started"] == "2026-12-01T18:56:19" and m["tool_duration_s"] == d["duration"]


# --- inference-perf ---------------------------------------------------------------------------------------------

def test_inference_perf_stages_become_levels(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, INFERENCE_PERF)
    assert fmt == "inference-perf"
    c1, c4 = _levels(store, rid)
    assert (c1.concurrency, c1.completed, c4.concurrency, c4.completed) == (1, 6, 4, 12)
    # the server's usage said 12 output tokens; inference-perf's own tokenizer counted 24
    assert c1.output_tokens_mean == 12 and c1.output_tokens_source == "usage"
    recs = json.loads(INFERENCE_PERF.read_text())
    first = recs[0]
    assert c1.ttft_ms.max >= first["computed_metrics"]["time_to_first_token"] * 1000 - 1e-6
    m = store.resolve(rid).manifest
    assert m["tool"] == "inference-perf" and "last token" in m["definitions"]["tpot_ms"]
    assert [len(store.request_times(rid, i)) for i in (0, 1)] == [6, 12]


# --- llama-benchy -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama_benchy.json", "llama_benchy.csv", "llama_benchy.md"])
def test_llama_benchy_tests_become_depth_levels(tmp_path: Path, name: str) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, DATA / name)
    assert fmt == ("markdown table" if name.endswith(".md") else "llama-benchy")
    levels = _levels(store, rid)
    assert all(isinstance(s, DepthLevel) for s in levels) and len(levels) == 16
    keys = {(s.test, s.depth, s.concurrency) for s in levels}
    assert keys == {(t, d, c) for t in ("pp128", "pp512", "tg32") for d in (0, 256) for c in (1, 2)}
    m = store.resolve(rid).manifest
    assert m["tool"] == "llama-benchy" and "latency" in m["definitions"]["pp_tps"]
    if name.endswith(".json"):
        doc = json.loads((DATA / name).read_text())
        b = doc["benchmarks"][0]
        pp = next(s for s in levels if (s.test, s.depth, s.concurrency) == ("pp128", 0, 1))
        assert (pp.pp_tps, pp.pp_tps_sd) == (b["pp_throughput"]["mean"], b["pp_throughput"]["std"])
        assert pp.client.pp_ms == [round(v, 2) for v in b["e2e_ttft"]["values"]]
        assert m["tool_version"] == "0.4.0"


def test_llama_bench_markdown_keeps_its_build(tmp_path: Path) -> None:
    table = ("| model | size | params | backend | ngl | test | t/s |\n| --- | ---: | ---: | --- | --: | ---: | ---: |\n"
             "| gpt-oss 20B MXFP4 MoE | 11.27 GiB | 20.91 B | Vulkan | 99 | pp512 | 1287.00 ± 6.80 |\n"
             "| gpt-oss 20B MXFP4 MoE | 11.27 GiB | 20.91 B | Vulkan | 99 | tg128 @ d32768 | 56.90 ± 0.10 |\n"
             "\nbuild: b5a7d8e (6123)\n")
    f = tmp_path / "post.md"
    f.write_text(table)
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, f)
    pp, tg = _levels(store, rid)
    assert (pp.test, pp.pp_tps, pp.pp_tps_sd, tg.test, tg.depth, tg.tg_tps) == ("pp512", 1287.0, 6.8, "tg128", 32768,
                                                                                 56.9)
    m = store.resolve(rid).manifest
    assert (m["tool"], m["engine"], m["engine_version"], m["build_commit"]) == ("llama-bench", "llama.cpp vulkan",
                                                                                "b6123", "b5a7d8e")


# --- InferenceX -------------------------------------------------------------------------------------------------

def test_inferencex_rows_are_one_run_per_box_and_setup(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, DATA / "inferencex_agg.json")
    rows = sorted(json.loads((DATA / "inferencex_agg.json").read_text()), key=lambda r: r["conc"])
    assert fmt == "inferencex"
    levels = _levels(store, rid)
    assert [s.concurrency for s in levels] == [1, 2, 4]
    for s, r in zip(levels, rows):
        assert s.output_throughput_tps == pytest.approx(r["output_tput_per_gpu"] * r["tp"])
        assert s.ttft_ms.p50 == pytest.approx(r["median_ttft"] * 1000) and s.tpot_ms.p99 == pytest.approx(
            r["p99_tpot"] * 1000)
        assert (s.input_tokens_mean, s.output_tokens_mean) == (96, 24)
    m = store.resolve(rid).manifest
    assert (m["host"], m["hardware"], m["engine"], m["tool"]) == ("cpu-2c", None, "llama-server", "InferenceX")


def test_inferencex_runner_names_a_catalog_box_and_its_gpus(tmp_path: Path) -> None:
    rows = json.loads((DATA / "inferencex_agg.json").read_text())
    for r in rows:
        r.update(hw="h100-cr", tp=2, framework="vllm", image="vllm/vllm-openai:v0.10.2")
    f = tmp_path / "agg_h100.json"
    f.write_text(json.dumps(rows))
    store = Store(tmp_path / "i.db")
    _, (rid,) = import_file(store, f, "h100")
    m = store.resolve(rid).manifest
    assert (m["hardware"], m["gpus"], m["engine_version"]) == ("nvidia-h100-sxm", 2, "0.10.2")
    assert _levels(store, rid)[0].output_throughput_tps == pytest.approx(rows[1]["output_tput_per_gpu"] * 2)


# --- compare and report read them as measured runs -------------------------------------------------------------

def test_compare_and_report_read_imported_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two per-request imports are compared as two measured runs are: with an interval, resampled over their
    requests; a summary beside them has none (no samples on its side) and says so."""
    db = str(tmp_path / "i.db")
    again = tmp_path / "again"  # the same AIPerf run a second time (another byte, so not "imported before")
    again.mkdir()
    shutil.copy(AIPERF, again / AIPERF.name)
    (again / AIPERF_JSONL.name).write_text(AIPERF_JSONL.read_text().replace('"x_request_id":"', '"x_request_id":"x', 1))
    for f, label in ((AIPERF_JSONL, "a"), (again / AIPERF_JSONL.name, "b"), (AIPERF, "s")):
        assert main(["import", str(f), "--label", label, "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "a", "b", "--db", db, "--json", "-"]) == 0
    rows = {r["metric"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["Median TTFT"]["interval"] is not None and rows["Median TTFT"]["ratio"] == pytest.approx(1.0)
    assert main(["compare", "a", "s", "--db", db, "--json", "-"]) == 0
    rows = {r["metric"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["Median TTFT"]["interval"] is None and rows["Median TTFT"]["rule"] == "5% rule"
    out = tmp_path / "r.json"
    assert main(["import", str(DATA / "vllm_serve_detailed.json"), "--label", "v", "--db", db]) == 0
    assert main(["report", "a", "v", "--json", str(out), "--db", db]) == 0
    assert {r["manifest"]["tool"] for r in json.loads(out.read_text())["runs"]} == {"aiperf", "vllm bench serve"}
    # two llama-benchy runs (its JSON and its CSV, two runs of the same tests): aligned on test, depth, concurrency
    for name, label in (("llama_benchy.json", "benchy-j"), ("llama_benchy.csv", "benchy-c")):
        assert main(["import", str(DATA / name), "--label", label, "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "benchy-j", "benchy-c", "--db", db, "--json", "-"]) == 0
    aligned = {(r["test"], r["depth"], r["concurrency"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert {("pp512", 256, 2), ("tg32", 0, 1)} <= aligned


# --- malformed files: one line, the file, the line and the field, nothing stored --------------------------------

def _json_file(src: Path, change: Callable[[Any], None]) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        d = json.loads(src.read_text())
        change(d)
        p = tmp / src.name
        p.write_text(json.dumps(d))
        return p
    return make


def _lines_file(src: Path, n: int, change: Callable[[Any], Any] | str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        lines = src.read_text().splitlines()
        if isinstance(change, str):
            lines[n - 1] = change
        else:
            rec = json.loads(lines[n - 1])
            change(rec)
            lines[n - 1] = json.dumps(rec)
        p = tmp / src.name
        p.write_text("\n".join(lines) + "\n")
        return p
    return make


def _set(path: list[Any], value: Any) -> Callable[[Any], None]:
    def change(d: Any) -> None:
        for k in path[:-1]:
            d = d[k]
        if value is KeyError:
            del d[path[-1]]
        else:
            d[path[-1]] = value
    return change


BAD: dict[str, tuple[Callable[[Path], Path], str]] = {
    "aiperf summary without its request count": (
        _json_file(AIPERF, _set(["request_count"], KeyError)), "request_count: missing"),
    "aiperf summary in a unit that is no time": (
        _json_file(AIPERF, _set(["time_to_first_token", "unit"], "tokens")), "time_to_first_token.unit"),
    "aiperf summary with a negative TTFT": (
        _json_file(AIPERF, _set(["time_to_first_token", "p50"], -3.0)), "time_to_first_token.p50: -3.0 is negative"),
    "aiperf record that is not JSON": (_lines_file(AIPERF_JSONL, 3, "{\"metadata\": "), "line 3 is not valid JSON"),
    "aiperf record without its TTFT": (
        _lines_file(AIPERF_JSONL, 2, _set(["metrics", "time_to_first_token"], KeyError)),
        "line 2: metrics.time_to_first_token: missing"),
    "aiperf record with a text start time": (
        _lines_file(AIPERF_JSONL, 5, _set(["metadata", "request_start_ns"], "soon")),
        "line 5: metadata.request_start_ns: expected int, got str"),
    "aiperf record with a negative chunk gap": (
        _lines_file(AIPERF_JSONL, 4, _set(["metrics", "inter_chunk_latency", "value", 2], -1.0)),
        "line 4: metrics.inter_chunk_latency.value[2]: -1.0 is negative"),
    "vllm detailed lists of different lengths": (
        _json_file(DATA / "vllm_serve_detailed.json", lambda d: d["ttfts"].pop()), "ttfts: 15 entries where"),
    "vllm detailed with a NaN TTFT": (
        _json_file(DATA / "vllm_serve_detailed.json", _set(["ttfts", 2], "NaN")), "ttfts[2]"),
    "inference-perf request that is no object": (
        _json_file(INFERENCE_PERF, _set([2], "late")), "request 2: expected an object, got str"),
    "inference-perf request without its start": (
        _json_file(INFERENCE_PERF, _set([3, "start_time"], KeyError)), "request 3.start_time: missing"),
    "inference-perf request with no token times": (
        _json_file(INFERENCE_PERF, lambda d: d[1].update(info={}, computed_metrics=None)),
        "request 1: neither info nor computed_metrics"),
    "llama-benchy test without its concurrency": (
        _json_file(DATA / "llama_benchy.json", _set(["benchmarks", 1, "concurrency"], KeyError)),
        "benchmarks[1].concurrency: missing"),
    "llama-benchy rate that is text": (
        _json_file(DATA / "llama_benchy.json", _set(["benchmarks", 0, "tg_throughput", "mean"], "fast")),
        "benchmarks[0].tg_throughput.mean"),
    "llama-benchy CSV test it does not name": (
        _lines_file(DATA / "llama_benchy.csv", 3, "tokenbench-tiny-llama,warmup,1.0,0.0,,,,,,,,,,,,"),
        "line 3: test_name: 'warmup' is not a test"),
    "llama-benchy CSV rate that is text": (
        _lines_file(DATA / "llama_benchy.csv", 4, "tokenbench-tiny-llama,tg32 (c1),fast,0.0,,,,,,,,,,,,"),
        "line 4: t_s_mean: expected a number"),
    "markdown row with a cell missing": (
        _lines_file(DATA / "llama_benchy.md", 5, "| tokenbench-tiny-llama | pp128 (c2) | 1 |"),
        "line 5: 3 cells where the header has 9"),
    "markdown rate that is no rate": (
        _lines_file(DATA / "llama_benchy.md", 4, "| m | tg32 (c1) | quick | | | | | | |"),
        "line 4: t/s: 'quick' is not a rate"),
    "inferencex row without its throughput": (
        _json_file(DATA / "inferencex_agg.json", _set([1, "output_tput_per_gpu"], KeyError)),
        "row 1.output_tput_per_gpu: missing"),
    "inferencex concurrency that is text": (
        _json_file(DATA / "inferencex_agg.json", _set([0, "conc"], "two")), "row 0.conc"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_malformed_file_of_another_tool_is_refused_in_one_line(name: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    make, says = BAD[name]
    path = make(tmp_path)
    db = tmp_path / "r.db"
    code = main(["import", str(path), "--db", str(db)])
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 2, text
    assert len(text.splitlines()) == 1 and "Traceback" not in text
    assert str(path) in text and says in text and "nothing was imported" in text, text
    assert Store(db).runs() == []


def test_every_imported_shape_loads_as_a_result(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.db")
    for f in (AIPERF, AIPERF_JSONL, DATA / "vllm_serve_detailed.json", INFERENCE_PERF, DATA / "llama_benchy.json",
              DATA / "llama_benchy.csv", DATA / "llama_benchy.md", DATA / "inferencex_agg.json"):
        _, ids = import_file(store, f)
        for rid in ids:
            doc = load_result(store, rid).to_json()
            json.loads(json.dumps(doc, allow_nan=False))


def test_an_imported_rate_spread_over_half_its_mean_is_flagged_unstable(tmp_path: Path) -> None:
    """llama-benchy's pp512 at depth 0 reads 3,706.82 ± 1,990.27 tok/s: a spread over half the mean is no
    measurement, whoever measured it, and the row says so (as tokenbench's own depth rows do)."""
    store = Store(tmp_path / "i.db")
    _, (rid,) = import_file(store, DATA / "llama_benchy.md")
    levels = _levels(store, rid)
    flagged = {(s.test, s.depth, s.concurrency) for s in levels if "unstable" in s.flags}
    assert flagged == {("pp512", 0, 1), ("tg32", 256, 1), ("pp512", 256, 1)}
    pp = next(s for s in levels if (s.test, s.depth, s.concurrency) == ("pp512", 0, 1))
    assert any("pp varies 54% of its mean (± 2,000 tok/s, as its file states)" in w for w in pp.warnings)


def test_an_imported_decode_rate_above_every_prefill_rate_is_flagged(tmp_path: Path) -> None:
    """llama-benchy's first tg32 at depth 0 reads 103,549 tok/s beside pp at 6,668 and 3,707: no box decodes
    faster than it prefills. Its other tg rows, below the prefill they sit beside, keep no such flag."""
    store = Store(tmp_path / "i.db")
    _, (rid,) = import_file(store, DATA / "llama_benchy.md")
    flagged = [s for s in _levels(store, rid) if "decode_past_prefill" in s.flags]
    assert [(s.test, s.depth, s.concurrency, s.tg_tps) for s in flagged] == [("tg32", 0, 1, 103549.41)]
    assert "above every prefill rate this run measured at the same depth and concurrency (at most 6,667.5" in \
        flagged[0].warnings[0]
