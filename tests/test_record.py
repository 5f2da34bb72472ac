"""``tokenbench record``: a recording proxy in front of a server, the session log it writes, and what a client
sees through it when the upstream misbehaves.

A scripted agent (a main session that hands a task to a subagent through a tool call, then goes on) runs through
the proxy against the deterministic emitter, and directly against another: the bytes it got must be the same, and
the log must load with ``load_trajectories`` and say what the agent did (sessions, calls, pauses it slept, the
server's counts, the tool calls). Then the faults, the secrets, the lengths-only log, the command line, and one real
llama-server on the embedded tiny model.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web

from servers import Serving
from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter, EmitterConfig
from tokenbench.record import BackgroundRecording, RecordConfig
from tokenbench.record.run import Recording
from tokenbench.record.sessions import Sessions, Turn
from tokenbench.record.tokens import HashIds
from tokenbench.trajectories.load import load_trajectories
from tokenbench.trajectories.messages import message

KEY = b"k" * 32  # the hash ids' key, fixed so a test can recompute them

TASK_TOOL = {"type": "function", "function": {"name": "task", "description": "hand a task to a subagent",
                                              "parameters": {"type": "object", "properties": {"task": {"type": "string"}}}}}
READ_TOOL = {"type": "function", "function": {"name": "read", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "token": {"type": "string"}}}}}

# ---- helpers ----------------------------------------------------------------------------------------------------------


def recording(upstream: str, out: Path, **kw: Any) -> BackgroundRecording:
    root = upstream[:-3] if upstream.endswith("/v1") else upstream
    return BackgroundRecording(RecordConfig(root, out, port=0, key=KEY, **kw))


def answer_of(raw: bytes) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An SSE chat answer as the assistant message an agent appends, and its usage (None: none came)."""
    content, calls, usage = "", {}, None
    for line in raw.decode().splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        usage = ev.get("usage") or usage
        for ch in ev.get("choices") or []:
            d = ch.get("delta") or {}
            content += d.get("content") or ""
            for piece in d.get("tool_calls") or []:
                c = calls.setdefault(piece["index"], {"id": "", "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                c["id"] = piece.get("id") or c["id"]
                c["function"]["name"] = piece.get("function", {}).get("name") or c["function"]["name"]
                c["function"]["arguments"] += piece.get("function", {}).get("arguments") or ""
    msg: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    else:
        msg["content"] = content
    return msg, usage


class Agent:
    """A client of one base URL: each ``ask`` sends a streamed chat request and keeps the bytes it got."""

    def __init__(self, url: str, headers: dict[str, str] | None = None) -> None:
        self.url, self.headers = url, headers or {}
        self.got: list[bytes] = []
        self.usages: list[dict[str, Any] | None] = []

    async def ask(self, s: aiohttp.ClientSession, messages: list[dict[str, Any]], tools: list[Any] | None = None,
                  usage: bool = True, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "emitter", "messages": messages, "stream": True, "max_tokens": 5, **extra}
        if tools:
            body["tools"] = tools
        if usage:
            body["stream_options"] = {"include_usage": True}
        async with s.post(self.url + "/chat/completions", json=body, headers=self.headers) as r:
            assert r.status == 200, await r.text()
            raw = await r.read()
        self.got.append(raw)
        msg, said = answer_of(raw)
        self.usages.append(said)
        return msg


#: The scripted agent's pauses, seconds: the subagent between its calls, the main session after the subagent
#: returned, and between its last two calls.
SUB_PAUSE, JOIN_PAUSE, MAIN_PAUSE = 0.15, 0.25, 0.2


async def scripted_agent(url: str) -> Agent:
    """A main session that hands a task to a subagent (its tool call's argument is the subagent's prompt), waits
    for it, then answers and takes one more turn; the subagent reads a file and reports."""
    agent = Agent(url)
    async with aiohttp.ClientSession() as s:
        main_msgs = [{"role": "system", "content": "You are a coding agent."},
                     {"role": "user", "content": "Find where the configuration is read."}]
        a1 = await agent.ask(s, main_msgs, [TASK_TOOL, READ_TOOL])
        task = json.loads(a1["tool_calls"][0]["function"]["arguments"])["task"]
        sub = [{"role": "system", "content": "You explore a codebase."}, {"role": "user", "content": task}]
        b1 = await agent.ask(s, sub, [READ_TOOL])
        await asyncio.sleep(SUB_PAUSE)
        sub += [b1, {"role": "tool", "tool_call_id": b1["tool_calls"][0]["id"], "content": "settings.py: load()"}]
        b2 = await agent.ask(s, sub, usage=False)
        await asyncio.sleep(JOIN_PAUSE)
        main_msgs += [a1, {"role": "tool", "tool_call_id": a1["tool_calls"][0]["id"], "content": b2["content"]}]
        a2 = await agent.ask(s, main_msgs)
        await asyncio.sleep(MAIN_PAUSE)
        main_msgs += [a2, {"role": "user", "content": "Thanks, now summarise it."}]
        await agent.ask(s, main_msgs)
    return agent


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()[1:]]


def words(msgs: list[dict[str, Any]]) -> int:
    """The emitter's prompt count: whitespace-separated words of the contents."""
    return sum(len(str(m.get("content", "")).split()) for m in msgs)


class App:
    """An aiohttp app (a hostile upstream) on a thread and loop of its own."""

    def __init__(self, app: web.Application, port: int = 0) -> None:
        self.app, self.port = app, port
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None

    async def _start(self) -> None:
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True, shutdown_timeout=0.2)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port)
        await site.start()
        self.port = cast(asyncio.base_events.Server, site._server).sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> App:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.runner is not None
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def sse(*events: dict[str, Any], named: bool = False) -> bytes:
    return b"".join((f"event: {e['type']}\n" if named else "").encode() + b"data: " + json.dumps(e).encode()
                    + b"\n\n" for e in events)


