"""Bands that hold where data is thin: a band per kind of row, borrowed from the widest neighbour where a kind has
too few held-out rows and said so; a MoE model predicted from dense-only rows widens; MLX's server predicted as
what it is; compare of predictions by their bands; llama.cpp's TTFT under load growing with the agents sent
together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.reader import load_result
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.kind import Kind, box_class
from tokenbench.predict.setup import Setup
from tokenbench.predict.specs import Catalog
from tokenbench.store import Store


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return Catalog.load()


@pytest.mark.parametrize("box, klass", [("nvidia-h100-sxm", "datacenter"), ("nvidia-l40s", "datacenter"),
                                        ("nvidia-rtx-4090", "consumer"), ("nvidia-rtx-a6000", "consumer"),
                                        ("amd-radeon-rx-6800-xt", "consumer"), ("amd-ryzen-ai-max-395", "apu"),
                                        ("nvidia-dgx-spark", "apu"), ("nvidia-jetson-agx-orin-64gb", "embedded"),
                                        ("apple-m4-max-40c", "apple"), ("amd-mi300x", "datacenter")])
def test_every_box_has_a_class(cat: Catalog, box: str, klass: str) -> None:
    assert box_class(cat.find_hardware(box)) == klass


def test_a_kind_with_its_own_rows_keeps_its_band_and_a_thin_one_borrows_the_widest(cat: Catalog) -> None:
    cal = Calibration.packaged()
    own = Kind("llamacpp-cuda", "consumer", "single", "dense")
    b = cal.kind_band(own, "decode")
    assert b is not None and not b.borrowed and b == cal.kind_bands[own.key]["decode"] and b.n >= 12
    thin = Kind("llamacpp-metal", "apple", "single", "moe")  # 6 held-out rows of one source
    assert thin.key not in cal.kind_bands
    near = cal.neighbour_band(thin, "decode")
    assert near is not None and near[0].step(thin) == 1
    widest = max(per["decode"].pct for key, per in cal.kind_bands.items()
                 if "decode" in per and Kind.parse(key).step(thin) == 1)
    borrowed = cal.kind_band(thin, "decode")
    assert borrowed is not None and borrowed.borrowed and near[1].pct == widest < borrowed.pct
    assert any(f"too few rows of {thin.words()} of its own" in w for w in borrowed.widened)


def test_a_moe_model_predicted_from_dense_rows_only_widens(cat: Catalog) -> None:
    """H100 vLLM, Qwen3.6-35B-A3B FP8 said "tpot ±1%, throughput ±4%", from one source that measured one dense
    model; it measured one agent 2.8x slower than predicted."""
    cal = Calibration.packaged()
    assert cal.reach["vllm-cuda"]["moe_rows"] == 0 < cal.reach["llamacpp-cuda"]["moe_rows"]
    dense = Setup.make(cat, cal, "nvidia-h100-sxm", "qwen3.6-27b", "FP8", "fp8", "vllm")
    moe = Setup.make(cat, cal, "nvidia-h100-sxm", "qwen3.6-35b-a3b", "FP8", "fp8", "vllm")
    for metric in ("throughput", "tpot", "ttft"):
        bd, bm = dense.band(cal, metric, 4608, 1), moe.band(cal, metric, 4608, 1)
        assert bd is not None and bm is not None and bm.pct > bd.pct, metric
        assert "a MoE model, and vllm-cuda fitted on dense models only" in bm.widened
        assert bm.pct > 50  # 1.2 ms predicted, 3.6 ms measured: a band of a few percent claimed what no row showed
    gpt = Setup.make(cat, cal, "nvidia-dgx-spark", "gpt-oss-20b", "MXFP4", "f16", "llama.cpp")  # MoE rows behind it
    assert not any("dense models only" in w for w in (gpt.band(cal, "decode") or cal.bands["llamacpp-cuda"]["decode"]).widened)


def test_strix_halo_serving_figures_carry_a_band(capsys: pytest.CaptureFixture[str]) -> None:
    """They said "(no CV band)": no serving row of llama.cpp Vulkan, so it borrows its family's, and says so."""
    assert main(["predict", "--hardware", "strix-halo", "--model", "qwen3.6-35b-a3b", "--kv", "q8_0", "--parallel",
                 "16", "--concurrency", "1,8,16"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no CV band" not in out and "borrowed (at least 80%)" in out and "of its own: " in out


@pytest.mark.parametrize("argv", [["--test", "depth", "--depth", "0,8k"],
                                  ["--sessions", "--turns", "4", "--concurrency", "1"]])
def test_a_moe_model_s_one_stream_on_vllm_carries_a_band(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-20b on an H100 with vLLM said "(no CV band)" for its prefill and decode (and its session table
    printed bare figures): no kind one step from it has those metrics' rows, nor does vLLM's family. It borrows
    from a kind two steps away (llama.cpp's rows on a datacenter GPU, or of MoE models), widened, and says so."""
    assert main(["predict", "--hardware", "h100", "--model", "gpt-oss-20b", "--weights", "MXFP4", *argv]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no CV band" not in out and "too few rows held out" not in out
    assert "borrowed (at least 80%)" in out and "of its own: llamacpp-" in out and "(wide)" in out


def test_mlx_server_is_an_engine_of_its_own(cat: Catalog, capsys: pytest.CaptureFixture[str]) -> None:
    from tokenbench import registry

    for name in ("mlx_lm.server", "mlx-lm", "mlx"):
        assert registry.engine(name).name == "mlx" and registry.engine(name).kind == "batching"
    s = Setup.make(cat, Calibration.packaged(), "apple-m4-max-40c", "qwen3-8b", "MLX4", "auto", "mlx_lm.server")
    assert s.backend == "mlx" and not s.calibrated and s.kind == "batching"
    assert main(["predict", "--hardware", "apple-m4-max-40c", "--model", "qwen3-8b", "--engine", "mlx_lm.server",
                 "--weights", "MLX4", "--concurrency", "1,4"]) == 0
    out = capsys.readouterr().out
    assert "UNCALIBRATED" in out and "one stream at a time" not in out  # it batches, and no row stands behind it


def test_compare_of_two_predictions_goes_by_their_bands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.db")
    for box in ("h100", "h200"):
        assert main(["predict", "--hardware", box, "--model", "qwen3.6-35b-a3b", "--weights", "FP8", "--kv", "fp8",
                     "--concurrency", "1,8", "--save", f"{box}-p", "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "h100-p", "h200-p", "--db", db, "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["rule"] == "predicted bands" and r["band"] for r in rows)
    ttft = next(r for r in rows if r["metric"] == "Median TTFT")
    assert ttft["band"][0] < 1 < ttft["band"][1] and ttft["winner"] is None  # within each other's bands: no winner


def test_a_predicted_sides_band_stops_at_its_physical_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """compare held a predicted side anywhere within its band, where predict holds the band's fast end at the
    physical limit (a time's floor, a rate's ceiling): an H100's predicted TTFT band reached 0.34 of its figure,
    below its floor at 0.39, a time no measurement passes. Against a measured run the band stops at the floor."""
    from tokenbench.distribution import Distribution
    from tokenbench.levels import ServingLevel
    from tokenbench.store import Store

    db = tmp_path / "r.db"
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--concurrency", "1,8",
                 "--save", "p", "--db", str(db), "--json", str(tmp_path / "p.json")]) == 0
    predicted = {lv["concurrency"]: lv for lv in json.loads((tmp_path / "p.json").read_text())["levels"]}
    assert all(set(lv["limits"]) == {"output_throughput_tps", "ttft_ms", "ttft_p99_ms", "tpot_ms"}
               for lv in predicted.values())
    measured = [ServingLevel(concurrency=c, test="serve", output_throughput_tps=tps, input_tokens_mean=4096.0,
                             output_tokens_mean=512.0, ttft_ms=Distribution(n=16, p50=ttft, p99=ttft * 1.5),
                             tpot_ms=Distribution(n=16, p50=tpot))
                for c, tps, ttft, tpot in ((1, 120.0, 200.0, 8.0), (8, 650.0, 700.0, 11.0))]
    Store(db).save_run("run-m", "sweep", "m", {"label": "m"}, "measured", measured, "0", "2026", "2026")
    capsys.readouterr()
    assert main(["compare", "p", "m", "--db", str(db), "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    fields = {"Median TTFT": ("ttft_ms", "p50"), "Median TPOT": ("tpot_ms", "p50"),
              "Aggregate output": ("output_throughput_tps", None)}
    # a measured p99 of 16 requests is their slowest one or two: no side named on it, against a prediction too
    p99 = [r for r in rows if r["metric"] == "P99 TTFT"]
    assert p99 and all(r["thin"] and r["band"] is None and r["winner"] is None for r in p99), p99
    held = 0
    for r in (r for r in rows if r["metric"] in fields):
        key, pct = fields[r["metric"]]
        lv = predicted[r["concurrency"]]
        limit = lv["limits"][key]
        assert r["a"] == pytest.approx(lv[key][pct] if pct else lv[key]), r
        if r["metric"] == "Aggregate output":  # A at most its ceiling: A/B at most ceiling / B
            assert r["band"][1] <= limit / r["b"] * (1 + 1e-9), (r, limit)
            continue
        assert r["band"][0] >= limit / r["b"] * (1 - 1e-9), (r, limit)  # A at least its floor
        ratio = r["a"] / r["b"]
        x = r["band"][1] / ratio - 1  # the band's share, from its slow end (which no limit holds)
        held += ratio * (1 - x) < r["band"][0] * (1 - 1e-6)  # its fast end, unheld, would have passed the floor
    assert held, "no row's band reached past its floor: the test no longer tries what it is for"


def test_a_band_stops_where_its_side_cannot_go() -> None:
    """A predicted time within ±103% could alone be zero, and A/B unbounded; its floor (0.71 of it) bounds A/B. A
    rate's ceiling holds the top of its band, and nothing its bottom."""
    from tokenbench.compare.levels import band_range

    assert band_range(0.25, 0.0, 1.03, False) == (pytest.approx(0.25 / 2.03), float("inf"))
    assert band_range(0.25, 0.0, 1.03, False, (None, 0.71)) == pytest.approx((0.25 / 2.03, 0.25 / 0.71))
    assert band_range(2.0, 0.5, 0.0, True, (1.2, None)) == pytest.approx((1.0, 2.4))
    assert band_range(2.0, 0.5, 0.0, True, (3.0, None)) == pytest.approx((1.0, 3.0))  # a ceiling beyond the band
    assert band_range(2.0, 0.0, 0.0, True, (1.2, 1.2)) is None  # two measured sides: no band


def test_a_saved_prediction_is_ranked_within_its_bands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """recommend --runs read a saved prediction's figures without its bands ("bands": {}): the catalog's H100 was
    said to possibly miss the TTFT SLO at the slow end of its band, and the same prediction, saved, never was."""
    db = str(tmp_path / "r.db")
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3.6-27b", "--weights", "FP8",
                 "--concurrency", "1,4,16", "--save", "h100-pred", "--db", db]) == 0
    args = ["recommend", "--model", "qwen3.6-27b", "--agents", "16", "--input-len", "4096", "--output-len", "512",
            "--ttft-p99", "4.6s", "--runs", "h100-pred", "--price", "h100-pred=1.79", "--price", "nvidia-h100-sxm=1.79",
            "--db", db]
    capsys.readouterr()
    assert main([*args, "--json", "-"]) == 0
    ranked = {c["box"]: c for c in json.loads(capsys.readouterr().out)["ranked"]}
    saved, fresh = ranked["h100-pred"], ranked["nvidia-h100-sxm"]
    assert saved["source"] == "predicted" and set(saved["bands"]) == {"throughput", "ttft", "tpot"}, saved
    assert all(saved["bands"][m] >= fresh["bands"][m] for m in saved["bands"])  # the widest its cells printed
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    line = said[said.index("within their bands these may miss the SLOs: "):]
    assert "nvidia-h100-sxm (TTFT p99" in line and "h100-pred (TTFT p99" in line, line


def test_a_saved_prediction_says_the_kv_cache_it_assumed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A prediction saved with the model's dtype for its KV cache ranked at 1,471 tok/s beside the same box
    predicted afresh with fp8's at 1,822, both "vllm FP8", and the note named only fp8: each says its own."""
    db = str(tmp_path / "r.db")
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3-8b", "--weights", "FP8",
                 "--concurrency", "16", "--save", "h100-saved", "--db", db]) == 0
    capsys.readouterr()
    assert main(["recommend", "--model", "qwen3-8b", "--agents", "16", "--runs", "h100-saved", "--price",
                 "h100-saved=2.5", "--price", "nvidia-h100-sxm=2.5", "--db", db]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "KV cache assumed: fp8 with vllm FP8; auto (the model dtype) with h100-saved (as saved)" in said, said


def test_compare_of_predicted_sessions_says_predicted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two predicted session runs said "the server said its cache served 92%"."""
    db = str(tmp_path / "r.db")
    for box, extra in (("h100", ["--weights", "FP8", "--kv", "fp8"]), ("strix-halo", ["--kv", "q8_0"])):
        assert main(["predict", "--hardware", box, "--model", "qwen3.6-35b-a3b", *extra, "--sessions", "--turns", "3",
                     "--concurrency", "1,4", "--save", box, "--db", db]) == 0
    capsys.readouterr()
    assert main(["compare", "h100", "strix-halo", "--db", db]) == 0
    printed = capsys.readouterr().out
    out = " ".join(printed.split())
    assert "server said" not in out and "predicted: the cache serves" in out
    assert "where the ratio lies when each PREDICTED side measures within its band" in out
    # the throughput rows carry the band the 4-agent line printed (the serving loop's), as the TTFT rows carry
    # theirs; the session's time, for which no prediction keeps a band, says it has none
    bands = {}
    for box in ("h100", "strix-halo"):
        pct = load_result(Store(db, readonly=True), box).manifest.band_pct or {}
        assert pct.get("throughput"), pct
        bands[box] = pct["throughput"] / 100
    tps = [ln.split()[-2:] for ln in printed.splitlines() if ln.strip().startswith("Output tok/s")]
    assert len(tps) == 2, printed  # one a number of agents
    for ratio_text, span in tps:
        ratio = float(ratio_text.rstrip("×"))
        low, high = (float(x) for x in span.strip("()").split("–"))
        # as wide as the two bands allow, each side's fast end no further than its ceiling
        assert low == pytest.approx(ratio * (1 - bands["h100"]) / (1 + bands["strix-halo"]), rel=0.02) and \
            ratio < high, (ratio, low, high, bands)
    times = [ln for ln in printed.splitlines() if ln.strip().startswith("Session p50 (s)")]
    assert len(times) == 2 and all(ln.endswith("(no band)") for ln in times), times


def test_llama_cpp_ttft_of_agents_sent_together_grows_with_them(capsys: pytest.CaptureFixture[str]) -> None:
    """Turn-1 TTFT was 4.25, 4.26, 4.27, 4.29 s at 4 to 32 agents, its ceiling 699 ms at 32: below the arithmetic
    of 32 prompts of 2,000 tokens. All send turn 1 at once; their prompts queue through the slots and the step
    budget: the median waits for half of them, the slowest for all."""
    cat, cal = Catalog.load(), Calibration.packaged()
    from tokenbench.draws import Draw
    from tokenbench.predict.session import SessionShape, predict_session

    s = Setup.make(cat, cal, "amd-ryzen-ai-max-395", "qwen3.6-35b-a3b", "Q4_K_M", "q8_0", "llama.cpp", parallel=32)
    shape = SessionShape(turns=2, shared_prefix=4000, input_len=Draw.fixed(2000), tool_len=Draw.fixed(1650),
                         output_len=Draw.fixed(400))
    one = s.prefill(2000, 4000)
    firsts = {n: predict_session(s, shape, n, cold=False).turns[0] for n in (1, 2, 4, 8, 16, 32)}
    medians = [t.ttft_s.estimate for t in firsts.values()]
    assert medians == sorted(medians) and medians[-1] > 4 * medians[2]  # 32 agents: far past 4's
    worst = firsts[32].ttft_worst_s
    assert worst is not None and worst.ceiling >= 0.9 * 32 * one.ceiling  # every prompt's arithmetic before the last
    assert firsts[32].ttft_s.ceiling >= 0.9 * 16 * one.ceiling


def test_a_capacity_ranking_of_predicted_boxes_gives_each_its_band(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """recommend --capacity ranked the L40S first at 8 agents with a TTFT p99 of 1.93 s against 2 s and a ±74%
    TTFT band, and said no band: only --sessions gave the range of agents the bands allow."""
    out = tmp_path / "r.json"
    assert main(["recommend", "--model", "llama-3.1-8b", "--capacity", "--ttft-p99", "2s", "--tpot", "50ms",
                 "--agents", "64", "--price", "nvidia-l40s=0.9", "--price", "nvidia-h100-pcie=2.5",
                 "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    ranked = json.loads(out.read_text())["ranked"]
    assert ranked and all(c["capacity_band"] is not None for c in ranked)
    for c in ranked:
        low, high, _every = c["capacity_band"]
        assert low <= c["capacity"] <= high and low < high, c
        assert f"{c['box']}: agents {low} to {high}" in text
    assert "at the slow end of its bands" in text


def test_a_predicted_session_turns_band_stops_at_its_floor(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """compare of two predicted session runs held each turn's TTFT anywhere within its side's band: an H100's turn
    1 reached 0.34 of its figure against a floor at 0.41, and a Strix Halo's later turns 0.21 against 0.46. A
    predicted turn keeps its floors, and its level its limits, as a predicted serving level does."""
    from tokenbench.compare.levels import band_range, times

    db = str(tmp_path / "r.db")
    for box, engine in (("nvidia-h100-sxm", "vllm"), ("strix-halo", "llama.cpp")):
        assert main(["predict", "--hardware", box, "--model", "qwen3-8b", "--engine", engine, "--sessions", "--turns",
                     "4", "--concurrency", "8", "--save", box, "--db", db,
                     "--json", str(tmp_path / f"{box}.json")]) == 0
    for box in ("nvidia-h100-sxm", "strix-halo"):
        for lv in json.loads((tmp_path / f"{box}.json").read_text())["levels"]:
            assert {"output_throughput_tps", "ttft_ms", "tpot_ms"} <= set(lv["limits"]), lv["limits"]
            assert lv["limits"]["output_throughput_tps"] >= lv["output_throughput_tps"]
            for t in lv["session"]["turns"]:
                assert all(0 < t["limits"][k] <= t[k]["p50"] for k in ("ttft_ms", "tpot_ms")), t
    capsys.readouterr()
    assert main(["compare", "nvidia-h100-sxm", "strix-halo", "--db", db, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    pct = [json.loads((tmp_path / f"{box}.json").read_text())["manifest"]["band_pct"]["ttft"] / 100
           for box in ("nvidia-h100-sxm", "strix-halo")]
    assert main(["compare", "nvidia-h100-sxm", "strix-halo", "--db", db]) == 0
    table = capsys.readouterr().out
    held = 0
    for t in doc["sessions"]["blocks"][0]["turns"]:
        fast = tuple(t["warm_fast"])
        assert all(0 < f <= 1 for f in fast), t
        span = band_range(t["warm_ratio"], *pct, False, fast)
        free = band_range(t["warm_ratio"], *pct, False)
        assert span is not None and free is not None
        row = next(line for line in table.splitlines() if line.split()[:1] == [str(t["turn"] + 1)])
        assert row.rstrip().endswith(f"({times(span[0])}–{times(span[1])})"), (row, span)
        held += span != free
    assert held, "no turn's band reached past its floor: the test no longer tries what it is for"
