"""Comparisons state their uncertainty: a ratio's 95% interval from a seeded bootstrap over a level's
requests or repetitions, a winner named only where the interval excludes 1, and a stated rule where a side has no
samples. compare once called 1.06x a win whatever the runs' spread (a fixed 5% tie band)."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from tokenbench.bootstrap import LevelSamples, draws
from tokenbench.cli import main
from tokenbench.compare.levels import compare, table
from tokenbench.distribution import Distribution
from tokenbench.levels import DepthLevel, LevelSummary, ServingLevel
from tokenbench.metrics import summarize
from tokenbench.records import RequestRecord
from tokenbench.results import RunResult
from tokenbench.reader import load_result
from tokenbench.store import Store

#: Ten percent either side of the middle, in an order that is no order: a request's spread, the same on each side.
SPREAD = [1 + 0.1 * z for z in (statistics.NormalDist().inv_cdf((i + 0.5) / 12) for i in (7, 2, 10, 5, 0, 8, 3, 11,
                                                                                       6, 1, 9, 4))]


def records(ttft_ms: list[float], tpot_ms: float = 10.0, out: int = 64) -> list[RequestRecord]:
    """One request after another (concurrency 1), each with its TTFT and a fixed TPOT."""
    recs, t = [], 0
    for i, ttft in enumerate(ttft_ms):
        first = t + int(ttft * 1e6)
        end = first + int(tpot_ms * (out - 1) * 1e6)
        recs.append(RequestRecord(index=i, sent_ns=t, first_token_ns=first, end_ns=end, output_tokens=out,
                                  input_tokens=128))
        t = end
    return recs


def stored(store: Store, label: str, levels: list[list[list[RequestRecord]]]) -> RunResult:
    """A sweep as the runner stores it: each level's repetitions, each with its requests and their summary (the
    levels at concurrency 1, 2, 3, ...: compare aligns them on it)."""
    rid = f"run-{label}"
    store.create_run(rid, "sweep", label, "2026-11-25T10:00:00+00:00", "0", {"label": label, "model": "m"})
    for idx, reps in enumerate(levels):
        for rep, recs in enumerate(reps):
            s = summarize(recs, concurrency=idx + 1, rate=None, window_start_ns=0)
            store.save_level(rid, idx, rep, s, recs, status="complete", started="2026", finished="2026",
                             window=(0, recs[-1].end_ns or 0))
    store.finish_run(rid, "complete", "2026-11-25T10:01:00+00:00")
    return load_result(store, rid)


def row(c: object, metric: str) -> object:
    return next(r for r in c.rows if r.metric == metric)  # type: ignore[attr-defined]


# --- over requests ---------------------------------------------------------------------------------------

def test_a_6_percent_gap_inside_a_10_percent_spread_is_no_significant_difference(tmp_path: Path) -> None:
    """Median TTFT 106 ms against 100 ms, each request 10% either side: today's rule called it a 1.06x win."""
    store = Store(tmp_path / "u.db")
    a = stored(store, "a", [[records([106 * k for k in SPREAD])]])
    b = stored(store, "b", [[records([100 * k for k in SPREAD])]])
    r = row(compare(a, b, store=store), "Median TTFT")
    assert r.ratio == pytest.approx(1.06)
    assert r.interval is not None and r.interval.low < 1 < r.interval.high
    assert r.interval.how == "requests (12 and 12)"
    assert r.winner() == 0 and r.rule == "95% interval"


def test_runs_clearly_apart_name_a_winner_with_an_interval_that_excludes_1(tmp_path: Path) -> None:
    store = Store(tmp_path / "u.db")
    a = stored(store, "a", [[records([100 * k for k in SPREAD], tpot_ms=10)]])
    b = stored(store, "b", [[records([150 * k for k in SPREAD], tpot_ms=12)]])
    c = compare(a, b, store=store)
    ttft = row(c, "Median TTFT")
    assert ttft.interval.high < 1 and ttft.winner() == 1  # lower is better: A's first token came sooner
    assert 1 / 1.5 == pytest.approx(ttft.ratio)
    head, rows = table(c)
    cells = dict(zip(head, next(x for x in rows if x[4] == "Median TTFT ms")))
    lo, hi = ttft.interval.low, ttft.interval.high
    assert cells["A/B (95% CI)"] == f"0.67 ({lo:.2f}–{hi:.2f})" and cells["Faster"] == "A 1.50×"
    # a rate (output tokens over request time): every request of A decodes faster, so A's throughput is higher
    agg = row(c, "Aggregate output")
    assert agg.interval is not None and agg.interval.low > 1 and agg.winner() == 1


def test_the_same_inputs_give_the_same_interval_and_a_run_beside_itself_exactly_1(tmp_path: Path) -> None:
    store = Store(tmp_path / "u.db")
    a = stored(store, "a", [[records([106 * k for k in SPREAD])]])
    b = stored(store, "b", [[records([100 * k for k in SPREAD])]])
    first = [r.interval for r in compare(a, b, store=store).rows]
    again = [r.interval for r in compare(load_result(store, "a"), load_result(store, "b"), store=store).rows]
    assert first == again and sum(iv is not None for iv in first) == len(first) - 1  # a p99 of 12: none
    for r in compare(a, a, store=store).rows:
        assert r.interval is None or (r.interval.low, r.interval.high) == (1.0, 1.0)
        assert r.winner() == 0