async def post(url: str, body: Any, headers: dict[str, str] | None = None,
               timeout: float | None = None) -> tuple[int | str, bytes]:
    """(status, body) of one POST, or (the exception's name, b"") where the answer broke."""
    async with aiohttp.ClientSession() as s:
        try:
            async with s.post(url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                return r.status, await r.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return type(e).__name__, b""


async def get(url: str) -> int:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        await r.read()
        return r.status


CHAT = {"messages": [{"role": "user", "content": "hello there"}], "stream": True, "max_tokens": 4}

# ---- the scripted agent against the emitter ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Agent, Agent, Any]]:
    out = tmp_path_factory.mktemp("record") / "agent.jsonl"
    with BackgroundEmitter(EmitterConfig(tool_calls=True)) as direct_em:
        direct = asyncio.run(scripted_agent(direct_em.url))
    with BackgroundEmitter(EmitterConfig(tool_calls=True)) as em:
        with recording(em.url, out) as rec:
            proxied = asyncio.run(scripted_agent(rec.url))
        yield out, direct, proxied, rec.summary


def test_the_client_gets_the_bytes_the_server_sent(agent_run: Any) -> None:
    _, direct, proxied, _ = agent_run
    assert len(proxied.got) == 5
    assert proxied.got == direct.got


def test_the_log_loads_with_the_sessions_the_agent_ran(agent_run: Any) -> None:
    out, _, _, summary = agent_run
    assert (summary.recorded, summary.sessions, summary.subagents) == (5, 2, 1)
    assert not summary.failed and not summary.skipped
    ts = load_trajectories(out)
    assert ts.format == "session-log"
    [main_t] = ts.trajectories
    [sub] = main_t.subagents
    assert len(main_t.calls) == 3 and len(sub.trajectory.calls) == 2
    # the subagent started after the main session's first answer, and the main session's next call waited for it
    assert (sub.after_call, sub.joined_by) == (0, 1)
    assert [ln["session"] for ln in lines(out)] == ["s1", "s2", "s2", "s1", "s1"]
    assert [ln["parent"] for ln in lines(out)] == [None, "s1", "s1", None, None]


def test_the_log_holds_the_pauses_the_agent_slept(agent_run: Any) -> None:
    out, *_ = agent_run
    [main_t] = load_trajectories(out).trajectories
    sub = main_t.subagents[0].trajectory
    for call, slept, since in ((sub.calls[1], SUB_PAUSE, "answer"), (main_t.calls[1], JOIN_PAUSE, "subagents"),
                               (main_t.calls[2], MAIN_PAUSE, "answer")):
        assert call.pause_from == since
        # the log keeps each time to the microsecond: a pause of 0.2 s can read a microsecond short of it
        assert slept - 1e-6 <= call.pause_s < slept + 0.1, (call.pause_s, slept)
    recorded = lines(out)
    assert recorded[0]["pause"] is None and recorded[1]["pause"] is None  # each session's first
    for ln in recorded:
        assert ln["sent"] <= ln["first_byte"] <= ln["end"]
    assert [ln["end"] for ln in recorded] == sorted(ln["end"] for ln in recorded)


def test_the_log_holds_the_servers_counts_and_the_tool_calls(agent_run: Any) -> None:
    out, _, proxied, _ = agent_run
    recorded = lines(out)
    for ln, said in zip(recorded, proxied.usages):
        if said is None:  # the client asked no usage: none asked of the server for it, none made up
            assert ln["usage"] == {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None}
        else:
            assert ln["usage"]["prompt_tokens"] == said["prompt_tokens"] == words(ln["request"]["messages"])
            assert ln["usage"]["completion_tokens"] == said["completion_tokens"]
    assert proxied.usages[2] is None
    first = recorded[0]
    assert first["request"]["tools"] == [TASK_TOOL, READ_TOOL]
    assert first["response"]["tool_calls"] == [{"id": "call_1", "type": "function", "function": {
        "name": "task", "arguments": '{"task": "step 1 of the work to do"}'}}]
    assert recorded[1]["request"]["messages"][1]["content"] == "step 1 of the work to do"
    [main_t] = load_trajectories(out).trajectories
    tool = main_t.calls[1].messages[3]
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", "call_1", recorded[2]["response"]["content"])
    assert main_t.calls[1].messages[2] == main_t.calls[0].answer  # the answer as the agent re-sent it
    assert "model" not in first["request"] and "stream" not in first["request"]


# ---- sessions: explicit ids, scopes, concurrency ---------------------------------------------------------------------

def test_explicit_session_headers_group_the_session_and_its_parent_unwritten(tmp_path: Path,
                                                                             emitter: BackgroundEmitter) -> None:
    out = tmp_path / "ids.jsonl"

    async def run(url: str) -> None:
        main_a = Agent(url, {"X-Session-ID": "alice@corp.example-laptop"})
        sub_a = Agent(url, {"X-Session-ID": "alice@corp.example-laptop/lint",
                            "X-Parent-Session-ID": "alice@corp.example-laptop"})
        async with aiohttp.ClientSession() as s:
            await main_a.ask(s, [{"role": "user", "content": "start"}])
            await sub_a.ask(s, [{"role": "user", "content": "lint it"}])
            # another conversation under the same header is the same session: the client said so
            await main_a.ask(s, [{"role": "user", "content": "something else entirely"}])

    with recording(emitter.url, out) as rec:
        asyncio.run(run(rec.url))
    # the headers group and name the parent; what they said (a person, a machine) is not written
    assert [(ln["session"], ln["parent"]) for ln in lines(out)] == [("s1", None), ("s2", "s1"), ("s1", None)]
    assert "alice" not in out.read_text() and "corp.example" not in out.read_text()
    assert len(load_trajectories(out).trajectories) == 1


def test_a_body_id_keeps_two_users_identical_conversations_apart(tmp_path: Path,
                                                                  emitter: BackgroundEmitter) -> None:
    out = tmp_path / "users.jsonl"

    async def run(url: str) -> None:
        async with aiohttp.ClientSession() as s:
            agents = {u: Agent(url) for u in ("alice@example.com", "bob@example.com")}
            msgs = {u: [{"role": "user", "content": "fix the tests"}] for u in agents}
            for _ in range(2):
                for u, a in agents.items():
                    answer = await a.ask(s, msgs[u], user=u)
                    msgs[u] += [answer, {"role": "user", "content": "go on"}]

    with recording(emitter.url, out) as rec:
        asyncio.run(run(rec.url))
    got = [ln["session"] for ln in lines(out)]
    assert len(set(got)) == 2 and got[0::2] == [got[0]] * 2 and got[1::2] == [got[1]] * 2
    assert "alice" not in out.read_text() and "example.com" not in out.read_text()  # the id groups, is not written


def test_concurrent_sessions_are_all_recorded_in_order(tmp_path: Path) -> None:
    """Eight agents at once, three turns each, answers interleaved: every request is in the log, each session's
    in the order sent, and the lines in the order answers ended (the loader checks that)."""
    out = tmp_path / "many.jsonl"

    async def one(url: str, i: int, s: aiohttp.ClientSession) -> None:
        a = Agent(url)
        msgs: list[dict[str, Any]] = [{"role": "user", "content": f"agent {i} task"}]
        for turn in range(3):
            answer = await a.ask(s, msgs, max_tokens=3 + (i + turn) % 4)
            msgs += [answer, {"role": "user", "content": f"turn {turn} done"}]
            await asyncio.sleep(0.01 * ((i * 7 + turn) % 5))

    async def run(url: str) -> None:
        async with aiohttp.ClientSession() as s:
            await asyncio.gather(*(one(url, i, s) for i in range(8)))

    with BackgroundEmitter(EmitterConfig(itl_s=0.004)) as em, recording(em.url, out) as rec:
        asyncio.run(run(rec.url))
    assert (rec.summary.recorded, rec.summary.sessions) == (24, 8)
    ts = load_trajectories(out)
    assert len(ts.trajectories) == 8
    for t in ts.trajectories:
        firsts = [c.messages[0].content for c in t.calls]
        assert len(set(firsts)) == 1 and [len(c.messages) for c in t.calls] == [1, 3, 5]


def _msg(role: str, content: str | None, **kw: Any) -> Any:
    return message({"role": role, "content": content, **kw}, "m")


def test_grouping_follows_the_conversation_not_the_order() -> None:
    """The rules of ``sessions`` on their own: an answer re-sent reworded still continues its session (the
    messages before it are all there); a fork from an earlier request is a new session; a request sent before the
    answer it would continue had ended is a new session."""
    sys_m, u1 = _msg("system", "be brief"), _msg("user", "one")
    a1 = _msg("assistant", "  answer\n one ")
    s = Sessions()
    assert s.place(Turn(0.0, 1.0, (sys_m, u1), a1)).session == "s1"
    reworded = _msg("assistant", "answer\n one")  # white space at the ends is not a difference
    assert s.place(Turn(2.0, 3.0, (sys_m, u1, reworded, _msg("user", "two")), _msg("assistant", "a2"))).session == "s1"
    # the first request again plus something else: s1 has moved on, so this is a fork, a new session
    assert s.place(Turn(4.0, 5.0, (sys_m, u1, _msg("user", "other")), _msg("assistant", "x"))).session == "s2"
    # a continuation of s1's last request sent before that answer ended cannot have read it
    early = Turn(2.5, 6.0, (sys_m, u1, reworded, _msg("user", "two"), _msg("assistant", "a2"), _msg("user", "3")),
                 _msg("assistant", "y"))
    assert s.place(early).session == "s3"
    # the answer dropped, another message in its place: still the session whose whole last request it begins with
    later = Turn(7.0, 8.0, (sys_m, u1, _msg("user", "other"), _msg("user", "instead")), _msg("assistant", "z"))
    assert s.place(later).session == "s2"
    # the same messages again, after the answer: a second run of the task, not a turn of the first
    assert s.place(Turn(9.0, 9.5, later.messages, _msg("assistant", "z"))).session == "s4"


def test_a_subagent_needs_its_task_in_a_waiting_call() -> None:
    """Waiting on a tool while a new session starts is not enough to be its parent; the new session's prompt must
    hold the text the waiting call handed on."""
    call = {"id": "c1", "type": "function", "function": {"name": "task",
                                                          "arguments": '{"prompt": "audit the login handler"}'}}
    s = Sessions()
    s.place(Turn(0.0, 1.0, (_msg("user", "review the app"),), _msg("assistant", None, tool_calls=[call])))
    other = s.place(Turn(1.5, 2.0, (_msg("user", "unrelated work here, long enough"),), _msg("assistant", "ok")))
    sub = s.place(Turn(1.6, 2.5, (_msg("system", "you audit"), _msg("user", "Task: audit the login handler.")),
                       _msg("assistant", "done")))
    before = s.place(Turn(0.5, 3.0, (_msg("user", "audit the login handler"),), _msg("assistant", "x")))
    assert (other.parent, sub.parent, before.parent) == (None, "s1", None)


def test_a_subagent_whose_parent_went_on_without_waiting_still_has_it() -> None:
    """A subagent run in the background: its parent's next request was sent after the subagent started, and
    ended (so was written) before the subagent's first answer did. At the subagent's start the parent was
    waiting on the call that handed it its task; after the parent's next send, a new session is no child of
    that call."""
    call = {"id": "c1", "type": "function", "function": {"name": "task",
                                                          "arguments": '{"prompt": "write the release notes"}'}}
    first = (_msg("user", "ship it"),)
    s = Sessions()
    a1 = _msg("assistant", None, tool_calls=[call])
    s.place(Turn(0.0, 1.0, first, a1))
    nxt = s.place(Turn(1.5, 1.8, (*first, a1, _msg("tool", "started", tool_call_id="c1")), _msg("assistant", "ok")))
    sub = s.place(Turn(1.1, 2.0, (_msg("user", "write the release notes"),), _msg("assistant", "done")))
    late = s.place(Turn(1.6, 2.1, (_msg("user", "write the release notes"),), _msg("assistant", "again")))
    assert (nxt.session, sub.parent, late.parent) == ("s1", "s1", None)


# ---- Anthropic messages and OpenAI responses -----------------------------------------------------------------------


def anthropic_app(seen: list[Any]) -> web.Application:
    async def messages(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen.append(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse(
            {"type": "message_start", "message": {"id": "msg_1", "usage": {
                "input_tokens": 12, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 8,
                "output_tokens": 1}}},
            {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Look."}},
            {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Reading it."}},
            {"type": "content_block_start", "index": 2, "content_block": {
                "type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}},
            {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                                  "partial_json": '{"file_path": '}},
            {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta",
                                                                  "partial_json": '"/app/settings.py"}'}},
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 23}},
            {"type": "message_stop"}, named=True))
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    return app


def test_anthropic_messages_are_recorded_in_chat_shape(tmp_path: Path) -> None:
    out = tmp_path / "claude.jsonl"
    seen: list[Any] = []
    body = {"model": "claude", "max_tokens": 64, "stream": True, "metadata": {"user_id": "user_abc_session_1"},
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "Read", "description": "read a file", "input_schema": {
                "type": "object", "properties": {"file_path": {"type": "string"}}}}],
            "messages": [{"role": "user", "content": "Where is the config read?"}]}
    with App(anthropic_app(seen)) as up, recording(up.url, out) as rec:
        status, raw = asyncio.run(post(rec.root + "/v1/messages?beta=true", body))
        assert status == 200 and b"toolu_1" in raw
        body["messages"] += [
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look.", "signature": "sig"},
                                              {"type": "text", "text": "Reading it."},
                                              {"type": "tool_use", "id": "toolu_1", "name": "Read",
                                               "input": {"file_path": "/app/settings.py"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "load()"},
                                         {"type": "text", "text": "Go on."}]}]
        assert asyncio.run(post(rec.root + "/v1/messages", body))[0] == 200
    assert seen[0] == {**body, "messages": body["messages"][:1]}  # forwarded as sent
    first, second = lines(out)
    assert first["usage"] == {"prompt_tokens": 120, "completion_tokens": 23, "cached_tokens": 100}
    assert first["request"]["messages"] == [{"role": "system", "content": "You are Claude Code."},
                                            {"role": "user", "content": "Where is the config read?"}]
    assert first["request"]["tools"] == [{"type": "function", "function": {
        "name": "Read", "description": "read a file",
        "parameters": {"type": "object", "properties": {"file_path": {"type": "string"}}}}}]
    assert first["response"] == {"role": "assistant", "content": "Reading it.", "reasoning_content": "Look.",
                                 "tool_calls": [{"id": "toolu_1", "type": "function", "function": {
                                     "name": "Read", "arguments": '{"file_path": "/app/settings.py"}'}}]}
    assert second["session"] == first["session"] and second["pause"] is not None
    assert second["request"]["messages"][2:] == [
        first["response"], {"role": "tool", "content": "load()", "tool_call_id": "toolu_1"},
        {"role": "user", "content": "Go on."}]
    load_trajectories(out)


