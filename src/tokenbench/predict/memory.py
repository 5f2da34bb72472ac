"""What fits in a box's memory: weights (embeddings kept in BF16 where a format does), the KV cache, recurrent state,
an engine's own overhead, and the largest context and concurrency that fit (``fit``)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import registry
from .formats import EMB_KEPT_BF16, Quant
from .specs import GIB, HardwareSpec, ModelSpec


#: Recurrent (Gated DeltaNet) state is kept in fp32.
STATE_BYTES = 4
#: llama.cpp's default micro-batch (-ub): weights are read once per micro-batch of prompt processing.
UBATCH = 512


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


def kv_tokens(m: ModelSpec, context: float) -> float:
    """Cached token-layers at ``context``: full layers hold all, local layers min(ctx, W)."""
    return m.n_full * context + m.local_layers * min(context, m.window or context)


def kv_bytes(m: ModelSpec, q: Quant, context: int) -> float:
    """KV cache of one sequence at ``context`` tokens: full layers hold all, local layers min(ctx, W)."""
    return m.kv_elems_per_token_layer() * q.kv_bytes * kv_tokens(m, context)


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
    gpu_layers: int | None = None  # llama.cpp's hybrid split when it does not fit: layers kept on the GPU
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
    if not f.fits and registry.engine(engine).gguf:
        # llama.cpp keeps the cache and as many whole layers as fit on the GPU (-ngl); the rest stay on the host.
        # A batching engine (vLLM, SGLang) keeps every layer and the whole cache on its GPUs: no split to propose.
        per_layer = w / (m.layers + 1)
        room = usable - kv - st - ov - (w - per_layer * m.layers)  # embeddings/output stay
        f.gpu_layers = max(0, min(m.layers, int(room // per_layer)))
        f.offload_fraction = 1 - f.gpu_layers / m.layers
    return f
