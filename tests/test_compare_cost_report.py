"""Compare, cost, import, report, recommend: golden tables on fixed runs, published cost figures,
importers on real-shaped files, the HTML report in real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.compare.levels import compare, table
from tokenbench.pricing import Pricing, api_in
from tokenbench.errors import UsageError
from tokenbench.importers import import_file
from tokenbench.distribution import Distribution
from tokenbench.emitter import BackgroundEmitter
from tokenbench.levels import LevelSummary, ServingLevel
from tokenbench.store import Store
from tokenbench.reader import load_result

DATA = Path(__file__).parent / "data"
PUBLISHED = Path(__file__).resolve().parents[1] / "src" / "tokenbench" / "data" / "published.csv"  # shipped copy


@pytest.fixture(autouse=True)
def _piped_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The golden tables are read as a pipe gets them (160 columns), whatever the caller's $COLUMNS says."""
    monkeypatch.delenv("COLUMNS", raising=False)


def _run(store: Store, label: str, levels: list[LevelSummary], **manifest: object) -> str:
    rid = f"run-{label}"
    store.save_run(rid, "sweep", label, {"label": label, **manifest}, "measured", levels, "0", "2026", "2026")
    return rid


def serve(c: int, tps: float, ttft: float, tpot: float) -> LevelSummary:
    return ServingLevel(concurrency=c, test="serve", output_throughput_tps=tps,
                              ttft_ms=Distribution(n=8, p50=ttft, p99=ttft * 2), tpot_ms=Distribution(n=8, p50=tpot),
                              input_tokens_mean=128.0)


# --- cost ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("tps", "eur"), [(75, "6.63"), (441, "1.13"), (684, "0.73"), (1284, "0.39")])
def test_cost_reproduces_published_figures(tps: float, eur: str) -> None:
    assert f"{Pricing(currency='EUR', price_per_hour=1.79).per_mtok(tps):.2f}" == eur


def test_owned_and_busy_hours_by_hand() -> None:
    owned = Pricing(currency="EUR", purchase=2500, life_years=3, watts=100, kwh_price=0.25)
    hourly = 2500 / (3 * 365 * 24) + 0.1 * 0.25
    assert owned.effective_hourly() == pytest.approx(hourly)
    assert owned.per_mtok(54) == pytest.approx(hourly / (54 * 3600) * 1e6)
    half = Pricing(currency="EUR", price_per_hour=1.79, busy_hours_per_day=12)
    assert half.per_mtok(684) == pytest.approx(2 * Pricing(currency="EUR", price_per_hour=1.79).per_mtok(684))
    assert api_in("EUR", 14, "USD", 0.9) == pytest.approx(12.6)
    with pytest.raises(UsageError, match="--exchange-rate"):
        api_in("EUR", 14, "USD", None)
    with pytest.raises(UsageError):
        Pricing(currency="EUR")


def test_cost_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--tps", "684", "--price-per-hour", "1.79", "--currency", "EUR", "--api-price", "14",
                 "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| given rate | 684.0 | 0.73 | 14.00 | 19.3x cheaper |" in out  # 14 / 0.7269 = 19.3
    # the issue's own example: an API priced in USD, the box in EUR, no rate given: shown, not guessed
    assert main(["cost", "--tps", "684", "--price-per-hour", "1.79", "--currency", "EUR", "--api-price", "14",
                 "--api-currency", "USD"]) == 0
    assert "API: 14 USD/M output tokens; pass --exchange-rate (EUR per 1 USD)" in capsys.readouterr().out
    assert main(["cost", "--price-per-hour", "1"]) == 2
    assert "give a run, or --tps" in capsys.readouterr().err
    # the limit is named as the option is typed (it said --busy-hours-per-day, which does not exist)
    assert main(["cost", "--tps", "684", "--price-per-hour", "1", "--busy-hours", "25"]) == 2
    assert "--busy-hours must be above 0 and at most 24 (hours a day), got 25" in capsys.readouterr().err


