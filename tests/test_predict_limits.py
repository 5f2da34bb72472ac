"""A band's fast end never passes the physical limit the roofline computes: a rate's is held at its ceiling, a
time's at its floor; the note under a table states the bands its cells printed; fit's split decode has its band."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.predict.banding import BandLog, span
from tokenbench.predict.entrypoints import PredictConfig, SetupConfig, predict
from tokenbench.predict.session import SessionShape


def _ends(text: str) -> tuple[float, float]:
    """A band cell's reach below and above its estimate, in percent: ±X% or +H/−L%."""
    band = text.split()[-1] if "(wide)" not in text else text.split()[-2]
    if band.startswith("±"):
        x = float(band[1:-1])
        return x, x
    high, low = band[1:-1].split("/−")
    return float(low), float(high)


def test_a_bands_fast_end_is_held_at_the_ceiling_and_the_floor() -> None:
    rate = span(54.0, 41.6, 61.8, rate=True)
    assert rate.held and rate.low == 54.0 and 41.6 * (1 + rate.high / 100) == pytest.approx(61.8)
    assert rate.text() == f"+{int(rate.high)}/−54%"  # the held end rounded toward the estimate, never past 61.8
    time = span(62.0, 1.9, 1.1, rate=False)
    assert time.held and time.high == 62.0 and 1.9 * (1 - time.low / 100) == pytest.approx(1.1)
    inside = span(20.0, 40.0, 61.8, rate=True)
    assert not inside.held and inside.text() == "±20%"
    wide = span(150.0, 40.0, 61.8, rate=True)  # ≤Nx: N held at the ceiling over the estimate
    assert wide.held and wide.text() == "≤1.5x"  # 61.8 / 40 = 1.545: rounded down, never past the ceiling


def test_no_served_cell_promises_past_its_ceiling_or_floor() -> None:
    """H100 vLLM, a MoE model: TPOT 1.9 ms ±62% read down to 0.7 ms under a 1.1 ms floor."""
    cfg = PredictConfig(SetupConfig("nvidia-h100-sxm", "qwen3.6-35b-a3b", "FP8", "fp8", "vllm"), [1, 4, 8, 16, 32])
    out = predict(cfg)
    s = out.setup
    for row in out.tables[0].rows:
        p = s.serve(int(row[0]), 4096, 512)
        assert p.throughput[1] * (1 + _ends(row[1])[1] / 100) <= p.throughput[0]
        assert p.ttft_s.estimate * (1 - _ends(row[4])[0] / 100) >= p.ttft_s.ceiling
        assert p.tpot_s.estimate * (1 - _ends(row[6])[0] / 100) >= p.tpot_s.ceiling
    held = out.band_held()
    assert held and all(h["fast_end"] == "floor" for h in held if h["metric"] == "tpot")
    assert "fast end held at the physical limit" in out.note and "tpot" in out.note.split("which no measurement")[-1]


def test_a_session_cell_past_its_limit_is_marked_and_said() -> None:
    """A30, 20 turns: decode 41.6 ±54% reached 64 tok/s over its 61.8 ceiling; TTFT 29 ms ±67% 9.6 ms under 16 ms."""
    cfg = PredictConfig(SetupConfig("nvidia-a30", "llama-3.1-8b"), [1], session=SessionShape(turns=20))
    out = predict(cfg)
    s, cal = out.setup, out.calibration
    (t,) = out.tables
    p = out.session_predictions[0]
    shown = {int(c): i + 1 for i, c in enumerate(t.columns[1:])}
    rows = {r[0].split(" ±")[0]: r for r in t.rows}
    b = s.band(cal, "decode", p.turns[-1].context, 1)
    assert b is not None
    for turn in p.turns:
        if turn.turn not in shown:
            continue
        cell = rows["Decode tok/s"][shown[turn.turn]]
        rate, ceiling = 1 / turn.tpot_s.estimate, 1 / turn.tpot_s.ceiling
        assert cell.endswith("*") == (rate * (1 + b.pct / 100) > ceiling)
    assert any(c.endswith("*") for c in rows["Decode tok/s"][1:])
    assert all(h["high_pct"] < h["pct"] for h in out.band_held() if h["metric"] == "decode")
    assert "(*: the turns where their row's band would pass it)" in out.note


def test_the_note_states_the_bands_its_cells_printed() -> None:
    """H100 tg128 at depths 0 and 8k: the note said decode ±20% where the cells said ±44% and ±46%."""
    out = predict(PredictConfig(SetupConfig("nvidia-h100-sxm", "llama-3.1-8b"), depths=[0, 8192], tests=("tg",)))
    cells = [r[1].split()[-1] for r in out.tables[0].rows]
    assert len(set(cells)) == 2
    assert f"decode {cells[0]} to {cells[1]}" in out.note
    assert out.band_pct() == {"decode": pytest.approx(float(cells[1][1:-1]), abs=0.5)}


