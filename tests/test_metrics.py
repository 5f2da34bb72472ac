from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fuzz_examples
from tokenbench import findings
from tokenbench.finding import Code, Finding
from tokenbench.pricing import cost_per_mtok
from tokenbench.distribution import Distribution, Tally, percentile
from tokenbench.levels import LEVEL_KEYS, DepthLevel, LevelSummary, ServingLevel, depth_levels, serving
from tokenbench.metrics import summarize
from tokenbench.slo import SLO, parse_duration_ms, request_tpot_ms
from tokenbench.records import RequestRecord

MS = 1_000_000


def rec(i: int, sent_ms: float, chunks_ms: list[float], out: int, inp: int = 100, **kw: object) -> RequestRecord:
    r = RequestRecord(index=i, sent_ns=int(sent_ms * MS))
    r.chunk_ns = [int(c * MS) for c in chunks_ms]
    r.first_byte_ns = r.chunk_ns[0] if r.chunk_ns else None
    r.first_token_ns = r.chunk_ns[0] if r.chunk_ns else None
    r.end_ns = int((chunks_ms[-1] if chunks_ms else sent_ms) * MS) + 0
    r.output_tokens, r.output_tokens_source = out, "usage"
    r.input_tokens, r.input_tokens_source = inp, "usage"
    r.expected_output_tokens = kw.pop("expected", out)  # type: ignore[assignment]
    r.expected_input_tokens = kw.pop("expected_in", inp)  # type: ignore[assignment]
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def assessed(records: list[RequestRecord], concurrency: int | None = 1) -> LevelSummary:
    """A level's statistics with the findings its records alone decide (summarize keeps statistics only)."""
    s = summarize(records, concurrency=concurrency, rate=None, window_start_ns=0)
    findings.assess(findings.LevelFacts(records, s, concurrency))
    return s


def test_percentile_matches_hand_computation() -> None:
    vals = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(vals, 50) == 3.0
    # p90: position 0.9 * 4 = 3.6 -> 4 + 0.6 * (10 - 4) = 7.6
    assert percentile(vals, 90) == pytest.approx(7.6)
    assert percentile(vals, 99) == pytest.approx(4 + 0.96 * 6)
    assert percentile([5.0], 99) == 5.0
    d = Distribution.of([3.0, 1.0, 2.0])
    assert (d.n, d.mean, d.min, d.max, d.p50) == (3, 2.0, 1.0, 3.0, 2.0)
    assert Distribution.of([]).n == 0


def test_ttft_tpot_itl_e2e_by_hand() -> None:
    # Sent at 0; tokens at 100, 110, 130, 160 ms: TTFT 100, E2E 160, TPOT (160-100)/3 = 20, ITL 10/20/30.
    r = rec(0, 0, [100, 110, 130, 160], out=4)
    s = summarize([r], concurrency=1, rate=None, window_start_ns=0)
    assert s.ttft_ms.p50 == pytest.approx(100)
    assert s.e2e_ms.p50 == pytest.approx(160)
    assert s.tpot_ms.p50 == pytest.approx(20)
    assert sorted([s.itl_ms.min, s.itl_ms.p50, s.itl_ms.max]) == pytest.approx([10, 20, 30])
    assert s.itl_rule == "per_chunk"
    # 4 tokens over a 160 ms window
    assert s.output_throughput_tps == pytest.approx(4 / 0.160)
    assert s.prefill_tps == pytest.approx(100 / 0.100)
    assert s.decode_tps == pytest.approx(1000 / 20)


def test_tpot_with_several_tokens_per_chunk_uses_token_count() -> None:
    # 100 chunks 10 ms apart, 4 tokens each, usage 400: TPOT = 990 ms / 399 ≈ 2.48 ms; ITL per chunk 10 ms.
    r = rec(0, 0, [10.0 * (i + 1) for i in range(100)], out=400)
    s = assessed([r])
    assert s.tpot_ms.p50 == pytest.approx(990 / 399)
    assert s.tpot_ms.p50 == pytest.approx(2.5, rel=0.01)
    assert s.itl_ms.p50 == pytest.approx(10)
    assert s.tokens_per_chunk_mean == pytest.approx(4)
    assert "multi_token_chunks" in s.flags


def test_tpot_undefined_for_one_token() -> None:
    assert request_tpot_ms(rec(0, 0, [50], out=1)) is None


