"""Capacity under an SLO: the objectives and how sure each verdict is (slo.py), the search
(capacity.py), and ``tokenbench capacity`` against the emitter set to saturate: monotone, noisy, an SLO no level
meets, one every level meets, an open-loop queue that grows, a time budget, and an interrupt."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tokenbench.capacity import SearchSpec, Verdict, answer, limit_cause, next_value
from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter, EmitterConfig, EmitterProcess
from tokenbench.finding import Code, Finding
from tokenbench.distribution import Distribution
from tokenbench.levels import Telemetry
from tokenbench.metrics import summarize
from tokenbench.records import RequestRecord
from tokenbench.reader import load_result
from tokenbench.slo import SLO, SloCheck, binomial_cdf, decided_fail, needed_for_sure_pass, share_check
from tokenbench.store import Store
from tokenbench.sweep import SweepConfig, run_sweep
from tokenbench.kinds.lengths import LengthsKind

MS = 1_000_000

# ------------------------------------------------------------------------------------------------------------
# The objectives and how sure a verdict is


def test_binomial_cdf_is_the_sum_of_its_terms() -> None:
    for n, q in ((1, 0.3), (24, 0.1), (40, 0.01), (300, 0.01)):
        for k in (0, 1, 3, n // 2, n):
            exact = sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1))
            assert binomial_cdf(k, n, q) == pytest.approx(exact, rel=1e-9, abs=1e-12)


def test_a_sure_pass_needs_enough_requests_with_none_over() -> None:
    # (1 - q)^n <= 0.05: a p99 from 299 requests, a p90 from 29, a p50 from 5
    assert (needed_for_sure_pass(0.01), needed_for_sure_pass(0.1), needed_for_sure_pass(0.5)) == (299, 29, 5)
    not_yet = share_check("ttft_p99", 0, 40, 0.01, 900.0, 2000.0, "ms")  # a p99 from 40 requests is not a p99
    assert not_yet.met and not not_yet.sure and not_yet.needed == 299
    assert share_check("ttft_p99", 0, 299, 0.01, 900.0, 2000.0, "ms").sure
    assert not share_check("ttft_p99", 0, 298, 0.01, 900.0, 2000.0, "ms").sure
    # a fail is sure when that many over would be unlikely were the true share at the limit
    assert share_check("ttft_p90", 10, 24, 0.1, 3000.0, 2000.0, "ms").sure
    assert not share_check("ttft_p90", 3, 24, 0.1, 2100.0, 2000.0, "ms").sure


def test_the_slo_grammar_takes_rates_error_budgets_and_sessions() -> None:
    slo = SLO.parse("ttft_p99=2s,agent_tps=30,errors=1%,session_p90=5m")
    assert slo.percentile_ms == {("ttft", "p99"): 2000.0} and slo.agent_tps == 30 and slo.error_share == 0.01
    assert slo.session_ms == {"p90": 300_000.0} and slo.decides_levels
    assert slo.headline() == "TTFT p99 <= 2 s and >= 30 tok/s each and <= 1.0% failed and session p90 <= 5 min"
    assert not SLO.parse("tpot=50ms").decides_levels  # a per-request limit decides goodput, not a level
    for bad, said in (("session=5m", "percentile"), ("errors=150%", "below 1"), ("agent_tps=-3", "positive"),
                      ("ttft_p42=1s", "p50, p90"), ("speed=3", "unknown SLO metric")):
        with pytest.raises(ValueError, match=said):
            SLO.parse(bad)


def _rec(i: int, ttft_ms: float | None, ok: bool = True) -> RequestRecord:
    r = RequestRecord(index=i, sent_ns=0)
    if ok and ttft_ms is not None:
        r.first_token_ns, r.end_ns, r.chunk_ns, r.output_tokens = int(ttft_ms * MS), int(ttft_ms * MS) + MS, \
            [int(ttft_ms * MS)], 2
    else:
        r.end_ns, r.error_kind = MS, "http"
    return r


def test_a_decided_fail_cannot_be_undone_by_the_requests_still_to_come() -> None:
    """Whenever decided_fail says a percentile cannot pass, the best the rest could do (every one of them at
    0 ms) still leaves the percentile over the limit; and it says so as soon as that is true."""
    from tokenbench.slo import _percentile

    rng = random.Random(7)
    slo = SLO.parse("ttft_p90=100ms")
    for _ in range(300):
        planned = rng.randint(5, 60)
        done = [_rec(i, rng.choice([50.0, 150.0, 40.0, 300.0])) for i in range(rng.randint(1, planned))]
        best = sorted([r.ttft_ns / MS for r in done if r.ttft_ns] + [0.0] * (planned - len(done)))
        cannot_pass = _percentile(best, 90) > 100
        over = sum(1 for r in done if (r.ttft_ns or 0) > 100 * MS)
        said = decided_fail(slo, done, planned)
        if said is not None:
            assert cannot_pass, (planned, over)
            # the count is the one at the decision: a level's table, with the in-flight requests done, counts more
            assert said.startswith(f"when it stopped sending, {over} of the {planned} planned requests were over")
        # the rank rule is exact where the neighbouring ranks are both over: then it must have spoken
        if planned - over <= math.floor((planned - 1) * 0.9):
            assert said is not None
    failed = [_rec(i, None, ok=False) for i in range(2)]
    assert "failed" in (decided_fail(SLO.parse("errors=5%"), failed, 20) or "")
    assert decided_fail(SLO.parse("errors=10%"), failed, 20) is None  # 2 of 20 is within 10%


# ------------------------------------------------------------------------------------------------------------
# The search, against servers whose capacity is known


def _search(spec: SearchSpec, meets: "callable[[float], bool]") -> tuple[list[Verdict], str]:  # type: ignore[valid-type]
    verdicts: list[Verdict] = []
    for i in itertools.count():
        value, ended = next_value(spec, verdicts)
        if value is None:
            return verdicts, ended
        assert spec.low <= value <= spec.high and all(v.value != value for v in verdicts), (value, verdicts)
        verdicts.append(Verdict(value, meets(value), [], 1, None, i))
        assert i < 40


@pytest.mark.parametrize("capacity", [1, 2, 3, 7, 11, 12, 33, 63])
def test_the_search_brackets_then_bisects_to_adjacent_levels(capacity: int) -> None:
    spec = SearchSpec("concurrency", 1, 64, resolution=0)
    verdicts, ended = _search(spec, lambda v: v <= capacity)
    from tokenbench.capacity import bracket

    assert ended == "resolved" and bracket(verdicts) == (capacity, capacity + 1)
    # doubling up to the first fail, then halving the bracket: about 2 log2 of the range, never a scan
    assert len(verdicts) <= 2 * math.ceil(math.log2(64)) + 1


def test_the_search_ends_at_the_range_when_none_or_every_level_meets() -> None:
    spec = SearchSpec("concurrency", 2, 40)
    verdicts, ended = _search(spec, lambda v: False)
    assert ended == "none" and [v.value for v in verdicts] == [2]
    verdicts, ended = _search(spec, lambda v: True)
    assert ended == "all" and [v.value for v in verdicts] == [2, 4, 8, 16, 32, 40]


def test_a_rate_search_stops_within_its_resolution() -> None:
    spec = SearchSpec("rate", 0.5, 64, resolution=0.1)
    verdicts, ended = _search(spec, lambda v: v <= 13.7)
    from tokenbench.capacity import bracket

    last, first = bracket(verdicts)
    assert ended == "resolved" and last is not None and first is not None
    assert last <= 13.7 < first <= last * 1.1


def test_a_noisy_verdict_above_the_first_fail_does_not_raise_the_answer() -> None:
    """A server whose verdict near its limit is a coin toss: the answer is the last pass below the lowest fail,
    so it never lies above a level that failed, and stays within the noisy band."""
    from tokenbench.capacity import bracket

    for seed in range(50):
        rng = random.Random(seed)
        verdicts, _ = _search(SearchSpec("concurrency", 1, 64),
                              lambda v: v <= 9 or (v <= 12 and rng.random() < 0.5))
        last, first = bracket(verdicts)
        assert last is not None and first is not None and 9 <= last < first <= 13
        assert not any(v.met is False and v.value <= last for v in verdicts)


# ------------------------------------------------------------------------------------------------------------
# tokenbench capacity against the emitter: each stream's tokens slow as more streams generate, so per-agent
# tok/s falls with the agents (measured: 231, 160, 122, 99, 82, 71, 61, 56 tok/s at 1..8 agents, jitter or not)

SATURATING = EmitterConfig(ttft_s=0.01, itl_s=0.004, itl_per_stream_s=0.002)
QUICK = ["--input-len", "16", "--output-len", "24", "--quiet", "--no-metrics", "--guard", "off"]


def _capacity(url: str, db: Path, *args: str, out: Path | None = None) -> tuple[int, dict]:
    out = out or db.with_suffix(".json")
    rc = main(["capacity", "--url", url, "--db", str(db), "--json", str(out), *QUICK, *args])
    return rc, json.loads(out.read_text())


def test_capacity_finds_the_agents_a_saturating_server_serves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with BackgroundEmitter(SATURATING) as em:
        rc, doc = _capacity(em.url, tmp_path / "c.db", "--slo", "agent_tps=90", "--concurrency", "1:16",
                            "--requests", "24", "--price-per-hour", "2")
    said = capsys.readouterr().out
    cap = doc["capacity"]
    assert rc == 0 and cap["ended"] == "resolved" and (cap["capacity"], cap["first_fail"]) == (4, 5)
    assert "this box serves 4 agents (4 met the SLO, 5 did not) at >= 90 tok/s each" in said
    assert "0.500 USD per agent-hour" in said  # 2 USD an hour over 4 agents
    # every level the search ran is a stored level of the run, in the JSON too
    levels = sorted(lv["concurrency"] for lv in doc["levels"])
    assert levels == sorted(v["value"] for v in cap["levels"]) and {1, 2, 4, 8, 5}.issubset(levels)
    assert all(lv["slo_checks"] and lv["slo_met"] == (lv["concurrency"] <= 4) for lv in doc["levels"])
    # read back, the run says what the search said
    assert main(["show", doc["run_id"], "--db", str(tmp_path / "c.db")]) == 0
    again = capsys.readouterr().out
    assert "this box serves 4 agents (4 met the SLO, 5 did not) at >= 90 tok/s each" in again
    assert said.split("this box serves", 1)[1] == again.split("this box serves", 1)[1]
    # and as JSON: the search's answer, which only capacity --json wrote
    assert main(["show", doc["run_id"], "--db", str(tmp_path / "c.db"), "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["capacity"] == cap


def test_a_noisy_server_is_found_within_what_a_full_sweep_shows(tmp_path: Path) -> None:
    """With every delay scaled by a random factor (30% spread), the capacity found lies between the last level a
    plain sweep over every level passed and the first it failed, and the search spent fewer requests."""
    noisy = EmitterConfig(ttft_s=0.01, itl_s=0.004, itl_per_stream_s=0.002, jitter=0.3, jitter_seed=3)
    with BackgroundEmitter(noisy) as em:
        rc, doc = _capacity(em.url, tmp_path / "n.db", "--slo", "agent_tps=90", "--concurrency", "1:8",
                            "--requests", "24")
        sweep = asyncio.run(run_sweep(SweepConfig(url=em.url, workload=LengthsKind.fixed(16, 24), concurrency=list(range(1, 9)),
                                                  requests=24, guard="off", metrics_interval_s=None,
                                                  slo=SLO.parse("agent_tps=90")), Store(tmp_path / "n.db")))
    plain = answer(sweep)
    assert rc == 0 and plain is not None and plain.capacity is not None and plain.first_fail is not None
    found = doc["capacity"]
    assert plain.capacity <= found["capacity"] < plain.first_fail
    assert found["requests"] < plain.requests


def test_an_slo_no_level_meets_stops_at_the_first_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with BackgroundEmitter(SATURATING) as em:
        rc, doc = _capacity(em.url, tmp_path / "x.db", "--slo", "ttft_p50=1ms", "--concurrency", "2:16",
                            "--requests", "24")
    said = capsys.readouterr().out
    assert rc == 0 and doc["capacity"]["ended"] == "none" and doc["capacity"]["capacity"] is None
    assert [lv["concurrency"] for lv in doc["levels"]] == [2]
    # the p50 could not pass once half the planned requests were over: the level stopped there
    (level,) = doc["levels"]
    assert "stopped_early" in level["flags"] and level["completed"] < 24
    assert "no level met TTFT p50 <= 1 ms" in said


def test_an_slo_every_level_meets_says_the_range_was_too_small(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    with BackgroundEmitter(SATURATING) as em:
        rc, doc = _capacity(em.url, tmp_path / "a.db", "--slo", "ttft_p90=10s", "--concurrency", "1:6",
                            "--requests", "12")
    assert rc == 0 and doc["capacity"]["ended"] == "all" and doc["capacity"]["capacity"] == 6
    assert sorted(lv["concurrency"] for lv in doc["levels"]) == [1, 2, 4, 6]
    assert "serves at least 6 agents" in capsys.readouterr().out


def test_an_open_loop_level_stops_when_its_queue_grows(tmp_path: Path) -> None:
    """Two slots, 74 ms a request: about 27 requests/s. Sent faster, requests pile up in flight and TTFT climbs
    through the level; the level stops, says so, and the search goes on below it. (At 90 ms a request, 22 a
    second, the search's middle level of 22.6/s sat at the limit, and a busy machine stopped it too: the search
    then had no level between it and the 16/s served.)"""
    slow = EmitterConfig(ttft_s=0.01, itl_s=0.004, slots=2)
    with BackgroundEmitter(slow) as em:
        rc, doc = _capacity(em.url, tmp_path / "r.db", "--slo", "agent_tps=1", "--rate", "16:64", "--requests",
                            "160", "--arrival", "constant", "--resolution", "0.5", "--output-len", "16")
    assert rc == 0, doc
    stopped = [lv for lv in doc["levels"] if "stopped_early" in lv["flags"]]
    assert stopped and all(lv["rate"] >= 22 for lv in stopped)
    # and the search went on below it: between the doubling's last rate served (16) and the stopped one
    assert any(16 < lv["rate"] < stopped[0]["rate"] and "stopped_early" not in lv["flags"] for lv in doc["levels"])
    assert all(not lv["slo_met"] for lv in stopped)  # a rate the box does not sustain is not served
    assert any("over-saturated" in f["message"] for lv in stopped for f in lv["findings"])
    assert all(lv["completed"] + lv["failed"] < 160 for lv in stopped)


def test_a_time_budget_ends_the_search_and_keeps_its_levels(tmp_path: Path) -> None:
    with BackgroundEmitter(SATURATING) as em:
        t0 = time.monotonic()
        rc, doc = _capacity(em.url, tmp_path / "b.db", "--slo", "agent_tps=90", "--concurrency", "1:16",
                            "--requests", "400", "--budget", "2s")
    took = time.monotonic() - t0
    assert doc["capacity"]["ended"] == "budget" and took < 10
    cut = [lv for lv in doc["levels"] if lv["status"] == "partial"]
    assert len(cut) == 1 and any("budget" in f["message"] for f in cut[0]["findings"])
    assert rc == 0 and doc["status"] == "complete"


def test_a_search_whose_server_went_is_cut_short_not_answered_by_it(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The server gone mid-level (here in level 8's measured phase): that level is failed and says why, but gives
    no verdict, as a crash says nothing sure about the load; the search is cut short, not out of a --budget it
    never had (it said "the time budget ran out before the search resolved"). Exit 3, the run partial."""
    with EmitterProcess("--ttft", "0.01", "--itl", "0.004", "--itl-per-stream", "0.002", "--exit-after", "100") as em:
        # the check request, then levels 1, 2 and 4 with their warm-ups (25 + 26 + 28), 8's warm-up and 12 more
        rc, doc = _capacity(em.url, tmp_path / "g.db", "--slo", "agent_tps=90", "--concurrency", "1:16",
                            "--requests", "24", "--stall-timeout", "2s")
    said = capsys.readouterr().out
    assert rc == 3 and doc["status"] == "partial"
    gone = [lv for lv in doc["levels"] if "server_gone" in lv["flags"]]
    assert [lv["concurrency"] for lv in gone] == [8] and gone[0]["status"] == "failed" and gone[0]["completed"] > 0
    assert gone[0]["slo_met"] is None
    cap = doc["capacity"]
    assert cap["ended"] == "running" and (cap["capacity"], cap["first_fail"]) == (4, None), cap
    assert [v["met"] for v in cap["levels"]] == [True, True, True, None]
    assert "this box serves at least 4 agents at >= 90 tok/s each (cut short before the limit was found)" in said
    assert "the run stopped here: the server stopped answering during the level (concurrency 8)" in said
    # read back, the stored level says the same
    res = load_result(Store(tmp_path / "g.db"), doc["run_id"])
    found = answer(res)
    assert found is not None and found.ended == "running" and found.first_fail is None