def responses_app() -> web.Application:
    n = [0]

    async def responses(request: web.Request) -> web.StreamResponse:
        await request.json()
        n[0] += 1
        done = {"id": f"resp_{n[0]}", "status": "completed", "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]},
            {"type": "function_call", "call_id": f"fc_{n[0]}", "name": "shell", "arguments": '{"cmd": ["ls"]}'}],
            "usage": {"input_tokens": 50 * n[0], "output_tokens": 9, "input_tokens_details": {"cached_tokens": 32}}}
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse({"type": "response.created", "response": {**done, "status": "in_progress",
                                                                       "output": []}},
                             {"type": "response.output_text.delta", "delta": "x"},
                             {"type": "response.completed", "response": done}, named=True))
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/responses", responses)
    return app


def test_responses_are_recorded_and_previous_response_id_continues_the_conversation(tmp_path: Path) -> None:
    out = tmp_path / "codex.jsonl"
    with App(responses_app()) as up, recording(up.url, out) as rec:
        url = rec.root + "/v1/responses"
        first = {"model": "gpt", "stream": True, "instructions": "You are Codex.",
                 "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]}],
                 "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}},
                           {"type": "web_search"}]}
        assert asyncio.run(post(url, first))[0] == 200
        nxt = {"model": "gpt", "stream": True, "previous_response_id": "resp_1",
               "input": [{"type": "function_call_output", "call_id": "fc_1", "output": "a.py"}]}
        assert asyncio.run(post(url, nxt))[0] == 200
    one, two = lines(out)
    assert one["request"]["messages"] == [{"role": "system", "content": "You are Codex."},
                                          {"role": "user", "content": "ls"}]
    assert one["request"]["tools"] == [{"type": "function", "function": {"name": "shell",
                                                                         "parameters": {"type": "object"}}}]
    assert one["response"] == {"role": "assistant", "content": None, "reasoning_content": "Think.", "tool_calls": [
        {"id": "fc_1", "type": "function", "function": {"name": "shell", "arguments": '{"cmd": ["ls"]}'}}]}
    assert one["usage"] == {"prompt_tokens": 50, "completion_tokens": 9, "cached_tokens": 32}
    assert two["session"] == one["session"]
    assert two["request"]["messages"] == [*one["request"]["messages"], one["response"],
                                          {"role": "tool", "content": "a.py", "tool_call_id": "fc_1"}]
    load_trajectories(out)


# ---- a hostile upstream ---------------------------------------------------------------------------------------------

def test_an_upstream_that_breaks_mid_stream_breaks_the_clients_stream_too(tmp_path: Path) -> None:
    out = tmp_path / "broken.jsonl"
    with BackgroundEmitter(EmitterConfig(fault="broken", itl_s=0.002)) as em, recording(em.url, out) as rec:
        direct = asyncio.run(post(em.url + "/chat/completions", CHAT))
        proxied = asyncio.run(post(rec.url + "/chat/completions", CHAT))
    assert direct == proxied == ("ClientPayloadError", b"")  # never an answer made to look whole
    assert rec.summary.failed == {"the upstream cut its answer": 1} and rec.summary.recorded == 0
    # a failed request is not logged: the log held its header alone, and a log of nothing is not kept
    assert rec.summary.removed and not out.exists()
    assert rec.summary.lines()[:2] == [f"nothing recorded, so {out} was not kept",
                                       "1 failed, not recorded: 1 the upstream cut its answer"]


def resetting_upstream(after: bytes) -> tuple[asyncio.AbstractEventLoop, threading.Thread, int]:
    """An upstream that answers a streamed head and ``after``, then resets the connection (RST, not FIN)."""
    loop = asyncio.new_event_loop()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head = await r.readuntil(b"\r\n\r\n")
        await r.readexactly(int(re.search(rb"(?i)content-length: *(\d+)", head).group(1)))  # type: ignore[union-attr]
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + after)
        await w.drain()
        await asyncio.sleep(0.05)
        sock = w.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        w.transport.abort()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread, server.sockets[0].getsockname()[1]


EVENT = b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'


@pytest.mark.parametrize("after", [b"", b"%x\r\n%s\r\n" % (len(EVENT), EVENT)], ids=["before-a-chunk", "after-a-chunk"])
def test_an_upstream_that_resets_mid_stream_cuts_the_clients_stream(tmp_path: Path, after: bytes) -> None:
    loop, thread, port = resetting_upstream(after)
    try:
        with recording(f"http://127.0.0.1:{port}", tmp_path / "reset.jsonl") as rec:
            got = asyncio.run(post(rec.url + "/chat/completions", CHAT))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert got[0] in ("ClientPayloadError", "ServerDisconnectedError", "ClientOSError"), got  # never made whole
    assert rec.summary.failed == {"the upstream cut its answer": 1} and rec.summary.recorded == 0


def test_an_error_status_is_forwarded_as_sent_and_counted(tmp_path: Path) -> None:
    with BackgroundEmitter(EmitterConfig(fault="http500")) as em, recording(em.url, tmp_path / "e.jsonl") as rec:
        direct = asyncio.run(post(em.url + "/chat/completions", CHAT))
        proxied = asyncio.run(post(rec.url + "/chat/completions", CHAT))
        models = asyncio.run(post(rec.url + "/models", None))
    assert direct == proxied and direct[0] == 500 and b"injected failure" in direct[1]
    assert models[0] == 405  # GET-only route: a POST forwarded is answered as the upstream answers it
    assert rec.summary.failed == {"the upstream answered HTTP 500": 1}
    assert (rec.summary.forwarded, rec.summary.others) == (2, 1)


def stall_app(closed: threading.Event) -> web.Application:
    async def stall(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}\n\n')
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:  # the proxy closed its connection: the upstream sees its client go
            closed.set()
            raise
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stall)
    return app


def test_a_client_that_gives_up_on_a_stall_closes_the_upstream_connection(tmp_path: Path) -> None:
    closed = threading.Event()
    with App(stall_app(closed)) as up, recording(up.url, tmp_path / "stall.jsonl") as rec:
        t0 = time.perf_counter()
        got = asyncio.run(post(rec.url + "/chat/completions", CHAT, timeout=0.5))
        assert got[0] == "TimeoutError" or got[0] == "ServerTimeoutError"
        assert time.perf_counter() - t0 < 2
        assert closed.wait(5), "the proxy kept the upstream connection of a client that left"
        time.sleep(0.1)
        assert not rec.proxy.flights and not rec.proxy.pool.open  # nothing held
    assert rec.summary.failed == {"the client gave up": 1}


def huge_app(size: int) -> web.Application:
    async def huge(request: web.Request) -> web.StreamResponse:
        await request.read()
        text = "x" * size
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
                             {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 2, "completion_tokens": 1}}) + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", huge)
    return app


def test_chunks_of_megabytes_pass_whole_and_are_recorded(tmp_path: Path) -> None:
    out = tmp_path / "huge.jsonl"
    size = 6 << 20
    with App(huge_app(size)) as up, recording(up.url, out) as rec:
        direct = asyncio.run(post(up.url + "/chat/completions", CHAT))
        proxied = asyncio.run(post(rec.url + "/chat/completions", CHAT))
    assert direct == proxied and len(proxied[1]) > size
    [line] = lines(out)
    assert len(line["response"]["content"]) == size