def test_a_quantile_is_drawn_as_a_resample_would_give_it() -> None:
    """The order-statistic draw of a median against building every resample: the same distribution."""
    import random

    values = sorted(100 * k for k in SPREAD)
    samples = LevelSamples(ttft_ms=values)
    got = draws(samples, ServingLevel(concurrency=1), "Median TTFT", lambda s: s.ttft_ms.p50, "x", count=4000)
    assert got is not None and got.how == "requests"
    rng = random.Random(7)
    built = [statistics.median(rng.choices(values, k=len(values))) / statistics.median(values) for _ in range(4000)]
    for q in (5, 25, 50, 75, 95):
        assert statistics.quantiles(got.relative, n=100)[q - 1] == pytest.approx(
            statistics.quantiles(built, n=100)[q - 1], abs=0.012)


def test_ten_thousand_requests_a_side_take_about_a_second(tmp_path: Path) -> None:
    """The draws cost the same whatever the count (quantiles through order statistics, rates in at most 100
    blocks); the store reads only the times out of each record."""
    store = Store(tmp_path / "u.db")
    ttfts = [100 * SPREAD[i % 12] * (1 + i % 7 / 100) for i in range(2000)]
    a = stored(store, "a", [[records(ttfts)] for _ in range(5)])
    b = stored(store, "b", [[records([t * 1.01 for t in ttfts])] for _ in range(5)])
    t0 = time.perf_counter()
    c = compare(a, b, store=store)
    took = time.perf_counter() - t0
    assert sum(1 for r in c.rows if r.interval is not None) == len(c.rows) >= 20
    assert took < 6, f"{took:.1f} s for 10,000 requests a side"  # about 0.8 s here; slack for a busy machine


def test_a_p99_of_too_few_requests_has_no_interval(tmp_path: Path) -> None:
    """A resample holds no value its sample did not: a p99 of 40 requests is drawn from their top two or three and
    its interval looked sure where nothing is known. It needs 5 requests beyond it: 500."""
    store = Store(tmp_path / "u.db")
    few = [stored(store, k, [[records([m * SPREAD[i % 12] for i in range(40)])]]) for k, m in (("a", 100), ("b", 99))]
    r = row(compare(*few, store=store), "P99 TTFT")
    # under 100 requests a p99 is the slowest one or two: not even the 5% rule names a side on it
    assert r.interval is None and r.rule == "p99 under 100 requests" and r.winner() == 0 and r.thin
    fast = [stored(store, k, [[records([m * SPREAD[i % 12] for i in range(40)])]]) for k, m in (("e", 100), ("f", 60))]
    assert row(compare(*fast, store=store), "P99 TTFT").winner() == 0
    some = [stored(store, k, [[records([m * SPREAD[i % 12] for i in range(150)])]]) for k, m in (("g", 100), ("h", 60))]
    r = row(compare(*some, store=store), "P99 TTFT")
    assert r.interval is None and r.rule == "5% rule" and r.winner() == 2  # 150 requests: the rule of thumb
    many = [stored(store, k, [[records([m * SPREAD[i % 12] * (1 + i % 50 / 500) for i in range(600)])]])
            for k, m in (("c", 100), ("d", 99))]
    r = row(compare(*many, store=store), "P99 TTFT")
    assert r.interval is not None and r.interval.low < 1 < r.interval.high


# --- over repetitions ------------------------------------------------------------------------------------

def repeated(tps: list[float], c: int = 4, test: str = "serve") -> list[LevelSummary]:
    return [ServingLevel(concurrency=c, test=test, output_throughput_tps=v, completed=10, input_tokens_mean=128.0,
                               ttft_ms=Distribution(n=10, p50=1000 / v)) for v in tps]


def saved_reps(store: Store, label: str, reps: list[LevelSummary]) -> RunResult:
    rid = f"run-{label}"
    store.create_run(rid, "sweep", label, "2026", "0", {"label": label})
    for k, s in enumerate(reps):
        store.save_level(rid, 0, k, s, [], status="complete", started="2026", finished="2026", window=(0, 1))
    store.finish_run(rid, "complete", "2026")
    return load_result(store, rid)


def test_repetitions_that_spread_10_percent_make_a_6_percent_gap_no_difference(tmp_path: Path) -> None:
    """The issue's case: three repetitions a side, medians 106 and 100 tok/s, each spread 10%."""
    store = Store(tmp_path / "u.db")
    a = saved_reps(store, "a", repeated([106 * 0.9, 106, 106 * 1.1]))
    b = saved_reps(store, "b", repeated([100 * 1.1, 100 * 0.9, 100]))
    r = row(compare(a, b), "Aggregate output")  # repetitions need no store: they are the run's levels
    assert r.ratio == pytest.approx(1.06) and r.interval is not None
    assert r.interval.how == "repetitions (3 and 3)" and r.interval.low < 1 < r.interval.high
    assert r.winner() == 0
    far = saved_reps(store, "far", repeated([200, 210, 220]))
    r = row(compare(far, b), "Aggregate output")
    assert r.interval.low > 1.5 and r.winner() == 1


