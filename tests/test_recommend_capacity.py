"""``recommend --capacity``: boxes ranked by cost per agent-hour at the SLOs, each box's capacity
predicted by the same search ``tokenbench capacity`` runs (marked PREDICTED) or read from a measured run's levels,
beside one another."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.pricing import Pricing
from tokenbench.emitter import BackgroundEmitter, EmitterConfig
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.specs import Catalog
from tokenbench.recommend import Workload, predicted

# each stream's tokens slow as more generate: TPOT about 15 ms + 5 ms per stream, as slow as a real box's
SATURATING = EmitterConfig(ttft_s=0.01, itl_s=0.015, itl_per_stream_s=0.005)
QUICK = ["--input-len", "16", "--output-len", "24", "--quiet", "--no-metrics", "--guard", "off"]
PRICES = {"nvidia-h100-pcie": Pricing(price_per_hour=2.5), "nvidia-l40s": Pricing(price_per_hour=0.9)}


@pytest.mark.parametrize("slos", [{"ttft_p99_ms": 2000.0, "tpot_ms": 50.0}, {"ttft_p99_ms": 800.0},
                                  {"tpot_ms": 20.0}])
def test_a_predicted_capacity_is_the_last_agent_count_that_meets_the_slos(slos: dict[str, float]) -> None:
    """The predicted capacity meets every SLO at its agent count and misses one a single agent more, by the
    ranking's own per-agents prediction; its price per agent-hour is the box's hour over it."""
    cat, cal = Catalog.load(), Calibration.packaged()
    w = Workload("llama-3.1-8b", 64, 4096, 512, **slos)
    found = {c.box: c for c in predicted(cat, cal, w, PRICES, capacity=True) if c.box in PRICES}
    for box, c in found.items():
        assert c.capacity is not None and 1 < c.capacity < 1024 and not c.excluded, (box, c)
        at = {x.box: x for x in predicted(cat, cal, replace(w, agents=c.capacity), PRICES)}[box]
        over = {x.box: x for x in predicted(cat, cal, replace(w, agents=c.capacity + 1), PRICES)}[box]
        assert not at.misses and at.memory_gb is None, (box, c.capacity, at)
        assert over.misses or over.memory_gb is not None, (box, c.capacity, over)
        assert c.cost_per_agent_hour == pytest.approx(PRICES[box].effective_hourly() / c.capacity)
        assert c.boxes == math.ceil(64 / c.capacity) and c.throughput == pytest.approx(at.throughput)


def _store_capacity(url: str, db: Path, label: str, slo: str) -> dict:
    out = db.with_name(f"{label}.json")
    assert main(["capacity", "--url", url, "--db", str(db), "--json", str(out), "--label", label, "--slo", slo,
                 "--concurrency", "1:16", "--requests", "24", "--price-per-hour", "2", *QUICK]) == 0
    return json.loads(out.read_text())


# a sweep of four levels, then every catalog box ranked (about a minute on 2 cores beside other tests):
# make test runs it, make test-fast leaves it out
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_recommend_ranks_a_measured_capacity_beside_predicted_ones(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A capacity search stored under a label; ``recommend --capacity`` under the same SLO reads the same
    capacity from its levels, prices it per agent-hour, and ranks it among PREDICTED boxes, cheapest first. A
    plain sweep (no SLO) is read under recommend's SLO too, from the levels it ran."""
    db = tmp_path / "r.db"
    with BackgroundEmitter(SATURATING) as em:
        doc = _store_capacity(em.url, db, "emitter-box", "tpot_p50=40ms")
        assert main(["sweep", "--url", em.url, "--db", str(db), "--label", "swept", "--concurrency", "1,2,4,8",
                     "--requests", "16", "--price-per-hour", "1", *QUICK]) == 0
    cap = doc["capacity"]
    assert cap["ended"] == "resolved" and 1 < cap["capacity"] < 16, cap
    capsys.readouterr()
    args = ["recommend", "--model", "llama-3.1-8b", "--capacity", "--tpot", "40ms", "--agents", "40", "--input-len", "16",
            "--output-len", "24", "--runs", "emitter-box", "swept", "--db", str(db), "--price", "nvidia-l40s=0.9"]
    assert main([*args, "--json", "-"]) == 0
    ranked = json.loads(capsys.readouterr().out)
    assert ranked["ranked_by"] == "cost_per_agent_hour"
    mine = next(c for c in ranked["ranked"] if c["box"] == "emitter-box")
    assert mine["capacity"] == cap["capacity"] and mine["source"] == "measured"
    assert mine["cost_per_agent_hour"] == pytest.approx(2 / cap["capacity"])
    assert mine["boxes"] == math.ceil(40 / cap["capacity"])
    assert not any("p99 of" in n for n in mine["notes"])  # a TPOT-only SLO needs no "p99 of few requests" note
    swept = next(c for c in ranked["ranked"] + ranked["excluded"] if c["box"] == "swept")
    assert swept["capacity"] in (1, 2, 4, 8) and swept["capacity"] <= cap["capacity"] * 2, swept
    costs = [c["cost_per_agent_hour"] for c in ranked["ranked"]]
    assert costs == sorted(costs) and any(c["source"] == "predicted" for c in ranked["ranked"])
    assert main([*args, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("| ") and "emitter-box" in ln)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:7] == ["measured", str(cap["capacity"]), str(math.ceil(40 / cap["capacity"])),
                          f"{2 / cap['capacity']:.3f}"], cells
    assert any("| PREDICTED |" in ln and "nvidia-l40s" in ln for ln in out.splitlines()), out
    # the emitter's model is not llama-3.1-8b: said under the table, apart from the notes, and in the JSON
    said = " ".join(out.split())
    line = said[said.index("measured with another model than llama-3.1-8b: "):]
    assert "emitter-box (emitter)" in line and "swept (emitter)" in line, out
    assert mine["other_model"] == "emitter"
    # asked of another workload than the run measured (4096 in / 512 out, recommend's default), it says so
    assert main(["recommend", "--model", "llama-3.1-8b", "--capacity", "--tpot", "40ms", "--runs", "emitter-box",
                 "--db", str(db), "--json", "-"]) == 0
    other = json.loads(capsys.readouterr().out)
    mine = next(c for c in other["ranked"] + other["excluded"] if c["box"] == "emitter-box")
    assert "measured at 16 in / 24 out tokens" in mine["notes"], mine


