"""The HTML report as a page to share: runs side by side with machine state and flags, each pair compared
with ratio, winner, crossover and cost beside speed; one colour per run; PREDICTED told apart and drawn
under measured points; log axes where spans are wide; depth ticks as 8K/32K/64K; slide-sized PNGs; no raw
dicts. The page itself is opened in headless Chromium by tests/test_compare_cost_report.py and below."""

from __future__ import annotations

import html as htmllib
import json
import re
import struct
from typing import Any
from pathlib import Path

import pytest

from tokenbench.guard_results import GuardSnapshot
from tokenbench.cli import main
from tokenbench.pricing import Pricing
from tokenbench.distribution import Distribution
from tokenbench.levels import DepthLevel, LevelSummary, ServingLevel
from tokenbench.report import figures, series, style
from tokenbench.emitter import BackgroundEmitter
from tokenbench.store import Store
from tokenbench.reader import load_result

from test_compare_cost_report import CHROMIUM, chromium_dom, figures_in

DATA = Path(__file__).parent / "data"

DIRTY = {"clean": False, "taken": "2026-11-23T10:00:00+0000", "checks": [
    {"name": "cpu_load", "status": "fail", "observed": "85% of all cores busy with other work",
     "threshold": "<= 15%", "advice": "other processes use the CPU: stop them (see top)"},
    {"name": "free_memory", "status": "pass", "observed": "22 GB free (90%)", "threshold": ">= 2 GB", "advice": ""}]}
CLEAN = {"clean": True, "taken": "2026-11-23T10:00:00+0000", "checks": [
    {"name": "cpu_load", "status": "pass", "observed": "2% busy", "threshold": "<= 15%", "advice": ""}]}
MACHINE = {"hostname": "box", "cpu_model": "AMD RYZEN AI MAX+ 395", "cpu_count_logical": 32, "mem_total_gib": 124.0,
           "mem_available_gib": 110.0, "gpus": [], "load_avg": [0.4, 0.3, 0.2]}


def serve(c: int, tps: float, ttft: float, tpot: float, guard: dict[str, Any] | None = None,
          flags: list[str] | None = None) -> LevelSummary:
    s = ServingLevel(concurrency=c, test="serve", output_throughput_tps=tps,
                           ttft_ms=Distribution(n=8, p50=ttft, p99=ttft * 2), tpot_ms=Distribution(n=8, p50=tpot),
                           input_tokens_mean=128.0)
    s.guard, s.flags = GuardSnapshot.from_dict(guard) if guard else None, flags or []  # set on the level, as the sweep does
    return s


def _store(tmp_path: Path) -> Path:
    """A sequential mini PC (owned price) and a batching GPU (rented): the faster box changes with concurrency."""
    db = tmp_path / "r.db"
    store = Store(db)
    store.save_run("run-mini", "sweep", "mini-pc", {
        "label": "mini-pc", "model": "m", "engine": "llama.cpp", "engine_version": "b6000", "price_per_hour": 0.5,
        "currency": "EUR", "machine": MACHINE, "guard": "warn", "guard_before_run": CLEAN,
        "workload": {"input_len": 128, "output_len": 200}, "endpoint": "http://mini:8080/v1"}, "measured",
        [serve(1, 60, 50, 16, guard=CLEAN), serve(4, 62, 400, 16, guard=DIRTY, flags=["dirty_bench"]),
         serve(16, 61, 2000, 16.2, guard=CLEAN)], "0", "2026", "2026")
    store.save_run("run-gpu", "sweep", "gpu", {
        "label": "gpu", "model": "m", "engine": "vllm", "price_per_hour": 1.79, "currency": "EUR",
        "hardware": "nvidia-h100-sxm", "guard": "off", "workload": {"input_len": 128, "output_len": 200}},
        "measured", [serve(1, 40, 80, 25), serve(4, 150, 120, 26), serve(16, 500, 300, 320)], "0", "2026", "2026")
    # a prediction with exactly the GPU's numbers: its markers sit on the measured ones and must not hide them
    store.save_run("run-pred", "predict", "gpu-pred", {"label": "gpu-pred", "model": "m", "predicted": True,
                                                        "hardware": "nvidia-h100-sxm"}, "predicted",
                   [serve(1, 40, 80, 25), serve(4, 150, 120, 26), serve(16, 500, 300, 320)], "0", "2026", "2026")
    return db


