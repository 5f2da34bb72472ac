"""Hardware and model specs: the packaged TOML catalogs, a user's own catalog, Hugging Face ``config.json``
files and GGUF headers."""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import platformdirs

from ..errors import UsageError
from ..jsontext import finite_number

CATALOG_ENV = "TOKENBENCH_CATALOG"
#: Bytes in the "GB" of a memory size (vendors quote VRAM and RAM in binary units).
GIB = 2**30


@dataclass(slots=True)
class HardwareSpec:
    id: str
    name: str
    mem_gb: float
    bw_gbs: float
    bf16_tflops: float
    #: what ``bf16_tflops`` holds on a box without BF16 matmuls: "fp16" (its FP16 rate: RDNA 1 and 2) or "fp32"
    #: (its FP32 rate, at which it runs half precision too: Apple's GPUs); "" for a BF16 peak
    half_is: str = ""
    kind: str = "gpu"
    arch: str = ""  # the instruction set kernels are built for (sm_90, gfx1151, apple9): its hardware generation
    unified: bool = False
    usable_gb: float | None = None
    bw_measured_gbs: float | None = None
    fp8_tflops: float | None = None
    fp16_tflops: float | None = None  # FP16 tensor peak with FP16 accumulate, where above bf16_tflops (GeForce)
    int8_tflops: float | None = None
    tdp_w: float | None = None
    boost_ghz: float | None = None  # the GPU's boost clock: a kernel's fixed cost is cycles (roofline.cycle_scale)
    sms: int | None = None  # streaming multiprocessors: with the clock, the rate of ggml's quantized kernels (roofline)
    pcie_gbs: float = 31.5  # PCIe Gen4 x16 per direction
    nvlink_gbs: float | None = None  # GPU-to-GPU link per GPU per direction (NVLink, Infinity Fabric); else PCIe
    host_bw_gbs: float = 89.6  # dual-channel DDR5-5600
    default_backend: str = "cuda"
    price_per_hour: float | None = None  # a known rental price, with its currency and source
    price_currency: str = "USD"
    price_source: str = ""
    aliases: list[str] = field(default_factory=list)
    notes: str = ""
    source: str = ""

    @property
    def has_fp8(self) -> bool:
        return bool(self.fp8_tflops)

    @property
    def vendor(self) -> str:
        """Who made the GPU, as the catalog's ids say it: their prefix (nvidia, amd, apple, intel)."""
        return self.id.split("-", 1)[0]

    @property
    def usable_bytes(self) -> float:
        """Vendors' "GB" of VRAM and unified memory are binary: a "16 GB" card holds 16 GiB."""
        return (self.usable_gb if self.usable_gb is not None else self.mem_gb) * GIB


