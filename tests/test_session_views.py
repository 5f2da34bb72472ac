"""Agent-session runs read back: compare puts two boxes' sessions side by side turn by turn, cost
prices a finished session, the report draws turn TTFT against context and the interactivity view. Session levels
are made from synthetic records through metrics.session_stats, as the session runner makes them; every figure
checked here is computed by hand from the records' formula."""

from __future__ import annotations

import json
import re
from typing import Any
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.compare.levels import compare
from tokenbench.compare.sessions import compare_sessions, session_level_table, session_turn_table
from tokenbench.pricing import Pricing, cost_per_session, session_cost_points
from tokenbench.errors import UsageError
from tokenbench.distribution import Distribution
from tokenbench.levels import LevelSummary, ServingLevel
from tokenbench.metrics import session_stats, summarize
from tokenbench.records import RequestRecord
from tokenbench.report import figures, series
from tokenbench.reader import load_result
from tokenbench.session_view import gain_line, shown_turns, tokens, warnings
from tokenbench.store import Store

from test_compare_cost_report import CHROMIUM, chromium_dom, figures_in
from test_report import _rows, _visible

NS_PER_MS = 1_000_000
#: A label as long as the published ones: it must never widen a table.
LONG = "h100-80gb-sxm/qwen3.6-27b/FP8-with-a-very-long-label"


