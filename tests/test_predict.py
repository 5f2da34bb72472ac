"""The predictor: every formula against a hand computation, spec readers, the fit boundary, the CLI."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from tokenbench.cli import main
from tokenbench.errors import UsageError
from tokenbench.predict import formats, memory, speculation
from tokenbench.predict import roofline as rf
from tokenbench.predict.bands import WIDE_BAND_PCT
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.priors import backend_key
from tokenbench.predict.solver import fit_constants
from tokenbench.predict.accuracy import against
from tokenbench.predict.setup import Setup
from tokenbench.predict.measured import Row, read_rows
from tokenbench.predict.rows import predict_row, row_parallel
from tokenbench.predict.specs import Catalog, model_from_config, model_from_gguf

PUBLISHED = Path(__file__).resolve().parents[1] / "src" / "tokenbench" / "data" / "published.csv"  # shipped copy
PUBLISHED_MORE = PUBLISHED.with_name("published-more.csv")
BF16 = formats.Quant("BF16", "BF16")


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return Catalog.load()


def test_dense_gqa_kv_and_decode_bytes(cat: Catalog) -> None:
    m, hw = cat.find_model("llama-3.1-8b"), cat.find_hardware("nvidia-h100-sxm")
    # 2 (K,V) * 32 layers * 8 KV heads * 128 head_dim * 2 bytes = 128 KiB per token
    assert memory.kv_bytes(m, BF16, 1) == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert memory.kv_bytes(m, BF16, 1000) == 131072 * 1000
    assert memory.total_weight_bytes(m, BF16) == pytest.approx(8.03e9 * 2)
    c = rf.decode_cost(m, hw, BF16, 1, 0, "cuda")
    emb = 128256 * 4096
    dense = 8.03e9 - 2 * emb
    assert c.bytes == pytest.approx((dense + emb) * 2 + 4096 * 2)
    assert c.t_weights == pytest.approx(c.bytes / 3350e9)
    # At depth 4096 the step also reads 4096 tokens of KV.
    c2 = rf.decode_cost(m, hw, BF16, 1, 4096, "cuda")
    assert c2.t_kv == pytest.approx(131072 * 4096 / 3350e9)


def test_moe_expert_coverage_grows_with_batch(cat: Catalog) -> None:
    m = cat.find_model("qwen3-30b-a3b-2507")
    assert rf.expert_coverage(m, 1) == pytest.approx(8)
    assert rf.expert_coverage(m, 2) == pytest.approx(128 * (1 - (120 / 128) ** 2))
    assert rf.expert_coverage(m, 10_000) == pytest.approx(128)
    hw = cat.find_hardware("nvidia-h100-sxm")
    w = memory.weight_bytes(m, BF16)
    c1 = rf.decode_cost(m, hw, BF16, 1, 0, "cuda")
    c16 = rf.decode_cost(m, hw, BF16, 16, 0, "cuda")
    routed1 = w["experts"] * 8 / 128
    assert c1.bytes == pytest.approx(w["dense"] + routed1 + w["lm_head"] + w["embedding"] / m.vocab)
    # 16 sequences touch more experts than 1, fewer than all
    assert routed1 < c16.bytes - c1.bytes + routed1 < w["experts"]


def test_mla_caches_one_latent(cat: Catalog) -> None:
    m = cat.find_model("deepseek-coder-v2-lite")
    # (kv_lora_rank 512 + rope 64) per layer, not x2 and not per head: 27 * 576 * 2 bytes
    assert m.kv_elems_per_token_layer() == 576
    assert memory.kv_bytes(m, BF16, 1) == 27 * 576 * 2


def test_sliding_window_layers_hold_at_most_the_window(cat: Catalog) -> None:
    m = cat.find_model("gemma-3-4b-it")
    per = 2 * 4 * 256 * 2
    assert memory.kv_bytes(m, BF16, 8192) == per * (6 * 8192 + 28 * 1024)
    assert memory.kv_bytes(m, BF16, 512) == per * 34 * 512


def test_hybrid_linear_attention_state_and_kv(cat: Catalog) -> None:
    m = cat.find_model("qwen3-coder-next-80b-a3b")
    # conv (2*16*128 + 32*128) * (4-1) + ssm 32*128*128 per layer, fp32, 36 linear layers
    assert m.linear_state_elems() == (2 * 16 * 128 + 32 * 128) * 3 + 32 * 128 * 128
    assert memory.state_bytes(m) == 36 * 548864 * 4
    assert memory.kv_bytes(m, BF16, 1) == 12 * 2 * 2 * 256 * 2 == 24 * 1024  # 24 KiB
    # decode reads and writes the state every step
    hw = cat.find_hardware("nvidia-h100-sxm")
    c = rf.decode_cost(m, hw, BF16, 1, 0, "cuda")
    assert c.t_kv == pytest.approx(2 * memory.state_bytes(m) / 3350e9)


def test_prefill_attention_is_causal(cat: Catalog) -> None:
    m, hw = cat.find_model("llama-3.1-8b"), cat.find_hardware("nvidia-h100-sxm")
    c = rf.prefill_cost(m, hw, BF16, 2048, 0, "cuda")
    hand = 4 * 32 * 128 * (2048 * 2048 / 2) * 32  # 4·n_q·d_h·T²/2 per layer, 32 layers
    assert c.t_attention * 989e12 == pytest.approx(hand)
    # after c0 cached tokens each new token also attends to them: + T·c0
    c2 = rf.prefill_cost(m, hw, BF16, 512, 8192, "cuda")
    assert c2.t_attention * 989e12 == pytest.approx(4 * 32 * 128 * (512 * 8192 + 512 * 512 / 2) * 32)


def test_fit_boundary(cat: Catalog) -> None:
    m, hw = cat.find_model("llama-3.1-8b"), cat.find_hardware("nvidia-a30")
    f = memory.fit(m, hw, BF16, 4096, 1, "llama.cpp")
    assert f.fits and f.max_context > 4096
    assert memory.fit(m, hw, BF16, f.max_context, 1, "llama.cpp").fits
    assert not memory.fit(m, hw, BF16, f.max_context + 1, 1, "llama.cpp").fits
    # most sequences at a context: one more does not fit
    g = memory.fit(m, hw, BF16, 4096, 1, "llama.cpp")
    assert memory.fit(m, hw, BF16, 4096, g.max_concurrency, "llama.cpp").fits
    assert not memory.fit(m, hw, BF16, 4096, g.max_concurrency + 1, "llama.cpp").fits
    # without flash attention the F32 scores grow with the context too: the largest context is where both fit
    # (it once counted only the cache and named a context that did not fit)
    off = memory.fit(m, hw, BF16, 4096, 1, "llama.cpp", flash_attn=False)
    assert off.overhead_gb > f.overhead_gb and off.max_context < f.max_context
    assert memory.fit(m, hw, BF16, off.max_context, 1, "llama.cpp", flash_attn=False).fits
    assert not memory.fit(m, hw, BF16, off.max_context + 1, 1, "llama.cpp", flash_attn=False).fits


def test_offload_times_add(cat: Catalog) -> None:
    cal = Calibration.packaged()
    s = Setup.make(cat, cal, "nvidia-a30", "qwen3-coder-next-80b-a3b", "Q4_K_M", "Q4_0", "llama.cpp cuda")
    f = s.fit(513, 1)
    assert not f.fits and 0 < (f.gpu_layers or 0) < s.model.layers
    est = s.decode(0)
    gpu = rf.decode_cost(s.model, s.hw, s.quant, 1, 0, s.backend, on_gpu_fraction=1 - f.offload_fraction)
    w = memory.weight_bytes(s.model, s.quant)
    host = (w["dense"] + w["experts"] * s.model.top_k / s.model.experts) * f.offload_fraction / 128e9
    assert est.ceiling == pytest.approx(gpu.ceiling + host)  # in sequence, not max()


def test_speculative_decoding() -> None:
    assert speculation.expected_tokens(0.7, 2) == pytest.approx((1 - 0.7**3) / 0.3)
    assert speculation.alpha_from_acceptance_length(speculation.expected_tokens(0.6, 3), 3) == pytest.approx(0.6, abs=1e-6)
    assert speculation.spec_speedup(0.7, 2, 0.05) == pytest.approx(2.19 / 1.1)
    with pytest.raises(UsageError):
        speculation.alpha_from_acceptance_length(5.0, 2)


def test_batching_scales_and_sequential_does_not(cat: Catalog) -> None:
    cal = Calibration.packaged()
    v = Setup.make(cat, cal, "nvidia-h100-sxm", "qwen3.6-27b", "FP8", "AUTO", "vllm")
    t1, t16 = v.serve(1, 4096, 512).throughput[1], v.serve(16, 4096, 512).throughput[1]
    assert t16 > 4 * t1
    l = Setup.make(cat, cal, "amd-ryzen-ai-max-395", "qwen3.6-35b-a3b", "Q4_K_M", "Q8_0", "llama.cpp")
    a, b = l.serve(1, 512, 200), l.serve(16, 512, 200)
    assert b.throughput[1] == pytest.approx(a.throughput[1])
    assert b.ttft_s.estimate > 10 * a.ttft_s.estimate  # each agent waits for the others


def test_fit_recovers_constants_and_keeps_them_physical() -> None:
    """Rows made from known constants give those constants back; a row faster than any share of the peak
    allows pins its constant at the bound (no backend beats its hardware)."""
    truth = rf.Efficiency(eta_w=0.8, t_layer=50e-6)
    costs = [rf.StepCost(t_weights=tw, t_kv=0.0, t_compute=0.0, bytes=0.0, flops=0.0, layers=layers)
             for tw in (0.001, 0.002, 0.005, 0.01, 0.02) for layers in (24, 32, 48, 64, 80, 96, 120, 160)]
    import math

    def row(c: rf.StepCost, measured: float):  # type: ignore[no-untyped-def]
        return lambda e: math.log(rf.decode_time(c, e) / measured)

    fitted = fit_constants([row(c, rf.decode_time(c, truth)) for c in costs], rf.Efficiency())
    # 40 rows outweigh the pull toward the priors (0.65, 30 µs)
    assert fitted.eta_w == pytest.approx(0.8, rel=0.03)
    assert fitted.t_layer == pytest.approx(50e-6, rel=0.05)
    too_fast = fit_constants([row(c, 0.5 * c.t_weights) for c in costs], rf.Efficiency())
    assert too_fast.eta_w <= 1.0 and too_fast.t_layer >= 0.0


def test_config_json(tmp_path: Path) -> None:
    cfg = {
        "model_type": "qwen3_next", "num_hidden_layers": 8, "hidden_size": 1024, "num_attention_heads": 8,
        "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 32000, "num_experts": 64,
        "num_experts_per_tok": 4, "moe_intermediate_size": 256, "shared_expert_intermediate_size": 256,
        "layer_types": ["linear_attention"] * 6 + ["full_attention"] * 2, "linear_num_key_heads": 4,
        "linear_num_value_heads": 8, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = model_from_config(tmp_path / "config.json")
    assert (m.layers, m.heads, m.kv_heads, m.head_dim) == (8, 8, 2, 256)
    assert (m.experts, m.top_k, m.shared_experts, m.linear_layers, m.n_full) == (64, 4, 1, 6, 2)
    assert m.total_b > 0 and m.context is None  # the config says none
    gemma = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 12,
             "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
             "vocab_size": 1000, "intermediate_size": 512, "sliding_window": 512,
             "max_position_embeddings": 131072}}
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "config.json").write_text(json.dumps(gemma))
    g = model_from_config(tmp_path / "g" / "config.json")
    assert (g.local_layers, g.n_full, g.window, g.context) == (10, 2, 512, 131072)


def small_gguf(path: Path) -> Path:
    """A two-layer GGUF of zeros, 512 tokens of trained context."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_feed_forward_length(128)
    w.add_context_length(512)
    w.add_vocab_size(100)
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float32))
    for i in range(2):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
    w.add_tensor("output.weight", np.zeros((100, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_header(tmp_path: Path) -> None:
    path = small_gguf(tmp_path / "small.gguf")
    m = model_from_gguf(path)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn, m.vocab) == (2, 64, 4, 2, 16, 128, 100)
    assert m.total_b == pytest.approx((100 * 64 * 2 + 2 * 64 * 64) / 1e9)
    assert m.file_bytes == path.stat().st_size and not m.tied and m.context == 512
    # the real file size drives the weight bytes
    assert memory.total_weight_bytes(m, formats.Quant("Q4_K_M", "F16")) == pytest.approx(path.stat().st_size)
    assert Catalog.load().find_model(str(path)).layers == 2


def test_llama_bench_warns_of_depths_past_the_trained_context(tmp_path: Path) -> None:
    """llama-bench sizes its context to what it is asked and runs past what the model was trained on; the HTTP
    path skips such depths (the server refuses them)."""
    from tokenbench.engines.llamabench import LlamaBenchConfig, past_context

    path = small_gguf(tmp_path / "small.gguf")
    assert past_context(LlamaBenchConfig("built", str(path), [0, 256], pp=128, tg=128), path) is None
    said = past_context(LlamaBenchConfig("built", str(path), [0, 256, 1024], pp=256, tg=16), path)
    assert said is not None and said.startswith("depths 256 and 1,024 with pp 256 and tg 16 pass the 512 tokens")
    one = past_context(LlamaBenchConfig("built", str(path), [0, 1024], pp=128, tg=16), path)
    assert one is not None and one.startswith("depth 1,024 with") and "runs it on" in one
    assert past_context(LlamaBenchConfig("built", None, [9999]), tmp_path / "not-a-gguf") is None


def test_a_model_path_says_what_is_wrong_with_it(cat: Catalog, tmp_path: Path) -> None:
    """A missing config.json, a JSON file of something else and a folder without a config each read 'unknown
    model ...; tokenbench models lists them', which sent the user to the catalog for a typo in a path."""
    (tmp_path / "other.json").write_text('{"a": 1}')
    (tmp_path / "list.json").write_text("[1, 2]")
    for ident, said in ((str(tmp_path / "no" / "config.json"), "no such file"),
                        (str(tmp_path / "m.gguf"), "no such file"),
                        (str(tmp_path / "other.json"), "no num_hidden_layers"),
                        (str(tmp_path / "list.json"), "not a model's config.json"),
                        (str(tmp_path), "a folder without a config.json")):
        with pytest.raises(UsageError, match=said):
            cat.find_model(ident)


def test_unknown_ids_suggest_close_ones(cat: Catalog) -> None:
    with pytest.raises(UsageError, match="did you mean nvidia-a30"):
        cat.find_hardware("nvidia-a3")
    with pytest.raises(UsageError, match="did you mean qwen3.6-35b-a3b"):
        cat.find_model("qwen3.6-35b")
    # an id's beginning names it first, where a spelling match ranked qwen3-8b above it and left it out
    with pytest.raises(UsageError, match=r"did you mean qwen3-30b-a3b-2507, "):
        cat.find_model("qwen3-30b")
    assert cat.find_hardware("nvidia-a100-80gb").id.startswith("nvidia-a100")


def test_required_ids_in_catalog(cat: Catalog) -> None:
    for h in ("nvidia-a100-80gb", "nvidia-h100-sxm", "amd-ryzen-ai-max-395", "nvidia-a30", "nvidia-dgx-spark"):
        assert cat.find_hardware(h).source
    for m in ("llama-4-scout-17b-16e", "granite-3.1-8b-instruct", "qwen3-4b-2507", "mistral-small-3.2-24b",
              "gpt-oss-120b", "qwen3.6-27b", "deepseek-coder-v2-lite"):
        assert cat.find_model(m).source


def test_user_catalog_adds_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "catalog.toml"
    f.write_text('[hardware.my-box]\nname = "Mine"\nmem_gb = 16\nbw_gbs = 100\nbf16_tflops = 10\nsource = "me"\n')
    monkeypatch.setenv("TOKENBENCH_CATALOG", str(f))
    assert Catalog.load().find_hardware("my-box").bw_gbs == 100
    f.write_text('[hardware.bad]\nname = "x"\nmem_gb = 1\nbw_gbs = 1\nbf16_tflops = 1\nbandwidth = 3\n')
    with pytest.raises(UsageError, match="unknown field"):
        Catalog.load()


def test_a_box_without_bf16_says_what_its_half_precision_figure_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The catalog's BF16 column held an FP32 rate for Apple's M1 and an FP16 one for RDNA 1, unmarked."""
    cat = Catalog.load()
    assert cat.find_hardware("apple-m1-7c").half_is == "fp32"
    assert cat.find_hardware("amd-radeon-rx-5700-xt").half_is == "fp16"
    assert cat.find_hardware("nvidia-h100-sxm").half_is == ""
    assert main(["hardware", "--format", "markdown"]) == 0
    rows = {r.split("|")[1].strip(): r for r in capsys.readouterr().out.splitlines() if r.startswith("| ")}
    assert "| 2.3 (FP32: no BF16) |" in rows["apple-m1-7c"] and "| 19.5 (FP16: no BF16) |" in rows["amd-radeon-rx-5700-xt"]
    assert "no BF16" not in rows["nvidia-h100-sxm"]
    f = tmp_path / "catalog.toml"
    f.write_text('[hardware.my-box]\nname = "Mine"\nmem_gb = 16\nbw_gbs = 100\nbf16_tflops = 10\nhalf_is = "int4"\n')
    monkeypatch.setenv("TOKENBENCH_CATALOG", str(f))
    with pytest.raises(UsageError, match="half_is is"):
        Catalog.load()


def test_token_counts_with_k() -> None:
    from tokenbench.cli.common import tokens

    assert [tokens(x, "--depths", zero=True) for x in ("0", "8k", "32k", "65k", "64k", "131k", "100k", "1.5k")] == \
        [0, 8192, 32768, 65536, 65536, 131072, 102400, 1536]


def test_backend_keys() -> None:
    assert backend_key("vllm 0.21", "cuda") == "vllm-cuda"
    assert backend_key("llama.cpp vulkan", "cuda") == "llamacpp-vulkan"
    assert backend_key("llama.cpp", "vulkan") == "llamacpp-vulkan"


# a full calibration fit with its cross-validation (about a minute alone on 2 cores, several beside
# other tests): make test runs it, make test-fast leaves it out
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_committed_calibration_is_what_the_command_produces(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # the command itself, as the file's header says to re-run it: `tokenbench calibrate --out FILE`
    out = tmp_path / "efficiency.toml"
    assert main(["calibrate", "--out", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # whatever width the console wrapped at
    said = dict(re.findall(r"(\S+): bandwidth share .*?cross-validated bands: (.*?)\)(?= \S+: bandwidth| wrote)", text))
    for name, per in Calibration.packaged().bands.items():  # a band over half its estimate is flagged (wide)
        assert said[name].count("(wide)") == sum(b.pct > WIDE_BAND_PCT for b in per.values()), (name, said[name])
    fresh = Calibration.from_toml(out.read_text(), origin=str(out))
    packaged = Calibration.packaged()
    assert set(fresh.backends) == set(packaged.backends)
    for name, e in fresh.backends.items():
        p = packaged.backends[name]
        for k in rf.PARAM_BOUNDS:
            assert getattr(e, k) == pytest.approx(getattr(p, k), rel=1e-4), (name, k)
        assert e.rows == p.rows and fresh.sources[name] == packaged.sources[name]
        assert {m: b.pct for m, b in fresh.bands[name].items()} == \
            pytest.approx({m: b.pct for m, b in packaged.bands[name].items()}, rel=1e-3)
    assert set(fresh.families) == set(packaged.families)
    for name, e in fresh.families.items():
        for k in rf.PARAM_BOUNDS:
            assert getattr(e, k) == pytest.approx(getattr(packaged.families[name], k), rel=1e-4), (name, k)


def four_published_and(row: str, tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A measured-rows file: the packaged file's header and first four rows, then ``row``."""
    src = PUBLISHED.read_text().splitlines()
    header = [ln for ln in src if ln.startswith("source,")][0]
    body = [ln for ln in src if ln and not ln.startswith(("#", "source,"))][:4] + [row]
    f = tmp_path / "m.csv"
    f.write_text("\n".join([header, *body]) + "\n")
    return f, header, body


def test_against_json_keeps_every_row_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # an unknown box, and a decode far below what its backend reaches: a software bottleneck
    f, header, body = four_published_and(
        "x,Mystery,nvidia-z99,llama.cpp cuda,phi-4,Q4_K_M,q4_0,tg128,0,1,0,128,decode_tps,5.0,tok/s,", tmp_path)
    out = tmp_path / "o.json"
    assert main(["predict", "--against", str(f), "--json", str(out)]) == 0
    table = capsys.readouterr().out
    row = next(ln for ln in table.splitlines() if ln.split()[-1:] != [] and "tok/s" in ln)
    assert row.count("tok/s") == 2  # the prediction has its unit, as the measurement beside it
    doc = json.loads(out.read_text())
    assert [r["value"] for r in doc["rows"]] == [ln.split(",")[13] for ln in body[:4]] + ["5.0"]
    assert all({"predicted", "ceiling", "error_pct", "flags"} <= set(r) for r in doc["rows"])
    assert doc["rows"][3]["predicted"] is not None
    bad = doc["rows"][-1]
    assert bad["predicted"] is None and "unknown hardware 'nvidia-z99'" in bad["flags"][0]
    body[-1] = body[-1].replace("nvidia-z99", "nvidia-a30").replace("Mystery", "A30")
    f.write_text("\n".join([header, *body]) + "\n")
    rep = against(Catalog.load(), Calibration.packaged(), read_rows(f))
    assert any("likely software bottleneck" in fl for fl in rep.results[-1].flags)
    assert "summary" in doc and "faster_box" in doc["summary"]


def test_a_llama_server_row_is_predicted_with_the_slots_its_note_names() -> None:
    """A serving row of llama.cpp's server says its slots in the note, as -np N or --parallel N (an H200's
    rows say --parallel 32); read as one slot, the row would be predicted as one stream whose throughput cannot
    grow with the agents."""
    rows = [r for r in read_rows(PUBLISHED.parent / "published-current.csv")
            if r.raw["source"] == "h200-lcpp" and r.metric == "output_tps"]
    assert sorted(r.concurrency for r in rows) == [1, 4, 16] and all(row_parallel(r) == 32 for r in rows)
    cat, cal = Catalog.load(), Calibration.packaged()
    thr = {r.concurrency: predict_row(cat, cal, r).predicted for r in rows}
    assert thr[1] is not None and thr[4] is not None and thr[16] is not None
    assert thr[16] > thr[4] > 1.5 * thr[1]
    for note, slots in (("llama-server -np 4", 4), ("--parallel=8 -fa on", 8), ("-ngl 99", 1)):
        assert row_parallel(dataclasses.replace(rows[0], raw={**rows[0].raw, "note": note})) == slots


def test_cli_fit_predict_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    # "does NOT fit" is an answer a script reads from the exit code, as guard's dirty bench: 1, not 0
    assert main(["fit", "--hardware", "nvidia-a30", "--model", "qwen3-coder-next-80b-a3b", "--weights", "Q4_K_M",
                 "--kv", "q4_0", "--context", "64k"]) == 1
    out = capsys.readouterr().out
    assert "does NOT fit" in out and "hybrid split" in out and "times add" in out
    assert main(["fit", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--context", "8k"]) == 0
    assert "-> fits" in capsys.readouterr().out
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "qwen3.6-35b-a3b", "--weights", "FP8",
                 "--kv", "fp8", "--concurrency", "1,4", "--spec-tokens", "2", "--acceptance", "0.7"]) == 0
    out = capsys.readouterr().out
    assert "PREDICTED" in out and "ceiling" in out and "2.19 tokens per target pass" in out
    assert "Median TTFT" in out and "Median TPOT" in out  # which statistic, as --json's p50 and compare say
    assert main(["predict", "--hardware", "amd-ryzen-ai-max-395", "--model", "gpt-oss-20b", "--engine", "llama.cpp",
                 "--kv", "q8_0", "--test", "tg128", "--depth", "0,8k,32k"]) == 0
    assert "32,768" in capsys.readouterr().out
    assert main(["predict", "--hardware", "nvidia-a30", "--model", "qwen3.6-27b", "--weights", "FP8"]) == 2
    assert "FP8 needs FP8 tensor cores" in capsys.readouterr().err
    runtime = {}
    for fa in ("on", "off"):  # fit takes --flash-attn as predict does: off holds a layer's F32 scores
        assert main(["fit", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--weights", "Q4_K_M", "--kv", "f16",
                     "--context", "32k", "--flash-attn", fa]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("runtime"))
        runtime[fa] = float(line.split()[1])
    assert runtime["off"] - runtime["on"] == pytest.approx(512 * 32 * 32768 * 4 / 2**30, abs=0.01)
    # gpt-oss-20b's sliding and small KV on a 128 GB box: the search's cap is no measured limit
    assert main(["fit", "--hardware", "amd-ryzen-ai-max-395", "--model", "gpt-oss-20b", "--context", "8k"]) == 0
    assert "4,194,304 tokens or more (memory is not the limit)" in capsys.readouterr().out
    assert main(["fit", "--hardware", "nvidia-a30", "--model", "phi-4", "--context", "lots"]) == 2
    assert "not a token count" in capsys.readouterr().err
    assert main(["hardware"]) == 0 and "datasheet" in capsys.readouterr().out
    assert main(["models", "--format", "markdown"]) == 0 and "| qwen3.6-27b |" in capsys.readouterr().out


def test_the_shipped_published_data_is_shared_references() -> None:
    """The package ships copies of shared/reference's measurements so calibrate runs in a clone; beside the
    development checkout they hold the same rows, figure for figure (the shipped files add the date and version
    columns the fit reads), and published-current.csv holds every row of current-builds.csv."""
    shared = Path(__file__).resolve().parents[2] / "shared" / "reference"
    if not shared.is_dir():
        pytest.skip("shared/reference is not beside this checkout")

    def figures(rows: list[Row]) -> list[tuple[str, ...]]:
        return [(r.raw["source"], r.hardware, r.engine, r.model, r.weights, r.kv, r.test, str(r.depth),
                 str(r.concurrency), str(r.input_len), str(r.output_len), r.metric, f"{r.value:g}") for r in rows]

    for name in ("published.csv", "published-more.csv"):
        shipped = read_rows(PUBLISHED.parent / name)
        assert figures(shipped) == figures(read_rows(shared / name)), name
        assert all(r.era for r in shipped), name  # every shipped row is dated
    current = figures(read_rows(PUBLISHED.parent / "published-current.csv"))
    assert set(figures(read_rows(shared / "current-builds.csv"))) <= set(current)


def test_against_at_80_columns_is_a_table_that_names_its_flagged_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`predict --against` of the packaged rows printed a block of 12 lines per row at 80 columns (1,700 lines for
    154 rows) and counted the flagged rows without naming them. Now: one table, each box and model heading its
    rows, the test in llama-bench's words ("tg32 @ d4096"), and each flag under it beside the row it flags."""
    f, _, _ = four_published_and(
        "x,A30,nvidia-a30,llama.cpp cuda,phi-4,Q4_K_M,q4_0,tg128,4096,1,0,128,decode_tps,5.0,tok/s,", tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["predict", "--against", str(f)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 80
    rule = next(i for i, ln in enumerate(lines) if set(ln.strip()) == {"━"})
    assert lines[rule - 1].split()[:3] == ["Test", "Measured", "Predicted"]
    assert " On A30, phi-4 Q4_K_M" in lines and any(ln.startswith(" tg128 @ d4096 ") for ln in lines)
    assert "1 row flagged as a likely software bottleneck" in lines
    flagged = " ".join(lines[lines.index("1 row flagged as a likely software bottleneck") + 1:])
    assert flagged.startswith("A30, phi-4 Q4_K_M, tg128 @ d4096: likely software bottleneck: measured is ")


def test_against_a_file_of_no_row_it_can_predict_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file whose every row names no box tokenbench knows printed each row's reason, "0/0 pairs", and exited 0."""
    src = PUBLISHED.read_text().splitlines()
    header = [ln for ln in src if ln.startswith("source,")][0]
    f = tmp_path / "none.csv"
    f.write_text(header + "\nx,A30,,llama.cpp cuda,phi-4,Q4_K_M,q4_0,tg128,0,1,0,128,decode_tps,5.0,tok/s,,,\n")
    assert main(["predict", "--against", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("check its hardware, model and metric columns against 'tokenbench hardware' and "
                        "'tokenbench models'") and len(err.splitlines()) == 1


def test_one_output_token_has_no_tpot(capsys: pytest.CaptureFixture[str]) -> None:
    """TPOT divides by the tokens after the first: with one output token it read "0.0 ms ±35%", ceiling "0.0 ms"."""
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--output-len", "1",
                 "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    col = doc["columns"].index("Median TPOT")
    assert [row[col] for row in doc["rows"]] == ["—"] and [row[col + 1] for row in doc["rows"]] == ["—"]
    # beside a rate its ceiling, beside a time its floor (a TTFT's limit was labelled "ceiling")
    assert doc["columns"][1:] == ["Aggregate tok/s", "ceiling", "Per-agent tok/s", "Median TTFT", "floor",
                                  "Median TPOT", "floor", "fits"]


def test_fit_writes_large_memory_with_separators(capsys: pytest.CaptureFixture[str]) -> None:
    """'1220.70 GiB' beside '441,088 tokens': every count tokenbench prints carries its thousands separators."""
    assert main(["fit", "--hardware", "nvidia-a30", "--model", "llama-3.1-70b", "--context", "4000000"]) == 1
    out = capsys.readouterr().out
    assert "KV cache     1,220.70 GiB  (1,220.703 GiB per sequence)" in out and "1220.7" not in out


def test_a_box_is_found_in_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    """'--hardware H100' was refused while '--model Llama-3.1-8B' was found: ids and aliases are matched in any case."""
    assert main(["fit", "--hardware", "H100", "--model", "llama-3.1-8b"]) == 0
    assert "on nvidia-h100-sxm" in capsys.readouterr().out
    assert main(["fit", "--hardware", "NVIDIA-A30", "--model", "llama-3.1-8b"]) == 0
    assert "on nvidia-a30" in capsys.readouterr().out


def test_fit_says_experts_that_keep_the_format_they_ship_in(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss ships its experts in MXFP4, which the catalog keeps whatever --weights says: a BF16 gpt-oss-120b read
    as "BF16 weights ... 60.69 GiB", where BF16 experts would need about 218. The header and the weights line say
    the experts are kept as shipped; a format that is theirs says nothing more. Counts carry separators."""
    assert main(["fit", "--hardware", "nvidia-h100-sxm", "--model", "gpt-oss-120b", "--weights", "BF16"]) == 0
    out = capsys.readouterr().out
    assert "(BF16 weights, experts as shipped, auto KV)" in out
    assert "(all experts, theirs 4.25 bits a weight as shipped)" in out
    assert main(["fit", "--hardware", "nvidia-h100-sxm", "--model", "gpt-oss-120b", "--weights", "MXFP4"]) == 0
    out = capsys.readouterr().out
    assert "as shipped" not in out and "(MXFP4 weights, auto KV)" in out
    assert main(["fit", "--hardware", "nvidia-h200-sxm", "--model", "llama-3.1-8b", "--context", "128"]) == 0
    most = re.search(r"most sequences at 128 tokens: ([\d,]+)", capsys.readouterr().out)
    assert most is not None and int(most.group(1).replace(",", "")) >= 1000 and "," in most.group(1)


def test_predict_states_its_lengths_and_exits_1_where_nothing_fits(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A serving table's TTFT read without the prompt it was for (4,096 tokens unless given: only the JSON said
    so); and a box that runs no level (a 70B in BF16 on a 24 GB A30) printed every row as "—" and exited 0, where
    fit exits 1 on the same question. The JSON is written either way."""
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--concurrency", "1"]) == 0
    assert "4,096 in / 512 out tokens a request (--input-len, --output-len)" in capsys.readouterr().out
    out = tmp_path / "p.json"
    assert main(["predict", "--hardware", "nvidia-a30", "--model", "llama-3.1-70b", "--json", str(out)]) == 1
    assert "fits no (concurrency 1)" in " ".join(capsys.readouterr().out.split()) and out.exists()
    assert main(["fit", "--hardware", "nvidia-a30", "--model", "llama-3.1-70b"]) == 1


def test_an_error_that_rounds_to_zero_reads_0_not_minus_0() -> None:
    """predict --against printed "-0" in an Error % cell (an error of -0.4% to a whole number); its measured and
    predicted cells, written by a formatter of their own, read 0.04 tok/s as "0.0"."""
    from tokenbench.layout import figure

    assert figure(-0.4, 0) == "0" and figure(-0.6, 0) == "-1" and figure(-1.4, 0) == "-1"
    assert figure(-0.04, 1) == "-0.040" and figure(0.0) == "0.0"  # a figure near zero keeps its sign and digits
    assert figure(1234.5) == "1,234" and figure(None) == "—"


def test_a_predicted_level_says_its_request_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """A predicted level's JSON read 0.0 requests/s beside its predicted tok/s: a script dividing by it, or
    comparing it with a measured run's, read a box that answers nothing. Each request's answer is
    --output-len tokens, so the rate is the throughput over them."""
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--engine", "vllm",
                 "--concurrency", "1,8", "--output-len", "256", "--json", "-"]) == 0
    levels = json.loads(capsys.readouterr().out)["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 8]
    for lv in levels:
        assert lv["request_throughput_rps"] == pytest.approx(lv["output_throughput_tps"] / 256)
    assert levels[1]["request_throughput_rps"] > levels[0]["request_throughput_rps"] > 0


def test_a_level_past_vllms_kv_cache_is_predicted_queued(capsys: pytest.CaptureFixture[str]) -> None:
    """An A30's memory holds 4 contexts of 8,704 tokens beside llama-3.1-8b (fit says so). 8 agents read "fits no",
    no speed, where vLLM runs 4 and queues 4: the level is predicted as it runs, the wait in its TTFT."""
    args = ["predict", "--hardware", "nvidia-a30", "--model", "llama-3.1-8b", "--engine", "vllm", "--input-len",
            "8192", "--output-len", "512", "--concurrency", "4,8"]
    assert main([*args, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    four, eight = doc["levels"]
    assert [r[-1] for r in doc["rows"]] == ["yes", "queued (4 at once)"]
    assert eight["output_throughput_tps"] == pytest.approx(four["output_throughput_tps"])
    # each of the 4 waiting waits a whole round of the 4 running: 4 requests' 512 tokens at their rate
    wait_ms = 4 * 512 / four["output_throughput_tps"] * 1000
    assert eight["ttft_ms"]["p50"] == pytest.approx(four["ttft_ms"]["p50"] + wait_ms)
    assert eight["tpot_ms"]["p50"] == pytest.approx(four["tpot_ms"]["p50"])
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "queued (concurrency 8): the KV cache holds fewer requests' contexts than are sent" in said
    assert "fits no" not in said
    # not one context fits: still no speed, and exit 1
    assert main([*args[:-1], "1", "--input-len", "60000"]) == 1