def test_aggregate_and_per_agent_throughput() -> None:
    # Two agents, each 10 tokens, window 0..1000 ms -> 20 tok/s aggregate, 10 per agent.
    rs = [rec(0, 0, [100 * k for k in range(1, 11)], out=10), rec(1, 0, [100 * k for k in range(1, 11)], out=10)]
    s = summarize(rs, concurrency=2, rate=None, window_start_ns=0)
    assert s.output_throughput_tps == pytest.approx(20)
    assert s.per_agent_tps == pytest.approx(10)
    assert s.request_throughput_rps == pytest.approx(2)
    assert s.prefill_tps is None  # only reported at concurrency 1


def test_failed_requests_counted_by_kind_and_excluded_from_latency() -> None:
    ok = rec(0, 0, [100, 200], out=2)
    bad = rec(1, 0, [], out=0, error_kind="http_500", error="boom")
    bad2 = rec(2, 0, [], out=0, error_kind="stall", error="no bytes")
    s = assessed([ok, bad, bad2], concurrency=2)
    assert (s.completed, s.failed) == (1, 2)
    assert s.errors == {"http_500": 1, "stall": 1}
    assert s.ttft_ms.n == 1 and "errors" in s.flags


def test_e2e_latency_is_split_by_success_and_error() -> None:
    """E2E's error split: how long failed requests took to fail, beside the successes' e2e_ms."""
    ok = rec(0, 0, [100, 200], out=2)
    slow_fail = rec(1, 0, [], out=0, error_kind="stall", error="no bytes", end_ns=60_000 * MS)
    quick_fail = rec(2, 10, [], out=0, error_kind="http_500", error="boom", end_ns=30 * MS)
    s = assessed([ok, slow_fail, quick_fail], concurrency=3)
    assert (s.e2e_ms.n, s.e2e_ms.p50) == (1, 200.0)  # successes only, as before
    assert s.e2e_failed_ms is not None and (s.e2e_failed_ms.n, s.e2e_failed_ms.min, s.e2e_failed_ms.max) == \
        (2, 20.0, 60_000.0)
    d = s.to_dict()
    assert d["e2e_failed_ms"]["n"] == 2 and d["e2e_ms"]["n"] == 1  # a new key; e2e_ms keeps its meaning
    assert LevelSummary.from_dict(d).e2e_failed_ms == s.e2e_failed_ms
    assert assessed([ok]).e2e_failed_ms == Distribution(n=0)
    old = {k: v for k, v in d.items() if k != "e2e_failed_ms"}  # a level stored before the split
    assert LevelSummary.from_dict(old).e2e_failed_ms is None


def test_ttft_itl_and_ttfb_are_split_by_success_and_error_too() -> None:
    """A stream that dies mid-way had a first token and gaps between its chunks: they go to the error split,
    never into the successes' ttft_ms and itl_ms; an HTTP error's body is a first byte of a failure."""
    ok = rec(0, 0, [100, 200], out=2)
    died = rec(1, 0, [40, 90, 5_090], out=0, error_kind="disconnect", error="server closed the stream")
    refused = rec(2, 0, [], out=0, error_kind="http_503", error="busy", end_ns=7 * MS, first_byte_ns=6 * MS)
    s = assessed([ok, died, refused], concurrency=3)
    assert (s.ttft_ms.n, s.ttft_ms.max, s.itl_ms.n, s.itl_ms.max) == (1, 100.0, 1, 100.0)  # successes only
    assert s.ttft_failed_ms is not None and (s.ttft_failed_ms.n, s.ttft_failed_ms.p50) == (1, 40.0)
    assert s.itl_failed_ms is not None and (s.itl_failed_ms.n, s.itl_failed_ms.min, s.itl_failed_ms.max) == \
        (2, 50.0, 5_000.0)
    assert s.ttfb_failed_ms is not None and (s.ttfb_failed_ms.n, s.ttfb_failed_ms.min) == (2, 6.0)
    d = s.to_dict()
    back = LevelSummary.from_dict(d)
    assert (back.ttft_failed_ms, back.itl_failed_ms, back.ttfb_failed_ms) == \
        (s.ttft_failed_ms, s.itl_failed_ms, s.ttfb_failed_ms)
    assert all(d[k]["n"] == 0 for k in ("ttft_failed_ms", "itl_failed_ms", "ttfb_failed_ms")
               for d in [assessed([ok]).to_dict()])


