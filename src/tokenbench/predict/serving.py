"""A closed loop of agents from the step costs: llama.cpp with slots, vLLM's and SGLang's batches through their
scheduler (queue.py), and those engines' default token budget per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .. import registry
from . import queue
from .roofline import Efficiency, Estimate, StepCost, prefill_time
from .specs import HardwareSpec


#: vLLM V1's default token budget per step (max_num_batched_tokens) as its OpenAI server runs: 8192 on GPUs of
#: 70 GiB or more other than the A100 ("Setting large max_num_batched_tokens for A100 reduces throughput, see
#: PR #17885"), 2048 on the rest (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults, OPENAI_API_SERVER).
VLLM_BATCH_TOKENS = ((70, 8192), (0, 2048))
#: SGLang's chunked_prefill_size by GPU memory: 2048 under 35 GiB (T4, 4080, A10, 4090, 5090), 4096 under 60
#: (A100 40GB, L40), 8192 under 160 (H100, A100 80GB, H200), else 16384 (B200, MI300)
#: (python/sglang/srt/server_args.py, ServerArgs._handle_gpu_memory_settings).
SGLANG_BATCH_TOKENS = ((160, 16384), (60, 8192), (35, 4096), (0, 2048))
#: llama.cpp's server with slots (-np) under a closed loop: the share of the (N−1)/2 prompts ahead a new one
#: waits behind (the prior the fitted "burst" constant had, which no llama.cpp row ever moved).
SLOTS_BURST = 0.5


EngineKind = Literal["batching", "sequential"]


@dataclass(slots=True)
class ServePoint:
    concurrency: int
    ttft_s: Estimate  # median TTFT of the loop's steady state
    tpot_s: Estimate
    throughput: tuple[float, float]  # aggregate output tok/s: (ceiling, estimate)
    per_agent: tuple[float, float]
    notes: list[str] = field(default_factory=list)
    ttft_start_s: Estimate | None = None  # the first cycle (the start's burst): median ...
    ttft_worst_s: Estimate | None = None  # ... and its slowest request (what a p99 of a short benchmark sees)


def default_batch_tokens(engine: str, hw: HardwareSpec) -> int:
    """A batching engine's token budget per step when none is given: vLLM's max_num_batched_tokens, SGLang's
    chunked_prefill_size, by the box's memory per GPU (VLLM_BATCH_TOKENS, SGLANG_BATCH_TOKENS say where from);
    other batching engines (Transformers' continuous batching) take vLLM's rule."""
    eng = registry.engine(engine)
    if eng.name == "sglang":
        return next(b for gb, b in SGLANG_BATCH_TOKENS if hw.mem_gb >= gb)
    if "a100" in hw.id:
        return VLLM_BATCH_TOKENS[-1][1]
    return next(b for gb, b in VLLM_BATCH_TOKENS if hw.mem_gb >= gb)


def mixes_prefill(engine: str) -> bool:
    """Whether a step carries prompt chunks beside the running decodes (vLLM V1, Transformers), or a step with
    prompts holds nothing else and the decodes wait for it (SGLang without --enable-mixed-chunk)."""
    return registry.engine(engine).name != "sglang"


def batch_step(parts: list[StepCost]) -> StepCost:
    """One engine step running several pieces of work as one forward pass (the decodes of the running
    sequences, prompt chunks): the weights are read once (the largest read of any part: with MoE, the experts
    touched by the most tokens), every part's KV traffic, arithmetic and all-reduce bytes add, and the
    per-layer, per-all-reduce and per-expert-matmul fixed costs are paid once."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    big = max(parts, key=lambda p: p.t_weights)

    def add(name: str) -> float:
        return sum(getattr(p, name) for p in parts)

    def weight_bytes_of(p: StepCost) -> float:  # bytes ∝ time: every stream of a part is over the same bandwidth
        streams = p.t_weights + p.t_kv + p.t_kvq
        return p.bytes * p.t_weights / streams if streams else 0.0
    return StepCost(big.t_weights, add("t_kv"), add("t_compute"),
                    add("bytes") - sum(weight_bytes_of(p) for p in parts if p is not big), add("flops"),
                    add("t_attention"), add("t_kvq"), first.layers, 1, first.quantized,
                    max(p.expert_gemms for p in parts), add("t_routed"), add("t_comm"), max(p.comm_ops for p in parts),
                    add("t_power"), max(p.t_deq for p in parts), first.cycles)


def serve_point(pf: StepCost, t_dec: Estimate, eff: Efficiency, kind: EngineKind, n: int, prompt: int,
                output: int) -> ServePoint:
    """Closed loop, N agents, prompt P, output O (roofline.md "Continuous batching"), from the prefill cost of
    one prompt (``pf``) and the time per output token of the decode step at the loop's mean context
    (``t_dec``: N sequences when batching, one when sequential; speculative decoding already in it). For
    llama.cpp: one stream, or its server's slots (-np); vLLM and SGLang go through their scheduler's queue
    (``serve_queue``).

    slots ("batching" here): cycle ≈ O·t_dec(N, P+O/2) + N·t_pf(P); TPOT ≈ t_dec + (N−1)·t_pf/O: while an
    agent decodes, the other N−1 prompts of the cycle are prefilled between its steps. TTFT ≈ t_pf + t_dec +
    a wait: SLOTS_BURST of the (N−1)/2 prompts ahead of it. sequential (llama.cpp as one stream): one request
    at a time, so aggregate stays at the single-stream rate and each agent waits for the others."""
    t_pf = Estimate(pf.ceiling, prefill_time(pf, eff)) if prompt else Estimate(0.0, 0.0)
    if kind == "sequential":
        t_req = Estimate(t_pf.ceiling + output * t_dec.ceiling, t_pf.estimate + output * t_dec.estimate)
        ttft = Estimate((n - 1) * t_req.ceiling + t_pf.ceiling, (n - 1) * t_req.estimate + t_pf.estimate)
        thr = (output / t_req.ceiling, output / t_req.estimate)
        return ServePoint(n, ttft, t_dec, thr, (thr[0] / n, thr[1] / n), ["one stream at a time: requests queue"])
    cyc_c = output * t_dec.ceiling + n * t_pf.ceiling
    cyc_e = output * t_dec.estimate + n * t_pf.estimate
    others = (n - 1) / max(output, 1)
    tpot = Estimate(t_dec.ceiling + others * t_pf.ceiling, t_dec.estimate + others * t_pf.estimate)
    wait = SLOTS_BURST * (n - 1) / 2
    ttft = Estimate(t_pf.ceiling + t_dec.ceiling, t_pf.estimate * (1 + wait) + t_dec.estimate)
    thr = (n * output / cyc_c, n * output / cyc_e) if output else (n / t_dec.ceiling, n / t_dec.estimate)
    return ServePoint(n, ttft, tpot, thr, (thr[0] / n, thr[1] / n))


def serve_queue(loop: queue.Loop, times: tuple[list[float], list[float]], t_out: Estimate, n: int,
                output: int) -> ServePoint:
    """A batching engine's closed loop from its simulated schedule (queue.closed_loop) and the time of each kind
    of step it ran (``times``: at the ceiling, and estimated). TTFT: the steps from a prompt's arrival to the
    step that finishes it (queueing behind other prompts' chunks, sharing steps with the running decodes), plus
    ``t_out``, one decode step of one sequence: the first token's way out to the client (sampling, detokenising,
    the stream), which alone makes one agent's TTFT one prefill plus one step. TPOT: a request's steps after its
    first token over its O−1 tokens, so a step that carries a prompt chunk is a slower decode step for
    everyone in it. Throughput: N agents each get O tokens per cycle, the mean time from a request's arrival
    to its last token (Little's law), so it agrees with the TTFT and TPOT it is made of."""
    c, e = queue.evaluate(loop, times[0]), queue.evaluate(loop, times[1])
    steps = max(output - 1, 1)
    ttft = Estimate(c.ttft + t_out.ceiling, e.ttft + t_out.estimate)
    tpot = Estimate(c.tpot_steps / steps, e.tpot_steps / steps)
    thr = (n * output / c.cycle, n * output / e.cycle) if output and c.cycle and e.cycle else (0.0, 0.0)
    return ServePoint(n, ttft, tpot, thr, (thr[0] / n, thr[1] / n),
                      ttft_start_s=Estimate(c.ttft_start + t_out.ceiling, e.ttft_start + t_out.estimate),
                      ttft_worst_s=Estimate(c.ttft_worst + t_out.ceiling, e.ttft_worst + t_out.estimate))


def behind_slots(p: ServePoint, n: int, output: int) -> ServePoint:
    """``n`` agents in a closed loop on a server with ``p.concurrency`` slots (llama.cpp -np), ``p`` being
    the saturated loop of that many: the slots stay full, so aggregate throughput is p's, and by Little's law
    each request waits (n/slots − 1) service times for a slot, a service time being slots·O / throughput."""
    b = p.concurrency
    if n <= b:
        return p

    def wait(thr: float) -> float:
        return (n / b - 1) * b * output / thr if thr > 0 and output else 0.0

    ttft = Estimate(p.ttft_s.ceiling + wait(p.throughput[0]), p.ttft_s.estimate + wait(p.throughput[1]))
    return ServePoint(n, ttft, p.tpot_s, p.throughput, (p.throughput[0] / n, p.throughput[1] / n),
                      p.notes + [f"{b} slots: {n - b} of {n} requests wait for a free one"])
