"""Results that travel both ways: ``tokenbench export`` writes a run as the rows calibrate reads (published.csv)
or as llama-bench's Markdown table, and ``import`` reads either back to the same levels; a serving run with its
requests (imported or measured) anchors the serving and queue model (``calibrate --runs``), and ``predict
--against ROWS --calibration MINE`` prints each row before and after."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.distribution import Distribution
from tokenbench.emitter import BackgroundEmitter
from tokenbench.exports import Placing, _level_of, _rows, published_csv
from tokenbench.finding import Code, Finding
from tokenbench.findings import guard_finding
from tokenbench.guard_results import GuardSnapshot
from tokenbench.levels import DepthLevel, ServingLevel
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.measured import read_rows, steady_state
from tokenbench.predict.own import own_rows
from tokenbench.predict.rows import row_arrivals
from tokenbench.predict.setup import Setup
from tokenbench.predict.specs import Catalog
from tokenbench.reader import load_result
from tokenbench.report.facts import guard_state
from tokenbench.records import RequestRecord
from tokenbench.store import Store

DATA = Path(__file__).parent / "data"
BOX, MODEL, WEIGHTS, KV, ENGINE = "nvidia-h100-sxm", "qwen3.6-27b", "FP8", "FP8", "vllm"


def _levels(db: Path, label: str) -> list[Any]:
    store = Store(db)
    return [s for *_, s in store.levels(store.resolve(label).id)]


def _figures(s: Any) -> tuple[Any, ...]:
    """What published.csv holds of a level: the throughput the tables show, over the level's plateau where it had
    one (an export of the whole window's read 1,735 back where the table had said 1,738)."""
    if isinstance(s, DepthLevel):
        return (s.test, s.depth, s.pp_tps, s.tg_tps)
    assert isinstance(s, ServingLevel)
    return (s.concurrency, round(s.input_tokens_mean or 0), round(s.output_tokens_mean or 0), s.sustained_tps,
            s.ttft_ms.p50, s.ttft_ms.p99, s.tpot_ms.p50)


def _export(db: Path, label: str, fmt: str, out: Path, *extra: str) -> str:
    assert main(["export", label, "--as", fmt, "--out", str(out), "--db", str(db), *extra]) == 0
    return out.read_text()


@pytest.mark.parametrize("name", ["vllm_serve_result.json", "llama_bench.json", "inferencex_agg.json"])
def test_published_csv_reads_back_to_the_same_levels_bit_for_bit(name: str, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    assert main(["import", str(DATA / name), "--label", "src", "--db", str(db)]) == 0
    text = _export(db, "src", "published-csv", tmp_path / "out.csv")
    assert text.startswith("# tokenbench ") and "\nsource,host,hardware," in text
    assert main(["import", str(tmp_path / "out.csv"), "--label", "back", "--db", str(db)]) == 0
    store = Store(db)
    back = next(r for r in store.runs() if (r.label or "").startswith("back"))
    before = sorted(_figures(s) for s in _levels(db, "src"))
    after = sorted(_figures(s) for *_, s in store.levels(back.id))
    assert after == before  # full precision: every figure the same float
    # and the rows are what calibrate reads
    assert len(read_rows(tmp_path / "out.csv")) == text.count("\n") - text.count("\n#") - 2


def test_a_measured_run_carries_its_guard_stamp_and_machine(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    emitter.configure(ttft_s=0.005, itl_s=0.002)
    assert main(["sweep", "--url", emitter.url, "--concurrency", "1,2", "--requests", "6", "--output-len", "8",
                 "--label", "mine", "--quiet", "--db", str(db)]) == 0
    out = tmp_path / "mine.csv"
    text = _export(db, "mine", "published-csv", out, "--hardware", BOX, "--model", MODEL)
    assert "\n# machine: {" in text and "guard" in text.split("\nsource,")[1]
    rows = read_rows(out)
    assert {r.metric for r in rows} == {"output_tps", "ttft_median", "ttft_p99", "tpot_median"}
    assert {r.hardware for r in rows} == {BOX} and {r.concurrency for r in rows} == {1, 2}
    assert all(r.raw["note"].startswith("guard ") for r in rows)
    assert main(["import", str(out), "--label", "back", "--db", str(db)]) == 0
    store = Store(db)
    back = next(r for r in store.runs() if (r.label or "").startswith("back"))
    assert back.manifest["machine"] == store.resolve("mine").manifest["machine"]
    assert sorted(_figures(s) for *_, s in store.levels(back.id)) == sorted(_figures(s) for s in _levels(db, "mine"))


def test_a_session_run_s_cache_mode_is_said_in_each_row_and_by_export(
        emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A session run measures each agent count warm and busted: published.csv has no column for that, and the
    rows lost it without a word. Each row's note now says its level's cache mode, export says in one line that
    import reads the rows back as plain serving levels, and the figures still read back the same."""
    db = tmp_path / "r.db"
    emitter.configure(ttft_s=0.005, itl_s=0.002)
    assert main(["sweep", "--url", emitter.url, "--sessions", "2", "--turns", "2", "--concurrency", "1",
                 "--seed", "3", "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--label", "agents",
                 "--quiet", "--guard", "off", "--no-metrics", "--db", str(db)]) == 0
    capsys.readouterr()
    out = tmp_path / "agents.csv"
    _export(db, "agents", "published-csv", out, "--hardware", BOX)
    rows = read_rows(out)
    err = capsys.readouterr().err
    assert "published.csv has no column for the cache mode" in err and "cache warm and busted" in err
    assert err.count("\n") == 1
    modes = {r.raw["note"].split("; ")[1] for r in rows}  # after the guard stamp
    assert modes == {"cache warm", "cache busted"}
    assert main(["import", str(out), "--label", "back", "--db", str(db)]) == 0
    store = Store(db)
    back = next(r for r in store.runs() if (r.label or "").startswith("back"))
    assert sorted(_figures(s) for *_, s in store.levels(back.id)) == sorted(_figures(s) for s in _levels(db, "agents"))


def test_export_finds_each_rows_level_by_its_cache_mode(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """Export found a row's level by its concurrency and rounded prompt length: where an agent count's warm and
    busted levels round to one length, the busted rows took the warm level's guard stamp and the header counted
    the busted level as left out. The row's cache mode now picks its level."""
    db = tmp_path / "r.db"
    assert main(["sweep", "--url", emitter.url, "--sessions", "2", "--turns", "2", "--concurrency", "1",
                 "--seed", "3", "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--label", "agents",
                 "--quiet", "--guard", "off", "--no-metrics", "--db", str(db)]) == 0
    store = Store(db, readonly=True)
    run = load_result(store, store.resolve("agents", False).id, None)
    warm = next(o.summary for o in run.outcomes if o.summary.session and o.summary.session.cache == "warm")
    # the busted level at the warm one's prompt length, as two levels of close lengths can round
    run = dataclasses.replace(run, outcomes=[
        dataclasses.replace(o, summary=dataclasses.replace(o.summary, input_tokens_mean=warm.input_tokens_mean))
        for o in run.outcomes])
    text = published_csv(run, Placing(hardware=BOX))
    assert "left out" not in text.splitlines()[0], text.splitlines()[0]
    for r in _rows(run, Placing(hardware=BOX)):
        level = next(o.summary for o in run.outcomes if o.idx == _level_of(r, run))
        assert f"cache {level.session.cache}" in r.raw["note"], (r.raw["note"], level.session.cache)


HEAD = "source,host,hardware,engine,model,weights,kv,test,depth,concurrency,input_len,output_len,metric,value,unit,note\n"


def test_a_warm_and_a_busted_level_of_one_prompt_length_stay_two_levels(tmp_path: Path) -> None:
    """An agent count's warm and busted levels can round to one prompt length, and import grouped rows by
    concurrency and that length: the two merged into one level and the busted figures overwrote the warm ones.
    The note's cache mode now keeps them apart, each with its own figures."""
    db = tmp_path / "r.db"
    rows = "".join(f"vm,vm,,vllm,emitter,,,serve,0,2,541,6,{metric},{value},{unit},no guard; cache {mode}\n"
                   for mode, tps, ttft in (("warm", 326.5, 5.4), ("busted", 310.8, 9.1))
                   for metric, value, unit in (("output_tps", tps, "tok/s"), ("ttft_median", ttft, "ms")))
    (out := tmp_path / "agents.csv").write_text(HEAD + rows)
    assert main(["import", str(out), "--db", str(db)]) == 0
    levels = _levels(db, "vm/emitter")
    assert sorted((s.concurrency, s.input_tokens_mean, s.output_throughput_tps, s.ttft_ms.p50) for s in levels) == \
        [(2, 541.0, 310.8, 9.1), (2, 541.0, 326.5, 5.4)]


def test_two_rows_giving_one_level_two_figures_are_refused_naming_both(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Two rows of one level and metric with different values: the later one silently overwrote the earlier.
    Import now refuses the file in one line naming it and both data rows, and stores nothing; a row repeated
    with the same value is one figure and reads as it did."""
    db = tmp_path / "r.db"
    row = "vm,vm,,vllm,emitter,,,serve,0,1,64,32,output_tps,{},tok/s,guard clean\n"
    (same := tmp_path / "same.csv").write_text(HEAD + row.format(178.4) + row.format(178.4))
    (twice := tmp_path / "twice.csv").write_text(HEAD + row.format(178.4) + row.format(150.0))
    assert main(["import", str(twice), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"{twice}: data rows 1 and 2 give one level (test serve, concurrency 1, lengths 64/32) two output_tps " \
        "figures, 178.4 and 150.0" in err and err.count("\n") == 1
    assert not list(Store(db).runs())
    assert main(["import", str(same), "--db", str(db)]) == 0
    assert [s.output_throughput_tps for s in _levels(db, "vm/emitter")] == [178.4]


def test_an_engine_named_with_its_version_is_shown_with_it_once(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped rows name their engine "vllm 0.21" beside version 0.21: the import kept the version in the
    engine and in its version, and show said "engine vllm 0.21 0.21". The engine is now the engine; a word that is
    not the version (llama.cpp's backend) stays."""
    db = str(tmp_path / "r.db")
    head = HEAD.replace(",note", ",version")
    (out := tmp_path / "rows.csv").write_text(
        head + "h100,h100,,vllm 0.21,qwen,FP8,,serve,0,1,512,64,output_tps,75,tok/s,0.21\n"
        "strix,strix,,llama.cpp vulkan,qwen,Q8_0,,serve,0,1,512,64,output_tps,40,tok/s,b6123\n")
    assert main(["import", str(out), "--db", db]) == 0
    runs = {r.label: r.manifest for r in Store(Path(db)).runs()}
    assert (runs["h100/qwen/FP8"]["engine"], runs["h100/qwen/FP8"]["engine_version"]) == ("vllm", "0.21")
    assert (runs["strix/qwen/Q8_0"]["engine"], runs["strix/qwen/Q8_0"]["engine_version"]) == \
        ("llama.cpp vulkan", "b6123")
    capsys.readouterr()
    assert main(["show", "h100/qwen/FP8", "--db", db]) == 0
    assert "model qwen; engine vllm 0.21\n" in (text := capsys.readouterr().out) and "0.21 0.21" not in text


def test_an_empty_weights_field_leaves_no_slash_in_the_label(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A run exported without --weights came back labelled "mine/emitter/": compare then said no run
    "mine/emitter". --label replaces the host in a file of one host and prefixes it in a file of several."""
    db = str(tmp_path / "r.db")
    head = "source,host,hardware,engine,model,weights,kv,test,depth,concurrency,input_len,output_len,metric,value,unit\n"
    row = "vm,{host},,vllm,emitter,,,serve,0,1,64,32,output_tps,178.4,tok/s\n"
    one, two, own = tmp_path / "one.csv", tmp_path / "two.csv", tmp_path / "own.csv"
    one.write_text(head + row.format(host="vm"))
    two.write_text(head + row.format(host="vm") + row.format(host="box"))
    own.write_text(head + row.format(host="vm").replace("178.4", "180.0"))
    assert main(["import", str(one), "--label", "mine", "--db", db]) == 0
    assert main(["import", str(two), "--label", "both", "--db", db]) == 0
    assert main(["import", str(own), "--db", db]) == 0
    labels = sorted(r.label or "" for r in Store(Path(db)).runs())
    assert labels == ["both/box/emitter", "both/vm/emitter", "mine/emitter", "vm/emitter"]
    capsys.readouterr()
    assert main(["compare", "mine/emitter", "vm/emitter", "--db", db]) == 0
    capsys.readouterr()
    # the label as given finds nothing by itself: the runs stored under it are named (it said only "no run")
    assert main(["show", "both", "--db", db]) == 2
    assert "no run 'both' in" in (err := capsys.readouterr().err) and \
        "runs labelled under it: both/box/emitter, both/vm/emitter" in err


@pytest.mark.parametrize("name", ["llama_bench.json", "llama_benchy.json"])
def test_llama_bench_markdown_reads_back_and_writes_the_same_bytes(name: str, tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    assert main(["import", str(DATA / name), "--label", "src", "--db", str(db)]) == 0
    first = _export(db, "src", "llama-bench-md", tmp_path / "a.md")
    assert first.splitlines()[0].startswith("| model ") and " ± " in first
    assert main(["import", str(tmp_path / "a.md"), "--label", "back", "--db", str(db)]) == 0
    src, back = _levels(db, "src"), _levels(db, "back")
    key = lambda s: (s.test, s.depth, s.concurrency)  # noqa: E731
    assert [key(s) for s in back] == [key(s) for s in src]
    for a, b in zip(src, back):  # the table's precision: two decimals
        assert (b.pp_tps, b.tg_tps) == tuple(None if v is None else round(v, 2) for v in (a.pp_tps, a.tg_tps))
    assert _export(db, "back", "llama-bench-md", tmp_path / "b.md") == first  # byte for byte
    if name == "llama_bench.json":  # llama-bench's build line survives
        assert "build: b5a7d8e (6123)" in first and Store(db).resolve("back").manifest["engine_version"] == "b6123"


def test_a_flagged_level_keeps_its_flags_through_the_markdown_table(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A rate its run doubted is never posted as a plain figure: the table gets a flags column (only where a level
    is flagged), and reads back to the same flags; a flag the importer measures itself (a spread over half the
    mean) reads back with its own reading, not the table's mark."""
    db = tmp_path / "r.db"
    assert main(["import", str(DATA / "llama_benchy.json"), "--label", "src", "--db", str(db)]) == 0
    text = _export(db, "src", "llama-bench-md", tmp_path / "a.md")
    head, rule, *rows = text.splitlines()
    assert head.split("|")[-2].strip() == "flags"
    unstable = [r for r in rows if r.rstrip(" |").endswith("unstable")]
    assert len(unstable) == sum("unstable" in s.flags for s in _levels(db, "src")) >= 1
    # a flag no figure in the table shows (a dirty bench) survives only by the column
    first = rows[0].rstrip().rstrip("|").rstrip()
    assert first.endswith("8583.12 ± 1031.64 |")  # pp128, not flagged
    dirty = "\n".join([head, rule, first + " dirty_bench |", *rows[1:]]) + "\n"
    (tmp_path / "b.md").write_text(dirty)
    assert main(["import", str(tmp_path / "b.md"), "--label", "back", "--db", str(db)]) == 0
    back = _levels(db, "back")
    assert [s.flags for s in back] == [["dirty_bench"] if s.test == "pp128" and s.concurrency in (None, 1) and
                                       not s.depth else s.flags for s in _levels(db, "src")]
    doubted = next(s for s in back if "unstable" in s.flags)
    assert doubted.warnings and not any("marked so in the table" in w for w in doubted.warnings)
    (tmp_path / "c.md").write_text(dirty.replace("dirty_bench", "nosuch_flag"))
    capsys.readouterr()
    assert main(["import", str(tmp_path / "c.md"), "--label", "bad", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "'nosuch_flag' is no flag tokenbench knows" in err and len(err.strip().splitlines()) == 1


def test_a_serving_run_is_no_llama_bench_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.db")
    assert main(["import", str(DATA / "vllm_serve_result.json"), "--label", "v", "--db", db]) == 0
    capsys.readouterr()
    assert main(["export", "v", "--as", "llama-bench-md", "--db", db]) == 2
    assert "export it --as published-csv" in capsys.readouterr().err


@pytest.mark.parametrize("fmt", ["published-csv", "llama-bench-md"])
def test_a_prediction_is_not_exported_as_a_measurement(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       fmt: str) -> None:
    """Neither format can mark a row predicted: an exported prediction, imported back, was shown unmarked, compared
    as the faster box and taken by calibrate as four measurements of one's own."""
    db = str(tmp_path / "r.db")
    assert main(["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "gpt-oss-20b", "--engine", "llama.cpp",
                 "--test", "depth", "--depth", "0,32k", "--save", "pred", "--db", db]) == 0
    capsys.readouterr()
    out = tmp_path / "p.out"
    assert main(["export", "pred", "--as", fmt, "--out", str(out), "--db", db]) == 2
    err = capsys.readouterr().err
    assert "is a prediction" in err and len(err.strip().splitlines()) == 1 and not out.exists()


def test_a_run_still_running_is_exported_as_such(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run exported while its second level ran wrote its first level's rows under a header of a finished run,
    with no word of it: import read them back as a run that had ended. compare said it; export now does too."""
    db = tmp_path / "r.db"
    store = Store(db)
    store.create_run("run-live", "sweep", "live", "2026-12-07T03:00:00Z", "0", {"label": "live"})
    level = ServingLevel(concurrency=2, test="serve", completed=8, output_throughput_tps=100.0, input_tokens_mean=128.0,
                         output_tokens_mean=64.0, ttft_ms=Distribution(n=8, p50=30.0, p99=40.0),
                         tpot_ms=Distribution(n=8, p50=5.0))
    store.save_level("run-live", 0, 0, level, [], status="complete", started="t", finished="t", window=(0, 0))
    out = tmp_path / "live.csv"
    assert main(["export", "live", "--as", "published-csv", "--out", str(out), "--db", str(db)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "run live is still running: its rows are of the levels it finished" in err, err
    assert "(running: rows of the levels it finished)" in out.read_text().splitlines()[0]


# --- per-request rows for the queue model ----------------------------------------------------------------------

def _rec(i: int, sent_ms: float, ttft_ms: float, out: int = 128) -> RequestRecord:
    sent = int(sent_ms * 1e6)
    return RequestRecord(index=i, sent_ns=sent, first_token_ns=sent + int(ttft_ms * 1e6), end_ns=sent + 10**9,
                         output_tokens=out)


def test_the_steady_state_leaves_the_start_burst_out() -> None:
    """The queue model keeps a closed loop's first wave (all N prompts at once) apart from its steady state: a
    row read from requests does the same, and says whether the answers varied in length."""
    recs = [_rec(i, i, 900.0) for i in range(4)] + [_rec(4 + i, 1000 + i, 100.0 + i) for i in range(8)]
    ttft, note = steady_state(recs, 4)
    assert ttft == pytest.approx(103.5) and "after the first 4" in note and "spread" not in note
    varied = [_rec(i, i, 100.0, out=64 + 32 * (i % 3)) for i in range(12)]
    assert "arrivals spread" in steady_state(varied, 4)[1]


def _prediction(n: int, prompt: int, output: int) -> tuple[float, float, float]:
    s = Setup.make(Catalog.load(), Calibration.packaged(), BOX, MODEL, WEIGHTS, KV, ENGINE)
    p = s.serve(n, prompt, output)
    assert p.ttft_start_s is not None
    return p.ttft_s.estimate, p.ttft_start_s.estimate, p.tpot_s.estimate


def _vllm_detailed(path: Path, n: int, prompt: int, output: int, slow_ttft: float, slow_tpot: float,
                   rounds: int = 6) -> None:
    """A --save-detailed result of a closed loop of ``n`` agents whose TTFT and TPOT are ``slow_*`` times what the
    packaged calibration predicts (the start's burst at its own predicted TTFT): a box slower than the fit."""
    ttft, ttft_start, tpot = _prediction(n, prompt, output)
    starts, ttfts, lats = [], [], []
    for a in range(n):
        t = 0.0
        for k in range(rounds):
            first = (ttft_start if k == 0 else ttft) * slow_ttft
            lat = first + (output - 1) * tpot * slow_tpot
            starts.append(100.0 + t + a * 1e-4)
            ttfts.append(first)
            lats.append(lat)
            t += lat
    dur = max(s + la for s, la in zip(starts, lats)) - min(starts)
    m = len(starts)
    srt = sorted(ttfts)
    path.write_text(json.dumps({
        "date": "20261115-120000", "backend": "vllm", "model_id": "Qwen/Qwen3.6-27B-FP8", "num_prompts": m,
        "request_rate": "inf", "max_concurrency": n, "duration": dur, "completed": m, "failed": 0,
        "total_input_tokens": prompt * m, "total_output_tokens": output * m, "request_throughput": m / dur,
        "output_throughput": output * m / dur, "median_ttft_ms": srt[m // 2] * 1000,
        "input_lens": [prompt] * m, "output_lens": [output] * m, "ttfts": ttfts,
        "itls": [[tpot * slow_tpot] * (output - 1)] * m, "latencies": lats, "start_times": starts,
        "errors": [""] * m}))


# a full calibration fit with its cross-validation (about a minute alone on 2 cores, several beside
# other tests): make test runs it, make test-fast leaves it out
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_calibrate_runs_fits_the_queue_model_to_imported_requests(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    db, mine, rows = tmp_path / "r.db", tmp_path / "mine.toml", tmp_path / "rows.csv"
    f = tmp_path / "h100-c8.json"
    _vllm_detailed(f, 8, 1024, 128, slow_ttft=1.4, slow_tpot=1.15)
    assert main(["import", str(f), "--label", "h100-mine", "--db", str(db)]) == 0
    place = ["--hardware", BOX, "--model", MODEL, "--weights", WEIGHTS, "--kv", KV, "--engine", ENGINE]
    assert main(["calibrate", "--runs", "h100-mine", *place, "--out", str(mine), "--db", str(db)]) == 0
    said = capsys.readouterr().out
    assert "3 measurements from 1 run of your own" in said
    cal = Calibration.from_toml(mine.read_text(), origin=str(mine))
    assert "anchored on 3 measurements of your own" in cal.efficiency("vllm-cuda").source
    # the row calibrate read: the steady state's TTFT (the burst left out), 1.4x the packaged steady state
    ttft, _, _ = _prediction(8, 1024, 128)
    _export(db, "h100-mine", "published-csv", rows, *place)
    capsys.readouterr()
    assert main(["predict", "--against", str(rows), "--calibration", str(mine), "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["calibration"] == str(mine)
    before = {r["metric"]: r for r in out["before"]["rows"]}
    after = {r["metric"]: r for r in out["after"]["rows"]}
    for metric in ("ttft_median", "tpot_median", "output_tps"):
        assert abs(after[metric]["error_pct"]) < abs(before[metric]["error_pct"]), metric
    assert float(before["ttft_median"]["value"]) == pytest.approx(1.4 * ttft * 1000, rel=1e-6)
    assert main(["predict", "--against", str(rows), "--calibration", str(mine)]) == 0
    table = capsys.readouterr().out
    assert "Before" in table and "After" in table and "rows predicted closer after" in table


def test_calibrate_reads_a_measured_runs_requests_too(tmp_path: Path) -> None:
    """A tokenbench sweep keeps its requests: its rows are read from them as an import's are (a note per row)."""
    from tokenbench.predict.own import own_rows
    from tokenbench.predict.specs import Catalog as Cat

    db = tmp_path / "r.db"
    f = tmp_path / "c4.json"
    _vllm_detailed(f, 4, 1024, 128, slow_ttft=1.0, slow_tpot=1.0)
    assert main(["import", str(f), "--label", "run", "--db", str(db)]) == 0
    rows, _ = own_rows(Store(db), ["run"], False, Cat.load(), BOX, MODEL, ENGINE, WEIGHTS, KV)
    assert {r.metric for r in rows} == {"output_tps", "ttft_median", "tpot_median"}
    assert all("requests, TTFT median of the 20 sent after the first 4" in r.raw["note"] for r in rows)
    assert all(row_arrivals(r) == "together" for r in rows)
    ttft = next(r for r in rows if r.metric == "ttft_median")
    assert math.isclose(ttft.value, _prediction(4, 1024, 128)[0] * 1000, rel_tol=1e-6)


# --- what a level's rows say of it beyond its figures -------------------------------------------------------------

DIRTY = {"clean": False, "checks": [{"name": "cpu_load", "status": "fail", "observed": "load 3.1",
                                     "threshold": "< 0.5", "advice": "stop the build"}]}


def _sweep_run(db: Path) -> None:
    """A measured sweep as the store keeps it (figures a 27B FP8 model can give on an H100): a clean level, one
    whose --duration cut 3 requests unanswered, and one the guard found dirty."""
    def level(c: int, tps: float, guard: dict[str, Any], **kw: Any) -> ServingLevel:
        s = ServingLevel(concurrency=c, test="serve", completed=12, input_tokens_mean=64.0, output_tokens_mean=32.0,
                         output_throughput_tps=tps, ttft_ms=Distribution(n=12, p50=60.0, p99=90.0),
                         tpot_ms=Distribution(n=12, p50=30.0 + c), **kw)
        s.guard = GuardSnapshot.from_dict(guard)
        if (dirty := guard_finding(s.guard, "s-1")) is not None:
            s.add(dirty)
        return s

    cut = level(2, 55.0, {"clean": True, "checks": []}, failed=4, errors={"level_end": 3, "http_500": 1})
    cut.add(Finding(Code.UNANSWERED, "3 requests still unanswered at the level's end and its grace"))
    cut.add(Finding(Code.ERRORS, "1 requests failed", severity="note"))
    manifest = {"label": "mine", "model": "emitter", "engine": "vllm", "weights": WEIGHTS, "guard": "warn",
                "guard_before_run": {"clean": True, "checks": []}, "machine": {"cpu": "x"}}
    Store(db).save_run("s-1", "sweep", "mine", manifest, "measured",
                       [level(1, 30.0, {"clean": True, "checks": []}), cut, level(4, 100.0, DIRTY)], "0",
                       "2026-01-01T00:00:00", "2026-01-01T00:01:00")


def test_a_levels_flags_guard_and_cut_requests_read_back(tmp_path: Path) -> None:
    """published.csv rows came back as plain levels: the unanswered level lost its flag and its cut requests
    (errors.level_end), the dirty level its guard verdict and dirty_bench, and calibrate --runs then took the
    dirty level that it leaves out of the run itself. Each row's note now says its level's state (guard stamp,
    flags, requests, errors), and import reads it back."""
    db = tmp_path / "r.db"
    _sweep_run(db)
    out = tmp_path / "mine.csv"
    _export(db, "mine", "published-csv", out)
    assert main(["import", str(out), "--label", "back", "--db", str(db)]) == 0

    def state(s: Any) -> tuple[Any, ...]:
        return (s.concurrency, s.flags, s.errors, s.completed, s.failed, s.cut, s.guard and s.guard.clean,
                s.guard and [c.name for c in s.guard.failed])

    assert [state(s) for s in _levels(db, "back/emitter/FP8")] == [state(s) for s in _levels(db, "mine")]
    store = Store(db)
    src, back = load_result(store, "mine"), load_result(store, "back/emitter/FP8")
    assert guard_state(back).summary() == guard_state(src).summary() == "DIRTY in 1 of 4 snapshots: cpu_load"

    def used(ref: str) -> list[int]:
        rows, _ = own_rows(store, [ref], False, Catalog.load(), BOX, MODEL, ENGINE, WEIGHTS, KV)
        return sorted({r.concurrency for r in rows})

    assert used("back/emitter/FP8") == used("mine") == [1]  # the failed and the dirty levels left out of both


#: A check at severity warn that did not pass: the bench stays clean, and the snapshot says it.
WARM = {"name": "temperature", "status": "warn", "observed": "GPU 86 C", "threshold": "< 80 C",
        "advice": "let the GPU cool"}


def test_a_clean_guard_s_warnings_read_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A level whose guard passed with a warning came back from export and import as plain "guard clean": the
    report's machine state read "clean (4 snapshots)" in place of "clean with warnings: temperature", and show
    --guard had no check to show. Each row's note says the checks that warned, as a dirty guard's failed ones."""
    db = tmp_path / "r.db"
    store = Store(db)
    levels = []
    for c, guard in ((1, {"clean": True, "checks": [WARM]}), (2, {"clean": True, "checks": []}),
                     (4, {"clean": False, "checks": [*DIRTY["checks"], WARM]})):
        s = ServingLevel(concurrency=c, test="serve", completed=12, input_tokens_mean=64.0, output_tokens_mean=32.0,
                         output_throughput_tps=30.0 * c, ttft_ms=Distribution(n=12, p50=60.0),
                         tpot_ms=Distribution(n=12, p50=30.0 + c))
        s.guard = GuardSnapshot.from_dict(guard)
        if (dirty := guard_finding(s.guard, "s-1")) is not None:
            s.add(dirty)
        levels.append(s)
    manifest = {"label": "mine", "model": "emitter", "engine": "vllm", "weights": WEIGHTS, "guard": "warn"}
    store.save_run("s-1", "sweep", "mine", manifest, "measured", levels, "0", "2026-01-01T00:00:00",
                   "2026-01-01T00:01:00")
    out = tmp_path / "mine.csv"
    assert "guard clean; guard warnings: temperature" in _export(db, "mine", "published-csv", out)
    assert main(["import", str(out), "--label", "back", "--db", str(db)]) == 0
    src, back = load_result(store, "mine"), load_result(Store(db), "back/emitter/FP8")
    assert guard_state(src).summary() == "DIRTY in 1 of 3 snapshots: temperature, cpu_load"
    assert guard_state(back).summary() == guard_state(src).summary()

    def checks(ref: str) -> list[list[tuple[str, str]]]:
        return [[(c.name, c.status) for c in s.guard.results] for s in _levels(db, ref)]

    assert checks("back/emitter/FP8") == checks("mine")
    capsys.readouterr()
    assert main(["show", "back/emitter/FP8", "--guard", "1", "--db", str(db)]) == 0
    shown = capsys.readouterr().out
    assert "level 1/3 (concurrency 1): clean" in shown and "temperature" in shown and "warn" in shown, shown


def test_a_note_that_says_an_unknown_flag_or_two_states_is_refused(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A row's note is read for its level's state: a flag tokenbench does not know, or two rows of one level whose
    notes say two states, is refused in one line naming the data rows; a note of other words is the note's."""
    db = str(tmp_path / "r.db")
    row = "vm,vm,,vllm,emitter,,,serve,0,1,64,32,{},tok/s,{}\n"
    (unknown := tmp_path / "unknown.csv").write_text(HEAD + row.format("output_tps,30", "guard clean; flags: nosuch"))
    (two := tmp_path / "two.csv").write_text(HEAD + row.format("output_tps,30", "guard clean") +
                                             row.format("ttft_median,60", "guard dirty: cpu_load"))
    (words := tmp_path / "words.csv").write_text(HEAD + row.format("output_tps,30", "flagship box; guarded"))
    assert main(["import", str(unknown), "--db", db]) == 2
    err = capsys.readouterr().err
    assert f"{unknown}: data row 1: its note's flag 'nosuch' is no flag tokenbench knows" in err
    assert err.count("\n") == 1
    assert main(["import", str(two), "--db", db]) == 2
    err = capsys.readouterr().err
    assert f"{two}: data rows 1 and 2 give one level (test serve, concurrency 1, lengths 64/32) two states in " \
        "their notes (guard clean; guard dirty: cpu_load)" in err and err.count("\n") == 1
    assert not list(Store(Path(db)).runs())
    assert main(["import", str(words), "--db", db]) == 0
    (s,) = _levels(Path(db), "vm/emitter")
    assert (s.flags, s.guard, s.errors) == ([], None, {})


def test_rows_of_one_host_on_two_engines_boxes_or_dates_are_runs_apart(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Rows of one write-up, host, model and weights were one run whatever engine, box or date they gave: its
    manifest took the first row's, so an sglang level read as vLLM's and an H200's as an H100's (and two rows of
    one level on two engines were refused as two figures). Each engine, box and date is now a run of its own, its
    label adding what tells it from the others."""
    db = str(tmp_path / "r.db")
    head = HEAD.replace(",note", ",date,note")
    ran = [("h100", "vllm", "2025-01", 100.0), ("h100", "sglang", "2025-01", 110.0), ("h200", "vllm", "2025-01", 120.0),
           ("h100", "vllm", "2025-06", 105.0)]
    one = "wu,vm,{},{},emitter,FP8,,serve,0,{},64,32,output_tps,{},tok/s,{},\n"
    (out := tmp_path / "rows.csv").write_text(head + "".join(one.format(hw, engine, 1, tps, date)
                                                             for hw, engine, date, tps in ran))
    (apart := tmp_path / "apart.csv").write_text(head + "".join(one.format(hw, engine, 2 ** i, tps, date)
                                                                for i, (hw, engine, date, tps) in enumerate(ran)))
    assert main(["import", str(apart), "--label", "apart", "--db", db]) == 0  # one level each: they were joined
    assert "4 runs imported" in capsys.readouterr().out
    assert main(["import", str(out), "--db", db]) == 0
    assert "4 runs imported" in capsys.readouterr().out
    runs = {r.label: r for r in Store(Path(db)).runs() if not r.label.startswith("apart")}
    assert sorted(runs) == ["vm/emitter/FP8/sglang/2025-01/h100", "vm/emitter/FP8/vllm/2025-01/h100",
                            "vm/emitter/FP8/vllm/2025-01/h200", "vm/emitter/FP8/vllm/2025-06/h100"]
    for hw, engine, date, tps in ran:
        label = f"vm/emitter/FP8/{engine}/{date}/{hw}"
        m = runs[label].manifest
        assert (m["hardware"], m["engine"], m["started"]) == (hw, engine, date)
        assert [s.output_throughput_tps for s in _levels(Path(db), label)] == [tps]


@pytest.mark.parametrize("name,fmt", [("vllm_serve_result.json", "vllm bench serve"),
                                      ("llama_bench.json", "llama-bench"), ("out.csv", "published.csv")])
def test_show_says_an_imported_run_was_imported_and_from_what(name: str, fmt: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """show of an import printed its figures as a sweep's: nothing said they were another tool's, from which file.
    Its first line now says the file's name (not its directory) and its format; a measured run says nothing."""
    db = str(tmp_path / "r.db")
    src = DATA / name
    if name == "out.csv":
        assert main(["import", str(DATA / "vllm_serve_result.json"), "--label", "v", "--db", db]) == 0
        _export(Path(db), "v", "published-csv", src := tmp_path / name)
    assert main(["import", str(src), "--label", "it", "--db", db]) == 0
    capsys.readouterr()
    ref = "it" if name != "out.csv" else next(r.label for r in Store(Path(db)).runs() if r.label.startswith("it"))
    assert main(["show", ref, "--db", db]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"imported from {name} ({fmt})"
    assert main(["show", ref, "--format", "markdown", "--db", db]) == 0
    out, err = capsys.readouterr()  # Markdown is the table, to be pasted: the line goes beside it, to stderr
    assert f"imported from {name} ({fmt})" in err.splitlines() and "imported from" not in out
    _sweep_run(Path(db))
    assert main(["show", "mine", "--db", db]) == 0
    assert "imported from" not in capsys.readouterr().out


def test_a_llama_bench_run_tokenbench_started_is_not_called_an_import() -> None:
    """depth --llama-bench stores llama-bench's output through the importer, from the model file: show says
    tokenbench ran it, not that the model file was imported."""
    from tokenbench.describe import imported_line
    from tokenbench.results import Manifest

    ran = Manifest.from_dict({"provenance": "imported", "imported_from": "/models/gpt-oss-20b.gguf",
                              "format": "llama-bench", "llama_bench": {"command": "llama-bench -m gpt-oss-20b.gguf"}})
    assert imported_line(ran) == "llama-bench's results, run by tokenbench depth --llama-bench on gpt-oss-20b.gguf"
    assert imported_line(Manifest.from_dict({"provenance": "imported"})) == "imported from a file it did not record"
    assert imported_line(Manifest.from_dict({"provenance": "measured"})) is None


def test_calibration_leaves_out_a_level_with_requests_unanswered(tmp_path: Path) -> None:
    """A level whose end cut requests still unanswered kept only its faster requests' times: calibrate --runs
    took it as the box's speed, where every other flag that says a level is not what the box does left it out."""
    from tokenbench.predict.own import own_rows

    db = tmp_path / "r.db"

    def level(c: int, *findings: Finding) -> ServingLevel:
        s = ServingLevel(concurrency=c, test="serve", completed=12, input_tokens_mean=64.0, output_tokens_mean=32.0,
                         output_throughput_tps=30.0 * c, ttft_ms=Distribution(n=12, p50=60.0, p99=90.0),
                         tpot_ms=Distribution(n=12, p50=30.0 + c), errors={"level_end": 3} if findings else {})
        s.guard = GuardSnapshot.from_dict({"clean": True, "checks": []})
        for f in findings:
            s.add(f)
        return s

    manifest = {"label": "mine", "model": "emitter", "engine": "vllm", "weights": WEIGHTS, "guard": "warn",
                "guard_before_run": {"clean": True, "checks": []}, "machine": {"cpu": "x"}}
    Store(db).save_run("s-2", "sweep", "mine", manifest, "measured",
                       [level(1), level(2, Finding(Code.UNANSWERED, "3 requests still unanswered at its end"))],
                       "0", "2026-01-01T00:00:00", "2026-01-01T00:01:00")
    rows, _ = own_rows(Store(db), ["mine"], False, Catalog.load(), BOX, MODEL, ENGINE, WEIGHTS, KV)
    assert sorted({r.concurrency for r in rows}) == [1]


def test_calibrating_on_an_exported_file_leaves_out_the_levels_its_notes_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """calibrate FILE read every row of a file tokenbench exported, its notes saying a level was dirty or cut
    unanswered, and fitted them as the box's speed, where calibrate --runs of the same run leaves them out. The
    rows are left out and the count said."""
    from tokenbench.predict import entrypoints

    db = tmp_path / "r.db"
    _sweep_run(db)
    out = tmp_path / "mine.csv"  # placed on a box and a model of the catalogs: rows the fit can read
    _export(db, "mine", "published-csv", out, "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b")
    fitted: list[Any] = []

    def fit(cat: Any, rows: list[Any], command: str, bands: bool = True) -> Calibration:  # the rows it was given
        fitted.extend(rows)
        return Calibration.packaged()

    monkeypatch.setattr(entrypoints, "fit_calibration", fit)
    assert main(["calibrate", str(out), "--out", str(tmp_path / "cal.toml")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert {r.concurrency for r in fitted} == {1} and {r.concurrency for r in read_rows(out)} == {1, 2, 4}
    left = sum(1 for r in read_rows(out) if r.concurrency != 1)
    assert f"warning: left out {left} rows whose note says its level is not what the box does" in said, said
    # with runs of your own beside the file, the file's warning stays (the runs' replaced it)
    assert main(["calibrate", str(out), "--runs", "mine", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b",
                 "--out", str(tmp_path / "cal2.toml"), "--db", str(db)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"warning: left out {left} rows whose note says its level is not what the box does" in said, said
    assert "measurements from 1 run of your own" in said, said


def test_calibrate_says_which_rows_of_a_file_it_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An imported vllm bench serve run exported as published.csv, its KV unsaid (an empty cell), fitted nothing:
    calibrate wrote a calibration of no backend and exited 0, and every later predict read UNCALIBRATED. An empty
    KV cell is the engine's own; the rows fitted are counted; a file of no row to fit is refused in one line."""
    db, csv_path = str(tmp_path / "r.db"), tmp_path / "mine.csv"
    assert main(["import", str(DATA / "vllm_serve_result.json"), "--label", "h100-vllm", "--db", db]) == 0
    assert main(["export", "h100-vllm", "--as", "published-csv", "--hardware", "nvidia-h100-sxm", "--model",
                 "qwen3.6-27b", "--weights", "FP8", "--out", str(csv_path), "--db", db]) == 0
    assert read_rows(csv_path)[0].kv == ""
    out = tmp_path / "mine.toml"
    capsys.readouterr()
    assert main(["calibrate", str(csv_path), "--out", str(out)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "fitted 3 of 4 rows; left out 1 row: a metric the fit does not read (ttft_p99)" in said
    assert "vllm-cuda: bandwidth share" in said and "(3 rows;" in said
    assert "[backends.vllm-cuda]" in out.read_text() or "vllm-cuda" in out.read_text()
    bad = tmp_path / "bad.csv"
    bad.write_text(csv_path.read_text().replace(",qwen3.6-27b,", ",no-such-model,"))
    assert main(["calibrate", str(bad), "--out", str(tmp_path / "bad.toml")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no row of" in err and "unknown model 'no-such-model'" in err, err
    assert not (tmp_path / "bad.toml").exists()


def test_an_open_loop_run_is_refused_by_published_csv_for_its_reason(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """An open loop's levels are complete and have their lengths; they were refused as if they had neither."""
    db = tmp_path / "r.db"
    with BackgroundEmitter() as em:
        assert main(["sweep", "--url", em.url, "--rate", "20", "--requests", "8", "--input-len", "16",
                     "--output-len", "8", "--label", "r", "--guard", "off", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["export", "r", "--as", "published-csv", "--out", str(tmp_path / "r.csv"), "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is an open loop (--rate)" in err and "show RUN --json FILE" in err, err
