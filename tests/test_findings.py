"""Typed findings: a closed set of codes, one rule list, flags and warnings as their view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tokenbench import findings
from tokenbench.guard_results import CheckResult, GuardSnapshot
from tokenbench.finding import Code, Finding
from tokenbench.findings import LevelFacts
from tokenbench.distribution import Distribution
from tokenbench.levels import DepthLevel, LevelSummary, ServingLevel
from tokenbench.metrics import summarize
from tokenbench.records import RequestRecord
from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter

MS = 1_000_000


def rec(i: int, out: int = 4, **kw: object) -> RequestRecord:
    r = RequestRecord(index=i, sent_ns=0)
    r.chunk_ns = [(k + 1) * 10 * MS for k in range(out)]
    r.first_byte_ns = r.first_token_ns = r.chunk_ns[0]
    r.end_ns = r.chunk_ns[-1]
    r.output_tokens, r.output_tokens_source = out, "usage"
    r.input_tokens, r.input_tokens_source = 100, "usage"
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def level(records: list[RequestRecord], concurrency: int = 1) -> LevelSummary:
    return summarize(records, concurrency=concurrency, rate=None, window_start_ns=0)


def test_summarize_keeps_statistics_only() -> None:
    r = rec(0, expected_output_tokens=64, finish_reason="stop")
    s = level([r])
    assert s.flags == [] and s.warnings == [] and s.findings == [] and s.cost_per_mtok is None
    codes = [f.code for f in findings.assess(LevelFacts([r], s, 1))]
    assert codes == [Code.OUTPUT_SHORT, Code.P99_ESTIMATE]


def test_flags_and_warnings_are_a_view_of_the_findings() -> None:
    rs = [rec(i, expected_output_tokens=64, finish_reason="stop") for i in range(3)]
    s = level(rs, concurrency=4)
    findings.assess(LevelFacts(rs, s, 4, 3, client_reasons=["client CPU 99% of a core > 80%"], peak_in_flight=3))
    assert s.flags == [f.code.value for f in s.findings]
    assert s.warnings == [f.text for f in s.findings if f.severity == "warning"]
    assert s.flags == ["output_short", "p99_estimate", "client_bound", "concurrency_not_reached"]
    short = s.finding(Code.OUTPUT_SHORT)
    assert short is not None and (short.observed, short.threshold, short.unit, short.n) == (4, 64, "tokens", 3)
    assert short.remedy == "compare TPOT, not throughput" and short.text.endswith(short.remedy)


def whole(i: int, out: int = 4) -> RequestRecord:
    """An answer whose tokens all came in one network read: every chunk stamped alike."""
    return rec(i, out, chunk_ns=[50 * MS] * out, first_token_ns=50 * MS, end_ns=50 * MS)


@pytest.mark.parametrize("whole_answers, flagged", [(1, False), (2, True), (10, True)])
def test_answers_that_arrive_in_one_read_are_flagged_past_a_tenth(whole_answers: int, flagged: bool) -> None:
    """A replay on a server whose whole answers came in one read printed a median TPOT of 0.0 ms, unflagged. A
    one-token answer has no TPOT and is not counted either way."""
    rs = [whole(i) if i < whole_answers else rec(i) for i in range(10)] + [whole(10, out=1)]
    s = level(rs)
    findings.assess(LevelFacts(rs, s, 1))
    found = s.finding(Code.ONE_READ)
    assert (found is not None) == flagged
    if found is not None:
        assert (found.observed, found.threshold, found.unit, found.n) == (whole_answers / 10, 0.10, "share", 10)
        assert found.message.startswith(f"{whole_answers} of 10 answers ({whole_answers / 10:.0%}) arrived whole")
    if whole_answers == 10:
        assert s.tpot_ms.p50 == 0.0  # the definition is vllm bench serve's: the finding says what it hides


def test_answers_read_back_to_back_after_a_stall_count_as_whole() -> None:
    """A client whose loop stalled read each answer's first token, then the rest microseconds later: 0.02 ms a
    token, a median TPOT printed "0.0 ms" and "single-stream decode 53,695 tok/s" from a model that decodes 200,
    with no one_read flag. Reads 2 ms a token apart are a decode, and stay one."""
    from tokenbench.sweep_table import tpot_shown

    burst = [rec(i, 8, chunk_ns=[50 * MS] + [50 * MS + 20_000 + k * 20 for k in range(7)], first_token_ns=50 * MS,
                 end_ns=50 * MS + 20_200) for i in range(10)]
    s = level(burst)
    findings.assess(LevelFacts(burst, s, 1))
    assert s.finding(Code.ONE_READ) is not None and 0 < (s.tpot_ms.p50 or 0) < 0.05
    assert tpot_shown(s) is None  # "—", and no decode rate beside it
    paced = [rec(i, 8, chunk_ns=[50 * MS + k * 2 * MS for k in range(8)], first_token_ns=50 * MS, end_ns=64 * MS)
             for i in range(10)]
    t = level(paced)
    findings.assess(LevelFacts(paced, t, 1))
    assert t.finding(Code.ONE_READ) is None and tpot_shown(t) == pytest.approx(2.0)


def test_slots_exceeded_is_added_once() -> None:
    """Two slot warnings from the adapter used to add the flag twice to one level."""
    r = rec(0)
    s = level([r])
    reasons = ["concurrency 8 exceeds the server's 1 slots", "a request needs 9000 tokens of context"]
    findings.assess(LevelFacts([r], s, 8, slot_reasons=reasons))
    findings.assess(LevelFacts([r], s, 8, slot_reasons=reasons))  # a second pass adds nothing
    assert s.flags.count("slots_exceeded") == 1
    assert len([w for w in s.warnings if "slots" in w]) == 1
    assert not s.add(Finding(Code.SLOTS_EXCEEDED, "again"))


def test_control_flow_reads_codes_not_wording() -> None:
    r = rec(0, input_tokens=2048, expected_input_tokens=4096)
    s = level([r])
    findings.assess(LevelFacts([r], s, 1))
    found = s.finding(Code.PROMPT_TRUNCATED)
    assert found is not None and found.observed == 2048 and found.threshold == 4096


def test_findings_round_trip_and_old_runs_load() -> None:
    r = rec(0, output_tokens_source="tokenizer")
    s = level([r])
    findings.assess(LevelFacts([r], s, 1, guard=GuardSnapshot.written(clean=False, checks=[
        CheckResult("cpu_load", "fail", "93%", advice="stop the build")]), run_id="x"))
    d = json.loads(json.dumps(s.to_dict()))
    assert [f["code"] for f in d["findings"]] == d["flags"] == ["usage_absent", "p99_estimate", "dirty_bench"]
    back = LevelSummary.from_dict(d)
    assert back.findings == s.findings and back.flags == s.flags and back.warnings == s.warnings
    dirty = back.finding(Code.DIRTY_BENCH)
    assert dirty is not None and "cpu_load" in dirty.message and dirty.observed == 1
    # a run stored before findings: flags and warnings as they were, no findings
    d.pop("findings")
    old = LevelSummary.from_dict(d)
    assert old.findings == [] and old.flags == s.flags
    # a code from a newer version is left out, not a crash
    d["findings"] = [{"code": "from_the_future", "message": "?"}]
    assert LevelSummary.from_dict(d).findings == []


def test_every_rule_has_a_reason_and_one_code() -> None:
    codes = [r.code for r in findings.LEVEL_RULES]
    assert len(codes) == len(set(codes))
    assert all(len(r.reason) > 20 for r in findings.LEVEL_RULES)
    assert set(codes) <= set(Code)


def test_an_open_loops_json_withholds_the_per_agent_rate_its_table_does() -> None:
    """A trace at its recorded times showed "—" per agent and wrote 631.5 tok/s to the JSON, aggregate 46.3."""
    from tokenbench.replay_stats import replay_stats
    from tokenbench.sweep_table import per_agent_shown

    def open_loop(held: float, **kw: Any) -> ServingLevel:
        return ServingLevel(concurrency=None, rate=3.57, test="serve", output_throughput_tps=46.3, completed=16,
                            achieved_concurrency=held, **kw)

    for s in open_loop(0.0733), open_loop(2.0, replay=replay_stats([], None)):
        assert s.to_dict()["per_agent_tps"] is None and per_agent_shown(s) is None
    over = open_loop(2.0)
    assert over.to_dict()["per_agent_tps"] == per_agent_shown(over) == 46.3 / 2
    assert ServingLevel(concurrency=8, test="serve", output_throughput_tps=400.0).to_dict()["per_agent_tps"] == 50.0


def test_derived_rates_are_properties_with_one_definition() -> None:
    """Per-agent throughput and decode rate were assigned in 6 and 2 places: now derived once."""
    lv = ServingLevel(concurrency=8, test="serve", output_throughput_tps=400.0)
    assert lv.per_agent_tps == 50.0
    lv.output_throughput_tps = 800.0  # a combined repetition's median: per agent follows
    assert lv.per_agent_tps == 100.0
    assert DepthLevel(test="tg128", depth=0, tg_tps=50.0).to_dict()["per_agent_tps"] is None  # no throughput figure
    rs = [rec(i) for i in range(3)]  # 4 tokens 10 ms apart: TPOT 10 ms
    s = level(rs)
    assert s.decode_tps == 100.0
    d = s.to_dict()
    assert d["decode_tps"] == 100.0 and d["per_agent_tps"] == s.per_agent_tps and "given_decode_tps" not in d
    assert list(d).index("per_agent_tps") == list(d).index("output_throughput_tps") + 1
    # a decode rate a published table gave is kept, stored and loaded as such
    pub = ServingLevel(concurrency=1, test="serve", given_decode_tps=77.0)
    assert pub.decode_tps == 77.0 and LevelSummary.from_dict(pub.to_dict()).decode_tps == 77.0
    # a predicted level (nothing measured) derives no decode rate from its TPOT
    assert ServingLevel(concurrency=1, test="serve", output_throughput_tps=9.0,
                              tpot_ms=Distribution(n=0, p50=5.0)).decode_tps is None


def test_imported_levels_are_built_by_typed_keywords() -> None:
    import pytest

    with pytest.raises(TypeError):
        ServingLevel(concurrency=1, output_throughput=5.0)  # type: ignore[call-arg]  # misspelt: refused, not dropped


def test_findings_of_odd_shapes_in_a_stored_level_are_left_out() -> None:
    base = level([rec(0)]).to_dict()
    for odd in (5, "x", [5, {"code": ["list"]}, {"code": "unstable", "message": "m", "bogus": 1}], None):
        d = dict(base, findings=odd)
        assert LevelSummary.from_dict(d).findings in ([], [Finding(Code.UNSTABLE, "m")])


def test_a_cached_share_the_servers_counters_contradict_is_flagged() -> None:
    """The cached share the responses report is checked against the server's /metrics over the level."""
    from tokenbench.finding import Code
    from tokenbench.findings import CACHE_COUNT_TOLERANCE, LevelFacts, assess
    from tokenbench.levels import LevelSummary, Telemetry

    def level(said: float | None, hit: float | None, sent: float | None = None, cut: bool = False) -> LevelSummary:
        s = ServingLevel(concurrency=2, completed=4)
        s.cached_share = said
        s.telemetry = Telemetry(prefix_cache_hit_rate=hit)
        assess(LevelFacts([], s, 2, sent_cached_share=sent, interrupted=cut))
        return s

    flagged = level(0.79, 0.40).finding(Code.CACHE_COUNTS_DISAGREE)
    assert flagged is not None and "79%" in flagged.message and "40%" in flagged.message
    assert flagged.observed == pytest.approx(0.39) and flagged.threshold == CACHE_COUNT_TOLERANCE
    assert "cache_counts_disagree" in level(0.79, 0.40).flags
    for said, hit in ((0.79, 0.79), (0.79, 0.72), (None, 0.5), (0.5, None)):
        assert level(said, hit).finding(Code.CACHE_COUNTS_DISAGREE) is None
    # a replay's lanes each warm a call inside the level, uncounted, which /metrics counts: the responses' share
    # over every request sent in the window is what it is held to (on llama-server: 94% measured, 81% both ways)
    assert level(0.94, 0.81, sent=0.81).finding(Code.CACHE_COUNTS_DISAGREE) is None
    assert level(0.81, 0.81, sent=0.60).finding(Code.CACHE_COUNTS_DISAGREE) is not None
    # Ctrl-C cut requests the server had counted and no response said (a replay read 91% against /metrics' 78%)
    assert level(0.91, 0.78, sent=0.91, cut=True).finding(Code.CACHE_COUNTS_DISAGREE) is None