def test_cost_of_a_predicted_run_says_it_is_predicted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """cost printed a saved prediction's prices as a plain table, where show, compare and report name it
    PREDICTED."""
    db = str(tmp_path / "p.db")
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--concurrency", "1,8",
                 "--save", "h100p", "--db", db]) == 0
    capsys.readouterr()
    assert main(["cost", "h100p", "--price-per-hour", "1.79", "--db", db, "--json", str(tmp_path / "c.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("PREDICTED: the rates were predicted, not measured ('tokenbench show h100p' prints their "
                          "bands), so the prices are estimates too. Rented at 1.79 USD/hour")
    assert json.loads((tmp_path / "c.json").read_text())["predicted"] == "PREDICTED"
    assert main(["cost", "--tps", "684", "--price-per-hour", "1.79"]) == 0
    assert "PREDICTED" not in capsys.readouterr().out


def test_cost_in_another_currency_than_the_runs_price_is_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A run swept at 1.5 USD/hour, costed with --currency EUR, printed "rented at 1.5 EUR/hour" and the USD
    figures as EUR ones: a relabelled price, not a converted one."""
    db = tmp_path / "c.db"
    store = Store(db)
    _run(store, "usd", [serve(1, 50.0, 20.0, 10.0)], price_per_hour=1.5, currency="USD")
    store.close()
    assert main(["cost", "usd", "--currency", "EUR", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert "priced at 1.5 USD/hour, not in EUR" in err and len(err.splitlines()) == 1
    assert main(["cost", "usd", "--currency", "EUR", "--price-per-hour", "1.4", "--db", str(db)]) == 0
    assert "1.4 EUR/hour" in " ".join(capsys.readouterr().out.split())
    assert main(["cost", "usd", "--db", str(db)]) == 0
    assert "1.5 USD/hour" in " ".join(capsys.readouterr().out.split())


def test_cost_names_an_open_loop_level_by_its_rate_and_a_trace_level_by_its_trace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An open loop's levels and a trace's level have no concurrency: each read "serve c=None prompt=82", two
    rates alike."""
    db = tmp_path / "c.db"
    store = Store(db)

    def open_loop(rate: float, tps: float) -> LevelSummary:
        return ServingLevel(concurrency=None, rate=rate, test="serve", output_throughput_tps=tps, completed=20,
                            input_tokens_mean=82.0)

    _run(store, "open", [open_loop(5, 150.0), open_loop(20, 600.0)])
    _run(store, "traced", [open_loop(3.35, 45.0)],
         workload={"input_len": 297, "output_len": 24, "trace": {"path": "examples/mooncake-trace.jsonl",
                                                                 "requests": 16, "speed": 1.0}})
    store.close()
    assert main(["cost", "open", "--price-per-hour", "2", "--db", str(db), "--json", str(tmp_path / "o.json")]) == 0
    points = [p["operating_point"] for p in json.loads((tmp_path / "o.json").read_text())["points"]]
    assert points == ["serve 5/s prompt=82", "serve 20/s prompt=82"]
    assert main(["cost", "traced", "--price-per-hour", "2", "--db", str(db), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| serve trace mooncake-trace.jsonl prompt=82 |" in out and "None" not in out


# --- compare ---------------------------------------------------------------------------------------------

def test_compare_golden_table_crossover_and_effective_line(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.db")
    # A: one fast stream (llama.cpp-like, flat); B: batching, slow alone, fast together.
    _run(store, "mini-pc", [serve(1, 60, 50, 16), serve(4, 62, 400, 16), serve(16, 61, 2000, 16)],
         model="m", engine="llama.cpp vulkan")
    _run(store, "gpu", [serve(1, 40, 80, 25), serve(4, 150, 120, 26), serve(16, 500, 300, 32)],
         model="m", engine="vllm")
    c = compare(load_result(store, "mini-pc"), load_result(store, "gpu"), agents=16, tokens=200)
    head, rows = table(c)
    # no row has an interval or a band: the heading promises neither
    assert head == ["Test", "Depth", "Concurrency", "Prompt", "Metric", "A", "B", "A/B", "Faster"]
    # single numbers (no requests, no repetitions): no interval, and the row says the rule that decided it
    agg = [r for r in rows if r[4] == "Aggregate tok/s"]
    assert agg == [
        ["serve", "0", "1", "~128", "Aggregate tok/s", "60.0", "40.0", "1.50", "A 1.50× (5% rule)"],
        ["serve", "0", "4", "~128", "Aggregate tok/s", "62.0", "150", "0.41", "B 2.42× (5% rule)"],
        ["serve", "0", "16", "~128", "Aggregate tok/s", "61.0", "500", "0.12", "B 8.20× (5% rule)"],
    ]
    ttft = [r for r in rows if r[4] == "Median TTFT ms"]
    assert ttft[0][-1] == "A 1.60× (5% rule)"  # lower is better for latency
    assert all(r.interval is None and r.rule == "5% rule" for r in c.rows if r.metric != "P99 TTFT")
    # a p99 of 8 requests is their slowest: no side is named on it
    assert {r[-1] for r in rows if r[4] == "P99 TTFT ms"} == {"— (p99 under 100 requests)"}
    assert any("between 1 and 4 concurrency (serve Aggregate output): mini-pc then gpu" in x for x in c.crossovers)
    # one stream: each request's first token, then its tokens, in turn (16 x 200 / 60 tok/s would be 53.3 s)
    assert c.effective == ["mini-pc: ~51.7 s as one sequential stream (16 requests in turn, each TTFT 50 ms + 199 x "
                           "TPOT 16.0 ms)",
                           "gpu: ~6.7 s batched (16 at once, each request TTFT 300 ms + 199 x TPOT 32.0 ms); 500 tok/s "
                           "aggregate"]  # the first token's wait counted: 16 x 200 / 500 tok/s alone is 6.4 s
    assert c.warnings == [] and c.unmatched == []



def test_compare_sets_no_figure_the_sweep_table_withholds(tmp_path: Path) -> None:
    """A level whose answers came whole in one network read has a median TPOT of 0 that no decode stands behind,
    and the sweep table shows "—" for it and its decode rate: compare set that 0 against the other box's TPOT as a
    real figure. An open loop under one request in flight has no per-agent rate in either."""
    from tokenbench.finding import Code, Finding

    store = Store(tmp_path / "c.db")
    whole = serve(1, 600, 5, 2.5)  # halfway between a whole answer's 0 and a streamed one's TPOT
    whole.add(Finding(Code.ONE_READ, "12 of 16 answers arrived whole in one network read", observed=0.75,
                      severity="note"))
    whole.flags.append(Code.ONE_READ.value)
    steady = [serve(1, 60, 50, 16) for _ in range(2)]
    for lv in (whole, *steady):
        lv.completed = 8  # type: ignore[attr-defined]
    _run(store, "a", [whole], model="m")
    _run(store, "b", [steady[0]], model="m")
    names = {r.metric for r in compare(load_result(store, "a"), load_result(store, "b")).rows}
    assert "Median TTFT" in names and not names & {"Median TPOT", "Decode"}
    _run(store, "c", [steady[1]], model="m")
    assert {"Median TPOT", "Decode"} <= {r.metric for r in compare(load_result(store, "b"),
                                                                   load_result(store, "c")).rows}

def test_levels_only_one_run_has_are_said_not_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep at 1, 2 and 4 beside one at 1, 2 and 8: the table had 1 and 2, and nothing said 4 and 8 were left
    out."""
    store = Store(tmp_path / "c.db")
    _run(store, "a", [serve(c, 60 * c, 50, 16) for c in (1, 2, 4)], model="m")
    _run(store, "b", [serve(c, 50 * c, 60, 18) for c in (1, 2, 8)], model="m")
    c = compare(load_result(store, "a"), load_result(store, "b"))
    assert sorted({r.concurrency for r in c.rows}) == [1, 2]
    assert c.unmatched == ["only A has concurrency 4 at ~128 tokens in", "only B has concurrency 8 at ~128 tokens in"]
    assert main(["compare", "a", "b", "--db", str(tmp_path / "c.db")]) == 0
    assert "not compared: only A has concurrency 4 at ~128 tokens in; only B has concurrency 8 at ~128 tokens in" in \
        " ".join(capsys.readouterr().out.split())


def test_compare_reads_a_level_s_rates_as_the_sweep_table_shows_them(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """show printed 2,719 tok/s of a level (over its plateau, ramp and drain left out) and compare 2,676 of the
    same level (its whole window): compare, recommend and the effective-serving line now read the rate the sweep
    table shows."""
    from tokenbench.steady import Plateau

    store = Store(tmp_path / "c.db")
    a, b = serve(4, 2676, 50, 16), serve(4, 2000, 60, 18)
    assert isinstance(a, ServingLevel)
    a.plateau = Plateau(0.5, 9.5, 0.9, 4.0, 2719.0, 21.0, Distribution(n=8, p50=50), Distribution(n=8, p50=16), 80)
    assert isinstance(b, ServingLevel)  # both over their plateaus (one side's against the other's whole window: below)
    b.plateau = Plateau(0.5, 9.5, 0.9, 4.0, 2050.0, 21.0, Distribution(n=8, p50=60), Distribution(n=8, p50=18), 80)
    _run(store, "a", [serve(1, 700, 40, 14), a], model="m")
    _run(store, "b", [serve(1, 600, 45, 15), b], model="m")
    c = compare(load_result(store, "a"), load_result(store, "b"), agents=4)
    rates = {r.metric: r.a for r in c.rows if r.concurrency == 4}
    assert rates["Aggregate output"] == 2719.0 and rates["Per-agent"] == pytest.approx(2719.0 / 4)
    assert "2,719 tok/s aggregate" in c.effective[0]
    assert main(["show", "a", "--db", str(tmp_path / "c.db")]) == 0
    assert "2,719" in capsys.readouterr().out.split("\n 4 ")[1].split("\n")[0]


def test_compare_warns_on_different_model_shapes_and_still_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "c.db")
    _run(store, "a", [serve(1, 60, 50, 16)], model="qwen3.6-27b", weights="FP8")
    _run(store, "b", [serve(1, 50, 50, 16)], model="qwen3.6-35b-a3b", weights="Q8_0")
    assert main(["compare", "a", "b", "--db", str(tmp_path / "c.db"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "different models (qwen3.6-27b vs qwen3.6-35b-a3b)" in out and "different weight formats" in out
    assert "A = a, B = b" in out
    assert "| serve | 0 | 1 | ~128 | Aggregate tok/s | 60.0 | 50.0 | 1.20 | A 1.20× (5% rule) |" in out
    assert "5% rule: 4 of 5 rows have no interval" in " ".join(out.split())
    assert "p99 under 100 requests: 1 of 5 rows read a p99 from fewer requests" in " ".join(out.split())
    # every line that is not the table's is a paragraph of its own: a line right after a table is one more row
    # (a GFM reader read compare's notes as 17 extra rows)
    blocks = out.strip("\n").split("\n\n")
    table = next(b for b in blocks if b.startswith("| Test |"))
    assert all(ln.startswith("|") for ln in table.splitlines())
    assert not any(ln.startswith("|") for b in blocks if b is not table for ln in b.splitlines())
    assert any(b.startswith("warning: ") for b in blocks) and any(b.startswith("5% rule:") for b in blocks)


def test_two_runs_of_one_label_are_told_apart_by_their_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same command run twice shares its label: compare wrote "A = demo, B = demo" and "demo: ..." lines a
    reader could not place; each side is now its label and run id, in the table and in the JSON."""
    db = str(tmp_path / "c.db")
    store = Store(db)
    for rid, tps in (("20261202-140225-8ad4", 60), ("20261202-140347-8ab7", 50)):
        store.save_run(rid, "sweep", "demo", {"label": "demo"}, "measured", [serve(1, tps, 50, 16)], "0", "2026",
                       "2026")
    assert main(["compare", "20261202-140225", "20261202-140347", "--db", db, "--format", "markdown"]) == 0
    assert "A = demo 20261202-140225-8ad4, B = demo 20261202-140347-8ab7" in capsys.readouterr().out
    assert main(["compare", "20261202-140225", "20261202-140347", "--db", db, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["a"], doc["b"]) == ("demo 20261202-140225-8ad4", "demo 20261202-140347-8ab7")
    _run(store, "other", [serve(1, 40, 50, 16)])
    assert main(["compare", "20261202-140225", "other", "--db", db, "--format", "markdown"]) == 0
    assert "A = demo, B = other" in capsys.readouterr().out  # labels that differ stay as they are


def test_a_served_name_and_the_catalog_id_of_one_model_are_the_same_shape(tmp_path: Path) -> None:
    """A measured vLLM run names Qwen/Qwen3.6-27B-FP8; its prediction names qwen3.6-27b. compare called them
    different models."""
    store = Store(tmp_path / "c.db")
    a = load_result(store, _run(store, "a", [serve(16, 684, 1420, 20)], model="Qwen/Qwen3.6-27B-FP8"))
    b = load_result(store, _run(store, "b", [serve(16, 616, 1282, 26)], model="qwen3.6-27b", weights="FP8"))
    c = load_result(store, _run(store, "c", [serve(16, 500, 900, 30)], model="Qwen/Qwen3.6-35B-A3B-FP8"))
    assert not any("different models" in w for w in compare(a, b).warnings)
    assert any("different models" in w for w in compare(a, c).warnings)
    # a llama-bench import: llama.cpp describes its model as "gpt-oss 20B Q4_K - Medium"; its file names it
    _, (rid,) = import_file(store, DATA / "llama_bench.json", "strix")
    bench = load_result(store, rid)
    d = load_result(store, _run(store, "d", [serve(1, 80, 300, 12)], model="gpt-oss-20b", weights="Q4_K_M"))
    assert not any("different" in w for w in compare(bench, d).warnings)
    assert any("different models (gpt-oss-20b-Q4_K_M.gguf vs qwen3.6-27b)" in w for w in compare(bench, b).warnings)
    # the format a file names is the run's format: a Q8_0 file beside a Q4_K_M prediction is said
    e = load_result(store, _run(store, "e", [serve(1, 80, 300, 12)], model="gpt-oss-20b", weights="Q8_0"))
    assert any("different weight formats (Q4_K_M vs Q8_0)" in w for w in compare(bench, e).warnings)


def test_the_embedded_model_on_two_engines_is_one_model() -> None:
    """The embedded tiny model on Transformers serve (which lists it by its folder's path) against llama-server
    (by its alias): compare warned "different models (/root/.cache/tokenbench/tiny-llama-v2/hf vs
    tokenbench-tiny-llama)"."""
    from tokenbench.compare.sides import model_warnings
    from tokenbench.results import Manifest

    tf = Manifest(model="/home/u/.cache/tokenbench/tiny-llama-v2/hf",
                  embedded={"engine": "transformers", "model": "tokenbench-tiny-llama"})
    llama = Manifest(model="tokenbench-tiny-llama", embedded={"engine": "llama-server", "model": "tokenbench-tiny-llama"})
    small = Manifest(model="tokenbench-small-llama", embedded={"engine": "llama-server", "model": "tokenbench-small-llama"})
    assert model_warnings(tf, llama) == []
    assert model_warnings(tf, small)[0].startswith("the two sides ran different models (tokenbench-tiny-llama vs "
                                                   "tokenbench-small-llama)")


def test_a_server_of_the_embedded_model_runs_the_embedded_model() -> None:
    """A sweep of the embedded engine against a --url run on `engines serve transformers`, which serves the model
    by its folder's path: compare warned "different models (tokenbench-tiny-llama vs
    /root/.cache/tokenbench/tiny-llama-v2/hf)". The folder names the model from any cache, build or machine."""
    from tokenbench.compare.sides import model_warnings
    from tokenbench.results import Manifest

    embedded = Manifest(model="/root/.cache/tokenbench/tiny-llama-v2/hf",
                        embedded={"engine": "transformers", "model": "tokenbench-tiny-llama"})
    assert model_warnings(embedded, Manifest(model="/root/.cache/tokenbench/tiny-llama-v2/hf")) == []
    assert model_warnings(embedded, Manifest(model="/home/u/cache/tiny-llama-v3/hf/")) == []
    assert model_warnings(Manifest(model="tokenbench-small-utf8-llama"),
                          Manifest(model="/c/small-utf8-llama-v1/hf")) == []
    # another size, or a folder of the user's, is another model
    other = model_warnings(embedded, Manifest(model="/root/.cache/tokenbench/small-llama-v1/hf"))
    assert other[0].startswith("the two sides ran different models (tokenbench-tiny-llama vs tokenbench-small-llama)")
    assert "different models (tokenbench-tiny-llama vs /models/llama/hf)" in model_warnings(
        embedded, Manifest(model="/models/llama/hf"))[0]


@pytest.mark.parametrize("name, same_as, weights", [
    ("gpt-oss-20b-UD-Q4_K_XL.gguf", "gpt-oss-20b", "Q4_K_XL"),
    ("gpt-oss-20b-MXFP4_MOE.gguf", "gpt-oss-20b", "MXFP4"),
    ("gpt-oss-20b-Q4_K_M-00001-of-00002.gguf", "gpt-oss-20b", "Q4_K_M"),
    ("qwen3-8b:q4_k_m", "qwen3-8b", "Q4_K_M"),
    ("mlx-community/Qwen3-8B-4bit", "qwen3-8b", "MLX4"),
    ("Qwen/Qwen3-8B-FP8-dynamic", "qwen3-8b", "FP8"),
    ("Qwen3-8B-TQ1_0.gguf", "qwen3-8b", "TQ1_0"),
    ("model-q4_instruct", "model-q4_instruct", None),  # no known format: the name stays whole
    ("kimi-k2-q3", "kimi-k2-q3", None),
    ("llama-2-7b-chat", "llama-2-7b-chat", None),
])
def test_a_model_name_sheds_its_format_and_nothing_else(name: str, same_as: str, weights: str | None) -> None:
    """The audit's names: common GGUF, Ollama and MLX spellings read as another model than their catalog id, and
    an unbounded suffix pattern cut fine-tune names down to their base model."""
    from tokenbench.compare.sides import model_identity

    assert model_identity(name) == (same_as, weights)


def test_published_effective_serving_example(tmp_path: Path) -> None:
    store = Store(tmp_path / "p.db")
    fmt, ids = import_file(store, PUBLISHED)
    assert fmt == "published.csv" and len(ids) == 24
    c = compare(load_result(store, "h100-80gb-sxm/qwen3.6-27b/FP8"), load_result(store, "strix-halo/qwen3.6-35b-a3b/Q8_0"))
    # "16 agents x 200 tokens: ~60 s vs ~5 s"
    assert c.effective == ["h100-80gb-sxm/qwen3.6-27b/FP8: ~5.5 s batched (16 at once, each request TTFT 1,420 ms + "
                           "199 x TPOT 20.3 ms); 684 tok/s aggregate",
                           "strix-halo/qwen3.6-35b-a3b/Q8_0: ~59.3 s as one sequential stream at 54.0 tok/s, "
                           "decoding only: no time to first token measured"]  # its tg128: no prompt time
    assert any("different models" in w for w in c.warnings)
    d = compare(load_result(store, "strix-halo/gpt-oss-20b/Q4_K_M"), load_result(store, "a30/gpt-oss-20b/Q4_K_M"))
    tg = [r for r in d.rows if r.test == "tg128"]
    assert [r.depth for r in tg] == [0, 8192, 32768, 65536] and all(r.winner() == 2 for r in tg)


def test_the_effective_line_builds_on_no_level_flagged_as_no_measurement(tmp_path: Path) -> None:
    """llama-benchy's second tg32 at depth 0 varies 76% of its mean (flagged unstable: not a measurement); the
    effective line read its 650 tok/s, not the steady 1,518 before it."""
    store = Store(tmp_path / "e.db")
    _, (rid,) = import_file(store, DATA / "llama_benchy.json", "benchy")
    c = compare(load_result(store, rid), load_result(store, rid))
    assert c.effective and "at 1,517.9 tok/s" in c.effective[0] and "650" not in c.effective[0], c.effective


def test_compare_cli_takes_llama_bench_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The published write-up's llama-bench rows, Strix Halo beside the A30, through the command (it once
    refused every imported llama-bench run as not a sweep)."""
    db = str(tmp_path / "p.db")
    assert main(["import", str(PUBLISHED), "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "strix-halo/gpt-oss-20b/Q4_K_M", "a30/gpt-oss-20b/Q4_K_M", "--db", db,
                 "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    tg = [r for r in rows if r["test"] == "tg128"]
    assert [r["depth"] for r in tg] == [0, 8192, 32768, 65536]
    assert all(r["winner"] == "a30/gpt-oss-20b/Q4_K_M" and r["ratio"] < 1 for r in tg)
    # published.csv states pp512's prompt length, llama-bench's JSON does not: the row aligns all the same
    assert main(["import", str(DATA / "llama_bench.json"), "--label", "strix-lb", "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "strix-lb", "strix-halo/gpt-oss-20b/Q4_K_M", "--db", db, "--json", "-"]) == 0
    tests = {(r["test"], r["depth"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert ("pp512", 0) in tests and ("tg128", 0) in tests


# --- import ----------------------------------------------------------------------------------------------

def test_import_label_prefixes_hosts_of_a_file_of_several(tmp_path: Path) -> None:
    """--label a30-r740 once relabelled every host, so the Strix Halo rows read as a30-r740/..."""
    one = "source,host,hardware,engine,model,weights,kv,test,depth,concurrency,input_len,output_len,metric,value,unit,note"
    rows = [one, "w1,A30,nvidia-a30,llama.cpp cuda,gpt-oss-20b,Q4_K_M,f16,tg128,0,1,0,128,decode_tps,70,tok/s,",
            "w1,Strix Halo,amd-ryzen-ai-max-395,llama.cpp vulkan,gpt-oss-20b,Q4_K_M,f16,tg128,0,1,0,128,decode_tps,60,tok/s,"]
    f = tmp_path / "two.csv"
    f.write_text("\n".join(rows) + "\n")
    store = Store(tmp_path / "p.db")
    _, ids = import_file(store, f, "lab")
    assert sorted(store.resolve(i).label or "" for i in ids) == ["lab/a30/gpt-oss-20b/Q4_K_M",
                                                                 "lab/strix-halo/gpt-oss-20b/Q4_K_M"]
    g = tmp_path / "one.csv"
    g.write_text("\n".join(rows[:2]) + "\n")
    _, ids = import_file(Store(tmp_path / "q.db"), g, "a30-r740")
    assert Store(tmp_path / "q.db").resolve(ids[0]).label == "a30-r740/gpt-oss-20b/Q4_K_M"


def test_import_vllm_bench_serve(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, DATA / "vllm_serve_result.json", "h100")
    assert fmt == "vllm bench serve"
    run = store.resolve(rid)
    assert run.provenance == "imported" and run.label == "h100" and run.manifest["model"] == "Qwen/Qwen3.6-27B-FP8"
    ((_, _, _, s),) = store.levels(rid)
    assert (s.concurrency, s.output_throughput_tps, s.ttft_ms.p50, s.ttft_ms.p99, s.tpot_ms.p50) == (16, 684.0, 1420.0, 3700.0, 20.3)
    assert s.input_tokens_mean == 4096 and s.per_agent_tps == pytest.approx(684 / 16)


@pytest.mark.parametrize("name", ["llama_bench.json", "llama_bench.jsonl", "llama_bench.csv"])
def test_import_llama_bench(tmp_path: Path, name: str) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, DATA / name, "strix")
    assert fmt == "llama-bench"
    levels = [s for *_, s in store.levels(rid)]
    assert [(s.test, s.depth) for s in levels] == [("pp512", 0), ("tg128", 0), ("tg128", 32768)]
    assert levels[0].pp_tps == 1287.0 and levels[0].pp_tps_sd == 6.8 and levels[2].tg_tps == 56.9
    m = store.resolve(rid).manifest
    assert m["engine"] == "llama.cpp vulkan"
    # llama.cpp's name for the build, which --engine-version and the predictor's eras read; the hash beside it
    assert (m["engine_version"], m["build_commit"]) == ("b6123", "b5a7d8e")


def test_one_llama_bench_repetition_has_no_spread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama-bench -r 1 writes stddev 0: from one sample the spread is unknown, not 0, and is not shown as ± 0.00."""
    recs = json.loads((DATA / "llama_bench.json").read_text())
    recs[0]["samples_ts"], recs[0]["stddev_ts"] = [1287.0], 0.0
    (tmp_path / "r1.json").write_text(json.dumps(recs))
    db = str(tmp_path / "i.db")
    assert main(["import", str(tmp_path / "r1.json"), "--db", db]) == 0
    capsys.readouterr()
    rid = Store(db).runs()[0].id
    assert main(["show", rid, "--db", db]) == 0
    out = capsys.readouterr().out
    assert "1,287.00 ± " not in out and "1,287.00" in out and "80.80 ± 0.40" in out


def test_import_guidellm(tmp_path: Path) -> None:
    store = Store(tmp_path / "i.db")
    fmt, (rid,) = import_file(store, DATA / "guidellm_benchmarks.json")
    assert fmt == "guidellm"
    levels = [s for *_, s in store.levels(rid)]
    assert [(s.concurrency, s.output_throughput_tps, s.ttft_ms.p50) for s in levels] == [(1, 75.0, 243.0), (4, 259.0, 876.0)]
    assert levels[0].e2e_ms.p50 == pytest.approx(6900.0)  # request latency seconds -> ms
    # GuideLLM's inter-token latency is (last token - first) / (tokens - 1), tokenbench's TPOT; its "time per output
    # token" counts from the request's start, and it keeps no gap between chunks (tokenbench's ITL)
    assert [(s.tpot_ms.p50, s.tpot_ms.n, s.itl_ms.n) for s in levels] == [(12.7, 32, 0), (12.7, 32, 0)]


def test_guidellm_profiles_of_both_loops_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A GuideLLM run of a synchronous, a concurrent and a Poisson profile was shown under "Rate" as 1, 8 and
    2/s: its concurrencies read as rates. Its throughput profile's cap is its concurrency."""
    d = json.loads((DATA / "guidellm_benchmarks.json").read_text())
    b = d["benchmarks"][0]
    strategies = [{"type_": "synchronous"}, {"type_": "concurrent", "streams": 8}, {"type_": "poisson", "rate": 2},
                  {"type_": "throughput", "max_concurrency": 16}]
    d["benchmarks"] = [{**b, "config": {**b["config"], "strategy": st}} for st in strategies]
    f = tmp_path / "mixed.json"
    f.write_text(json.dumps(d))
    db = str(tmp_path / "i.db")
    assert main(["import", str(f), "--label", "mixed", "--db", db]) == 0
    capsys.readouterr()
    assert main(["show", "mixed", "--db", db, "--format", "markdown"]) == 0
    rows = [ln.split("|")[1].strip() for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ")]
    assert rows[:5] == ["Load", "c=1", "c=8", "2/s", "c=16"], rows


def test_malformed_import_names_file_and_field_and_stores_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "i.db"
    bad = json.loads((DATA / "guidellm_benchmarks.json").read_text())
    del bad["benchmarks"][1]["metrics"]["output_tokens_per_second"]["successful"]["mean"]
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(bad))
    assert main(["import", str(DATA / "vllm_serve_result.json"), str(f), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert str(f) in err and "benchmarks[1].metrics.output_tokens_per_second.successful.mean: missing" in err
    assert Store(db).runs() == []  # all or nothing: the good file before it is not kept either
    f.write_text('{"completed": "many", "duration": 1, "output_throughput": 2, "median_ttft_ms": 3}')
    assert main(["import", str(f), "--db", str(db)]) == 2
    assert "completed: expected" in capsys.readouterr().err
    f.write_text("hello")
    assert main(["import", str(f), "--db", str(db)]) == 2
    assert "not a format tokenbench imports" in capsys.readouterr().err
    assert Store(db).runs() == []


# --- report ----------------------------------------------------------------------------------------------

HOSTILE = "<script>alert(1)</script>|evil"


def _report_runs(tmp_path: Path) -> Path:
    db = tmp_path / "r.db"
    store = Store(db)
    _run(store, "gpu", [serve(1, 40, 80, 25), serve(4, 150, 120, 26), serve(16, 500, 300, 32)],
         model=HOSTILE, price_per_hour=1.79, currency="EUR")
    import_file(store, DATA / "llama_bench.json", "strix")
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3.6-27b", "--weights", "FP8",
                 "--concurrency", "1,4,16", "--save", "h100-pred", "--db", str(db)]) == 0
    return db


def test_markdown_report_appends_then_rewrites_its_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _report_runs(tmp_path)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\nNotes written by hand.\n")
    for _ in range(2):
        assert main(["report", "gpu", "strix", "h100-pred", "--md", str(md), "--db", str(db)]) == 0
    text = md.read_text()
    assert text.startswith("# Benchmarks\n\nNotes written by hand.")
    assert text.count("<!-- tokenbench:run run-gpu -->") == 1  # rewritten, not appended twice
    assert "## h100-pred (PREDICTED)" in text and "| tg128 @ d32768 | 32,768 | 56.90 ± 0.30 |" in text
    # the prediction's, as predict printed them
    assert "bands (each source's rows predicted by a fit on the others: 80% measured within): vllm-cuda's" in text
    assert "<script>" not in text and "&lt;script>" in text


def _png_width(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[16:20], "big")  # the IHDR chunk's width


def test_html_report_self_contained_escaped_with_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("plotly")
    pytest.importorskip("matplotlib")
    db = _report_runs(tmp_path)
    out = tmp_path / "report.html"
    assert main(["report", "gpu", "strix", "h100-pred", "--html", str(out), "--png", str(tmp_path / "png"),
                 "--db", str(db)]) == 0
    html = out.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # the prediction's bands beside its figures, as predict printed them; the measured runs have none
    assert ('<th class="text">Bands</th><td>—</td><td>—</td><td>bands (each source&#x27;s rows predicted by a fit on '
            'the others: 80% measured within): vllm-cuda&#x27;s') in html
    import re

    # nothing is fetched from elsewhere: every script inline, no stylesheet link, no external image or frame
    tags = re.findall(r"<(?:script|link|img|iframe|object|embed)\b[^>]*>", html)
    assert all(t == "<script>" or t.startswith('<script type="application/json"') for t in tags), set(tags)
    assert "plotly" in html.lower() and len(html) > 1_000_000  # plotly.js inlined, not linked
    ids = {"aggregate", "per_agent", "ttft", "tpot", "decode_depth", "prefill_depth", "cost", "interactivity",
           "cost_interactivity"}
    pngs = {p.stem: p for p in (tmp_path / "png").glob("*.png")}
    assert set(pngs) == ids and all(_png_width(p) >= 1600 for p in pngs.values())
    assert all(f'id="{i}"' in html for i in ids)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def chromium_dom(page: Path, tmp_path: Path) -> tuple[str, str]:
    """The page's DOM once its scripts ran, in headless Chromium that can reach no network at all."""
    proc = subprocess.run(
        ["nice", "-n", "19", str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}",
         "--enable-logging=stderr", "--v=0", "--window-size=1280,2000", "--virtual-time-budget=20000",
         "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=180,
    )
    assert 'data-ready="1"' in proc.stdout, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if "Uncaught" in ln or ("CONSOLE" in ln and "error" in ln.lower())]
    assert errors == []
    return proc.stdout, proc.stderr


def figures_in(dom: str) -> dict[str, dict[str, str]]:
    """Each plot's attributes as the page's check script left them."""
    import html as htmllib
    import re

    out = {}
    for tag in re.findall(r'<figure class="plot"[^>]*>', dom):
        attrs = {k: htmllib.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag)}
        out[attrs["id"]] = attrs
    return out


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (.ci/run installs it: apt-get install chromium)")
def test_html_report_in_headless_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("plotly")
    db = _report_runs(tmp_path)
    evil = '<img src=x onerror="document.title=1">$x^$'
    _run(Store(db), evil, [serve(2, 90, 100, 30)])  # a hostile label: in tables, plot legends and hover text
    out = tmp_path / "report.html"
    assert main(["report", "gpu", "strix", "h100-pred", evil, "--html", str(out), "--db", str(db)]) == 0
    dom, _ = chromium_dom(out, tmp_path)
    figs = figures_in(dom)
    assert set(figs) == {"aggregate", "per_agent", "ttft", "tpot", "decode_depth", "prefill_depth", "cost",
                         "interactivity", "cost_interactivity"}
    # what each measured series should show, counted from the runs themselves: gpu 3 levels (0), strix's
    # llama-bench file 1 pp and 2 tg levels (1); the prediction (2) is drawn too but is not measured
    expected = {"aggregate": {0: 3, 3: 1}, "per_agent": {0: 3, 3: 1}, "ttft": {0: 6, 3: 2}, "tpot": {0: 3, 3: 1},
                "cost": {0: 3}, "interactivity": {0: 3, 3: 1}, "cost_interactivity": {0: 3},
                "prefill_depth": {1: 1}, "decode_depth": {1: 2}}
    for fid, f in figs.items():
        assert "data-error" not in f, f
        series = json.loads(f["data-series"])
        measured: dict[int, int] = {}
        for s in series:
            assert s["drawn"] == s["expected"] > 0, (fid, s)  # every plot rendered every series
            if s["measured"]:
                assert s["visible"] == s["expected"], (fid, s)  # every measured point visible
                measured[s["run"]] = measured.get(s["run"], 0) + s["visible"]
        assert measured == expected[fid], (fid, measured)
        assert f["data-measured-visible"] == f"{f['data-measured-points']}/{f['data-measured-points']}"
    import re

    # no name became markup: the page's only scripts are its own (plotly.js, the boot script, one JSON spec
    # per plot), no <img> was made, and the names are shown as text, in the tables and in the plot legends
    scripts = re.findall(r"<script\b[^>]*>", dom)
    assert scripts.count("<script>") == 2 and len(scripts) == 2 + len(figs), scripts
    assert "<img" not in dom and "<title>tokenbench report</title>" in dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;|evil" in dom
    import html as htmllib

    legends = [htmllib.unescape(t) for t in re.findall(r'class="legendtext"[^>]*>([^<]*)<', dom)]
    assert evil in legends and f"{evil} p99" in legends, legends


# --- recommend -------------------------------------------------------------------------------------------

def test_recommend_ranks_by_cost_and_says_why_others_are_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    _run(Store(db), "my-h100", [serve(16, 700, 1000, 20)], model="qwen3.6-35b-a3b", price_per_hour=1.79)
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "16", "--ttft-p99", "10s", "--currency", "EUR",
                 "--price", "nvidia-l40s=0.9", "--runs", "my-h100", "--db", str(db), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and not ln.startswith("| Rank")]
    costs = [float(r.split("|")[8]) for r in rows]
    assert costs == sorted(costs) and len(rows) >= 3
    assert any("| my-h100 |" in r and "| measured |" in r for r in rows)
    assert any("| nvidia-h100-sxm |" in r and "PREDICTED" in r for r in rows)
    fits = " ".join(out.split()).split("excluded, does not fit", 1)[1].split("excluded", 1)[0]  # wrapped at the width
    assert "nvidia-rtx-3060" in fits and "predicted boxes" in fits
    price = next(ln for ln in out.splitlines() if ln.startswith("excluded, no price (give --price ID=PER_HOUR"))
    assert "nvidia-h200-sxm" in price
    assert "no box meets the SLOs" not in out  # some box meets them: the ranking, no closest boxes
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "16", "--ttft-p99", "10s", "--currency", "EUR",
                 "--price", "nvidia-l40s=0.9", "--runs", "my-h100", "--db", str(db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["closest"] == [] and [c["cost_per_mtok"] for c in doc["ranked"]] == \
        sorted(c["cost_per_mtok"] for c in doc["ranked"])
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "16", "--ttft-p99", "1s", "--db", str(db)]) == 0
    assert "misses TTFT p99" in capsys.readouterr().out


def test_recommend_with_no_box_meeting_the_slos_lists_the_closest(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The README's example printed a table with no rows and two paragraphs of excluded ids. Now the
    closest boxes, by how far each missed (the worst SLO relative to its limit), with the value, the limit and
    PREDICTED; boxes that do not fit come after every SLO miss. Exit 0: an answer, not an error."""
    args = ["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "16", "--ttft-p99", "1.5s", "--currency", "EUR",
            "--db", str(tmp_path / "r.db")]
    assert main(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("no box meets the SLOs; the closest"))
    near = [ln for ln in lines[head + 1:] if re.match(r"  \d+\. ", ln)]
    assert 3 <= len(near) <= 5, out
    # each says the KV cache it assumes, and an uncalibrated estimate says so, as the ranking's Notes do
    assert all("(vllm FP8, fp8 KV, PREDICTED" in ln and "(limit 1.5 s, +" in ln for ln in near[:3]), near
    assert near[0].startswith("  1. amd-mi300x (vllm FP8, fp8 KV, PREDICTED, UNCALIBRATED (vllm-rocm)): "), near
    assert any(ln.startswith("  3. nvidia-h100-sxm") and ln.endswith("; EUR 0.38/M output") for ln in near), near
    assert "Rank" not in out  # no empty table
    excluded = " ".join(" ".join(ln for ln in lines if not re.match(r"  \d+\. ", ln)).split())
    assert "more and the 5 above (27 predicted boxes" in excluded  # the groups name a few, count the rest
    assert main([*args, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ranked"] == [] and len(doc["closest"]) == 5
    misses = [c["relative_miss"] for c in doc["closest"]]
    assert misses == sorted(misses) and all(0 < m < 1 for m in misses)
    first = doc["closest"][0]["misses"][0]
    assert first["slo"] == "TTFT p99" and first["limit_ms"] == 1500 and first["value_ms"] > 1500


def test_closest_boxes_rank_slo_misses_before_memory() -> None:
    from tokenbench.recommend import Candidate, SloMiss, closest, miss_text

    far = Candidate("far", "vllm FP8", "predicted", throughput=100.0, misses=[SloMiss("TTFT p99", 9000, 2000)])
    near = Candidate("near", "vllm FP8", "measured", throughput=100.0,
                     misses=[SloMiss("TPOT", 60, 50), SloMiss("TTFT p99", 2100, 2000)])
    big = Candidate("big", "vllm FP8", "predicted", memory_gb=(25.0, 24.0))
    cannot = Candidate("cannot", "vllm FP8", "predicted", excluded="cannot run it")
    assert [c.box for c in closest([big, far, cannot, near])] == ["near", "far", "big"]
    assert miss_text(far) == "TTFT p99 9 s (limit 2 s, 4.5x)"
    assert miss_text(big) == "does not fit: needs 25 GiB of 24 GiB (+4%)"
    ok = Candidate("ok", "vllm FP8", "predicted", throughput=100.0)
    assert closest([big, far, ok]) == []  # a box meets the SLOs: nothing to list


def test_markdown_output_keeps_the_saved_in_path_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # markdown is pasted or redirected into a file: where the run is stored goes to stderr, whole (at 80 columns
    # it once broke the database's path in two, in the pasted text)
    monkeypatch.setenv("COLUMNS", "80")
    deep = tmp_path / ("a-rather-long-directory-name-" * 3) / "results.db"
    deep.parent.mkdir(parents=True)
    assert main(["import", str(DATA / "guidellm_benchmarks.json"), "--label", "g", "--db", str(deep)]) == 0
    capsys.readouterr()
    assert main(["show", "g", "--db", str(deep), "--format", "markdown"]) == 0
    out, err = capsys.readouterr()
    # shown again, not saved: the line says where it is read from
    assert err.splitlines()[-1].endswith(f") from {deep}") and str(deep) not in out
    # one paragraph of heading, whole however long, then the table
    assert out.splitlines()[0].startswith("model ") and out.splitlines()[2].startswith("|")
    assert main(["show", "g", "--db", str(deep)]) == 0  # a table keeps to the terminal's 80 columns
    assert max(len(ln) for ln in capsys.readouterr().out.splitlines()) <= 80


def test_a_ranked_box_its_band_could_fail_is_said_to() -> None:
    """A box ranked first at a 7.08 s TTFT p99 under a 10 s limit, with a band of ±95%: the slow end of its band
    misses, and a line under the table says so; one whose slow end still meets it, or a measured box, is not named."""
    from tokenbench.candidates import Workload
    from tokenbench.cli.recommend import unsure_line
    from tokenbench.recommend import Candidate, Recommendation

    w = Workload("m", 16, 4096, 512, ttft_p99_ms=10_000, tpot_ms=50)
    l40s = Candidate("nvidia-l40s", "vllm FP8", "predicted", ttft_p99_ms=7082, tpot_ms=40.8,
                     bands={"ttft": 95.0, "tpot": 10.0})
    h100 = Candidate("nvidia-h100-pcie", "vllm FP8", "predicted", ttft_p99_ms=2017, tpot_ms=16.2,
                     bands={"ttft": 88.0, "tpot": 62.0})
    mine = Candidate("my-box", "vllm", "measured", ttft_p99_ms=9000, tpot_ms=45.0)
    line = unsure_line(Recommendation(w, False, [l40s, h100, mine], [], []))
    assert line == ("within their bands these may miss the SLOs: nvidia-l40s (TTFT p99 7.08 s, 13.8 s at the slow "
                    "end of its band, against 10 s)")
    assert unsure_line(Recommendation(w, False, [h100], [], [])) is None
    assert unsure_line(Recommendation(w, True, [l40s], [], [])) is None  # by capacity: the team line says it


def test_a_capacity_band_reads_as_a_range_of_agents() -> None:
    from tokenbench.cli.recommend import band_line
    from tokenbench.recommend import Candidate

    h100 = Candidate("h100", "vllm FP8", "predicted", bands={"throughput": 85.0}, capacity_band=(49, 74, False))
    strix = Candidate("strix", "llama.cpp", "predicted", bands={"throughput": 59.0}, capacity_band=(7, 128, True))
    line = band_line([h100, strix]) or ""
    assert "h100: agents 49 to 74, tok/s ±85%" in line and "strix: agents 7 to at least 128, tok/s ±59%" in line
    # both ends at the search's top read "agents 128 to at least 128"; both ends agreeing, "agents 4 to 4"
    h200 = Candidate("h200", "vllm FP8", "predicted", bands={"throughput": 80.0}, capacity_band=(128, 128, True))
    mini = Candidate("mini", "llama.cpp", "predicted", bands={"throughput": 50.0}, capacity_band=(4, 4, False))
    line = band_line([h200, mini]) or ""
    assert "h200: agents at least 128, tok/s ±80%" in line and "mini: agents 4, tok/s ±50%" in line


def test_compare_says_a_side_was_cut_short_or_ran_on_a_busy_machine(tmp_path: Path) -> None:
    """Two runs of one command on one box, interrupted and on a machine the guard found busy, read "B 1.17x",
    "A 1.37x" and a crossover, without a word of either."""
    store = Store(tmp_path / "r.db")
    busy = serve(2, 90.0, 60.0, 10.0)
    busy.flags.append("dirty_bench")
    _run(store, "one", [serve(1, 50.0, 50.0, 10.0), busy])
    store.finish_run("run-one", "interrupted", "2026")
    bound = serve(2, 100.0, 55.0, 9.0)
    bound.flags.append("client_bound")  # the client's limit, said as the guard's is (it was not, on either side)
    _run(store, "two", [serve(1, 55.0, 45.0, 9.0), bound])
    said = compare(load_result(store, "one"), load_result(store, "two")).warnings
    assert "one was interrupted: its figures are of the levels it finished" in said
    assert "one: 1 of 2 levels ran where the guard found the machine busy (dirty_bench): other work's share is in " \
           "its figures" in said
    assert [w for w in said if w.startswith("two")] == [
        "two: 1 of 2 levels had the client as a limit (client_bound): their timings read late"]


def test_imports_of_one_level_at_4_and_of_repeated_tests_give_the_rows_compare_shows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An AIPerf run measured only at concurrency 4 is served in rounds of 4 by its own medians, not as one
    sequential stream at its aggregate rate; llama-benchy's tg32 at depth 0, run after each pp (its first at 103,549
    tok/s), is the row compare's table shows, and `show` keeps each row's concurrency."""
    monkeypatch.setenv("COLUMNS", "80")
    db = str(tmp_path / "r.db")
    for f in ("llama_benchy.md", "aiperf/profile_export_aiperf.json"):
        assert main(["import", str(DATA / f), "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "llama_benchy", "aiperf", "--db", db, "--agents", "16", "--tokens", "200"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "aiperf: ~11.4 s batched (4 rounds of 4, each TTFT 54 ms + 199 x TPOT 14.1 ms)" in said, said
    assert "llama_benchy: ~3.1 s as one sequential stream at 1,044.8 tok/s" in said and "103,549" not in said, said
    assert main(["show", "llama_benchy", "--db", db]) == 0
    shown = capsys.readouterr().out
    assert "Concurrency" in shown and re.search(r"pp128 @ d0\s+0\s+2\s+7,139\.49 ± 935\.60", shown), shown
    assert "3,706.82 ± 1,990.27" in shown


def test_a_plateau_rate_is_not_set_against_a_whole_window_rate(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """One AIPerf run imported twice: from its requests (tokenbench finds the plateau: 224 tok/s) and from its
    summary (the whole window AIPerf states: 171 tok/s). They read 1.31x apart; compared over the whole window
    both, with a warning that says so, they agree."""
    db = str(tmp_path / "r.db")
    for f, label in (("aiperf/profile_export.jsonl", "requests"), ("aiperf/profile_export_aiperf.json", "summary")):
        assert main(["import", str(DATA / f), "--db", db, "--label", label]) == 0
    ra, rb = (load_result(Store(Path(db)), r) for r in ("requests", "summary"))
    assert ra.outcomes[0].summary.plateau is not None and rb.outcomes[0].summary.plateau is None
    c = compare(ra, rb)
    agg = next(r for r in c.rows if r.metric == "Aggregate output")
    assert agg.ratio == pytest.approx(1.0, abs=0.02), agg
    assert any("both compared over the whole window" in w for w in c.warnings), c.warnings
    # the effective-serving line under it reads the same rate as the table (it read the plateau's 224)
    line = next(e for e in c.effective if e.startswith("requests"))
    assert f"{agg.a:,.0f} tok/s aggregate" in line and "over its whole window, as compared" in line, (line, agg.a)
    # two runs that both have a plateau (or neither) keep the rate the sweep table shows
    assert not any("whole window" in w for w in compare(ra, ra).warnings)


def test_a_run_compared_with_itself_is_said_so_and_its_conditions_once(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "c.db")
    dirty = serve(4, 100, 50, 16)
    dirty.flags.append("dirty_bench")
    _run(store, "a", [dirty], model="m")
    assert main(["compare", "a", "a", "--db", str(tmp_path / "c.db")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "A and B are one run (run-a): every ratio reads 1" in out and out.count("dirty_bench") == 1, out
    assert out.count("~12.9 s batched") == 1, out


def test_markdown_report_of_a_depth_run_keeps_its_flags_and_held_back_rates(tmp_path: Path) -> None:
    """report --md crashed (exit 70) on a depth run with a held-back rate, and posted a doubted rate with its flag
    left off, where depth, show and export --as llama-bench-md keep it."""
    from tokenbench.levels import DepthLevel

    db = tmp_path / "d.db"
    store = Store(db)
    ok = DepthLevel(concurrency=1, test="pp512", depth=0, pp_tps=900.0, pp_tps_sd=10.0)
    doubted = DepthLevel(concurrency=1, test="pp512", depth=4096, pp_tps=135803.7, flags=["timings_disagree"])
    held = DepthLevel(concurrency=1, test="tg128", depth=4096, tg_tps=None, flags=["unstable"])
    _run(store, "deep", [ok, doubted, held], model="m")
    store.close()
    md = tmp_path / "B.md"
    assert main(["report", "deep", "--md", str(md), "--db", str(db)]) == 0
    text = md.read_text()
    assert "| pp512 @ d4096 | 4,096 | 135,803.70 | timings_disagree |" in text
    assert "| tg128 @ d4096 | 4,096 | — | unstable |" in text


def test_depth_rates_within_their_spreads_are_not_called_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A llama-bench import gives mean ± sd and no count, so no interval: the 5% rule named "B 1.15x" of 2,744
    against 3,142 ± 1,031."""
    from tokenbench.compare.levels import compare
    from tokenbench.levels import DepthLevel
    from tokenbench.reader import load_result

    db = tmp_path / "d.db"
    store = Store(db)
    _run(store, "a", [DepthLevel(concurrency=1, test="tg128", depth=0, tg_tps=2744.0, tg_tps_sd=60.0)])
    _run(store, "b", [DepthLevel(concurrency=1, test="tg128", depth=0, tg_tps=3142.0, tg_tps_sd=1031.0)])
    _run(store, "c", [DepthLevel(concurrency=1, test="tg128", depth=0, tg_tps=4000.0, tg_tps_sd=100.0)])
    store.close()
    runs = {k: load_result(Store(db), k) for k in "abc"}
    [row] = compare(runs["a"], runs["b"]).rows
    assert row.winner() == 0 and row.rule == "mean ± sd" and row.interval is None
    [row] = compare(runs["a"], runs["c"]).rows  # apart by more than both spreads: named, by that rule
    assert row.winner() == 2 and row.rule == "mean ± sd"


def test_the_report_names_the_kv_format_as_fit_and_predict_do(tmp_path: Path) -> None:
    """The HTML report wrote "kv AUTO" and "kv FP8" where fit and predict say "auto KV" and "fp8"."""
    db = str(tmp_path / "p.db")
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--concurrency", "1,8",
                 "--save", "h100p", "--db", db]) == 0
    page = tmp_path / "r.html"
    assert main(["report", "h100p", "--html", str(page), "--db", db]) == 0
    html = page.read_text()
    assert "kv auto" in html and "kv AUTO" not in html


def test_open_loop_levels_are_set_beside_the_other_runs_at_the_same_rate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An open loop's levels all have concurrency 0: compare set a run's 2/s level beside another's 0.5/s one, named
    a faster side from it, and dropped the rest without a word. They are paired by rate, and the rest named."""
    store = Store(tmp_path / "r.db")

    def at(rate: float, tps: float) -> LevelSummary:
        s = serve(0, tps, 20.0, 1.0)
        assert isinstance(s, ServingLevel)
        s.rate = rate
        return s

    _run(store, "poisson", [at(0.5, 60.0), at(1.0, 120.0), at(2.0, 300.0)])
    _run(store, "constant", [at(0.5, 62.0)])
    cmp = compare(load_result(store, "poisson"), load_result(store, "constant"))
    tps = next(r for r in cmp.rows if r.unit == "tok/s")
    assert (tps.rate, tps.a, tps.b) == (0.5, 60.0, 62.0), tps
    assert {r.rate for r in cmp.rows} == {0.5}
    assert cmp.unmatched == ["only A has rate 1/s at ~128 tokens in, rate 2/s at ~128 tokens in"]
    assert main(["compare", "poisson", "constant", "--db", str(tmp_path / "r.db")]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "Rate: 0.5/s" in said and "not compared: only A has rate 1/s" in said, said


def test_the_effective_line_and_the_report_withhold_a_tpot_the_table_withholds(emitter: BackgroundEmitter,
                                                                             tmp_path: Path) -> None:
    """A real vLLM level whose answers came whole in one read showed "—" for its median TPOT (0.6 ms is no
    decode), yet compare built "~0.8 s batched (... 199 x TPOT 0.6 ms)" on it, as fast as a llama-server 1.5x its
    throughput, and the report drew the point. Both now leave it out: the line falls back on the level's rate."""
    from tokenbench.report.series import build

    db = str(tmp_path / "r.db")
    for label, burst in (("whole", True), ("streamed", False)):
        emitter.configure(burst=burst, ttft_s=0.002, itl_s=0.002)
        assert main(["sweep", "--url", emitter.url, "--concurrency", "1,2", "--requests", "8", "--warmup", "0",
                     "--input-len", "16", "--output-len", "32", "--guard", "off", "--no-metrics", "--quiet",
                     "--label", label, "--db", db]) == 0
    store = Store(db)
    whole, streamed = load_result(store, "whole"), load_result(store, "streamed")
    assert all("one_read" in o.summary.flags for o in whole.outcomes)
    said = compare(whole, streamed).effective
    mine = next(line for line in said if line.startswith("whole:"))
    assert "TPOT" not in mine and "tok/s aggregate" in mine, said
    assert "x TPOT" in next(line for line in said if line.startswith("streamed:")), said
    tpot = next(p for p in build([whole, streamed]) if p.id == "tpot")
    assert [line.name for line in tpot.lines] == ["streamed"], tpot.lines
    # the HTML's table of each run says "—" there, and the notes under it are the terminal's, with their levels
    # and why the TPOT is withheld (they were the levels' warnings, untagged, without that line)
    page = tmp_path / "r.html"
    assert main(["report", "whole", "--html", str(page), "--db", db]) == 0
    text = page.read_text()
    assert "<td>—</td>" in text and "[1,2] no median TPOT (—)" in text, text[-3000:]
