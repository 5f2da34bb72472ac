"""Write m8b-random: Llama 3 8B's shape (32 layers of width 4096, 8 KV heads of 128, FFN 14336) with random
weights and the 1k-token byte-level BPE tokenizer of tokenbench's tiny model, as an F16 GGUF. Made on the GPU
where there is one: about 70 s for the 14 GB file on the lent H200. The catalog knows the model as m8b-random.

    python benchmarks/device/make_m8b.py OUTDIR [LAYERS HIDDEN FFN]     (smaller shapes: a quick try on a CPU)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from tokenbench.engines import tiny

HEAD_DIM, KV_HEADS = 128, 8


def main(out: Path, layers: int = 32, hidden: int = 4096, ffn: int = 14336) -> None:
    t0 = time.time()
    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    tok = tiny._train_tokenizer(hf)
    vocab_size = len(tok.get_vocab())  # type: ignore[attr-defined]
    heads = hidden // HEAD_DIM
    cfg = dict(tiny.CONFIG, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
               num_attention_heads=heads, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=vocab_size,
               max_position_embeddings=131072, rope_theta=500000.0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=dev).manual_seed(0)

    def rnd(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=dev) * std).to(torch.float16).cpu()

    state = {"model.embed_tokens.weight": rnd(vocab_size, hidden, std=0.2), "model.norm.weight": torch.ones(hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        state[p + "input_layernorm.weight"] = torch.ones(hidden)
        state[p + "post_attention_layernorm.weight"] = torch.ones(hidden)
        state[p + "self_attn.q_proj.weight"] = rnd(heads * HEAD_DIM, hidden)
        state[p + "self_attn.k_proj.weight"] = rnd(KV_HEADS * HEAD_DIM, hidden)
        state[p + "self_attn.v_proj.weight"] = rnd(KV_HEADS * HEAD_DIM, hidden)
        state[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * HEAD_DIM)
        state[p + "mlp.gate_proj.weight"] = rnd(ffn, hidden)
        state[p + "mlp.up_proj.weight"] = rnd(ffn, hidden)
        state[p + "mlp.down_proj.weight"] = rnd(hidden, ffn)
    head = rnd(vocab_size, hidden, std=0.2)
    for tid in tiny._silent_tokens(tok):  # as the tiny model: every generated token is visible text
        head[tid].zero_()
    state["lm_head.weight"] = head
    n = sum(v.numel() for v in state.values())
    print(f"m8b: {n / 1e9:.3f}B parameters, vocab {vocab_size}, made in {time.time() - t0:.0f} s", flush=True)
    tiny._write_gguf(hf, tok, state, cfg, out / "m8b-f16.gguf", "m8b-random", "f16")
    print(f"m8b: GGUF written in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:5]))