def test_recommend_capacity_needs_an_slo(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["recommend", "--model", "llama-3.1-8b", "--capacity", "--db", str(tmp_path / "r.db")]) == 2
    err = capsys.readouterr().err
    assert "give --ttft-p99" in err and len(err.strip().splitlines()) == 1


def test_two_boxes_at_one_team_price_are_listed_in_ranked_order() -> None:
    """Two boxes whose teams cost the same an hour (two runs given one price) stopped recommend after its table:
    the sort fell through to comparing the boxes themselves."""
    from tokenbench.candidates import Candidate, Workload
    from tokenbench.cli.recommend import team_line
    from tokenbench.recommend import Recommendation

    a, b = (Candidate(box, "vllm", "measured", capacity=4, cost_per_agent_hour=0.125, boxes=1) for box in ("a", "b"))
    done = Recommendation(Workload("llama-3.1-8b", 2, 16, 24), True, [a, b], [], [])
    # each box serves 4 and the team is 2: the team pays 0.250 an agent-hour where the table says 0.125, and says why
    assert team_line(done) == ("for 2 agents: a x1, USD 0.50/hour (0.250 per agent-hour, whole boxes paid); "
                               "b x1, USD 0.50/hour (0.250 per agent-hour, whole boxes paid)")
    full = Recommendation(Workload("llama-3.1-8b", 4, 16, 24), True, [a], [], [])
    assert team_line(full) == "for 4 agents: a x1, USD 0.50/hour (0.125 per agent-hour)"


@pytest.mark.parametrize("costs, said", [
    (["--price", "nvidia-l40s=0.9", "--owned", "nvidia-l40s=9000:3:300"], "nvidia-l40s is given --price and --owned"),
    (["--price", "nvidia-l40s=0.9", "--price", "nvidia-l40s=1.2"], "nvidia-l40s is priced twice"),
])
def test_a_box_given_two_costs_is_refused(costs: list[str], said: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The owned cost silently won over the rented price of the same box (its hourly cost 0.43, not 0.9)."""
    assert main(["recommend", "--model", "llama-3.1-8b", "--db", str(tmp_path / "r.db"), *costs]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