def test_a_repeated_level_shows_the_median_of_its_repetitions_p99(tmp_path: Path) -> None:
    """show and compare printed a repeated level's p99 of its first repetition beside the median p50 of all; the
    interval over repetitions resamples the median of each."""
    store = Store(tmp_path / "u.db")
    reps = repeated([100, 110, 120])
    for s, p99 in zip(reps, (40.0, 20.0, 30.0)):
        s.ttft_ms.p99 = p99
    level = saved_reps(store, "r", reps).outcomes[0].summary
    assert (level.ttft_ms.p50, level.ttft_ms.p99, level.output_throughput_tps) == (1000 / 110, 30.0, 110)


def test_a_depth_levels_mean_and_sd_give_a_t_interval(tmp_path: Path) -> None:
    def tg(mean: float, sd: float, n: int) -> LevelSummary:
        s = DepthLevel(concurrency=1, test="tg128", depth=0, tg_tps=mean, tg_tps_sd=sd)
        s.tg_tps_dist = Distribution(n=n, mean=mean)
        return s

    store = Store(tmp_path / "u.db")
    for label, s in (("x", tg(100, 2, 5)), ("y", tg(90, 2, 5)), ("z", tg(97, 10, 3))):
        store.save_run(f"run-{label}", "depth", label, {"label": label}, "measured", [s], "0", "2026", "2026")
    x, y, z = (load_result(store, k) for k in "xyz")
    apart = compare(x, y).rows[0]
    assert apart.interval.how == "mean ± sd (5 and 5)" and apart.interval.low > 1 and apart.winner() == 1
    close = compare(x, z).rows[0]
    assert close.interval.low < 1 < close.interval.high and close.winner() == 0


# --- no samples: the rule is said ------------------------------------------------------------------------

def test_single_numbers_have_no_interval_and_say_the_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    store = Store(tmp_path / "u.db")
    for label, tps in (("pub-a", 120.0), ("pub-b", 100.0)):
        store.save_run(f"run-{label}", "sweep", label, {"label": label}, "imported",
                       [ServingLevel(concurrency=4, test="serve", output_throughput_tps=tps, input_tokens_mean=128.0)],
                       "0", "2026", "2026")
    c = compare(load_result(store, "pub-a"), load_result(store, "pub-b"), store=store)
    assert [(r.interval, r.rule, r.winner()) for r in c.rows][0] == (None, "5% rule", 1)
    assert main(["compare", "pub-a", "pub-b", "--db", str(tmp_path / "u.db")]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())
    assert "A 1.20× (5% rule)" in out
    assert "5% rule: 2 of 2 rows have no interval (no samples on a side" in flat and "rule of thumb, not a test" in flat
    # the reason an 8-request run's median has none: fewer than 5 requests beyond it on a side
    assert "fewer than 5 requests beyond a percentile on a side: a median needs 10, a p99 500)" in flat


# --- what compare prints, and the report -----------------------------------------------------------------

@pytest.fixture
def close_runs(tmp_path: Path) -> Path:
    db = tmp_path / "u.db"
    store = Store(db)
    stored(store, "a", [[records([106 * k for k in SPREAD])]])
    stored(store, "b", [[records([100 * k for k in SPREAD])]])
    return db


def test_compare_prints_the_interval_and_no_significant_difference(close_runs: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["compare", "a", "b", "--db", str(close_runs)]) == 0
    out = capsys.readouterr().out
    ttft = next(line for line in out.splitlines() if "Median TTFT ms" in line)
    assert ttft.split()[-2:] == ["not", "significant"] and "1.06 (0." in ttft
    flat = " ".join(out.split())
    assert "a seeded bootstrap (1,000 resamples) over each level's requests." in flat
    assert "not significant (no significant difference)" in flat
    assert main(["compare", "a", "b", "--db", str(close_runs), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    r = next(x for x in doc["rows"] if x["metric"] == "Median TTFT")
    assert r["winner"] is None and r["rule"] == "95% interval"
    assert r["interval"]["low"] < 1 < r["interval"]["high"] and r["interval"]["n_a"] == 12


def test_the_report_shows_the_interval_and_not_significant(close_runs: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import re

    page = tmp_path / "r.html"
    assert main(["report", "a", "b", "--db", str(close_runs), "--html", str(page)]) == 0
    text = re.sub(r"<[^>]+>", " | ", page.read_text())
    text = re.sub(r"(\s*\|\s*)+", " | ", text)
    assert re.search(r"concurrency 1 \| 106 ms \| 100\.0 ms \| 1\.06× \(0\.\d\d–1\.\d\d\) \| not significant", text)
    assert "A run is named faster only where the interval excludes 1" in text