@dataclass(slots=True)
class ModelSpec:
    id: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    total_b: float
    name: str = ""
    ffn: int = 0
    tied: bool = False
    experts: int = 0
    top_k: int = 0
    shared_experts: int = 0
    moe_ffn: int = 0
    dense_layers: int = 0
    full_layers: int | None = None
    local_layers: int = 0
    window: int = 0
    linear_layers: int = 0
    lin_k_heads: int = 0
    lin_v_heads: int = 0
    lin_k_dim: int = 0
    lin_v_dim: int = 0
    conv_kernel: int = 4
    kv_lora_rank: int = 0
    qk_rope_dim: int = 0
    expert_bpw: float | None = None
    mtp: bool = False
    file_bytes: int | None = None  # the real weights file, when given
    #: the context the model was trained for: its config's max_position_embeddings (what vLLM takes as the longest
    #: --max-model-len it allows), a GGUF's context_length; None where not known
    context: int | None = None
    notes: str = ""
    source: str = ""

    def past_context(self, tokens: int) -> bool:
        """Whether ``tokens`` of context pass what the model was trained for (unknown: they do not)."""
        return self.context is not None and tokens > self.context

    # --- derived -------------------------------------------------------------------------------------
    @property
    def n_full(self) -> int:
        if self.full_layers is not None:
            return self.full_layers
        return self.layers - self.local_layers - self.linear_layers

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def emb_params(self) -> float:
        return float(self.vocab * self.hidden)

    @property
    def lm_params(self) -> float:
        return 0.0 if self.tied else float(self.vocab * self.hidden)

    @property
    def routed_params(self) -> float:
        return float(self.moe_layers * self.experts * 3 * self.hidden * self.moe_ffn)

    @property
    def dense_nonemb_params(self) -> float:
        """Everything read for every token: attention, shared experts, dense MLPs, norms, routers.

        A dense model: the stated total less the embeddings. A mixture of experts: counted from the shape
        (attention, linear-attention, shared experts, dense layers, routers), since the total less the routed
        experts is a small difference of large, rounded numbers."""
        if self.is_moe:
            return shape_nonexpert_params(self)
        return max(self.total_b * 1e9 - self.emb_params - self.lm_params, 0.0)

    @property
    def active_nonemb_params(self) -> float:
        routed = self.routed_params * self.top_k / self.experts if self.experts else 0.0
        return self.dense_nonemb_params + routed

    def kv_elems_per_token_layer(self) -> int:
        """Cached elements per token per attention layer: K and V, or MLA's one latent."""
        if self.kv_lora_rank:
            return self.kv_lora_rank + self.qk_rope_dim
        return 2 * self.kv_heads * self.head_dim

    def linear_state_elems(self) -> int:
        """Gated DeltaNet state per sequence per linear layer: conv (2·nk·dk + nv·dv)·(kernel−1) + ssm nv·dv·dk."""
        if not self.linear_layers:
            return 0
        conv = (2 * self.lin_k_heads * self.lin_k_dim + self.lin_v_heads * self.lin_v_dim) * (self.conv_kernel - 1)
        ssm = self.lin_v_heads * self.lin_v_dim * self.lin_k_dim
        return conv + ssm

    @property
    def is_moe(self) -> bool:
        return self.experts > 0


def _from_table(cls: type, ident: str, table: dict[str, Any], what: str) -> Any:
    names = {f.name for f in fields(cls)}
    nested = [k for k, v in table.items() if isinstance(v, dict)]
    if nested:  # TOML reads [models.qwen2.5-coder-7b] as table "qwen2" holding "5-coder-7b"
        dotted = f"{ident}.{nested[0]}"
        section = "hardware" if what == "hardware" else "models"
        raise UsageError(f"{what} id '{dotted}' has a dot, which TOML splits into nested tables: "
                         f'quote it, [{section}."{dotted}"]')
    unknown = set(table) - names
    if unknown:
        raise UsageError(f"{what} '{ident}': unknown {'field' if len(unknown) == 1 else 'fields'} {sorted(unknown)}; known: {sorted(names - {'id'})}")
    required = [f.name for f in fields(cls) if f.name != "id" and f.default is MISSING
                and f.default_factory is MISSING and f.name not in table]
    if required:
        raise UsageError(f"{what} '{ident}': missing {'field' if len(required) == 1 else 'fields'} {', '.join(required)}")
    for f in fields(cls):
        if f.name in table:
            _check_field(what, ident, f.name, str(f.type), table[f.name])
    return cls(id=ident, **table)


