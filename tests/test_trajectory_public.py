"""The trajectory loaders and the replay held to real public recordings (``examples/trajectories/public``, whose
README names each file's source and licence): what each file says, counted here from its raw JSON, against what
tokenbench reads of it; then each replayed against the emitter, every recorded call sent."""

from __future__ import annotations

import asyncio

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tokenbench.emitter import BackgroundEmitter
from tokenbench.trajectories.load import detect_format, load_trajectories
from tokenbench.trajectories.model import Trajectory

from test_replay import measured, replay

PUBLIC = Path(__file__).resolve().parents[1] / "examples" / "trajectories" / "public"
WEKA = PUBLIC / "kv-cache-tester"
MLCOMMONS = PUBLIC / "mlcommons-edge-flask-5014.jsonl"
TRACELAB = PUBLIC / "tracelab-round_trace.jsonl"


def weka_calls(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every model call of a Weka trace, its subagents' included, as the file lists them."""
    out = []
    for r in requests:
        out += weka_calls(r["requests"]) if r.get("type") == "subagent" else [r]
    return out


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_public_files_are_told_apart_by_their_content() -> None:
    assert [detect_format(p) for p in (WEKA / "trace_0277.json", MLCOMMONS, TRACELAB)] == \
        ["weka", "mlcommons", "tracelab"]


def test_real_weka_traces_load_as_recorded() -> None:
    raws = {p.stem: json.loads(p.read_text()) for p in sorted(WEKA.glob("*.json"))}
    got = load_trajectories(WEKA)
    calls = [c for raw in raws.values() for c in weka_calls(raw["requests"])]
    assert got.figures.trajectories == len(raws) == 2
    assert got.figures.calls == len(calls) == 85
    assert got.figures.subagents == sum(1 for raw in raws.values() for r in raw["requests"]
                                        if r.get("type") == "subagent") == 6
    assert got.figures.input_tokens == sum(c["in"] for c in calls)
    assert got.figures.output_tokens == sum(c["out"] for c in calls)
    # each call's blocks: its hash ids, a block of block_size tokens each, covering floor(in / block_size)
    for tree in got.trajectories:
        size = raws[tree.id]["block_size"]
        for _, t in tree.walk():
            for c in t.calls:
                assert c.blocks is not None and c.input_tokens is not None
                assert len(c.blocks.hash_ids) in (c.input_tokens // size, math.ceil(c.input_tokens / size))
    # a completed subagent's t is when it returned: it started duration_ms before, and ended at t
    for tree in got.trajectories:
        entries = {e["agent_id"]: e for e in raws[tree.id]["requests"] if e.get("type") == "subagent"}
        assert len(tree.subagents) == len(entries)
        for sub in tree.subagents:
            e = entries[sub.trajectory.id.split("/")[-1]]
            assert len(sub.trajectory.calls) == len(e["requests"])
            if e["status"] == "completed":
                assert sub.end_s == pytest.approx(e["t"])
                assert sub.start_s == pytest.approx(e["t"] - e["duration_ms"] / 1000)


def test_a_real_mlcommons_conversation_loads_as_recorded() -> None:
    rows = lines(MLCOMMONS)
    roles = Counter(r["role"] for r in rows)
    (tree,) = load_trajectories(MLCOMMONS).trajectories
    # one call per assistant row: its request is every row before it, its answer the row itself
    assert len(tree.calls) == roles["assistant"] == 27
    assistants = [i for i, r in enumerate(rows) if r["role"] == "assistant"]
    for call, i in zip(tree.calls, assistants):
        assert call.answer is not None
        assert call.answer.reasoning_content == rows[i].get("reasoning_content")
        assert [c.name for c in call.answer.tool_calls] == [c["function"]["name"] for c in rows[i].get("tool_calls", ())]
        assert call.pause_s == rows[i - 1].get("delay_seconds", 0.0)
    assert tree.calls[0].tools is not None and list(tree.calls[0].tools) == rows[0]["tools"]
    # the system prompt, then each row's messages (a tool row carries one per result)
    last = tree.calls[-1].messages
    assert last[0].role == "system" and last[1].role == "user" and last[-1].role == "tool"


def test_real_tracelab_rounds_load_as_recorded() -> None:
    rows = lines(TRACELAB)
    got = load_trajectories(TRACELAB)
    sessions = Counter(r["session_id"] for r in rows)
    assert got.figures.trajectories == len(sessions) == 2
    assert sorted(len(t.calls) for t in got.trajectories) == sorted(sessions.values())
    assert got.figures.input_tokens == sum(r["input_tokens_total"] for r in rows)
    assert got.figures.output_tokens == sum(r["output_tokens"] for r in rows)
    by_round = {r["round_id"]: r for r in rows}
    assert {c.input_tokens for t in got.trajectories for c in t.calls} == \
        {r["input_tokens_total"] for r in by_round.values()}


def sent(tree: Trajectory) -> int:
    return sum(len(t.calls) for _, t in tree.walk())


@pytest.mark.parametrize("path, api, scale", [(WEKA, "completions", 64.0), (TRACELAB, "completions", 64.0),
                                              (MLCOMMONS, "chat", None)], ids=["weka", "tracelab", "mlcommons"])
def test_each_real_recording_is_replayed_whole(emitter: BackgroundEmitter, tmp_path: Path, path: Path, api: str,
                                               scale: float | None) -> None:
    trees = load_trajectories(path).trajectories
    kw: dict[str, Any] = {"scale": scale} if scale else {}
    res, recs = replay(emitter.url, path, tmp_path, api=api, max_think_s=0.0, concurrency=[1], **kw)
    done = measured(recs)
    assert res.status == "complete" and all(r.ok for r in done)
    # every recorded call, subagents' included, was sent and answered
    assert len(done) == sum(sent(t) for t in trees)
    if scale:
        # each call's prompt as recorded, divided by the scale (each block and the tail rounded up on their own)
        recorded = [c.input_tokens / scale for t in trees for _, s in t.walk() for c in s.calls if c.input_tokens]
        for r in done:
            assert r.expected_input_tokens is not None
            assert any(0 <= r.expected_input_tokens - n < 2 for n in recorded), r.expected_input_tokens


def test_a_reasoning_answers_fixed_length_counts_its_reasoning(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """MLCommons' assistant rows are mostly reasoning and a tool call with no text: the length a replay fixes for
    such a call counts the reasoning a reasoning model generates, not the tool call alone."""
    (tree,) = load_trajectories(MLCOMMONS).trajectories
    replay(emitter.url, MLCOMMONS, tmp_path, api="chat", max_think_s=0.0, concurrency=[1])
    bodies = [b for b in emitter.emitter.requests_seen if b.get("messages")]
    by_history = {len(b["messages"]): b["max_tokens"] for b in bodies}
    for call in tree.calls:
        n = by_history.get(len(call.messages))
        if n is None or call.answer is None or not call.answer.reasoning_content:
            continue
        # a token is at most a word's worth of text: the fixed length is at least the reasoning's words
        assert n >= len(call.answer.reasoning_content.split()), call.where


def test_a_full_text_set_has_an_ideal_share_of_its_characters() -> None:
    """Each call of a full-text conversation re-sends the one before and its answer: what a prefix cache could
    serve of it, counted here from the raw rows (each call's tools and its history but the rows since the call
    before), is the share tokenbench states, said to be of characters."""
    rows = lines(MLCOMMONS)
    got = load_trajectories(MLCOMMONS).figures
    assert got.ideal_basis == "characters"

    def size(row: dict[str, Any]) -> int:
        # the text a message puts in the prompt (chat.Message.texts): reasoning is not re-sent as prompt text
        texts = [row.get("system") or "", row.get("content") or ""]
        texts += [c["function"]["name"] + c["function"]["arguments"] for c in row.get("tool_calls", ())]
        texts += [r.get("content") or "" for r in row.get("tool_results", ())]
        return sum(len(t) for t in texts if isinstance(t, str))

    tools = len(json.dumps(rows[0]["tools"]))
    sent = served = 0
    history = 0  # characters of the rows before the call
    before = None  # characters the call before sent, with its answer
    for i, row in enumerate(rows):
        if row["role"] == "assistant":
            sent += tools + history
            served += (tools + before) if before is not None else 0
            before = history + size(row)
        history += size(row)
    assert got.ideal_cached_share == pytest.approx(served / sent, rel=0.001)
    assert 0.9 < got.ideal_cached_share < 1.0


def test_the_replay_of_a_full_text_set_says_its_ideal_is_of_characters(
        emitter: BackgroundEmitter, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenbench.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "r.json"
    assert main(["sweep", "--url", emitter.url, "--trace", str(MLCOMMONS), "--api", "chat", "--max-think", "0s",
                 "--guard", "off", "--no-metrics", "--warmup", "0", "--db", str(tmp_path / "r.db"),
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    flat = " ".join(text.split())
    share = load_trajectories(MLCOMMONS).figures.ideal_cached_share
    assert share is not None and f"the trace's ideal {share:.0%} (of characters)" in flat, text
    assert max(len(line) for line in text.splitlines()) <= 80
    replay_doc = json.loads(out.read_text())["levels"][0]["replay"]
    assert replay_doc["ideal_basis"] == "characters"


def test_an_open_loop_replay_cuts_the_idle_time_between_recorded_sessions(emitter: BackgroundEmitter,
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """TraceLab's example records its two sessions 72 days apart: at the recorded times the second would start 34
    hours into a replay at 50x. The time no session was running is cut to the pause cap, as AgentX caps idle gaps:
    the second starts when the first's recorded calls end, plus the cap; sessions that overlap keep their times.
    The recorded times count from the level's first send, after its preparation (which took 0.16 s on a busy CI
    machine, and the first session started that late against the second)."""
    from tokenbench.replay import ReplayPlan, ReplayTexts

    prepare = ReplayTexts.start

    async def slow(self: ReplayTexts) -> None:
        await asyncio.sleep(0.3)  # a busy machine's preparation
        await prepare(self)

    monkeypatch.setattr(ReplayTexts, "start", slow)

    trees = load_trajectories(TRACELAB)
    first, second = sorted(trees.trajectories, key=lambda t: t.epoch_s or 0.0)
    assert first.epoch_s is not None and second.epoch_s is not None
    assert second.epoch_s - first.epoch_s > 70 * 86400
    # the first session's recorded end, counted here from its rows: its last round's last timing event
    rows = [r for r in lines(TRACELAB) if r["session_id"] == first.id]
    stamps = [e["timestamp"] for r in rows for e in r["timing_events"]]
    from datetime import datetime

    span = (max(map(datetime.fromisoformat, stamps)) - min(map(datetime.fromisoformat, stamps))).total_seconds()
    plan = ReplayPlan(trees, max_think_s=10.0, speed=100.0)
    starts = dict(zip((t.id for t in trees.trajectories), plan.starts()))
    assert starts[first.id] == 0.0 and starts[second.id] == pytest.approx(span + 10.0, abs=1.0)
    assert ReplayPlan(trees, max_think_s=None).starts()[trees.trajectories.index(second)] == \
        pytest.approx(second.epoch_s - first.epoch_s)

    res, recs = replay(emitter.url, TRACELAB, tmp_path, max_think_s=10.0, speed=100.0, scale=64.0,
                       concurrency=[1])
    firsts = sorted(min(r.sent_ns for r in measured(recs) if r.session == s) for s in {r.session for r in recs})
    assert res.status == "complete" and len(firsts) == 2
    assert abs((firsts[1] - firsts[0]) / 1e9 - (span + 10.0) / 100.0) < 0.15
    # its row is named for its loop, not "as recorded": it ran at 100x the recorded times
    from tokenbench.cells import level_label

    assert res.outcomes[0].serving is not None and level_label(res.outcomes[0].serving) == "open loop"


def test_cost_prices_a_replay_per_finished_session(emitter: BackgroundEmitter, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A replay of the real Weka traces, priced: each finished tree (a session with its subagents) costs the hours
    the level held the box over the trees it finished."""
    from tokenbench.cli import main

    db, run = tmp_path / "r.db", tmp_path / "run.json"
    assert main(["sweep", "--url", emitter.url, "--trace", str(WEKA), "--trace-scale", "64", "--concurrency", "2",
                 "--max-think", "0s", "--guard", "off", "--no-metrics", "--quiet", "--db", str(db),
                 "--json", str(run)]) == 0
    lv = json.loads(run.read_text())["levels"][0]
    capsys.readouterr()
    assert main(["cost", "last", "--price-per-hour", "3.6", "--db", str(db), "--json", "-"]) == 0
    (s,) = json.loads(capsys.readouterr().out)["sessions"]
    assert s["sessions"] == lv["replay"]["trees"] == 2 and s["sessions_finished"] == lv["replay"]["trees_finished"]
    assert s["box_hours"] == pytest.approx(lv["duration_s"] / 3600, rel=1e-6)
    assert s["cost_per_session"] == pytest.approx(3.6 * s["box_hours"] / s["sessions_finished"], rel=1e-6)


def test_a_set_with_subagents_names_no_llama_server_slot(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """On llama-server a tree keeps a slot of its own (id_slot) where only its calls are in flight; a set with
    subagents sends more calls at once than there are slots, and a call named to a busy slot wedged llama.cpp's
    server: those calls name none, and the server picks the slot that holds most of each prompt."""
    emitter.configure(slot_ctx=65536)  # looks like llama-server
    replay(emitter.url, WEKA, tmp_path, max_think_s=0.0, scale=64.0, concurrency=[1], requests=4)
    # the replay's calls (the endpoint's check request before them keeps no cache)
    with_subagents = [b for b in emitter.emitter.requests_seen if b.get("cache_prompt")]
    assert len(with_subagents) >= 4 and all("id_slot" not in b for b in with_subagents)
    emitter.emitter.requests_seen.clear()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "t.json").write_text(json.dumps({"id": "t", "block_size": 4, "requests": [
        {"t": float(k), "type": "n", "in": 8 * (k + 1), "out": 2, "hash_ids": list(range(2 * (k + 1))),
         "think_time": 0.0, "api_time": 0.1} for k in range(3)]}))
    (tmp_path / "p").mkdir()
    replay(emitter.url, plain, tmp_path / "p", max_think_s=0.0, concurrency=[1])
    calls = [b for b in emitter.emitter.requests_seen if b.get("cache_prompt")]
    assert len(calls) == 3 and all(b.get("id_slot") == 0 for b in calls)


def test_a_folder_without_start_times_is_named_as_a_folder(capsys: pytest.CaptureFixture[str]) -> None:
    from tokenbench.cli import main

    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--trace", str(WEKA), "--trace-speed", "5",
                 "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "kv-cache-tester (folder of weka traces) records none: give --concurrency" in err and \
        len(err.splitlines()) == 1, err
