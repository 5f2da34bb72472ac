"""Recorded agent trajectories replayed as agents behave: each tree's calls in order after the answer before them
and their capped pause, subagents beside their parent and joined where recorded, lanes starting mid-trajectory,
each tree salted, full-text calls with their tools, open loop at the recorded times. Against the emitter, whose
requests_seen keeps every body it was sent."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tokenbench.cells import ms
from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.errors import UsageError
from tokenbench.kinds.replay import ReplayKind
from tokenbench.records import RequestRecord
from tokenbench.replay import ReplayPlan
from tokenbench.store import Store
from tokenbench.sweep import SweepConfig, run_sweep
from tokenbench.trajectories.load import load_trajectories

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "trajectories"
AGENTS = EXAMPLES / "agents"
NS = 1e9


def weka(tmp_path: Path, traces: list[list[dict[str, Any]]], block: int = 4) -> Path:
    """A folder of Weka traces, one per list of requests."""
    folder = tmp_path / "weka"
    folder.mkdir(exist_ok=True)
    for i, reqs in enumerate(traces):
        (folder / f"t{i}.json").write_text(json.dumps({"id": f"t{i}", "block_size": block, "requests": reqs}))
    return folder


def call(t: float, n_in: int, out: int, ids: list[int], think: float = 0.0, api: float | None = 0.1) -> dict[str, Any]:
    return {"t": t, "type": "n", "in": n_in, "out": out, "hash_ids": ids, "think_time": think, "api_time": api}


def replay(url: str, path: Path, tmp_path: Path, api: str = "completions", **kw: Any) -> tuple[Any, list[RequestRecord]]:
    plan = ReplayPlan(load_trajectories(path), **{k: kw.pop(k) for k in ("max_think_s", "answers", "speed", "scale")
                                                 if k in kw})
    cfg = SweepConfig(url=url, workload=ReplayKind(plan), api=api, requests=kw.pop("requests", None), guard="off",
                      seed=7, metrics_interval_s=None, warmup=0, **kw)  # type: ignore[arg-type]
    store = Store(tmp_path / "r.db")
    res = asyncio.run(run_sweep(cfg, store))
    return res, store.requests(res.run_id)


def measured(recs: list[RequestRecord]) -> list[RequestRecord]:
    return [r for r in recs if r.phase == "measured"]


def test_each_tree_is_replayed_in_order_with_its_pauses_capped(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    path = weka(tmp_path, [[call(0, 8, 3, [1, 2]), call(1, 12, 2, [1, 2, 3], think=0.3),
                            call(60, 16, 4, [1, 2, 3, 4], think=50.0)]])
    res, recs = replay(emitter.url, path, tmp_path, max_think_s=0.5, concurrency=[1])
    calls = measured(recs)
    assert res.status == "complete" and [r.turn for r in calls] == [0, 1, 2]
    # each call after the answer before it and its pause: 0.3 s as recorded, 50 s capped at 0.5 s
    gaps = [(b.sent_ns - (a.end_ns or 0)) / NS for a, b in zip(calls, calls[1:])]
    assert 0.3 <= gaps[0] < 0.45 and 0.5 <= gaps[1] < 0.65
    assert [r.think_ms for r in calls] == [None, pytest.approx(300.0), pytest.approx(500.0)]
    # every prompt has its recorded length (the salt's 4 tokens are words of the prompt too), every output its own
    assert [r.expected_input_tokens for r in calls] == [8, 12, 16] == [r.input_tokens for r in calls]
    assert [r.output_tokens for r in calls] == [3, 2, 4]


def test_blocks_are_shared_within_a_tree_and_salted_between_trees(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    same = [call(0, 8, 1, [1, 2]), call(1, 12, 1, [1, 2, 3])]
    path = weka(tmp_path, [same, same])  # two trees with the same hash ids
    replay(emitter.url, path, tmp_path, max_think_s=0.0, concurrency=[1])
    prompts = [b["prompt"].split() for b in emitter.emitter.requests_seen if b.get("max_tokens") == 1]
    first, second, third, fourth = prompts[-4:]
    assert second[:8] == first[:8]  # a tree's later call re-sends its blocks token for token
    assert third[:4] != first[:4] and third[4:8] != first[4:8]  # another tree shares nothing, salt or block
    assert fourth[:8] == third[:8]


def test_a_subagent_starts_after_its_anchor_and_its_parent_waits(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    emitter.configure(itl_s=0.01)
    sub = {"t": 3.0, "type": "subagent", "agent_id": "a1", "status": "completed", "duration_ms": 1000,
           "requests": [call(0, 8, 3, [7, 8]), call(0.5, 12, 3, [7, 8, 9], think=0.2)]}
    path = weka(tmp_path, [[call(0, 8, 2, [1, 2], api=0.5), sub, call(4, 16, 2, [1, 2, 3, 4], think=0.0, api=0.1)]])
    res, recs = replay(emitter.url, path, tmp_path, max_think_s=1.0, concurrency=[1])
    calls = measured(recs)
    parent = [r for r in calls if r.parent is None]
    child = [r for r in calls if r.parent is not None]
    assert len(parent) == 2 and len(child) == 2 and {r.parent for r in child} == {parent[0].session}
    assert child[0].sent_ns >= (parent[0].end_ns or 0)  # started once the call it followed answered
    assert parent[1].sent_ns >= max(r.end_ns or 0 for r in child)  # the parent's next call waited for it
    assert res.outcomes[0].summary.session.sessions == 1  # the tree is the session, its subagent in it


def test_the_session_view_counts_the_trees_replay_stats_does(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    # 4 lanes cut at 24 calls: the table said 1/4 trees finished while the session view (which cost prices)
    # said 4 of 4 sessions, counting subagents and cut trees as sessions finished
    res, _ = replay(emitter.url, AGENTS, tmp_path, max_think_s=0.0, scale=8, concurrency=[4], requests=24)
    s = res.outcomes[0].summary
    assert s.session.sessions == s.replay.trees and s.session.sessions_finished == s.replay.trees_finished
    assert s.session.session_s.n == s.replay.tree_s.n
    assert s.session.sessions - s.session.sessions_finished - s.session.cut == 0  # a cut tree is not failed


def test_lanes_start_mid_trajectory_after_warming_the_call_before(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    tree = [call(k, 4 * (k + 2), 1, list(range(1, k + 3))) for k in range(8)]
    path = weka(tmp_path, [tree, tree, tree])
    res, recs = replay(emitter.url, path, tmp_path, max_think_s=0.0, concurrency=[2])
    warm = [r for r in recs if r.phase == "warmup"]
    calls = measured(recs)
    starts = sorted(min(r.turn or 0 for r in calls if r.session == s) for s in {r.session for r in calls})
    # the two lanes' first trees start at random calls after one uncounted call; the third tree from its start
    assert len({r.session for r in calls}) == 3 and starts.count(0) >= 1
    assert len(warm) == sum(1 for s in starts if s > 0)
    assert all(w.turn == min(r.turn or 0 for r in calls if r.session == w.session) - 1 for w in warm)


def test_the_requests_option_stops_a_level_after_that_many_calls(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    tree = [call(k, 4 * (k + 2), 1, list(range(1, k + 3))) for k in range(6)]
    res, recs = replay(emitter.url, weka(tmp_path, [tree] * 4), tmp_path, max_think_s=0.0, concurrency=[1],
                       requests=5)
    assert len(measured(recs)) == 5


def test_full_text_calls_send_their_messages_tools_and_salt(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    res, recs = replay(emitter.url, EXAMPLES / "mlcommons-agentic.jsonl", tmp_path, api="chat", max_think_s=0.0,
                       concurrency=[1])
    bodies = [b for b in emitter.emitter.requests_seen if "messages" in b and b.get("tools")]
    assert res.status == "complete" and len(bodies) == len(measured(recs))
    first = bodies[0]
    user = next(m for m in first["messages"] if m["role"] == "user")
    system = next(m for m in first["messages"] if m["role"] == "system")
    assert len(user["content"].split()) > 4 and "salt" not in system["content"]
    assert any(m.get("tool_calls") for b in bodies for m in b["messages"] if m["role"] == "assistant")
    assert any(m["role"] == "tool" and m.get("tool_call_id") for b in bodies for m in b["messages"])
    trees = load_trajectories(EXAMPLES / "mlcommons-agentic.jsonl").trajectories
    assert first["tools"] == list(trees[0].calls[0].tools or [])


def test_live_answers_put_the_servers_own_in_the_history(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    replay(emitter.url, EXAMPLES / "session-log.jsonl", tmp_path, api="chat", max_think_s=0.0, answers="live",
           concurrency=[1])
    later = [b for b in emitter.emitter.requests_seen if any(m["role"] == "assistant" for m in b.get("messages", []))]
    said = [m["content"] for b in later for m in b["messages"] if m["role"] == "assistant" and m["content"]]
    # the emitter's own answers ("w0 w1 ..."), not the recorded ones
    assert said and all(s.split()[0] == "w0" for s in said)


def test_an_open_loop_level_ends_with_its_last_call_not_its_next_trees_time(emitter: BackgroundEmitter,
                                                                             tmp_path: Path) -> None:
    # --requests 3 sent the first tree's calls in 0.56 s, then held the level until the second tree's recorded
    # start at 2 s to send nothing: the progress said 2.0 s beside a rate over 0.56 s. At a twentieth of the
    # recorded speed that start is 40 s away: a level that waited for it takes 40 s, one that does not about 1
    t0 = time.monotonic()
    res, recs = replay(emitter.url, EXAMPLES / "tracelab-rounds.jsonl", tmp_path, max_think_s=0.0, speed=0.05,
                       concurrency=[1], requests=3)
    took = time.monotonic() - t0
    assert len(measured(recs)) == 3 and len({r.session for r in measured(recs)}) == 1
    assert took < 20 and res.status == "complete"


def test_open_loop_sends_each_tree_at_its_recorded_start(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    res, recs = replay(emitter.url, EXAMPLES / "tracelab-rounds.jsonl", tmp_path, max_think_s=0.0, speed=100.0,
                       concurrency=[1])
    trees = load_trajectories(EXAMPLES / "tracelab-rounds.jsonl").trajectories
    firsts = sorted(min(r.sent_ns for r in measured(recs) if r.session == s) for s in {r.session for r in recs})
    epochs = sorted(t.epoch_s or 0.0 for t in trees)
    want = (epochs[1] - epochs[0]) / 100.0
    assert res.outcomes[0].level.schedule is not None
    assert abs((firsts[1] - firsts[0]) / NS - want) < 0.05 + 0.1 * want
    # no agent count stands behind it: no per-agent rate (the requests in flight divided the aggregate into a call's
    # own speed, 90x it), and the level says what its schedule is
    from tokenbench.sweep_table import sweep_rows

    assert res.outcomes[0].serving is not None
    head, [row] = sweep_rows([res.outcomes[0].serving])
    assert row[head.index("Per-agent tok/s")] == "—" and row[head.index("Aggregate output tok/s")] != "—"
    assert res.outcomes[0].level.describe() == f"replay of {len(trees)} trajectories starting over " \
        f"{round(epochs[-1] / 100 - epochs[0] / 100, 1):g} s"


def test_scale_divides_every_length(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    path = weka(tmp_path, [[call(0, 64, 8, [1, 2, 3, 4], api=0.1), call(1, 96, 16, [1, 2, 3, 4, 5, 6])]], block=16)
    res, recs = replay(emitter.url, path, tmp_path, max_think_s=0.0, scale=4.0, concurrency=[1])
    assert [(r.expected_input_tokens, r.output_tokens) for r in measured(recs)] == [(16, 2), (24, 4)]  # the salt in place of the first tokens


def test_an_open_loop_replay_caps_its_pauses_too(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """At the recorded times the cap still holds: session-log.jsonl's calls were sent over 9 s, and with pauses
    capped at 0 s (the heading said so) the replay waited 9 s all the same. Capped, each call follows the answer
    before it; as recorded, at 10 times the speed, the tree takes its 0.9 s."""
    def span_s(recs: list[RequestRecord]) -> float:
        calls = measured(recs)
        return (max(r.end_ns or 0 for r in calls) - min(r.sent_ns for r in calls)) / NS

    res, recs = replay(emitter.url, EXAMPLES / "session-log.jsonl", tmp_path, "chat", max_think_s=0.0, speed=1.0)
    assert res.status == "complete" and len(measured(recs)) == 5 and span_s(recs) < 0.8, span_s(recs)
    res, recs = replay(emitter.url, EXAMPLES / "session-log.jsonl", tmp_path, "chat", max_think_s=None, speed=10.0)
    assert res.status == "complete" and 0.85 <= span_s(recs) < 1.6, span_s(recs)


def test_a_tree_cut_by_the_levels_end_is_not_called_finished(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """A level that stopped at --requests (or at Ctrl-C) in the middle of a tree read "1/1 trees finished" for the
    calls it did send: the tree was cut, and its time is no tree's time."""
    res, recs = replay(emitter.url, EXAMPLES / "weka-claude-code.json", tmp_path, max_think_s=0.0, concurrency=[1],
                       requests=3)
    stats = res.outcomes[0].summary.replay
    assert len(measured(recs)) == 3 and all(r.ok for r in measured(recs))
    assert stats.trees == 1 and stats.trees_finished == 0 and stats.tree_s.n == 0, stats
    res, recs = replay(emitter.url, EXAMPLES / "weka-claude-code.json", tmp_path, max_think_s=0.0, concurrency=[1])
    assert res.outcomes[0].summary.replay.trees_finished == 1