class Scripted:
    """How an upstream sends one stream: ``wire``, every byte of its answer (head, framing, body), written in
    ``pieces`` (seconds to wait, then the bytes), with ``text`` and ``prompt`` the answer's content and prompt count;
    ``resumed`` is when the upstream wrote again after its longest wait (perf_counter), ``auth`` what Authorization
    header reached it."""

    def __init__(self, tag: str, words: int, prompt: int, framing: str, cuts: list[int] | None = None,
                 stall_s: float = 0.0, stall_at: int = 0, one_event: bool = False) -> None:
        self.text = "".join(f"{tag}w{j:06d} " for j in range(words))  # unique to the stream, and in order
        first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": words}}
        if one_event:
            deltas = [{"choices": [{"index": 0, "delta": {"content": self.text}}]}]
        else:
            deltas = [{"choices": [{"index": 0, "delta": {"content": f"{tag}w{j:06d} "}}]} for j in range(words)]
        events = [sse(e) for e in (first, *deltas, last)] + [b"data: [DONE]\n\n"]
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        if framing == "chunked":  # a chunk per event, as servers send them
            self.wire = head + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(
                b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
        elif framing == "length":
            body = b"".join(events)
            self.wire = head + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        else:  # "close": no length, no chunks; the body ends where the upstream closes the connection
            self.wire = head + b"Connection: close\r\n\r\n" + b"".join(events)
        self.closes = framing == "close"
        self.prompt = prompt
        bounds = [0, *sorted(set(c for c in (cuts or []) if 0 < c < len(self.wire))), len(self.wire)]
        self.pieces = [(0.0, self.wire[a:b]) for a, b in zip(bounds, bounds[1:])]
        if stall_s:
            at = min(range(1, len(bounds) - 1), key=lambda k: abs(bounds[k] - stall_at))
            self.pieces[at] = (stall_s, self.pieces[at][1])
            self.before_stall = self.wire[:bounds[at]]
        self.resumed = 0.0
        self.auth = ""


TINY = (1, 1, 1, 2, 3, 5, 11, 64, 300, 1500, 4096)


def tiny_cuts(size: int, rng: random.Random, sizes: tuple[int, ...] = TINY) -> list[int]:
    """Cuts of ``size`` bytes into pieces of ``sizes``, by default 1 byte to 4 KiB, the small ones most often: a
    split inside the head, a chunk-size line, a CRLF, a JSON string."""
    cuts, at = [], 0
    while at < size:
        at += rng.choice(sizes)
        cuts.append(at)
    return cuts


def scripted_upstream(plans: dict[str, Scripted], busy: list[int] | None = None,
                      ) -> tuple[asyncio.AbstractEventLoop, threading.Thread, int]:
    """An upstream that answers each request with the plan its first message names (``plans``' key), piece by
    piece, each written and drained on its own; it serves requests on a connection as long as it is kept alive.
    ``busy``: [answers being written now, the most at once]."""
    loop = asyncio.new_event_loop()
    busy = busy if busy is not None else [0, 0]

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await r.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                size = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                body = json.loads(await r.readexactly(int(size.group(1)) if size else 0))
                plan = plans[body["messages"][0]["content"]]
                said = re.search(rb"(?i)\r\nauthorization: *([^\r]*)", head)
                plan.auth = said.group(1).decode() if said else ""
                busy[0] += 1
                busy[1] = max(busy)
                for wait, piece in plan.pieces:
                    if wait:
                        await asyncio.sleep(wait)
                        plan.resumed = time.perf_counter()
                    w.write(piece)
                    await w.drain()
                    if len(plan.pieces) > 2:
                        await asyncio.sleep(0.0005)  # each piece on the wire alone, not merged with the next
                busy[0] -= 1
                if plan.closes:
                    return
        finally:
            w.close()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread, server.sockets[0].getsockname()[1]


async def raw_stream(port: int, first: str, auth: str, wait: float = 10.0) -> list[tuple[float, bytes]]:
    """A streamed chat request whose first message is ``first``, on a connection of its own, and each read of the
    answer as it came (perf_counter, bytes), the head and framing included, to its end, the connection's close, or
    ``wait`` seconds (what came by then: a byte short of the end shows as a difference, not a timeout)."""
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": first}]}).encode()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: %s"
            b"\r\nContent-Length: %d\r\n\r\n%s" % (auth.encode(), len(body), body))
    reads: list[tuple[float, bytes]] = []
    got = b""
    try:
        async with asyncio.timeout(wait):
            while not _answered(got, 1) or b"Connection: close" in got[:500]:
                part = await r.read(1 << 16)
                if not part:
                    break
                reads.append((time.perf_counter(), part))
                got += part
    except TimeoutError:
        pass
    finally:
        w.close()
    return reads


def test_an_upstream_that_stalls_mid_stream_then_resumes_is_forwarded_whole_and_recorded(tmp_path: Path) -> None:
    """1.5 s of silence after a few events, then the rest: the client got the events before the stall while the
    upstream was silent (forwarded as they came, not held back), then every byte after, the whole answer byte for
    byte as the upstream wrote it; the proxy neither gave up on the stall nor cut the stream, and the log's line is
    whole: the whole text and usage, its first byte before the stall and its end after it."""
    stall = 1.5
    plan = Scripted("solo", 40, 321, "chunked", cuts=list(range(100, 4000, 100)), stall_s=stall, stall_at=700)
    out = tmp_path / "stall-resume.jsonl"
    loop, thread, port = scripted_upstream({"stalled then resumed": plan})
    try:
        with recording(f"http://127.0.0.1:{port}", out) as rec:
            proxy_port = int(rec.root.rsplit(":", 1)[1])
            reads = asyncio.run(raw_stream(proxy_port, "stalled then resumed", f"Bearer {SECRET}"))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert b"".join(p for _, p in reads) == plan.wire
    assert plan.resumed and len(plan.before_stall) > 600 and plan.auth == f"Bearer {SECRET}"
    assert b"".join(p for t, p in reads if t < plan.resumed) == plan.before_stall  # no more, no less
    assert rec.summary.recorded == 1 and not rec.summary.failed
    [line] = lines(out)
    assert line["response"] == {"role": "assistant", "content": plan.text}
    assert line["usage"] == {"prompt_tokens": 321, "completion_tokens": 40, "cached_tokens": None}
    # the first byte came before the stall, the end after it: the line's times are the stream's own
    # the first byte is stamped as it came, before the stall, not at the resume (a CI run on a loaded machine read
    # it 1.07 s after the send, past half the stall); the end a stall after it
    assert line["sent"] <= line["first_byte"] < line["sent"] + stall
    assert line["end"] - line["first_byte"] >= stall - 0.05
    assert SECRET not in out.read_text()
    load_trajectories(out)


async def read_to_done(port: int, first: str) -> bytes:
    """A streamed chat request read to its ``[DONE]`` event, then its connection closed, as the openai SDK does
    (it closes a connection whose chunked body it did not read to the end)."""
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": first}]}).encode()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    got = b""
    async with asyncio.timeout(10):
        while b"data: [DONE]\n\n" not in got:
            part = await r.read(1 << 16)
            assert part, got
            got += part
    w.close()
    return got


