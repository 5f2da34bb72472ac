"""Weight and KV-cache formats (bits per weight, bits per KV element, which are block-quantized), and which engine
runs which format on which box: a combination no engine runs is a one-line refusal, never a prediction."""

from __future__ import annotations

from dataclasses import dataclass

from .. import registry
from ..errors import UsageError
from ..registry import GGML_BACKENDS
from .specs import HardwareSpec


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
#: K-quants (256-weight super-blocks, their sub-block scales packed in bits) and i-quants (values looked up in
#: grids): more integer work to unpack per byte than the plain 32-weight blocks of Q4_0-Q8_0 and MXFP4.
SUPERBLOCK_FORMATS = {k for k in MMQ_FORMATS if "_K" in k or k.startswith("IQ")}
#: KV-cache bits per element: llama.cpp -ctk q8_0 / q4_0 / ... carry block scales.
KV_BITS: dict[str, float] = {"F16": 16, "BF16": 16, "AUTO": 16, "F32": 32, "FP8": 8, "Q8_0": 8.5,
                             "Q5_1": 6.0, "Q5_0": 5.5, "Q4_1": 5.0, "Q4_0": 4.5, "IQ4_NL": 4.5}


#: Block-quantized KV caches, read through dequantizing attention kernels (their own efficiency).
QUANT_KV = {"Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0", "IQ4_NL"}


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
        raise UsageError(f"llama.cpp runs GGUF weights, not {q.weights}: use a GGUF quant (Q4_K_M, Q8_0, ...), F16 or "
                         f"BF16, or --engine vllm for {q.weights}")
    if eng.gguf and q.kv == "FP8":
        raise UsageError("llama.cpp has no FP8 KV cache: use --kv f16, q8_0 or q4_0 (-ctk/-ctv)")
    if not eng.gguf and q.kv_quantized and eng.kernels != "mlx":
        raise UsageError(f"--kv {q.kv.lower()} is a llama.cpp cache type; {engine.split()[0]} keeps its KV cache in "
                         "auto (the model's dtype) or fp8")
    if q.weights in GGUF_FORMATS - {"F16", "F32"} and eng.key_rule == "vendor":  # vLLM, SGLang
        raise UsageError(f"{engine} does not serve GGUF {q.weights} weights efficiently: use llama.cpp, or AWQ/GPTQ/FP8")
    if q.weights.startswith("MLX") and eng.kernels != "mlx":
        raise UsageError(f"{q.weights} weights are MLX's format: use --engine mlx, or a GGUF quant for llama.cpp")