def test_warmup_not_counted() -> None:
    w = rec(0, 0, [5000], out=1, phase="warmup")
    m = rec(1, 0, [100, 200], out=2)
    s = summarize([w, m], concurrency=1, rate=None, window_start_ns=0)
    assert s.completed == 1 and s.ttft_ms.max == pytest.approx(100)


def test_short_outputs_flagged_with_lengths_reached() -> None:
    r = rec(0, 0, [10, 20, 30], out=3, expected=64, finish_reason="stop")
    s = assessed([r])
    assert "output_short" in s.flags
    assert any("reached 3..3" in w and "64" in w for w in s.warnings)


def test_truncated_prompt_flagged_but_bos_or_template_is_not() -> None:
    trunc = rec(0, 0, [10, 20], out=2, inp=2048, expected_in=4096)
    plus_bos = rec(1, 0, [10, 20], out=2, inp=4097, expected_in=4096)
    assert "prompt_truncated" in assessed([trunc]).flags
    assert "prompt_truncated" not in assessed([plus_bos]).flags


def test_usage_absent_is_labelled() -> None:
    r = rec(0, 0, [10, 20], out=2)
    r.output_tokens_source = "tokenizer"
    s = assessed([r])
    assert s.output_tokens_source == "tokenizer" and "usage_absent" in s.flags


def test_p99_under_100_samples_is_flagged_an_estimate() -> None:
    rs = [rec(i, 0, [10, 20], out=2) for i in range(5)]
    assert "p99_estimate" in assessed(rs).flags
    rs = [rec(i, 0, [10, 20], out=2) for i in range(100)]
    assert "p99_estimate" not in assessed(rs).flags


def test_goodput_and_slo() -> None:
    fast = [rec(i, 0, [100, 110], out=2) for i in range(3)]
    slow = rec(9, 0, [3000, 3010], out=2)
    slo = SLO.parse("ttft_p99=2s,tpot=50ms")
    s = summarize([*fast, slow], concurrency=4, rate=None, window_start_ns=0, slo=slo)
    assert s.goodput_rps == pytest.approx(3 / 3.010)
    assert s.slo_met is False
    s2 = summarize(fast, concurrency=4, rate=None, window_start_ns=0, slo=slo)
    assert s2.slo_met is True
    # a level an interrupt cut before any request ended has no verdict (it read FAIL, goodput 0.00)
    cut = RequestRecord(index=20, sent_ns=0, error_kind="interrupted", error="interrupted")
    s3 = summarize([cut], concurrency=4, rate=None, window_start_ns=0, window_end_ns=10**9, slo=slo)
    assert s3.slo_met is None and s3.goodput_rps is None and s3.slo == slo.describe()
    failed = RequestRecord(index=21, sent_ns=0, end_ns=10**6, error_kind="http_500", error="boom")
    assert summarize([failed], concurrency=4, rate=None, window_start_ns=0, slo=slo).slo_met is False
    # a level an interrupt cut after some requests ended is judged on those: the cut one failed nowhere, so it
    # neither fails the errors objective nor enters the failed requests' latencies
    late = RequestRecord(index=22, sent_ns=0, first_token_ns=4 * 10**9, end_ns=5 * 10**9, error_kind="interrupted",
                         error="interrupted")
    s4 = summarize([*fast, late], concurrency=4, rate=None, window_start_ns=0, slo=slo)
    assert s4.slo_met is True and not (s4.ttft_failed_ms and s4.ttft_failed_ms.n), (s4.slo_met, s4.ttft_failed_ms)


