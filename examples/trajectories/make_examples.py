"""Writes the small example trajectory files beside it: made-up sessions in the shapes of the real formats (see
README.md here), small enough to check by hand. Run it from anywhere: ``python examples/trajectories/make_examples.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def ids(a: int, b: int) -> list[int]:
    return list(range(a, b + 1))


def weka() -> dict[str, Any]:
    """One Claude Code session, 64-token blocks: a streamed call without api_time, a completed subagent (``t`` its
    return), an async one, and a call whose hash ids are ceil-rounded."""
    def call(t: float, kind: str, n_in: int, n_out: int, hids: list[int], api: float | None, think: float,
             **more: Any) -> dict[str, Any]:
        d = {"t": t, "type": kind, "model": "claude-example", "in": n_in, "out": n_out, "hash_ids": hids,
             "input_types": ["tool_result"], "output_types": ["text", "tool_use"], "stop": "tool_use",
             "think_time": think, **more}
        if api is not None:
            d["api_time"] = api
        return d

    explore = {"t": 20.0, "type": "subagent", "agent_id": "agent_001", "subagent_type": "Explore",
               "duration_ms": 6000, "total_tokens": 730, "tool_use_count": 1, "status": "completed",
               "models": ["claude-example"], "tool_tokens": 0, "system_tokens": 0,
               "requests": [call(0.0, "n", 300, 20, ids(16, 19), 1.0, 0.0),
                            call(3.0, "n", 400, 10, ids(16, 21), 2.5, 2.0)]}
    background = {"t": 14.2, "type": "subagent", "agent_id": "agent_002", "subagent_type": "general-purpose",
                  "duration_ms": None, "total_tokens": None, "tool_use_count": None, "status": "async_launched",
                  "models": ["claude-example"], "tool_tokens": 0, "system_tokens": 0,
                  "requests": [call(0.0, "n", 128, 5, [30, 31], 0.5, 0.0)]}
    return {"id": "example-session", "models": ["claude-example"], "block_size": 64, "hash_id_scope": "local",
            "tool_tokens": 400, "system_tokens": 200,
            "requests": [call(0.0, "n", 700, 50, ids(1, 10), 2.0, 0.0),
                         call(5.0, "s", 900, 40, ids(1, 14), None, 3.0),
                         call(12.0, "n", 1000, 30, ids(1, 15), 1.5, 10.0),  # think counts from the first call's end
                         explore, background,
                         call(22.0, "n", 1300, 60, ids(1, 15) + ids(40, 45), 3.0, 8.5),  # ceil: 21 ids
                         call(30.0, "n", 1400, 10, ids(1, 15) + ids(40, 45), 1.0, 5.0)],  # floor: 21 ids
            "totals": {"subagent_count": 2}}


def agents(n: int = 12, seed: int = 2026) -> list[dict[str, Any]]:
    """``n`` Claude Code sessions in the Weka format, shaped as the public traces at about an eighth of their size:
    a system prompt and tools of 6-12K tokens, 15-35 calls each growing the context by a tool result of 30-400
    tokens and the answer before it (93% of all prompt tokens in blocks sent before; the public set: 96%), answers
    of 30-300 tokens, pauses of 0.25-30 s; three sessions fan out subagents after one call (one four at once), each
    sharing its parent's system prompt blocks."""
    import random

    rng = random.Random(seed)

    def session(k: int, start_id: int, calls: int, t0: float = 0.0) -> tuple[list[dict[str, Any]], int]:
        hids = list(range(start_id, start_id + rng.randint(96, 192)))  # the system prompt and tools
        nxt, t, out = hids[-1] + 1, t0, []
        for c in range(calls):
            if c:
                grow = (rng.randint(30, 400) + out[-1]["out"]) // 64 + 1
                hids = hids + list(range(nxt, nxt + grow))
                nxt += grow
            n_in = 64 * len(hids) + rng.randint(0, 63)  # floor: the last partial block is an unhashed tail
            api = round(0.5 + n_in / 40000 + rng.uniform(0.5, 4.0), 2)
            think = round(rng.choice([0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 20.0]) * rng.uniform(0.5, 1.5), 2) if c else 0.0
            t = round(t + (out[-1]["api_time"] if out else 0.0) + think, 2)
            out.append({"t": t, "type": rng.choice("nsn"), "model": "claude-example", "in": n_in,
                        "out": rng.randint(30, 300), "hash_ids": list(hids), "api_time": api, "think_time": think,
                        "stop": "tool_use" if c + 1 < calls else "end_turn"})
        return out, nxt

    traces = []
    for k in range(n):
        requests, nxt = session(k, 1, rng.randint(15, 35))
        fan = {2: 1, 5: 2, 9: 4}.get(k, 0)  # subagents launched together after one call of three sessions
        if fan:
            anchor = len(requests) // 2
            end = requests[anchor]["t"] + requests[anchor]["api_time"]
            subs, longest = [], 0.0
            for j in range(fan):
                calls, nxt = session(k, nxt, rng.randint(3, 6))
                base = calls[0]["hash_ids"][:0] + requests[0]["hash_ids"][:32]  # the parent's system prompt
                for c in calls:
                    c["hash_ids"] = base + c["hash_ids"][32:]
                    c["in"] = 64 * len(c["hash_ids"]) + rng.randint(0, 63)
                dur = calls[-1]["t"] + calls[-1]["api_time"] + 0.5
                longest = max(longest, dur)
                subs.append({"t": round(end + 0.5 + dur, 2), "type": "subagent", "agent_id": f"agent_{j:03d}",
                             "subagent_type": "Explore", "status": "completed", "duration_ms": int(dur * 1000),
                             "requests": calls})
            shift = end + 0.5 + longest + 1.0 - requests[anchor + 1]["t"] + requests[anchor + 1]["think_time"]
            for r in requests[anchor + 1:]:
                r["t"] = round(r["t"] + max(0.0, shift), 2)
            requests[anchor + 1]["think_time"] = 1.0
            requests = requests[: anchor + 1] + subs + requests[anchor + 1:]
        traces.append({"id": f"agents-{k:02d}", "models": ["claude-example"], "block_size": 64,
                       "hash_id_scope": "local", "requests": requests})
    return traces


