"""The roofline model of one engine step: decode and prefill ceilings and their calibrated estimates.

Every time has two forms: the physical *ceiling* (efficiency 1: nominal bandwidth and peak FLOPs, no
overhead) and the calibrated *estimate* (a backend's fitted efficiencies and fixed costs, see
``calibration.py``). The formulas correct where the existing tools go wrong (docs/calibration.md):
causal prefill attention (T²/2, not T²), KV traffic with KV heads and the config's head_dim, MoE expert
coverage growing with batch, per-engine efficiencies. Beyond them: arithmetic limited by the board's power as well
as its peak, routed-expert matmuls at their own rate, all-reduces on the critical path of a tensor-parallel step
(parallelism.py splits the step), and fixed per-layer costs counted in GPU cycles (a 1.41 GHz A100 pays more per
layer than a 1.755 GHz H100 PCIe with the same bandwidth). Formats are in formats.py, what fits in memory.py,
offload in offload.py, serving loops in serving.py, speculative decoding in speculation.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import registry
from .formats import MMQ_FORMATS, SUPERBLOCK_FORMATS, Quant
from .memory import UBATCH, kv_tokens, state_bytes, weight_bytes
from .specs import HardwareSpec, ModelSpec


#: vLLM/SGLang prefill a prompt in chunks of their token budget per step, one weight pass each: the budget of
#: a box with 70 GiB or more (default_batch_tokens), where a prefill is predicted apart from any serving loop.
CHUNK_TOKENS = 8192
#: The clock the per-layer fixed cost (t_layer) is stated at, about the catalog's median boost clock (1.755
#: GHz). A kernel's launch, ramp and drain on the GPU take cycles, so on a box at ``boost_ghz`` they take
#: REF_GHZ/boost_ghz of that time: the A100's 1.41 GHz pays 1.24x what the H100 PCIe's 1.755 GHz does per
#: layer. The per-expert cost (t_expert) stays in seconds: MoE prompts launched one GEMM per expert from the host.
REF_GHZ = 1.8
#: llama.cpp without flash attention (-fa 0) materialises each layer's scores: KQ written in F32, read and
#: written by the softmax, read by KQ·V: 4 passes of 4 bytes per score. With it (-fa 1) the scores stay on chip.
SCORE_BYTES = 16


def expert_coverage(m: ModelSpec, tokens: float) -> float:
    """Expected number of distinct routed experts touched by ``tokens`` tokens (uniform routing, an upper
    bound): U = E·(1 − (1 − k/E)^tokens)."""
    if not m.is_moe:
        return 0.0
    return float(m.experts * (1 - (1 - m.top_k / m.experts) ** tokens))


def fp16_peak(hw: HardwareSpec) -> float:
    """The FP16 tensor peak with FP16 accumulate where the box has one above its BF16 figure (GeForce cards run
    FP32 accumulate at half rate), else the BF16/FP16 peak."""
    return hw.fp16_tflops or hw.bf16_tflops


def peak_tflops(hw: HardwareSpec, q: Quant, backend: str, mmq: bool = False) -> float:
    """The peak of the arithmetic the weight matmuls use: FP8 for FP8 weights; for llama.cpp on CUDA the FP16
    tensor peak, and for its MMQ builds' block-quantized weights (``mmq``, registry.MMQ_SINCE) the INT8 one, where
    the catalog gives it: MMQ runs on the int8 tensor cores, though the SMs' rate binds first on every GPU the
    2025 scoreboard measured (sm_rates). Before MMQ, quantized prompts went to cuBLAS in F16 (llama-bench pp512 of
    Q4_K_M in May 2024 at 0.74-0.91 of F16's on every GPU of published-more.csv, whatever its INT8:FP16 ratio).
    FP16/BF16 otherwise."""
    if q.weights in ("FP8", "W8A8") and hw.fp8_tflops:
        return hw.fp8_tflops
    if mmq and hw.int8_tflops and q.weights in MMQ_FORMATS and _ggml_cuda(backend):
        return hw.int8_tflops
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
    t_unpack: float = 0.0  # ggml's quantized kernels: weight bytes read / (SMs x clock), at 1 byte per SM-cycle
    t_mmq: float = 0.0  # ... and matmul FLOPs / (SMs x clock), at 1 FLOP per SM-cycle (sm_rates)
    superblock: bool = False  # the weights are K-quants or i-quants, not 32-weight blocks (Efficiency.sm_simple)

    @property
    def ceiling(self) -> float:
        """Memory traffic and arithmetic overlap: the slower of the two, at the nominal peaks."""
        return max(self.t_weights + self.t_kv + self.t_kvq, self.t_compute + self.t_attention) + self.t_comm


def cycle_scale(hw: HardwareSpec) -> float:
    """How long a fixed cost stated at REF_GHZ takes on ``hw``: REF_GHZ / its boost clock (1 when the catalog
    gives none, as a user's entry may not)."""
    return REF_GHZ / hw.boost_ghz if hw.boost_ghz else 1.0


def sm_rates(hw: HardwareSpec, q: Quant, backend: str, wbytes: float, flops: float,
             mmq: bool) -> tuple[float, float]:
    """ggml's CUDA kernels for block-quantized weights (mmvq for a few tokens, MMQ for a prompt) unpack each block
    with integer and load instructions before the dot products, and their rate follows the SMs and the clock,
    not the tensor peak or the bandwidth: llama.cpp's 2025 CUDA scoreboard (discussion 15013, llama-2-7b Q4_0
    pp512) runs at 0.46-0.64 TFLOPS per SM-GHz on every GPU from the RTX 3060 to the H100 and the RTX PRO 6000,
    where its share of the FP16 tensor peak spans 15% (H100) to 60% (RTX 4090); and HBM boxes decode K-quants
    below their bandwidth roofline where GDDR ones reach it (A30, A100 and H100 PCIe rows, 2024-2025). Returns
    (t_unpack, t_mmq): the step's weight bytes and matmul FLOPs at one byte and one FLOP per SM-cycle; (0, 0)
    where the box's SMs or clock are not in the catalog, or the weights are not block-quantized, or the engine
    is not ggml's on CUDA. t_mmq is 0 for builds before MMQ (``mmq`` False, registry.MMQ_SINCE): they
    dequantized a prompt's weights to F16 for cuBLAS instead (StepCost.t_deq)."""
    if not (hw.sms and hw.boost_ghz and q.weights in MMQ_FORMATS and _ggml_cuda(backend)):
        return 0.0, 0.0
    per_s = hw.sms * hw.boost_ghz * 1e9
    return wbytes / per_s, flops / per_s if mmq else 0.0


def _active_routed(m: ModelSpec) -> float:
    """Routed-expert parameters each token runs through (top-k of E per MoE layer)."""
    return m.routed_params * m.top_k / m.experts if m.is_moe else 0.0


def _t_power(hw: HardwareSpec, q: Quant, backend: str, matmul: float, attention: float, mmq: bool) -> float:
    """The step's FLOPs at 1 TFLOPS per watt of the box's TDP, counted in FP16 FLOPs: a tensor core doing FP8 (or
    INT8: MMQ, ``mmq``) at twice the FP16 rate spends about half the energy per FLOP (the datasheets give both
    peaks at one TDP). 0 when the catalog gives no TDP: then no power term."""
    if not hw.tdp_w:
        return 0.0
    ref = fp16_peak(hw)
    fp16_flops = matmul * ref / peak_tflops(hw, q, backend, mmq) + attention * ref / attention_peak(hw, backend)
    return fp16_flops / (hw.tdp_w * 1e12)


def decode_cost(m: ModelSpec, hw: HardwareSpec, q: Quant, n: int, context: int, backend: str,
                on_gpu_fraction: float = 1.0, per_seq: int = 1, flash_attn: bool = True,
                mmq: bool = True) -> StepCost:
    """One decode step for ``n`` sequences each ``context`` tokens deep (weights on the device only), each
    sequence bringing ``per_seq`` query tokens (1; γ+1 when speculative decoding verifies γ drafted tokens):
    the weights and the KV cache are read once, the arithmetic and the experts touched grow with n·per_seq.
    Without flash attention the scores of every query against every cached token make SCORE_BYTES of traffic
    each, streamed beside the cache. ``mmq``: builds whose quantized matmuls of many tokens run MMQ (sm_rates)."""
    toks = n * per_seq
    w = weight_bytes(m, q)
    routed = w["experts"] * (expert_coverage(m, toks) / m.experts if m.is_moe else 0.0)
    wbytes = (w["dense"] + routed) * on_gpu_fraction + w["lm_head"] + w["embedding"] / m.vocab * toks
    kv = n * m.kv_elems_per_token_layer() * q.kv_bytes * kv_tokens(m, context)
    state = n * state_bytes(m) * 2  # recurrent state read and written every step
    if not flash_attn:
        state += toks * m.heads * kv_tokens(m, context) * SCORE_BYTES
    mm = toks * (2 * m.active_nonemb_params + 2 * m.hidden * m.vocab)
    routed_mm = toks * 2 * _active_routed(m)
    att = toks * 4 * m.heads * m.head_dim * kv_tokens(m, context)
    bw = hw.bw_gbs * 1e9
    peak = peak_tflops(hw, q, backend, mmq) * 1e12
    t_kv, t_kvq = ((state / bw, kv / bw) if q.kv_quantized else ((kv + state) / bw, 0.0))
    t_unpack, t_mmq = sm_rates(hw, q, backend, wbytes, mm, mmq)
    return StepCost(wbytes / bw, t_kv, mm / peak, wbytes + kv + state, mm + att,
                    att / (attention_peak(hw, backend) * 1e12), t_kvq, m.layers, 1, q.weights in MMQ_FORMATS,
                    t_routed=routed_mm / peak, t_power=_t_power(hw, q, backend, mm, att, mmq),
                    cycles=cycle_scale(hw), t_unpack=t_unpack, t_mmq=t_mmq,
                    superblock=q.weights in SUPERBLOCK_FORMATS)


def prefill_cost(m: ModelSpec, hw: HardwareSpec, q: Quant, tokens: int, cached: int, backend: str,
                 ubatch: int = UBATCH, flash_attn: bool = True, mmq: bool = True) -> StepCost:
    """Prefill of ``tokens`` new tokens after ``cached`` ones: causal attention; the weights are read once per
    micro-batch (``ubatch``, llama.cpp's -ub), and those reads overlap the arithmetic. Without flash attention
    (llama.cpp -fa 0) each micro-batch computes its whole masked score block, t·c0 + t·(t+ub)/2 per head and
    layer rather than the causal t·c0 + t²/2, and moves SCORE_BYTES per score through memory. ``mmq``: builds
    whose ggml CUDA kernels multiply block-quantized weights through MMQ, tile by tile, at the SMs' rate
    (sm_rates); before them (registry.MMQ_SINCE) each micro-batch dequantized the weights to F16 in a pass of its
    own for cuBLAS (t_deq)."""
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
    kvb = m.kv_elems_per_token_layer() * q.kv_bytes * kv_tokens(m, c0 + t)
    bw = hw.bw_gbs * 1e9
    t_kv, t_kvq = (scores / bw, kvb / bw) if q.kv_quantized else ((kvb + scores) / bw, 0.0)
    gemms = passes * expert_coverage(m, per_ub) * 3 * m.moe_layers if m.is_moe else 0.0
    peak = peak_tflops(hw, q, backend, mmq) * 1e12
    t_unpack, t_mmq = sm_rates(hw, q, backend, wbytes, mm, mmq)
    separate_deq = q.weights in MMQ_FORMATS and not (mmq and _ggml_cuda(backend))  # other backends: as fitted
    att = attn_full + attn_local
    return StepCost(wbytes / bw, t_kv, mm / peak, wbytes + kvb + scores,
                    mm + att, att / (attention_peak(hw, backend) * 1e12),
                    t_kvq, m.layers, passes, q.weights in MMQ_FORMATS, gemms,
                    t_routed=2 * _active_routed(m) * t / peak, t_power=_t_power(hw, q, backend, mm, att, mmq),
                    t_deq=passes * w["dense"] / (q.bpw / 8) / bw if separate_deq else 0.0,
                    cycles=cycle_scale(hw), t_unpack=t_unpack, t_mmq=t_mmq,
                    superblock=q.weights in SUPERBLOCK_FORMATS)


#: The calibrated constants: name -> (lower bound, upper bound). Shares of a nominal peak lie in (0, 1]: no
#: backend beats its hardware. The per-layer fixed cost is a launch/sync time per layer per forward pass.
PARAM_BOUNDS: dict[str, tuple[float, float]] = {
    "eta_w": (0.2, 1.0),  # share of nominal bandwidth reached streaming weights
    "eta_kv": (0.1, 1.0),  # ... streaming an f16/fp8 KV cache and recurrent state
    "eta_kvq": (0.01, 1.0),  # ... reading a block-quantized KV cache through dequantizing kernels
    "t_layer": (0.0, 300e-6),  # fixed seconds per layer per forward pass at REF_GHZ (kernel launches, syncs)
    "eta_c": (0.02, 1.0),  # share of the arithmetic peak reached by the weight matmuls
    "eta_q": (0.2, 1.0),  # ... of that, kept when the weights are block-quantized (dequantizing matmuls)
    "eta_moe": (0.1, 1.0),  # share of the dense matmul rate kept by routed-expert matmuls (gathered rows, few each)
    "t_expert": (0.0, 100e-6),  # prefill: fixed seconds per routed-expert matmul (one small GEMM per expert)
    "eta_att": (0.01, 1.0),  # share of the FP16 peak reached by attention (prefill at depth)
    "flops_per_w": (0.05, 10.0),  # TFLOPS per watt of board power (TDP) the arithmetic may draw; 10: no limit
    "deq_bytes": (0.0, 8.0),  # prompt matmuls: bytes per block-quantized weight a separate dequantize pass moves
    "sm_bytes": (0.5, 64.0),  # ggml CUDA: bytes of K-quants or i-quants one SM unpacks per cycle (mmvq)
    "sm_simple": (0.25, 8.0),  # ... times this for 32-weight blocks (Q4_0-Q8_0, MXFP4: formats.SUPERBLOCK_FORMATS)
    "sm_flops": (64.0, 16384.0),  # ... and FLOPs one SM does per cycle multiplying them (MMQ)
}


@dataclass(slots=True, frozen=True)
class Efficiency:
    """A backend's calibrated constants (see PARAM_BOUNDS); the defaults are the physical priors every fit
    starts from and shrinks toward (priors.PRIORS says where each comes from)."""

    eta_w: float = 0.65
    eta_kv: float = 0.65
    eta_kvq: float = 0.3
    t_layer: float = 30e-6
    eta_c: float = 0.6  # Strix Halo's hipBLASLt BF16 GEMM reaches 36.9 of 59.4 TF (published): 0.62
    eta_q: float = 1.0
    eta_moe: float = 1.0
    t_expert: float = 5e-6
    eta_att: float = 0.3
    flops_per_w: float = 1.0  # H100 SXM datasheet: 989 TF at 700 W is 1.4 TF/W at the peak; GEMMs sit below it
    deq_bytes: float = 2.6  # Q4_K_M's 0.61 bytes per weight read, 2 written as F16 (priors.PRIORS says where)
    # The SM rates of ggml's CUDA kernels (sm_rates; no other backend's step uses them, so they are every backend's
    # defaults and the llama.cpp family fit's prior, which its CUDA rows then move). sm_bytes: 8 bytes (16 4-bit
    # weights) per SM-cycle binds on HBM boxes and not on GDDR ones, where their rows put it: the fit on the 2023
    # and 2024 rows alone finds about 8 from it (A100, H100 PCIe, A40 decode under their bandwidth roofline), the
    # packaged one about 6 for K-quants and twice that for Q4_0 (the A30's K-quants beside the H100's and H200's
    # Q4_0). A start where it binds nowhere would stay there: the max() it enters has no slope on that side.
    # sm_flops: MMQ's rate, from the PRs that made it: an RTX 3090 (82 SMs at 1.695 GHz) ran llama 8B (15.0 GFLOP
    # of matmuls a token) Q5_0 pp512 at 3655 t/s with int8 tensor-core MMQ (PR 7676, June 2024: 0.39 kFLOP per
    # SM-cycle end to end) and IQ4_XS pp2048 at 4314 t/s after "CUDA: optimize and refactor MMQ" (PR 8416, July
    # 2024: 0.47 end to end; the matmuls alone somewhat faster, the attention and per-layer costs taken out)
    sm_bytes: float = 8.0
    sm_simple: float = 1.0  # no difference unless rows of both kinds of format on boxes where unpacking binds say so
    sm_flops: float = 500.0
    rows: int = 0
    calibrated: bool = False
    source: str = "UNCALIBRATED: no measurements of this backend; physical priors only"
    era: str = ""  # the year of the engine builds these constants were fitted on ("": undated or priors)


def _arith(c: StepCost, eff: Efficiency) -> float:
    """Arithmetic time: each FLOP costs time at the peak and energy out of the board's power budget. A GPU held
    at its TDP lowers its clocks, so sustained throughput F obeys 1/F = 1/(eta_c·peak) + 1/(flops_per_w·TDP)."""
    moe = (c.t_compute - c.t_routed + c.t_routed / eff.eta_moe) / c.t_compute if c.t_compute else 1.0
    mm = c.t_compute * moe / (eff.eta_c * (eff.eta_q if c.quantized else 1.0))
    mm = max(mm, c.t_mmq * moe / eff.sm_flops)  # routed experts at their own rate on either path
    return mm + c.t_attention / eff.eta_att + c.t_power / eff.flops_per_w


def decode_time(c: StepCost, eff: Efficiency) -> float:
    """Memory streams and arithmetic overlap (the slower wins), plus a fixed cost per layer. The weights' kernels
    stream them or unpack them (ggml's quantized ones, sm_rates), whichever is slower; the cache is read by the
    attention kernels, which run after them."""
    weights = max(c.t_weights / eff.eta_w, c.t_unpack / (eff.sm_bytes * (1.0 if c.superblock else eff.sm_simple)))
    mem = weights + c.t_kv / eff.eta_kv + c.t_kvq / eff.eta_kvq
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


#: NCCL's all-reduce reaches this share of the link's nominal rate on large buffers (an 8x A100 NVLink
#: node's nccl-tests run: 195 of 300 GB/s each way, li-plus/playground cuda/nccl.md).
LINK_ETA = 0.65
#: ... and a small all-reduce costs this much whatever its size (nccl-tests all_reduce_perf, 2 GPUs:
#: ~15 µs for 8 B to 16 KiB; the "Time" section of nccl-tests' PERFORMANCE.md explains the constant).
ALLREDUCE_LATENCY_S = 15e-6


def _comm(c: StepCost) -> float:
    return c.t_comm / LINK_ETA + c.comm_ops * ALLREDUCE_LATENCY_S


@dataclass(slots=True)
class Estimate:
    ceiling: float
    estimate: float

    def rate(self, units: float = 1.0) -> tuple[float, float]:
        """As a rate (units per second): (ceiling, estimate)."""
        return units / self.ceiling, units / self.estimate
