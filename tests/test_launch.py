"""The embedded engines' command lines, built without starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenbench.engines import launch

SAPPHIRE = "flags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
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
