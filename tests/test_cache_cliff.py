"""The cache-cliff search's verdicts and arithmetic (cache_cliff.py), from stored levels: no server. The search on
real engines is in test_capacity_engines.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenbench.cache_cliff import CHECK, KvPool, vllm_pool
from tokenbench.capacity import SearchSpec, answer, mark_levels
from tokenbench.cli import main
from tokenbench.distribution import Distribution
from tokenbench.levels import ServingLevel, SessionStats, TurnPoint
from tokenbench.offered_load import Level
from tokenbench.results import LevelOutcome, Manifest, RunResult

#: agents -> (cached share, median TTFT ms): warm to 4, the pool's slots, then the cache thrashes
MEASURED = {1: (0.60, 9.0), 2: (0.60, 15.0), 4: (0.59, 34.0), 5: (0.18, 52.0), 8: (0.02, 101.0)}


def _level(agents: int, share: float | None, ttft: float, context: float = 324.0) -> ServingLevel:
    turns = [TurnPoint(t, agents, context * (t + 1) / 4, None, None, Distribution(n=0), Distribution(n=0))
             for t in range(4)]
    return ServingLevel(concurrency=agents, test="serve", completed=4 * agents, ttft_ms=Distribution(n=4, p50=ttft),
                        slo_met=True, slo_checks=[],
                        session=SessionStats("warm", agents, agents, 4.0, Distribution(n=0), share, "usage",
                                             turns=turns))


def _run(measured: dict[int, tuple[float | None, float]], drop: float | None = 0.5,
         server: dict[str, object] | None = None, pool: dict[str, object] | None = None) -> RunResult:
    spec = SearchSpec("concurrency", 1, 8, sessions=True, cache_drop=drop)
    stored = {**spec.to_dict(), "objectives": "TTFT p90 <= 5 s", "ended": "resolved",
              **({"kv_pool": pool} if pool else {})}
    manifest = Manifest(capacity=stored, server=server or {"slots": 4, "slot_ctx": 1024})
    outcomes = [LevelOutcome(i, Level(concurrency=c, cache="warm"), _level(c, share, ttft), "complete")
                for i, (c, (share, ttft)) in enumerate(measured.items())]
    return RunResult("r", manifest, outcomes, "complete")


def test_a_level_fails_once_its_cached_share_falls_below_half_the_warm_share() -> None:
    found = answer(_run(MEASURED))
    assert found is not None and (found.capacity, found.first_fail) == (4, 5)
    checks = {v.value: next(c for c in v.checks if c.name == CHECK) for v in found.verdicts}
    assert checks[1].limit == pytest.approx(0.30) and [checks[c].met for c in (1, 2, 4, 5, 8)] == \
        [True, True, True, False, False]
    assert "cached share of at least 50% of the lowest level's" in found.slo
    cliff = found.cliff
    assert cliff is not None and cliff.cache_failed
    assert cliff.headline() == ("the cache keeps 4 sessions of up to 324 tokens warm; at 5 the cached share fell "
                                "from 59% to 18% and median turn TTFT rose 1.5x")
    # the working set at the cliff (sessions at every stage: 81 to 324 tokens, 202.5 on average) against the slots'
    # pool: a session a slot, 4 slots of 1,024
    assert (cliff.session_tokens, cliff.last_turn_tokens, cliff.working_set, cliff.holds) == (202.5, 324, 1012.5, 4)
    assert "4 slots x 1,024 tokens (llama-server /props): it holds 4 such sessions" in " ".join(cliff.explained())
    assert found.to_dict()["cache_cliff"]["fell_at"] == 5
    # a small model re-prefills a session in about the time its warm turn took: said so, never "rose 1.0x"
    flat = answer(_run({**MEASURED, 5: (0.18, 34.4)}))
    assert flat is not None and flat.cliff is not None
    assert flat.cliff.headline().endswith("fell from 59% to 18%, median turn TTFT within 5% (1.01x): re-sending the "
                                          "sessions cost little here")


def test_each_level_s_own_verdict_holds_its_cached_share_and_show_says_so(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A level's SLO verdict was its SLO's objectives alone: show said "SLO: pass" of every level of a search whose
    cache fell at 5, above "this box serves 4 agents (5 did not)". The search puts the cached share's verdict on
    each level's summary, once however often it is put, and the stored run reads back so; the answer alone
    changes nothing."""
    run = _run(MEASURED)
    answer(run)
    assert all(o.serving.slo_met for o in run.outcomes if o.serving is not None)
    for _ in range(2):
        mark_levels(run)
    levels = {o.level.concurrency: o.serving for o in run.outcomes}
    assert {c: s.slo_met for c, s in levels.items() if s is not None} == {1: True, 2: True, 4: True, 5: False,
                                                                           8: False}
    assert all([c.name for c in s.slo_checks] == [CHECK] for s in levels.values() if s is not None)
    found = answer(run)
    assert found is not None and (found.capacity, found.first_fail) == (4, 5)
    assert all(len([c for c in v.checks if c.name == CHECK]) == 1 for v in found.verdicts)
    from tokenbench.store import Store

    stored = _run({c: MEASURED[c] for c in (1, 8, 4, 5, 2)})  # in the order a search runs them; show sorts
    levels_ = [o.serving for o in stored.outcomes if o.serving is not None]
    for s in levels_:
        s.slo = "ttft_p90<=5000ms"
    Store(tmp_path / "r.db").save_run("run-cliff", "capacity", "cliff", {"label": "cliff", **stored.manifest.to_dict()},
                                      "measured", levels_, "0", "2026", "2026")
    assert main(["show", "cliff", "--db", str(tmp_path / "r.db")]) == 0
    out = capsys.readouterr().out
    assert "SLO: pass" not in out and [ln.split()[-2] for ln in out.splitlines() if " warm " in ln][:5] == \
        ["pass", "pass", "pass", "FAIL", "FAIL"], out  # 1, 2, 4, 5 and 8 agents, in that order
    # the level table's SLO line names the floor its verdicts held the cached share to, beside the SLO's own
    assert "SLO ttft_p90<=5000ms, cached_share>=30.0% (the cache-cliff search's floor): pass when" in \
        " ".join(out.split()), out