def test_an_interrupted_search_keeps_what_it_measured(tmp_path: Path) -> None:
    """A real SIGINT to the command mid-search: the finished levels are stored and their verdicts answer as far
    as they go; the run is interrupted, exit 130."""
    db = tmp_path / "i.db"
    with EmitterProcess("--ttft", "0.01", "--itl", "0.004", "--itl-per-stream", "0.002") as em:
        proc = subprocess.Popen([sys.executable, "-m", "tokenbench", "capacity", "--url", em.url, "--db", str(db),
                                 "--slo", "agent_tps=90", "--concurrency", "1:16", "--requests", "60", *QUICK],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # two levels finished: 2 x (60 + warm-up) requests served
            with urllib.request.urlopen(em.url.rsplit("/v1", 1)[0] + "/stats") as r:
                if len(json.load(r)["stamps"]) >= 130:
                    break
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    res = load_result(Store(db), Store(db).runs()[0].id)
    assert res.status == "interrupted" and len(res.outcomes) >= 2
    found = answer(res)
    assert found is not None and found.ended == "interrupted" and found.capacity is not None
    assert "this box serves" in out
    # the level the interrupt cut has no verdict, in the search's table and in its own slo_met (which read true)
    cut = [o for o in res.outcomes if o.status == "interrupted"]
    assert cut and all(o.serving is not None and o.serving.slo_met is None for o in cut), \
        [(o.status, o.serving and o.serving.slo_met) for o in res.outcomes]
    assert all(v.met is None for v in found.verdicts if v.idx in {o.idx for o in cut})


def test_capacity_refuses_what_it_cannot_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for args, said in ((["--slo", "tpot=50ms"], "with a percentile"),
                       (["--slo", "ttft_p90=1s", "--concurrency", "8:2"], "LOW:HIGH"),
                       (["--slo", "ttft_p90=1s", "--concurrency", "1:4", "--rate", "1:4"], "not both"),
                       (["--slo", "ttft_p90=1s", "--concurrency", "1.5:4"], "whole agents"),
                       (["--slo", "ttft_p90=1s", "--rate", "a:b"], "LOW:HIGH")):
        rc = main(["capacity", "--url", "http://127.0.0.1:9/v1", "--db", str(tmp_path / "r.db"), *args])
        err = capsys.readouterr().err
        assert rc == 2 and said in err and "Traceback" not in err, (args, err)
    assert not (tmp_path / "r.db").exists()


def test_the_engine_s_queue_is_named_before_a_flagged_client() -> None:
    """A failing level's limit: the engine's own queue when its /metrics saw one, the client's wait beside it
    when the client was flagged too, and the client alone only when the engine showed no limit."""
    level = summarize([], concurrency=8, rate=None, window_start_ns=0, window_end_ns=1_000_000_000)
    assert limit_cause(level) is None
    client = Finding(Code.CLIENT_BOUND, "client-bound: requests waited 16.7 ms at p90 in the client")
    level.findings.append(client)
    assert limit_cause(level) == "perhaps the client, not the box (it was flagged): requests waited 16.7 ms at p90 in the client"
    level.telemetry = Telemetry(running_max=4, waiting_max=3)
    said = limit_cause(level) or ""
    assert said.startswith("requests waited in the engine's queue (at most 3 waiting and 4 running") and \
        said.endswith("; the client was also flagged: requests waited 16.7 ms at p90 in the client"), said
    level.findings.remove(client)
    assert "the client" not in (limit_cause(level) or "the client")
    # the engine's own count of the time requests waited (a histogram's sum over count), where the sampled gauges
    # saw nothing waiting: said when it is a tenth of the median TTFT or more
    level.telemetry = Telemetry(running_max=8, waiting_max=0, queue_time_mean_ms=30.0)
    level.ttft_ms = Distribution(n=8, p50=400.0)
    assert limit_cause(level) is None
    level.telemetry.queue_time_mean_ms = 120.0
    assert (limit_cause(level) or "").startswith("requests waited 120 ms each in the engine's queue on average (30% "
                                                 "of the median TTFT")
    # slots the passing level below also exceeded are no limit: a search answered 5 agents on 4 slots and said
    # "limit at 6 agents: concurrency 6 exceeds the server's 4 slots"
    level.telemetry = None
    six, five = level, summarize([], concurrency=5, rate=None, window_start_ns=0, window_end_ns=1_000_000_000)
    six.findings.append(Finding(Code.SLOTS_EXCEEDED, "concurrency 6 exceeds the server's 4 slots"))
    assert limit_cause(six) == "the engine's slots: concurrency 6 exceeds the server's 4 slots"
    assert limit_cause(six, five) == "the engine's slots: concurrency 6 exceeds the server's 4 slots"
    five.findings.append(Finding(Code.SLOTS_EXCEEDED, "concurrency 5 exceeds the server's 4 slots"))
    assert limit_cause(six, five) is None


def test_a_stored_check_reads_back_as_written() -> None:
    c = SloCheck("ttft_p99", 812.0, 2000.0, "ms", True, 40, 0, 0.67, 299)
    assert SloCheck.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert SloCheck.from_dict({"name": "x"}) is None
    assert "not sure: 0 of 40 over, sure from 299" in c.describe()


def test_a_check_reads_without_exponents_and_one_agent_is_an_agent() -> None:
    """Seen on llama-server: "ttft_p90 1.57e+03 ms" in the verdict table and "serves 1 agents" in the headline;
    on vLLM, a FAIL whose failing objective was not said (TTFT within its limit, the agents' rate under it)."""
    from tokenbench.capacity import CapacityAnswer
    from tokenbench.capacity_text import answer_lines, headline
    from tokenbench.capacity_text import check_text as _check

    assert _check(SloCheck("ttft_p90", 1570.4, 1000.0, "ms", False, 7, 6)) == "ttft_p90 1.57 s (limit 1 s), 6/7 over"
    assert _check(SloCheck("ttft_p90", 830.2, 1000.0, "ms", True, 32, 0, needed=29)) == \
        "ttft_p90 830 ms, 0/32 over, sure from 29"
    assert _check(SloCheck("agent_tps", 1234.5, 15.0, "tok/s", True, 32)) == "agent_tps 1,234 tok/s"
    assert _check(SloCheck("agent_tps", 14.3, 15.0, "tok/s", False, 32)) == "agent_tps 14.3 tok/s (limit 15.0 tok/s)"
    # a rate reads as the table's and the SLO FAIL line's do, one decimal: "14.0", not "14"
    assert _check(SloCheck("agent_tps_p90", 14.0, 15.0, "tok/s", False, 32, 30)) == \
        "agent_tps_p90 14.0 tok/s (limit 15.0 tok/s), 30/32 under"
    # a FAIL whose value rounds to its limit (a real llama-server level read 30.013 ms against 30 ms) shows the
    # decimals that tell them apart, not "30 ms (limit 30 ms)", which reads as a tie that failed
    assert _check(SloCheck("ttft_p90", 30.013, 30.0, "ms", False, 40, 4)) == \
        "ttft_p90 30.01 ms (limit 30 ms), 4/40 over"
    assert _check(SloCheck("agent_tps", 14.996, 15.0, "tok/s", False, 32)) == \
        "agent_tps 14.996 tok/s (limit 15.0 tok/s)"
    assert _check(SloCheck("error_rate", 0.01001, 0.01, "share", False, 999)) == "error_rate 1.001% (limit 1.0%)"
    from tokenbench.sweep_table import _missed  # the sweep's SLO FAIL line, alike
    assert _missed(SloCheck("ttft_p90", 30.013, 30.0, "ms", False, 40, 4)) == \
        "ttft_p90 30.01 ms against <= 30 ms (4 of 40 over)"
    one = CapacityAnswer(SearchSpec("concurrency", 1, 16), "TTFT p90 <= 1 s", "resolved", [], 1.0, 2.0, None, None)
    assert headline(one) == "this box serves 1 agent (1 met the SLO, 2 did not) at TTFT p90 <= 1 s"
    # nor "not even 1 agents", "limit at 1 agents" or "search: 1 levels"
    none = CapacityAnswer(SearchSpec("concurrency", 1, 16), "TTFT p90 <= 1 s", "none", [], None, 1.0, None,
                          "its TTFT")
    assert headline(none) == "no level met TTFT p90 <= 1 s: not even 1 agent"
    sentences, details = answer_lines(none)
    assert "limit at 1 agent: its TTFT" in details and any(d.startswith("search: 0 levels, 0 requests") for d in details)


def test_a_session_search_holds_turn_ttft_and_session_time(tmp_path: Path) -> None:
    """Agent sessions: the SLO's TTFT percentile is over every turn, session_p90 over the sessions' times; the
    search finds where the sessions' time passes the limit (each turn's tokens slow as more agents generate)."""
    with BackgroundEmitter(SATURATING) as em:
        rc, doc = _capacity(em.url, tmp_path / "s.db", "--slo", "ttft_p90=2s,session_p90=350ms", "--concurrency",
                            "1:8", "--sessions", "8", "--turns", "2")
    cap = doc["capacity"]
    assert rc == 0 and cap["ended"] == "resolved", cap
    for lv in cap["levels"]:
        checks = {c["name"]: c for c in lv["checks"]}
        assert {"ttft_p90", "session_p90"} <= set(checks), checks
        assert checks["ttft_p90"]["n"] >= 2 * checks["session_p90"]["n"] > 0  # turns, and the sessions they make
        assert lv["met"] == all(c["met"] for c in lv["checks"])
    session_p90 = {lv["value"]: {c["name"]: c for c in lv["checks"]}["session_p90"]["value"] for lv in cap["levels"]}
    assert session_p90[cap["capacity"]] <= 350 < session_p90[cap["first_fail"]], session_p90
    assert 1 <= cap["capacity"] < cap["first_fail"] <= 8


def test_capacity_of_a_url_without_lengths_takes_the_default_shape(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A search of a server given by its URL and no lengths, as the README writes it, reached for the embedded
    engine's lengths (an internal error, exit 70): it takes the default shape, and a server nothing answers at is
    said in a line (exit 3), for every kind of search."""
    dead = ["capacity", "--url", "http://127.0.0.1:9/v1", "--slo", "ttft_p90=1s", "--concurrency", "1:4",
            "--db", str(tmp_path / "r.db")]
    for extra in ([], ["--sessions", "4"], ["--cache-cliff"]):
        rc = main([*dead, *extra])
        err = capsys.readouterr().err
        assert rc == 3 and "internal error" not in err and "Traceback" not in err, (extra, err)
    with BackgroundEmitter(EmitterConfig()) as em:
        out = tmp_path / "c.json"
        assert main(["capacity", "--url", em.url, "--slo", "ttft_p90=10s", "--concurrency", "1:2", "--requests", "8",
                     "--quiet", "--no-metrics", "--guard", "off", "--db", str(tmp_path / "c.db"), "--json",
                     str(out)]) == 0
    from tokenbench.workload import resolve_shape

    assert json.loads(out.read_text())["levels"][0]["input_tokens_mean"] == resolve_shape(None, None, None)[0]


def test_the_agent_rate_objective_reads_the_rate_the_table_shows() -> None:
    """At 4 agents the table said 382.8 tok/s each (over the level's plateau) and the verdict 'agent_tps 441 tok/s'
    (over its whole window): a user could not tell which decided. Both are now the plateau's, where it held."""
    from tokenbench.levels import ServingLevel
    from tokenbench.slo import SLO, assess
    from tokenbench.steady import Plateau

    s = ServingLevel(concurrency=4, completed=80, output_throughput_tps=1764.0, duration_s=10.0)
    s.plateau = Plateau(0.5, 9.5, 0.9, 4.0, 1531.2, 21.0, Distribution(n=8, p50=50), Distribution(n=8, p50=16), 80)
    check = next(c for c in assess(s, [], SLO.parse("agent_tps=400")) if c.name == "agent_tps")
    assert check.value == pytest.approx(382.8) == s.sustained_per_agent_tps and check.met is False
