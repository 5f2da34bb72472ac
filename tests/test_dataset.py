"""dataset.py: prompts from a file, every byte typed at one boundary; a malformed file refused in one line that
names the file, the line and the field; well-formed items that cannot be sent skipped and counted."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.dataset import PromptItem, load, measure
from tokenbench.emitter import BackgroundEmitter
from tokenbench.errors import UsageError
from tokenbench.store import Store

DATA = Path(__file__).parent / "data"


def refused(tmp_path: Path, text: str | bytes, api: str = "completions", name: str = "data.jsonl") -> str:
    """The one-line refusal of a file holding ``text``."""
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UsageError) as e:
        load(p, api)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(p))
    return msg[len(str(p)):]


# --- the three shapes, and what is skipped -------------------------------------------------------------------

def test_prompt_lines_with_their_output_lengths() -> None:
    ds = load(DATA / "prompts.jsonl")
    assert ds.read == 8 and ds.used == 7 and ds.skipped == (("empty prompt", 1),)
    assert ds.summary() == "read 8 items, used 7, skipped 1: 1 empty prompt"
    by_line = {i.line: i for i in ds.items}
    assert set(by_line) == {1, 2, 3, 4, 6, 8, 9}  # the blank line 7 is no item; line numbers stay the file's
    assert [by_line[n].output_len for n in (1, 2, 3, 4, 6, 8, 9)] == [None, 24, 12, 40, None, 16, None]
    assert all(i.kind == "prompt" and i.messages == () for i in ds.items)
    assert by_line[4].text().startswith("Summarise the plot") and by_line[4].wire_messages() is None
    assert ds.sha256 == hashlib.sha256((DATA / "prompts.jsonl").read_bytes()).hexdigest()


def test_chat_items_and_request_logs() -> None:
    ds = load(DATA / "chat.jsonl", "chat")
    assert ds.summary() == "read 7 items, used 5, skipped 2: 1 with no user turn, 1 with non-text content"
    first, log, transcript, parts, tools = ds.items
    assert first.wire_messages() == [{"role": "system", "content": "You answer in one sentence."},
                                     {"role": "user", "content": "Why do cats purr?"}]
    assert first.output_len == 20 and log.output_len == 8 and parts.output_len == 30 and tools.output_len == 12
    # a transcript's last assistant turn is its reply: not sent, its token count is the output length
    assert transcript.output_len is None and transcript.reply is not None and transcript.reply.startswith("Nothing")
    assert [m["role"] for m in transcript.wire_messages() or []] == ["user"]
    assert parts.wire_messages() == [{"role": "user", "content": [{"type": "text",
                                                                   "text": "Describe a quiet harbour at dawn."}]}]
    wire = tools.wire_messages() or []
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "user"]
    assert wire[1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Lisbon"}'}}]}
    assert wire[2]["tool_call_id"] == "call_1"


def test_chat_items_need_the_chat_api(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r'chat\.jsonl:1: "messages" items are conversations: run with --api chat \(or messages, responses\)'):
        load(DATA / "chat.jsonl", "completions")


def test_sharegpt_list_on_chat_and_on_completions() -> None:
    chat = load(DATA / "sharegpt.json", "chat")
    assert chat.summary() == "read 7 items, used 5, skipped 2: 2 with no user turn"
    lines = [i.line for i in chat.items]
    assert lines == sorted(lines) and all(i.kind == "sharegpt" for i in chat.items)
    egg, haiku, moons, kitten, autumn = chat.items
    # the turns before the first reply are sent; the first reply is the output length, as vllm bench serve reads it
    assert [m["role"] for m in haiku.wire_messages() or []] == ["system", "user"]
    assert haiku.reply == "A three-line poem of five, seven and five syllables."
    assert moons.wire_messages() == [{"role": "user", "content": "Name two moons of Jupiter."}]
    assert moons.reply == "Io and Europa."
    assert autumn.reply is None  # no reply: --output-len applies
    # completions: one human turn is sent as its text; a system turn needs --api chat
    comp = load(DATA / "sharegpt.json", "completions")
    assert comp.summary() == ("read 7 items, used 4, skipped 3: 2 with no user turn, 1 with a system turn or "
                              "several turns (--api chat sends them)")
    assert comp.items[0].text() == "How do I boil an egg so the yolk stays soft?"


def test_sharegpt_as_json_lines(tmp_path: Path) -> None:
    items = json.loads((DATA / "sharegpt.json").read_text())
    p = tmp_path / "sg.jsonl"
    p.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    ds = load(p, "chat")
    assert ds.used == 5 and [i.line for i in ds.items] == [1, 3, 4, 6, 7]


def test_a_run_shuffles_with_its_seed() -> None:
    ds = load(DATA / "prompts.jsonl")
    a, b, c = ds.shuffled(1), ds.shuffled(1), ds.shuffled(2)
    assert a == b and a != c and sorted(i.line for i in a) == sorted(i.line for i in ds.items)
    assert [i.line for i in ds.items] == [1, 2, 3, 4, 6, 8, 9]  # the loaded order stays the file's


def test_measure_counts_each_text_alone() -> None:
    class Words:
        async def encode(self, text: str) -> list[int]:
            return list(range(len(text.split())))

    item = PromptItem(1, "chat", messages=load(DATA / "chat.jsonl", "chat").items[0].messages, reply="one two three")
    assert asyncio.run(measure(item, Words())) == (5 + 4, 3)


def test_the_manifest_record(tmp_path: Path) -> None:
    d = load(DATA / "chat.jsonl", "chat").describe()
    assert d["read"] == 7 and d["used"] == 5 and d["skipped"] == {"with no user turn": 1,
                                                                   "with non-text content": 1}
    assert d["kinds"] == {"chat": 5} and d["output_from_file"] == 5 and len(d["sha256"]) == 64


def test_tools_definitions_are_said_to_be_left_out(tmp_path: Path) -> None:
    p = tmp_path / "log.jsonl"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}))
    assert load(p, "chat").notes == ("1 items' tool definitions (tools) are not sent",)


def test_a_byte_order_mark_and_crlf_are_text(tmp_path: Path) -> None:
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\r\n{"prompt": "b"}\r\n')
    assert [i.prompt for i in load(p).items] == ["a", "b"]


def test_unescaped_line_separator_inside_a_string(tmp_path: Path) -> None:
    p = tmp_path / "ls.jsonl"
    p.write_text('{"prompt": "one\u2028two"}\n{"prompt": "three"}\n')
    assert [i.line for i in load(p).items] == [1, 2]


# --- every malformed kind: one line, file:line: field ---------------------------------------------------------

def test_not_json(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": "a"}\n{"prompt": "b",}\n') == \
        ":2: not JSON (Expecting property name enclosed in double quotes at column 16)"


def test_more_than_one_value_on_a_line(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": "a"} {"prompt": "b"}\n').startswith(":1: not JSON (more after the item")


def test_nan_is_not_json(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": "a", "max_tokens": NaN}\n') == ":1: not JSON (NaN is not a number JSON allows)"


def test_nested_too_deep(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": ' + "[" * 100_000 + "\n") == ":1: not JSON (nested too deep)"


def test_one_object_over_several_lines(tmp_path: Path) -> None:
    assert refused(tmp_path, '{\n  "prompt": "a"\n}\n').startswith(":1: one JSON object over several lines")


def test_not_an_object(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": "a"}\n["a", "b"]\n') == ":2: the item is a list, not an object"
    assert refused(tmp_path, '"just text"\n') == ":1: the item is a string, not an object"


def test_missing_prompt_and_messages(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"text": "a"}\n') == ':1: the item has no "prompt", "messages" or "conversations"'


def test_prompt_not_a_string(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": [1, 2, 3]}\n') == ':1: "prompt" is a list, not a string'


def test_messages_not_a_list(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"messages": "hello"}\n', "chat") == ':1: "messages" is a string, not a list'


def test_a_message_not_an_object(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"messages": ["hello"]}\n', "chat") == ':1: "messages"[0] is a string, not an object'


def test_a_message_without_role(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"messages": [{"content": "hi"}]}\n', "chat") == ':1: "messages"[0] has no "role"'


def test_a_message_without_content(tmp_path: Path) -> None:
    text = '{"messages": [{"role": "system", "content": "x"}, {"role": "user"}]}\n'
    assert refused(tmp_path, text, "chat") == ':1: "messages"[1] has no "content"'


def test_a_role_not_allowed(tmp_path: Path) -> None:
    text = '{"messages": [{"role": "robot", "content": "beep"}]}\n'
    assert refused(tmp_path, text, "chat") == \
        ':1: "messages"[0].role is "robot", not one of system, developer, user, assistant, tool'


def test_content_of_another_type(tmp_path: Path) -> None:
    text = '{"messages": [{"role": "user", "content": 42}]}\n'
    assert refused(tmp_path, text, "chat") == \
        ':1: "messages"[0].content is a number, not a string or a list of text parts'


def test_a_tool_call_without_a_function(tmp_path: Path) -> None:
    text = '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{"id": "x"}]}]}\n'
    assert refused(tmp_path, text, "chat") == ':1: "messages"[1].tool_calls[0] has no "function" object'


@pytest.mark.parametrize(("value", "shown"), [("-3", "-3"), ("0", "0"), ('"ten"', '"ten"'), ("2.5", "2.5"),
                                              ("true", "true"), ("[8]", "a list")])
def test_max_tokens_not_a_positive_integer(tmp_path: Path, value: str, shown: str) -> None:
    assert refused(tmp_path, '{"prompt": "a"}\n{"prompt": "b", "max_tokens": %s}\n' % value) == \
        f':2: "max_tokens" is {shown}, not a positive whole number of tokens'


def test_max_tokens_past_any_context(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": "b", "output_len": 100000000000}\n') == \
        ':1: "output_len" is 100000000000, not a positive whole number of tokens (at most 16,777,216)'


def test_an_empty_file(tmp_path: Path) -> None:
    assert refused(tmp_path, "") == ": the file is empty: write one JSON item per line, or a JSON list of items"
    assert refused(tmp_path, "\n  \n").startswith(": the file is empty")


def test_an_empty_list(tmp_path: Path) -> None:
    assert refused(tmp_path, "[\n]\n", name="d.json") == ":2: the list is empty: it holds no items"


def test_a_binary_file(tmp_path: Path) -> None:
    # a PNG after a first good line: its header holds line breaks, its first NUL is on line 4
    assert refused(tmp_path, b'{"prompt": "a"}\n\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR') == \
        ":4: a NUL byte: a binary file, not JSON lines or JSON"


def test_not_utf8(tmp_path: Path) -> None:
    assert refused(tmp_path, b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n') == \
        ":2: not UTF-8 text (byte 0xe9): a binary file?"


def test_sharegpt_conversations_not_a_list(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"conversations": {"from": "human"}}\n') == \
        ':1: "conversations" is an object, not a list'


def test_sharegpt_turn_without_value(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"conversations": [{"from": "human"}]}\n') == ':1: "conversations"[0] has no "value"'


def test_sharegpt_speaker_not_allowed(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"conversations": [{"from": "narrator", "value": "x"}]}\n') == \
        ':1: "conversations"[0].from is "narrator", not one of human, gpt, system'


def test_a_list_item_names_its_own_line(tmp_path: Path) -> None:
    text = '[\n  {"conversations": [{"from": "human", "value": "a"}]},\n  {"conversations": "x"}\n]\n'
    assert refused(tmp_path, text, name="d.json") == ':3: "conversations" is a string, not a list'


def test_a_fault_inside_a_list_item_names_its_own_line(tmp_path: Path) -> None:
    text = '[\n {"conversations": [\n  {"from": "human",\n   "value": "a" "b"}]}\n]\n'
    assert refused(tmp_path, text, name="d.json") == ":4: not JSON (Expecting ',' delimiter at column 17)"


def test_a_big_list_is_read_in_one_pass(tmp_path: Path) -> None:
    """ShareGPT_V3 is 673 MB in one JSON list: each item's line is counted on from the last (counting from the
    start for every item was quadratic: hours for that file)."""
    import time

    p = tmp_path / "big.json"
    turn = {"from": "human", "value": "word " * 200}
    p.write_text(json.dumps([{"conversations": [turn]}] * 20_000, indent=1))  # 22 MB, 8 lines an item
    t = time.perf_counter()
    ds = load(p)
    assert ds.used == 20_000 and [i.line for i in ds.items[:2]] == [2, 10] and ds.items[-1].line == 2 + 8 * 19_999
    assert time.perf_counter() - t < 10


def test_a_broken_list(tmp_path: Path) -> None:
    assert refused(tmp_path, '[{"prompt": "a"}\n {"prompt": "b"}]', name="d.json") == \
        ":2: not JSON (expected ',' or ']' after an item)"
    assert refused(tmp_path, '[{"prompt": "a"}] x', name="d.json") == ":1: not JSON (more after the list's end)"


def test_nothing_usable(tmp_path: Path) -> None:
    assert refused(tmp_path, '{"prompt": ""}\n{"prompt": " "}\n') == \
        ": no item can be sent (read 2 items, used 0, skipped 2: 2 empty prompt)"


def test_a_file_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^--dataset .*missing\.jsonl: cannot read it \(No such file or directory\)"):
        load(tmp_path / "missing.jsonl")


# --- the command line -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "message"), [
    ('{"messages": "hi"}\n', ':1: "messages" is a string, not a list'),
    ('{"prompt": "a", "max_tokens": 0}\n', ':1: "max_tokens" is 0, not a positive whole number of tokens'),
    (b"\x00\x01", ":1: a NUL byte: a binary file, not JSON lines or JSON"),
])
def test_the_cli_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | bytes,
                                        message: str) -> None:
    p = tmp_path / "data.jsonl"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    # --url: refused before any server is asked (the address is never reached)
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--api", "chat", "--dataset", str(p), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err == f"tokenbench: error: {p}{message}\n"


@pytest.mark.parametrize("extra", [["--input-len", "64"], ["--shape", "short"], ["--prefix-len", "4"]])
def test_the_cli_refuses_synthetic_lengths_beside_a_dataset(extra: list[str],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--dataset", str(DATA / "prompts.jsonl"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("tokenbench: error: --dataset's prompts are its own") and err.count("\n") == 1


# --- through a sweep (the emitter counts words: its /tokenize and its usage agree) --------------------------

def test_a_prompt_file_sweep_sends_each_item_with_its_own_output(emitter: BackgroundEmitter, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    code = main(["sweep", "--url", emitter.url, "--dataset", str(DATA / "prompts.jsonl"), "--output-len", "10",
                 "--concurrency", "1,2", "--requests", "7", "--warmup", "0", "--seed", "3", "--guard", "off",
                 "--json", str(out)])
    std = capsys.readouterr()
    assert code == 0, std.err
    err = " ".join(std.err.split())
    assert "prompts.jsonl: read 8 items, used 7, skipped 1: 1 empty prompt" in err  # said as the run starts
    out_text = " ".join(std.out.split())
    assert "output from the file for 4 of them, else 10 tokens" in out_text
    items = {i.prompt: i for i in load(DATA / "prompts.jsonl").items}
    bodies = emitter.emitter.requests_seen[1:]
    assert len(bodies) == 14
    for b in bodies:
        item = items[b["prompt"]]  # the file's text, as it is
        assert b["max_tokens"] == b["min_tokens"] == (item.output_len or 10)
    # 14 requests from 7 items: every item in the first level, in the seed's order, then the same again. The
    # second level's order is as they reached the server: at concurrency 2 a request that waits for a new
    # connection can be overtaken by one sent on the pooled connection (the lean send path writes at once)
    order = [b["prompt"] for b in bodies]
    assert sorted(order[:7]) == sorted(items) and sorted(order[7:]) == sorted(order[:7])
    assert "the dataset's 7 items are used up: from request 8 on they repeat" in err
    assert order[:7] == [i.prompt for i in load(DATA / "prompts.jsonl").shuffled(3)]
    doc = json.loads(out.read_text())
    wl = doc["manifest"]["workload"]
    assert wl["input_len"] is None and wl["dataset"]["used"] == 7 and wl["dataset"]["skipped"] == {"empty prompt": 1}
    assert wl["dataset"]["path"] == str(DATA / "prompts.jsonl") and len(wl["dataset"]["sha256"]) == 64
    assert all(lv["failed"] == 0 and "output_short" not in lv["flags"] for lv in doc["levels"])
    recs = Store().requests(doc["run_id"])
    issued = order[:7] * 2  # each level hands the items out in the seed's order (the first level shows it)
    assert all(r.input_tokens == r.expected_input_tokens == len(r_prompt.split())
               for r, r_prompt in zip(sorted(recs, key=lambda r: r.index), issued))


def test_a_chat_file_sweep_sends_the_conversations(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    code = main(["sweep", "--url", emitter.url, "--api", "chat", "--dataset", str(DATA / "chat.jsonl"),
                 "--output-len", "6", "--concurrency", "1", "--requests", "5", "--warmup", "0", "--guard", "off",
                 "--quiet"])
    assert code == 0
    sent = [b["messages"] for b in emitter.emitter.requests_seen[1:]]
    wanted = [i.wire_messages() for i in load(DATA / "chat.jsonl", "chat").items]
    assert sorted(map(json.dumps, sent)) == sorted(map(json.dumps, wanted))
    # the transcript's reply (10 words by the emitter's count) is its output length
    by_first = {json.dumps(b["messages"][0]): b["max_tokens"] for b in emitter.emitter.requests_seen[1:]}
    assert by_first[json.dumps({"role": "user", "content": "Give me a word that rhymes with orange."})] == 10


def test_prompt_items_on_the_chat_api_are_one_user_message(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    assert main(["sweep", "--url", emitter.url, "--api", "chat", "--dataset", str(DATA / "prompts.jsonl"),
                 "--concurrency", "1", "--requests", "2", "--warmup", "0", "--guard", "off", "--quiet"]) == 0
    prompts = {i.prompt for i in load(DATA / "prompts.jsonl").items}
    for b in emitter.emitter.requests_seen[1:]:
        (m,) = b["messages"]
        assert m["role"] == "user" and m["content"] in prompts


def test_an_item_longer_than_the_servers_context_is_warned_of_and_counted(emitter: BackgroundEmitter,
                                                                           tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """vLLM lists its max_model_len and refuses a longer request with a 400: the first such item is said as it is
    prepared, each counts as a failed request, and the level says why."""
    emitter.configure(max_model_len=64)
    f = tmp_path / "p.jsonl"
    rows = [{"prompt": "a short question about rivers"}] * 3 + [{"prompt": " ".join(["word"] * 80)}] * 2
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run.json"
    code = main(["sweep", "--url", emitter.url, "--dataset", str(f), "--output-len", "8", "--concurrency", "1",
                 "--requests", "5", "--warmup", "0", "--guard", "off", "--no-metrics", "--max-error-rate", "0.5",
                 "--json", str(out)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0, err
    said = "a dataset item of 80 prompt tokens and 8 out passes the 64 tokens of context the server gives a request"
    assert err.count(said) == 1, err  # once, for the first such item
    lv = json.loads(out.read_text())["levels"][0]
    assert (lv["completed"], lv["failed"]) == (3, 2)
    assert "slots_exceeded" in lv["flags"]
    why = next(x for x in lv["findings"] if x["code"] == "slots_exceeded")
    assert "88 tokens of context but the server's max_model_len is 64" in why["message"], why