def session_level(c: int, cache: str, *, sessions: int = 8, turns: int = 5, prefix: int = 2000, grow: int = 4000,
                  base_ms: float = 50.0, prefill_tps: float = 5000.0, tpot_ms: float = 20.0, out: int = 100,
                  think_ms: float = 500.0, fail: int = 0, extra_context: int = 0) -> LevelSummary:
    """``sessions`` sessions of ``turns`` turns, ``c`` at a time, back to back. Turn k sends prefix + grow*(k+1)
    tokens; warm, the cache serves all but the new ``grow``; busted, none of it. TTFT = base + uncached /
    prefill rate. The first ``fail`` sessions fail their last turn."""
    recs, i = [], 0
    for sid in range(sessions):
        t, rows = 0.0, []
        for k in range(turns):
            ctx = prefix + grow * (k + 1) + extra_context
            cached = ctx - grow if cache == "warm" else 0
            ttft = base_ms + (ctx - cached) / prefill_tps * 1000
            e2e = ttft + tpot_ms * (out - 1)
            rows.append((k, ctx, cached, t, ttft, e2e))
            t += e2e + think_ms
        start = (sid // c) * t
        for k, ctx, cached, t0, ttft, e2e in rows:
            sent = int((start + t0) * NS_PER_MS)
            r = RequestRecord(index=i, sent_ns=sent, first_token_ns=sent + int(ttft * NS_PER_MS),
                              end_ns=sent + int(e2e * NS_PER_MS), input_tokens=ctx, output_tokens=out,
                              output_tokens_source="usage", input_tokens_source="usage", cached_tokens=cached,
                              cached_tokens_source="usage", session=sid, turn=k, cache_busted=cache == "busted")
            if sid < fail and k == turns - 1:
                r.error_kind, r.error = "http_500", "boom"
            recs.append(r)
            i += 1
    s = summarize(recs, concurrency=c, rate=None, window_start_ns=0)
    s.session = session_stats(recs, cache)
    return s


def _store(store: Store, label: str, levels: list[LevelSummary], turns: int = 5, **manifest: object) -> str:
    rid = f"run-{label.replace('/', '-')}"
    wl = {"kind": "sessions", "turns": turns, "shared_prefix": 2000, "tool_tokens": "uniform:3000-5000"}
    store.save_run(rid, "sweep", label, {"label": label, "model": "m", "workload": wl, **manifest}, "measured",
                   levels, "0", "2026", "2026")
    return rid


def _serve(c: int, tps: float) -> LevelSummary:
    return ServingLevel(concurrency=c, output_throughput_tps=tps, input_tokens_mean=128.0,
                              ttft_ms=Distribution(n=8, p50=100, p99=200), tpot_ms=Distribution(n=8, p50=20))


def session_runs(path: Path) -> Path:
    """A store at ``path``: a fast box (h100, priced in EUR) at concurrency 1 and 4, a slow one (strix,
    unpriced) at 4 and 8 whose busted levels lost a session each, and a plain sweep."""
    store = Store(path)
    _store(store, "h100", [session_level(c, m, prefill_tps=20000, tpot_ms=10) for c in (1, 4)
                           for m in ("warm", "busted")], price_per_hour=2.5, currency="EUR")
    _store(store, "strix", [session_level(c, m, prefill_tps=800, tpot_ms=25, fail=int(m == "busted"))
                            for c in (4, 8) for m in ("warm", "busted")])
    store.save_run("run-plain", "sweep", "plain", {"label": "plain", "model": "m"}, "measured",
                   [_serve(1, 50), _serve(4, 150)], "0", "2026", "2026")
    return path


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return session_runs(tmp_path / "s.db")


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    """An 80-column terminal whatever the caller's environment says."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")


def _is_table(out: str, *heads: str) -> bool:
    """The headings on one line: a table, not a block per row."""
    return any(all(h in line for h in heads) for line in out.splitlines())


# --- the session view of one run --------------------------------------------------------------------------

def test_turns_warm_beside_busted_and_the_gain_in_words(db: Path) -> None:
    h100 = load_result(Store(db), "h100")
    # turn 5 sends 2000 + 5 * 4000 = 22,000 tokens; warm prefills 4,000 of them at 20,000 tok/s: 50 + 200 ms;
    # busted all 22,000: 50 + 1,100 ms
    assert gain_line(h100, 4) == ("turn 5 at 22K context: TTFT 0.25 s cached, 1.15 s uncached (4.6x faster with "
                                  "the cache; the server said its cache served 71% of the warm prompt tokens)")
    cached = sum(2000 + 4000 * k for k in range(5)) / sum(2000 + 4000 * (k + 1) for k in range(5))
    assert f"{cached:.0%}" == "71%"
    assert warnings(h100) == []
    strix = load_result(Store(db), "strix")
    assert "strix at concurrency 4 busted: 1 of 8 sessions did not finish (a turn failed)" in warnings(strix)
    # a soak's end cut those short: none of their turns failed, and show says they were cut (report and compare
    # said "did not finish (a turn failed)" of every soak)
    for o in strix.outcomes:
        if (st := getattr(o.summary, "session", None)) is not None:
            st.cut = st.sessions - st.sessions_finished
    assert not any("did not finish" in w for w in warnings(strix)), warnings(strix)


def test_a_cache_that_did_not_serve_and_a_baseline_it_did_are_said(tmp_path: Path) -> None:
    store = Store(tmp_path / "w.db")
    warm = session_level(4, "warm")
    assert warm.session is not None
    warm.session.cached_share = 0.05  # the server's cache was off
    busted = session_level(4, "busted")
    assert busted.session is not None
    busted.session.cached_share = 0.6  # the marker did not bust it
    _store(store, "odd", [warm, busted, session_level(8, "warm")])
    said = " ".join(warnings(load_result(store, "odd")))
    assert "served only 5% of the warm prompt tokens: is its prefix cache on" in said
    assert "still had 60% of its prompt tokens served from the cache: it is no uncached baseline" in said
    assert "odd has no busted level at concurrency 8: what the cache bought cannot be said" in said
    # a run of warm levels only that meant to have a baseline says so once, not once a level
    _store(store, "warm-only", [session_level(c, "warm") for c in (1, 2, 4)])
    assert warnings(load_result(store, "warm-only")) == [
        "warm-only has no busted level at concurrencies 1, 2, 4: what the cache bought cannot be said"]
    # one that chose none (--no-baseline; a cache-cliff search) has no fault to be warned of
    _store(store, "chosen", [session_level(c, "warm") for c in (1, 2, 4)],
           workload={"kind": "sessions", "turns": 5, "baseline": False})
    assert warnings(load_result(store, "chosen")) == []
    # a cache-cliff search whose cache stopped serving at 8 agents found what it looked for: no advice to turn the
    # prefix cache on (the report and show --format markdown gave it)
    _store(store, "cliff", [warm, session_level(8, "warm")], capacity={"axis": "concurrency", "cache_drop": 0.5},
           workload={"kind": "sessions", "turns": 5, "baseline": False})
    assert warnings(load_result(store, "cliff")) == []


def test_two_runs_without_a_baseline_compare_warm_columns_only(tmp_path: Path) -> None:
    """Two --no-baseline runs (or cache-cliff searches): a warning per run and two columns of dashes per table
    were all their comparison said of the busted baseline; now one note, and the warm columns."""
    store = Store(tmp_path / "n.db")
    for label in ("a", "b"):
        _store(store, label, [session_level(c, "warm") for c in (1, 2)],
               workload={"kind": "sessions", "turns": 5, "baseline": False})
    sc = compare_sessions(load_result(store, "a"), load_result(store, "b"))
    assert sc.warnings == [] and not sc.busted
    assert sc.notes == ["a and b ran without a busted baseline (--no-baseline, or a capacity search): what the "
                        "cache bought is not measured there"]
    head, rows = session_turn_table(sc.blocks[0])
    assert head == ["Turn", "Context", "A warm", "B warm", "Warm A/B"] and rows[0] == ["1", "6.0K", "0.85", "0.85",
                                                                                       "1.00×"]
    head, rows = session_level_table(sc.blocks[0])
    assert head == ["Per level", "A warm", "B warm", "Warm A/B"] and rows[0] == ["Sessions done", "8/8", "8/8", ""]


def test_long_sessions_show_a_sample_of_turns_first_and_last_kept() -> None:
    turns = list(range(40))
    shown = shown_turns(turns)
    assert shown[0] == 0 and shown[-1] == 39 and len(shown) <= 16
    assert shown_turns(list(range(16))) == list(range(16))
    assert [tokens(n) for n in (812, 4123, 9949, 48_213, 1_250_000)] == ["812", "4.1K", "9.9K", "48K", "1,250K"]


# --- compare ----------------------------------------------------------------------------------------------

def test_compare_sessions_turn_by_turn(db: Path) -> None:
    store = Store(db)
    sc = compare_sessions(load_result(store, "h100"), load_result(store, "strix"))
    assert [b.concurrency for b in sc.blocks] == [4]  # the one concurrency both ran
    (block,) = sc.blocks
    head, rows = session_turn_table(block)
    assert head == ["Turn", "Context", "A warm", "A busted", "B warm", "B busted", "Warm A/B"]
    # strix: warm 50 + 4000/800 s = 5.05 s; busted 50 ms + 22000/800 s = 27.55 s at turn 5
    assert rows[0] == ["1", "6.0K", "0.25", "0.35", "5.05", "7.55", "0.05×"]
    assert rows[-1] == ["5", "22K", "0.25", "1.15", "5.05", "27.6", "0.05×"]
    head, rows = session_level_table(block)
    assert rows[0] == ["Sessions done", "8/8", "8/8", "8/8", "7/8", ""]
    assert [r[0] for r in rows] == ["Sessions done", "Session p50 (s)", "Session p90 (s)", "Cached share",
                                    "Output tok/s", "Per-agent tok/s"]  # no server hit share: a row left out
    assert block.gains[1].startswith("strix: turn 5 at 22K context: TTFT 5.05 s cached, 27.6 s uncached (5.5x")
    assert any("1 of 8 sessions did not finish" in w for w in sc.warnings)
    assert not any("workloads differ" in w for w in sc.warnings)
    # the levels only one run has are said, not silently dropped
    assert sc.notes == ["not compared: only A has concurrency 1", "not compared: only B has concurrency 8"]


def test_level_rows_keep_warm_and_busted_apart(db: Path) -> None:
    """Two levels share a concurrency: keyed by concurrency alone, the busted one replaced the warm one."""
    store = Store(db)
    c = compare(load_result(store, "h100"), load_result(store, "strix"))
    ttft = {(r.concurrency, r.cache): (r.a, r.b) for r in c.rows if r.metric == "Median TTFT"}
    assert set(ttft) == {(4, "warm"), (4, "busted")}
    assert ttft[(4, "warm")] == (pytest.approx(250.0), pytest.approx(5050.0))
    assert c.effective == []  # N agents x M tokens is no question a session run answers


def test_contexts_that_differ_are_both_shown(tmp_path: Path) -> None:
    store = Store(tmp_path / "c.db")
    _store(store, "a", [session_level(4, m) for m in ("warm", "busted")])
    _store(store, "b", [session_level(4, m, extra_context=1000) for m in ("warm", "busted")])  # another tokenizer
    (block,) = compare_sessions(load_result(store, "a"), load_result(store, "b")).blocks
    _, rows = session_turn_table(block)
    assert rows[0][1] == "6.0K/7.0K"  # 14% apart: both said
    assert rows[-1][1] == "22K"  # 22,000 against 23,000: within SAME_CONTEXT, one context


def test_compare_cli_sessions_fit_80_columns(db: Path, narrow: None, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(db)
    _store(store, LONG, [session_level(4, m, turns=40, grow=1200, prefill_tps=9000) for m in ("warm", "busted")],
           turns=40)
    assert main(["compare", LONG, "strix", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert _is_table(out, "Turn", "Context", "A warm", "A busted", "B warm", "B busted", "Warm A/B"), out
    assert _is_table(out, "Per level", "A warm", "B busted", "Warm A/B"), out
    assert "concurrency 4 (4 sessions at once)" in out
    assert "turns shown; --json has every turn" in out  # 40 turns against strix's 5: a sample
    assert re.search(r"^\s*1\s+3\.2K/6\.0K\s", out, re.M), out  # the sides sent different contexts: both said
    flat = " ".join(out.split())
    assert f"A = {LONG}, B = strix" in flat
    assert "warning: the session workloads differ (turns 40 vs 5)" in flat
    assert "the cache's gain on strix: turn 5 at 22K context: TTFT 5.05 s cached, 27.6 s uncached" in flat


def test_compare_cli_sessions_json_and_markdown(db: Path, narrow: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "h100", "strix", "--db", str(db), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (block,) = doc["sessions"]["blocks"]
    assert block["concurrency"] == 4 and [t["turn"] for t in block["turns"]] == [0, 1, 2, 3, 4]
    assert block["turns"][4]["a_busted_ms"] == pytest.approx(1150.0)
    assert block["turns"][4]["warm_ratio"] == pytest.approx(250.0 / 5050.0)
    assert block["a"]["warm"]["sessions_finished"] == 8 and block["b"]["busted"]["sessions_finished"] == 7
    assert {(r["concurrency"], r["cache"]) for r in doc["rows"]} == {(4, "warm"), (4, "busted")}
    assert main(["compare", "h100", "strix", "--db", str(db), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| 5 | 22K | 0.25 | 1.15 | 5.05 | 27.6 | 0.05× |" in out
    assert "|\n\n| Per level |" in out  # two tables, a blank line apart


@pytest.mark.parametrize("a, b", [("h100", "plain"), ("plain", "strix")])
def test_a_session_run_beside_a_plain_sweep_is_refused_in_one_line(db: Path, narrow: None, a: str, b: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", a, b, "--db", str(db)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.strip().splitlines()
    assert "is an agent-session run and" in line or "is a plain sweep and" in line
    assert "compare session runs with session runs" in line
    store = Store(db)
    _store(store, "only8", [session_level(8, m) for m in ("warm", "busted")])
    with pytest.raises(UsageError, match="share no session concurrency: the first ran 1, 4; the second 8"):
        compare_sessions(load_result(store, "h100"), load_result(store, "only8"))


# --- cost -------------------------------------------------------------------------------------------------

def test_cost_per_session_by_hand() -> None:
    # 4 agents, 2 sessions each of 60 s back to back: the box is held 120 s for 8 sessions; that is the price
    # of 60 s of box shared by 4
    assert cost_per_session(3.6, 120.0, 8) == pytest.approx(3.6 * 60 / 3600 / 4) == pytest.approx(0.015)
    assert cost_per_session(3.6, 120.0, 0) is None and cost_per_session(None, 120.0, 8) is None
    owned = Pricing(currency="EUR", purchase=2500, life_years=3, watts=100, kwh_price=0.25)
    assert owned.per_session(3600.0, 10) == pytest.approx(owned.effective_hourly() / 10)


def test_session_cost_points_warm_and_busted(db: Path) -> None:
    strix = load_result(Store(db), "strix")
    price = Pricing(currency="EUR", price_per_hour=0.4)
    points = session_cost_points(price, [o.summary for o in strix.outcomes], api=3.0)
    assert [p.level for p in points] == ["4 warm", "4 busted", "8 warm", "8 busted"]
    warm, busted = points[0], points[1]
    level = strix.outcomes[0].summary
    assert warm.cost_per_session == pytest.approx(0.4 * level.duration_s / 3600 / 8)
    assert warm.box_hours == pytest.approx(level.duration_s / 3600)
    assert warm.cost_per_mtok == pytest.approx(price.per_mtok(level.output_throughput_tps))
    # the busted level is slower and lost a session: a finished session costs more
    assert busted.sessions_finished == 7 and (busted.cost_per_session or 0) > 2 * (warm.cost_per_session or 0)
    assert warm.vs_api() == "1.4x cheaper"
    assert all(p.slo_met is None for p in points)
    # a search's levels, in the order it ran them and past its SLO at 8: by agents, each with its verdict
    searched = [session_level(c, "warm") for c in (1, 2, 8, 4)]
    for lv in searched:
        assert isinstance(lv, ServingLevel)
        lv.slo_met = lv.concurrency != 8
    points = session_cost_points(price, searched)
    assert [(p.level, p.slo_met) for p in points] == [("1 warm", True), ("2 warm", True), ("4 warm", True),
                                                       ("8 warm", False)]


def test_cost_cli_prices_sessions_in_80_columns(db: Path, narrow: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "h100", "--db", str(db), "--api-price", "3"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert _is_table(out, "Level", "Sessions", "Session p50", "EUR/session", "tok/s", "EUR/M output"), out
    assert re.search(r"^\s*4 warm\s+8/8\s+8\.2 s\s+0\.0015\s+236\.7\s+2\.93\s*$", out, re.M), out
    flat = " ".join(out.split())
    assert "rented at 2.5 EUR/hour" in flat and "API 3.00 EUR/M output tokens: the box is" in flat
    assert "1.02x cheaper at 4 warm" in flat  # 3.00 against 2.93: two decimals under 1.1x
    assert main(["cost", "strix", "--db", str(db), "--price-per-hour", "0.4", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(p["level"], p["sessions_finished"]) for p in doc["sessions"]] == [
        ("4 warm", 8), ("4 busted", 7), ("8 warm", 8), ("8 busted", 7)]
    assert [p["operating_point"] for p in doc["points"]][:2] == ["serve c=4 warm", "serve c=4 busted"]


# --- recommend ------------------------------------------------------------------------------------------

def test_recommend_takes_a_session_run_at_its_warm_level(db: Path) -> None:
    """The busted level is the no-cache baseline, not how the box serves; it has the longer prompts (its marker),
    so the longest-prompt rule picked it. A session run stands only for sessions: on requests of fixed length it is
    out, said why."""
    from tokenbench.predict.session import SessionShape
    from tokenbench.recommend import Workload, measured

    store = Store(db)
    warm = session_level(4, "warm")
    _store(store, "marked", [warm, session_level(4, "busted", extra_context=8)], price_per_hour=1.0)
    (c,) = measured([load_result(store, "marked")], Workload("m", 4, 4096, 100, sessions=SessionShape()), {})
    assert c.throughput == pytest.approx(warm.output_throughput_tps) and c.capacity == 4 and not c.excluded
    (c,) = measured([load_result(store, "marked")], Workload("m", 4, 4096, 100), {})
    assert c.excluded == "an agent-session run: rank it on sessions (recommend --sessions)"


# --- report -----------------------------------------------------------------------------------------------

def test_series_keep_warm_and_busted_apart_and_draw_the_interactivity_view(db: Path) -> None:
    store = Store(db)
    runs = [load_result(store, r) for r in ("h100", "strix", "plain")]
    plots = {p.id: p for p in series.build(runs)}
    # aggregate against per-agent tok/s: one curve per box, a session run's warm and busted apart, a sweep too
    inter = plots["interactivity"]
    assert inter.axis == "interactivity" and inter.xlabel == "interactivity: output tok/s per agent"
    assert [ln.name for ln in inter.lines] == ["h100 warm", "h100 busted", "strix warm", "strix busted", "plain"]
    plain = inter.lines[-1]
    assert plain.xs == [pytest.approx(37.5), pytest.approx(50.0)] and plain.ys == [150, 50]
    assert plain.labels == ["concurrency 4, 37.5 tok/s per agent", "concurrency 1, 50.0 tok/s per agent"]
    assert figures.spec(inter)["data"][-1]["text"] == plain.labels  # the hover says which level a point is
    # cost against interactivity: only the priced box, through the one definition
    cost = plots["cost_interactivity"]
    h100 = [o.summary for o in runs[0].outcomes if o.summary.session and o.summary.session.cache == "warm"]
    assert [ln.name for ln in cost.lines] == ["h100 warm", "h100 busted"]
    assert cost.lines[0].ys == [pytest.approx(Pricing("EUR", 2.5).per_mtok(s.output_throughput_tps)) for s in h100]
    # the concurrency plots: warm and busted are two lines, not one point chosen between them; busted a diamond
    agg = plots["aggregate"]
    assert [ln.name for ln in agg.lines][:2] == ["h100 warm", "h100 busted"]
    assert [t["marker"]["symbol"] for t in figures.spec(agg)["data"]][:2] == ["circle", "diamond"]
    ttft = [ln.name for ln in plots["ttft"].lines][:4]
    assert ttft == ["h100 warm p50", "h100 warm p99", "h100 busted p50", "h100 busted p99"]


def test_series_draw_each_turn_against_its_context_and_session_time(db: Path) -> None:
    store = Store(db)
    plots = {p.id: p for p in series.build([load_result(store, r) for r in ("h100", "strix", "plain")])}
    assert [p for p in plots if p.startswith("session_")] == ["session_ttft_c1", "session_ttft_c4", "session_ttft_c8",
                                                               "session_time"]
    c4 = plots["session_ttft_c4"]  # one plot per concurrency, a line per box and cache mode
    assert [ln.name for ln in c4.lines] == ["h100 warm", "h100 busted", "strix warm", "strix busted"]
    assert c4.lines[1].xs == [6000, 10000, 14000, 18000, 22000]
    assert c4.lines[1].ys == pytest.approx([0.35, 0.55, 0.75, 0.95, 1.15])
    assert c4.ticks()[1][:2] == ["6.0K", "8.0K"]
    spec = figures.spec(c4)
    assert [t["marker"]["symbol"] for t in spec["data"]] == ["circle", "diamond", "circle", "diamond"]
    assert spec["data"][1]["text"][4] == "turn 5, 22K tokens of context"  # busted: nothing cached
    assert spec["data"][0]["text"][4] == "turn 5, 22K tokens of context (18K cached)"
    assert spec["layout"]["yaxis"]["type"] == "log"  # 0.25 s warm to 27.6 s busted
    time = plots["session_time"]
    assert [ln.name for ln in time.lines][:4] == ["h100 warm p50", "h100 warm p90", "h100 busted p50",
                                                  "h100 busted p90"]
    assert time.lines[0].xs == [1, 4] and figures.spec(time)["data"][1]["line"]["dash"] == "dot"


def test_report_pairs_a_session_run_with_a_sweep_never(db: Path) -> None:
    from tokenbench.report import comparison

    store = Store(db)
    pairs, apart = comparison.pairs([load_result(store, r) for r in ("h100", "strix", "plain")])
    assert [(p.a, p.b) for p in pairs] == [(0, 1)]
    assert [x.split(":")[0] for x in apart] == ["h100 is an agent-session run and plain is a plain sweep",
                                              "strix is an agent-session run and plain is a plain sweep"]
    assert comparison.point(pairs[0].cmp.rows[0], 1) == "concurrency 4, warm cache"


def test_html_report_has_a_session_section_and_compares_sessions(db: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    assert main(["report", "h100", "strix", "plain", "--html", str(out), "--db", str(db)]) == 0
    page = out.read_text(encoding="utf-8")
    rows = _rows(page)
    text = re.sub(r"\s+", " ", _visible(page))
    assert '<section id="sessions">' in page
    assert "The cache's gain at concurrency 4, turn 5 at 22K context: TTFT 0.25 s cached, 1.15 s uncached" in text
    assert "5 | 22K | 82% | 0.25 | 1.15 | 4.6× | —" in rows  # h100's own turn table (no decode rate per turn here)
    assert any(r.startswith("concurrency 4, busted | 7 of 8 |") for r in rows)  # strix's level table
    assert any(r.startswith("concurrency 4, warm | 8 of 8 | 8.2 | 8.2 | 5.0 | 71% | — | 237 | 59.2 | 0.00147 |")
               for r in rows), [r for r in rows if r.startswith("concurrency 4, warm")]
    # the two session runs compared turn by turn, names in the headings
    assert "Turn | Context | h100 warm | h100 busted | strix warm | strix busted | Warm A/B" in rows
    assert "5 | 22K | 0.25 | 1.15 | 5.05 | 27.6 | 0.05×" in rows
    # a session run beside the plain sweep: said why, no table
    assert "h100 is an agent-session run and plain is a plain sweep" in text
    assert any(r.startswith("Workload | agent sessions of 5 turns, 2,000-token shared prefix, tool tokens "
                            "uniform:3000-5000 |") for r in rows), [r for r in rows if r.startswith("Workload")]
    for fid in ("session_ttft_c4", "session_time", "interactivity", "cost_interactivity"):
        assert f'id="{fid}"' in page


def test_markdown_and_png_of_a_session_run(db: Path, tmp_path: Path) -> None:
    md = tmp_path / "B.md"
    assert main(["report", "h100", "--md", str(md), "--db", str(db)]) == 0
    text = md.read_text()
    assert "workload: agent sessions of 5 turns, 2,000-token shared prefix" in text
    assert "| 1 warm | 57.9 |" in text and "| 1 busted | 44.9 |" in text  # a level per cache mode
    assert "| 5 | 22K | 82% | 0.25 | 1.15 | 4.6× | — |" in text  # 18K of 22K cached, as the terminal says it
    assert "the cache's gain at concurrency 1, turn 5 at 22K context" in text
    assert "prefill 56,000" not in text  # a warm level's input / TTFT is no prefill rate
    pytest.importorskip("matplotlib")
    png = tmp_path / "png"
    assert main(["report", "h100", "strix", "--png", str(png), "--db", str(db)]) == 0
    assert {"session_ttft_c1", "session_ttft_c4", "session_ttft_c8", "session_time", "interactivity",
            "cost_interactivity"} <= {p.stem for p in png.glob("*.png")}


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (.ci/run installs it: apt-get install chromium)")
def test_session_plots_render_every_point_in_headless_chromium(db: Path, tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    assert main(["report", "h100", "strix", "plain", "--html", str(out), "--db", str(db)]) == 0
    dom, _ = chromium_dom(out, tmp_path)
    figs = figures_in(dom)
    # each series' points, counted from the runs: h100 (0) at 1 and 4, strix (1) at 4 and 8, plain (2) at 1
    # and 4; every session level has 5 turns; only h100 has a price
    expected = {"session_ttft_c1": {0: 10}, "session_ttft_c4": {0: 10, 1: 10}, "session_ttft_c8": {1: 10},
                "session_time": {0: 8, 1: 8}, "interactivity": {0: 4, 1: 4, 2: 2}, "cost_interactivity": {0: 4},
                "aggregate": {0: 4, 1: 4, 2: 2}}
    for fid, want in expected.items():
        f = figs[fid]
        assert "data-error" not in f, f
        got: dict[int, int] = {}
        for s in json.loads(f["data-series"]):
            assert s["measured"] and s["drawn"] == s["visible"] == s["expected"] > 0, (fid, s)
            got[s["run"]] = got.get(s["run"], 0) + s["visible"]
        assert got == want, (fid, got)


def test_runs_that_differ_only_in_their_seed_are_not_warned_about(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two runs made without --seed draw different words for the same shape: that is no workload difference."""
    store = Store(db)
    for label, seed in (("box-a", 1767008585), ("box-b", 12399485)):
        wl = {"kind": "sessions", "turns": 5, "shared_prefix": 2000, "seed": seed}
        _store(store, label, [session_level(4, m) for m in ("warm", "busted")], workload=wl)
    assert main(["compare", "box-a", "box-b", "--db", str(db)]) == 0
    assert "workloads differ" not in capsys.readouterr().out


def test_small_prices_are_written_out_not_in_scientific_notation() -> None:
    """A tiny model's session cost 6.2e-05 USD on a real llama-server run; a money column reads 0.000062."""
    from tokenbench.cells import money

    assert [money(v) for v in (6.2e-05, 0.0002, 0.013, 0.5, 1.3, 1234.5)] == \
        ["0.000062", "0.00020", "0.013", "0.50", "1.30", "1,234.50"]


def test_workloads_that_differ_are_said_as_their_headings_say_them() -> None:
    """A drawn length was printed as the manifest's dict ("task {'kind': 'fixed', 'unit': 'tokens', ...}")."""
    from types import SimpleNamespace

    from tokenbench.compare.sessions import _session_workload_warnings
    from tokenbench.draws import Draw, parse

    def run(task: Draw, prefix: int) -> Any:
        return SimpleNamespace(manifest=SimpleNamespace(workload={"kind": "sessions", "turns": 6, "seed": prefix,
                                                                  "shared_prefix": prefix, "task": task.to_dict(),
                                                                  "baseline": prefix == 0}))

    said = _session_workload_warnings(run(Draw.fixed(1024), 0), run(parse("uniform:512-2048", "x"), 512))
    # a switch as a word: it read "baseline True vs False"
    assert said == ["the session workloads differ (shared prefix 0 vs 512; task 1024 vs uniform 512-2048; "
                    "baseline on vs off)"]


def test_a_measured_session_run_and_a_prediction_of_its_shape_do_not_differ() -> None:
    """compare of a measured sessions run against a prediction of the same shape warned "sessions 2 vs (not
    given); input len (not given) vs 1024; tool len (not given) vs 384 ...": the two manifests keep the shape under
    the same keys and keep other keys each of its own."""
    from types import SimpleNamespace

    from tokenbench.compare.sessions import _session_workload_warnings
    from tokenbench.draws import Draw
    from tokenbench.predict.session import SessionShape
    from tokenbench.sessions import SessionPlan

    def run(workload: dict[str, Any]) -> Any:
        return SimpleNamespace(manifest=SimpleNamespace(workload=workload))

    def measured(turns: int) -> Any:
        return run(SessionPlan(2, turns, 1024, Draw.fixed(1024), Draw.fixed(384), Draw.fixed(8),
                               Draw.fixed(0.0)).to_dict())

    shape = SessionShape(6, 1024, Draw.fixed(1024), Draw.fixed(384), Draw.fixed(8), Draw.fixed(0.0))
    assert _session_workload_warnings(measured(6), run(shape.workload())) == []
    assert _session_workload_warnings(measured(5), run(shape.workload())) == \
        ["the session workloads differ (turns 5 vs 6)"]
    # the sessions are compared where both sides say them
    assert _session_workload_warnings(measured(6), run(shape.workload(3))) == \
        ["the session workloads differ (sessions 2 vs 3)"]


def test_a_turn_s_context_reads_the_same_in_the_sweep_s_table_and_in_compare(tmp_path: Path) -> None:
    """The sweep's table said "6,000" of the context compare, the report and cost call "6.0K"."""
    from tokenbench.session_table import session_headline, session_rows

    warm, busted = session_level(4, "warm"), session_level(4, "busted")
    _, rows = session_rows(warm, busted)  # type: ignore[arg-type]
    store = Store(tmp_path / "t.db")
    _store(store, "a", [warm, busted])
    _store(store, "b", [session_level(4, m) for m in ("warm", "busted")])
    (block,) = compare_sessions(load_result(store, "a"), load_result(store, "b")).blocks
    _, compared = session_turn_table(block)
    assert [r[1] for r in rows] == [r[1] for r in compared] == ["6.0K", "10K", "14K", "18K", "22K"]
    assert "turn 5 at 22K tokens of context" in (session_headline(warm, busted) or "")  # type: ignore[arg-type]
    # a level with no busted baseline beside it has no busted TTFT and no gain: no columns of dashes
    head, rows = session_rows(warm, None)  # type: ignore[arg-type]
    assert head == ["Turn", "Context", "Cached", "TTFT warm", "Decode tok/s"] and len(rows[0]) == 5


@pytest.mark.parametrize("interrupted, by", [(True, "the interrupt"), (False, "the soak's end")])
def test_sessions_cut_short_say_what_cut_them(interrupted: bool, by: str) -> None:
    """A Ctrl-C while every session thought between turns cuts no request, and the line said the sessions were
    "cut short by the soak's end" of a run that had no soak."""
    from tokenbench.finding import Code, Finding
    from tokenbench.levels import SessionStats
    from tokenbench.session_table import session_lines

    st = SessionStats(cache="warm", sessions=4, sessions_finished=2, turns_per_session=3.0,
                      session_s=Distribution.of([1.0, 2.0]), cached_share=0.5, cached_source="usage", cut=2)
    s = ServingLevel(concurrency=2, completed=8, session=st,
                     findings=[Finding(Code.INTERRUPTED, "the level was cut short", severity="note")] if interrupted
                     else [])
    assert f"2 cut short by {by}" in session_lines(s)[0]
