"""Speculative decoding and MTP: expected tokens per verification pass, the acceptance rate from a stated acceptance
length, and the speed-up over plain decoding."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from .roofline import Efficiency, Estimate, StepCost, decode_time


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens per target pass with γ drafted tokens accepted each with probability α (Leviathan et al. 2023)."""
    if alpha >= 1.0:
        return gamma + 1.0
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def alpha_from_acceptance_length(tau: float, gamma: int) -> float:
    """Solve τ = E(α, γ) for α (vLLM reports τ = 1 + accepted/drafts)."""
    if not 1.0 <= tau <= gamma + 1:
        raise UsageError(f"a mean acceptance length must lie between 1 and spec tokens + 1 ({gamma + 1})")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if expected_tokens(mid, gamma) < tau:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def spec_speedup(alpha: float, gamma: int, draft_cost: float, overhead: float = 0.0) -> float:
    """Speed-up of decoding while the step is memory-bound (verifying γ+1 tokens costs one plain step):
    E / (1 + γ·c + δ)."""
    return expected_tokens(alpha, gamma) / (1 + gamma * draft_cost + overhead)


@dataclass(slots=True, frozen=True)
class Spec:
    """Speculative decoding (a draft model, EAGLE heads or MTP layers): γ drafted tokens per step, each
    accepted with probability α, a draft token costing ``draft_cost`` of a plain target step."""

    alpha: float
    gamma: int
    draft_cost: float

    @property
    def expected(self) -> float:
        return expected_tokens(self.alpha, self.gamma)


def spec_decode(verify: StepCost, plain: StepCost, spec: Spec, eff: Efficiency) -> Estimate:
    """Time per output token with speculative decoding: one target pass verifying γ+1 tokens per sequence
    (``verify``: the weights and KV read once, γ+1 times the arithmetic) plus γ draft steps at draft_cost of a
    plain step each, over the E tokens a pass yields (Leviathan et al. 2023). While the step is memory-bound
    this is the familiar E/(1 + γ·c) speed-up; as the batch grows the verification becomes compute-bound and
    the gain shrinks (at large batch it can be a loss)."""
    draft_c = spec.gamma * spec.draft_cost * plain.ceiling
    draft_e = spec.gamma * spec.draft_cost * decode_time(plain, eff)
    return Estimate((verify.ceiling + draft_c) / spec.expected, (decode_time(verify, eff) + draft_e) / spec.expected)
