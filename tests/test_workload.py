from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tokenbench.errors import UsageError
from tokenbench.workload import SHAPES, LocalTokenizer, PromptBuilder, resolve_shape

tokenizers = pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE trained here, like the embedded model's."""
    from tokenbench.engines.tiny import _train_tokenizer

    d = tmp_path_factory.mktemp("tok")
    _train_tokenizer(d)
    return d / "tokenizer.json"


def test_shapes() -> None:
    assert SHAPES["agentic"] == (4096, 512) and SHAPES["short"] == (128, 128)
    assert resolve_shape("pp512", None, None) == (512, 1)
    assert resolve_shape("tg128", None, None) == (1, 128)
    assert resolve_shape(None, 100, 20) == (100, 20)
    assert resolve_shape("agentic", None, 64) == (4096, 64)
    with pytest.raises(UsageError, match="unknown shape 'huge'"):
        resolve_shape("huge", None, None)


@pytest.mark.parametrize("n", [1, 7, 128, 1000, 4096])
def test_prompts_have_exactly_n_tokens(tokenizer_json: Path, n: int) -> None:
    tok = LocalTokenizer(str(tokenizer_json))
    b = PromptBuilder(tok, seed=3, run_tag="abcd")
    prompts = asyncio.run(b.build(3, n))
    for text, count in prompts:
        assert count == n
        assert tok.count(text) == n


def test_prompts_unique_per_request_and_per_run(tokenizer_json: Path) -> None:
    tok = LocalTokenizer(str(tokenizer_json))
    run1 = asyncio.run(PromptBuilder(tok, seed=3, run_tag="run1").build(5, 64))
    run2 = asyncio.run(PromptBuilder(tok, seed=3, run_tag="run2").build(5, 64))
    texts = [t for t, _ in run1 + run2]
    assert len(set(texts)) == 10
    # they differ from the first tokens on, so no prefix-cache block can be shared
    first = {tuple(asyncio.run(tok.encode(t))[:4]) for t in texts}
    assert len(first) == 10


def test_local_tokenizer_reads_eos_from_the_model_dir(tokenizer_json: Path) -> None:
    (tokenizer_json.parent / "config.json").write_text('{"eos_token_id": 1}')
    assert LocalTokenizer(str(tokenizer_json.parent)).eos_token_id == 1


def test_missing_tokenizer_is_a_clear_error() -> None:
    with pytest.raises(UsageError, match="not found locally"):
        LocalTokenizer("/no/such/model")