def test_goodput_leaves_out_a_request_under_the_agent_tps_percentile_floor() -> None:
    """agent_tps_p50=20 holds a share of the requests to a rate each reads at (output tokens over send to last
    byte), as ttft_p99=2s holds a share to a latency: a request under the floor is not good, as one over the TTFT
    limit is not. Goodput counted it (5 good of 5, 10 tok/s among 40s); the mean agent_tps judges no request."""
    fast = [rec(i, 0, [100, 1000], out=40) for i in range(4)]  # 40 tok/s each: 40 tokens in 1 s
    slow = rec(4, 0, [100, 1000], out=10)  # 10 tok/s
    for text, good in (("agent_tps_p50=20", 4), ("ttft_p99=2s,agent_tps_p90=5,agent_tps_p50=20", 4),
                       ("agent_tps_p90=5", 5), ("agent_tps=10", 5)):
        s = summarize([*fast, slow], concurrency=5, rate=None, window_start_ns=0, slo=SLO.parse(text))
        assert s.goodput_rps == pytest.approx(good / s.duration_s), text
        assert s.slo_met is True, (text, s.slo_checks)  # each level objective passes: goodput alone tells
    assert SLO.parse("agent_tps_p90=5,agent_tps_p50=20").rate_floor == 20  # the highest floor, as the lowest limit
    assert SLO.parse("agent_tps=10").rate_floor is None
    # a request whose rate is not known (no output tokens counted) is left out of the floor, as out of the level's
    # rate check
    unknown = rec(5, 0, [100, 1000], out=0)
    s = summarize([*fast, unknown], concurrency=5, rate=None, window_start_ns=0, slo=SLO.parse("agent_tps_p50=20"))
    assert s.goodput_rps == pytest.approx(5 / s.duration_s)
    # and the table under the levels says what goodput counted
    from tokenbench.sweep_table import format_sweep_markdown

    assert "goodput counts the requests within every per-request limit and at the agent_tps_pNN rate or faster" \
        in " ".join(format_sweep_markdown([s]).split())
    plain = summarize(fast, concurrency=4, rate=None, window_start_ns=0, slo=SLO.parse("ttft_p99=2s"))
    assert "agent_tps_pNN" not in format_sweep_markdown([plain])


def test_slo_parse_errors_say_what_to_write() -> None:
    with pytest.raises(ValueError, match="metric=limit"):
        SLO.parse("ttft")
    with pytest.raises(ValueError, match="unknown SLO metric") as e:
        SLO.parse("latency=2s")
    assert "did you mean" not in str(e.value)  # nothing near enough to name
    with pytest.raises(ValueError, match="unknown SLO metric 'ttftp99': did you mean ttft_p99[?]"):
        SLO.parse("ttftp99=2s")  # a slip is named, where the list alone led to ttft=, which a search refuses
    with pytest.raises(ValueError, match=r"'fast' is not a duration: .* e.g. 2s, 500ms"):
        SLO.parse("ttft_p99=fast")
    with pytest.raises(ValueError, match="agent_tps=lots: give a positive rate"):
        SLO.parse("agent_tps=lots")
    with pytest.raises(ValueError, match="errors=few: give a share below 1"):
        SLO.parse("errors=few")
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration_ms("soon")
    assert parse_duration_ms("2s") == 2000 and parse_duration_ms("50ms") == 50 and parse_duration_ms("1.5m") == 90000


def test_cost_per_million_tokens() -> None:
    # 1.79 EUR/h at 684 tok/s: 1.79 / (684 * 3600) * 1e6 = 0.7270 EUR per million
    assert cost_per_mtok(1.79, 684) == pytest.approx(1.79 / (684 * 3600) * 1e6)
    assert math.isclose(cost_per_mtok(1.79, 684) or 0, 0.72694, rel_tol=1e-4)
    assert cost_per_mtok(None, 684) is None and cost_per_mtok(1.0, 0) is None


def test_rate_level_send_delay_and_achieved_concurrency() -> None:
    r1 = rec(0, 10, [110, 210], out=2)
    r1.scheduled_ns = 0
    r2 = rec(1, 500, [600, 700], out=2)
    r2.scheduled_ns = 500 * MS
    s = summarize([r1, r2], concurrency=None, rate=2.0, window_start_ns=0)
    assert s.send_delay_ms is not None and s.send_delay_ms.max == pytest.approx(10)
    # busy 200 + 200 ms over a 700 ms window
    assert s.achieved_concurrency == pytest.approx(400 / 700)


# --- two kinds of level, one JSON contract ------------------------------------------------------------------------

STORED = Path(__file__).parent / "data" / "stored_levels.json"
#: What an agent-session level gained since those were stored, as a level stored before it writes it: a soak's cut
#: sessions and tenths, a background load's figures.
SESSION_ADDED: dict[str, object] = {"cut": 0, "over_time": [], "background": None, "cached_share_se": None,
                                   "sampled_sessions": None}


