"""Where a backend's constants start: the physical priors per engine family and what the literature says of one
backend (``LITERATURE``, ``PRIORS``), the prior a backend's fit starts from (its family's fit with its own
literature values on top, ``backend_prior``), and which backend an engine calibrates on (the registry's rule)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import registry
from .roofline import Efficiency


def with_constants(e: Efficiency, constants: dict[str, float]) -> Efficiency:
    """``e`` with some of its float constants replaced (by name, from PARAMS)."""
    changes: dict[str, Any] = constants
    return replace(e, **changes)


#: Physical priors per backend family, and where they come from (published measurements).
#: llama.cpp tg128 reaches 0.59–0.66 of nominal bandwidth on RTX 3090/4090 and M3 Max, 0.38 on ROCm (7900
#: XTX); Strix Halo's BF16 GEMM reaches 36.9 of 59.4 TF (0.62). An f16 KV stream is a stream like the
#: weights'; a dequantizing (q8_0/q4_0) KV read runs well below it. A fixed step cost (launches, sampling) of 0.5–3 ms
#: over ~32 layers is ~15–90 µs per layer. (The generic defaults are
#: roofline.Efficiency's.) LITERATURE: what the literature says about one backend, beyond the generic
#: defaults; these values win over the family's fit a backend starts from (backend_prior).
#: deq_bytes (generic default 2.6): llama.cpp's CUDA backend as of May 2024 (ggml-cuda.cu, MMQ_MAX_BATCH_SIZE 32:
#: "max batch size to use MMQ kernels when tensor cores are available") sent every quantized matmul of more than
#: 32 tokens to a dequantize-to-F16 kernel and then cuBLAS: Q4_K_M's 0.61 bytes per weight read, 2 written, a
#: pass of its own before the GEMM. llama.cpp PR 8075 (June 2024) made its int8 MMQ kernels the default, which
#: dequantize tile by tile inside the matmul; the fit finds where between the two a backend's rows sit.
LITERATURE: dict[str, dict[str, float]] = {
    "llamacpp-rocm": {"eta_w": 0.38, "eta_kv": 0.38},
    # Metal prompt processing: llama-bench pp512 of Llama-3.2-3B Q4_K_M on an M1 Ultra 64c, 2142.6 t/s
    # (geerlingguy/ai-benchmarks#48): 2·2.82e9 FLOPs/token × 2142.6 = 12.1 TF of the 21 TF FP16 peak,
    # 0.57 (the same author's M3 Ultra 80c, geerlingguy/beowulf-ai-cluster#17: Llama 3.3 70B Q4_K_M
    # pp512 162.3 t/s, 0.68 of 32.8 TF). Both are K-quant figures, so they give the product eta_c·eta_q; with
    # no F16 figure beside them it is all put in eta_c, and Metal's dequantizing matmuls get no further
    # penalty (eta_q 1). Metal's matmul kernels dequantize each tile into threadgroup memory, with no pass of
    # their own: deq_bytes 0.
    "llamacpp-metal": {"eta_w": 0.59, "eta_kv": 0.59, "eta_c": 0.57, "eta_q": 1.0, "deq_bytes": 0.0},
    # eta_c 0.5 is already an end-to-end share of an H100 SXM's peak, measured at its TDP, throttling and all:
    # a power term on top would count the limit twice, so the prior leaves it off (the bound, 10 TF/W). Its
    # quantized kernels (Marlin, CUTLASS FP8) dequantize in registers: deq_bytes 0.
    "vllm": {"eta_w": 0.7, "eta_kv": 0.7, "t_layer": 10e-6, "eta_c": 0.5, "eta_att": 0.4, "flops_per_w": 10.0,
             "deq_bytes": 0.0},
}
PRIORS: dict[str, Efficiency] = {"default": Efficiency(), **{k: with_constants(Efficiency(), v) for k, v in LITERATURE.items()}}


def backend_key(engine: str, default_backend: str) -> str:
    """The backend an engine string calibrates on a box whose default GPU backend is ``default_backend``: the
    registry's rule (each batching engine is its own backend, SGLang never borrows vLLM's fit, and an AMD box,
    ROCm or Vulkan by default, runs them on ROCm; llama.cpp's is the backend named or the box's)."""
    return registry.backend_key(engine, default_backend)


def engine_kind(engine: str) -> str:
    return registry.engine(engine).kind


def _literature_key(backend: str) -> str | None:
    """The LITERATURE entry a backend starts from: its own, else the one its engine borrows (registry.Engine
    .literature: llama-cpp-python's backends llama.cpp's of the same GPU backend, SGLang's vLLM's); None: none."""
    if backend in LITERATURE:
        return backend
    b = registry.backend(backend)
    if b is None or b.engine.literature is None:
        return None
    stem = b.engine.literature
    return next((k for k in ((f"{stem}-{b.gpu}",) if b.gpu else ()) + (stem,) if k in LITERATURE), None)


def literature(backend: str) -> dict[str, float]:
    key = _literature_key(backend)
    return LITERATURE[key] if key else {}


def prior(backend: str) -> Efficiency:
    key = _literature_key(backend)
    return PRIORS[key] if key else PRIORS["default"]


def family(backend: str) -> str:
    """The engine family a backend belongs to (registry.Engine.family): llama.cpp's backends, and
    llama-cpp-python's, share ggml's kernels."""
    return registry.family(backend)


def backend_prior(backend: str, family_fit: Efficiency | None) -> Efficiency:
    """Where a backend's fit starts: its family's fit when there is one, with the literature values PRIORS sets
    for this backend itself (those that differ from the generic defaults) kept on top."""
    if family_fit is None:
        return prior(backend)
    return with_constants(replace(family_fit, rows=0, calibrated=False), literature(backend))