def test_the_cached_share_s_verdict_is_sure_by_its_sessions_spread() -> None:
    """"Sure" read "no" at every level of every cliff search: the cached share had no test. Now each session is
    one sample of it (its turns share one cache's fate), and a verdict is sure where the floor lies outside the
    share's 95% interval."""
    from tokenbench.metrics import cached_share_se
    from tokenbench.records import RequestRecord

    def session(cached: int, prompt: int) -> list[RequestRecord]:
        return [RequestRecord(0, input_tokens=prompt, cached_tokens=cached)]

    # shares 0.8, 0.6 and 0.1 of equal prompts: R = 0.5, residuals 30, 10, -40 over mean prompt 100
    se = cached_share_se([session(80, 100), session(60, 100), session(10, 100)])
    assert se == pytest.approx(((30 ** 2 + 10 ** 2 + 40 ** 2) / 2 / 3) ** 0.5 / 100)
    assert cached_share_se([session(80, 100)]) is None  # one session: no spread
    assert cached_share_se([session(80, 100), [RequestRecord(1, input_tokens=100)]]) is None  # one said
    run = _run(MEASURED)
    spreads = {1: None, 2: 0.01, 4: 0.02, 5: 0.09, 8: 0.004}  # at 5: 18% against a 29.5% floor, 1.3 se apart
    for o in run.outcomes:
        assert o.serving is not None and o.serving.session is not None
        o.serving.session.cached_share_se = spreads[o.level.concurrency or 0]
    found = answer(run)
    assert found is not None
    sure = {v.value: next(c for c in v.checks if c.name == CHECK).sure for v in found.verdicts}
    assert sure == {1: False, 2: True, 4: True, 5: False, 8: True}
    assert [v.sure for v in sorted(found.verdicts, key=lambda v: v.value)] == [False, True, True, False, True]


def test_a_stricter_drop_moves_the_cliff_down_and_no_drop_is_a_plain_search() -> None:
    shares = {1: (0.60, 9.0), 2: (0.50, 12.0), 4: (0.40, 20.0), 8: (0.38, 30.0)}
    strict = answer(_run(shares, drop=0.9))
    assert strict is not None and (strict.capacity, strict.first_fail) == (1, 2)
    plain = answer(_run(shares, drop=None))
    assert plain is not None and plain.first_fail is None and plain.cliff is None
    assert "cache_cliff" not in plain.to_dict()


def test_a_cache_beyond_the_pool_is_said_and_a_silent_server_is_held_to_nothing() -> None:
    warm = answer(_run({c: (0.6, 10.0) for c in (1, 2, 4, 8)}))
    assert warm is not None and warm.first_fail is None and warm.cliff is not None
    assert "8 stayed warm, more than the pool holds" in " ".join(warm.cliff.explained())
    # a share that fell from 60% to 33%, above the 30% floor, is no cache restoring them: partly warm
    partly = answer(_run({1: (0.6, 10.0), 2: (0.6, 10.0), 4: (0.6, 10.0), 8: (0.33, 12.0)}))
    assert partly is not None and partly.cliff is not None and partly.capacity == 8
    said = " ".join(partly.cliff.explained())
    assert "restored" not in said and "8 is more than the pool holds: their cached share fell to 33% (from 60%) " \
        "and stayed above the floor of 30%, so they passed only partly warm" in said, said
    silent = answer(_run({c: (None, 10.0) for c in (1, 2, 4, 8)}))
    assert silent is not None and silent.cliff is not None
    assert not any(c.name == CHECK for v in silent.verdicts for c in v.checks)
    assert "did not say how many prompt tokens its cache served" in silent.cliff.headline()