def test_a_stored_level_reads_as_its_kind_and_writes_back_byte_for_byte() -> None:
    """Levels as tokenbench stored them before the serving and depth kinds were split (a llama-bench import, a
    GuideLLM import, a predicted depth, a measured sweep, an agent-session level, a depth run's pp and tg): each
    reads as the kind its test names, and writes back the same JSON, key for key, in the same order. One value
    differs, on purpose: a measured depth level's per_agent_tps was 0.0 (0 tok/s of throughput over one agent),
    against the definition's own "None for a level with no throughput figure"; a depth level now writes null. Keys
    added to the contract since are written after the stored ones, empty."""
    stored = json.loads(STORED.read_text())
    kinds = set()
    for item in stored:
        raw = json.loads(item["level"])
        lv = LevelSummary.from_dict(raw)
        depth = raw["test"] not in (None, "serve")
        assert isinstance(lv, DepthLevel if depth else ServingLevel), item["what"]
        kinds.add(type(lv))
        expected = dict(raw, per_agent_tps=None) if depth else dict(raw)
        # keys the contract gained since (appended, never renamed) are written empty, after the stored ones
        expected |= {k: None for k in LEVEL_KEYS if k not in raw}
        if isinstance(raw.get("session"), dict):  # and within an agent-session level, after its stored keys
            expected["session"] = raw["session"] | {k: v for k, v in SESSION_ADDED.items() if k not in raw["session"]}
            # each turn after its stored keys too: a predicted turn's floors, empty on a measured one
            expected["session"]["turns"] = [t | {"limits": t.get("limits")} for t in raw["session"]["turns"]]
        assert json.dumps(lv.to_dict()) == json.dumps(expected), item["what"]
        assert json.dumps(raw) == item["level"]  # the stored text is json.dumps's, so the comparison is of bytes
        assert tuple(lv.to_dict()) == LEVEL_KEYS
    assert kinds == {ServingLevel, DepthLevel}


def test_each_kind_holds_its_own_figures_only() -> None:
    """A depth level has no latencies to misread as zero, a serving level no pp/tg; both write the other's keys
    empty, and the keys they share (findings, flags) in one place."""
    d = DepthLevel(test="tg128", depth=4096, tg_tps=50.0, tg_tps_sd=1.0)
    s = ServingLevel(concurrency=4, output_throughput_tps=400.0)
    assert not hasattr(d, "ttft_ms") and not hasattr(d, "per_agent_tps") and not hasattr(s, "tg_tps")
    dd, sd = d.to_dict(), s.to_dict()
    assert dd["ttft_ms"] == Distribution(n=0).to_dict() and dd["per_agent_tps"] is None and dd["tg_tps"] == 50.0
    assert sd["tg_tps"] is None and sd["pp_tps_dist"] is None and sd["per_agent_tps"] == 100.0
    assert serving([d, s]) == [s] and depth_levels([d, s]) == [d]
    d.add(Finding(Code.UNSTABLE, "spread"))
    assert LevelSummary.from_dict(d.to_dict()).flags == ["unstable"]


@given(st.lists(st.floats(min_value=0, max_value=5000, allow_nan=False), min_size=1, max_size=400),
       st.sampled_from([0, 1, 50, 90, 99, 100]))
@settings(max_examples=fuzz_examples(200), deadline=None)
def test_a_tally_reads_the_percentile_of_its_rounded_samples(values: list[float], q: float) -> None:
    """The watch's tally of an hour of samples reads what the sorted list of the same samples, rounded to its
    resolution, reads: the same rule, in memory of its distinct values."""
    t = Tally(0.01, values)
    rounded = sorted(round(v / 0.01) * 0.01 for v in values)
    assert len(t) == len(values) and len(t.counts) == len(set(round(v / 0.01) for v in values))
    assert t.percentile(q) == pytest.approx(percentile(rounded, q), abs=1e-9)
    # half the resolution, and a float's error: 0.125 rounds to 0.12, 0.005000000000000004 away
    assert t.max() == pytest.approx(rounded[-1]) and abs(t.percentile(q) - percentile(sorted(values), q)) <= 0.005 + 1e-12


def test_a_stored_levels_limits_are_read_as_numbers_or_not_at_all() -> None:
    """A predicted level's limits from a file: an integer too large for a float crashed the read (OverflowError
    from math.isfinite); it, NaN, a bool, a negative and an unknown key read as absent, a good one as a float."""
    d = {"test": "serve", "limits": {"ttft_ms": 10**400, "tpot_ms": 2, "pp_tps": float("nan"), "tg_tps": True,
                                     "output_throughput_tps": -1.0, "watts": 5.0}}
    assert LevelSummary.from_dict(d).limits == {"tpot_ms": 2.0}
    assert LevelSummary.from_dict({"test": "serve", "limits": {"ttft_ms": 10**400}}).limits is None
    assert LevelSummary.from_dict({"test": "serve", "limits": "fast"}).limits is None
