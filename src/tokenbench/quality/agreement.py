"""Agreement: greedy outputs of the same prompts on two engines or hosts, compared token by token.

The prompts are passages of the shipped filler prose, chosen by a fixed seed, so every host gets the same
ones. Each output is stored with its token ids (the run's tokenizer, re-encoding the text), and two runs are
compared pair by pair: the share of outputs that are identical, and where the first differing token is.

This works with random weights: a model that is the same function on both engines gives the same greedy
tokens until two candidates' logits are closer than the engines' rounding differences. What to expect is in
the README (Quality parity).

The verdict: the same host run twice is the noise floor (a server whose batching changes its sums can differ
from itself; greedy decoding on one host usually does not). Two hosts are named different when their outputs
differ more often than the floor's, at all or from the first token, by Fisher's exact test (one-sided; the
smaller of the two p-values, doubled, as Bonferroni's correction for testing twice). With no repeat in the
store, the floor is assumed: a repeat of as many pairs that agreed on every one, as greedy decoding should.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass

from .haystack import filler_sentences
from .stats import ALPHA, fisher_greater, wilson_interval

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

    @property
    def differ(self) -> int:
        return self.n - self.identical

    @property
    def differ_first(self) -> int:
        """Pairs that differ from the first token (or character) on."""
        return sum(d == 0 for d in self.first_diff)

    def to_dict(self) -> dict[str, object]:
        return {"n": self.n, "identical": self.identical, "share": self.share, "interval": list(self.interval),
                "first_diff_median": self.first_diff_median, "first_diff": self.first_diff, "unit": self.unit,
                "mean_length": self.mean_length}


def agreement(pairs: list[tuple[list[int] | str, list[int] | str]], unit: str,
              lengths: list[int] | None = None) -> Agreement:
    """Agreement over paired outputs (tokens or texts). ``lengths``: A's outputs' lengths as the server counted
    them (usage), where it did: the ids compared are the answer's text encoded again by the tokenizer, which can
    count a token or two more or fewer (65 at --max-tokens 64)."""
    diffs = [d for d in (first_difference(a, b) for a, b in pairs) if d is not None]
    n = len(pairs)
    same = n - len(diffs)
    counted = lengths if lengths else [len(a) for a, _ in pairs]
    return Agreement(n, same, same / n if n else 0.0, wilson_interval(same, n),
                     statistics.median(diffs) if diffs else None, diffs, unit,
                     statistics.fmean(counted) if counted else 0.0)


#: An agreement verdict: the outputs differ more than the floor's (p < ALPHA), or not; or no floor to judge by
#: (sampled outputs and no repeat: sampling alone makes them differ).
AgreementVerdictText = str  # "different" | "within noise" | "no floor"


@dataclass(slots=True)
class AgreementVerdict:
    """Two hosts' agreement judged against the noise floor: the same host's agreement with itself."""

    verdict: AgreementVerdictText
    p_value: float | None
    floor: Agreement | None  # the same host twice; None when assumed or missing
    floor_runs: tuple[str, str] | None  # the two runs of the floor
    assumed: bool  # no repeat: a floor of every pair identical was assumed (greedy decoding)
    floor_n: int
    floor_differ: int
    floor_differ_first: int

    def to_dict(self) -> dict[str, object]:
        return {"verdict": self.verdict, "p_value": self.p_value, "test": "fisher-exact (one-sided, all and "
                "first-token differences, Bonferroni)", "floor_assumed": self.assumed,
                "floor_runs": list(self.floor_runs) if self.floor_runs else None, "floor_n": self.floor_n,
                "floor_identical": self.floor_n - self.floor_differ, "floor_differ_first": self.floor_differ_first,
                "floor": self.floor.to_dict() if self.floor else None}


def judge(pair: Agreement, floor: Agreement | None, floor_runs: tuple[str, str] | None = None,
          sampled: bool = False, alpha: float = ALPHA) -> AgreementVerdict:
    """``pair`` (two hosts) against ``floor`` (one host twice). No floor: greedy outputs are judged against an
    assumed one of as many pairs, all identical; sampled ones (``sampled``) get no verdict."""
    if floor is None and sampled:
        return AgreementVerdict("no floor", None, None, None, False, 0, 0, 0)
    n0, k0, f0 = (floor.n, floor.differ, floor.differ_first) if floor else (pair.n, 0, 0)
    p_all = fisher_greater(pair.differ, pair.n, k0, n0)
    p_first = fisher_greater(pair.differ_first, pair.n, f0, n0)
    p = min(1.0, 2 * min(p_all, p_first))
    return AgreementVerdict("different" if p < alpha else "within noise", p, floor, floor_runs if floor else None,
                            floor is None, n0, k0, f0)