def test_replay_options_are_refused_in_one_line(emitter: BackgroundEmitter, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    weka_file = EXAMPLES / "weka-claude-code.json"
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 2}) + "\n")
    cases = [(["--trace", str(weka_file), "--rate", "1"], "drop --rate"),
             (["--trace", str(weka_file), "--workers", "2"], "drop --workers and --ray"),
             (["--trace", str(weka_file), "--trace-speed", "2"], "records none: give --concurrency"),
             (["--trace", str(weka_file), "--input-len", "5"], "drop --input-len"),
             (["--trace", str(mooncake), "--answers", "live"], "--answers shape a replay of agent trajectories"),
             # a length-only trace has no recorded answers to feed back: --answers live was ignored, unsaid
             (["--trace", str(weka_file), "--answers", "live"],
              "--answers live: weka-claude-code.json records lengths only, no answers to replace"),
             (["--trace", str(EXAMPLES / "mlcommons-agentic.jsonl"), "--api", "completions"], "holds chat messages")]
    for argv, message in cases:
        assert main(["sweep", "--url", emitter.url, "--guard", "off", "--quiet", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("scale", ["1e9", "1025", "0.5", "1e-9", "nan", "inf", "0"])
def test_a_trace_scale_outside_what_it_can_replay_is_refused_in_one_line(
        scale: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--trace-scale divides every length, rounded up to a token: 1e9 sent every call as one token, and 1e-6
    multiplied a 100K-token call to 10^11 tokens and built text until killed a minute later. Refused before anything is read or
    sent; from 1 to 1,024 it replays."""
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(AGENTS), f"--trace-scale={scale}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "give a number from 1 (the trace as recorded) to 1,024" in err, err


def test_a_trace_scale_from_1_to_1024_is_taken() -> None:
    from tokenbench.cli.parser import build_parser

    for scale in ("1", "16", "1024"):
        a = build_parser().parse_args(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace-scale", scale])
        assert a.trace_scale == float(scale)


def test_more_lanes_than_trajectories_replay_each_again_as_a_user_of_its_own(emitter: BackgroundEmitter,
                                                                              tmp_path: Path) -> None:
    """Three lanes over one recorded session: it is replayed three times at once, each a salt of its own (three
    users of one agent, sharing no prompt cache), each lane starting at its own call; no lane idles."""
    tree = [call(k, 4 * (k + 2), 1, list(range(1, k + 3)), api=None) for k in range(8)]
    emitter.configure(ttft_s=0.02)
    res, recs = replay(emitter.url, weka(tmp_path, [tree]), tmp_path, max_think_s=0.0, concurrency=[3])
    calls = measured(recs)
    assert res.status == "complete" and len({r.session for r in calls}) == 3
    salts = {tuple(b["prompt"].split()[:4]) for b in emitter.emitter.requests_seen if b.get("max_tokens") == 1}
    assert len(salts) == 3
    # the three in flight together: some call of each tree was sent while another tree's was in flight
    spans = [(r.sent_ns, r.end_ns or 0, r.session) for r in calls]
    assert all(any(s0 < e1 and s1 < e0 and o != t for s1, e1, o in spans) for s0, e0, t in spans[:3])


def test_a_replay_from_the_command_line_prints_at_80_columns(emitter: BackgroundEmitter, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "1",
                 "--trace", str(EXAMPLES / "weka-claude-code.json"), "--max-think", "0s", "--concurrency", "1",
                 "--requests", "20", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    # the set ran out before the calls asked for: said, not left for the reader to count
    replay = json.loads((tmp_path / "r.json").read_text())["levels"][0]["replay"]
    assert replay["asked"] == 20 and replay["calls"] < 20, replay
    assert f"{replay['calls']} of the 20 calls asked (--requests): a level replays each trajectory once" in \
        " ".join(out.split()), out
    # TTFT by the call's place in its session, an agent's first question ("turn 1 against turn 20"), which the
    # JSON held and no table showed: a row per call (up to ten), as the level's session turns give it
    turns = json.loads((tmp_path / "r.json").read_text())["levels"][0]["session"]["turns"]
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(" Call  Sessions  Context"))
    shown = [line.split() for line in lines[at + 2:at + 2 + min(len(turns), 10)]]
    assert [int(r[0]) for r in shown] == [t["turn"] + 1 for t in turns][:len(shown)], shown
    assert all(r[1] == str(t["n"]) and " ".join(r[4:6]) == ms(t["ttft_ms"]["p50"]) for r, t in zip(shown, turns)), \
        (shown, turns)
    # a level cut short, or whose calls failed, did not run out of trajectories: it says why it sent fewer
    from tokenbench.levels import ServingLevel
    from tokenbench.reader import load_result
    from tokenbench.replay_table import replay_lines
    from tokenbench.store import Store

    level = load_result(Store(), json.loads((tmp_path / "r.json").read_text())["run_id"]).outcomes[0].summary
    assert isinstance(level, ServingLevel) and level.replay is not None
    # the subagents are of every tree the level ran: "1/4 trees finished (1 subagent)" read as the finished one's
    level.replay.subagents, level.replay.trees = 1, 4
    assert "/4 trees finished, " in replay_lines(level)[0] and "; 1 subagent among the 4 trees;" in \
        replay_lines(level)[0]
    level.flags.append("interrupted")
    assert replay_lines(level)[0].endswith("calls asked (--requests): the level was interrupted")
    level.flags.remove("interrupted")
    level.failed = 2
    assert replay_lines(level)[0].endswith("2 calls failed, and a failed call ends its tree (an agent with no answer "
                                           "has nothing to go on)")
    # as Markdown too: the level's bins and its trees, not the level table alone
    run_id = json.loads((tmp_path / "r.json").read_text())["run_id"]
    assert main(["show", run_id, "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "### Recorded agents, replayed" in md and "TTFT by the context a call sent" in md, md
    # each call's own rate, said apart from the table's per-agent share of the aggregate
    assert "of calls streamed at" in " ".join(out.split()) and "per-agent rate" not in out
    workload = json.loads((tmp_path / "r.json").read_text())["manifest"]["workload"]
    assert workload["kind"] == "replay" and workload["trajectories"]["format"] == "weka"
    assert workload["max_think_s"] == 0.0 and workload["trajectories"]["subagents"] == 2
    # the API the calls went to, in the manifest and the heading, as a sweep's (a length-only set: completions)
    assert workload["api"] == "completions" and "; completions API;" in " ".join(out.split()), out
    # a replay's levels carry session statistics over its lanes, and the report drew its calls as the turns of
    # agent sessions, recommend called it "an agent-session run": it is a replay, and says so everywhere
    assert main(["report", run_id, "--html", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Recorded agents, replayed" in page and "TTFT by the context a call sent" in page
    assert "Agent sessions" not in page and "each turn" not in page
    capsys.readouterr()
    assert main(["recommend", "--model", "qwen3.6-35b-a3b", "--agents", "4", "--runs", run_id, "--json", "-"]) == 0
    assert "a replay of recorded agents: compare it with other replays" in capsys.readouterr().out


def test_library_refusals() -> None:
    plan = ReplayPlan(load_trajectories(EXAMPLES / "weka-claude-code.json"))
    with pytest.raises(UsageError, match="drop --rate"):
        SweepConfig(url="http://127.0.0.1:9/v1", workload=ReplayKind(plan), rates=[1.0])


# ---- the replay view of a level ----------------------------------------------------------------------------------

def _rec(session: int, parent: int | None = None, ok: bool = True, n_in: int = 100, cached: int | None = 60,
         status: int | None = None, error: str | None = None) -> RequestRecord:
    r = RequestRecord(index=0, session=session, parent=parent, sent_ns=10**9, first_token_ns=int(1.1e9),
                      end_ns=2 * 10**9, input_tokens=n_in, cached_tokens=cached, output_tokens=10)
    if not ok:
        r.error_kind, r.http_status, r.error = "http", status, error
    return r


@pytest.mark.parametrize(("status", "error", "over"), [
    # vLLM 0.32 (vllm/renderers/params.py) and llama-server (tools/server/server-context.cpp), as they word it
    (400, "This model's maximum context length is 2048 tokens. However, your prompt contains 3000 input tokens, "
          "which exceeds this limit even without any output tokens.", True),
    (400, "request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it", True),
    (400, "'messages' must be a list", False),
    (500, "maximum context length is 2048 tokens", False),
])
def test_a_call_refused_for_its_context_is_told_apart(status: int, error: str, over: bool) -> None:
    from tokenbench.replay_stats import overflowed

    assert overflowed(_rec(0, ok=False, status=status, error=error)) is over


def test_the_replay_view_counts_trees_subagents_and_overflows() -> None:
    from tokenbench.replay_stats import replay_stats

    calls = [_rec(0), _rec(0, n_in=300), _rec(1, parent=0), _rec(2, parent=1), _rec(3), _rec(4),
             _rec(4, ok=False, status=400, error="request (9000 tokens) exceeds the available context size")]
    r = replay_stats(calls, 0.9)
    # trees: 0 with its subagent 1 and that one's own 2; 3; 4 (which failed)
    assert (r.trees, r.trees_finished, r.subagents, r.calls) == (3, 2, 2, 7)
    assert r.overflowed == 1 and r.invalid and r.ideal_cached_share == 0.9
    assert r.agent_tps_p90 == pytest.approx(10.0)  # 10 tokens in 1 s each
    assert [(b.low, b.high, b.calls) for b in r.by_context] == [(0, 256, 5), (256, 512, 1)]
    assert r.by_context[0].uncached_tokens_mean == 40


def test_a_level_held_to_an_slo_fails_when_over_1_percent_of_its_calls_overflowed() -> None:
    """AgentX's validity rule decides a level held to an SLO: its TTFT of the calls that fit cannot pass a box that
    refused 2 of 10 calls for their context (so a capacity search does not count it as served); 1 of 200 passes."""
    from tokenbench.capacity import SearchSpec, verdict
    from tokenbench.kinds.replay import ReplayWork
    from tokenbench.offered_load import Level
    from tokenbench.metrics import summarize
    from tokenbench.results import LevelOutcome
    from tokenbench.slo import SLO

    def level(n: int, over: int) -> Any:
        calls = [_rec(k) for k in range(n - over)]
        calls += [_rec(n + k, ok=False, status=400, error="request (9000 tokens) exceeds the available context size")
                  for k in range(over)]
        for i, r in enumerate(calls):
            r.index = i
        s = summarize(calls, concurrency=4, rate=None, window_start_ns=10**9, slo=SLO.parse("errors=25%"))
        # the level's work as the replay kind attaches it (a stand-in for the level's run: the trees it ended)
        ReplayWork(SimpleNamespace(finished={r.session for r in calls}), None, None).attach(s, calls)  # type: ignore[arg-type]
        return s

    bad, fine = level(10, 2), level(200, 1)
    assert [c.name for c in bad.slo_checks] == ["errors", "context_overflow"]
    assert bad.slo_checks[0].met and not bad.slo_checks[1].met and bad.slo_met is False
    assert fine.slo_met is True and fine.slo_checks[-1].value == pytest.approx(0.005)
    outcome = LevelOutcome(0, Level(concurrency=4), bad, "complete")
    v = verdict(outcome, SearchSpec("concurrency", 1, 8))
    assert v is not None and v.met is False and v.sure


# ---- capacity over a replay, at per-agent speed tiers -----------------------------------------------------------

def test_capacity_over_a_replay_answers_at_each_speed_tier(emitter: BackgroundEmitter, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A server whose streams slow as more generate at once: 90% of calls at 60 tok/s holds for fewer agents than
    at 20 tok/s, and each tier is a search of its own, stored."""
    monkeypatch.setenv("COLUMNS", "80")
    emitter.configure(itl_s=0.004, itl_per_stream_s=0.006)
    tree = [call(k, 4 * (k + 2), 12, list(range(1, k + 3))) for k in range(4)]
    out = tmp_path / "cap.json"
    code = main(["capacity", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "2",
                 "--trace", str(weka(tmp_path, [tree] * 8)), "--max-think", "0s", "--concurrency", "1:8",
                 "--slo", "errors=10%", "--tiers", "20,60", "--requests", "16", "--json", str(out),
                 "--label", "cap-agents"])
    text = capsys.readouterr().out
    assert code == 0, text
    tiers = json.loads(out.read_text())["tiers"]
    found = {t["tok_s"]: t["capacity"]["capacity"] for t in tiers}
    assert found[60] is not None and found[20] is not None and found[60] < found[20], found
    assert all(t["manifest"]["workload"]["kind"] == "replay" for t in tiers)
    flat = " ".join(text.split())
    assert f"at 60 tok/s each (cap-agents-60tps): this box serves {found[60]} agents" in flat
    assert "at 20 tok/s each (cap-agents-20tps): this box serves" in flat and f"{found[20]} agents" in flat
    assert max(len(line) for line in text.splitlines()) <= 80
    # each tier's run its own label (one label for both: runs could not tell them apart, show refused it)
    assert [t["manifest"]["label"] for t in tiers] == ["cap-agents-20tps", "cap-agents-60tps"]
    assert main(["show", "cap-agents-60tps"]) == 0
    # Ctrl-C in the first tier's search: the second is never run, and said so (it printed the first's answer alone)
    import tokenbench.cli.capacity as capacity_cli
    from tokenbench.errors import RunInterrupted

    def interrupted(*_a: object, **_k: object) -> None:
        raise RunInterrupted("interrupted (Ctrl-C)")

    monkeypatch.setattr(capacity_cli, "_search", interrupted)
    capsys.readouterr()
    assert main(["capacity", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet",
                 "--trace", str(weka(tmp_path, [tree] * 8)), "--max-think", "0s", "--concurrency", "1:8",
                 "--slo", "errors=10%", "--tiers", "20,60", "--requests", "16"]) == 130
    assert "not searched: 60 tok/s each (the search at 20 tok/s each ended the command)" in capsys.readouterr().err


def test_a_request_trace_and_a_timed_replay_have_no_load_to_search(emitter: BackgroundEmitter, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 2}) + "\n")
    # the packaged trace with --concurrency asked to drop it, then for another --trace-block, and only then said
    # there was no load to search: the real answer comes first
    for argv, said in ((["--trace", str(mooncake)], "no load to search"),
                       (["--trace", str(EXAMPLES.parent / "mooncake-trace.jsonl"), "--concurrency", "1:4"],
                        "no load to search"),
                       (["--trace", str(EXAMPLES / "session-log.jsonl"), "--trace-speed", "2"], "search lanes")):
        assert main(["capacity", "--url", emitter.url, "--slo", "ttft_p90=1s", "--quiet", *argv]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, err


def test_the_slo_reads_a_share_of_requests_at_a_speed() -> None:
    from tokenbench.slo import SLO, assess
    from tokenbench.levels import ServingLevel

    slo = SLO.parse("agent_tps_p90=20")
    assert slo.agent_tps_pct == {"p90": 20.0} and slo.decides_levels
    fast = [_rec(0) for _ in range(40)]  # 10 tokens a second each
    for r in fast[:30]:
        r.output_tokens = 30
    (check,) = [c for c in assess(ServingLevel(), fast, slo) if c.name == "agent_tps_p90"]
    assert not check.met and check.over == 10 and check.value == pytest.approx(10.0)
    for bad in ("agent_tps_p90=0", "agent_tps_p91=20", "agent_tps_p90=fast"):
        with pytest.raises(ValueError):
            SLO.parse(bad)


def test_each_tree_names_its_session_to_the_server(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """X-Session-ID, as MLCommons' agentic benchmark sends it: one per tree replayed, a subagent one of its own, the
    same on every call of a session."""
    replay(emitter.url, EXAMPLES / "weka-claude-code.json", tmp_path, max_think_s=0.0, concurrency=[1])
    ids = [h.get("X-Session-ID") for h in emitter.emitter.headers_seen[1:]]  # the check request has none
    assert all(ids) and len(set(ids)) == 3  # the session and its two subagents


def test_sessions_and_replays_speak_the_messages_api(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    res, recs = replay(emitter.url, EXAMPLES / "mlcommons-agentic.jsonl", tmp_path, api="messages",
                       max_think_s=0.0, concurrency=[1])
    assert res.status == "complete" and len(measured(recs)) > 3
    sent = [b for b in emitter.emitter.requests_seen if "messages" in b and b.get("tools")]
    assert sent and all("system" in b or b["messages"][0]["role"] != "system" for b in sent)


def test_two_replays_compare_as_replays(emitter: BackgroundEmitter, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """compare reads two replays by their trees, cache and TTFT by context, not turn by turn as synthetic sessions
    (a call's place in one recording says nothing of its place in another)."""
    monkeypatch.setenv("COLUMNS", "80")
    for label, ttft in (("fast", 0.001), ("slow", 0.05)):  # apart by more than a loaded machine adds
        emitter.configure(ttft_s=ttft)
        assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "1",
                     "--trace", str(AGENTS), "--trace-scale", "16", "--max-think", "0s", "--concurrency", "2",
                     "--requests", "20", "--label", label]) == 0
    capsys.readouterr()
    assert main(["compare", "fast", "slow", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "replays of recorded agents" in out and "TTFT by the context a call sent" in out and "busted" not in out
    doc = json.loads((tmp_path / "c.json").read_text())
    rows = {r["label"]: r for r in doc["replays"]["blocks"][0]["rows"]}
    assert rows["TTFT p50"]["ratio"] < 0.5 and max(len(line) for line in out.splitlines()) <= 80
    # each side's count of calls, and TTFT's interval where the calls allow one: a median from 10 calls a side, a
    # p90 from 50 (these measured about 20)
    calls = rows["Calls measured"]
    assert calls["a"] >= 10 and calls["b"] >= 10 and calls["ratio"] is None, calls
    iv = rows["TTFT p50"]["interval"]
    assert iv is not None and iv["low"] <= rows["TTFT p50"]["ratio"] <= iv["high"] < 1, iv
    assert rows["TTFT p90"]["interval"] is None and re.search(r"TTFT p90 .*×\*", out), out
    assert "* no 95% interval: a side measured fewer calls than one needs (TTFT p50 10, p90 50)" in " ".join(out.split())
    bins = doc["replays"]["blocks"][0]["ttft_by_context"]
    assert sum(b["a_calls"] for b in bins) == calls["a"] and sum(b["b_calls"] for b in bins) == calls["b"], bins
    # pasted as Markdown: each table under its title, the note a paragraph, its "*" no bullet
    assert main(["compare", "fast", "slow", "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "\n2 lanes:\n\n| Per level |" in md and "\n\\* no 95% interval" in md, md
    assert "\nTTFT by the context a call sent (tokens):\n\n| Context |" in md, md
    # each side's calls a column of its own ("Calls A/B" over "12/14" read as a ratio)
    assert "| Context | A TTFT p50 | B TTFT p50 | A/B | A calls | B calls |" in md, md
    # the same trajectories replayed otherwise are other work, and said so
    assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "1",
                 "--trace", str(AGENTS), "--trace-scale", "8", "--max-think", "1s", "--concurrency", "2,1",
                 "--requests", "8", "--label", "scaled"]) == 0
    capsys.readouterr()
    assert main(["compare", "fast", "scaled"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    # a lane count one side ran alone is named, as compare names a level of a plain sweep (the JSON alone had it)
    assert "not compared: only B has 1 lane (no level of the other run to set beside it)" in said, said
    assert "--agents, --tokens" not in said  # not asked for: nothing said of them
    assert main(["compare", "fast", "scaled", "--agents", "8", "--tokens", "100"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "--agents, --tokens: the effective-serving line is for runs of fixed-length requests; the levels of " \
        "replays are their agents already" in said, said
    assert "the two replays differ in lengths divided by: 16 vs 8" in said, said
    assert "the two replays differ in pauses capped at (s): 0 vs 1" in said, said
    from tokenbench.compare.replays import lanes_title
    assert (lanes_title(1), lanes_title(4), lanes_title(0)) == ("1 lane", "4 lanes", "at the recorded times (open loop)")
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 2}) + "\n")
    assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--concurrency", "2",
                 "--requests", "4", "--input-len", "8", "--output-len", "4", "--label", "plain"]) == 0
    capsys.readouterr()
    assert main(["compare", "fast", "plain"]) == 2
    assert "compare replays with replays" in capsys.readouterr().err


def test_replays_of_no_lane_count_in_common_are_refused_for_what_each_ran(
        emitter: BackgroundEmitter, capsys: pytest.CaptureFixture[str]) -> None:
    """A replay at the recorded times beside one in 2 lanes was refused with "the first ran 0", read as a run
    that measured nothing: an open loop has no lanes, and the refusal says so."""
    for label, lanes in (("open", ["--trace-speed", "100"]), ("lanes", ["--concurrency", "2"])):
        assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "1",
                     "--trace", str(EXAMPLES / "session-log-lengths.jsonl"), "--max-think", "0s", *lanes,
                     "--requests", "6", "--label", label]) == 0
    capsys.readouterr()
    assert main(["compare", "open", "lanes"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("open and lanes share no lane count: the first replayed at the recorded times (an open "
                        "loop: no lanes); the second ran 2 lanes"), err


def test_the_report_reads_a_replay_as_one(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    assert main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "1",
                 "--trace", str(AGENTS), "--trace-scale", "16", "--max-think", "0s", "--concurrency", "2",
                 "--requests", "12", "--label", "agents"]) == 0
    assert main(["report", "agents", "--md", str(tmp_path / "B.md")]) == 0
    text = (tmp_path / "B.md").read_text()
    assert "### Recorded agents, replayed" in text and "trees finished" in text and "TTFT by the context" in text
    assert "### Agent sessions" not in text and "workload: replay of" in text
    # its calls are no turns of a session: no line of turn TTFT against context (it zig-zagged along the axis)
    from tokenbench.reader import load_result
    from tokenbench.report import series
    from tokenbench.store import Store

    store = Store()
    assert not [p for p in series.build([load_result(store, store.resolve("agents").id)]) if
                p.id.startswith("session_ttft")]
    # the two bin tables side by side: no terminal bar inside a cell, where Markdown reads a bar as a cell's edge
    head = next(line for line in text.splitlines() if line.startswith("| Context |"))
    assert "\\|" not in text and head.endswith("| Prefilled | Calls (prefilled) | TTFT p50 (prefilled) |"), head


def test_replay_compare_writes_milliseconds_as_every_table_does() -> None:
    """One row read "17 ms" beside "30.2 ms": the replay comparison now writes times as the other tables."""
    from tokenbench.compare.replays import _figure

    assert [_figure(v, "ms") for v in (17.0, 30.2, 250.4, 12_500.0)] == ["17.0 ms", "30.2 ms", "250 ms", "12.5 s"]


def test_a_call_recorded_with_no_output_is_sent_for_one_token_and_said(emitter: BackgroundEmitter, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A call recorded with 0 output tokens (cut off, or failed, where it was recorded) cannot be asked for 0: it
    was sent for 1 with no word of it. It still is, and the run says so once, counted."""
    path = weka(tmp_path, [[call(0, 8, 3, [1, 2]), call(1, 12, 0, [1, 2, 3]), call(2, 16, 0, [1, 2, 3, 4])]])
    code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--trace", str(path),
                 "--max-think", "0s", "--concurrency", "1", "--db", str(tmp_path / "r.db"),
                 "--json", str(tmp_path / "r.json")])
    said = " ".join(capsys.readouterr().err.split())
    assert code == 0 and said.count("2 recorded calls answered nothing (0 tokens: cut off or failed where "
                                    "recorded): each is sent for 1 token") == 1, said
    recs = Store(tmp_path / "r.db").requests(json.loads((tmp_path / "r.json").read_text())["run_id"])
    assert [r.output_tokens for r in measured(recs)] == [3, 1, 1]