def _visible(page: str) -> str:
    """What a reader sees: the page without its scripts and tags."""
    text = re.sub(r"<script\b.*?</script>", "", page, flags=re.S)
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", text))


def _rows(page: str) -> list[str]:
    """Each table row as its cells' text joined by " | "."""
    out = []
    for tr in re.findall(r"<tr\b.*?</tr>", re.sub(r"<script\b.*?</script>", "", page, flags=re.S), flags=re.S):
        cells = re.findall(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", tr, flags=re.S)
        out.append(" | ".join(re.sub(r"\s+", " ", htmllib.unescape(re.sub(r"<[^>]+>", "", c))).strip() for c in cells))
    return out


@pytest.fixture
def page(tmp_path: Path) -> str:
    pytest.importorskip("plotly")
    db = _store(tmp_path)
    out = tmp_path / "report.html"
    assert main(["report", "mini-pc", "gpu", "gpu-pred", "--html", str(out), "--db", str(db)]) == 0
    return out.read_text(encoding="utf-8")


def test_runs_side_by_side_with_machine_state_and_flags(page: str) -> None:
    rows = _rows(page)
    assert rows[0] == " | mini-pc | gpu | gpu-pred (PREDICTED)"
    assert "Source | measured | measured | PREDICTED" in rows
    assert "Machine state | DIRTY in 1 of 4 snapshots: cpu_load | guard off | —" in rows
    assert "Flags | dirty_bench (1 of 3 levels) | none | none" in rows
    assert any(r.startswith("Machine | AMD RYZEN AI MAX+ 395, 32 threads; 124 GiB RAM (110 GiB free)") for r in rows)
    assert "Price | rented at 0.5 EUR/hour | rented at 1.79 EUR/hour | —" in rows
    # the guard's failing check, with what it saw, its threshold and the remedy
    assert ("cpu_load | fail | 85% of all cores busy with other work | <= 15% | other processes use the CPU: stop "
            "them (see top) | concurrency 4 | 1 of 4") in rows


def test_comparison_has_ratio_winner_crossover_and_cost_beside_speed(page: str) -> None:
    rows = _rows(page)
    # cost from the one definition the cost command uses
    mini, gpu = Pricing("EUR", 0.5).per_mtok(60), Pricing("EUR", 1.79).per_mtok(40)
    assert f"{mini:.2f}" == "2.31" and f"{gpu:.1f}" == "12.4"
    # these runs keep no requests (single numbers): no interval, and the winner says the 5% rule named it
    assert ("concurrency 1 | 60.0 tok/s | 40.0 tok/s | 1.50× | mini-pc 1.50× faster (5% rule, no interval) | "
            "2.31 EUR/M | 12.4 EUR/M" in rows)
    assert ("concurrency 16 | 61.0 tok/s | 500 tok/s | 0.12× | gpu 8.20× faster (5% rule, no interval) | 2.28 EUR/M "
            "| 0.994 EUR/M" in rows)
    assert "concurrency 1 | 50.0 ms | 80.0 ms | 0.62× | mini-pc 1.60× lower (5% rule, no interval) | — | —" in rows
    text = _visible(page)
    assert "Crossover: faster box changes between 1 and 4 concurrency (serve Aggregate output): mini-pc then gpu" \
        in re.sub(r"\s+", " ", text)
    assert "gpu-pred is PREDICTED, not measured" in text
    assert ("16 agents × 200 output tokens each: mini-pc: ~51.7 s as one sequential stream (16 requests in turn, "
            "each TTFT 50 ms + 199 x TPOT 16.0 ms)") in text
    # the GPU against its own prediction: every row a tie
    assert "concurrency 4 | 150 tok/s | 150 tok/s | 1.00× | ≈ tie (within 5%, no interval) | 3.31 EUR/M | no price" \
        in rows


def test_no_raw_dicts_anywhere(page: str) -> None:
    text = _visible(page)
    assert not re.search(r"[{\[]\s*['\"]", text), re.search(r".{60}[{\[]\s*['\"].{60}", text)
    assert "': " not in text and '": ' not in text


def test_styles_one_colour_per_run_p50_p99_predicted_log_and_depth_ticks(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.save_run("a", "sweep", "a", {"label": "a"}, "measured",
                   [serve(1, 60, 10, 5), serve(8, 400, 40, 90)], "0", "2026", "2026")
    store.save_run("p", "predict", "p", {"label": "p", "predicted": True}, "predicted",
                   [serve(1, 50, 12, 6), serve(8, 300, 60, 8)], "0", "2026", "2026")
    store.save_run("d", "bench", "d", {"label": "d"}, "imported",
                   [DepthLevel(concurrency=1, test="tg128", depth=d, tg_tps=t)
                    for d, t in ((0, 80.0), (8192, 70.0), (32768, 60.0), (65536, 50.0))], "0", "2026", "2026")
    runs = [load_result(store, r) for r in ("a", "p", "d")]
    plots = {p.id: p for p in series.build(runs)}
    specs = {k: figures.spec(p) for k, p in plots.items()}
    colours: dict[int, set[str]] = {}
    for s in specs.values():
        for t in s["data"]:
            colours.setdefault(t["meta"]["run"], set()).update({t["line"]["color"], t["marker"]["color"]})
    assert colours == {0: {style.colour(0)}, 1: {style.colour(1)}, 2: {style.colour(2)}}
    ttft = specs["ttft"]["data"]
    assert [(t["name"], t["line"]["dash"], t["marker"]["symbol"]) for t in ttft] == [
        ("p (PREDICTED) p50", "dash", "circle-open"), ("p (PREDICTED) p99", "dashdot", "circle-open"),
        ("a p50", "solid", "circle"), ("a p99", "dot", "circle")]  # PREDICTED first: measured drawn on top
    assert specs["tpot"]["layout"]["yaxis"]["type"] == "log"  # 5 to 90 ms: a >10x span
    assert specs["tpot"]["layout"]["yaxis"]["ticktext"] == ["5", "10", "20", "50", "100"]  # 1-2-5, not 2..9
    assert specs["aggregate"]["layout"]["yaxis"]["type"] == "linear"  # 50 to 400 tok/s
    assert specs["aggregate"]["layout"]["xaxis"]["type"] == "log"
    assert specs["aggregate"]["layout"]["xaxis"]["ticktext"] == ["1", "8"]
    assert specs["decode_depth"]["layout"]["xaxis"]["ticktext"] == ["0", "8K", "32K", "64K"]
    assert specs["aggregate"]["config"]["toImageButtonOptions"]["width"] >= 1600
    assert [style.depth_label(d) for d in (512, 8192, 60000, 65536)] == ["512", "8K", "60k", "64K"]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_png_export_is_slide_sized(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    db = _store(tmp_path)
    out = tmp_path / "png"
    assert main(["report", "mini-pc", "gpu-pred", "--png", str(out), "--db", str(db)]) == 0
    sizes = {p.stem: _png_size(p) for p in out.glob("*.png")}
    assert set(sizes) == {"aggregate", "per_agent", "ttft", "tpot", "cost", "interactivity", "cost_interactivity"}
    assert all(w >= 1600 and w * 9 == h * 16 for w, h in sizes.values()), sizes


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (.ci/run installs it: apt-get install chromium)")
def test_measured_points_visible_under_an_identical_prediction(tmp_path: Path, page: str) -> None:
    out = tmp_path / "page.html"
    out.write_text(page, encoding="utf-8")
    dom, _ = chromium_dom(out, tmp_path)
    figs = figures_in(dom)
    assert set(figs) == {"aggregate", "per_agent", "ttft", "tpot", "cost", "interactivity", "cost_interactivity"}
    for fid, f in figs.items():
        by_run: dict[int, int] = {}
        for s in json.loads(f["data-series"]):
            if s["measured"]:
                assert s["drawn"] == s["visible"] == s["expected"] == 3, (fid, s)
                by_run[s["run"]] = by_run.get(s["run"], 0) + s["visible"]
            else:
                assert s["drawn"] == s["expected"] == 3, (fid, s)
        # both measured runs on every plot but cost (the prediction has no price), p50 and p99 on TTFT
        assert by_run == {0: 6 if fid == "ttft" else 3, 1: 6 if fid == "ttft" else 3}, (fid, by_run)


def test_foreign_manifest_fields_do_not_break_the_page(tmp_path: Path) -> None:
    """A store written by another version may hold strings where numbers were: shown or left out, never a crash."""
    pytest.importorskip("plotly")
    db = tmp_path / "f.db"
    Store(db).save_run("odd", "sweep", "odd", {
        "label": "odd", "machine": {"cpu_model": "x", "cpu_count_logical": "many", "mem_total_gib": "lots",
                                    "gpus": "none", "load_avg": ["high"]},
        "workload": {"input_len": "4k", "prefix_len": "some"}, "guard_before_run": {"checks": "n/a"},
        "price_per_hour": 1.0}, "measured", [serve(1, 10, 10, 10)], "0", "2026", "2026")
    out = tmp_path / "odd.html"
    assert main(["report", "odd", "--html", str(out), "--db", str(db)]) == 0
    rows = _rows(out.read_text(encoding="utf-8"))
    assert "Machine | x; no NVIDIA GPU seen" in rows and "Machine state | clean (1 snapshot)" in rows


def test_the_readme_report_example_builds_levels_the_report_reads(tmp_path: Path) -> None:
    # the README says `python docs/report_example.py` makes the screenshots; its hand-made mini-PC levels must stay
    # what a stored run holds (it once called a LevelSummary constructor that no longer exists)
    import importlib.util

    spec = importlib.util.spec_from_file_location("report_example", Path(__file__).parents[1] / "docs" /
                                                  "report_example.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    levels = [example.single_stream(c) for c in example.LEVELS]
    assert all(isinstance(lv, ServingLevel) for lv in levels)
    assert [lv.per_agent_tps for lv in levels] == pytest.approx([lv.output_throughput_tps / lv.concurrency
                                                                 for lv in levels])
    db = tmp_path / "x.db"
    Store(db).save_run("fixture", "sweep", "mini-pc (fixture)", {"label": "mini-pc (fixture)", "model": "emitter"},
                       "measured", levels, "0", "2026", "2026")
    back = load_result(Store(db), "mini-pc (fixture)")
    assert [o.serving.ttft_ms.p50 for o in back.outcomes if o.serving] == [lv.ttft_ms.p50 for lv in levels]


def test_a_report_whose_plots_need_a_missing_package_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Without Plotly, `report --md X --html Y` says what to install and writes neither: it wrote the Markdown
    first, then stopped at the HTML."""
    import importlib.util

    db = str(tmp_path / "r.db")
    data = Path(__file__).resolve().parent / "data" / "guidellm_benchmarks.json"
    assert main(["import", str(data), "--label", "g", "--db", db]) == 0
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a))
    md, page = tmp_path / "BENCHMARKS.md", tmp_path / "report.html"
    capsys.readouterr()
    assert main(["report", "g", "--db", db, "--md", str(md), "--html", str(page)]) == 2
    err = capsys.readouterr().err
    assert "--html needs plotly: pip install 'tokenbench[report]'" in err and len(err.strip().splitlines()) == 1
    assert not md.exists() and not page.exists()


def test_a_tie_within_predicted_bands_says_so_not_the_five_percent_rule() -> None:
    """A measured run against a prediction, TTFT 0.84x: the HTML said "≈ tie (within 5%, no interval)", where
    `compare` says the predicted bands decided it (a 16% difference is no 5% tie)."""
    from tokenbench.compare.levels import CompareRow
    from tokenbench.report.html import _winner

    row = CompareRow("serve", 0, 4, 0, "ttft_ms_p50", "ms", 84.0, 100.0, False, band=(0.51, 2.45))
    assert row.winner() == 0 and row.rule == "predicted bands"
    cell = _winner(None, row)  # type: ignore[arg-type]  # a tie names no side
    assert "within the predicted bands" in cell and "5%" not in cell
    plain = CompareRow("serve", 0, 4, 0, "ttft_ms_p50", "ms", 98.0, 100.0, False)
    assert "≈ tie (within 5%, no interval)" in _winner(None, plain)  # type: ignore[arg-type]


def test_the_html_each_run_table_reads_the_plateau_as_the_terminal_does(tmp_path: Path) -> None:
    """The HTML's run table and plots read a level's whole window (728 tok/s, ramp and drain included) where the
    terminal, the Markdown table and cost read its plateau (733.2)."""
    pytest.importorskip("plotly")
    from tokenbench.steady import Plateau

    db = tmp_path / "p.db"
    s = serve(4, 728.0, 50, 5)
    s.plateau = Plateau(0.1, 1.9, 0.9, 4.0, 733.2, 5.0, Distribution(n=8, p50=50), Distribution(n=8, p50=5), 8)
    Store(db).save_run("run-p", "sweep", "plat", {"label": "plat", "model": "m", "engine": "vllm"}, "measured", [s],
                       "0", "2026", "2026")
    out = tmp_path / "p.html"
    assert main(["report", "plat", "--html", str(out), "--db", str(db)]) == 0
    rows = _rows(out.read_text(encoding="utf-8"))
    level = next(r for r in rows if r.startswith("concurrency 4 |"))
    assert level.split(" | ")[1:3] == ["733", "183"], level  # 733.2 / 4 agents
    assert main(["report", "plat", "--md", str(tmp_path / "p.md"), "--db", str(db)]) == 0
    assert "733" in (tmp_path / "p.md").read_text()


def test_llama_benchy_depth_lines_are_one_per_test_and_concurrency(tmp_path: Path) -> None:
    """llama-benchy runs each test at c1 and c2 and its tg after each pp: one line per test and concurrency, one
    point per depth (two rows at one depth drew a vertical zigzag)."""
    db = str(tmp_path / "r.db")
    assert main(["import", str(Path(__file__).parent / "data" / "llama_benchy.md"), "--db", db]) == 0
    store = Store(Path(db))
    run = load_result(store, store.runs()[0].id)
    plots = {p.id: p for p in series.build([run])}
    decode = {line.name.split(" ", 1)[1]: line for line in plots["decode_depth"].lines}
    assert set(decode) == {"tg32 c1", "tg32 c2"}, list(decode)
    for line in [*decode.values(), *plots["prefill_depth"].lines]:
        assert len(set(line.xs)) == len(line.xs) == 2, (line.name, line.xs)
    assert decode["tg32 c1"].ys == [1044.85, 206.2]  # the last row at each depth, as compare's table


def test_runs_of_one_label_are_named_with_their_ids_and_a_ninth_run_marked_apart(tmp_path: Path) -> None:
    """Two imports of one file share its label: the report names each with its id too (sections read
    "llama_benchy vs llama_benchy"); past the palette's eight colours a run's marks take the next shape."""
    from tokenbench.report.document import ReportConfig, report

    db = tmp_path / "r.db"
    src = Path(__file__).parent / "data" / "vllm_serve_result.json"
    for k in range(2):  # the same content twice is refused as imported before: a copy with one byte more
        f = tmp_path / f"v{k}.json"
        f.write_text(src.read_text() + " " * k)
        assert main(["import", str(f), "--db", str(db), "--label", "same"]) == 0
    ids = [r.id for r in Store(db).runs()]
    rep = report(ReportConfig(tuple(ids)), Store(db, readonly=True))
    names = [r.manifest.label for r in rep.runs]
    assert sorted(names) == sorted(f"same {i}" for i in ids)
    assert all(line.name.startswith(("same ",)) and line.name.split()[1] in ids
               for p in rep.plots for line in p.lines)
    assert [style.marker(False, None, i) for i in (0, 7, 8, 16)] == ["circle", "circle", "square", "triangle-up"]
    assert style.colour(8) == style.colour(0) and style.marker(True, None, 8) == "square-open"
    assert style.marker(False, "busted", 8) == "diamond"


def test_an_open_loop_and_a_trace_are_described_as_run_and_per_agent_left_out_as_the_terminal_does(
        tmp_path: Path) -> None:
    """A trace's workload read "297 in / 24 out tokens per request" (the trace's longest input and output, its
    inputs 162-297), drawn lengths their expected values ("80 in"); and the HTML's run table showed a per-agent
    rate of 180 at 5/s (aggregate 150, 0.83 requests in flight) where the terminal and the Markdown print "—"."""
    pytest.importorskip("plotly")
    db = tmp_path / "o.db"
    store = Store(db)

    def rate(r: float, tps: float, in_flight: float) -> LevelSummary:
        return ServingLevel(concurrency=None, rate=r, test="serve", output_throughput_tps=tps, completed=20,
                            achieved_concurrency=in_flight, ttft_ms=Distribution(n=20, p50=20.0),
                            input_tokens_mean=80.0)

    drawn = {"kind": "uniform", "unit": "tokens", "text": "uniform 32-128", "low": 32.0, "high": 128.0}
    store.save_run("run-open", "sweep", "open", {"label": "open", "model": "m", "workload": {
        "input_len": 80, "output_len": 32, "input": drawn}}, "measured",
        [rate(5, 150.0, 0.83), rate(20, 600.0, 3.3)], "0", "2026", "2026")
    trace = {"path": "traces/t.jsonl", "requests": 16, "speed": 1.0, "input_tokens": 3619, "output_tokens": 208}
    store.save_run("run-trace", "sweep", "traced", {"label": "traced", "model": "m", "workload": {
        "input_len": 297, "output_len": 24, "trace": trace}}, "measured", [rate(3.35, 45.0, 0.3)], "0", "2026",
        "2026")
    store.close()
    page, md = tmp_path / "o.html", tmp_path / "o.md"
    assert main(["report", "open", "traced", "--html", str(page), "--md", str(md), "--db", str(db)]) == 0
    rows = _rows(page.read_text(encoding="utf-8"))
    assert ("Workload | uniform 32-128 in / 32 out tokens per request | trace traces/t.jsonl: 16 requests, mean "
            "226 in / 13 out tokens per request") in rows
    head = next(r for r in rows if r.startswith("Level | ")).split(" | ")
    by_rate = {r.split(" | ")[0]: r.split(" | ") for r in rows if r.startswith("rate ")}
    agent = head.index("Per-agent (tok/s)")
    assert by_rate["rate 5/s"][agent] == "" and by_rate["rate 20/s"][agent] == "182"  # 600 / 3.3
    text = md.read_text(encoding="utf-8")
    assert "workload: uniform 32-128 in / 32 out tokens per request" in text
    assert "workload: trace traces/t.jsonl: 16 requests, mean 226 in / 13 out tokens per request" in text
    assert "| 5/s | 150.0 | — |" in text and "297 in" not in text and "80 in" not in text


def test_a_png_leaves_room_above_its_highest_point() -> None:
    """Two runs' costs close together (3.09-3.12): Matplotlib's margin, 5% of that span, put the axis's top at the
    highest point, its marker cut in half."""
    pytest.importorskip("matplotlib")
    from tokenbench.report import plots

    plot = series.Plot("cost", "Cost per million output tokens vs concurrency", "concurrent agents",
                       "USD per million output tokens", [series.Line("a", [1, 4], [3.10, 3.12]),
                                                         series.Line("b", [1, 4], [3.09, 3.11], run=1)], logx=True)
    fig, plt = plots._figure(plot)
    try:
        bottom, top = fig.axes[0].get_ylim()
    finally:
        plt.close(fig)
    assert bottom == 0 and top >= 3.12 * 1.05, top


def test_a_dataset_run_says_its_workload(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """A run of a user's prompt file had no workload line in its report, where a lengths or a trace run has one:
    the file, the prompts it sent, and where their output lengths came from."""
    db, md = tmp_path / "d.db", tmp_path / "d.md"
    assert main(["sweep", "--url", emitter.url, "--dataset", str(DATA / "prompts.jsonl"), "--output-len", "8",
                 "--concurrency", "1", "--requests", "6", "--warmup", "0", "--guard", "off",
                 "--db", str(db), "--label", "ds", "--quiet"]) == 0
    assert main(["report", "ds", "--md", str(md), "--db", str(db)]) == 0
    line = next(ln for ln in md.read_text(encoding="utf-8").splitlines() if ln.startswith("workload: "))
    assert line.startswith(f"workload: dataset {DATA / 'prompts.jsonl'}: ") and " prompts, " in line
    assert "tokens out" in line or "each with its own output length" in line


def test_a_session_run_with_a_batch_beside_it_says_so_in_its_workload(emitter: BackgroundEmitter,
                                                                      tmp_path: Path) -> None:
    """A run with --background read in report exactly as the same sessions alone: nothing said the batch load."""
    db, md = tmp_path / "b.db", tmp_path / "b.md"
    assert main(["sweep", "--url", emitter.url, "--sessions", "2", "--turns", "2", "--background", "2,64,8",
                 "--no-baseline", "--guard", "off", "--db", str(db), "--label", "beside", "--quiet"]) == 0
    assert main(["report", "beside", "--md", str(md), "--db", str(db)]) == 0
    line = next(ln for ln in md.read_text(encoding="utf-8").splitlines() if ln.startswith("workload: "))
    assert "beside 2 req/s of unique 64-token prompts (8 out)" in line, line


def test_open_loops_are_plotted_against_the_rate_offered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Open loops have no concurrency to plot over: a report of two wrote "0 plots" and "0 PNGs", exit 0. They are
    drawn against the rate offered, as GuideLLM draws its rate sweeps: each run a line through its levels."""
    pytest.importorskip("plotly")
    pytest.importorskip("matplotlib")
    from tokenbench.emitter import BackgroundEmitter, EmitterConfig

    db = str(tmp_path / "r.db")
    # tokens 2 ms apart: sent back to back, a busy machine reads them in one chunk, a TPOT of 0 that has no plot
    with BackgroundEmitter(EmitterConfig(itl_s=0.002)) as em:
        for label, rate in (("r-slow", "5,10"), ("r-fast", "20")):
            assert main(["sweep", "--url", em.url, "--rate", rate, "--requests", "8", "--input-len", "16",
                         "--output-len", "8", "--label", label, "--guard", "off", "--db", db]) == 0
    capsys.readouterr()
    page, pngs, js = tmp_path / "r.html", tmp_path / "png", tmp_path / "r.json"
    assert main(["report", "r-slow", "r-fast", "--html", str(page), "--png", str(pngs), "--json", str(js),
                 "--db", db]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "(3 plots)" in said and "wrote 3 PNGs to" in said, said
    plots = {p["id"]: p for p in json.loads(js.read_text())["plots"]}
    assert set(plots) == {"rate_throughput", "rate_ttft", "rate_tpot"}
    lines = {ln["name"]: ln for ln in plots["rate_throughput"]["lines"]}
    assert [x for x, _ in lines["r-slow"]["points"]] == [5, 10] and [x for x, _ in lines["r-fast"]["points"]] == [20]
    assert all(y > 0 for ln in lines.values() for _, y in ln["points"])
    assert {ln["name"] for ln in plots["rate_ttft"]["lines"]} == {"r-slow p50", "r-slow p99", "r-fast p50",
                                                                  "r-fast p99"}
    assert "vs offered rate (open loop)" in page.read_text() and "Not plotted" not in page.read_text()
