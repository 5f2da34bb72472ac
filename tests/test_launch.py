"""The embedded engines' command lines, built without starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenbench.engines import launch

SAPPHIRE = "flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_int8 amx_tile\n"
ICE_LAKE = "flags\t\t: fpu sse avx2 avx512f avx512_vnni\n"


@pytest.mark.parametrize(("cores", "dtype"), [
    ([SAPPHIRE, SAPPHIRE], "bfloat16"),
    (["flags\t\t: avx2 avx512_bf16\n"], "bfloat16"),  # AVX512-BF16 without AMX (Cooper Lake, Zen 4)
    ([ICE_LAKE, ICE_LAKE], "float32"),
    ([SAPPHIRE, ICE_LAKE], "float32"),  # a core that would emulate it
    (["processor\t: 0\n"], "float32"),  # no flags line: not an x86 /proc/cpuinfo
])
def test_vllm_runs_bfloat16_only_where_every_core_computes_it(tmp_path: Path, cores: list[str],
                                                              dtype: str) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("".join(f"processor\t: {i}\n{core}\n" for i, core in enumerate(cores)))
    assert launch.vllm_dtype(str(info)) == dtype


def test_vllm_runs_float32_where_the_cpu_cannot_be_read(tmp_path: Path) -> None:
    assert launch.vllm_dtype(str(tmp_path / "absent")) == "float32"


def test_llama_cpp_repacks_no_weights_where_a_core_has_amx(tmp_path: Path) -> None:
    """This llama.cpp build crashes repacking quantized weights into AMX tiles (SIGSEGV at load)."""
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\n{SAPPHIRE}")
    assert launch.llama_repack_crashes(str(info))
    info.write_text(f"processor\t: 0\n{ICE_LAKE}")
    assert not launch.llama_repack_crashes(str(info))
    assert not launch.llama_repack_crashes(str(tmp_path / "absent"))


@pytest.mark.parametrize("amx", [False, True])
def test_llama_server_runs_without_repacking_where_it_crashes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               amx: bool) -> None:
    from tokenbench.engines import llamacpp_build
    from tokenbench.engines.tiny import TinyModel

    monkeypatch.setattr(launch, "llama_repack_crashes", lambda: amx)
    monkeypatch.setattr(llamacpp_build, "ensure_tools", lambda progress=None: tmp_path)
    model = TinyModel(hf_dir=tmp_path / "hf", gguf_path=tmp_path / "m.gguf", eos_token_id=1)
    argv = launch.command("llama-server", model, 8080, extra=("--repack",)).argv
    assert ("--no-repack" in argv) == amx and argv[-1] == "--repack"  # what the caller adds comes last, and wins