def test_a_session_note_names_the_bands_its_tables_carry() -> None:
    """gpt-oss-20b on an H100, 1 and 8 agents: the note said "too few rows held out for a band: prefill, decode"
    under a table printing prefill's and decode's bands."""
    shape = SessionShape(turns=20)
    out = predict(PredictConfig(SetupConfig("nvidia-h100-sxm", "gpt-oss-20b", "MXFP4"), [1, 8], session=shape))
    labels = [r[0] for t in out.tables for r in t.rows if "±" in r[0] or "≤" in r[0]]
    assert len(labels) == 6 and "too few rows held out" not in out.note
    for t, metrics in zip(out.tables, (("prefill", "decode"), ("ttft", "tpot"))):
        ttft, _, dec = [r[0] for r in t.rows if "±" in r[0] or "≤" in r[0]]
        assert f"{metrics[0]} {ttft.split()[2]}" in out.note and f"{metrics[1]} {dec.split()[2]}" in out.note
    # and the 8 agents' aggregate rate, under its table, with the serving loop's throughput band (its fast end
    # held at the rate's ceiling: +61/−63%)
    line = next(ln for ln in out.tables[1].lines if "output tok/s in all" in ln)
    pct = round((out.band_pct() or {})["throughput"] or 0)
    assert pct > 0 and f"throughput ±{pct}%" in out.note and f"{pct}% (wide)" in line, (line, out.note)
    assert set(out.band_pct() or {}) == {"prefill", "decode", "ttft", "tpot", "throughput"} and \
        None not in out.band_pct().values()


def test_fit_gives_its_split_decode_a_band_and_a_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js = tmp_path / "fit.json"
    assert main(["fit", "--hardware", "nvidia-a30", "--model", "qwen3-coder-next-80b-a3b", "--weights", "Q4_K_M",
                 "--kv", "q4_0", "--context", "65536", "--json", str(js)]) == 1  # does not fit: a split
    out = " ".join(capsys.readouterr().out.split())
    d = json.loads(js.read_text())["split_decode"]
    log = BandLog()
    assert d["band"]["pct"] > 0 and d["tok_s"] < d["ceiling_tok_s"] and not log.printed
    assert (f"predicted decode with that split: {d['tok_s']:.1f} tok/s ±{d['band']['pct']:.0f}%"
            f"{' (wide)' if d['band']['pct'] > 50 else ''} (ceiling {d['ceiling_tok_s']:.1f} tok/s)") in out


def test_recommend_holds_a_fast_end_at_the_physical_floor(capsys: pytest.CaptureFixture[str]) -> None:
    """Strix Halo, qwen3.6-35b-a3b sessions within TTFT p99 10 s: at the fast end of a ±92% TTFT band the capacity
    read "7 to at least 128", where 128 agents' TTFT at the box's physical limit alone is past 10 s."""
    from tokenbench.boxes import _slots
    from tokenbench.candidates import Candidate
    from tokenbench.predict import session as ps
    from tokenbench.predict.calibration import Calibration
    from tokenbench.predict.setup import Setup, usual_setup
    from tokenbench.predict.specs import Catalog
    from tokenbench.recommend import Workload

    cat, cal = Catalog.load(), Calibration.packaged()
    hw = cat.find_hardware("strix-halo")
    engine, weights, kv = usual_setup(hw)
    shape = ps.SessionShape()
    w = Workload("qwen3.6-35b-a3b", 16, 0, 0, ttft_p99_ms=10_000.0, currency="EUR", sessions=shape)
    s = _slots(Setup.make(cat, cal, hw.id, w.model, weights, kv, engine), w, Candidate(hw.id, "", "predicted"))
    worst, _, _ = ps.probe(s, shape, 128)
    assert worst.ceiling * 1000 > 10_000  # no measurement at 128 agents can meet the SLO
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--sessions", "--agents", "16", "--ttft-p99", "10s",
                 "--currency", "EUR", "--owned", "strix-halo=2500:3:120"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    top = said.split("amd-ryzen-ai-max-395: agents ")[1].split(",")[0]
    assert "at least" not in top
    high = int(top.split(" to ")[-1])
    assert ps.probe(s, shape, high)[0].ceiling * 1000 <= 10_000
    assert "a fast end held at the physical limit reads +H/−L%" in said


def test_calibrate_says_which_constants_the_fit_pushed_to_a_bound() -> None:
    """vLLM's power term fitted at 9.87 of a 10 TF/W bound that means no limit, printed as "9.87 TF/W of TDP"; a
    bandwidth share at its floor read as measured."""
    from tokenbench.cli.predicting import _fitted
    from tokenbench.predict.roofline import Efficiency

    e = Efficiency(eta_w=0.2, flops_per_w=9.87, eta_moe=1.0, t_layer=65e-6)
    assert _fitted(e, "flops_per_w") == "no power limit (TF/W at its bound)"
    assert _fitted(e, "eta_w") == "0.20 (at its lower bound)" and _fitted(e, "eta_moe") == "1.00"
    assert _fitted(e, "t_layer") == "65 µs"
    assert _fitted(Efficiency(flops_per_w=0.6), "flops_per_w") == "0.60 TF/W of TDP"
