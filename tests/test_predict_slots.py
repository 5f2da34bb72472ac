"""predict takes llama-server's own slots when --parallel is not given, as recommend does: 4 sharing one KV cache
in builds since November 2025 (-np auto), fewer where memory holds fewer sequences, 1 in builds before; the line
above the table says how many and why, and the stored shape keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tokenbench import registry
from tokenbench.cli import main


def _predict(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, dict[str, object]]:
    out = tmp_path / "p.json"
    assert main(["predict", "--model", "llama-3.1-8b", "--concurrency", "1,4", "--json", str(out), *args]) == 0
    text = " ".join(capsys.readouterr().out.split())
    return text, json.loads(out.read_text())["manifest"]["shape"]


def test_the_builds_month_decides_the_slots() -> None:
    llama = registry.engine("llama-server")
    assert llama.default_slots("") == registry.AUTO_SLOTS == 4  # the newest builds
    assert llama.default_slots("2025-11") == 4 and llama.default_slots("2026") == 4
    assert llama.default_slots("2025-10") == 1 and llama.default_slots("2025") == 1  # a bare year reads as January
    for other in ("llama-cpp-python", "ollama", "vllm"):
        assert registry.engine(other).default_slots("") == 1
    assert registry.month_text("2025-11") == "November 2025" and registry.month_text("2026") == "2026"


def test_predict_takes_llama_servers_own_slots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, shape = _predict(tmp_path, capsys, "--hardware", "strix-halo")
    assert shape["parallel"] == 4
    assert "4 slots on llama-server: its own default since builds of November 2025 (-np auto)" in text
    assert "serves one stream at a time" not in text
    # a build from before the change: one slot, and the line says which builds start four
    text, shape = _predict(tmp_path, capsys, "--hardware", "strix-halo", "--engine-version", "b6451")
    assert shape["parallel"] == 1
    assert "1 slot: llama-server's default in builds before November 2025 (--engine-version b6451)" in text
    assert "serves one stream at a time (one slot)" in text
    # slots given are taken as given, with no line about a default
    text, shape = _predict(tmp_path, capsys, "--hardware", "strix-halo", "--parallel", "2")
    assert shape["parallel"] == 2 and "on llama-server: its own default" not in text


def test_fewer_slots_where_memory_holds_fewer_sequences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Llama 3.1 70B at Q4_K_M is about 40 GiB; a sequence of 120,512 tokens holds 80 layers x 8 KV heads x 128 x K
    # and V x 2 bytes = 320 KiB a token, 36.8 GiB: two fit in the 128 GiB box beside the weights, three do not
    out = tmp_path / "p.json"
    assert main(["predict", "--hardware", "strix-halo", "--model", "llama-3.1-70b", "--input-len", "120000",
                 "--output-len", "512", "--concurrency", "1", "--json", str(out)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert json.loads(out.read_text())["manifest"]["shape"]["parallel"] == 2
    assert "2 slots on llama-server: of its default 4, as many sequences of 120,512 tokens as the memory holds" in text


def test_a_batching_engine_is_not_given_slots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text, shape = _predict(tmp_path, capsys, "--hardware", "nvidia-h100-sxm")
    assert shape["parallel"] == 1 and "slots on llama-server" not in text


def test_predict_and_recommend_take_the_same_slots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, shape = _predict(tmp_path, capsys, "--hardware", "strix-halo", "--input-len", "4096", "--output-len", "512")
    out = tmp_path / "r.json"
    assert main(["recommend", "--model", "llama-3.1-8b", "--agents", "4", "--input-len", "4096", "--output-len", "512",
                 "--json", str(out), "--db", str(tmp_path / "r.db")]) == 0
    capsys.readouterr()
    doc = json.loads(out.read_text())
    rows = [c for c in doc["ranked"] + doc["excluded"] if c["box"] == "amd-ryzen-ai-max-395"]
    assert rows and f"-np {shape['parallel']}" in rows[0]["setup"]
