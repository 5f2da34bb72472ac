"""Two boxes' capacities side by side: ``tokenbench compare A B`` where both runs answer how many
agents their box serves within an SLO (a ``tokenbench capacity`` run, or a sweep with --slo). Two searches
bisect to levels of their own, so they often share no operating point; compare said so and stopped there.

The answers are built by hand for the rules (which side serves more, by how much, and when a number is only a
bound), and measured against the emitter set to saturate for the command: a box whose streams slow twice as fast
with each stream serves fewer agents at the same per-agent rate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tokenbench.capacity import CapacityAnswer, SearchSpec, Verdict
from tokenbench.cli import main
from tokenbench.compare.capacity import capacity_table, compare_answers
from tokenbench.emitter import BackgroundEmitter, EmitterConfig
from tokenbench.slo import SloCheck

# ------------------------------------------------------------------------------------------------------------
# The rules, on answers built by hand


def _checks(limit: float, met: bool, name: str = "agent_tps") -> list[SloCheck]:
    return [SloCheck(name, 100.0 if met else 50.0, limit, "tok/s", met, 24, None, 0.01),
            SloCheck("errors", 0.0, 0.0, "share", True, 24, 0, 1.0)]


def found(capacity: float | None, first_fail: float | None, ended: str = "resolved", axis: str = "concurrency",
          limit: float = 90.0, slo: str = ">= 90 tok/s each", name: str = "agent_tps") -> CapacityAnswer:
    """An answer whose levels met the SLO at ``capacity`` and failed it at ``first_fail``."""
    levels = [(v, met) for v, met in ((capacity, True), (first_fail, False)) if v is not None]
    verdicts = [Verdict(v, met, _checks(limit, met, name), 24, None, i) for i, (v, met) in enumerate(levels)]
    spec = SearchSpec(axis, 1, 64)  # type: ignore[arg-type]
    return CapacityAnswer(spec, slo, ended, verdicts, capacity, first_fail, None, None)  # type: ignore[arg-type]


def test_the_box_serving_more_is_named_with_its_ratio_either_way_round() -> None:
    cc = compare_answers(found(2, 3), found(4, 5))
    assert cc.ratio == 2.0 and cc.ratio_bound == "exact" and not cc.warnings
    assert cc.verdict() == "B serves 2.00x the agents of A at >= 90 tok/s each"
    flipped = compare_answers(found(4, 5), found(2, 3))
    assert flipped.ratio == 0.5 and flipped.verdict() == "A serves 2.00x the agents of B at >= 90 tok/s each"


def test_equal_capacities_are_the_same_and_rates_within_the_resolution_show_no_difference() -> None:
    assert compare_answers(found(4, 5), found(4, 5)).verdict() == \
        "A and B serve the same, 4 agents each, at >= 90 tok/s each"
    # a rate search stops within 10%: 10 (failed 10.8) and 10.4 (failed 11.2) are one capacity as far as it knows
    cc = compare_answers(found(10, 10.8, axis="rate"), found(10.4, 11.2, axis="rate"))
    assert cc.ratio == pytest.approx(1.04)
    said = cc.verdict() or ""
    assert said.startswith("no difference found: A 10 requests/s, B 10.4 requests/s") and "1.04x" not in said
    apart = compare_answers(found(10, 10.8, axis="rate"), found(12, 13, axis="rate"))
    assert apart.verdict() == "B serves 1.20x the request rate of A at >= 90 tok/s each"


def test_a_search_that_did_not_resolve_is_a_bound_said_as_one() -> None:
    every, none = found(16, None, "all"), found(None, 1, "none")
    assert [row[1] for row in capacity_table(compare_answers(every, none))[1][:2]] == ["at least 16 agents", "16 / —"]
    assert capacity_table(compare_answers(every, none))[1][0][2] == "fewer than 1 agent"
    # B at least 16 against A's 4: B serves at least 4x; the other way round, A at least 4x
    cc = compare_answers(found(4, 5), every)
    assert (cc.ratio, cc.ratio_bound) == (4.0, "at least")
    assert cc.verdict() == "B serves at least 4.00x the agents of A at >= 90 tok/s each"
    assert any("B's search did not resolve (every level it ran met the SLO): its 16 agents is a lower bound, at "
               "least 16" in w for w in cc.warnings)
    assert compare_answers(every, found(4, 5)).verdict() == \
        "A serves at least 4.00x the agents of B at >= 90 tok/s each"
    # A only known to be at least 4 and B exactly 8: B serves at most twice A's, not surely more
    cc = compare_answers(found(4, None, "all"), found(8, 9))
    assert cc.ratio_bound == "at most" and cc.verdict() == \
        "B serves at most 2.00x the agents of A at >= 90 tok/s each (A's capacity is a lower bound)"
    # no level met on A: no ratio, but which serves more is known
    cc = compare_answers(none, found(4, 5))
    assert cc.ratio is None and cc.verdict() == \
        "B serves more agents than A at >= 90 tok/s each: B 4 agents, A fewer than 1 agent"
    assert any("A's search did not resolve (no level it ran met the SLO): it serves fewer than 1 agent" in w
               for w in cc.warnings)
    # two lower bounds: nothing says which serves more
    both = compare_answers(found(4, None, "all"), found(8, None, "all"))
    assert both.ratio is None and both.verdict() is None
    gap = compare_answers(found(4, 8, "budget"), found(16, 17))
    assert capacity_table(gap)[1][0][1] == "between 4 and 8 agents" and gap.ratio_bound == "at most"
    assert any("its levels leave a gap" in w for w in gap.warnings)


def test_capacities_under_different_slos_or_axes_do_not_compare() -> None:
    cc = compare_answers(found(2, 3), found(4, 5, limit=60, slo=">= 60 tok/s each"))
    assert not cc.same_slo and cc.ratio is None and cc.verdict() is None
    assert cc.warnings == ["the two searches used different SLOs (A: >= 90 tok/s each; B: >= 60 tok/s each): their "
                           "capacities do not compare, so no ratio is given"]
    assert ["SLO", ">= 90 tok/s each", ">= 60 tok/s each"] in capacity_table(cc)[1]
    other = compare_answers(found(2, 3, slo="ttft_p99<=2000ms", name="ttft_p99", limit=2000.0),
                            found(4, 5, slo="TTFT p99 <= 3 s", name="ttft_p99", limit=3000.0))
    assert other.verdict() is None and "A: TTFT p99 <= 2 s; B: TTFT p99 <= 3 s" in other.warnings[0]
    axes = compare_answers(found(2, 3), found(4, 5, axis="rate"))
    assert axes.ratio is None and axes.verdict() is None
    assert any("A searched agents (concurrency), B requests/s (rate)" in w for w in axes.warnings)


def test_one_slo_written_two_ways_is_one_slo() -> None:
    """A sweep stores its SLO tersely (ttft_p99<=2000ms), a capacity run in words: the objectives that decided the
    verdicts, and their limits, say whether the SLOs are one."""
    cc = compare_answers(found(2, 3, slo="ttft_p99<=2000ms", name="ttft_p99", limit=2000.0),
                         found(4, 5, slo="TTFT p99 <= 2 s", name="ttft_p99", limit=2000.0))
    assert cc.same_slo and cc.verdict() == "B serves 2.00x the agents of A at TTFT p99 <= 2 s"


# ------------------------------------------------------------------------------------------------------------
# tokenbench compare, on searches run against the emitter

#: A box whose streams slow by 4 ms a token with each stream beside them, against the capacity tests' 2 ms.
STEEP = EmitterConfig(ttft_s=0.01, itl_s=0.004, itl_per_stream_s=0.004)
SATURATING = EmitterConfig(ttft_s=0.01, itl_s=0.004, itl_per_stream_s=0.002)
#: the gentle box the searches compare: 143 tok/s an agent at 4 agents, 91 at 8, so its search passes 4 with room
#: and never runs 3 (SATURATING's 100 tok/s at 4 failed it on a CI run's loaded machine, and its search ran 3)
GENTLE = EmitterConfig(ttft_s=0.01, itl_s=0.004, itl_per_stream_s=0.001)
STEEPEST = EmitterConfig(ttft_s=0.01, itl_s=0.004, itl_per_stream_s=0.008)
QUICK = ["--input-len", "16", "--output-len", "24", "--quiet", "--no-metrics", "--guard", "off"]
SLO = ["--slo", "agent_tps=90"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict]]:
    """One database: capacity searches of a steep box (A) and a gentler one (B) at >= 90 tok/s each, the steep
    box again at an SLO every level meets, the steepest from 3 agents up (no level meets), and sweeps of the
    gentle box with and without that SLO. Each run's own --json, by label."""
    tmp = tmp_path_factory.mktemp("capcmp")
    db, docs = tmp / "c.db", {}

    def run(label: str, *args: str) -> None:
        out = tmp / f"{label}.json"
        assert main([*args, "--db", str(db), "--label", label, "--json", str(out), *QUICK]) == 0
        docs[label] = json.loads(out.read_text())

    with BackgroundEmitter(STEEP) as em:
        run("steep", "capacity", "--url", em.url, *SLO, "--concurrency", "1:16", "--requests", "16",
            "--price-per-hour", "2")
        run("steep-easy", "capacity", "--url", em.url, "--slo", "ttft_p90=10s", "--concurrency", "1:4",
            "--requests", "12")
        run("plain", "sweep", "--url", em.url, "--concurrency", "1,2", "--requests", "12")
    with BackgroundEmitter(GENTLE) as em:
        run("gentle", "capacity", "--url", em.url, *SLO, "--concurrency", "1:16", "--requests", "16",
            "--price-per-hour", "2")
        run("gentle-sweep", "sweep", "--url", em.url, *SLO, "--concurrency", "1,16", "--requests", "16")
    with BackgroundEmitter(STEEPEST) as em:
        run("steepest", "capacity", "--url", em.url, *SLO, "--concurrency", "3:16", "--requests", "16")
    return db, docs


