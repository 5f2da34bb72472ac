"""A soak's ended sessions folded as they end (soak_totals.py) give the figures the level's summary gives over
every record kept: counts and sums exactly, latency percentiles within their resolution."""

from __future__ import annotations

import random
from array import array

import pytest

from tokenbench import metrics
from tokenbench.distribution import Distribution
from tokenbench.records import RequestRecord
from tokenbench.distribution import Sketch, tolerance
from tokenbench.soak_totals import Folded, cached_share_se, fold

MS = 1_000_000


def _sessions(seed: int, n: int = 40, turns: int = 5) -> list[list[RequestRecord]]:
    rng = random.Random(seed)
    out, t = [], 0
    for s in range(n):
        rs = []
        for k in range(turns):
            t += rng.randrange(1, 50) * MS
            ttft = rng.randrange(20_000, 900_000) * 1000
            out_tokens = rng.randrange(2, 40)
            stamps = array("q", [t + ttft + i * rng.randrange(5, 30) * MS for i in range(out_tokens)])
            failed = rng.random() < 0.05
            r = RequestRecord(index=len(rs), session=s, turn=k, sent_ns=t, first_token_ns=t + ttft,
                              end_ns=int(stamps[-1]) + MS, chunk_ns=stamps, output_tokens=out_tokens,
                              input_tokens=100 * (k + 1), cached_tokens=rng.randrange(0, 100 * (k + 1)),
                              error_kind="http_500" if failed else None)
            rs.append(r)
        out.append(rs)
    return out


def test_folded_sessions_give_the_summarys_counts_sums_and_percentiles() -> None:
    sessions = _sessions(1)
    records = [r for rs in sessions for r in rs]
    start = min(r.sent_ns for r in records)
    f = Folded(start_ns=start, width_ns=10**9)
    for rs in sessions:
        fold(f, rs, cut=False)
    s = metrics.summarize(records, concurrency=4, rate=None, window_start_ns=start)
    assert (f.completed, f.failed, dict(f.errors)) == (s.completed, s.failed, s.errors)
    assert f.output_tokens == s.total_output_tokens and f.input_tokens == s.total_input_tokens
    assert (f.output_min, f.output_max) == (s.output_tokens_min, s.output_tokens_max)
    assert f.cached / f.prompt_said == pytest.approx(s.cached_share)
    for name, exact in (("ttft", s.ttft_ms), ("tpot", s.tpot_ms), ("itl", s.itl_ms), ("e2e", s.e2e_ms)):
        d = f.sketch(name).distribution()
        assert d.n == exact.n and d.mean == pytest.approx(exact.mean) and d.std == pytest.approx(exact.std)
        assert (d.min, d.max) == (pytest.approx(exact.min), pytest.approx(exact.max))
        for q in ("p50", "p90", "p95", "p99"):
            assert abs(getattr(d, q) - getattr(exact, q)) <= tolerance(getattr(exact, q)), (name, q)
    stats = metrics.session_stats(records, "warm")
    assert f.sessions == stats.sessions and f.sessions_whole == stats.sessions_finished
    assert f.session_s.distribution().mean == pytest.approx(stats.session_s.mean)
    assert cached_share_se(f) == pytest.approx(stats.cached_share_se)


def test_a_cut_session_counts_its_turns_not_its_time() -> None:
    [rs] = _sessions(2, n=1)
    f = Folded(start_ns=rs[0].sent_ns, width_ns=10**9)
    fold(f, rs, cut=True)
    assert f.sessions == 1 and f.turns == 5 and f.sessions_whole == 0 and f.session_s.n == 0


def test_a_summary_over_a_few_kept_sessions_is_made_to_stand_for_all() -> None:
    """Summarised over two sessions kept of forty, then ``apply``: the figures of all forty."""
    from tokenbench.soak_totals import apply

    sessions = _sessions(3)
    records = [r for rs in sessions for r in rs]
    start, end = min(r.sent_ns for r in records), max(r.end_ns or 0 for r in records)
    whole = metrics.summarize(records, concurrency=4, rate=None, window_start_ns=start, window_end_ns=end)
    whole.session = metrics.session_stats(records, "warm")
    kept = [r for rs in sessions[:2] for r in rs]
    part = metrics.summarize(kept, concurrency=4, rate=None, window_start_ns=start, window_end_ns=end)
    part.session = metrics.session_stats(kept, "warm")
    f = Folded(start_ns=start, width_ns=(end - start) // 10 + 1)
    for rs in sessions:
        fold(f, rs, cut=False)
    apply(f, part)
    for name in ("completed", "failed", "errors", "total_output_tokens", "output_throughput_tps",
                 "request_throughput_rps", "cached_share", "achieved_concurrency", "tokens_per_chunk_mean"):
        assert getattr(part, name) == pytest.approx(getattr(whole, name)), name
    assert part.ttft_ms.n == whole.ttft_ms.n and abs(part.ttft_ms.p99 - whole.ttft_ms.p99) <= tolerance(whole.ttft_ms.p99)
    assert part.session.sessions == whole.session.sessions == 40
    assert part.session.cached_share_se == pytest.approx(whole.session.cached_share_se)


def test_a_sketch_holds_a_bounded_number_of_values_however_many_it_is_given() -> None:
    """An hour's E2E times spread over seconds: to 10 µs each could be a value of its own; from 10 ms up a sketch
    keeps four significant digits, at most 9,000 values a decade."""
    rng = random.Random(4)
    values = [rng.uniform(500.0, 9_000.0) for _ in range(200_000)]
    sk = Sketch()
    for v in values:
        sk.add(v)
    exact = Distribution.of(values)
    assert len(sk.tally.counts) <= 2 * 9_000
    d = sk.distribution()
    assert d.n == exact.n and d.mean == pytest.approx(exact.mean) and (d.min, d.max) == (exact.min, exact.max)
    for q in ("p50", "p90", "p99"):
        assert abs(getattr(d, q) - getattr(exact, q)) <= tolerance(getattr(exact, q)), q
