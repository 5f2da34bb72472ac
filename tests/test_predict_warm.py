"""predict --sessions says how many live sessions a box's KV cache keeps warm (predict/warm.py): the model's KV
bytes a token, the pool beside the weights (a batching engine) or llama.cpp's slots and host prompt cache."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main

#: Llama 3.1 8B: 32 layers x 8 KV heads x 128 dims x K and V x 2 bytes (f16) = 128 KiB of KV cache a token
LLAMA_8B_KIB_A_TOKEN = 32 * 8 * 128 * 2 * 2 / 1024


def _warm(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "p.json"
    assert main(["predict", "--model", "llama-3.1-8b", "--sessions", "--turns", "20", "--json", str(out),
                 *args]) == 0
    doc = json.loads(out.read_text())
    from test_result_schema import validator

    assert not list(validator().iter_errors(doc))
    warm: dict[str, Any] = doc["warm"]
    return warm


def test_a_batching_engine_keeps_as_many_sessions_as_its_free_memory_holds(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    w = _warm(tmp_path, "--hardware", "nvidia-h100-sxm")
    assert w["session_mib"] == pytest.approx(w["session_tokens"] * LLAMA_8B_KIB_A_TOKEN / 1024)
    assert w["holds"] == math.floor(w["pool_mib"] / w["session_mib"]) and w["low"] < w["holds"] < w["high"]
    # the band is the cliff's, one past the warm count at either end as at the estimate
    assert (f"cache (PREDICTED): {w['holds']:,} live sessions stay warm, the cliff at {w['cliff']:,} "
            f"(band {w['cliff_low']:,}-{w['cliff_high']:,})") in capsys.readouterr().out
    assert (w["cliff"], w["cliff_low"], w["cliff_high"]) == (w["holds"] + 1, w["low"] + 1, w["high"] + 1)
    longer = _warm(tmp_path, "--hardware", "nvidia-h100-sxm", "--tool-len", "1024")
    assert longer["session_tokens"] > w["session_tokens"] and longer["holds"] < w["holds"]
    small = _warm(tmp_path, "--hardware", "nvidia-a30")
    assert small["pool_mib"] < w["pool_mib"] and small["holds"] < w["holds"] / 5


def test_llama_cpp_keeps_a_session_a_slot_and_what_its_host_cache_holds(tmp_path: Path) -> None:
    off = _warm(tmp_path, "--hardware", "strix-halo", "--parallel", "4", "--cache-ram", "0")
    assert (off["holds"], off["low"], off["high"]) == (4, 4, 4) and "no host prompt cache" in off["how"]
    on = _warm(tmp_path, "--hardware", "strix-halo", "--parallel", "4")
    last_mib = float(on["how"].split("MiB of host prompt cache (--cache-ram), ")[1].split(" MiB")[0].replace(",", ""))
    assert on["holds"] == 4 + math.floor(8192 / last_mib)
    # the 128 GiB box would hold far more than llama-server's default host cache keeps: said, with the setting
    assert "the box's free memory would hold" in on["how"]
    would = int(on["how"].split("the box's free memory would hold ")[1].split(" ")[0].replace(",", ""))
    # llama-server's -1, no limit of its own: the box's free memory holds them (it was refused as negative)
    unlimited = _warm(tmp_path, "--hardware", "strix-halo", "--parallel", "4", "--cache-ram=-1")
    assert unlimited["holds"] == would and "(--cache-ram -1: the box's free memory" in unlimited["how"]
    assert "would hold" not in unlimited["how"]


def test_a_model_that_does_not_fit_keeps_no_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--hardware", "nvidia-a30", "--model", "qwen3.6-35b-a3b", "--sessions"]) == 0
    assert "no room for a session's KV cache beside the weights" in capsys.readouterr().out