@pytest.mark.parametrize("ends", [True, False])
def test_a_client_that_goes_at_its_streams_last_event_has_its_answer_recorded(
        tmp_path: Path, ends: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent got every call's whole answer, and record counted one of its 14 calls "the client gave up", not
    recorded: the SDK closed its connection at the stream's [DONE], before the chunked body's last chunk reached
    the proxy. The answer is recorded once that chunk comes (here 0.4 s later); where it never comes (``ends``
    False) the answer is cut after END_GRACE_S, as a client that gave up."""
    from tokenbench.record import proxy

    monkeypatch.setattr(proxy, "END_GRACE_S", 1.0)
    plan = Scripted("went", 12, 77, "chunked")
    last = len(plan.wire) - len(b"0\r\n\r\n")
    plan.pieces = [(0.0, plan.wire[:last]), (0.4 if ends else 1.2, plan.wire[last:])]  # 1.2: after the grace
    out = tmp_path / "went.jsonl"
    loop, thread, port = scripted_upstream({"went at done": plan})
    try:
        with recording(f"http://127.0.0.1:{port}", out) as rec:
            got = asyncio.run(read_to_done(int(rec.root.rsplit(":", 1)[1]), "went at done"))
            assert got == plan.wire[:last]  # the client had every event, and went before the body's end
            time.sleep(0.6 if ends else 1.5)
            assert not rec.proxy.flights, "the flight of a client that went was held past its end"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    if ends:
        assert rec.summary.recorded == 1 and not rec.summary.failed, rec.summary
        [line] = lines(out)
        assert line["response"] == {"role": "assistant", "content": plan.text}
        assert line["usage"]["completion_tokens"] == 12
    else:
        assert rec.summary.failed == {"the client gave up": 1} and not out.exists()


def test_a_stop_while_a_whole_answers_end_is_awaited_says_it_cut_it(tmp_path: Path) -> None:
    """A stop that came while the proxy read on to the end of an answer its client had whole (the SDK gone at
    [DONE]) counted it "the upstream cut its answer": the stop closed the upstream connection. It says the stop."""
    plan = Scripted("went", 12, 77, "chunked")
    last = len(plan.wire) - len(b"0\r\n\r\n")
    plan.pieces = [(0.0, plan.wire[:last]), (1.0, plan.wire[last:])]  # the body's end, past the stop's grace
    loop, thread, port = scripted_upstream({"went at done": plan})
    try:
        with recording(f"http://127.0.0.1:{port}", tmp_path / "stop.jsonl", grace_s=0.2) as rec:
            asyncio.run(read_to_done(int(rec.root.rsplit(":", 1)[1]), "went at done"))
            summary = rec.stop()
        time.sleep(1.0)  # the upstream's handler ends before its loop stops (not collected later, in another test)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert summary.failed == {"cut by the stop": 1} and summary.recorded == 0, summary


@pytest.mark.parametrize("api, body, ended", [
    ("chat", b'data: {"choices": []}\n\ndata: [DONE]\n\n', True),
    ("chat", b'data: {"choices": []}\n\ndata: [DO', False),  # the last event still being sent
    ("chat", b'data: {"choices": []}\n\n', False),
    ("messages", b'event: message_delta\ndata: {"type": "message_delta"}\n\n'
                 b'event: message_stop\ndata: {"type": "message_stop"}\n\n', True),
    ("messages", b'event: message_delta\ndata: {"type": "message_delta"}\n\n', False),
    ("responses", b'event: response.completed\ndata: {"type": "response.completed", "response": {}}\n\n', True),
    ("responses", b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta"}\n\n', False),
    ("responses", b'data: not json\n\n', False),
])
def test_a_streams_end_is_its_apis_last_event(api: str, body: bytes, ended: bool) -> None:
    from tokenbench.record.parsed import stream_ended

    assert stream_ended(api, "text/event-stream; charset=utf-8", "", [body[:7], body[7:]]) is ended
    assert not stream_ended(api, "application/json", "", [body])  # a JSON answer ends with its body only


def test_many_streams_at_once_from_a_misbehaving_upstream_each_reach_their_client_whole(tmp_path: Path) -> None:
    """32 clients at once through one proxy, each stream sent its own way: in pieces of 1 byte to 4 KiB (the head
    and the chunked framing cut anywhere), with a stall of up to 0.8 s mid-stream then the rest, as one write of
    a megabyte, or as a body that ends where the upstream closes the connection. Every stream's text is its own
    (its tag on each word, the words numbered), so a byte lost, repeated, reordered or handed to another client
    shows: each client got exactly the bytes the upstream wrote for its request. The log holds one line per
    request, each with its own stream's text and counts, and none of the keys the clients sent."""
    n = 32
    plans: dict[str, Scripted] = {}
    for i in range(n):
        rng, tag, kind = random.Random(i), f"s{i:02d}", i % 4
        if kind == 0:  # tiny pieces
            p = Scripted(tag, 200, 1000 + i, "chunked", cuts=tiny_cuts(16000, rng))
        elif kind == 1:  # a stall mid-stream, then the rest
            p = Scripted(tag, 30, 1000 + i, "chunked", cuts=tiny_cuts(4000, rng, (1, 7, 50, 200)),
                         stall_s=0.3 + 0.5 * rng.random(), stall_at=rng.randrange(300, 2000))
        elif kind == 2:  # one huge write: head and body at once
            p = Scripted(tag, 100_000 + i, 1000 + i, "length", one_event=True)
        else:  # to the connection's close, in middling pieces
            p = Scripted(tag, 40, 1000 + i, "close", cuts=tiny_cuts(5000, rng, (100, 500, 1000)))
        plans[f"task of stream {tag}"] = p
    keys = {first: f"Bearer sk-live-{i:02d}-Zq8TtopSecretKeyValue" for i, first in enumerate(plans)}
    out = tmp_path / "many-hostile.jsonl"
    busy = [0, 0]
    loop, thread, port = scripted_upstream(plans, busy)

    async def clients(proxy_port: int) -> list[list[tuple[float, bytes]]]:
        return await asyncio.gather(*(raw_stream(proxy_port, first, keys[first]) for first in plans))

    try:
        with recording(f"http://127.0.0.1:{port}", out) as rec:
            got = asyncio.run(clients(int(rec.root.rsplit(":", 1)[1])))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert busy[1] >= n // 2, busy  # the streams were at once, not one after another
    assert sum(len(p.wire) > 1_000_000 for p in plans.values()) == n // 4
    tiny = list(plans.values())[::4]  # cut fine, as said: 1-byte pieces among many
    assert all(len(p.pieces) >= 15 and any(len(b) == 1 for _, b in p.pieces) for p in tiny)
    for (first, plan), reads in zip(plans.items(), got):
        data = b"".join(p for _, p in reads)
        assert data == plan.wire, (first, len(data), len(plan.wire))
        assert plan.auth == keys[first]  # forwarded as sent
    assert rec.summary.recorded == n and not rec.summary.failed and not rec.summary.skipped
    recorded = lines(out)
    assert len(recorded) == n
    by_first = {ln["request"]["messages"][0]["content"]: ln for ln in recorded}
    assert set(by_first) == set(plans)
    for first, plan in plans.items():
        ln = by_first[first]
        assert ln["response"] == {"role": "assistant", "content": plan.text}, first
        assert ln["usage"]["prompt_tokens"] == plan.prompt, first
    text = out.read_text()
    assert "Bearer" not in text and "sk-live" not in text
    assert not [k for k in keys.values() if k.split()[1] in text or k.split()[1][-20:] in text]
    assert len(load_trajectories(out).trajectories) == n


def test_an_upstream_down_at_start_gets_a_502_then_is_recorded_once_up(tmp_path: Path) -> None:
    out = tmp_path / "down.jsonl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with recording(f"http://127.0.0.1:{port}", out) as rec:
        status, text = asyncio.run(post(rec.url + "/chat/completions", CHAT))
        assert status == 502
        assert text.decode().count("\n") == 1 and text.startswith(b"tokenbench record: cannot reach the upstream")
        with BackgroundEmitter(EmitterConfig(), port=port):
            assert asyncio.run(post(rec.url + "/chat/completions", CHAT))[0] == 200
    assert rec.summary.failed == {"the upstream could not be reached": 1} and rec.summary.recorded == 1
    load_trajectories(out)


# ---- secrets --------------------------------------------------------------------------------------------------------

SECRET = "sk-proj-4f9XsecretKEYvalue0123456789"


def test_no_secret_reaches_the_log_or_the_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "secrets.jsonl"
    body = {"model": "emitter", "stream": True, "max_tokens": 3, "api_key": SECRET,
            "metadata": {"password": SECRET}, "tools": [READ_TOOL],
            "messages": [{"role": "user", "content": f"my key is {SECRET}, keep it"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "c1", "type": "function", "function": {
                                 "name": "read", "arguments": json.dumps({"path": "/x", "token": SECRET})}}]},
                         {"role": "tool", "tool_call_id": "c1", "content": f"https://bob:{SECRET}@git.example/r"}]}
    headers = {"Authorization": f"Bearer {SECRET}", "x-api-key": SECRET, "Cookie": f"session={SECRET}"}
    with BackgroundEmitter(EmitterConfig()) as em, recording(em.url, out) as rec:
        assert asyncio.run(post(rec.url + "/chat/completions", body, headers))[0] == 200
    print("\n".join(rec.summary.lines()))
    text = out.read_text()
    assert rec.summary.recorded == 1
    assert SECRET not in text and "4f9Xsecret" not in text and SECRET not in capsys.readouterr().out
    [line] = lines(out)
    assert json.loads(line["request"]["messages"][1]["tool_calls"][0]["function"]["arguments"]) == {
        "path": "/x", "token": "***"}
    assert line["request"]["tools"] == [READ_TOOL]  # a schema that names a "token" parameter is kept whole
    assert "my key is ***, keep it" == line["request"]["messages"][0]["content"]
    load_trajectories(out)


def test_secrets_assigned_in_a_files_text_are_hidden_and_code_is_kept(tmp_path: Path) -> None:
    """An agent reads .env files and configs: the value given to a secret-named name is hidden in what is
    written, whatever its quoting, while code that only looks alike (``key=lambda``, ``max_tokens: 100``) is kept."""
    env = "DB_PASSWORD=hunter2\ntoken: abc123xyz\n{\"api_key\": \"zz-top-9\"}\nexport AWS_SECRET_ACCESS_KEY='q1w2e3r4'"
    code = "sorted(xs, key=lambda x: x.name); max_tokens: 100; token = get_token()"
    body = {"model": "emitter", "stream": True, "max_tokens": 3, "messages": [
        {"role": "user", "content": "read .env"}, {"role": "tool", "tool_call_id": "c1", "content": env},
        {"role": "user", "content": code}]}
    out = tmp_path / "env.jsonl"
    with BackgroundEmitter(EmitterConfig()) as em, recording(em.url, out) as rec:
        assert asyncio.run(post(rec.url + "/chat/completions", body))[0] == 200
    text = out.read_text()
    for secret in ("hunter2", "abc123xyz", "zz-top-9", "q1w2e3r4"):
        assert secret not in text
    [line] = lines(out)
    assert line["request"]["messages"][1]["content"].splitlines() == [
        "DB_PASSWORD=***", "token: ***", '{"api_key": "***"}', "export AWS_SECRET_ACCESS_KEY='***'"]
    assert line["request"]["messages"][2]["content"] == code


def test_a_secret_behind_a_label_or_a_bearer_is_hidden_too(tmp_path: Path) -> None:
    """Tool output and logs put a label first (``Output: GITHUB_TOKEN=...``): the label took the whole
    ``NAME=value`` as its own value, which it is not a secret's, and the secret behind it was written. A bearer
    credential in a command an agent ran is hidden as well."""
    said = ["Config: DB_PASSWORD=hunter2x", "Output: GITHUB_TOKEN=plaintok123", "note: password: hunter4x",
            "Error: token=abcdef12345", "curl -H 'Authorization: Bearer plainbearer123456' http://h"]
    body = {"model": "emitter", "stream": True, "max_tokens": 3, "messages": [
        {"role": "user", "content": "run it"}, {"role": "tool", "tool_call_id": "c1", "content": "\n".join(said)}]}
    out = tmp_path / "labels.jsonl"
    with BackgroundEmitter(EmitterConfig()) as em, recording(em.url, out) as rec:
        assert asyncio.run(post(rec.url + "/chat/completions", body))[0] == 200
    [line] = lines(out)
    assert line["request"]["messages"][1]["content"].splitlines() == [
        "Config: DB_PASSWORD=***", "Output: GITHUB_TOKEN=***", "note: password: ***", "Error: token=***",
        "curl -H 'Authorization: Bearer ***' http://h"]


# ---- lengths only ---------------------------------------------------------------------------------------------------