def test_vllm_s_pool_is_its_blocks_and_a_session_takes_whole_blocks() -> None:
    page = ('# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",engine="0",'
            'num_gpu_blocks="64",prefix_caching_hash_algo="sha256"} 1.0\n')
    pool = vllm_pool(page)
    assert pool is not None and (pool.tokens, pool.block_tokens) == (1024, 16)
    assert pool.holds(324) == 3  # 21 blocks a session: 3 in 64
    assert vllm_pool("vllm:num_requests_running 1\n") is None and vllm_pool("<html>") is None
    found = answer(_run(MEASURED, server={}, pool=pool.to_dict()))
    assert found is not None and found.cliff is not None and found.cliff.holds == 4  # 202.5 tokens: 13 blocks
    assert KvPool.of_run(_run(MEASURED, server={})) is not None  # slots from the manifest
    assert KvPool.of_run(_run(MEASURED, server={"slots": None})) is None


@pytest.mark.parametrize("args, says", [
    (["--rate", "1:4"], "give --concurrency LOW:HIGH, not --rate"),
    (["--sessions", "4"], "drop --sessions"),
    (["--cache-cliff", "1.5"], "a share above 0 and below 1"),
])
def test_a_cache_search_refuses_what_it_cannot_grow(args: list[str], says: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["capacity", "--url", "http://127.0.0.1:9/v1", "--slo", "ttft_p90=5s", "--db", str(tmp_path / "r.db")]
    if "--cache-cliff" not in args:
        argv.append("--cache-cliff")
    assert main(argv + args) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_compare_sets_two_boxes_cliffs_side_by_side() -> None:
    from tokenbench.compare.capacity import capacity_table, compare_answers

    a, b = answer(_run(MEASURED)), answer(_run({c: (0.6, 10.0) for c in (1, 2, 4, 8)}))
    assert a is not None and b is not None
    cc = compare_answers(a, b)
    _, rows = capacity_table(cc)
    said = {r[0]: r[1:] for r in rows}
    assert said["Cached share, warm"] == ["59% at 4", "60% at 8"] and said["Cached share, past"] == ["18% at 5", "—"]
    assert said["KV pool"] == ["4,096 tok, holds 4", "4,096 tok, holds 4"]
    assert cc.verdict() is not None and "B serves at least 2.00x the agents of A" in cc.verdict()


def test_the_report_draws_the_cached_share_against_live_sessions() -> None:
    from tokenbench.report import series

    plots = {p.id: p for p in series.build([_run(MEASURED)])}
    [line] = plots["cached_share"].lines
    assert [(x, round(y)) for x, y in zip(line.xs, line.ys)] == [(1, 60), (2, 60), (4, 59), (5, 18), (8, 2)]
    assert plots["ttft"].lines  # turn TTFT against the same live sessions


def test_vllm_s_cached_tokens_are_read_by_tier_over_a_level() -> None:
    """vLLM 0.32 counts prefix-cache hits by the tier that supplied them (its prompt_tokens_cached_by_source,
    labelled source): a level's telemetry says each tier's change, the tiers that served none left out."""
    from tokenbench.prometheus import parse
    from tokenbench.telemetry import TIERS, summarize

    def page(device: int, host: int) -> dict[str, float]:
        name = "vllm:prompt_tokens_cached_by_source_total"
        text = "".join(f'{name}{{engine="0",model_name="m",source="{src}"}} {n}\n'
                       for src, n in (("device", device), ("host", host), ("disk", 0)))
        return parse("# TYPE vllm:prompt_tokens_cached_by_source counter\n" + text, TIERS)
    out = summarize([(0.0, page(100, 40)), (1.0, page(1100, 90))])
    assert out["cached_by_tier"] == {"device": 1000.0, "host": 50.0}
    assert "cached_by_tier" not in summarize([(0.0, page(5, 0)), (1.0, page(5, 0))])


def test_show_writes_a_capacity_answer_as_markdown_that_renders(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The answer's lines ran together into one paragraph and its table followed a line of text with no blank
    line between, which Markdown reads as no table at all. Each sentence is now a paragraph, the lines under it a
    list, and the table set apart by blank lines."""
    from tokenbench.store import Store

    run = _run(MEASURED)
    levels_ = [o.serving for o in run.outcomes if o.serving is not None]
    Store(tmp_path / "r.db").save_run("run-md", "capacity", "md", {"label": "md", **run.manifest.to_dict()},
                                      "measured", levels_, "0", "2026", "2026")
    assert main(["show", "md", "--db", str(tmp_path / "r.db"), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    answer_md = out[out.index("this box serves"):]
    blocks = answer_md.split("\n\n")
    assert blocks[0].startswith("this box serves 4 agents") and blocks[1].startswith("the cache keeps 4 sessions")
    assert all(ln.startswith("- ") for ln in blocks[2].splitlines()) and "search: 5 levels" in blocks[2]
    assert blocks[3].startswith("| Agents | SLO | Sure |") and blocks[4].startswith("Sure: ")


def test_the_report_writes_a_capacity_search_s_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report drew a search's levels (in the order it ran them) and left out the answer the command printed:
    how many agents the box serves, and where its cache fell. Both Markdown and HTML now say it, the levels in
    the order of their value."""
    from tokenbench.store import Store

    run = _run({c: MEASURED[c] for c in (1, 8, 4, 5, 2)})
    levels_ = [o.serving for o in run.outcomes if o.serving is not None]
    db = tmp_path / "r.db"
    Store(db).save_run("run-rep", "sweep", "rep", {"label": "rep", **run.manifest.to_dict()}, "measured", levels_,
                       "0", "2026", "2026")
    md, page = tmp_path / "B.md", tmp_path / "r.html"
    assert main(["report", "rep", "--db", str(db), "--md", str(md), "--html", str(page)]) == 0, \
        capsys.readouterr().err
    text = md.read_text()
    part = text[text.index("### Capacity"):]
    assert part.split("\n\n")[1].startswith("this box serves 4 agents (4 met the SLO, 5 did not)")
    assert "- the engine's KV pool: 4,096 tokens, 4 slots x 1,024 tokens" in part
    # the levels' verdicts and how sure each is, as the command printed them
    assert "| Agents | SLO | Sure | Requests | Objectives |" in part and "| 5 | FAIL | no | 20 |" in part
    assert "Sure: a one-sided binomial test" in part
    table = text[:text.index("### Capacity")]
    assert [ln.split("|")[1].strip() for ln in table.splitlines() if " warm |" in ln] == \
        ["1 warm", "2 warm", "4 warm", "5 warm", "8 warm"]
    html = page.read_text()
    assert "<p><strong>the cache keeps 4 sessions of up to 324 tokens warm; at 5 the cached share fell" in html
    assert ">Sure</th>" in html and ">Objectives</th>" in html


def test_only_a_cache_cliff_search_outgrows_the_engine_s_slots_on_purpose() -> None:
    """Each level past the slots said "start llama-server with -np 5 for a true level" under a cliff search's
    table, whose subject is that very pool: the sweep asks the kind, and a cliff search's levels are not held to
    the slots (a plain session run's, a search's over sessions, and the request kinds' still are)."""
    from tokenbench.draws import Draw
    from tokenbench.kinds.lengths import LengthsKind
    from tokenbench.kinds.sessions import SessionsKind
    from tokenbench.sessions import SessionPlan

    plan = SessionPlan(sessions=8, turns=3, shared_prefix=0, task=Draw.fixed(64), tool=Draw.fixed(64),
                       output=Draw.fixed(8), think=Draw.fixed(0.2, "s"))
    kind = SessionsKind(plan)
    assert (kind.outgrows_slots, kind.for_search().outgrows_slots, kind.for_cache_search().outgrows_slots) == \
        (False, False, True)
    assert LengthsKind.outgrows_slots is False


def test_an_answer_resting_on_verdicts_that_are_not_sure_says_so() -> None:
    """"this box serves 4 agents" stood unqualified above a table whose every verdict read Sure: no; the answer
    now says which of the verdicts it rests on a rerun may turn."""
    from tokenbench.capacity_text import answer_lines

    found = answer(_run(MEASURED))
    assert found is not None
    _, details = answer_lines(found)
    assert "not sure: the pass at 4 and the fail at 5 may turn on a rerun, and the capacity with it" in \
        " ".join(details)
    run = _run(MEASURED)
    for o in run.outcomes:  # every session agreeing closely: both verdicts sure
        assert o.serving is not None and o.serving.session is not None
        o.serving.session.cached_share_se = 0.001
    sure = answer(run)
    assert sure is not None and not any(d.startswith("not sure") for d in answer_lines(sure)[1])
