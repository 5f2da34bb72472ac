"""Build (once, cached) random-weight Llama-style models offline: a Hugging Face directory with a byte-level
BPE tokenizer trained locally, and a GGUF written from the same weights and tokenizer, so every engine serves
the same model. Two sizes: ``tiny`` (4 layers of width 128, 0.9M parameters: fast tests, where HTTP overhead
dominates) and ``small`` (12 layers of width 1024, about 140M parameters: decode bound by memory and compute,
so depth, tg and cross-checks mean something; its GGUF is F16, and ``llama-quantize`` makes Q8_0 from it).
A third, ``small-utf8``, is the small model with a tokenizer that behaves like a real model's on multi-byte
text (below).

Random weights are enough to measure an engine's speed. Two things are set on purpose. The row of the
output projection for the end-of-sequence token is zero, so its logit is always 0 while the best of the
other tokens' random logits is positive: greedy decoding never ends a sequence early, and a benchmark of
N output tokens gets N tokens from engines that cannot be told to ignore EOS (tokenbench still verifies
every response's length). The rows of tokens that are not text on their own (special tokens, lone bytes
of a multi-byte UTF-8 character, control characters) are zero too, so every generated token streams
as visible text and no engine holds a chunk back waiting for the rest of a character.

``small-utf8`` is built to do the opposite, as real models do on CJK, emoji and some code: its tokenizer is
trained on text with multi-byte characters, so its vocabulary holds single bytes and pieces of characters, and
only the special and control tokens are silenced. About a quarter of what it generates is a token whose text an
engine holds back (an incomplete UTF-8 sequence): vLLM streams such a token as a chunk with empty text, and a
client that waits for visible text reads TTFT and ITL late (docs/metrics.md).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EngineError
from ..workload import word_list
from .cache import cache_dir

#: Bump when the build changes, so caches built by an older tokenbench are rebuilt.
BUILD_VERSION = "tiny-llama-v2"
MODEL_NAME = "tokenbench-tiny-llama"
SIZES = ("tiny", "small", "small-utf8")

CONFIG = {
    "vocab_size": 0,  # set from the trained tokenizer
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}
#: ~140M parameters: 12 layers x (2.6M attention + 8.7M MLP) + 2M embeddings.
SMALL_CONFIG = dict(CONFIG, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                    num_attention_heads=16, num_key_value_heads=4, head_dim=64)
VOCAB_TARGET = 1024
SPECIAL = ["<s>", "</s>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


@dataclass(slots=True, frozen=True)
class TinyModel:
    hf_dir: Path
    gguf_path: Path
    eos_token_id: int
    name: str = MODEL_NAME
    size: str = "tiny"

    def gguf(self, qtype: str | None = None) -> Path:
        """The GGUF as written (F32 tiny, F16 small), or quantized with llama-quantize (cached beside it)."""
        if qtype is None or qtype.upper() in ("F32", "F16") and qtype.upper() in self.gguf_path.name.upper():
            return self.gguf_path
        from .llamacpp_build import quantize

        dest = self.gguf_path.with_name(f"{self.name}-{qtype.lower()}.gguf")
        return quantize(self.gguf_path, dest, qtype.upper())


def served_name(size: str) -> str:
    """The name the embedded engine serves a size's model under."""
    return _spec(size)[2]


def model_name(served: str) -> str:
    """The embedded model's own name for the name a server gave it: vLLM and the llama engines serve it under that
    name, Transformers serve (``engines serve transformers``) under its built directory's path
    (.../tiny-llama-v2/hf), which names it from any cache, build or machine. Any other name is returned as it is."""
    parts = served.replace("\\", "/").rstrip("/").split("/")
    if len(parts) >= 2 and parts[-1] == "hf":
        for size in SIZES:
            _, build_dir, name, _ = _spec(size)
            if re.fullmatch(re.escape(build_dir.rsplit("-v", 1)[0]) + r"-v\d+", parts[-2]):
                return name
    return served


def _spec(size: str) -> tuple[dict[str, Any], str, str, str]:
    """(config, build directory, model name, GGUF type) of a size."""
    if size == "tiny":
        return CONFIG, BUILD_VERSION, MODEL_NAME, "f32"
    if size == "small":
        return SMALL_CONFIG, "small-llama-v1", "tokenbench-small-llama", "f16"
    if size == "small-utf8":
        return SMALL_CONFIG, "small-utf8-llama-v1", "tokenbench-small-utf8-llama", "f16"
    raise EngineError(f"unknown model size '{size}': use one of {', '.join(SIZES)}")


#: Multi-byte characters of the ``small-utf8`` corpus: CJK ideographs (3 bytes in UTF-8), accented Latin (2)
#: and emoji (4), each a word of its own or glued to one, as in mixed-language text and code comments.
_CJK = [chr(c) for c in range(0x4E00, 0x4E00 + 400)]
_LATIN = [chr(c) for c in range(0xC0, 0x100) if c not in (0xD7, 0xF7)]
_EMOJI = [chr(c) for c in range(0x1F600, 0x1F650)]


