from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tokenbench.emitter import BackgroundEmitter, EmitterConfig


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test touches the user's results database or API key."""
    monkeypatch.setenv("TOKENBENCH_DB", str(tmp_path / "results.db"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build of the tiny model for the whole session (or a cache the caller points at)."""
    env = os.environ.get("TOKENBENCH_TEST_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("tokenbench-cache")


@pytest.fixture
def emitter() -> Iterator[BackgroundEmitter]:
    with BackgroundEmitter(EmitterConfig()) as em:
        yield em
