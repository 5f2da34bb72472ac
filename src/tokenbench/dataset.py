"""Prompts from a file (``sweep --dataset FILE``): the one typed boundary between a user's data and a run. Every
byte of the file becomes typed values here (``PromptItem``, ``Message``, ``Dataset``), or the file is refused in one line
that names the file, the line and the field (``data.jsonl:17: "messages" is a string, not a list``).

Shapes read, one item per line (JSON lines) or as one JSON list (as the ShareGPT_V3 file ships):

- ``{"prompt": "..."}``: a completion prompt, sent with either API (chat wraps it as one user message). Its output
  length, where it has one: ``max_tokens``, ``max_completion_tokens`` or ``output_len``. A logged /v1/completions
  request body is such an item (its ``model`` and sampling fields are not sent: the run sets its own).
- ``{"messages": [{"role": ..., "content": ...}, ...]}``: OpenAI chat, sent as it is; needs ``--api chat``. A
  logged /v1/chat/completions body is such an item. A trailing assistant turn is the reply: it is not sent, and
  its token count is the output length where the item gives none.
- ``{"conversations": [{"from": "human" | "gpt" | "system", "value": ...}, ...]}`` (ShareGPT): the turns before
  the first reply are sent and the reply's token count is the output length, as ``vllm bench serve`` reads
  ShareGPT. With ``--api completions`` an item whose prompt is one human turn is sent as its text (as vllm bench
  serve does); one with a system turn or several turns needs ``--api chat`` and is skipped.

A well-formed item that cannot be sent (no user turn, an empty prompt, an empty reply, an image) is skipped and
counted by reason; a run states what it read, used and skipped. The file's order is kept here; a run shuffles the
items with its seed (``Dataset.shuffled``). A request's expected input is its text as the run's tokenizer counts it
(``measure``): for chat items the server's template adds tokens, so there it is a floor, and the server's
``usage.prompt_tokens`` is what a level reports.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from .apis import CONVERSATIONAL
from .jsontext import json_fault
from .chat import ROLES, Message, Role, ToolCall
from .errors import UsageError

#: ShareGPT's speakers (its files name the model after the service the turn was taken from).
SHAREGPT_ROLES: dict[str, Role] = {"human": "user", "user": "user", "system": "system", "gpt": "assistant",
                                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
                                   "assistant": "assistant", "model": "assistant"}
#: Where an item gives its output length, first found wins (a request log's max_tokens; newer OpenAI bodies'
#: max_completion_tokens; a data set's own output_len).
OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "output_len")
#: The largest output length a file may ask for: beyond any served context, so a typo, not a length.
MAX_OUTPUT_TOKENS = 1 << 24

Kind = Literal["prompt", "chat", "sharegpt"]

NO_USER = "with no user turn"
EMPTY_PROMPT = "empty prompt"
EMPTY_REPLY = "with an empty reply"
NOT_TEXT = "with non-text content"
NEEDS_CHAT = "with a system turn or several turns (--api chat sends them)"


class Encoder(Protocol):
    async def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class PromptItem:
    """One request's prompt from the file. ``line``: where it starts in the file. ``output_len``: the length the
    file gives; ``reply``: the answer whose token count is the output length where it gives none (None: neither,
    the run's --output-len applies)."""

    line: int
    kind: Kind
    prompt: str | None = None
    messages: tuple[Message, ...] = ()
    output_len: int | None = None
    reply: str | None = None

    def text(self) -> str:
        """The prompt as /v1/completions sends it: the prompt, or the text of a ShareGPT item's one human turn."""
        if self.prompt is not None:
            return self.prompt
        return "".join(self.messages[0].texts()) if len(self.messages) == 1 else ""

    def wire_messages(self) -> list[dict[str, Any]] | None:
        """The messages as /v1/chat/completions sends them (None: a prompt item, sent as one user message)."""
        return [m.to_wire() for m in self.messages] if self.messages else None

    def texts(self) -> list[str]:
        return [self.prompt] if self.prompt is not None else [t for m in self.messages for t in m.texts()]

    def size_bytes(self) -> int:
        """UTF-8 bytes of the prompt: at least its token count for a byte-level tokenizer (the embedded models')."""
        return sum(len(t.encode()) for t in self.texts())


async def measure(item: PromptItem, tokenizer: Encoder) -> tuple[int, int | None]:
    """(prompt tokens, reply tokens or None) as ``tokenizer`` counts them; each text alone, so a chat template's
    tokens are not in the count."""
    n_in = 0
    for t in item.texts():
        n_in += len(await tokenizer.encode(t))
    reply = None if item.reply is None else len(await tokenizer.encode(item.reply))
    return n_in, reply


@dataclass(frozen=True, slots=True)
class Dataset:
    """A file's usable items, in the file's order, and what was read and skipped (reason, count)."""

    path: str
    sha256: str
    items: tuple[PromptItem, ...]
    read: int
    skipped: tuple[tuple[str, int], ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def used(self) -> int:
        return len(self.items)

    def summary(self) -> str:
        """``read 1,000 items, used 998, skipped 2: 1 with no user turn, 1 empty prompt``"""
        out = f"read {self.read:,} item{'' if self.read == 1 else 's'}, used {self.used:,}"
        n = sum(c for _, c in self.skipped)
        if n:
            out += f", skipped {n:,}: " + ", ".join(f"{c:,} {why}" for why, c in self.skipped)
        return out

    def shuffled(self, seed: int) -> list[PromptItem]:
        """The items in the order a run with ``seed`` sends them: the same seed, the same order."""
        items = list(self.items)
        random.Random(f"dataset/{seed}").shuffle(items)
        return items

    def longest(self, output_len: int) -> int:
        """A bound on the tokens (prompt and output) of the longest request, for a byte-level tokenizer: its bytes,
        and its own output length, its reply's bytes or ``output_len``."""
        return max(i.size_bytes() + (i.output_len or (len(i.reply.encode()) if i.reply is not None else output_len))
                   for i in self.items)

    def describe(self) -> dict[str, Any]:
        """What a run's manifest records: the file, its digest, what was read, used and skipped."""
        return {"path": self.path, "sha256": self.sha256, "read": self.read, "used": self.used,
                "skipped": dict(self.skipped), "kinds": dict(Counter(i.kind for i in self.items)),
                "output_from_file": sum(i.output_len is not None or i.reply is not None for i in self.items),
                "summary": self.summary(), "notes": list(self.notes)}


class _Skip(Exception):
    """A well-formed item that cannot be sent: its reason is counted."""


def load(path: str | Path, api: str = "completions") -> Dataset:
    """The file's items for a run on ``api``; UsageError (one line: file, line, field) for a file that is not one."""
    name = str(path)
    try:
        raw = Path(path).expanduser().read_bytes()
    except OSError as e:
        raise UsageError(f"--dataset {name}: cannot read it ({e.strerror or e})") from None
    if not raw.strip():
        raise UsageError(f"{name}: the file is empty: write one JSON item per line, or a JSON list of items")
    text = _decode(raw, name)
    items: list[PromptItem] = []
    skipped: Counter[str] = Counter()
    tools = read = 0
    for line, obj in _values(text, name):
        read += 1
        where = f"{name}:{line}"
        try:
            items.append(_item(obj, line, where, api))
        except _Skip as s:
            skipped[str(s)] += 1
        tools += isinstance(obj, dict) and obj.get("tools") is not None
    notes = (f"{tools:,} items' tool definitions (tools) are not sent",) if tools else ()
    ds = Dataset(name, hashlib.sha256(raw).hexdigest(), tuple(items), read, tuple(skipped.most_common()), notes)
    if not items:
        raise UsageError(f"{name}: no item can be sent ({ds.summary()})")
    return ds


def _decode(raw: bytes, name: str) -> str:
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise UsageError(f"{name}:{line}: a NUL byte: a binary file, not JSON lines or JSON")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise UsageError(f"{name}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x}): a binary file?") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_BLANK = re.compile(r"[ \t\n\r]*")


def _parse(text: str, pos: int, name: str, first_line: int, item_line: int) -> tuple[Any, int]:
    """One JSON value at ``pos`` of ``text`` (whose first line is the file's ``first_line``): (value, end), or
    UsageError naming the line of the fault (the item's, where the parser gives no position)."""
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as e:
        raise UsageError(f"{name}:{first_line + e.lineno - 1}: not JSON ({json_fault(e, line=False)})") from None
    except RecursionError:
        raise UsageError(f"{name}:{item_line}: not JSON (nested too deep)") from None
    except ValueError as e:  # NaN, Infinity; an integer with too many digits
        raise UsageError(f"{name}:{item_line}: not JSON ({e})") from None


def _values(text: str, name: str) -> Iterator[tuple[int, Any]]:
    """(line, value) of each item: the elements of one JSON list, or one JSON value per line."""
    start = _BLANK.match(text).end()  # type: ignore[union-attr]
    if text.startswith("[", start):
        yield from _list(text, name, start + 1)
        return
    lines = text.split("\n")  # never str.splitlines: U+2028 may stand unescaped inside a JSON string
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj, end = _parse(line, 0, name, n, n)
        except UsageError:
            if n == 1 + text.count("\n", 0, start) and _one_object(text, start):
                raise UsageError(f"{name}:{n}: one JSON object over several lines: write one item per line "
                                 "(JSON lines), or a JSON list of items") from None
            raise
        if line[end:].strip():
            raise UsageError(f"{name}:{n}: not JSON (more after the item, column {end + 1}): one item per line")
        yield n, obj


def _one_object(text: str, start: int) -> bool:
    """The file begins with one JSON object that spans lines (a pretty-printed item, not JSON lines)."""
    try:
        obj, end = _DECODER.raw_decode(text, start)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and "\n" in text[start:end]


def _list(text: str, name: str, pos: int) -> Iterator[tuple[int, Any]]:
    line, counted = 1, 0  # the line at ``counted``: counted on as the items go, so a big list is read in one pass

    def where(p: int) -> str:
        nonlocal line, counted
        line, counted = line + text.count("\n", counted, p), p
        return f"{name}:{line}"

    pos = _BLANK.match(text, pos).end()  # type: ignore[union-attr]
    if text.startswith("]", pos):
        raise UsageError(f"{where(pos)}: the list is empty: it holds no items")
    while True:
        where(pos)
        obj, end = _parse(text, pos, name, 1, line)
        yield line, obj
        pos = _BLANK.match(text, end).end()  # type: ignore[union-attr]
        if text.startswith(",", pos):
            pos = _BLANK.match(text, pos + 1).end()  # type: ignore[union-attr]
            continue
        if text.startswith("]", pos):
            rest = _BLANK.match(text, pos + 1).end()  # type: ignore[union-attr]
            if rest != len(text):
                raise UsageError(f"{where(rest)}: not JSON (more after the list's end)")
            return
        raise UsageError(f"{where(pos)}: not JSON (expected ',' or ']' after an item)")


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "a boolean"
    if v is None:
        return "null"
    return {str: "a string", int: "a number", float: "a number", list: "a list", dict: "an object"}[type(v)]


def _show(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return _kind(v)
    s = json.dumps(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _item(obj: Any, line: int, where: str, api: str) -> PromptItem:
    if not isinstance(obj, dict):
        raise UsageError(f"{where}: the item is {_kind(obj)}, not an object")
    output = _output_len(obj, where)
    if "conversations" in obj:
        return _sharegpt(obj["conversations"], line, where, api, output)
    if "messages" in obj:
        return _chat(obj["messages"], line, where, api, output)
    if "prompt" in obj:
        v = obj["prompt"]
        if not isinstance(v, str):
            raise UsageError(f'{where}: "prompt" is {_kind(v)}, not a string')
        if not v.strip():
            raise _Skip(EMPTY_PROMPT)
        return PromptItem(line, "prompt", prompt=v, output_len=output)
    raise UsageError(f'{where}: the item has no "prompt", "messages" or "conversations"')


def _output_len(obj: dict[str, Any], where: str) -> int | None:
    for key in OUTPUT_FIELDS:
        v = obj.get(key)
        if v is None:  # absent, or null as a request log writes "no limit"
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_OUTPUT_TOKENS:
            raise UsageError(f'{where}: "{key}" is {_show(v)}, not a positive whole number of tokens'
                             + (f" (at most {MAX_OUTPUT_TOKENS:,})" if isinstance(v, int) and v > 1 else ""))
        return v
    return None


def _str(v: Any, where: str, field: str) -> str:
    if not isinstance(v, str):
        raise UsageError(f"{where}.{field} is {_kind(v)}, not a string")
    return v


def _chat(v: Any, line: int, where: str, api: str, output: int | None) -> PromptItem:
    if not isinstance(v, list):
        raise UsageError(f'{where}: "messages" is {_kind(v)}, not a list')
    msgs = [_message(m, f'{where}: "messages"[{i}]') for i, m in enumerate(v)]
    if api not in CONVERSATIONAL:
        raise UsageError(f'{where}: "messages" items are conversations: run with --api chat (or messages, responses)')
    reply = None
    if msgs and msgs[-1].role == "assistant":  # a transcript: its last turn is the answer, not the prompt
        reply = "".join(msgs.pop().texts())
    users = [m for m in msgs if m.role == "user"]
    if not users:
        raise _Skip(NO_USER)
    if not any("".join(m.texts()).strip() for m in users):
        raise _Skip(EMPTY_PROMPT)
    return PromptItem(line, "chat", messages=tuple(msgs), output_len=output, reply=reply or None)


def _message(m: Any, where: str) -> Message:
    if not isinstance(m, dict):
        raise UsageError(f"{where} is {_kind(m)}, not an object")
    if "role" not in m:
        raise UsageError(f'{where} has no "role"')
    role = m["role"]
    if role not in ROLES:
        raise UsageError(f"{where}.role is {_show(role)}, not one of {', '.join(ROLES)}")
    calls = _tool_calls(m.get("tool_calls"), where) if role == "assistant" else ()
    content = m.get("content")
    if content is None and not calls:
        raise UsageError(f'{where} has no "content"')
    name, call_id = m.get("name"), m.get("tool_call_id")
    return Message(role, _content(content, f"{where}.content"), tool_calls=calls,
                   tool_call_id=None if call_id is None else _str(call_id, where, "tool_call_id"),
                   name=None if name is None else _str(name, where, "name"))


def _content(v: Any, where: str) -> str | tuple[dict[str, Any], ...] | None:
    if v is None or isinstance(v, str):
        return v
    if not isinstance(v, list):
        raise UsageError(f"{where} is {_kind(v)}, not a string or a list of text parts")
    parts = []
    for i, p in enumerate(v):
        if not isinstance(p, dict) or not isinstance(p.get("type"), str):
            raise UsageError(f'{where}[{i}] is not a part (an object with a "type")')
        if p["type"] != "text":
            raise _Skip(NOT_TEXT)
        parts.append({"type": "text", "text": _str(p.get("text"), f"{where}[{i}]", "text")})
    return tuple(parts)


def _tool_calls(v: Any, where: str) -> tuple[ToolCall, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise UsageError(f"{where}.tool_calls is {_kind(v)}, not a list")
    out = []
    for i, c in enumerate(v):
        at = f"{where}.tool_calls[{i}]"
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict):
            raise UsageError(f'{at} has no "function" object')
        args = fn.get("arguments", "")
        out.append(ToolCall(_str(c.get("id", ""), at, "id"), _str(fn.get("name"), at, "function.name"),
                            args if isinstance(args, str) else json.dumps(args)))
    return tuple(out)


def _sharegpt(v: Any, line: int, where: str, api: str, output: int | None) -> PromptItem:
    if not isinstance(v, list):
        raise UsageError(f'{where}: "conversations" is {_kind(v)}, not a list')
    turns = [_turn(t, f'{where}: "conversations"[{i}]') for i, t in enumerate(v)]
    first_reply = next((k for k, m in enumerate(turns) if m.role == "assistant"), len(turns))
    prompt = turns[:first_reply]
    reply = "".join(turns[first_reply].texts()) if first_reply < len(turns) else None
    users = [m for m in prompt if m.role == "user"]
    if not users:
        raise _Skip(NO_USER)
    if not any("".join(m.texts()).strip() for m in users):
        raise _Skip(EMPTY_PROMPT)
    if reply is not None and not reply.strip():
        raise _Skip(EMPTY_REPLY)
    if api not in CONVERSATIONAL and len(prompt) != 1:
        raise _Skip(NEEDS_CHAT)
    return PromptItem(line, "sharegpt", messages=tuple(prompt), output_len=output, reply=reply)


def _turn(t: Any, where: str) -> Message:
    if not isinstance(t, dict):
        raise UsageError(f"{where} is {_kind(t)}, not an object")
    if "from" not in t:
        raise UsageError(f'{where} has no "from"')
    who = t["from"]
    if not isinstance(who, str) or who.lower() not in SHAREGPT_ROLES:
        raise UsageError(f"{where}.from is {_show(who)}, not one of human, gpt, system")
    if "value" not in t:
        raise UsageError(f'{where} has no "value"')
    return Message(SHAREGPT_ROLES[who.lower()], _str(t["value"], where, "value"))