#: A model's sizes every formula divides by or multiplies through: none may be 0.
_POSITIVE_MODEL_FIELDS = {"layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "total_b"}


def _check_field(what: str, ident: str, name: str, kind: str, v: Any) -> None:
    """One catalog value against its field's type: a number is a finite number, a hardware figure (bandwidth, peak,
    clock, TDP, memory) above 0 and a model's counts at least 0; a hand edit can make any of them anything."""
    base = kind.split("|")[0].strip()
    if v is None and "None" in kind:
        return
    if base in ("float", "int"):
        positive = name in _POSITIVE_MODEL_FIELDS if what == "model" else name != "price_per_hour"
        ok = finite_number(v) and (v > 0 if positive else v >= 0) and (base == "float" or isinstance(v, int))
        need = ("a whole number" if base == "int" else "a number") + (" above 0" if positive else " of at least 0")
    elif base == "bool":
        ok, need = isinstance(v, bool), "true or false"
    elif base == "str":
        ok, need = isinstance(v, str), "a string"
    elif base.startswith("list"):
        ok, need = isinstance(v, list), "a list"
    else:
        return
    if not ok:
        raise UsageError(f"{what} '{ident}': {name} = {repr(v)[:40]} must be {need}")


def user_catalog_path() -> Path:
    env = os.environ.get(CATALOG_ENV)
    return Path(env) if env else Path(platformdirs.user_config_dir("tokenbench")) / "catalog.toml"


@dataclass(slots=True)
class Catalog:
    hardware: dict[str, HardwareSpec]
    models: dict[str, ModelSpec]
    user_file: Path | None = None

    @classmethod
    def load(cls, user_file: Path | None = None) -> Catalog:
        pkg = resources.files("tokenbench").joinpath("data")
        hw_raw = tomllib.loads(pkg.joinpath("hardware.toml").read_text())
        mdl_raw = tomllib.loads(pkg.joinpath("models.toml").read_text())
        path = user_file or user_catalog_path()
        used = None
        mine_ids: set[tuple[str, str]] = set()  # (what, id) of each entry the user's file wrote or changed
        if path.exists():
            try:
                user = tomllib.loads(path.read_text())
            except tomllib.TOMLDecodeError as e:
                raise UsageError(f"{path} is not valid TOML ({e}): fix it or move it away") from None
            # a user's table for a packaged id overrides the fields it names and keeps the others
            for what, raw, mine in (("hardware", hw_raw, user.get("hardware", {})),
                                     ("model", mdl_raw, user.get("models", {}))):
                if not isinstance(mine, dict):
                    raise UsageError(f"{path}: [hardware.ID] and [models.ID] must be tables")
                for k, v in mine.items():
                    raw[k] = {**raw[k], **v} if isinstance(v, dict) and isinstance(raw.get(k), dict) else v
                    mine_ids.add((what, k))
            used = path

        def entry(cls_: type, what: str, k: str, v: Any) -> Any:
            try:
                spec = _from_table(cls_, k, v, what)
                if what == "hardware" and spec.half_is not in ("", "fp16", "fp32"):
                    raise UsageError(f"hardware '{k}': half_is is \"fp16\" or \"fp32\" (what bf16_tflops holds on a "
                                     f"box without BF16), not {spec.half_is!r}")
                return spec
            except UsageError as e:
                if (what, k) in mine_ids:  # the user's entry: say which file to fix
                    raise UsageError(f"{path}: {e}") from None
                raise

        hw = {k: entry(HardwareSpec, "hardware", k, v) for k, v in hw_raw.items()}
        models = {k: entry(ModelSpec, "model", k, v) for k, v in mdl_raw.items()}
        return cls(hw, models, used)

    def find_hardware(self, ident: str) -> HardwareSpec:
        """A box by its id or an alias, in any case (``H100`` as ``h100``), as a model is found."""
        if ident in self.hardware:
            return self.hardware[ident]
        for hw in self.hardware.values():
            if ident in hw.aliases:
                return hw
        folded = ident.lower()
        for hw in self.hardware.values():
            if folded == hw.id.lower() or folded in (a.lower() for a in hw.aliases):
                return hw
        names = list(self.hardware) + [a for h in self.hardware.values() for a in h.aliases]
        raise UsageError(f"unknown hardware '{ident}'{_suggest(ident, names)}; 'tokenbench hardware' lists them")

    def find_model(self, ident: str) -> ModelSpec:
        p = Path(ident)
        if p.suffix in (".gguf", ".json") and not p.exists():  # a path, not an id: say what is wrong with it
            raise UsageError(f"--model {ident}: no such file")
        if p.suffix == ".gguf":
            return model_from_gguf(p)
        if p.is_file() and p.suffix == ".json":  # a config.json by any name; its fields are checked
            return model_from_config(p)
        if p.is_dir() and (p / "config.json").is_file():
            return model_from_config(p / "config.json")
        key = ident.lower().split("/")[-1]
        for k in (ident, key):
            if k in self.models:
                return self.models[k]
        if p.is_dir():
            raise UsageError(f"--model {ident}: a folder without a config.json (a model's Hugging Face folder has one)")
        raise UsageError(
            f"unknown model '{ident}'{_suggest(key, list(self.models))}; 'tokenbench models' lists them, "
            "or give a config.json or .gguf path"
        )


def _suggest(ident: str, names: list[str]) -> str:
    """The ids that start with what was typed ("qwen3-30b": qwen3-30b-a3b-2507, which a spelling match ranked
    below qwen3-8b and left out), then the closest spellings; three at most."""
    started = [n for n in names if n.startswith(ident)]
    close = list(dict.fromkeys(started + difflib.get_close_matches(ident, names, n=3, cutoff=0.4)))[:3]
    return f" (did you mean {', '.join(close)}?)" if close else ""


# --- Hugging Face config.json ----------------------------------------------------------------------------

def _attention_params(m: ModelSpec) -> tuple[float, float]:
    """Parameters of one attention layer and of one linear-attention (Gated DeltaNet) layer."""
    attn = m.hidden * m.heads * m.head_dim * 2 + m.hidden * m.kv_heads * m.head_dim * 2
    if m.kv_lora_rank:
        attn = m.hidden * m.heads * m.head_dim + m.hidden * (m.kv_lora_rank + m.qk_rope_dim) \
            + m.kv_lora_rank * m.heads * (m.head_dim - m.qk_rope_dim + 128) + m.heads * 128 * m.hidden
    lin = m.hidden * (2 * m.lin_k_heads * m.lin_k_dim + 2 * m.lin_v_heads * m.lin_v_dim) \
        + m.lin_v_heads * m.lin_v_dim * m.hidden
    return float(attn), float(lin)


def shape_nonexpert_params(m: ModelSpec) -> float:
    """Non-embedding parameters outside the routed experts, from the shape: attention (or linear attention),
    shared experts, routers, the leading dense MLP layers, and two norms per layer."""
    attn, lin = _attention_params(m)
    n_attn = m.layers - m.linear_layers
    moe_layers = m.layers - m.dense_layers if m.experts else 0
    shared = moe_layers * (m.shared_experts * 3 * m.hidden * m.moe_ffn + m.hidden * m.experts)
    dense_mlp = (m.layers - moe_layers) * 3 * m.hidden * m.ffn
    return float(n_attn * attn + m.linear_layers * lin + shared + dense_mlp + 2 * m.layers * m.hidden)


def _estimate_total(m: ModelSpec) -> float:
    """Parameters from the architecture, for configs that do not state them."""
    routed = (m.layers - m.dense_layers) * m.experts * 3 * m.hidden * m.moe_ffn if m.experts else 0
    total = shape_nonexpert_params(m) + routed + m.vocab * m.hidden * (1 if m.tied else 2)
    return total / 1e9


def model_from_config(path: Path) -> ModelSpec:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("text_config") or {}, dict):
        raise UsageError(f"{path}: not a model's config.json (it holds no JSON object of a model's fields)")
    cfg = {**cfg, **(cfg.get("text_config") or {})}

    def g(*keys: str, default: Any = 0) -> Any:
        for k in keys:
            if cfg.get(k) is not None:
                return cfg[k]
        return default

    heads = int(g("num_attention_heads"))
    hidden = int(g("hidden_size"))
    layers = int(g("num_hidden_layers"))
    if not (heads and hidden and layers):
        raise UsageError(f"{path}: no num_hidden_layers/hidden_size/num_attention_heads: is it a language model's config.json?")
    types = cfg.get("layer_types") or []
    local = sum(t == "sliding_attention" for t in types)
    linear = sum(t == "linear_attention" for t in types)
    window = int(g("sliding_window", default=0) or 0)
    if not types and window and cfg.get("model_type", "").startswith("gemma3"):
        pattern = int(g("sliding_window_pattern", default=6))
        local = layers - layers // pattern
    experts = int(g("num_experts", "num_local_experts", "n_routed_experts"))
    qk_nope = int(g("qk_nope_head_dim"))
    qk_rope = int(g("qk_rope_head_dim"))
    m = ModelSpec(
        id=str(path.parent.name or path.stem),
        name=str(cfg.get("_name_or_path") or path.parent.name),
        layers=layers, hidden=hidden, heads=heads,
        kv_heads=int(g("num_key_value_heads", default=heads)),
        head_dim=int(g("head_dim", default=(qk_nope + qk_rope) or hidden // heads)),
        vocab=int(g("vocab_size")), total_b=0.0,
        ffn=int(g("intermediate_size")), tied=bool(g("tie_word_embeddings", default=False)),
        experts=experts, top_k=int(g("num_experts_per_tok", "moe_topk")) if experts else 0,
        shared_experts=int(g("n_shared_experts", default=1 if g("shared_expert_intermediate_size") else 0)),
        moe_ffn=int(g("moe_intermediate_size")) if experts else 0,
        dense_layers=int(g("first_k_dense_replace")) if experts else 0,
        full_layers=layers - local - linear, local_layers=local, window=window if local else 0,
        linear_layers=linear,
        lin_k_heads=int(g("linear_num_key_heads")), lin_v_heads=int(g("linear_num_value_heads")),
        lin_k_dim=int(g("linear_key_head_dim")), lin_v_dim=int(g("linear_value_head_dim")),
        conv_kernel=int(g("linear_conv_kernel_dim", default=4)),
        kv_lora_rank=int(g("kv_lora_rank")), qk_rope_dim=qk_rope,
        mtp=bool(g("num_nextn_predict_layers", "mtp_num_hidden_layers")),
        context=int(g("max_position_embeddings")) or None,
        source=f"config.json {path}",
    )
    m.total_b = _estimate_total(m)
    m.notes = "parameter count estimated from the architecture"
    return m


# --- GGUF header -----------------------------------------------------------------------------------------

def _gguf(path: Path) -> Any:
    """The file's GGUF reader; a one-line error where the package is missing or the file is not a GGUF."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise UsageError("reading a GGUF needs the gguf package: pip install gguf") from None
    try:
        return GGUFReader(str(path))
    except Exception as e:  # the reader raises several kinds on a damaged file
        raise UsageError(f"{path} is not a readable GGUF file ({type(e).__name__}: {e})") from None


def _gguf_value(r: Any, key: str, default: Any = None) -> Any:
    """A header field's value: a string decoded, an array's length, a number as a Python number."""
    f = r.fields.get(key)
    if f is None:
        return default
    if f.types and f.types[0].name == "ARRAY":
        return len(f.data)
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0] if hasattr(v, "tolist") else v


def model_from_gguf(path: Path) -> ModelSpec:
    r = _gguf(path)

    def val(key: str, default: Any = None) -> Any:
        return _gguf_value(r, key, default)

    arch = val("general.architecture")
    if not arch:
        raise UsageError(f"{path}: no general.architecture in the GGUF header")
    a = f"{arch}."
    heads = int(val(a + "attention.head_count", 0))
    hidden = int(val(a + "embedding_length", 0))
    layers = int(val(a + "block_count", 0))
    names = [t.name for t in r.tensors]
    linear = len({n.split(".")[1] for n in names if n.startswith("blk.") and ".ssm_" in n})
    window = int(val(a + "attention.sliding_window", 0) or 0)
    local = 0
    if window:
        local = layers - layers // 6 if arch.startswith("gemma3") else layers // 2
    experts = int(val(a + "expert_count", 0) or 0)
    total = sum(int(t.n_elements) for t in r.tensors)
    m = ModelSpec(
        id=path.stem, name=str(val("general.name", path.stem)), layers=layers, hidden=hidden, heads=heads,
        kv_heads=int(val(a + "attention.head_count_kv", heads)),
        head_dim=int(val(a + "attention.key_length", hidden // heads if heads else 0)),
        vocab=int(val(a + "vocab_size", 0) or val("tokenizer.ggml.tokens", 0)),
        total_b=total / 1e9, ffn=int(val(a + "feed_forward_length", 0) or 0),
        tied="output.weight" not in names,
        experts=experts, top_k=int(val(a + "expert_used_count", 0) or 0),
        shared_experts=int(val(a + "expert_shared_count", 0) or 0),
        moe_ffn=int(val(a + "expert_feed_forward_length", 0) or 0),
        dense_layers=int(val(a + "leading_dense_block_count", 0) or 0),
        full_layers=layers - local - linear, local_layers=local, window=window if local else 0,
        linear_layers=linear,
        kv_lora_rank=int(val(a + "attention.kv_lora_rank", 0) or 0),
        file_bytes=path.stat().st_size, context=int(val(a + "context_length", 0) or 0) or None,
        source=f"GGUF header {path}",
    )
    if not (heads and hidden and layers):
        raise UsageError(f"{path}: the GGUF header lacks {arch}.block_count/embedding_length/attention.head_count")
    return m