def mlcommons() -> list[dict[str, Any]]:
    bash = {"type": "function", "function": {"name": "bash", "description": "Run a shell command",
                                             "parameters": {"type": "object", "properties": {
                                                 "command": {"type": "string"}}, "required": ["command"]}}}

    def tc(i: int, cmd: str) -> dict[str, Any]:
        return {"id": f"functions.bash:{i}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}

    def res(i: int, out: str) -> dict[str, Any]:
        return {"tool_call_id": f"functions.bash:{i}", "content": f"<returncode>0</returncode>\n<output>{out}</output>"}

    a = "swe-example-1"
    b = "swe-example-2"
    return [
        {"conversation_id": a, "turn": 1, "role": "user", "system": "You are a helpful coding agent.",
         "content": "Fix the failing test in utils.py.", "tools": [bash]},
        {"conversation_id": a, "turn": 2, "role": "assistant", "reasoning_content": "Look at the file first.",
         "tool_calls": [tc(0, "cat utils.py")]},
        {"conversation_id": a, "turn": 3, "role": "tool", "tool_results": [res(0, "def add(a, b): return a - b")],
         "delay_seconds": 0.5},
        {"conversation_id": a, "turn": 4, "role": "assistant", "reasoning_content": "Patch it and run the tests.",
         "tool_calls": [tc(1, "sed -i s/a - b/a + b/ utils.py"), tc(2, "pytest -q")]},
        {"conversation_id": a, "turn": 5, "role": "tool", "tool_results": [res(1, ""), res(2, "1 passed")],
         "delay_seconds": 1.25},
        {"conversation_id": a, "turn": 6, "role": "assistant", "content": "Fixed: add() subtracted."},
        {"conversation_id": a, "turn": 7, "role": "user", "content": "Thanks. Run the whole suite too.",
         "delay_seconds": 4.0},
        {"conversation_id": a, "turn": 8, "role": "assistant", "content": "All 12 tests pass."},
        {"conversation_id": b, "turn": 1, "role": "user", "content": "List the files.", "tools": [bash]},
        {"conversation_id": b, "turn": 2, "role": "assistant", "tool_calls": [tc(0, "ls")]},
        {"conversation_id": b, "turn": 3, "role": "tool", "tool_results": [res(0, "README.md utils.py")],
         "delay_seconds": 0.25},
        {"conversation_id": b, "turn": 4, "role": "user", "content": "Just the Python ones.", "delay_seconds": 2.0},
        {"conversation_id": b, "turn": 5, "role": "assistant", "content": "utils.py"},
    ]


def tracelab() -> list[dict[str, Any]]:
    def row(sid: str, idx: int, total: int, prefix: int, out: int, events: list[tuple[str, str]],
            tools: tuple[tuple[str, int, int | None], ...] = ()) -> dict[str, Any]:
        provider = sid.split(":")[0]
        return {"provider": provider, "session_id": sid, "round_index": idx, "round_id": f"r{idx}",
                "model": f"{provider}-example", "input_tokens_total": total, "prefix_tokens": prefix,
                "newly_append_tokens": total - prefix, "output_tokens": out,
                "timing_events": [{"event_type": k, "timestamp": f"2026-06-01T{t}Z", "source": "example"}
                                  for k, t in events],
                "tools": [{"tool_index": i, "tool_name": n, "tool_call_id": f"t{i}", "input_chars": 10,
                           "result_chars": 100, "tool_wall_latency_ms": w, "tool_internal_latency_ms": m,
                           "is_error": False} for i, (n, w, m) in enumerate(tools)],
                "current_input_event_count": 1, "store": f".{provider}", "trace_key": f"{sid}:{idx}"}

    c, x = "claude:example-a", "codex:example-b"
    return [
        row(c, 0, 1000, 0, 100, [("user_message", "10:00:00.000"), ("text", "10:00:04.000"),
                                 ("tool_call", "10:00:05.000")], (("Bash", 1500, None),)),
        row(x, 0, 500, 0, 20, [("user_message", "10:00:02.000"), ("reasoning", "10:00:03.000"),
                               ("tool_call", "10:00:03.500"), ("usage_report", "10:00:03.600")],
            (("exec_command", 1400, 1000),)),
        row(c, 1, 1300, 1000, 50, [("tool_result", "10:00:06.500"), ("text", "10:00:08.000")]),
        row(x, 1, 900, 256, 40, [("tool_result", "10:00:09.000"), ("text", "10:00:09.500")]),  # sent after idx 2
        row(x, 2, 700, 448, 30, [("tool_result", "10:00:05.000"), ("text", "10:00:06.000")]),
        row(x, 3, 950, 896, 10, []),  # no timestamped event: skipped
        row(c, 2, 1500, 1300, 70, [("user_message", "10:01:00.000"), ("text", "10:01:03.000")]),
    ]


def session_log(lengths_only: bool) -> list[dict[str, Any]]:
    system = {"role": "system", "content": "You are a coding agent."}
    task = {"role": "user", "content": "Find where the config is read, then summarise."}
    spawn = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "task", "arguments": "{\"goal\": \"find config\"}"}}]}
    spawned = {"role": "tool", "tool_call_id": "call_1", "content": "config is read in settings.py"}
    done = {"role": "assistant", "content": "It is read in settings.py."}
    thanks = {"role": "user", "content": "Thanks."}
    sub_sys = {"role": "system", "content": "You explore a codebase."}
    sub_task = {"role": "user", "content": "find config"}
    read = {"role": "assistant", "content": None, "reasoning_content": "Grep first.", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\": \"config\"}"}}]}
    grep = {"role": "tool", "tool_call_id": "call_a", "content": "settings.py:3: config = load()"}
    found = {"role": "assistant", "content": "settings.py"}
    tools = [{"type": "function", "function": {"name": "task", "parameters": {"type": "object", "properties": {}}}}]
    # (session, parent, sent, first byte, end, pause, messages, response, usage, hash ids (16-token blocks, ceil))
    rows = [("main", None, 0.0, 0.4, 2.0, None, [system, task], spawn, (40, 30, 0), [1, 2, 3]),
            ("main/explore", "main", 2.5, 2.7, 3.5, None, [sub_sys, sub_task], read, (20, 20, 0), [50, 51]),
            ("main/explore", "main", 4.0, 4.1, 5.0, 0.5, [sub_sys, sub_task, read, grep], found, (36, 15, 16),
             [50, 51, 52]),
            ("main", None, 6.0, 6.3, 7.0, 4.0, [system, task, spawn, spawned], done, (56, 25, 32), [1, 2, 3, 4]),
            ("main", None, 9.0, 9.2, 10.0, 2.0, [system, task, spawn, spawned, done, thanks],
             {"role": "assistant", "content": "You're welcome."}, (64, 5, 48), [1, 2, 3, 4])]
    head: dict[str, Any] = {"format": "tokenbench-session-log", "version": 1, "lengths_only": lengths_only,
                            "started_at": "2026-05-01T09:00:00Z"}
    if lengths_only:
        head.update(block_size=16, rounding="ceil")
    out = [head]
    for sid, parent, sent, first, end, pause, msgs, resp, (p, c, cached), hids in rows:
        line: dict[str, Any] = {"session": sid, "parent": parent, "sent": sent, "first_byte": first, "end": end,
                                "pause": pause, "usage": {"prompt_tokens": p, "completion_tokens": c,
                                                          "cached_tokens": cached}}
        if lengths_only:
            line["hash_ids"] = hids
        else:
            line["request"] = {"messages": msgs, "tools": tools, "tool_choice": "auto"}
            line["response"] = resp
        out.append(line)
    return out


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def main() -> None:
    (HERE / "weka-claude-code.json").write_text(json.dumps(weka(), separators=(",", ":")) + "\n")
    (HERE / "mlcommons-agentic.jsonl").write_text(jsonl(mlcommons()))
    (HERE / "tracelab-rounds.jsonl").write_text(jsonl(tracelab()))
    (HERE / "session-log.jsonl").write_text(jsonl(session_log(False)))
    (HERE / "session-log-lengths.jsonl").write_text(jsonl(session_log(True)))
    folder = HERE / "agents"
    folder.mkdir(exist_ok=True)
    for trace in agents():
        (folder / f"{trace['id']}.json").write_text(json.dumps(trace, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