def test_an_open_loop_of_few_arrivals_is_not_read_as_its_rate(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """One request at 0.5/s read 1,146 tok/s against 64 offered: the window from its first send to its last
    answer was that request alone. Enough arrivals at constant gaps put out what they were offered, and so does a
    level held for a duration: its window is the duration, however few arrived in it."""
    emitter.configure(itl_s=0.002)
    runs = {}
    for name, argv in (("one", ["--rate", "0.5", "--requests", "1"]),
                       ("many", ["--rate", "20", "--arrival", "constant", "--requests", "40"]),
                       ("held", ["--rate", "0.5", "--arrival", "constant", "--duration", "2s"])):
        out = tmp_path / f"{name}.json"
        assert main(["sweep", "--url", emitter.url, "--quiet", "--no-metrics", "--guard", "off", "--input-len", "16",
                     "--output-len", "32", "--json", str(out), *argv]) == 0
        runs[name] = json.loads(out.read_text())["levels"][0]
    one = runs["one"]
    assert "over_offered" in one["flags"]
    said = next(f for f in one["findings"] if f["code"] == "over_offered")
    assert "above the load offered (0.5/s x 32 tokens = 16.0 tok/s): over 1 arrival" in said["message"], said
    assert "over_offered" not in runs["many"]["flags"], runs["many"]["findings"]
    assert said["remedy"] == "more requests (--requests 30 or more) or --duration", said
    held = runs["held"]  # one arrival, at 0 s (the next, at 2 s, is the level's end): 32 tokens over 2 s
    assert held["completed"] == 1 and held["duration_s"] >= 2.0, held
    assert held["output_throughput_tps"] <= 16.0 and "over_offered" not in held["flags"], held


@pytest.mark.parametrize("slow_prompt, flagged", [(100, True), (4000, False)])
def test_a_tail_of_large_prompts_is_not_blamed_on_warm_up(slow_prompt: int, flagged: bool) -> None:
    """Two of twenty first tokens far slower than the rest read as a cost paid once (a compile, a cache fill),
    and the advice is more warm-up. Where those two had 40 times the tokens to prefill (a trace's or a dataset's
    large prompts) they are the workload, measured, and warm-up would not change them."""
    def slow(i: int) -> RequestRecord:
        r = rec(i, input_tokens=slow_prompt)
        r.first_token_ns = 400 * MS  # 40 times the others' 10 ms
        return r

    rs = [rec(i) for i in range(18)] + [slow(18), slow(19)]
    s = level(rs)
    findings.assess(LevelFacts(rs, s, 1))
    assert (Code.TAIL_CLUSTER in [f.code for f in s.findings]) is flagged


def test_a_peak_kv_cache_no_sample_saw_is_not_printed_as_zero() -> None:
    """A 1-second level between two 5-second /metrics samples printed "peak KV cache 0%": both samples found the
    server idle. Where no sample caught a request running, the note says the peak was not seen."""
    from tokenbench.levels import Telemetry
    from tokenbench.sweep_table import notes

    s = ServingLevel(concurrency=4, completed=24)
    s.telemetry = Telemetry(samples=2, running_max=0.0, kv_cache_usage_max=0.0)
    said = " ".join(notes([s]))
    assert "peak KV cache 0%" not in said and "peak KV cache not seen (no /metrics sample of 2" in said, said
    s.telemetry = Telemetry(samples=5, running_max=4.0, kv_cache_usage_max=0.25)
    assert "peak KV cache 25%" in " ".join(notes([s]))
    # a small use of a large pool (a real vLLM read 0.12% of its 1 GiB pool) is not "0%"
    s.telemetry = Telemetry(samples=5, running_max=4.0, kv_cache_usage_max=0.0012)
    assert "peak KV cache 0.12%" in " ".join(notes([s]))


def test_an_over_offered_level_held_for_a_duration_is_told_to_hold_longer() -> None:
    """A level held for a duration was told "--duration" for the few arrivals it had: its remedy is a longer one."""
    rs = [rec(i, out=32, sent_ns=i * 10 * MS) for i in range(4)]  # 4 arrivals at 0.5/s in 0.35 s: 365 tok/s
    s = summarize(rs, concurrency=None, rate=0.5, window_start_ns=0)
    for requests, remedy in ((None, "a longer --duration"), (4, "more requests (--requests 30 or more) or --duration")):
        found = findings.over_offered(LevelFacts(rs, s, None, requests))
        assert found is not None and found.remedy == remedy, found
