"""The roofline model: memory fit, decode and prefill ceilings, batching (llama.cpp slots included), offload,
tensor parallelism, speculative decoding.

Every time has two forms: the physical *ceiling* (efficiency 1: nominal bandwidth and peak FLOPs, no
overhead) and the calibrated *estimate* (a backend's fitted efficiencies and fixed costs, see
``calibration.py``). Formulas follow shared/reference/roofline.md, where the existing tools go wrong:
causal prefill attention (T²/2, not T²), KV traffic with KV heads and the config's head_dim, MoE expert
coverage growing with batch, offloaded layers in sequence (times add), per-engine efficiencies. Beyond it:
arithmetic limited by the board's power as well as its peak, routed-expert matmuls at their own rate,
all-reduces on the critical path of a tensor-parallel step, and fixed per-layer costs counted in GPU cycles
(a 1.41 GHz A100 pays more per layer than a 1.755 GHz H100 PCIe with the same bandwidth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from .. import registry
from ..errors import UsageError
from ..registry import GGML_BACKENDS
from . import queue
from .specs import GIB, HardwareSpec, ModelSpec

#: Bits per weight of each format. GGUF K-quant mixes use llama.cpp's whole-file effective bpw (quantize
#: README: Llama-3.1-8B for Q4_K_M, Q5_K_M, Q6_K, Q8_0; its Llama 2 7B table for Q2_K, Q3_K_*, Q4_K_S,
#: Q5_K_S); single-type formats their block size (Q4_0: 18 bytes per 32 weights = 4.5; IQ types per
#: llama-quantize's list). 4-bit GPU formats keep embeddings and lm_head in BF16. MLX 4/8-bit: group 64 with an
#: fp16 scale and bias (+0.5 bpw).
WEIGHT_BPW: dict[str, float] = {
    "BF16": 16, "FP16": 16, "F16": 16.0005, "F32": 32, "FP8": 8.0, "INT8": 8.0, "W8A8": 8.0,
    "AWQ": 4.156, "GPTQ": 4.156, "MXFP4": 4.25, "NVFP4": 4.5, "MLX4": 4.5, "MLX8": 8.5,
    "Q8_0": 8.501, "Q6_K": 6.563, "Q5_K_M": 5.704, "Q5_K_S": 5.52, "Q5_K": 5.5, "Q5_1": 6.0, "Q5_0": 5.5,
    "Q4_K_M": 4.894, "Q4_K_S": 4.58, "Q4_K": 4.5, "Q4_1": 5.0, "Q4_0": 4.5,
    "Q3_K_L": 4.27, "Q3_K_M": 3.91, "Q3_K_S": 3.50, "Q2_K": 3.35,
    "IQ4_NL": 4.5, "IQ4_XS": 4.25, "IQ3_M": 3.66, "IQ3_S": 3.44, "IQ3_XS": 3.3, "IQ3_XXS": 3.06,
    "IQ2_M": 2.7, "IQ2_S": 2.5, "IQ2_XS": 2.31, "IQ2_XXS": 2.06, "IQ1_M": 1.75, "IQ1_S": 1.56,
}
EMB_KEPT_BF16 = {"AWQ", "GPTQ", "MXFP4", "NVFP4", "FP8", "W8A8"}
#: Formats stored in GGUF files: block-quantized weights and the float ones.
GGUF_FORMATS = {k for k in WEIGHT_BPW if k.startswith(("Q", "IQ"))} | {"F16", "F32"}
#: Weights llama.cpp's CUDA backend multiplies through its int8 MMQ kernels (MXFP4 included: gpt-oss GGUFs).
MMQ_FORMATS = (GGUF_FORMATS - {"F16", "F32"}) | {"MXFP4"}
#: KV-cache bits per element: llama.cpp -ctk q8_0 / q4_0 / ... carry block scales.
KV_BITS: dict[str, float] = {"F16": 16, "BF16": 16, "AUTO": 16, "F32": 32, "FP8": 8, "Q8_0": 8.5,
                             "Q5_1": 6.0, "Q5_0": 5.5, "Q4_1": 5.0, "Q4_0": 4.5, "IQ4_NL": 4.5}
#: Block-quantized KV caches, read through dequantizing attention kernels (their own efficiency).
QUANT_KV = {"Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "IQ4_NL"}
#: Recurrent (Gated DeltaNet) state is kept in fp32.
STATE_BYTES = 4
#: Host memory reached from a GPU-offloading llama.cpp: the CPU runs its layers at this share of the host's
#: bandwidth (EPYC tg128 evidence in roofline.md: 0.30).
CPU_ETA_BW = 0.30
#: PCIe transfers reach this share of the link's nominal rate (roofline.md: 80–85%).
PCIE_ETA = 0.8
#: llama.cpp's default micro-batch (-ub): weights are read once per micro-batch of prompt processing.
UBATCH = 512
#: vLLM/SGLang prefill a prompt in chunks of their token budget per step, one weight pass each: the budget of
#: a box with 70 GiB or more (default_batch_tokens), where a prefill is predicted apart from any serving loop.
CHUNK_TOKENS = 8192
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
#: The clock the per-layer fixed cost (t_layer) is stated at, about the catalog's median boost clock (1.755
#: GHz). A kernel's launch, ramp and drain on the GPU take cycles, so on a box at ``boost_ghz`` they take
#: REF_GHZ/boost_ghz of that time: the A100's 1.41 GHz pays 1.24x what the H100 PCIe's 1.755 GHz does per
#: layer. The per-expert cost (t_expert) stays in seconds: MoE prompts launched one GEMM per expert from the host.
REF_GHZ = 1.8
#: llama.cpp without flash attention (-fa 0) materialises each layer's scores: KQ written in F32, read and
#: written by the softmax, read by KQ·V: 4 passes of 4 bytes per score. With it (-fa 1) the scores stay on chip.
SCORE_BYTES = 16

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

    @property
    def kv_quantized(self) -> bool:
        return self.kv in QUANT_KV

    @classmethod
    def parse(cls, weights: str, kv: str) -> Quant:
        w, k = weights.upper().replace("-", "_"), kv.upper().replace("-", "_")
        if w not in WEIGHT_BPW:
            raise UsageError(f"unknown weight format '{weights}': use one of {', '.join(WEIGHT_BPW)}")
        if k not in KV_BITS:
            raise UsageError(f"unknown KV-cache format '{kv}': use one of {', '.join(k.lower() for k in KV_BITS)}")
        return cls(w, k)


def check_engine(hw: HardwareSpec, engine: str) -> None:
    """Refuse an engine the predictor does not know (the registry's), or one that does not run on the box."""
    eng = registry.engine(engine)  # the engine's own name, then a version or backend: not "vllmx"
    apple = hw.default_backend == "metal"
    words = registry.words(engine)
    if eng.key_rule == "vendor" and len(words) > 1:
        b = words[1]
        if b not in registry.VENDOR_BACKENDS and not b[:1].isdigit():
            raise UsageError(f"'{engine}': after {words[0]} give its version (e.g. '{words[0]} 0.21') or cuda|rocm")
        if b == "rocm" and hw.vendor != "amd" or b == "cuda" and hw.vendor in ("amd", "intel"):
            raise UsageError(f"{words[0]} {b} does not run on {hw.id}: give '{words[0]}' and the box decides")
    if apple and eng.platform == "not-apple":
        raise UsageError(f"{engine.split()[0]} does not run on Apple GPUs ({hw.id}): use llama.cpp (Metal) or mlx")
    if eng.platform == "apple-only" and not apple:
        raise UsageError(f"{eng.name} runs on Apple silicon only, not on {hw.id}")
    named = registry.named_backend(engine)
    if named is not None:
        _check_llamacpp_backend(hw, named)


def _check_llamacpp_backend(hw: HardwareSpec, b: str) -> None:
    """llama.cpp's backend against the box's vendor."""
    apple = hw.default_backend == "metal"
    if b not in GGML_BACKENDS:
        raise UsageError(f"unknown llama.cpp backend '{b}': use one of {', '.join(GGML_BACKENDS)}")
    if b == "metal" and not apple:
        raise UsageError(f"llama.cpp's Metal backend runs on Apple silicon only, not on {hw.id}")
    if b in ("cuda", "rocm", "vulkan", "sycl") and apple:
        raise UsageError(f"{hw.id} is an Apple GPU: llama.cpp runs there with Metal, not {b}")
    if b == "cuda" and hw.vendor in ("amd", "intel"):
        raise UsageError(f"{hw.id} is not an NVIDIA GPU: use llama.cpp vulkan or rocm")
    if b == "rocm" and hw.vendor != "amd":
        raise UsageError(f"llama.cpp's ROCm backend runs on AMD GPUs, not on {hw.id}: use llama.cpp "
                         f"{hw.default_backend}")
    if b == "cpu" and hw.kind == "gpu":
        raise UsageError(f"llama.cpp cpu runs on the host's CPU, which the catalog does not describe for {hw.id}: "
                         f"use llama.cpp {hw.default_backend}")


def check_combination(hw: HardwareSpec, q: Quant, engine: str) -> None:
    """Refuse what cannot run, with the reason and what to do instead."""
    eng = registry.engine(engine)
    if (q.weights in ("FP8", "W8A8") or q.kv == "FP8") and not hw.has_fp8 and not eng.gguf:
        raise UsageError(
            f"FP8 needs FP8 tensor cores (Hopper, Ada, Blackwell, MI300), which {hw.id} lacks: use BF16, INT8, "
            "AWQ/GPTQ or a GGUF quant (vLLM's weight-only FP8 fallback runs at BF16 speed)"
        )
    if eng.gguf and q.weights not in GGUF_FORMATS | {"MXFP4", "BF16"}:
        raise UsageError(f"llama.cpp runs GGUF weights, not {q.weights}: use a GGUF quant (Q4_K_M, Q8_0, ...), F16 or BF16")
    if eng.gguf and q.kv == "FP8":
        raise UsageError("llama.cpp has no FP8 KV cache: use --kv f16, q8_0 or q4_0 (-ctk/-ctv)")
    if not eng.gguf and q.kv_quantized and eng.kernels != "mlx":
        raise UsageError(f"--kv {q.kv.lower()} is a llama.cpp cache type; {engine.split()[0]} keeps its KV cache in "
                         "auto (the model's dtype) or fp8")
    if q.weights in GGUF_FORMATS - {"F16", "F32"} and eng.key_rule == "vendor":  # vLLM, SGLang
        raise UsageError(f"{engine} does not serve GGUF {q.weights} weights efficiently: use llama.cpp, or AWQ/GPTQ/FP8")
    if q.weights.startswith("MLX") and eng.kernels != "mlx":
        raise UsageError(f"{q.weights} weights are MLX's format: use --engine mlx, or a GGUF quant for llama.cpp")


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


def _kv_tokens(m: ModelSpec, context: float) -> float:
    """Cached token-layers at ``context``: full layers hold all, local layers min(ctx, W)."""
    return m.n_full * context + m.local_layers * min(context, m.window or context)


def kv_bytes(m: ModelSpec, q: Quant, context: int) -> float:
    """KV cache of one sequence at ``context`` tokens: full layers hold all, local layers min(ctx, W)."""
    return m.kv_elems_per_token_layer() * q.kv_bytes * _kv_tokens(m, context)


def state_bytes(m: ModelSpec) -> float:
    return m.linear_layers * m.linear_state_elems() * STATE_BYTES


def overhead_bytes(m: ModelSpec, engine: str, hw: HardwareSpec, ubatch: int = UBATCH, context: int = 0,
                   flash_attn: bool = True) -> float:
    """Runtime memory beside weights and cache: compute buffers, logits, CUDA context; vLLM keeps 10% free.
    Without flash attention llama.cpp's compute buffer also holds one layer's F32 scores, ubatch × heads ×
    context."""
    reserve = registry.engine(engine).reserve
    if reserve:
        return reserve * hw.mem_gb * GIB + 2 * GIB
    scores = 0.0 if flash_attn else min(ubatch, max(context, 1)) * m.heads * context * 4
    return 0.5 * GIB + ubatch * m.vocab * 4 + ubatch * m.hidden * 4 * 8 + scores


@dataclass(slots=True)
class Fit:
    """Memory in GiB (the unit vendors' "GB" of VRAM means)."""

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


#: The largest context fit looks for: past it, memory is not what limits a sequence.
FIT_SEARCH_TOKENS = 1 << 22


def fit(m: ModelSpec, hw: HardwareSpec, q: Quant, context: int, concurrency: int, engine: str,
        ubatch: int = UBATCH, flash_attn: bool = True) -> Fit:
    w = total_weight_bytes(m, q)
    kv = kv_bytes(m, q, context) * concurrency
    st = state_bytes(m) * concurrency
    ov = overhead_bytes(m, engine, hw, ubatch, context, flash_attn)
    usable = hw.usable_bytes
    total = w + kv + st + ov
    free = usable - w - ov
    per_seq = kv_bytes(m, q, context) + state_bytes(m)
    max_conc = max(0, int(free // per_seq)) if per_seq > 0 else 10**6

    def held(ctx: int) -> float:  # what grows with the context: the caches, and without flash attention the scores
        return (kv_bytes(m, q, ctx) + state_bytes(m)) * concurrency + overhead_bytes(m, engine, hw, ubatch, ctx,
                                                                                     flash_attn)
    max_ctx = 0
    if held(0) < usable - w:
        lo, hi = 0, FIT_SEARCH_TOKENS
        while lo < hi:  # largest context whose cache for `concurrency` sequences fits
            mid = (lo + hi + 1) // 2
            if held(mid) <= usable - w:
                lo = mid
            else:
                hi = mid - 1
        max_ctx = lo
    f = Fit(w / GIB, kv / GIB, st / GIB, ov / GIB, total / GIB, usable / GIB, total <= usable, max_ctx, max_conc)
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


def fp16_peak(hw: HardwareSpec) -> float:
    """The FP16 tensor peak with FP16 accumulate where the box has one above its BF16 figure (GeForce cards run
    FP32 accumulate at half rate), else the BF16/FP16 peak."""
    return hw.fp16_tflops or hw.bf16_tflops


def peak_tflops(hw: HardwareSpec, q: Quant, backend: str) -> float:
    """The peak of the arithmetic the weight matmuls use: FP8 for FP8 weights; for llama.cpp on CUDA the FP16
    tensor peak (cuBLAS F16 and the MMQ kernels alike: llama-bench pp512 of Q4_K_M runs at 0.74-0.91 of F16's
    on every GPU of published-more.csv, whatever the GPU's INT8:FP16 ratio, so the INT8 peak describes none
    of them); FP16/BF16 otherwise."""
    if q.weights in ("FP8", "W8A8") and hw.fp8_tflops:
        return hw.fp8_tflops
    return fp16_peak(hw) if _ggml_cuda(backend) else hw.bf16_tflops


def attention_peak(hw: HardwareSpec, backend: str) -> float:
    """Flash attention runs in FP16: with FP16 accumulate in llama.cpp's CUDA kernels."""
    return fp16_peak(hw) if _ggml_cuda(backend) else hw.bf16_tflops


def _ggml_cuda(backend: str) -> bool:
    """ggml's CUDA kernels (llama.cpp's, and llama-cpp-python's vendored copy): FP16 accumulate."""
    b = registry.backend(backend)
    return b is not None and b.engine.gguf and b.gpu == "cuda"


@dataclass(slots=True)
class StepCost:
    """The physical work of one step, as times at the nominal peaks (seconds)."""

    t_weights: float  # weight bytes / bandwidth (every read, all micro-batches)
    t_kv: float  # f16/fp8 KV and recurrent-state bytes / bandwidth
    t_compute: float  # matmul FLOPs / the weights' arithmetic peak
    bytes: float
    flops: float
    t_attention: float = 0.0  # attention FLOPs / the FP16 peak (flash attention runs in FP16)
    t_kvq: float = 0.0  # block-quantized KV bytes / bandwidth
    layers: int = 0
    passes: int = 1  # forward passes (micro-batches) in the step
    quantized: bool = False  # block-quantized weights: the matmuls dequantize
    expert_gemms: float = 0.0  # prefill: routed-expert matmuls launched (touched experts x 3 x MoE layers x passes)
    t_routed: float = 0.0  # the part of t_compute spent in routed-expert matmuls (MoE)
    t_comm: float = 0.0  # tensor parallelism: all-reduce bytes over the GPU-to-GPU link at its nominal rate
    comm_ops: int = 0  # ... and how many all-reduces (each pays a fixed latency)
    t_power: float = 0.0  # all FLOPs / (board power in W x 1e12): the time at 1 TFLOPS per watt; 0 without a TDP
    t_deq: float = 0.0  # prefill: one byte per dense block-quantized weight per pass, over the bandwidth
    cycles: float = 1.0  # the per-layer cost's scale on this box: REF_GHZ / its clock (cycle_scale)

    @property
    def ceiling(self) -> float:
        """Memory traffic and arithmetic overlap: the slower of the two, at the nominal peaks."""
        return max(self.t_weights + self.t_kv + self.t_kvq, self.t_compute + self.t_attention) + self.t_comm


def cycle_scale(hw: HardwareSpec) -> float:
    """How long a fixed cost stated at REF_GHZ takes on ``hw``: REF_GHZ / its boost clock (1 when the catalog
    gives none, as a user's entry may not)."""
    return REF_GHZ / hw.boost_ghz if hw.boost_ghz else 1.0


def _active_routed(m: ModelSpec) -> float:
    """Routed-expert parameters each token runs through (top-k of E per MoE layer)."""
    return m.routed_params * m.top_k / m.experts if m.is_moe else 0.0


def _t_power(hw: HardwareSpec, q: Quant, backend: str, matmul: float, attention: float) -> float:
    """The step's FLOPs at 1 TFLOPS per watt of the box's TDP, counted in FP16 FLOPs: a tensor core doing FP8 at
    twice the FP16 rate spends about half the energy per FLOP (the datasheets give both peaks at one TDP).
    0 when the catalog gives no TDP: then no power term."""
    if not hw.tdp_w:
        return 0.0
    ref = fp16_peak(hw)
    fp16_flops = matmul * ref / peak_tflops(hw, q, backend) + attention * ref / attention_peak(hw, backend)
    return fp16_flops / (hw.tdp_w * 1e12)


def decode_cost(m: ModelSpec, hw: HardwareSpec, q: Quant, n: int, context: int, backend: str,
                on_gpu_fraction: float = 1.0, per_seq: int = 1, flash_attn: bool = True) -> StepCost:
    """One decode step for ``n`` sequences each ``context`` tokens deep (weights on the device only), each
    sequence bringing ``per_seq`` query tokens (1; γ+1 when speculative decoding verifies γ drafted tokens):
    the weights and the KV cache are read once, the arithmetic and the experts touched grow with n·per_seq.
    Without flash attention the scores of every query against every cached token make SCORE_BYTES of traffic
    each, streamed beside the cache."""
    toks = n * per_seq
    w = weight_bytes(m, q)
    routed = w["experts"] * (expert_coverage(m, toks) / m.experts if m.is_moe else 0.0)
    wbytes = (w["dense"] + routed) * on_gpu_fraction + w["lm_head"] + w["embedding"] / m.vocab * toks
    kv = n * m.kv_elems_per_token_layer() * q.kv_bytes * _kv_tokens(m, context)
    state = n * state_bytes(m) * 2  # recurrent state read and written every step
    if not flash_attn:
        state += toks * m.heads * _kv_tokens(m, context) * SCORE_BYTES
    mm = toks * (2 * m.active_nonemb_params + 2 * m.hidden * m.vocab)
    routed_mm = toks * 2 * _active_routed(m)
    att = toks * 4 * m.heads * m.head_dim * _kv_tokens(m, context)
    bw = hw.bw_gbs * 1e9
    peak = peak_tflops(hw, q, backend) * 1e12
    t_kv, t_kvq = ((state / bw, kv / bw) if q.kv_quantized else ((kv + state) / bw, 0.0))
    return StepCost(wbytes / bw, t_kv, mm / peak, wbytes + kv + state, mm + att,
                    att / (attention_peak(hw, backend) * 1e12), t_kvq, m.layers, 1, q.weights in MMQ_FORMATS,
                    t_routed=routed_mm / peak, t_power=_t_power(hw, q, backend, mm, att), cycles=cycle_scale(hw))


def prefill_cost(m: ModelSpec, hw: HardwareSpec, q: Quant, tokens: int, cached: int, backend: str,
                 ubatch: int = UBATCH, flash_attn: bool = True) -> StepCost:
    """Prefill of ``tokens`` new tokens after ``cached`` ones: causal attention; the weights are read once per
    micro-batch (``ubatch``, llama.cpp's -ub), and those reads overlap the arithmetic. Without flash attention
    (llama.cpp -fa 0) each micro-batch computes its whole masked score block, t·c0 + t·(t+ub)/2 per head and
    layer rather than the causal t·c0 + t²/2, and moves SCORE_BYTES per score through memory."""
    t, c0 = tokens, cached
    ub = max(1, ubatch)
    passes = max(1, math.ceil(t / ub))
    per_ub = min(t, ub)
    pairs = t * c0 + (t * t / 2 if flash_attn else t * (t + per_ub) / 2)  # query-key pairs of a full layer
    local_pairs = t * min(m.window or (c0 + t), c0 + t)
    attn_full = 4 * m.heads * m.head_dim * pairs * m.n_full
    attn_local = 4 * m.heads * m.head_dim * local_pairs * m.local_layers
    scores = 0.0 if flash_attn else m.heads * (pairs * m.n_full + local_pairs * m.local_layers) * SCORE_BYTES
    mm = 2 * m.active_nonemb_params * t + 2 * m.hidden * m.vocab
    w = weight_bytes(m, q)
    routed = w["experts"] * (expert_coverage(m, per_ub) / m.experts if m.is_moe else 0.0)
    wbytes = passes * (w["dense"] + routed) + w["lm_head"]
    kvb = m.kv_elems_per_token_layer() * q.kv_bytes * _kv_tokens(m, c0 + t)
    bw = hw.bw_gbs * 1e9
    t_kv, t_kvq = (scores / bw, kvb / bw) if q.kv_quantized else ((kvb + scores) / bw, 0.0)
    gemms = passes * expert_coverage(m, per_ub) * 3 * m.moe_layers if m.is_moe else 0.0
    peak = peak_tflops(hw, q, backend) * 1e12
    return StepCost(wbytes / bw, t_kv, mm / peak, wbytes + kvb + scores,
                    mm + attn_full + attn_local, (attn_full + attn_local) / (attention_peak(hw, backend) * 1e12),
                    t_kvq, m.layers, passes, q.weights in MMQ_FORMATS, gemms,
                    t_routed=2 * _active_routed(m) * t / peak, t_power=_t_power(hw, q, backend, mm, attn_full + attn_local),
                    t_deq=passes * w["dense"] / (q.bpw / 8) / bw if q.weights in MMQ_FORMATS else 0.0,
                    cycles=cycle_scale(hw))


#: The calibrated constants: name -> (lower bound, upper bound). Shares of a nominal peak lie in (0, 1]: no
#: backend beats its hardware. The per-layer fixed cost is a launch/sync time per layer per forward pass.
PARAM_BOUNDS: dict[str, tuple[float, float]] = {
    "eta_w": (0.2, 1.0),  # share of nominal bandwidth reached streaming weights
    "eta_kv": (0.1, 1.0),  # ... streaming an f16/fp8 KV cache and recurrent state
    "eta_kvq": (0.01, 1.0),  # ... reading a block-quantized KV cache through dequantizing kernels
    "t_layer": (0.0, 300e-6),  # fixed seconds per layer per forward pass at REF_GHZ (kernel launches, syncs)
    "eta_c": (0.02, 1.0),  # share of the arithmetic peak reached by the weight matmuls
    "eta_q": (0.2, 1.0),  # ... of that, kept when the weights are block-quantized (dequantizing matmuls)
    "eta_moe": (0.1, 1.0),  # share of the dense matmul rate kept by routed-expert matmuls (gathered rows, few per expert)
    "t_expert": (0.0, 100e-6),  # prefill: fixed seconds per routed-expert matmul (one small GEMM per expert)
    "eta_att": (0.01, 1.0),  # share of the FP16 peak reached by attention (prefill at depth)
    "flops_per_w": (0.05, 10.0),  # TFLOPS per watt of board power (TDP) the arithmetic may draw; 10: no limit
    "deq_bytes": (0.0, 8.0),  # prompt matmuls: bytes per block-quantized weight a separate dequantize pass moves
}


@dataclass(slots=True, frozen=True)
class Efficiency:
    """A backend's calibrated constants (see PARAM_BOUNDS); the defaults are the physical priors every fit
    starts from and shrinks toward (calibration.PRIORS says where each comes from)."""

    eta_w: float = 0.65
    eta_kv: float = 0.65
    eta_kvq: float = 0.3
    t_layer: float = 30e-6
    eta_c: float = 0.6  # Strix Halo's hipBLASLt BF16 GEMM reaches 36.9 of 59.4 TF (roofline.md): 0.62
    eta_q: float = 1.0
    eta_moe: float = 1.0
    t_expert: float = 5e-6
    eta_att: float = 0.3
    flops_per_w: float = 1.0  # H100 SXM datasheet: 989 TF at 700 W is 1.4 TF/W at the peak; GEMMs sit below it
    deq_bytes: float = 2.6  # Q4_K_M's 0.61 bytes per weight read, 2 written as F16 (calibration.PRIORS says where)
    rows: int = 0
    calibrated: bool = False
    source: str = "UNCALIBRATED: no measurements of this backend; physical priors only"
    era: str = ""  # the year of the engine builds these constants were fitted on ("": undated or priors)


def _arith(c: StepCost, eff: Efficiency) -> float:
    """Arithmetic time: each FLOP costs time at the peak and energy out of the board's power budget. A GPU held
    at its TDP lowers its clocks, so sustained throughput F obeys 1/F = 1/(eta_c·peak) + 1/(flops_per_w·TDP)."""
    mm = (c.t_compute - c.t_routed + c.t_routed / eff.eta_moe) / (eff.eta_c * (eff.eta_q if c.quantized else 1.0))
    return mm + c.t_attention / eff.eta_att + c.t_power / eff.flops_per_w


def decode_time(c: StepCost, eff: Efficiency) -> float:
    """Memory streams and arithmetic overlap (the slower wins), plus a fixed cost per layer."""
    mem = c.t_weights / eff.eta_w + c.t_kv / eff.eta_kv + c.t_kvq / eff.eta_kvq
    return max(mem, _arith(c, eff)) + c.passes * c.layers * eff.t_layer * c.cycles + _comm(c)


def prefill_time(c: StepCost, eff: Efficiency) -> float:
    """As decode, plus a fixed cost per routed-expert matmul (MoE prompts run one small GEMM per expert), plus a
    dequantize pass over the dense block-quantized weights: a kernel of its own that streams ``deq_bytes`` per
    weight per micro-batch before the matmul starts, so its time adds (it does not overlap the arithmetic). It
    costs the same FLOPs everywhere but time in inverse proportion to the bandwidth: a GDDR card with 2-3 times
    less bandwidth per FLOP than an HBM one loses more of its prompt rate to it."""
    mem = c.t_weights / eff.eta_w + c.t_kv / eff.eta_kv + c.t_kvq / eff.eta_kvq
    deq = c.t_deq * eff.deq_bytes / eff.eta_w
    return (max(_arith(c, eff), mem) + c.passes * c.layers * eff.t_layer * c.cycles + c.expert_gemms * eff.t_expert
            + deq + _comm(c))


# --- tensor parallelism ----------------------------------------------------------------------------------

#: NCCL's all-reduce reaches this share of the link's nominal rate on large buffers (an 8x A100 NVLink
#: node's nccl-tests run: 195 of 300 GB/s each way, li-plus/playground cuda/nccl.md).
LINK_ETA = 0.65
#: ... and a small all-reduce costs this much whatever its size (nccl-tests all_reduce_perf, 2 GPUs:
#: ~15 µs for 8 B to 16 KiB; the "Time" section of nccl-tests' PERFORMANCE.md explains the constant).
ALLREDUCE_LATENCY_S = 15e-6


def _comm(c: StepCost) -> float:
    return c.t_comm / LINK_ETA + c.comm_ops * ALLREDUCE_LATENCY_S


def tensor_parallel(c: StepCost, m: ModelSpec, hw: HardwareSpec, tp: int, tokens: int) -> StepCost:
    """One step split Megatron-style over ``tp`` GPUs of one box (Shoeybi et al. 2019): each GPU holds 1/tp of
    every layer's weights and of the KV heads (a KV head is never split: with fewer KV heads than GPUs they
    are replicated) and does 1/tp of the arithmetic; each layer then all-reduces its activations twice (after
    attention and after the MLP), ``tokens`` x hidden x 2 bytes each. A ring all-reduce moves 2(tp−1)/tp of
    the buffer over each GPU's link (nccl-tests PERFORMANCE.md, bus bandwidth), NVLink where the box has it,
    else PCIe; it sits on the critical path, so its time adds."""
    if tp <= 1:
        return c
    kv_share = 1 / min(tp, max(1, m.kv_heads))
    link = (hw.nvlink_gbs or hw.pcie_gbs) * 1e9
    ops = 2 * m.layers * c.passes
    comm_bytes = 2 * m.layers * tokens * m.hidden * 2
    return replace(c, t_weights=c.t_weights / tp, t_kv=c.t_kv * kv_share, t_kvq=c.t_kvq * kv_share,
                   t_compute=c.t_compute / tp, t_attention=c.t_attention / tp, t_routed=c.t_routed / tp,
                   t_power=c.t_power / tp, t_deq=c.t_deq / tp, bytes=c.bytes / tp, flops=c.flops / tp,
                   t_comm=2 * (tp - 1) / tp * comm_bytes / link, comm_ops=ops)


@dataclass(slots=True)
class Estimate:
    ceiling: float
    estimate: float

    def rate(self, units: float = 1.0) -> tuple[float, float]:
        """As a rate (units per second): (ceiling, estimate)."""
        return units / self.ceiling, units / self.estimate


def offload_decode(m: ModelSpec, hw: HardwareSpec, q: Quant, context: int, backend: str, f: Fit,
                   eff: Efficiency, flash_attn: bool = True) -> Estimate:
    """Hybrid llama.cpp split: GPU layers then host layers, in sequence, so the times add."""
    gpu_share = 1 - f.offload_fraction
    c_gpu = decode_cost(m, hw, q, 1, context, backend, on_gpu_fraction=gpu_share, flash_attn=flash_attn)
    w = weight_bytes(m, q)
    routed = w["experts"] * (m.top_k / m.experts if m.is_moe else 0.0)
    host_bytes = (w["dense"] + routed) * f.offload_fraction
    t_host = host_bytes / (hw.host_bw_gbs * 1e9)
    ceiling = c_gpu.ceiling + t_host
    return Estimate(ceiling, decode_time(c_gpu, eff) + t_host / CPU_ETA_BW)


def offload_prefill(m: ModelSpec, hw: HardwareSpec, q: Quant, tokens: int, cached: int, backend: str, f: Fit,
                    eff: Efficiency, ubatch: int = UBATCH, flash_attn: bool = True) -> Estimate:
    """With weights on the host, llama.cpp uploads them over PCIe for every micro-batch of the prompt."""
    c = prefill_cost(m, hw, q, tokens, cached, backend, ubatch, flash_attn)
    host_bytes = total_weight_bytes(m, q) * f.offload_fraction
    t_pcie = c.passes * host_bytes / (hw.pcie_gbs * 1e9)
    return Estimate(c.ceiling + t_pcie, prefill_time(c, eff) + t_pcie / PCIE_ETA)


# --- serving ---------------------------------------------------------------------------------------------

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
