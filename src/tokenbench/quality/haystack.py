"""The built-in needle in a haystack: a secret number hidden at a chosen depth of a long text the package
ships (``data/haystack.txt``, prose written for tokenbench, no digits in it), and one question at the end.

Each cell is one (context length, depth) pair. The prompt's length is counted with the served model's
tokenizer, so a cell of 4,096 tokens sends about 4,096 tokens (to within one filler sentence, never more);
what was sent is recorded exactly and checked against the server's ``usage.prompt_tokens``.

Scoring is exact match: the first number in the answer must be the needle, digit for digit. A cell that did
not finish in time is a timeout: recorded, shown, and counted as not passed. A backend that is too slow at
depth must not score as if it had only been asked what it could finish.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

#: Depths of the needle, percent of the haystack.
DEFAULT_DEPTHS = (10, 50, 90)
#: Digits of a needle: unlikely to be guessed, one or a few tokens for most tokenizers.
NEEDLE_DIGITS = 7

INTRO = ("Below is a long text. Somewhere in it is one sentence that gives a secret number. Read the text, "
         "then answer the question at the end.\n\n")
QUESTION = "\n\nWhat is the secret number given in the text above? Answer with the number only."
#: For /v1/completions: a base model completes the answer instead of being asked for it.
COMPLETION_CUE = "\nAnswer: The secret number is"


class Counter(Protocol):
    async def encode(self, text: str) -> list[int]: ...


def filler_sentences() -> list[str]:
    text = resources.files("tokenbench.quality").joinpath("data/haystack.txt").read_text()
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def needle_sentence(needle: str) -> str:
    return f"The secret number is {needle}."


@dataclass(slots=True, frozen=True)
class Cell:
    context: int  # tokens asked for
    depth: int  # percent
    needle: str
    prompt: str
    prompt_tokens: int  # as our tokenizer counts the prompt (the content, without a chat template)
    actual_depth: float  # where the needle landed, percent of the haystack's tokens

    @property
    def key(self) -> str:
        return f"{self.context}@{self.depth}%"


def cell_needle(seed: int, context: int, depth: int) -> str:
    rng = random.Random(f"niah/{seed}/{context}/{depth}")
    return str(rng.randrange(10 ** (NEEDLE_DIGITS - 1), 10**NEEDLE_DIGITS))


async def fixed_tokens(tok: Counter, needle: str, chat: bool) -> int:
    """A cell's tokens before any filler: the intro, the needle's sentence and the question."""
    return len(await tok.encode(INTRO + needle_sentence(needle) + QUESTION + ("" if chat else COMPLETION_CUE)))


async def least_context(tok: Counter, chat: bool, around: int, answer: int) -> int:
    """The smallest context a cell fits in with no filler at all: its fixed part, what the server adds around
    it (``around``: a chat template, a BOS) and the answer's room (``answer``: the output tokens asked)."""
    return await fixed_tokens(tok, "9" * NEEDLE_DIGITS, chat) + around + answer


async def build_cell(tok: Counter, context: int, depth: int, seed: int, chat: bool,
                     sentence_tokens: dict[str, int] | None = None, around: int = 0, answer: int = 0) -> Cell:
    """One cell's prompt: filler sentences in a seeded order, the needle sentence at ``depth`` percent of the
    filler's tokens, so that the request fits in ``context`` tokens with what the server adds around the prompt
    (``around``: its chat template) and the answer's room (``answer``), as RULER holds its inputs to the context
    less the tokens to generate. ``sentence_tokens`` caches each sentence's count."""
    sentences = filler_sentences()
    counts = sentence_tokens if sentence_tokens is not None else {}
    for s in sentences:
        if s not in counts:
            counts[s] = len(await tok.encode(" " + s))
    needle = cell_needle(seed, context, depth)
    tail = QUESTION + ("" if chat else COMPLETION_CUE)
    budget = context - await fixed_tokens(tok, needle, chat) - around - answer
    rng = random.Random(f"haystack/{seed}/{context}")
    chosen: list[str] = []
    used = 0
    order: list[str] = []
    while True:
        if not order:
            order = sentences[:]
            rng.shuffle(order)
        s = order.pop()
        if used + counts[s] > budget:
            break
        chosen.append(s)
        used += counts[s]
    # the needle goes in at the sentence boundary nearest the depth's share of the filler's tokens
    at, acc, best = 0, 0, abs(depth / 100 * used)
    for i, s in enumerate(chosen):
        acc += counts[s]
        if abs(acc - depth / 100 * used) < best:
            at, best = i + 1, abs(acc - depth / 100 * used)
    before = sum(counts[s] for s in chosen[:at])
    body = chosen[:at] + [needle_sentence(needle)] + chosen[at:]
    prompt = INTRO + " ".join(body) + tail
    n = len(await tok.encode(prompt))
    return Cell(context, depth, needle, prompt, n, 100 * before / used if used else 0.0)


_NUMBER = re.compile(r"\d+")


def score(answer: str, needle: str) -> bool:
    """Exact match: the first number in the answer is the needle ("4821930." passes, "482193" and
    "The number is 4821931" fail). Digits grouped with commas or spaces are joined first."""
    text = re.sub(r"(?<=\d)[,\s](?=\d{3}\b)", "", answer)
    m = _NUMBER.search(text)
    return m is not None and m.group(0) == needle
