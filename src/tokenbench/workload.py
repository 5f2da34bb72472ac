"""What to send: prompts of an exact token length for the served model's tokenizer, unique per request
and per run so no prefix cache can serve them (unless a shared prefix is asked for), and the shapes
published comparisons use."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from .draws import Draw
from .errors import UsageError

#: name -> (input tokens, output tokens). pp512/tg128 follow llama-bench: prompt processing of 512
#: tokens (one token generated so the server must finish the prefill), generation of 128 tokens.
SHAPES: dict[str, tuple[int, int]] = {
    "agentic": (4096, 512),
    "short": (128, 128),
    "pp512": (512, 1),
    "tg128": (1, 128),
}


@dataclass(slots=True, frozen=True)
class WorkloadRecord:
    """What a run sends, as its manifest records it. Lengths that vary (``input_draw``, ``output_draw``; None or a
    fixed draw: every request ``input_len``/``output_len``) are drawn per request by ``request_lengths``;
    ``input_len``/``output_len`` are then the draws' expected values, rounded. ``dataset``: what a --dataset file
    gave (``dataset.Dataset.describe``)."""

    input_len: int | None  # None: a dataset's prompts, of their own lengths
    output_len: int
    shape: str | None = None
    api: str = "completions"
    prefix_len: int = 0  # tokens shared by every request (0: every prompt unique from its first token)
    seed: int = 0
    input_draw: Draw | None = None
    output_draw: Draw | None = None
    dataset: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["input_draw"], out["output_draw"], out["dataset"]
        # only what varies is added, so a fixed run's workload reads as it always has
        for key, draw in (("input", self.input_draw), ("output", self.output_draw)):
            if draw is not None and not draw.is_fixed:
                out[key] = draw.to_dict()
        if self.dataset is not None:
            out["dataset"] = self.dataset
        return out

    @property
    def varies(self) -> bool:
        """Requests differ in length (a distribution, or a dataset's own prompts and outputs)."""
        return self.dataset is not None or any(d is not None and not d.is_fixed
                                               for d in (self.input_draw, self.output_draw))

    def request_lengths(self, index: int) -> tuple[int, int]:
        """Request ``index``'s (input, output) tokens: its own draw, from a generator seeded by the run's seed and
        the index alone, so the same seed draws the same lengths in every run (and in any worker)."""
        rng = random.Random(f"lengths/{self.seed}/{index}")
        n_in = self.input_draw.draw(rng) if self.input_draw is not None else self.input_len or 0
        n_out = self.output_draw.draw(rng) if self.output_draw is not None else self.output_len
        return n_in, n_out


def resolve_shape(shape: str | None, input_len: int | None, output_len: int | None) -> tuple[int, int]:
    if shape is not None:
        if shape not in SHAPES:
            raise UsageError(f"unknown shape '{shape}': use one of {', '.join(SHAPES)} or --input-len/--output-len")
        i, o = SHAPES[shape]
        return (input_len or i, output_len or o)
    return (input_len or SHAPES["short"][0], output_len or SHAPES["short"][1])


class Tokenizer(Protocol):
    description: str

    async def encode(self, text: str) -> list[int]: ...

    async def decode(self, ids: list[int]) -> str: ...


class LocalTokenizer:
    """A tokenizer on this machine: a ``tokenizer.json`` file, or a Hugging Face directory or cached name."""

    def __init__(self, path_or_name: str) -> None:
        self.path = path_or_name  # what a worker process loads the same tokenizer from (workers.ClientSpec)
        self.description = f"local {path_or_name}"
        self._encode: Callable[[str], list[int]]
        self._decode: Callable[[list[int]], str]
        p = Path(path_or_name)
        file = p / "tokenizer.json" if p.is_dir() else p
        if file.suffix == ".json" and file.exists():
            from tokenizers import Tokenizer as HFTokenizer

            tok = HFTokenizer.from_file(str(file))
            self._encode = lambda t: tok.encode(t, add_special_tokens=False).ids
            self._decode = lambda ids: tok.decode(ids)
            self.eos_token_id = _eos_from_dir(p if p.is_dir() else p.parent, tok)
            return
        try:
            from transformers import AutoTokenizer
        except ImportError as e:
            raise UsageError(
                f"--tokenizer {path_or_name}: give a tokenizer.json path, or pip install 'tokenbench[tokenizer]'"
            ) from e
        try:
            atok = AutoTokenizer.from_pretrained(path_or_name, local_files_only=True)
        except Exception as e:  # transformers raises many kinds for a missing model
            raise UsageError(
                f"--tokenizer {path_or_name}: not found locally ({type(e).__name__}); "
                "give a local directory or tokenizer.json (no hub downloads here)"
            ) from e
        self._encode = lambda t: atok.encode(t, add_special_tokens=False)
        self._decode = lambda ids: str(atok.decode(ids))
        self.eos_token_id = atok.eos_token_id

    def count(self, text: str) -> int:
        return len(self._encode(text))

    async def encode(self, text: str) -> list[int]:
        return list(self._encode(text))

    async def decode(self, ids: list[int]) -> str:
        return str(self._decode(ids))


def _eos_from_dir(d: Path, tok: Any) -> int | None:
    import json

    for name in ("generation_config.json", "config.json"):
        f = d / name
        if f.exists():
            eos = json.loads(f.read_text()).get("eos_token_id")
            if isinstance(eos, list):
                eos = eos[0] if eos else None
            if isinstance(eos, int):
                return eos
    for cand in ("</s>", "<|endoftext|>", "<eos>", "<|eot_id|>"):
        tid = tok.token_to_id(cand)
        if tid is not None:
            return int(tid)
    return None


def word_list() -> list[str]:
    text = resources.files("tokenbench").joinpath("data/words.txt").read_text()
    return [w for w in text.split() if w]


class PromptBuilder:
    """Builds prompts of exactly ``n`` tokens: random words drawn from a generator seeded by the run's
    seed, the run's own tag and the request's index, so prompts differ from their first token on, between
    requests and between runs (a radix cache such as SGLang's matches any shared leading tokens)."""

    MAX_ROUNDS = 12

    def __init__(self, tokenizer: Tokenizer, seed: int, run_tag: str) -> None:
        self.tok = tokenizer
        self.seed = seed
        self.run_tag = run_tag
        self.words = word_list()
        self._tokens_per_word = 1.5
        self._prefixes: dict[int, tuple[str, int]] = {}

    async def exact(self, head: str, n: int, rng: random.Random) -> tuple[str, int]:
        """Text starting with ``head`` that encodes to exactly ``n`` tokens (or the nearest reached, returned)."""
        if n <= 0:
            return "", 0
        words = max(1, int(n / self._tokens_per_word) + 8)
        text = head + " ".join(rng.choices(self.words, k=words))
        ids = await self.tok.encode(text)
        while len(ids) < n:
            text += " " + " ".join(rng.choices(self.words, k=max(8, int((n - len(ids)) / self._tokens_per_word) + 8)))
            ids = await self.tok.encode(text)
        self._tokens_per_word = max(0.5, len(ids) / max(1, len(text.split())))
        best = (text, len(ids))
        cut = n
        for _ in range(self.MAX_ROUNDS):
            candidate = await self.tok.decode(ids[:cut])
            count = len(await self.tok.encode(candidate))
            if count == n:
                return candidate, n
            if abs(count - n) < abs(best[1] - n):
                best = (candidate, count)
            cut += n - count  # re-tokenising the cut text merged or split a token: move the cut
            cut = max(1, min(cut, len(ids)))
        return best

    async def build(self, count: int, input_len: int, prefix_len: int = 0, start_index: int = 0) -> list[tuple[str, int]]:
        """``count`` prompts; each is (text, tokens as our tokenizer counts them)."""
        return [await self.one(i, input_len, prefix_len) for i in range(start_index, start_index + count)]

    async def one(self, index: int, input_len: int, prefix_len: int = 0) -> tuple[str, int]:
        """Prompt ``index`` of ``input_len`` tokens, its first ``prefix_len`` shared with every other prompt (the
        shared prefix is built once per length, from the run's seed alone)."""
        prefix, prefix_tokens = "", 0
        if prefix_len:
            n = min(prefix_len, input_len)
            if n not in self._prefixes:
                self._prefixes[n] = await self.exact("", n, random.Random(self.seed))
            prefix, prefix_tokens = self._prefixes[n]
        rest = input_len - prefix_tokens
        if rest <= 0:
            return prefix, prefix_tokens
        tail, tail_tokens = await self.exact("", rest, random.Random(f"{self.seed}/{self.run_tag}/{index}"))
        if not prefix:
            return tail, tail_tokens
        text = prefix + " " + tail
        return text, len(await self.tok.encode(text))
