"""What each API sends: one set of OpenAI chat turns (as tokenbench builds them) becomes the body of Anthropic's
Messages API and of OpenAI's Responses API, faithfully (apis.py); a plain prompt is one user turn on each. And the
URL, the headers and the template-made body of each."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tokenbench.apis import APIS, messages_body, responses_body, to_anthropic, to_responses
from tokenbench.client import PreparedRequest, StreamClient

TOOL = {"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}
#: An agent's conversation as the chat API sends it: a system prompt, a task, a turn that says something and calls
#: two tools, their two results, the user again, a turn that only calls a tool, its result.
TURNS: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": [{"type": "text", "text": "Fix the bug "}, {"type": "text", "text": "in a.py"}]},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "b.py"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"},
    {"role": "tool", "tool_call_id": "call_2", "content": "print(2)"},
    {"role": "user", "content": "Go on."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_3", "type": "function", "function": {"name": "run", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "call_3", "content": "ok"},
]


def test_anthropic_turns_keep_every_turn_tool_call_and_result_in_order() -> None:
    system, turns = to_anthropic(TURNS)
    assert system == "You are a coding agent."
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "Fix the bug "}, {"type": "text", "text": "in a.py"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "a.py"}},
            {"type": "tool_use", "id": "call_2", "name": "read_file", "input": {"path": "b.py"}}]},
        # the results of one turn's calls: one user turn of tool_result blocks, right after it
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "print(1)"},
                                     {"type": "tool_result", "tool_use_id": "call_2", "content": "print(2)"}]},
        {"role": "user", "content": "Go on."},
        # arguments that are no JSON object keep their text
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_3", "name": "run",
                                           "input": {"arguments": "not json"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_3", "content": "ok"}]},
    ]


def test_responses_items_keep_every_turn_tool_call_and_result_in_order() -> None:
    instructions, items = to_responses(TURNS)
    assert instructions == "You are a coding agent."
    assert items == [
        {"role": "user", "content": [{"type": "input_text", "text": "Fix the bug "},
                                     {"type": "input_text", "text": "in a.py"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": '{"path": "a.py"}'},
        {"type": "function_call", "call_id": "call_2", "name": "read_file", "arguments": '{"path": "b.py"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "print(1)"},
        {"type": "function_call_output", "call_id": "call_2", "output": "print(2)"},
        {"role": "user", "content": "Go on."},
        {"type": "function_call", "call_id": "call_3", "name": "run", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "call_3", "output": "ok"},
    ]


def test_a_system_turn_later_in_the_conversation() -> None:
    turns = [{"role": "system", "content": "A."}, {"role": "user", "content": "hi"},
             {"role": "developer", "content": "B."}, {"role": "user", "content": "again"}]
    system, anthropic = to_anthropic(turns)
    assert system == "A.\n\nB." and [t["content"] for t in anthropic] == ["hi", "again"]  # Messages has no system turn
    instructions, items = to_responses(turns)
    assert instructions == "A." and items[1] == {"role": "developer", "content": "B."}  # Responses keeps it in place
    assert to_anthropic([{"role": "user", "content": "x"}]) == (None, [{"role": "user", "content": "x"}])


def test_bodies_carry_the_limit_the_sampling_the_tools_and_the_servers_fields() -> None:
    extras = {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "read_file"}}, "top_k": 1}
    m = messages_body("m", "", TURNS, 64, 0.0, extras, {"metadata": {"user_id": "u"}})
    assert (m["model"], m["stream"], m["max_tokens"], m["temperature"], m["top_k"]) == ("m", True, 64, 0.0, 1)
    assert m["system"] == "You are a coding agent." and m["metadata"] == {"user_id": "u"}
    assert m["tools"] == [{"name": "read_file", "description": "Read a file",
                           "input_schema": TOOL["function"]["parameters"]}]
    assert m["tool_choice"] == {"type": "tool", "name": "read_file"}
    assert "stream_options" not in m
    r = responses_body("m", "", TURNS, 64, None, extras)
    assert (r["max_output_tokens"], r["store"], r["instructions"]) == (64, False, "You are a coding agent.")
    assert "temperature" not in r and "max_tokens" not in r
    assert r["tools"] == [{"type": "function", "name": "read_file", "description": "Read a file",
                           "parameters": TOOL["function"]["parameters"]}]
    assert r["tool_choice"] == {"type": "function", "name": "read_file"}
    for choice, anthropic in (("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"})):
        assert messages_body("m", "p", None, 1, None, {"tool_choice": choice})["tool_choice"] == anthropic
        assert responses_body("m", "p", None, 1, None, {"tool_choice": choice})["tool_choice"] == choice


def test_a_plain_prompt_is_one_user_turn_on_each_api() -> None:
    assert messages_body("m", "hello", None, 8, 0.0)["messages"] == [{"role": "user", "content": "hello"}]
    assert responses_body("m", "hello", None, 8, 0.0)["input"] == "hello"  # the text input: one user turn
    assert "system" not in messages_body("m", "hello", None, 8, 0.0)


@pytest.mark.parametrize("api", APIS)
def test_each_api_posts_to_its_path_and_its_template_body_is_the_body(api: str) -> None:
    c = StreamClient(http=None, base_url="http://127.0.0.1:9/v1", model="m", api=api,  # type: ignore[arg-type]
                     api_key="k", body_extras={"ignore_eos": True})
    assert c.url == "http://127.0.0.1:9/v1/" + {"completions": "completions", "chat": "chat/completions",
                                                "messages": "messages", "responses": "responses"}[api]
    for req in (PreparedRequest('say "hi" \u4e16', 7), PreparedRequest("", 3, messages=TURNS),
                PreparedRequest("p", 5, extra_body={"min_tokens": 5})):
        assert c.payload(req) == json.dumps(c.body(req)).encode()
    headers = c.headers()
    assert headers["Authorization"] == "Bearer k"
    assert ("x-api-key" in headers, "anthropic-version" in headers) == (api == "messages", api == "messages")