def _multibyte_word(rng: random.Random, word: str) -> str:
    r = rng.random()
    if r < 0.35:
        return "".join(rng.choices(_CJK, k=rng.randint(1, 4)))
    if r < 0.5:
        i = rng.randrange(len(word) + 1)
        return word[:i] + rng.choice(_LATIN) + word[i:]
    if r < 0.6:
        return word + rng.choice(_EMOJI)
    return word


def _corpus(n_lines: int = 4000, seed: int = 0, multibyte: bool = False) -> list[str]:
    rng = random.Random(seed)
    words = word_list()
    lines = []
    for _ in range(n_lines):
        ws = rng.choices(words, k=rng.randint(5, 20))
        if multibyte:
            ws = [_multibyte_word(rng, w) for w in ws]
        tag = f"{rng.randrange(16**6):06x}-{rng.randrange(1000)}: "
        lines.append(tag + " ".join(ws) + rng.choice([".", ",", "?", "!", ""]))
    return lines


def _train_tokenizer(out: Path, multibyte: bool = False) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_TARGET,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(multibyte=multibyte), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "add_bos_token": False,
                "add_eos_token": False,
                "model_max_length": CONFIG["max_position_embeddings"],
                "chat_template": CHAT_TEMPLATE,
            },
            indent=1,
        )
    )
    return tok


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """Transformers' progress bars off, as they were after."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _silent_tokens(tok: object, pieces: bool = True) -> list[int]:
    """Ids of tokens that decode to no printable text on their own: special and control tokens, and with
    ``pieces`` the lone bytes and pieces of a multi-byte character too."""
    out = []
    for t, tid in tok.get_vocab().items():  # type: ignore[attr-defined]
        text = tok.decode([tid], skip_special_tokens=False)  # type: ignore[attr-defined]
        if (t in SPECIAL or not text or any(ord(ch) < 32 for ch in text)
                or pieces and "\ufffd" in text):
            out.append(tid)
    return sorted(out)


def _permute_for_gguf(w, n_head: int):  # type: ignore[no-untyped-def]
    """HF Llama stores q/k rows for rotate-half RoPE; GGUF's llama expects interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_gguf(hf_dir: Path, tok: object, state: dict, cfg: dict, path: Path, name: str,  # type: ignore[type-arg]
                ftype: str) -> None:
    import gguf
    import numpy as np

    vocab = tok.get_vocab()  # type: ignore[attr-defined]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges_raw = json.loads((hf_dir / "tokenizer.json").read_text())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges_raw]
    types = [gguf.TokenType.CONTROL if t in SPECIAL else gguf.TokenType.NORMAL for t in tokens]

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_vocab_size(len(tokens))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if ftype == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab["<s>"])
    w.add_eos_token_id(vocab["</s>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    def t(name: str):  # type: ignore[no-untyped-def]
        a = state[name].float().numpy().astype(np.float32)
        # F16 for matrices (as convert_hf_to_gguf writes --outtype f16); norms stay F32
        return a.astype(np.float16) if ftype == "f16" and a.ndim == 2 else a

    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w.add_tensor("token_embd.weight", t("model.embed_tokens.weight"))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", t(p + "input_layernorm.weight"))
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute_for_gguf(t(p + "self_attn.q_proj.weight"), nh))
        w.add_tensor(f"blk.{i}.attn_k.weight", _permute_for_gguf(t(p + "self_attn.k_proj.weight"), nkv))
        w.add_tensor(f"blk.{i}.attn_v.weight", t(p + "self_attn.v_proj.weight"))
        w.add_tensor(f"blk.{i}.attn_output.weight", t(p + "self_attn.o_proj.weight"))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", t(p + "post_attention_layernorm.weight"))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", t(p + "mlp.gate_proj.weight"))
        w.add_tensor(f"blk.{i}.ffn_up.weight", t(p + "mlp.up_proj.weight"))
        w.add_tensor(f"blk.{i}.ffn_down.weight", t(p + "mlp.down_proj.weight"))
    w.add_tensor("output_norm.weight", t("model.norm.weight"))
    w.add_tensor("output.weight", t("lm_head.weight"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def random_llama_gguf(out: Path, name: str, layers: int, hidden: int, ffn: int, heads: int, kv_heads: int,
                      head_dim: int, max_positions: int, rope_theta: float | None = None, device: str = "cpu",
                      stem: str | None = None) -> TinyModel:
    """A Llama-shaped model of any size with random F16 weights (std 0.02) and this module's byte-level BPE
    tokenizer, named ``name``, written straight to ``out/<stem or name>-f16.gguf`` without a Transformers model in
    between: what the
    benchmarks use for a model too big to build as the tiny one is (``benchmarks/device/make_m8b.py``: an 8B on a
    GPU; ``benchmarks/llama_server_cache_ram.py``: a model with much KV cache a token and little arithmetic).
    ``device``: where the weights are drawn (a GPU draws an 8B's in seconds)."""
    import torch

    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(hf)
    ids = tok.get_vocab()  # type: ignore[attr-defined]
    vocab = len(ids)
    cfg = dict(CONFIG, hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers, num_attention_heads=heads,
               num_key_value_heads=kv_heads, head_dim=head_dim, vocab_size=vocab, max_position_embeddings=max_positions)
    if rope_theta is not None:
        cfg["rope_theta"] = rope_theta
    gen = torch.Generator(device=device).manual_seed(0)

    def rnd(*shape: int, std: float = 0.02) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, device=device) * std).to(torch.float16).cpu()

    state = {"model.embed_tokens.weight": rnd(vocab, hidden, std=0.2), "model.norm.weight": torch.ones(hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        state[p + "input_layernorm.weight"] = torch.ones(hidden)
        state[p + "post_attention_layernorm.weight"] = torch.ones(hidden)
        state[p + "self_attn.q_proj.weight"] = rnd(heads * head_dim, hidden)
        state[p + "self_attn.k_proj.weight"] = rnd(kv_heads * head_dim, hidden)
        state[p + "self_attn.v_proj.weight"] = rnd(kv_heads * head_dim, hidden)
        state[p + "self_attn.o_proj.weight"] = rnd(hidden, heads * head_dim)
        state[p + "mlp.gate_proj.weight"] = rnd(ffn, hidden)
        state[p + "mlp.up_proj.weight"] = rnd(ffn, hidden)
        state[p + "mlp.down_proj.weight"] = rnd(hidden, ffn)
    head = rnd(vocab, hidden, std=0.2)
    for tid in _silent_tokens(tok):  # as the tiny model: every generated token is visible text
        head[tid].zero_()
    state["lm_head.weight"] = head
    path = out / f"{stem or name}-f16.gguf"
    _write_gguf(hf, tok, state, cfg, path, name, "f16")
    return TinyModel(hf_dir=hf, gguf_path=path, eos_token_id=ids["</s>"], name=name, size="random")


def build(dest: Path, size: str = "tiny") -> TinyModel:
    """Build the model of ``size`` into ``dest`` (a new directory)."""
    base_cfg, _, model_name, ftype = _spec(size)
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as e:
        raise EngineError(
            f"the embedded engine needs the engine extra ({e.name} is missing): pip install -e '.[engine]' "
            "(install torch==2.13.0 first)"
        ) from e
    hf_dir = dest / "hf"
    hf_dir.mkdir(parents=True)
    multibyte = size.endswith("utf8")
    tok = _train_tokenizer(hf_dir, multibyte)
    vocab = tok.get_vocab()  # type: ignore[attr-defined]
    cfg = dict(base_cfg, vocab_size=len(vocab))
    eos = vocab["</s>"]
    torch.manual_seed(0)
    config = LlamaConfig(  # type: ignore[call-arg]  # torch_dtype is read through **kwargs
        **cfg,
        bos_token_id=vocab["<s>"],
        eos_token_id=eos,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # Random init at std 0.02 gives near-uniform logits; a larger spread gives the model preferences.
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2 if "embed" in name or "lm_head" in name else 0.08)
        for tid in _silent_tokens(tok, pieces=not multibyte):
            model.lm_head.weight[tid].zero_()
    model.generation_config.eos_token_id = eos
    model.generation_config.bos_token_id = vocab["<s>"]
    model.generation_config.do_sample = False
    with _no_progress_bar():  # transformers' "Writing model shards" bar: a carriage-return line in a piped log
        model.save_pretrained(hf_dir, safe_serialization=True)
    state = model.state_dict()
    gguf_path = dest / f"{model_name}-{ftype}.gguf"
    _write_gguf(hf_dir, tok, state, cfg, gguf_path, model_name, ftype)
    (dest / "BUILD").write_text(_spec(size)[1] + "\n")
    return TinyModel(hf_dir=hf_dir, gguf_path=gguf_path, eos_token_id=eos, name=model_name, size=size)


def is_built(root: Path | None = None, size: str = "tiny") -> bool:
    """Whether the model of ``size`` is already in the cache (ensure then builds nothing)."""
    return ((root or cache_dir()) / _spec(size)[1] / "BUILD").exists()


def ensure(root: Path | None = None, size: str = "tiny") -> TinyModel:
    """The cached model of ``size``, built on first use. Safe against a build killed half way."""
    _, build_dir, name, ftype = _spec(size)
    base = (root or cache_dir()) / build_dir
    if is_built(root, size):
        eos = json.loads((base / "hf" / "config.json").read_text())["eos_token_id"]
        return TinyModel(hf_dir=base / "hf", gguf_path=base / f"{name}-{ftype}.gguf", eos_token_id=eos,
                         name=name, size=size)
    base.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=base.parent))
    try:
        build(tmp, size)
        try:
            tmp.rename(base)
        except OSError:
            if not (base / "BUILD").exists():  # another process won the race only if it finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ensure(root, size)
