"""Write m8b-random: Llama 3 8B's shape (32 layers of width 4096, 8 KV heads of 128, FFN 14336) with random
weights and the 1k-token byte-level BPE tokenizer of tokenbench's tiny model, as an F16 GGUF. Made on the GPU
where there is one: about 70 s for the 14 GB file on an NVIDIA H200. The catalog knows the model as m8b-random.

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
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    path = tiny.random_llama_gguf(out, "m8b-random", layers, hidden, ffn, hidden // HEAD_DIM, KV_HEADS, HEAD_DIM,
                                  131072, rope_theta=500000.0, device=dev, stem="m8b").gguf_path
    print(f"m8b: {path.stat().st_size / 1e9:.1f} GB GGUF written in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:5]))
