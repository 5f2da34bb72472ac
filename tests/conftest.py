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


#: Set by CI (.ci/run): a real engine that is not built fails its tests instead of skipping them.
REQUIRE_ENV = "TOKENBENCH_REQUIRE_ENGINES"


def need_engine(name: str) -> None:
    """Skip (or, under CI, fail) unless the embedded engine ``name`` is ready on this machine."""
    from tokenbench.engines import status

    if status.status(name).ready:
        return
    why = f"the {name} engine is not ready here: run `tokenbench engines build {name}` (or make engines)"
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture
def emitter() -> Iterator[BackgroundEmitter]:
    with BackgroundEmitter(EmitterConfig()) as em:
        yield em