def _compare(db: Path, a: str, b: str, *args: str) -> tuple[str, dict]:
    out = db.with_name(f"cmp-{a}-{b}.json")
    assert main(["compare", a, b, "--db", str(db), "--json", str(out), *args]) == 0
    return out.read_text(), json.loads(out.read_text())


def same(mine: dict, own: dict) -> bool:
    """One answer, its levels in either order (compare lists them as the search ran them; the capacity command
    by their value)."""
    def by_value(d: dict) -> dict:
        return {**d, "levels": sorted(d["levels"], key=lambda lv: lv["value"])}
    return by_value(mine) == by_value(own)


def _ids(docs: dict[str, dict], *labels: str) -> list[str]:
    return [docs[label]["run_id"] for label in labels]


def test_compare_prints_each_runs_own_capacity_and_the_ratio(runs: tuple[Path, dict[str, dict]],
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    db, docs = runs
    own_a, own_b = docs["steep"]["capacity"], docs["gentle"]["capacity"]
    assert own_a["ended"] == own_b["ended"] == "resolved"
    cap_a, cap_b = own_a["capacity"], own_b["capacity"]
    assert cap_a < cap_b  # the steep box serves fewer agents at one per-agent rate
    monkeypatch.setenv("COLUMNS", "80")
    _, doc = _compare(db, *_ids(docs, "steep", "gentle"))
    out = capsys.readouterr().out
    assert "capacity within the SLO: A = steep, B = gentle" in out and "share no operating point" not in out
    assert re.search(rf"Capacity\s+{cap_a:.0f} agents\s+{cap_b:.0f} agents", out), out
    assert re.search(rf"Met / failed at\s+{cap_a:.0f} / {own_a['first_fail']:.0f}\s+{cap_b:.0f} / "
                     rf"{own_b['first_fail']:.0f}", out)
    assert re.search(rf"Requests spent\s+{own_a['requests']}\s+{own_b['requests']}", out)
    assert re.search(rf"Cost per agent-hour\s+{2 / cap_a:.3f} USD\s+{2 / cap_b:.3f} USD", out)
    assert f"B serves {cap_b / cap_a:.2f}x the agents of A at >= 90 tok/s each" in out
    assert "different SLOs" not in out and "did not resolve" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    # --json: both answers as each run's own command gave them, and B's over A's
    cap = doc["capacity"]
    assert same(cap["a"], own_a) and same(cap["b"], own_b)
    assert cap["ratio"] == pytest.approx(cap_b / cap_a) and cap["ratio_bound"] == "exact" and cap["same_slo"]
    assert cap["verdict"] == f"B serves {cap_b / cap_a:.2f}x the agents of A at >= 90 tok/s each"


def test_compare_as_markdown_has_the_capacity_table(runs: tuple[Path, dict[str, dict]],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db, docs = runs
    cap_a, cap_b = docs["steep"]["capacity"]["capacity"], docs["gentle"]["capacity"]["capacity"]
    assert main(["compare", *_ids(docs, "gentle", "steep"), "--db", str(db), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| Capacity search | A | B |" in out
    assert f"| Capacity | {cap_b:.0f} agents | {cap_a:.0f} agents |" in out
    assert "| SLO | >= 90 tok/s each | same |" in out
    assert f"| Cost per agent-hour | {2 / cap_b:.3f} USD | {2 / cap_a:.3f} USD |" in out
    assert " |\n\nSure: " in out  # the table ends before its legend (else Markdown reads it as a row)
    assert f"A serves {cap_b / cap_a:.2f}x the agents of B" in out


def test_different_slos_warn_and_give_no_ratio(runs: tuple[Path, dict[str, dict]],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    db, docs = runs
    assert docs["steep-easy"]["capacity"]["ended"] == "all"
    _, doc = _compare(db, *_ids(docs, "steep", "steep-easy"))
    out = capsys.readouterr().out
    assert ("warning: the two searches used different SLOs (A: >= 90 tok/s each; B: TTFT p90 <= 10 s): their "
            "capacities do not compare") in out
    assert "x the agents of" not in out and "serve the same" not in out and "serves more" not in out
    assert re.search(r"Capacity\s+\d+ agents\s+at least 4 agents", out)
    assert "B's search did not resolve (every level it ran met the SLO): its 4 agents is a lower bound" in out
    cap = doc["capacity"]
    assert cap["ratio"] is None and cap["verdict"] is None and not cap["same_slo"]
    assert same(cap["b"], docs["steep-easy"]["capacity"])


def test_a_sweep_with_the_slo_compares_with_a_search(runs: tuple[Path, dict[str, dict]],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The gentle box searched, and swept at 1 and 16 agents under the same SLO: the sweep's capacity is a bound,
    between 1 and 16, so the search's capacity is at most that many times the sweep's."""
    db, docs = runs
    cap = docs["gentle"]["capacity"]["capacity"]
    _, doc = _compare(db, *_ids(docs, "gentle", "gentle-sweep"))
    out = capsys.readouterr().out
    assert re.search(rf"Capacity\s+{cap:.0f} agents\s+between 1 and 16 agents", out)
    assert re.search(r"SLO\s+>= 90 tok/s each\s+same", out)  # one SLO, stored two ways
    assert "B's search did not resolve (its levels leave a gap between the last that met the SLO and the first " \
           "that did not): it serves between 1 and 16 agents" in out
    assert f"A serves at most {cap:.2f}x the agents of B at >= 90 tok/s each (B's capacity is a lower bound)" in out
    assert doc["capacity"]["same_slo"] and doc["capacity"]["ratio_bound"] == "at least"
    assert doc["capacity"]["ratio"] == pytest.approx(1 / cap)


def test_two_searches_with_no_level_in_common_compare_their_capacities(runs: tuple[Path, dict[str, dict]],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """The steepest box fails at 3 agents, where its search began; the gentle box's search never ran 3: no row
    to align, the capacities still say which box serves more."""
    db, docs = runs
    assert docs["steepest"]["capacity"]["ended"] == "none"
    _, doc = _compare(db, *_ids(docs, "steepest", "gentle"))
    out = capsys.readouterr().out
    assert doc["rows"] == [] and "share no operating point" not in out
    cap = docs["gentle"]["capacity"]["capacity"]
    assert re.search(rf"Capacity\s+fewer than 3 agents\s+{cap:.0f} agents", out)
    assert (f"B serves more agents than A at >= 90 tok/s each: B {cap:.0f} agents, A fewer than 3 agents") in out
    assert doc["capacity"]["ratio"] is None and same(doc["capacity"]["a"], docs["steepest"]["capacity"])


def test_a_sweep_without_an_slo_gets_no_capacity_block(runs: tuple[Path, dict[str, dict]],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    db, docs = runs
    _, doc = _compare(db, *_ids(docs, "plain", "steep"))
    out = capsys.readouterr().out
    assert "capacity within the SLO" not in out and "Capacity search" not in out
    assert "A = plain, B = steep" in out and doc["rows"]  # the levels both ran, as before
    assert doc["capacity"] is None


def test_two_searches_of_agent_sessions_compare_their_capacities(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Capacity searches of agent sessions are session runs: compare puts them side by side turn by turn, and
    then their capacities."""
    db, own = tmp_path / "s.db", {}
    for label, cfg in (("s-steep", STEEP), ("s-gentle", SATURATING)):
        with BackgroundEmitter(cfg) as em:
            out = tmp_path / f"{label}.json"
            assert main(["capacity", "--url", em.url, "--db", str(db), "--label", label, "--json", str(out), *QUICK,
                         *SLO, "--concurrency", "1:4", "--sessions", "4", "--turns", "2"]) == 0
            own[label] = json.loads(out.read_text())
    capsys.readouterr()
    _, doc = _compare(db, own["s-steep"]["run_id"], own["s-gentle"]["run_id"])
    out = capsys.readouterr().out
    assert "agent sessions: A = s-steep, B = s-gentle" in out and "capacity within the SLO" in out
    cap = doc["capacity"]
    assert same(cap["a"], own["s-steep"]["capacity"]) and same(cap["b"], own["s-gentle"]["capacity"])
    said = [f"{'at least ' if c['ended'] == 'all' else ''}{c['capacity']:.0f} agents" for c in (cap["a"], cap["b"])]
    assert re.search(rf"Capacity\s+{said[0]}\s+{said[1]}", out), out
    assert cap["ratio"] == pytest.approx(cap["b"]["capacity"] / cap["a"]["capacity"])
    assert cap["verdict"] is not None and cap["verdict"] in out


def test_two_cache_cliffs_under_one_rule_compare() -> None:
    """A cliff's share limit is a share of each search's own lowest level (0.45 on one box, 0.38 on the other):
    compare called them different SLOs and printed the same words for both. The rule in words decides."""
    words = "TTFT p90 <= 5 s and a cached share of at least 50% of the lowest level's"
    a = found(4, 5, name="cached_share", limit=0.45, slo=words)
    b = found(8, 9, name="cached_share", limit=0.38, slo=words)
    cc = compare_answers(a, b)
    assert cc.same_slo and cc.ratio == 2.0 and not any("different SLOs" in w for w in cc.warnings)
    other = found(8, 9, name="cached_share", limit=0.38, slo=words.replace("50%", "30%"))
    assert not compare_answers(a, other).same_slo
