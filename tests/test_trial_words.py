"""What a first trial of fit, predict, compare and cost read: a split proposed only to the engine that runs one,
no speed for a setup that does not fit, no nonzero figure printed as zero, lines within 80 columns, counts with
their nouns, and a refused argument said in one line before anything else."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.store import Store


def _json_out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[dict, str]:
    rc = main([*argv, "--json", "-"])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert rc == (0 if doc.get("fits", True) else 1)  # fit: 1 where the model does not fit, the JSON written
    return doc, out.err


def test_fit_proposes_a_layer_split_only_to_llama_cpp(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--context", "128k", "--concurrency", "4"]
    vllm, text = _json_out(capsys, [*args, "--engine", "vllm"])
    assert not vllm["fits"] and vllm["gpu_layers"] is None and vllm["split_decode"] is None
    assert "-ngl" not in text and "split" not in text
    # what would fit instead: the largest context at these sequences, and a box with the memory it needs
    flat = " ".join(text.split())
    assert f"at most {vllm['max_context']:,} tokens" in flat and f"{vllm['total_gb']:.1f} GiB usable" in flat
    lcpp, text = _json_out(capsys, [*args, "--engine", "llama.cpp"])
    assert not lcpp["fits"] and lcpp["gpu_layers"] is not None and f"-ngl {lcpp['gpu_layers']}" in text


def test_fit_names_an_fp8_cache_where_it_would_fit(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fit", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--context", "128k",
            "--concurrency", "5"]
    auto, text = _json_out(capsys, args)
    fp8, _ = _json_out(capsys, [*args, "--kv", "fp8"])
    assert not auto["fits"] and fp8["fits"]
    assert f"FP8 KV cache (--kv fp8, vllm's --kv-cache-dtype fp8: {fp8['total_gb']:.1f} GiB" in " ".join(text.split())


def test_fit_says_its_counts_with_their_nouns_and_indents_what_runs_on(capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for n in ("1", "4"):
        assert main(["fit", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--context", "128k",
                     "--concurrency", n]) == 1  # does not fit
        out = capsys.readouterr().out
        assert "(s)" not in out and ("1 sequence:" in out if n == "1" else "4 sequences:" in out)
        lines = out.splitlines()
        assert all(len(ln) <= 80 for ln in lines)
        # each line that runs on sits under its own text: only a statement starts at the margin
        starts = [ln for ln in lines if not ln.startswith(" ")]
        assert [ln.split()[0] for ln in starts] == ["engine:", "llama-3.1-8b"][: len(starts)]


# llama.cpp's 64 slots each hold their context (vLLM would run as many as its cache holds and queue the rest)
@pytest.mark.parametrize("args", [["--concurrency", "1,64", "--input-len", "16000", "--engine", "llama.cpp",
                                   "--parallel", "64"],
                                  ["--test", "depth", "--depth", "0,256k"]])
def test_predict_shows_no_speed_for_a_setup_that_does_not_fit(args: list[str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    said, err = _json_out(capsys, ["predict", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", *args])
    rows = said["rows"]
    fit = [r for r in rows if r[-1] != "no"]
    out = [r for r in rows if r[-1] == "no"]
    assert fit and out
    assert all(c != "—" for r in fit for c in r[1:-1])
    assert all(set(r[1:-1]) == {"—"} for r in out)  # nothing a reader could take for a speed of it
    assert "fits no (" in " ".join(err.split()) and "no speed is predicted" in " ".join(err.split())
    assert len(said["levels"]) < len(rows) * (2 if "--test" in args else 1)  # nor stored for it


def _lead(cell: str) -> float:
    return float(cell.split()[0].replace(",", ""))


def test_no_nonzero_prediction_prints_as_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """256 agents queued behind one llama.cpp slot: each gets a hundredth of a token per second."""
    said, _ = _json_out(capsys, ["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "llama-3.1-70b",
                                 "--engine", "llama.cpp", "--parallel", "1", "--concurrency", "1,256"])
    head, (one, many) = said["columns"], said["rows"]
    assert many[-1] == "yes"  # the queued agents hold no cache: 256 of them fit as one slot does
    aggregate, per_agent = _lead(many[head.index("Aggregate tok/s")]), _lead(many[head.index("Per-agent tok/s")])
    assert per_agent > 0 and per_agent == pytest.approx(aggregate / 256, rel=0.1)
    assert not [c for r in (one, many) for c in r[1:-1] if re.match(r"0\.0+( |$)", c)]


def test_a_figure_keeps_its_significant_figures_and_a_held_reach_is_never_zero() -> None:
    from tokenbench.layout import sig
    from tokenbench.predict.banding import span

    for v in (0.0043, 0.043, 0.43, 4.3, 43.0, 4321.0):
        assert float(sig(v).replace(",", "")) == pytest.approx(v, rel=0.1) and sig(v) not in ("0", "0.0")
    held = span(40.0, 10.0, 10.03, rate=True)  # the estimate 0.3% under its ceiling
    assert held.held and not held.text().startswith("+0/") and held.text().startswith("+0.")


def test_calibrate_refuses_a_bad_run_before_it_says_it_is_fitting(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    Store(tmp_path / "t.db")  # a database without that run
    assert main(["calibrate", "--out", str(tmp_path / "c.toml"), "--runs", "no-such-run", "--hardware", "nvidia-a30",
                 "--model", "llama-3.1-8b", "--db", str(tmp_path / "t.db")]) == 2
    err = capsys.readouterr().err
    assert "fitting" not in err and len(err.strip().splitlines()) == 1 and "no-such-run" in err


@pytest.mark.parametrize("argv", [["cost", "--tps", "100", "--price-per-hour", "2"],
                                  ["cost", "--tps", "100", "--price-per-hour", "2", "--api-price", "3", "--api-currency"],
                                  ["recommend", "--model", "llama-3.1-8b", "--agents", "4"]])
def test_an_unknown_currency_is_refused_in_one_line_naming_the_known(argv: list[str],
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    flag = [] if argv[-1] == "--api-currency" else ["--currency"]
    assert main([*argv, *flag, "XYZ"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "" and len(printed.err.strip().splitlines()) == 1
    assert "XYZ" in printed.err and "ISO 4217" in printed.err and "USD" in printed.err
    assert main([*argv, *flag, "eur"]) == 0  # a known one, in any case
    capsys.readouterr()
    assert main([*argv, *flag, "BRL"]) == 0  # any currency in use, not only the best known


def _save_predictions(db: Path, *boxes: str) -> None:
    for box in boxes:
        assert main(["predict", "--hardware", box, "--model", "llama-3.1-8b", "--concurrency", "1,16",
                     "--save", box, "--db", str(db)]) == 0


def test_compare_names_a_prediction_s_band_for_what_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    db = tmp_path / "p.db"
    _save_predictions(db, "nvidia-h100-sxm", "nvidia-h200-sxm")
    capsys.readouterr()
    assert main(["compare", "nvidia-h100-sxm", "nvidia-h200-sxm", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "band)" in out and "A/B (80% band)" in out and "95% CI" not in out


def test_against_heads_each_group_with_its_weight_format(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The same box and model measured in two weight formats are two setups: each heading names its format."""
    from tokenbench.predict.measured import COLUMNS

    monkeypatch.setenv("COLUMNS", "80")
    row = dict.fromkeys(COLUMNS, "")
    row.update(source="s", host="A30", hardware="nvidia-a30", engine="llama.cpp cuda", model="llama-3.1-8b",
               kv="f16", test="tg128", depth="0", concurrency="1", metric="decode_tps", unit="tok/s")
    rows = [{**row, "weights": w, "value": v} for w, v in (("Q4_K_M", "100"), ("Q4_K_M", "900"), ("Q8_0", "70"))]
    rows[1].update(test="pp512", metric="prefill_tps")
    f = tmp_path / "p.csv"
    f.write_text(",".join(COLUMNS) + "\n" + "".join(",".join(r[c] for c in COLUMNS) + "\n" for r in rows))
    assert main(["predict", "--against", str(f)]) == 0
    out = capsys.readouterr().out
    heads = [ln.strip() for ln in out.splitlines() if ln.startswith(" On ")]
    assert heads == ["On A30, llama-3.1-8b Q4_K_M", "On A30, llama-3.1-8b Q8_0"]


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_a_saved_prediction_shows_the_precision_its_band_supports(fmt: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    db = tmp_path / "p.db"
    _save_predictions(db, "nvidia-h100-sxm")
    capsys.readouterr()
    assert main(["show", "nvidia-h100-sxm", "--db", str(db), "--format", fmt]) == 0
    out = capsys.readouterr().out
    rows = [[c.strip() for c in re.split(r"\s{2,}|\|", ln.strip(" |"))] for ln in out.splitlines()]
    levels = [r for r in rows if r and r[0] in ("1", "16")]
    figures = [c.split()[0] for r in levels for c in r[1:] if re.match(r"^[\d,.]+( m?s)?$", c)]
    assert len(levels) == 2 and len(figures) == 10
    # no more than two significant figures: a ±36% band supports no fourth
    assert all(len(re.sub(r"\D", "", f).strip("0")) <= 2 for f in figures), figures


def test_a_depth_rate_s_spread_is_said_to_the_figures_it_knows() -> None:
    from tokenbench.depth import _rate
    from tokenbench.depth_findings import unstable_depth_rate

    said = _rate(9_000.0, 6_277.3)
    assert "± 6,300 tok/s" in said and "6277" not in said
    found = unstable_depth_rate("tg", 650.35, 491.05, [])
    assert found is not None and "± 490 tok/s" in found.text
