"""The roofline model: memory fit, decode and prefill ceilings, batching, offload, speculative decoding.

Every time has two forms: the physical *ceiling* (efficiency 1: nominal bandwidth and peak FLOPs, no
overhead) and the calibrated *estimate* (a backend's fitted efficiencies and fixed costs, see
``calibration.py``). Formulas follow shared/reference/roofline.md, where the existing tools go wrong:
causal prefill attention (T²/2, not T²), KV traffic with KV heads and the config's head_dim, MoE expert
coverage growing with batch, offloaded layers in sequence (times add), per-engine efficiencies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from ..errors import UsageError
from .specs import HardwareSpec, ModelSpec

#: Bits per weight of each format. GGUF K-quant mixes use llama.cpp's whole-file effective bpw
#: (quantize README, Llama-3.1-8B); 4-bit GPU formats keep embeddings and lm_head in BF16.
WEIGHT_BPW: dict[str, float] = {
    "BF16": 16, "FP16": 16, "F16": 16.0005, "F32": 32, "FP8": 8.0, "INT8": 8.0, "W8A8": 8.0,
    "AWQ": 4.156, "GPTQ": 4.156, "MXFP4": 4.25, "NVFP4": 4.5,
    "Q8_0": 8.501, "Q6_K": 6.563, "Q5_K_M": 5.704, "Q5_K": 5.5, "Q4_K_M": 4.894, "Q4_K": 4.5, "Q4_0": 4.5,
}
EMB_KEPT_BF16 = {"AWQ", "GPTQ", "MXFP4", "NVFP4", "FP8", "W8A8"}
GGUF_FORMATS = {"F16", "F32", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K", "Q4_K_M", "Q4_K", "Q4_0"}
#: KV-cache bits per element: llama.cpp -ctk q8_0 / q4_0 carry block scales.
KV_BITS: dict[str, float] = {"F16": 16, "BF16": 16, "AUTO": 16, "F32": 32, "FP8": 8, "Q8_0": 8.5, "Q4_0": 4.5}
#: Recurrent (Gated DeltaNet) state is kept in fp32.
STATE_BYTES = 4
#: Host memory reached from a GPU-offloading llama.cpp: the CPU runs its layers at this share of the host's
#: bandwidth (EPYC tg128 evidence in roofline.md: 0.30).
CPU_ETA_BW = 0.30
#: PCIe transfers reach this share of the link's nominal rate (roofline.md: 80–85%).
PCIE_ETA = 0.8
#: llama.cpp re-reads the weights for every micro-batch of prompt processing (-ub default).
UBATCH = 512

EngineKind = Literal["batching", "sequential"]


@dataclass(slots=True, frozen=True)
class Quant:
    weights: str
    kv: str

    @property
    def bpw(self) -> float:
        return WEIGHT_BPW[self.weights]

    @property
    def kv_bytes(self) -> float:
        return KV_BITS[self.kv] / 8

    @classmethod
    def parse(cls, weights: str, kv: str) -> Quant:
        w, k = weights.upper(), kv.upper()
        if w not in WEIGHT_BPW:
            raise UsageError(f"unknown weight format '{weights}': use one of {', '.join(WEIGHT_BPW)}")
        if k not in KV_BITS:
            raise UsageError(f"unknown KV-cache format '{kv}': use one of {', '.join(k.lower() for k in KV_BITS)}")
        return cls(w, k)


def check_combination(hw: HardwareSpec, q: Quant, engine: str) -> None:
    """Refuse what cannot run, with the reason and what to do instead."""
    if (q.weights in ("FP8", "W8A8") or q.kv == "FP8") and not hw.has_fp8 and "llama" not in engine:
        raise UsageError(
            f"FP8 needs FP8 tensor cores (Hopper, Ada, Blackwell, MI300), which {hw.id} lacks: use BF16, INT8, "
            "AWQ/GPTQ or a GGUF quant (vLLM's weight-only FP8 fallback runs at BF16 speed)"
        )
    if q.weights in GGUF_FORMATS - {"F16", "F32"} and engine.startswith(("vllm", "sglang")):
        raise UsageError(f"{engine} does not serve GGUF {q.weights} weights efficiently: use llama.cpp, or AWQ/GPTQ/FP8")


# --- sizes -----------------------------------------------------------------------------------------------

def weight_bytes(m: ModelSpec, q: Quant) -> dict[str, float]:
    """Bytes of each weight group: dense (attention, shared, dense MLP), routed experts, embedding, lm_head."""
    bpw = q.bpw / 8
    emb_bpw = 2.0 if q.weights in EMB_KEPT_BF16 else bpw
    expert_bpw = (m.expert_bpw / 8) if m.expert_bpw else bpw
    out = {
        "dense": m.dense_nonemb_params * bpw,
        "experts": m.routed_params * expert_bpw,
        "embedding": m.emb_params * emb_bpw,
        "lm_head": m.lm_params * emb_bpw if not m.tied else m.emb_params * emb_bpw,
    }
    if m.file_bytes:  # the real file: scale the groups to it
        stored = out["dense"] + out["experts"] + out["embedding"] + (0 if m.tied else out["lm_head"])
        scale = m.file_bytes / stored
        out = {k: v * scale for k, v in out.items()}
    return out


def total_weight_bytes(m: ModelSpec, q: Quant) -> float:
    w = weight_bytes(m, q)
    return w["dense"] + w["experts"] + w["embedding"] + (0.0 if m.tied else w["lm_head"])


def kv_bytes(m: ModelSpec, q: Quant, context: int) -> float:
    """KV cache of one sequence at ``context`` tokens: full layers hold all, local layers min(ctx, W)."""
    per = m.kv_elems_per_token_layer() * q.kv_bytes
    return per * (m.n_full * context + m.local_layers * min(context, m.window or context))


def state_bytes(m: ModelSpec) -> float:
    return m.linear_layers * m.linear_state_elems() * STATE_BYTES


def overhead_bytes(m: ModelSpec, engine: str, hw: HardwareSpec) -> float:
    """Runtime memory beside weights and cache: compute buffers, logits, CUDA context; vLLM keeps 10% free."""
    if engine.startswith(("vllm", "sglang")):
        return 0.10 * hw.mem_gb * 1e9 + 2e9
    return 0.5e9 + UBATCH * m.vocab * 4 + UBATCH * m.hidden * 4 * 8


@dataclass(slots=True)
class Fit:
    weights_gb: float
    kv_gb: float
    state_gb: float
    overhead_gb: float
    total_gb: float
    usable_gb: float
    fits: bool
    max_context: int  # at the asked concurrency
    max_concurrency: int  # at the asked context
    gpu_layers: int | None = None  # hybrid split when it does not fit: layers kept on the GPU
    offload_fraction: float = 0.0  # share of the weights left in host memory


def fit(m: ModelSpec, hw: HardwareSpec, q: Quant, context: int, concurrency: int, engine: str) -> Fit:
    w = total_weight_bytes(m, q)
    kv = kv_bytes(m, q, context) * concurrency
    st = state_bytes(m) * concurrency
    ov = overhead_bytes(m, engine, hw)
    usable = hw.usable_bytes
    total = w + kv + st + ov
    free = usable - w - ov
    per_seq = kv_bytes(m, q, context) + state_bytes(m)
    max_conc = max(0, int(free // per_seq)) if per_seq > 0 else 10**6
    max_ctx = 0
    if free > 0:
        lo, hi = 0, 1 << 22
        while lo < hi:  # largest context whose cache for `concurrency` sequences fits
            mid = (lo + hi + 1) // 2
            if (kv_bytes(m, q, mid) + state_bytes(m)) * concurrency <= free:
                lo = mid
            else:
                hi = mid - 1
        max_ctx = lo
    f = Fit(w / 1e9, kv / 1e9, st / 1e9, ov / 1e9, total / 1e9, usable / 1e9, total <= usable, max_ctx, max_conc)
    if not f.fits:
        # llama.cpp keeps the cache and as many whole layers as fit on the GPU (-ngl); the rest stay on the host.
        per_layer = w / (m.layers + 1)
        room = usable - kv - st - ov - (w - per_layer * m.layers)  # embeddings/output stay
        f.gpu_layers = max(0, min(m.layers, int(room // per_layer)))
        f.offload_fraction = 1 - f.gpu_layers / m.layers
    return f


# --- speed -----------------------------------------------------------------------------------------------

def expert_coverage(m: ModelSpec, tokens: float) -> float:
    """Expected number of distinct routed experts touched by ``tokens`` tokens (uniform routing, an upper
    bound): U = E·(1 − (1 − k/E)^tokens)."""
    if not m.is_moe:
        return 0.0
    return m.experts * (1 - (1 - m.top_k / m.experts) ** tokens)


def peak_tflops(hw: HardwareSpec, q: Quant, backend: str) -> float:
    """The peak of the arithmetic actually used: FP8 for FP8 weights, int8 MMQ for llama.cpp k-quants on
    CUDA, FP16/BF16 otherwise."""
    if q.weights in ("FP8", "W8A8") and hw.fp8_tflops:
        return hw.fp8_tflops
    if q.weights in GGUF_FORMATS and backend.endswith("cuda") and hw.int8_tflops:
        return hw.int8_tflops
    return hw.bf16_tflops


@dataclass(slots=True)
class StepCost:
    """The physical work of one step, as times at the nominal peaks (seconds)."""

    t_weights: float  # weight bytes / bandwidth
    t_kv: float  # KV and recurrent-state bytes / bandwidth
    t_compute: float  # FLOPs / peak
    bytes: float
    flops: float
    t_attention: float = 0.0  # the attention part of t_compute

    @property
    def ceiling(self) -> float:
        return max(self.t_weights + self.t_kv, self.t_compute)


def decode_cost(m: ModelSpec, hw: HardwareSpec, q: Quant, n: int, context: int, backend: str,
                on_gpu_fraction: float = 1.0) -> StepCost:
    """One decode step for ``n`` sequences each ``context`` tokens deep (weights on the device only)."""
    w = weight_bytes(m, q)
    routed = w["experts"] * (expert_coverage(m, n) / m.experts if m.is_moe else 0.0)
    wbytes = (w["dense"] + routed) * on_gpu_fraction + w["lm_head"] + w["embedding"] / m.vocab * n
    per_tok = m.kv_elems_per_token_layer() * q.kv_bytes
    kv = n * per_tok * (m.n_full * context + m.local_layers * min(context, m.window or context))
    kv += n * state_bytes(m) * 2  # recurrent state read and written every step
    flops = n * (2 * m.active_nonemb_params + 2 * m.hidden * m.vocab
                 + 4 * m.heads * m.head_dim * (m.n_full * context + m.local_layers * min(context, m.window or context)))
    bw = hw.bw_gbs * 1e9
    return StepCost(wbytes / bw, kv / bw, flops / (peak_tflops(hw, q, backend) * 1e12), wbytes + kv, flops)


def prefill_cost(m: ModelSpec, hw: HardwareSpec, q: Quant, tokens: int, cached: int, backend: str) -> StepCost:
    """Prefill of ``tokens`` new tokens after ``cached`` ones: causal attention, weights re-read per ubatch."""
    t, c0 = tokens, cached
    attn_full = 4 * m.heads * m.head_dim * (t * c0 + t * t / 2) * m.n_full
    attn_local = 4 * m.heads * m.head_dim * t * min(m.window or (c0 + t), c0 + t) * m.local_layers
    flops = 2 * m.active_nonemb_params * t + attn_full + attn_local + 2 * m.hidden * m.vocab
    w = weight_bytes(m, q)
    ubatches = max(1, math.ceil(t / UBATCH))
    per_ub = min(t, UBATCH)
    routed = w["experts"] * (expert_coverage(m, per_ub) / m.experts if m.is_moe else 0.0)
    wbytes = ubatches * (w["dense"] + routed + w["lm_head"] / ubatches)
    kvb = m.kv_elems_per_token_layer() * q.kv_bytes * (m.n_full * (c0 + t) + m.local_layers * min(c0 + t, m.window or c0 + t))
    bw = hw.bw_gbs * 1e9
    peak = peak_tflops(hw, q, backend) * 1e12
    return StepCost(wbytes / bw, kvb / bw, flops / peak, wbytes + kvb, flops, (attn_full + attn_local) / peak)


@dataclass(slots=True, frozen=True)
class Efficiency:
    """A backend's calibrated costs: estimate = a_w·t_weights + a_kv·t_kv + b (decode), and
    a_c·t_matmul + a_att·t_attention + a_pw·t_weights + b_p (prefill). 1/a_w is the achieved share of bandwidth."""

    decode_a_w: float = 1 / 0.7
    decode_a_kv: float = 1 / 0.7
    decode_b: float = 0.001
    prefill_a_c: float = 2.0
    prefill_a_att: float = 4.0
    prefill_a_w: float = 1.0
    prefill_b: float = 0.005
    rows: int = 0
    source: str = "default (no calibration rows for this backend)"

    @property
    def eta_bw(self) -> float:
        return 1 / self.decode_a_w

    @property
    def eta_compute(self) -> float:
        return 1 / self.prefill_a_c if self.prefill_a_c else 1.0


def decode_time(c: StepCost, eff: Efficiency) -> float:
    mem = eff.decode_a_w * c.t_weights + eff.decode_a_kv * c.t_kv
    return max(mem, c.t_compute * eff.prefill_a_c) + eff.decode_b


def prefill_time(c: StepCost, eff: Efficiency) -> float:
    matmul = c.t_compute - c.t_attention
    return eff.prefill_a_c * matmul + eff.prefill_a_att * c.t_attention + eff.prefill_a_w * (c.t_weights + c.t_kv) \
        + eff.prefill_b


@dataclass(slots=True)
class Estimate:
    ceiling: float
    estimate: float

    def rate(self, units: float = 1.0) -> tuple[float, float]:
        """As a rate (units per second): (ceiling, estimate)."""
        return units / self.ceiling, units / self.estimate


def offload_decode(m: ModelSpec, hw: HardwareSpec, q: Quant, context: int, backend: str, f: Fit,
                   eff: Efficiency) -> Estimate:
    """Hybrid llama.cpp split: GPU layers then host layers, in sequence, so the times add."""
    gpu_share = 1 - f.offload_fraction
    c_gpu = decode_cost(m, hw, q, 1, context, backend, on_gpu_fraction=gpu_share)
    w = weight_bytes(m, q)
    routed = w["experts"] * (m.top_k / m.experts if m.is_moe else 0.0)
    host_bytes = (w["dense"] + routed) * f.offload_fraction
    t_host = host_bytes / (hw.host_bw_gbs * 1e9)
    ceiling = c_gpu.ceiling + t_host
    return Estimate(ceiling, decode_time(c_gpu, eff) + t_host / CPU_ETA_BW)


def offload_prefill(m: ModelSpec, hw: HardwareSpec, q: Quant, tokens: int, cached: int, backend: str, f: Fit,
                    eff: Efficiency) -> Estimate:
    """With weights on the host, llama.cpp uploads them over PCIe for every micro-batch of the prompt."""
    c = prefill_cost(m, hw, q, tokens, cached, backend)
    host_bytes = total_weight_bytes(m, q) * f.offload_fraction
    t_pcie = max(1, math.ceil(tokens / UBATCH)) * host_bytes / (hw.pcie_gbs * 1e9)
    return Estimate(c.ceiling + t_pcie, prefill_time(c, eff) + t_pcie / PCIE_ETA)


# --- serving ---------------------------------------------------------------------------------------------

@dataclass(slots=True)
class ServePoint:
    concurrency: int
    ttft_s: Estimate
    tpot_s: Estimate
    throughput: tuple[float, float]  # aggregate output tok/s: (ceiling, estimate)
    per_agent: tuple[float, float]
    notes: list[str] = field(default_factory=list)


def serve_point(m: ModelSpec, hw: HardwareSpec, q: Quant, backend: str, eff: Efficiency, kind: EngineKind,
                n: int, prompt: int, output: int, spec_speedup: float = 1.0) -> ServePoint:
    """Closed loop, N agents, prompt P, output O (roofline.md "Continuous batching").

    batching: cycle ≈ O·t_dec(N, P+O/2) + N·t_pf(P); TPOT ≈ t_dec + N·t_pf/O; TTFT ≈ t_pf + t_dec + queueing
    (a burst of N waits ≈ (N−1)/2 prefills). sequential (llama.cpp as one stream): one request at a time, so
    aggregate stays at the single-stream rate and each agent waits for the others."""
    ctx = prompt + output // 2
    pf = prefill_cost(m, hw, q, max(prompt, 1), 0, backend)
    t_pf = Estimate(pf.ceiling, prefill_time(pf, eff)) if prompt else Estimate(0.0, 0.0)
    if kind == "sequential":
        d = decode_cost(m, hw, q, 1, ctx, backend)
        t_dec = Estimate(d.ceiling / spec_speedup, decode_time(d, eff) / spec_speedup)
        t_req = Estimate(t_pf.ceiling + output * t_dec.ceiling, t_pf.estimate + output * t_dec.estimate)
        ttft = Estimate((n - 1) * t_req.ceiling + t_pf.ceiling, (n - 1) * t_req.estimate + t_pf.estimate)
        thr = (output / t_req.ceiling, output / t_req.estimate)
        return ServePoint(n, ttft, t_dec, thr, (thr[0] / n, thr[1] / n), ["one stream at a time: requests queue"])
    d = decode_cost(m, hw, q, n, ctx, backend)
    t_dec = Estimate(d.ceiling / spec_speedup, decode_time(d, eff) / spec_speedup)
    cyc_c = output * t_dec.ceiling + n * t_pf.ceiling
    cyc_e = output * t_dec.estimate + n * t_pf.estimate
    tpot = Estimate(t_dec.ceiling + n * t_pf.ceiling / max(output, 1), t_dec.estimate + n * t_pf.estimate / max(output, 1))
    wait = (n - 1) / 2
    ttft = Estimate(t_pf.ceiling * (1 + wait) + t_dec.ceiling, t_pf.estimate * (1 + wait) + t_dec.estimate)
    thr = (n * output / cyc_c, n * output / cyc_e) if output else (n / t_dec.ceiling, n / t_dec.estimate)
    return ServePoint(n, ttft, tpot, thr, (thr[0] / n, thr[1] / n))


# --- speculative decoding --------------------------------------------------------------------------------

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
    """Speed-up of decoding: E / (1 + γ·c + δ)."""
    return expected_tokens(alpha, gamma) / (1 + gamma * draft_cost + overhead)