def chained(tokens: list[int], prompt: int, block: int) -> list[int]:
    """The hash-id rule as docs/record.md says it, written out on its own: block i's id is the keyed BLAKE2b (64
    bits, signed, little-endian) of the id before (nothing for the first) and its token ids as 64-bit integers."""
    out, h = [], b""
    for i in range(prompt // block):
        h = hashlib.blake2b(h + array("q", tokens[i * block:(i + 1) * block]).tobytes(), digest_size=8,
                            key=KEY).digest()
        out.append(int.from_bytes(h, "little", signed=True))
    return out


def test_nothing_is_served_before_the_writer_can_record_it(model_cache: Path, tmp_path: Path) -> None:
    """A lengths-only log's tokenizer loads in the writer (4 s with Transformers) while the proxy already served:
    a Ctrl-C then, soon after the agent's last answer, left a log of its header alone, exit 1 and not a word.
    Now the proxy serves once the writer is ready (requests before are refused, never answered unwritten), and an
    interrupt while it loads leaves no log and no writer."""
    from tokenbench.engines import launch, tiny

    tok = str(tiny.ensure(model_cache).hf_dir)
    out = tmp_path / "lt.jsonl"
    body = {"model": "emitter", "stream": True, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}

    def recording_of(url: str, port: int) -> Recording:
        return Recording(RecordConfig(url[:-3], out, port=port, lengths_only=True, tokenizer=tok, key=KEY))

    async def go(url: str) -> tuple[list[Any], Any]:
        port = launch.free_port()
        rec = recording_of(url, port)
        starting = asyncio.ensure_future(rec.start())
        early = []
        while not starting.done():  # an agent that sends from the first moment
            early.append((await post(f"http://127.0.0.1:{port}/v1/chat/completions", body))[0])
            await asyncio.sleep(0.05)
        await starting
        status, _ = await post(f"http://127.0.0.1:{port}/v1/chat/completions", body)
        assert status == 200
        return early, await rec.stop()

    async def interrupted(url: str) -> Recording:
        rec = recording_of(url, launch.free_port())
        starting = asyncio.ensure_future(rec.start())
        await asyncio.sleep(0.5)  # the writer still loads its tokenizer
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        return rec

    with BackgroundEmitter(EmitterConfig()) as em:
        early, summary = asyncio.run(go(em.url))
        assert set(early) == {"ClientConnectorError"}, early
        assert summary.recorded == len(lines(out)) == 1
        out.unlink()
        rec = asyncio.run(interrupted(em.url))
    assert not out.exists() and rec.link is None


def test_lengths_only_keeps_counts_and_hash_ids_and_no_text(tmp_path: Path) -> None:
    out = tmp_path / "lengths.jsonl"
    prompt = [{"role": "system", "content": "alpha beta gamma delta epsilon zeta"},
              {"role": "user", "content": "configuration loader secretive words here please"}]

    async def run(url: str) -> list[dict[str, Any]]:
        a = Agent(url, {"Authorization": "Bearer whatever"})
        async with aiohttp.ClientSession() as s:
            ans = await a.ask(s, prompt)
            await a.ask(s, [*prompt, ans, {"role": "user", "content": "more words to extend it"}], usage=False)
            return [ans]

    with BackgroundEmitter(EmitterConfig()) as em:
        with recording(em.url, out, lengths_only=True, block_size=4) as rec:
            [ans] = asyncio.run(run(rec.url))
        async def tokenize(msgs: list[dict[str, Any]]) -> list[int]:
            async with aiohttp.ClientSession() as s:
                async with s.post(em.url[:-3] + "/tokenize", json={"messages": msgs}) as r:
                    return list((await r.json())["tokens"])
        first_ids = asyncio.run(tokenize(prompt))
        second_msgs = [*prompt, {**ans, "content": ans["content"]}, {"role": "user", "content": "more words to extend it"}]
        second_ids = asyncio.run(tokenize(second_msgs))
    head = json.loads(out.read_text().splitlines()[0])
    assert (head["lengths_only"], head["block_size"], head["rounding"]) == (True, 4, "floor")
    one, two = lines(out)
    assert set(one) == {"session", "parent", "sent", "first_byte", "end", "pause", "usage", "hash_ids"}
    assert one["usage"]["prompt_tokens"] == len(first_ids) == 12
    assert one["hash_ids"] == chained(first_ids, 12, 4) and len(one["hash_ids"]) == 3
    # no usage asked: the counts are the tokenizer's, and the ids share the first request's as far as it went
    assert two["usage"]["prompt_tokens"] == len(second_ids) and two["usage"]["completion_tokens"] == 5
    assert two["hash_ids"] == chained(second_ids, len(second_ids), 4)
    assert two["hash_ids"][:3] == one["hash_ids"] and two["session"] == one["session"]
    text = out.read_text()
    for word in ("alpha", "configuration", "secretive", "extend", "Bearer"):
        assert word not in text
    ts = load_trajectories(out)
    assert ts.block == 4 and ts.trajectories[0].calls[1].blocks is not None


def test_sessions_of_a_lengths_only_log_share_on_replay_what_they_shared_recorded(tmp_path: Path) -> None:
    """Two agents' sessions with one system prompt: the log gives both its ids (one key for the recording), so the
    replay sends both the same leading text and the ideal share counts it. Each replayed tree had its own salt in
    place of its first tokens and blocks of its own: on llama-server a replay read 0% cached, its ideal 0%, where
    the recording's second session had 80 of 81 tokens cached. A second pass over the set (more lanes than
    sessions) shares nothing with the first, as another team's agents would not."""
    out, db = tmp_path / "l.jsonl", tmp_path / "r.db"
    system = {"role": "system", "content": " ".join(f"rule{i}" for i in range(40))}

    async def run(url: str) -> None:
        async with aiohttp.ClientSession() as s:  # no answer carried over: the second is a session of its own
            await Agent(url, {}).ask(s, [system, {"role": "user", "content": "fix the parser"}])
            await Agent(url, {}).ask(s, [system, {"role": "user", "content": "write the tests"}])

    def sent(em: BackgroundEmitter, lanes: int) -> list[list[str]]:
        """The words of the replay's calls (the last ones sent: a preflight and a warm-up come first)."""
        em.emitter.requests_seen.clear()
        assert main(["sweep", "--url", em.url, "--model", "emitter", "--trace", str(out), "--concurrency", str(lanes),
                     "--max-think", "0s", "--db", str(db)]) == 0
        calls = em.emitter.requests_seen[-2 * -(-lanes // 2):]
        return [" ".join(str(m.get("content", "")) for m in b["messages"]).split() if "messages" in b
                else str(b["prompt"]).split() for b in calls]

    def shared(a: list[str], b: list[str]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    with BackgroundEmitter(EmitterConfig()) as em:
        with recording(em.url, out, lengths_only=True, block_size=4) as rec:
            asyncio.run(run(rec.url))
        ts = load_trajectories(out)
        assert len(ts.trajectories) == 2 and ts.shared_blocks
        one, two = (t.calls[0].blocks.hash_ids.array() for t in ts.trajectories)  # type: ignore[union-attr]
        common = shared([str(h) for h in one], [str(h) for h in two])
        assert common >= 40 // 4 - 1  # the system prompt's whole blocks (the template's words may shift the last)
        total = sum(t.calls[0].input_tokens or 0 for t in ts.trajectories)
        assert ts.figures.ideal_cached_share == pytest.approx(common * 4 / total)
        a, b = sent(em, 1)
        assert shared(a, b) >= common * 4 - 1  # the blocks' words, one token each on the emitter
        first, *others = sent(em, 4)  # two passes of two: each pass's pair shares its prefix, the passes nothing
        pairs = sorted(shared(first, o) for o in others)
        assert pairs[0] == 0 and pairs[-1] >= common * 4 - 1, pairs


def test_hash_ids_past_the_tokenizers_count_chain_on() -> None:
    """A tokenizer that counts fewer tokens than the server (no chat template): the server's count decides how
    many ids; the ids past the tokenizer's tokens still differ where the tokens before them did."""
    h = HashIds(4, KEY)
    a, b = h.ids(list(range(10)), 17), h.ids([*range(9), 99], 17)
    assert len(a) == len(b) == 4
    assert a[:2] == b[:2] == chained(list(range(10)), 8, 4) and a[2:] != b[2:]


def test_a_local_tokenizer_counts_a_lengths_only_log(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {w: i for i, w in enumerate(["[UNK]", "user:", "assistant:", "hello", "there", "w0", "w1", "w2", "w3"])}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    out = tmp_path / "local.jsonl"
    body = {**CHAT, "stream_options": {"include_usage": False}}
    with BackgroundEmitter(EmitterConfig()) as em, recording(em.url, out, lengths_only=True, block_size=2,
                                                             tokenizer=str(path)) as rec:
        assert asyncio.run(post(rec.url + "/chat/completions", body))[0] == 200
    [line] = lines(out)
    # "user: hello there\nassistant:" in the local tokenizer's words: 4 tokens, 2 blocks; the answer " w0 w1 w2 w3"
    assert line["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "cached_tokens": None}
    assert line["hash_ids"] == chained([1, 3, 4, 2], 4, 2)


# ---- the command line -------------------------------------------------------------------------------------------------

def test_record_help_says_where_to_point_an_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--help"]) == 0
    text = capsys.readouterr().out
    for option in ("--upstream", "--out", "--port", "--lengths-only", "--block-size", "--tokenizer"):
        assert option in text
    assert "examples:\n  tokenbench record" in text


@pytest.mark.parametrize("args, said", [
    ([], "the following arguments are required: --upstream, --out"),
    (["--upstream", "ftp://box:21", "--out", "x.jsonl"], "--upstream ftp://box:21: only http:// and https://"),
    (["--upstream", f"http://me:{SECRET}@box:8000", "--out", "x.jsonl"], "carries credentials"),
    (["--upstream", "http://box:8000", "--out", "x.jsonl", "--block-size", "0"], "argument --block-size"),
    (["--upstream", "http://box:8000", "--out", "x.jsonl", "--port", "70000"], "argument --port"),
    (["--upstream", "http://box:8000", "--out", "x.jsonl", "--block-size", "16"], "--block-size goes with"),
    (["--upstream", "http://box:8000", "--out", "no/such/dir/x.jsonl"], "does not exist"),
])
def test_bad_arguments_are_refused_in_one_line(args: list[str], said: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["record", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and SECRET not in err, err
    assert "Traceback" not in err and not (tmp_path / "x.jsonl").exists()


def test_a_tokenizer_that_is_no_tokenizer_is_refused_before_agents_are_pointed_here(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], emitter: BackgroundEmitter) -> None:
    """The writer process loads a lengths-only log's tokenizer: one that failed there crashed it with a
    traceback after the proxy had said where to point the agents, and every request after was forwarded and lost."""
    bogus = tmp_path / "passwd"
    bogus.write_text("root:x:0:0:root:/root:/bin/bash\n")
    out = tmp_path / "x.jsonl"
    assert main(["record", "--upstream", emitter.url, "--out", str(out), "--port", "0", "--lengths-only",
                 "--tokenizer", str(bogus)]) == 2
    got = capsys.readouterr()
    assert got.err.count("\n") == 1 and f"--tokenizer {bogus}" in got.err and "Traceback" not in got.err, got.err
    assert "point the agents" not in got.out and not out.exists()


def test_an_existing_log_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.jsonl"
    old.write_text("yesterday's recording\n")
    assert main(["record", "--upstream", "http://127.0.0.1:9", "--port", "0", "--out", str(old)]) == 2
    assert "already exists" in capsys.readouterr().err and old.read_text() == "yesterday's recording\n"


def record_command(upstream: str, out: Path) -> subprocess.Popen[str]:
    """``tokenbench record`` as a user runs it, in a process of its own (Ctrl-C is how it ends), on a terminal of
    80 columns."""
    return subprocess.Popen([sys.executable, "-m", "tokenbench", "record", "--upstream", upstream, "--port", "0",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
                                 "COLUMNS": "80"})


def test_the_command_records_until_ctrl_c_and_says_what_it_did(tmp_path: Path, emitter: BackgroundEmitter) -> None:
    out = tmp_path / "cli.jsonl"
    proc = record_command(emitter.url, out)
    try:
        assert proc.stdout is not None
        first = "".join(proc.stdout.readline() for _ in range(3))
        m = re.search(r"OPENAI_BASE_URL=(\S+/v1)", first)
        assert m and "ANTHROPIC_BASE_URL=http://127.0.0.1:" in first, first
        assert max(map(len, first.splitlines()[1:])) <= 80, first  # each address whole, on a line of its own
        for _ in range(3):
            assert asyncio.run(post(m.group(1) + "/chat/completions", CHAT))[0] == 200
    finally:
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    # the same messages three times: three runs of one task, three sessions
    assert "recorded 3 requests in 3 sessions (0 of them subagents)" in rest and "Traceback" not in err
    assert len(load_trajectories(out).trajectories) == 3
    assert out.read_text().endswith("\n")


def test_a_recording_of_nothing_says_so_keeps_no_log_and_exits_1(tmp_path: Path, emitter: BackgroundEmitter) -> None:
    """An agent never pointed at the proxy: the recording exited 0 and left a log of its header alone, which the
    next try with the same --out could not overwrite."""
    out = tmp_path / "none.jsonl"
    proc = record_command(emitter.url, out)
    try:
        assert proc.stdout is not None
        m = re.search(r"OPENAI_BASE_URL=(\S+)/v1", "".join(proc.stdout.readline() for _ in range(3)))
        assert m and out.exists()
        # a request of a path that is not recorded is forwarded, and still records nothing
        assert asyncio.run(get(m.group(1) + "/v1/models")) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (rest, err)
    said = " ".join(rest.split())
    assert f"nothing recorded, so {out} was not kept: no chat completion, message or response came through" in said
    assert "1 other request forwarded" in said and "Traceback" not in err
    # wrapped between words at the terminal's 80 columns, but for a word (the log's path) longer than a line
    assert all(len(line) <= 80 or str(out) in line for line in rest.splitlines()), rest
    assert not out.exists()


def test_a_log_that_was_there_before_is_never_removed(tmp_path: Path) -> None:
    """The log of nothing is removed only where this recording made it."""
    old = tmp_path / "old.jsonl"
    old.write_text("")
    rec = Recording(RecordConfig("http://127.0.0.1:9", old, port=0))
    summary = asyncio.run(rec.stop())
    assert old.exists() and not summary.removed and not summary.ok


# ---- a real engine --------------------------------------------------------------------------------------------------

@pytest.mark.engine
def test_a_real_llama_server_behind_the_proxy(tmp_path: Path, llama_tiny_1: Serving) -> None:
    """The scripted turns against llama-server on the tiny model: the log's counts are the server's own (its
    usage where asked, its timings where not), and a lengths-only log's ids cover the server's prompt tokens,
    counted by its own template and tokenizer."""
    full, short = tmp_path / "llama.jsonl", tmp_path / "llama-lengths.jsonl"

    async def turns(url: str, agent: Agent) -> None:
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."},
                                      {"role": "user", "content": "Say something about configuration files."}]
        async with aiohttp.ClientSession() as s:
            for turn in range(3):
                ans = await agent.ask(s, msgs, [READ_TOOL], usage=turn != 1, model="tokenbench-tiny-llama",
                                      max_tokens=4)
                msgs += [ans, {"role": "user", "content": f"And turn {turn}?"}]

    claude = {"model": "m", "max_tokens": 4, "stream": True, "system": "You are terse.",
              "messages": [{"role": "user", "content": "Say something."}]}
    codex = {"model": "m", "max_output_tokens": 4, "instructions": "You are terse.", "input": "Say something."}
    server = llama_tiny_1.server
    root = server.base_url[:-3]
    with recording(server.base_url, full) as rec:
        agent = Agent(rec.url)
        asyncio.run(turns(rec.url, agent))
        got_claude = asyncio.run(post(rec.root + "/v1/messages", claude))
        got_codex = asyncio.run(post(rec.root + "/v1/responses", codex))
    with recording(server.base_url, short, lengths_only=True, block_size=8) as rec2:
        agent2 = Agent(rec2.url)
        asyncio.run(turns(rec2.url, agent2))
    first = lines(short)[0]
    shown = asyncio.run(post(root + "/apply-template", {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say something about configuration files."}], "tools": [READ_TOOL]}))
    server_tokens = asyncio.run(post(root + "/tokenize", {"content": json.loads(shown[1])["prompt"],
                                                          "add_special": True, "parse_special": True}))
    assert rec.summary.recorded == 5 and rec2.summary.recorded == 3, (rec.summary.lines(), rec2.summary.lines())
    # the lengths-only ids are the server's own tokens of the prompt, as its template renders it
    tokens = json.loads(server_tokens[1])["tokens"]
    assert len(tokens) == first["usage"]["prompt_tokens"] and first["hash_ids"] == chained(tokens, len(tokens), 8)
    *recorded, as_claude, as_codex = lines(full)
    start = json.loads(got_claude[1].split(b"\n")[1][len("data: "):])["message"]["usage"]
    assert as_claude["usage"]["prompt_tokens"] == start["input_tokens"] + start["cache_read_input_tokens"]
    assert as_claude["usage"]["completion_tokens"] == 4 and as_claude["request"]["messages"][0]["role"] == "system"
    assert as_codex["usage"]["prompt_tokens"] == json.loads(got_codex[1])["usage"]["input_tokens"]
    for ln, said in zip(recorded, agent.usages):
        assert ln["usage"]["prompt_tokens"] > 10 and ln["usage"]["completion_tokens"] == 4
        if said is not None:
            assert ln["usage"]["prompt_tokens"] == said["prompt_tokens"]
            assert ln["usage"]["cached_tokens"] == said["prompt_tokens_details"]["cached_tokens"]
    assert {ln["session"] for ln in recorded} == {"s1"} and as_claude["session"] != as_codex["session"] != "s1"
    ts = load_trajectories(full)
    assert [c.input_tokens for c in ts.trajectories[0].calls] == [ln["usage"]["prompt_tokens"] for ln in recorded]
    assert len(ts.trajectories) == 3
    # the lengths-only log's counts are what the server said of that recording's own requests (its greedy
    # answers may differ by a token from the first recording's: a CI run once read 92 against 93)
    assert any(u is not None for u in agent2.usages)
    for ln, said in zip(lines(short), agent2.usages):
        if said is not None:
            assert ln["usage"]["prompt_tokens"] == said["prompt_tokens"]
        assert len(ln["hash_ids"]) == ln["usage"]["prompt_tokens"] // 8
    load_trajectories(short)


def whole_app() -> web.Application:
    async def whole(request: web.Request) -> web.Response:
        body = await request.json()
        assert body["stream"] is False
        answer = {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
                  "message": {"role": "assistant", "content": "", "reasoning_content": "hmm", "tool_calls": [
                      {"id": "t1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}}],
                  "usage": {"prompt_tokens": 31, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 16}}}
        return web.Response(body=gzip.compress(json.dumps(answer).encode()), headers={
            "Content-Type": "application/json", "Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", whole)
    return app


def test_a_whole_compressed_answer_passes_as_sent_and_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "whole.jsonl"
    body = {**CHAT, "stream": False}

    async def raw(url: str) -> tuple[bytes, str]:
        async with aiohttp.ClientSession(auto_decompress=False) as s:
            async with s.post(url + "/chat/completions", json=body, headers={"Accept-Encoding": "gzip"}) as r:
                return await r.read(), r.headers.get("Content-Encoding", "")

    with App(whole_app()) as up, recording(up.url, out) as rec:
        assert asyncio.run(raw(rec.url)) == asyncio.run(raw(up.url))
    [line] = lines(out)
    assert line["usage"] == {"prompt_tokens": 31, "completion_tokens": 7, "cached_tokens": 16}
    assert line["response"] == {"role": "assistant", "content": None, "reasoning_content": "hmm", "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}


def raw_exchange(port: int, data: bytes, answers: int, wait: float = 20.0) -> bytes:
    """What a raw HTTP/1.1 client gets back for ``data`` on one connection: read until the last of ``answers``
    answers has ended (a chunked body's last chunk, or a Content-Length's bytes), the connection closes, or
    ``wait`` seconds pass. Reading to an end, not to a quiet spell: a busy machine may pause longer than a spell."""
    got = b""
    with socket.create_connection(("127.0.0.1", port), wait) as s:
        s.sendall(data)
        while not _answered(got, answers):
            try:
                part = s.recv(1 << 16)
            except socket.timeout:
                break
            if not part:
                break
            got += part
    return got


def _answered(got: bytes, answers: int) -> bool:
    """Whether ``got`` holds ``answers`` heads and the last one's body to its end."""
    heads = list(re.finditer(rb"HTTP/1\.1 [0-9]{3}[^\r]*\r\n(?:[^\r]+\r\n)*\r\n", got))
    if len(heads) < answers:
        return False
    body = got[heads[-1].end():]
    size = re.search(rb"(?i)\r\ncontent-length: *(\d+)", heads[-1].group(0))
    return len(body) >= int(size.group(1)) if size is not None else body.endswith(b"0\r\n\r\n")


def test_requests_in_unusual_shapes_pass_whole(tmp_path: Path, emitter: BackgroundEmitter) -> None:
    """What a hand-written client may send: two requests on one connection before the first's answer, a chunked
    body, a body that waits for 100 Continue, a HEAD. Each reaches the upstream whole and in order."""
    out = tmp_path / "shapes.jsonl"
    chat = json.dumps(CHAT).encode()
    with recording(emitter.url, out) as rec:
        port = int(rec.root.rsplit(":", 1)[1])
        # two requests in one write: the second waits in the buffer for the first's answer
        one = (b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
               b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(chat), chat))
        got = raw_exchange(port, one, 2)
        assert got.count(b"HTTP/1.1 200") == 2 and got.index(b'"object"') < got.index(b"data: "), got[:300]
        assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), got[-100:]  # the emitter's chunked framing, as sent
        # a chunked body, split in two chunks
        half = len(chat) // 2
        chunked = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, chat[:half], len(chat) - half, chat[half:]))
        assert b"data: [DONE]" in raw_exchange(port, chunked, 1)
        # Expect: 100-continue, the body sent only once the proxy said to go on
        with socket.create_connection(("127.0.0.1", port), 5) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(chat))
            assert s.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
            s.sendall(chat)
            answer = b""
            while not _answered(answer, 1):  # to the answer's end: a client gone before it has given up
                part = s.recv(1 << 16)
                assert part, answer
                answer += part
        # HEAD: the answer ends with its head, the connection serves the next request
        head = raw_exchange(port, b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n"
                                  b"\r\n", 2)
        assert head.count(b"HTTP/1.1 ") == 2 and head.count(b'"data"') == 1, head[:300]
    assert rec.summary.recorded == 3 and not rec.summary.failed and rec.summary.others == 3
    assert len(lines(out)) == 3


def test_an_http_1_0_client_gets_an_answer_it_can_read(tmp_path: Path, emitter: BackgroundEmitter) -> None:
    """An HTTP/1.0 client (curl --http1.0, an old library) cannot read chunked framing, which HTTP/1.0 does not
    have: the request goes on in the client's version, so the upstream answers it as HTTP/1.0 does (its body ends
    with the connection), and the agent gets that answer whole, recorded."""
    out = tmp_path / "old.jsonl"
    chat = json.dumps(CHAT).encode()
    with recording(emitter.url, out) as rec:
        port = int(rec.root.rsplit(":", 1)[1])
        got = b""
        with socket.create_connection(("127.0.0.1", port), 20) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(chat), chat))
            while part := s.recv(1 << 16):  # to the close that ends an HTTP/1.0 body
                got += part
        # the upstream connection the answer ended by closing is not lent to the next request
        after = raw_exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(chat), chat), 1)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower(), head
    assert body.rstrip().endswith(b"data: [DONE]"), body[-100:]
    assert after.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in after, after[:200]
    assert rec.summary.recorded == 2 and not rec.summary.failed
    assert len(lines(out)) == 2


def closing_upstream(served: list[int]) -> tuple[asyncio.AbstractEventLoop, threading.Thread, int]:
    """An upstream that answers the first request of each connection, then closes the connection when the second
    comes, without a byte of answer (as a server whose keep-alive timer ran out as the request came)."""
    loop = asyncio.new_event_loop()
    body = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n'

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        n = 0
        while True:
            head = await r.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
            await r.readexactly(length)
            n += 1
            if n > 1:
                w.close()
                return
            served.append(1)
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body))
            await w.drain()

    server = loop.run_until_complete(asyncio.start_server(handle, "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return loop, thread, server.sockets[0].getsockname()[1]


def test_a_kept_alive_connection_closed_under_a_request_is_tried_again_once(tmp_path: Path) -> None:
    served: list[int] = []
    loop, thread, port = closing_upstream(served)
    try:
        with recording(f"http://127.0.0.1:{port}", tmp_path / "retry.jsonl") as rec:
            for _ in range(3):
                status, body = asyncio.run(post(rec.url + "/chat/completions", CHAT))
                assert status == 200 and body.endswith(b"data: [DONE]\n\n")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    # the second and third went first on the kept-alive connection, which closed under them: each was sent again
    assert len(served) == 3
    assert rec.summary.recorded == 3 and not rec.summary.failed


def test_requests_of_one_session_in_flight_at_once_leave_the_pause_to_the_times(tmp_path: Path) -> None:
    out = tmp_path / "overlap.jsonl"

    async def run(url: str) -> None:
        a = Agent(url, {"X-Session-ID": "team-run"})
        async with aiohttp.ClientSession() as s:
            slow = asyncio.ensure_future(a.ask(s, [{"role": "user", "content": "long one"}], max_tokens=40))
            await asyncio.sleep(0.05)
            await a.ask(s, [{"role": "user", "content": "short one"}], max_tokens=2)
            await slow

    with BackgroundEmitter(EmitterConfig(itl_s=0.01)) as em, recording(em.url, out) as rec:
        asyncio.run(run(rec.url))
    short, long = lines(out)
    assert short["pause"] is None and long["pause"] is None and short["end"] < long["end"]
    [t] = load_trajectories(out).trajectories
    assert [c.pause_s for c in t.calls] == [0.0, 0.0]  # the second was sent before the first ended


def test_a_writer_that_dies_leaves_the_agent_served_and_says_so(tmp_path: Path, emitter: BackgroundEmitter) -> None:
    out = tmp_path / "died.jsonl"
    with recording(emitter.url, out) as rec:
        assert asyncio.run(post(rec.url + "/chat/completions", CHAT))[0] == 200
        link = rec._rec.link if rec._rec else None
        assert link is not None
        deadline = time.monotonic() + 20  # the writer runs at a lower priority: on a busy machine it comes late
        while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 2):
            time.sleep(0.05)
        link.proc.kill()
        link.proc.wait()
        for _ in range(3):
            assert asyncio.run(post(rec.url + "/chat/completions", CHAT))[0] == 200
    assert rec.summary.lost and "the log writer stopped" in rec.summary.lost
    assert rec.summary.forwarded == 4
    load_trajectories(out)  # what it wrote before is whole


def test_an_upstream_nothing_answers_at_is_said_when_recording_starts(emitter: BackgroundEmitter) -> None:
    """The proxy started happily in front of a dead port and said so only at Ctrl-C, as a count of failures."""
    from tokenbench.cli.record import unreachable, upstream_root

    assert unreachable(upstream_root(emitter.url)) is None
    assert unreachable("http://127.0.0.1:9") is not None


@pytest.mark.engine
def test_a_server_of_its_own_to_record_through_then_replay_on(tmp_path: Path) -> None:
    """A user with no server yet, as docs/record.md says: `engines serve llama-server` until Ctrl-C, `record` in
    front of it, an agent's two turns through the proxy, then the log replayed on the same server. Each command
    ends at Ctrl-C with exit 0, and the served engine's process ends with it."""
    import psutil

    from conftest import need_engine

    need_engine("llama-server")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    serve = subprocess.Popen([sys.executable, "-m", "tokenbench", "engines", "serve", "llama-server", "--port", "0",
                              "--parallel", "2", "--ctx", "2048", "--cache-ram", "0"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    out = tmp_path / "mine.jsonl"
    try:
        assert serve.stdout is not None
        said = "".join(serve.stdout.readline() for _ in range(5))
        m = re.search(r"^  --url (\S+/v1)\n  record --upstream (\S+)\nCtrl-C stops", said, re.M)
        assert m and "serving tokenbench-tiny-llama with llama-server" in said, (said, serve.stderr and serve.stderr.read())
        assert max(len(line) for line in said.splitlines()) <= 80, said
        url, upstream = m.groups()
        # the port taken: refused in one line before anything starts (it once found the other server healthy)
        taken = subprocess.run([sys.executable, "-m", "tokenbench", "engines", "serve", "llama-server", "--port",
                                url.rsplit(":", 1)[1].removesuffix("/v1")], capture_output=True, text=True, env=env,
                               timeout=60)
        assert taken.returncode == 2 and "is taken: give another --port" in taken.stderr, taken.stderr
        served = psutil.Process(serve.pid).children(recursive=True)
        assert served, "the engine runs as the command's child"
        # --cache-ram reaches the server (a cache-cliff search wants only the slots to keep sessions)
        assert said.startswith("its host prompt cache off (--cache-ram)\n"), said
        assert any(" --cache-ram 0" in " ".join(p.cmdline()) for p in served), [p.cmdline() for p in served]
        record = subprocess.Popen([sys.executable, "-m", "tokenbench", "record", "--upstream", upstream, "--port",
                                   "0", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env)
        try:
            assert record.stdout is not None
            proxy = re.search(r"OPENAI_BASE_URL=(\S+/v1)", "".join(record.stdout.readline() for _ in range(3)))
            assert proxy
            messages = [{"role": "user", "content": "hello there"}]
            for _ in range(2):
                status, body = asyncio.run(post(proxy.group(1) + "/chat/completions",
                                                {**CHAT, "model": "tokenbench-tiny-llama", "messages": messages}))
                assert status == 200, body[:300]
                text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                               for line in body.decode().splitlines()
                               if line.startswith("data: {") and json.loads(line[6:])["choices"])
                messages = [*messages, {"role": "assistant", "content": text}, {"role": "user", "content": "go on"}]
        finally:
            record.send_signal(signal.SIGINT)
            rest, err = record.communicate(timeout=60)
        assert record.returncode == 0 and "recorded 2 requests in 1 session" in rest, (rest, err)
        code = main(["sweep", "--url", url, "--trace", str(out), "--max-think", "0s", "--guard", "off", "--quiet",
                     "--db", str(tmp_path / "r.db"), "--json", str(tmp_path / "r.json")])
        assert code == 0
        [level] = json.loads((tmp_path / "r.json").read_text())["levels"]
        assert level["completed"] == 2 and level["failed"] == 0 and level["replay"]["trees_finished"] == 1
    finally:
        serve.send_signal(signal.SIGINT)
        rest, err = serve.communicate(timeout=60)
    assert serve.returncode == 0 and "stopped the llama-server engine" in rest, (rest, err)
    assert not any(p.is_running() and p.status() != "zombie" for p in served), "the engine outlived the command"
