"""Agreement: greedy outputs of the same prompts on two engines or hosts, compared token by token.

The prompts are passages of the shipped filler prose, chosen by a fixed seed, so every host gets the same
ones. Each output is stored with its token ids (the run's tokenizer, re-encoding the text), and two runs are
compared pair by pair: the share of outputs that are identical, and where the first differing token is.

This works with random weights: a model that is the same function on both engines gives the same greedy
tokens until two candidates' logits are closer than the engines' rounding differences. What to expect is in
the README (Quality parity).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from .haystack import filler_sentences
from .stats import wilson_interval

#: Prompts of the agreement task unless --items says otherwise.
DEFAULT_ITEMS = 16
CHAT_CUE = "Continue this text in the same style:\n\n"


def prompts(n: int, seed: int, chat: bool) -> list[str]:
    """``n`` prompts: two to four filler sentences each, the same for every host with the same seed."""
    sentences = filler_sentences()
    out = []
    for i in range(n):
        rng = random.Random(f"agreement/{seed}/{i}")
        passage = " ".join(rng.sample(sentences, rng.randint(2, 4)))
        out.append(CHAT_CUE + passage if chat else passage)
    return out


def first_difference(a: list[int] | str, b: list[int] | str) -> int | None:
    """Index of the first position where ``a`` and ``b`` differ (the shorter's length when one is a prefix
    of the other); None when they are identical."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass(slots=True)
class Agreement:
    n: int
    identical: int
    share: float
    interval: tuple[float, float]  # Wilson 95% interval of the share
    first_diff_median: float | None  # over the pairs that differ
    first_diff: list[int]
    unit: str  # "tokens" when both runs stored token ids, else "characters"
    mean_length: float  # of A's outputs, in the same unit

    def to_dict(self) -> dict[str, object]:
        return {"n": self.n, "identical": self.identical, "share": self.share, "interval": list(self.interval),
                "first_diff_median": self.first_diff_median, "first_diff": self.first_diff, "unit": self.unit,
                "mean_length": self.mean_length}


def agreement(pairs: list[tuple[list[int] | str, list[int] | str]], unit: str) -> Agreement:
    """Agreement over paired outputs (tokens or texts)."""
    diffs = [d for d in (first_difference(a, b) for a, b in pairs) if d is not None]
    n = len(pairs)
    same = n - len(diffs)
    return Agreement(n, same, same / n if n else 0.0, wilson_interval(same, n),
                     statistics.median(diffs) if diffs else None, diffs, unit,
                     statistics.fmean(len(a) for a, _ in pairs) if pairs else 0.0)
