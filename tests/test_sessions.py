"""Agent sessions (sweep --sessions) against the emitter: what each turn sends, the busted baseline, the context cap,
think time, what is stored, and the refusals. The prefix cache itself is measured against the real engines in
tests/test_sessions_engines.py: the emitter has none."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.reader import load_result
from tokenbench.store import Store


def _run(emitter: BackgroundEmitter, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "run.json"
    code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "3",
                 "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--shared-prefix", "16",
                 "--json", str(out), *extra])
    return code, json.loads(out.read_text()) if out.exists() else {}


def _turns(emitter: BackgroundEmitter) -> list[dict[str, Any]]:
    """The session turns the emitter saw: a system prompt and more (the check request before the run and each
    level's warm-up send one user message)."""
    return [b for b in emitter.emitter.requests_seen[1:] if len(b.get("messages", ())) >= 2]


def _by_session(bodies: list[dict[str, Any]]) -> dict[str, list[list[dict[str, str]]]]:
    """Each session's turns, keyed by its task (the first user message, which no other session shares)."""
    out: dict[str, list[list[dict[str, str]]]] = {}
    for b in bodies:
        msgs = b["messages"]
        task = next(m["content"] for m in msgs if m["role"] == "user")
        out.setdefault(task, []).append(msgs)
    return out


def test_each_turn_resends_the_conversation_and_adds_an_answer_and_a_tool_result(
        emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(ttft_s=0.005, itl_s=0.001)
    code, run = _run(emitter, tmp_path, "--sessions", "3", "--concurrency", "2", "--turns", "4", "--no-baseline")
    assert code == 0
    sessions = _by_session(_turns(emitter))
    assert len(sessions) == 3 and all(len(turns) == 4 for turns in sessions.values())
    systems = set()
    for turns in sessions.values():
        for k, msgs in enumerate(turns):
            # system, task, then an (answer, tool result) pair per earlier turn: the whole history, re-sent as is
            assert [m["role"] for m in msgs] == ["system", "user"] + ["assistant", "user"] * k
            if k:
                assert msgs[:len(turns[k - 1])] == turns[k - 1]
                assert len(msgs[-1]["content"].split()) == 12  # the tool result: --tool-len tokens (emitter: words)
                assert msgs[-2]["content"].strip()  # the answer the server gave at the turn before
            systems.add(msgs[0]["content"])
    assert len(systems) == 1 and len(next(iter(systems)).split()) == 16  # one system prompt, shared by every agent
    level = run["levels"][0]
    st = level["session"]
    assert st["cache"] == "warm" and st["sessions"] == 3 and st["sessions_finished"] == 3
    assert [t["turn"] for t in st["turns"]] == [0, 1, 2, 3]
    contexts = [t["context_tokens_mean"] for t in st["turns"]]
    assert contexts == sorted(contexts) and contexts[-1] > contexts[0] + 3 * 12
    assert st["cached_share"] is None  # the emitter reports no cached tokens, and none are made up
    assert run["manifest"]["workload"]["kind"] == "sessions" and run["manifest"]["workload"]["turns"] == 4
    # every turn asked for its answer's length, as the server allows (the emitter is a vLLM: min_tokens)
    assert all(b["min_tokens"] == 6 and b["max_tokens"] == 6 for b in _turns(emitter))


def test_the_baseline_busts_every_turn_from_its_first_token(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(ttft_s=0.005, itl_s=0.001)
    code, run = _run(emitter, tmp_path, "--sessions", "2", "--turns", "3")
    assert code == 0
    assert [(lv["concurrency"], lv["session"]["cache"]) for lv in run["levels"]] == [(2, "warm"), (2, "busted")]
    bodies = _turns(emitter)
    warm, busted = bodies[:6], bodies[6:]
    assert len(busted) == 6
    system = warm[0]["messages"][0]["content"]
    firsts = [b["messages"][0]["content"] for b in busted]
    assert len(set(firsts)) == 6  # a marker of its own for every turn
    assert all(f.endswith(system) and not f.startswith(system[:8]) for f in firsts)
    # unlike from its first character: a marker that began with the run's tag let llama.cpp serve 19 tokens
    assert len({f[:3] for f in firsts}) >= 5
    assert all(b["messages"][0]["content"] == system for b in warm)
    # the same sessions, the marker apart: every later message as the warm level sent it (the emitter answers alike)
    def rest(bodies: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(b["messages"][1:]) for b in bodies)

    assert rest(busted) == rest(warm)


def test_a_session_ends_or_is_compacted_at_the_context_cap(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(ttft_s=0.002, itl_s=0.001)
    # a turn adds about 6 + 12 tokens and two messages' template: the cap stops sessions after a few turns
    code, run = _run(emitter, tmp_path, "--sessions", "2", "--turns", "8", "--no-baseline", "--max-context", "110")
    assert code == 0
    st = run["levels"][0]["session"]
    assert st["capped"] == 2 and st["compactions"] == 0
    ended = len(st["turns"])
    assert 1 < ended < 8
    emitter.emitter.requests_seen.clear()
    code, run = _run(emitter, tmp_path, "--sessions", "2", "--turns", "8", "--no-baseline", "--max-context", "110",
                     "--on-cap", "compact")
    assert code == 0
    st = run["levels"][0]["session"]
    assert st["capped"] == 0 and st["compactions"] >= 2 and len(st["turns"]) == 8
    # a compacted session starts again from the shared system prompt and a new summary in place of its history
    bodies = _turns(emitter)
    assert len(_by_session(bodies)) == 2 + st["compactions"]
    assert len({b["messages"][0]["content"] for b in bodies}) == 1
    assert min(len(b["messages"]) for b in bodies[2:]) == 3  # system, summary, the new tool result


def test_sessions_on_vllm_end_at_its_max_model_len_by_default(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """vLLM's /v1/models says the context a request may fill, and it refuses a longer one: with no --max-context,
    a session ends before a turn would pass it, and no turn is refused."""
    emitter.configure(ttft_s=0.002, itl_s=0.001, max_model_len=116)
    code, run = _run(emitter, tmp_path, "--sessions", "2", "--turns", "8", "--no-baseline")
    assert code == 0
    assert run["manifest"]["workload"]["max_context"] == 116 - 6  # less the answer's tokens
    st = run["levels"][0]["session"]
    assert st["capped"] == 2 and 1 < len(st["turns"]) < 8
    assert run["levels"][0]["failed"] == 0 and "slots_exceeded" not in run["levels"][0]["flags"], run["levels"][0]


def test_think_time_paces_each_session(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(ttft_s=0.002, itl_s=0.001)
    code, run = _run(emitter, tmp_path, "--sessions", "1", "--turns", "3", "--no-baseline", "--think-time", "300ms")
    assert code == 0
    st = run["levels"][0]["session"]
    assert st["session_s"]["p50"] >= 0.6  # two pauses of 300 ms between three turns
    recs = load_result(Store(None), run["run_id"])
    del recs  # the stored run loads back as a result, its session view typed
    stored = [r for r in Store(None).requests(run["run_id"]) if r.session is not None]  # not the warm-up
    assert [r.think_ms for r in sorted(stored, key=lambda r: r.turn or 0)] == [None, 300.0, 300.0]


@pytest.mark.parametrize("extra, says", [
    (["--rate", "2"], "drop --rate"),
    (["--requests", "5"], "drop --requests"),
    (["--api", "completions"], "sends conversations: drop --api completions"),
    (["--concurrency", "4"], "at least as many sessions as agents"),
    (["--workers", "2"], "one process"),
    (["--tool-len", "uniform:9-3"], "the wrong way round"),
    (["--max-context", "5"], "a first turn alone can need 58 tokens"),
    (["--think-time", "soon"], "not a time"),
])
def test_refusals_are_one_line(emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               extra: list[str], says: str) -> None:
    code, _ = _run(emitter, tmp_path, "--sessions", "2", *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1


def test_a_session_run_prints_its_turns_at_80_columns(emitter: BackgroundEmitter, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    emitter.configure(ttft_s=0.002, itl_s=0.001)
    code, run = _run(emitter, tmp_path, "--sessions", "2", "--turns", "14")
    assert code == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "2 agents: each turn, p50 over the sessions" in out
    assert "TTFT warm" in out and "TTFT busted" in out
    rows = [line.split()[0] for line in out.splitlines() if line.strip()[:2].strip().isdigit()
            and "sessions finished" not in line]
    # 14 turns: the first ones, every k-th and the last, not all 14
    assert "1" in rows and "14" in rows and len([r for r in rows if r.isdigit()]) < 14
    flat = " ".join(out.split())  # lines wrap at 80 columns
    assert "2 warm: 2/2 sessions finished" in flat and "the server reported no cached tokens" in flat
    # a server that reported no cached tokens is not credited with a cache's gain
    assert "the server reported no cached tokens: not a measure of its cache" in flat and "s cached," not in flat
    assert "None" not in out  # a session run's lengths are its sessions', not a sweep's "input None tokens"


def test_a_turn_read_in_one_piece_has_no_decode_rate() -> None:
    """Its tokens arrived together (the client's loop stalled, or the server buffered): TPOT would be about 0 and
    the decode rate millions of tokens per second. Measured on vLLM while the machine compiled: 7,919,747 tok/s."""
    from tokenbench.metrics import session_stats
    from tokenbench.records import RequestRecord

    def rec(i: int, stamps: list[int]) -> RequestRecord:
        return RequestRecord(index=i, session=i, turn=0, sent_ns=0, first_token_ns=stamps[0], end_ns=stamps[-1] + 10,
                             chunk_ns=stamps, output_tokens=len(stamps), input_tokens=50)

    burst = rec(0, [5_000_000] * 16)
    paced = rec(1, [5_000_000 + k * 2_000_000 for k in range(16)])
    t = session_stats([burst, paced], "warm").turns[0]
    assert t.tpot_ms.n == 1 and t.decode_tps is not None and 400 < t.decode_tps < 600
    assert session_stats([burst], "warm").turns[0].decode_tps is None


def test_a_session_draws_each_answer_and_tool_result_length(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(ttft_s=0.002, itl_s=0.001)
    code, run = _run(emitter, tmp_path, "--sessions", "2", "--turns", "5", "--no-baseline",
                     "--output-len", "uniform:3-9", "--tool-len", "normal:12,4")
    assert code == 0
    bodies = _turns(emitter)
    outs = [b["max_tokens"] for b in bodies]
    assert all(3 <= n <= 9 and b["min_tokens"] == n for n, b in zip(outs, bodies)) and len(set(outs)) > 1
    tools = {len(b["messages"][-1]["content"].split()) for b in bodies if len(b["messages"]) > 2}
    assert len(tools) > 1 and all(1 <= n <= 28 for n in tools)
    wl = run["manifest"]["workload"]
    assert wl["output"]["text"] == "uniform 3-9" and wl["tool"]["kind"] == "normal"


class _Words:
    """A tokenizer of words, for a session level driven by hand."""

    description = "words"

    async def encode(self, text: str) -> list[int]:
        return [hash(w) for w in text.split()]

    async def decode(self, ids: list[int]) -> str:
        return " ".join("abc"[i % 3] for i in ids)


def _cancelled_level(emitter: BackgroundEmitter, turns: int, think_s: float,
                     ready: Any, sessions: int = 2) -> tuple[Any, list[Any]]:
    """Two agents' sessions against the emitter, the level's task cancelled (Ctrl-C) once ``ready(records)``: the
    level and its records."""
    import asyncio

    import aiohttp

    from tokenbench.client import StreamClient
    from tokenbench.draws import Draw
    from tokenbench.records import RequestRecord
    from tokenbench.sessions import SessionLevel, SessionPlan, SessionTexts
    from tokenbench.workload import PromptBuilder

    plan = SessionPlan(sessions=sessions, turns=turns, shared_prefix=4, task=Draw.fixed(6), tool=Draw.fixed(4),
                       output=Draw.fixed(6), think=Draw.fixed(think_s, "s"))
    records: list[RequestRecord] = []
    made: list[SessionLevel] = []

    async def go() -> None:
        async with aiohttp.ClientSession() as http:
            client = StreamClient(http, emitter.url, "emitter", api="chat")
            level = SessionLevel(client, SessionTexts(PromptBuilder(_Words(), 1, "t"), plan, 1, "t"), plan, "2/0", 2,
                                 "warm", lambda agent, n: {"max_tokens": n}, records, lambda r: None)
            made.append(level)
            task = asyncio.ensure_future(level.run())
            while not ready(records):
                await asyncio.sleep(0.02)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(go())
    return made[0], records


def test_a_session_cut_before_its_first_send_is_no_session_cut(emitter: BackgroundEmitter,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A CI run's soak read 2 sessions, 2 finished and 2 cut: an interrupt on a slow machine caught two agents
    building their next sessions' openings, before a turn was sent, and those were counted cut. A session that
    sent nothing is none of the level's: the level's sessions are its finished ones and its cut ones."""
    import asyncio

    from tokenbench.sessions import SessionLevel

    opening = SessionLevel._opening

    async def slow(self: Any, session: int, *args: Any, **kw: Any) -> Any:
        if session >= 2:  # the agents' second sessions: caught before their first send
            await asyncio.sleep(30)
        return await opening(self, session, *args, **kw)

    monkeypatch.setattr(SessionLevel, "_opening", slow)
    level, records = _cancelled_level(emitter, 1, 0.0, lambda rs: sum(r.end_ns is not None for r in rs) >= 2,
                                      sessions=4)
    assert {r.session for r in records} == {0, 1} and all(r.ok for r in records)
    assert level.cut == set(), level.cut


def test_an_interrupted_session_level_keeps_its_turns_and_marks_those_in_flight(emitter: BackgroundEmitter) -> None:
    """Ctrl-C (the task cancelled) mid-level: finished turns stay successes, a turn in flight is interrupted, never
    a success with no end."""
    import time

    emitter.configure(ttft_s=0.02, itl_s=0.05)
    t0 = time.monotonic()
    _, records = _cancelled_level(emitter, 50, 0, lambda recs: time.monotonic() - t0 > 1.0)
    done = [r for r in records if r.ok]
    cut = [r for r in records if not r.ok]
    assert done and all(r.end_ns is not None and r.output_tokens == 6 for r in done)
    assert len(cut) == 2 and {r.error_kind for r in cut} == {"interrupted"} and all(r.end_ns for r in cut)


def test_an_interrupt_between_two_turns_cuts_the_session(emitter: BackgroundEmitter) -> None:
    """Ctrl-C while every agent thinks between turns: no turn is in flight, so none is marked interrupted, and the
    sessions (one finished turn each of three) are cut, not finished: they once counted finished, with the time of
    one turn, and a session objective read them as fast sessions."""
    import time

    from tokenbench.metrics import session_stats

    emitter.configure(ttft_s=0.01, itl_s=0.0)
    answered: list[float] = []

    def both_think(recs: list[Any]) -> bool:  # both first turns answered, then a moment: both agents think
        if len([r for r in recs if r.end_ns]) >= 2 and not answered:
            answered.append(time.monotonic())
        return bool(answered) and time.monotonic() - answered[0] > 0.1

    level, records = _cancelled_level(emitter, 3, 30, both_think)
    for r in records:
        r.phase = "measured"
    assert len(records) == 2 and all(r.ok for r in records)
    assert level.cut == {0, 1}
    st = session_stats(records, "warm", frozenset(level.cut))
    assert (st.sessions, st.sessions_finished, st.cut) == (2, 0, 2)


def test_a_level_with_no_finished_session_reads_cleanly() -> None:
    """An interrupted busted level printed '0/2 sessions finished, ; cached 1%' (measured on llama-server)."""
    from tokenbench.distribution import Distribution
    from tokenbench.levels import ServingLevel, SessionStats
    from tokenbench.session_table import session_lines

    s = ServingLevel(concurrency=2)
    s.session = SessionStats(cache="busted", sessions=2, sessions_finished=0, turns_per_session=10.0,
                             session_s=Distribution(n=0), cached_share=0.01, cached_source="usage")
    assert session_lines(s) == ["2 busted: 0/2 sessions finished; cached 1% of prompt tokens (usage)"]


def test_a_level_cut_before_any_turn_finished_prints_no_table(capsys: pytest.CaptureFixture[str]) -> None:
    """A cache-cliff search interrupted at 8 agents printed a header-only turn table for them and "8 warm: the
    server reported no cached tokens"; no turn had finished to report anything."""
    from rich.console import Console

    from tokenbench.distribution import Distribution
    from tokenbench.levels import ServingLevel, SessionStats
    from tokenbench.session_table import print_sessions

    s = ServingLevel(concurrency=8, completed=0, failed=8)
    s.session = SessionStats(cache="warm", sessions=8, sessions_finished=0, turns_per_session=1.0,
                             session_s=Distribution(n=0), cached_share=None, cached_source=None)
    print_sessions(Console(width=80), [s])
    out = capsys.readouterr().out
    assert "each turn" not in out and "reported no cached tokens" not in out
    assert " ".join(out.split()) == "8 warm: 0/8 sessions finished; no turn finished"


def test_each_session_level_warms_up_on_prompts_of_its_own(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """One request of a first turn's size per agent before each level, sharing no text with the sessions: vLLM
    compiled again at a busted level's first batch (2 x 2,079 tokens) and that turn read 43 s, a '175x' gain."""
    emitter.configure(ttft_s=0.002, itl_s=0.001)
    code, run = _run(emitter, tmp_path, "--sessions", "3", "--concurrency", "2", "--turns", "2")
    assert code == 0
    seen = emitter.emitter.requests_seen[1:]
    warmups = [b for b in seen if len(b["messages"]) == 1]
    assert len(warmups) == 4  # two agents, two levels
    assert all(len(b["messages"][0]["content"].split()) == 16 + 20 for b in warmups)  # shared prompt + task
    system = _turns(emitter)[0]["messages"][0]["content"]
    assert not any(system[:40] in b["messages"][0]["content"] for b in warmups)
    assert [lv["completed"] for lv in run["levels"]] == [6, 6]  # the warm-up is not counted


def test_session_options_without_sessions_are_refused(emitter: BackgroundEmitter, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--url", emitter.url, "--turns", "3", "--think-time", "1s", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--turns, --think-time shape agent sessions: add --sessions N" in err


def test_a_soak_runs_sessions_back_to_back_for_its_duration(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """--duration: each agent starts a new session after its last until the time is up; no turn is sent after
    it, the sessions it cut are counted apart from the finished ones, and the turns are read in tenths."""
    code, doc = _run(emitter, tmp_path, "--sessions", "2", "--turns", "3", "--think-time", "100ms",
                     "--duration", "2s", "--no-baseline")
    assert code == 0, doc
    [level] = doc["levels"]
    s = level["session"]
    # 2 agents, 3 turns a session, 100 ms between turns: far more than the 2 sessions --sessions names
    assert s["sessions"] > 4 and s["sessions_finished"] + s["cut"] == s["sessions"] and s["cut"] <= 2
    windows = s["over_time"]
    assert len(windows) == 10 and windows[-1]["end_s"] == pytest.approx(2.0)
    assert sum(w["turns"] for w in windows) == level["completed"] and all(w["turns"] for w in windows)
    assert all(w["cached_share"] is None for w in windows)  # the emitter says nothing of a cache
    assert "cache_decay" not in level["flags"]


def test_a_soaks_session_objective_is_judged_on_the_sessions_it_finished(emitter: BackgroundEmitter,
                                                                          tmp_path: Path) -> None:
    """A soak's end cuts the sessions it catches, with fewer turns and a shorter time: the session objective reads
    only the finished ones, as the session view's times do (it read every session, the cut ones as fast)."""
    code, doc = _run(emitter, tmp_path, "--sessions", "2", "--turns", "3", "--think-time", "300ms",
                     "--duration", "2s", "--no-baseline", "--slo", "session_p50=10m")
    assert code == 0, doc
    [level] = doc["levels"]
    s = level["session"]
    [check] = [c for c in level["slo_checks"] if c["name"] == "session_p50"]
    assert s["cut"] >= 1 and check["n"] == s["sessions_finished"], (s, check)
    assert check["value"] == pytest.approx(s["session_s"]["p50"] * 1000, rel=1e-6)


def test_a_soak_whose_cached_share_falls_is_flagged() -> None:
    from tokenbench.finding import Code
    from tokenbench.findings import LevelFacts, assess
    from tokenbench.levels import ServingLevel, SessionStats
    from tokenbench.distribution import Distribution
    from tokenbench.soak import SoakWindow

    def level(shares: list[float]) -> ServingLevel:
        over = [SoakWindow(i, i + 1, 10, v, 50.0) for i, v in enumerate(shares)]
        return ServingLevel(concurrency=4, session=SessionStats("warm", 8, 8, 4.0, Distribution(n=0), 0.5, "usage",
                                                                over_time=over))
    held, fell = level([0.6] * 10), level([0.62, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2])
    for s in (held, fell):
        assess(LevelFacts([], s))
    assert held.finding(Code.CACHE_DECAY) is None
    found = fell.finding(Code.CACHE_DECAY)
    assert found is not None and "fell from 62% of prompt tokens in the run's first tenth to 20%" in found.message


def test_a_soak_s_tenths_say_their_own_length() -> None:
    """A 40 s soak's line read "each tenth of 40 s": the whole soak's length, read as each tenth's; its windows
    were 4 s each."""
    from tokenbench.distribution import Distribution
    from tokenbench.levels import ServingLevel, SessionStats
    from tokenbench.metrics import soak_windows
    from tokenbench.records import RequestRecord
    from tokenbench.session_table import over_time

    sent = [RequestRecord(index=i, phase="measured", session=0, sent_ns=int(i * 4e9),
                          first_token_ns=int(i * 4e9 + 5e7), input_tokens=100, cached_tokens=50) for i in range(10)]
    windows = soak_windows(sent, 40.0)
    assert len(windows) == 10 and windows[0].end_s - windows[0].start_s == 4.0
    s = ServingLevel(concurrency=4, session=SessionStats("warm", 8, 8, 4.0, Distribution(n=0), 0.5, "usage",
                                                         over_time=windows))
    said = over_time(s)
    assert said[0].startswith("  over time, in tenths of the soak (4 s each): cached 50% 50%"), said
    assert "40 s" not in said[0]


def test_the_report_draws_a_soak_over_time(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    from tokenbench.report import series
    from tokenbench.reader import load_result

    code, doc = _run(emitter, tmp_path, "--sessions", "2", "--turns", "3", "--think-time", "50ms",
                     "--duration", "1s", "--no-baseline", "--db", str(tmp_path / "r.db"))
    assert code == 0
    run = load_result(Store(tmp_path / "r.db"), doc["run_id"])
    plots = {p.id: p for p in series.build([run])}
    [line] = plots["soak_ttft"].lines
    assert len(line.xs) == 10 and line.xs[0] == pytest.approx(0.05) and all(y > 0 for y in line.ys)
    assert plots["soak_ttft"].x_text(0.5) == "0.5 s into the soak"
    assert "soak_cached" not in plots  # the emitter says nothing of a cache: no line drawn, no empty plot


def test_show_as_markdown_keeps_the_turns_and_the_soak_over_time(emitter: BackgroundEmitter, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """show --format markdown, pasted into a file, printed the level table alone: each turn's table and a soak's
    tenths, which the terminal's view prints under it, were lost."""
    code, doc = _run(emitter, tmp_path, "--sessions", "2", "--turns", "3", "--think-time", "50ms",
                     "--duration", "1s", "--no-baseline", "--db", str(tmp_path / "r.db"))
    assert code == 0
    capsys.readouterr()
    assert main(["show", doc["run_id"], "--db", str(tmp_path / "r.db"), "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "### Agent sessions" in md and "Concurrency 2:" in md
    turns = md.split("Concurrency 2:", 1)[1]
    assert re.search(r"^\| Turn", turns, re.M) and turns.count("\n| ") >= 4, md  # the header and 3 turns at least
    # the figures the terminal's turn table shows (the share cached, the decode rate), and, with no baseline run,
    # no busted columns of dashes
    head = [c.strip() for c in re.search(r"^\| Turn.*$", turns, re.M).group(0).strip("|").split("|")]  # type: ignore[union-attr]
    assert head == ["Turn", "Context (tokens)", "Cached (warm)", "TTFT p50 warm (s)", "Decode (tok/s, warm)"], head
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in turns.split("\n")
            if re.match(r"^\| \d+ \|", line)]
    # a number, or "—" where the answer came in one read (this emitter's often do): no decode time to measure
    assert rows and all(r[-1] == "—" or float(r[-1].replace(",", "")) > 0 for r in rows), turns
    # the soak's ten tenths: "—" for a tenth no turn was sent in (its 100 ms, on a machine busy with other work)
    assert re.search(r"^- turn TTFT p50: ((\S+ ms|—) ?){10}$", md, re.M), md
    # its heading: sessions back to back for the soak, not the "2 sessions x 3 turns" it read above 14 sessions
    assert main(["show", doc["run_id"], "--db", str(tmp_path / "r.db")]) == 0
    assert "sessions back to back for 1 s, each of 3 turns" in " ".join(capsys.readouterr().out.split())


def test_a_background_load_runs_beside_the_sessions_and_is_kept_apart(emitter: BackgroundEmitter,
                                                                       tmp_path: Path) -> None:
    code, doc = _run(emitter, tmp_path, "--sessions", "2", "--turns", "3", "--think-time", "200ms",
                     "--background", "20,32,4", "--no-baseline")
    assert code == 0, doc
    [level] = doc["levels"]
    bg = level["session"]["background"]
    assert bg["rate"] == 20 and bg["sent"] >= 3 and bg["ok"] >= 1 and bg["sent"] == bg["ok"] + bg["failed"]
    # the level's figures are the sessions' turns alone
    assert level["completed"] == 2 * 3
    unique = [b for b in emitter.emitter.requests_seen if len(b.get("messages", ())) == 1
              and b["max_tokens"] == 4 if "max_tokens" in b]
    firsts = {b["messages"][0]["content"].split(" ", 1)[0] for b in unique}
    assert len(unique) >= bg["sent"] - bg["failed"] and len(firsts) == len(unique)  # each from a marker of its own
    assert doc["manifest"]["workload"]["background"] == {"rate": 20.0, "input_len": 32, "output_len": 4}


@pytest.mark.parametrize("extra, says", [
    (["--sessions", "2", "--background", "0"], "give RATE or RATE,INPUT,OUTPUT"),
    (["--sessions", "2", "--background", "2,100"], "give RATE or RATE,INPUT,OUTPUT"),
    (["--background", "2"], "--tool-len shape agent sessions and --background runs beside them: add --sessions N, "
                            "or drop them"),
])
def test_a_background_is_refused_in_one_line(emitter: BackgroundEmitter, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str], extra: list[str], says: str) -> None:
    code, _ = _run(emitter, tmp_path, *extra)
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and len(err.splitlines()) == 1, err


def test_a_soak_cut_by_ctrl_c_keeps_its_turns(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """A real SIGINT to the command 2 s after its run starts, in a 60 s soak: the level is stored, interrupted, with the turns it
    finished and the soak's tenths so far; exit 130."""
    import signal
    import subprocess
    import sys
    import time

    db = tmp_path / "soak.db"
    emitter.configure(itl_s=0.02)  # turns of a second or more: the interrupt finds them in flight
    proc = subprocess.Popen([sys.executable, "-m", "tokenbench", "sweep", "--url", emitter.url, "--sessions", "2",
                             "--turns", "4", "--think-time", "50ms", "--duration", "60s", "--no-baseline",
                             "--output-len", "16",
                             "--guard", "off", "--no-metrics", "--quiet", "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60  # on a loaded machine the command can take seconds to start its run
    while not (db.exists() and Store(db).runs()) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    res = load_result(Store(db), Store(db).runs()[0].id)
    [level] = res.outcomes
    s = level.serving
    assert res.status == "interrupted" and level.status == "interrupted" and s is not None and s.completed >= 2
    assert s.session is not None and s.session.sessions >= 2 and len(s.session.over_time) == 10
    # a session whose turn the interrupt cut is cut short, not failed: compare read "4 of 5 sessions did not finish
    # (a turn failed)" of a soak whose every turn succeeded
    st = s.session
    assert st.sessions - st.sessions_finished - st.cut == 0 and st.cut >= s.cut, (st.sessions, st.sessions_finished,
                                                                                  st.cut, s.cut)


def test_a_background_past_its_ceiling_is_refused(emitter: BackgroundEmitter, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--background 1e6 sent 429,132 requests in a minute and left a llama-server unresponsive."""
    code, _ = _run(emitter, tmp_path, "--sessions", "2", "--background", "1e6,64,8", "--no-baseline")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "give at most 100 requests/s" in err and len(err.splitlines()) == 1, err


def test_a_background_keeps_a_bounded_number_in_flight_and_counts_the_rest() -> None:
    import asyncio
    import random

    from tokenbench.tenants import MAX_IN_FLIGHT, Background, BackgroundLoad

    class Never:  # a server that never answers: every request stays in flight
        async def send(self, req: Any, rec: Any) -> None:
            await asyncio.sleep(3600)

    class Builder:
        async def exact(self, prefix: str, n: int, rng: random.Random) -> tuple[str, int]:
            return "x " * n, n

    async def go() -> BackgroundLoad:
        load = BackgroundLoad(Background(100.0, 8, 2), Never(), Builder(),  # type: ignore[arg-type]
                              lambda n: {}, 1, "t")
        await load.prepare()
        task = asyncio.create_task(load.run())
        await asyncio.sleep(1.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return load

    load = asyncio.run(go())
    st = load.stats()
    assert st.sent == MAX_IN_FLIGHT and st.unsent > 20, (st.sent, st.unsent)
    line = st.line()
    assert f"{st.unsent:,} not sent ({MAX_IN_FLIGHT} in flight already" in line, line


def test_the_background_line_writes_its_counts_as_the_tables_do() -> None:
    from tokenbench.distribution import Distribution
    from tokenbench.tenants import BackgroundStats

    line = BackgroundStats(2.5, 1024, 8, 429132, 1200, 427932, Distribution.of([5.0])).line()
    assert "2.5 req/s of unique 1,024-token prompts: 429,132 sent, 1,200 finished" in line, line


@pytest.mark.parametrize("extra", [["--sessions", "2", "--turns", "2"], []])
def test_a_duration_past_a_week_is_refused(capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    """--duration 1e9h was accepted: "sessions back to back for 3.6e+12 s"."""
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--quiet", *extra, "--duration", "1e9h"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--duration of 41,666,667 days: a level runs a week (168h) at most" in err, err
    assert len(err.splitlines()) == 1
