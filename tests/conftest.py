"""What every test starts from.

The suite pins its own environment (issue 23: with ``COLUMNS=80`` exported five CLI tests failed, their tables
drawn at the caller's width): ``pytest_configure`` below scrubs what the caller's shell may hold before anything
is collected, and ``make test`` runs the suite under a hostile environment to prove it (``HOSTILE_ENV`` in the
Makefile, ``tests/test_hermetic.py``).

- The terminal: no ``COLUMNS``/``LINES`` (output is read as a pipe gets it, 160 columns), no colour switches
  (``NO_COLOR``, ``FORCE_COLOR``, ``TTY_*``), ``TERM=dumb``. A test of a width sets its own ``COLUMNS``.
- The locale and zone: ``LANG=C.UTF-8``, no ``LC_*``/``LANGUAGE``/``PYTHONIOENCODING``/``PYTHONUTF8``, ``TZ=UTC``.
- tokenbench's own variables are the user's, not the suite's: every ``TOKENBENCH_*`` is removed but the suite's
  knobs, ``TOKENBENCH_TEST_CACHE`` (the model cache, see ``model_cache``), ``TOKENBENCH_REQUIRE_ENGINES`` (CI:
  a missing engine fails), ``TOKENBENCH_FUZZ_EXAMPLES`` (fewer generated streams locally) and
  ``TOKENBENCH_UPDATE_SNAPSHOTS`` (rewrite the exporters' snapshots, tests/test_report_export.py).
- The home: ``HOME`` is left alone, since the engines the tests start read their own caches under it (Hugging
  Face, vLLM's compile cache, Chromium's profile), and no assertion reads it. What tokenbench derives from it is
  pinned: the user config and data directories (a ``guard.toml`` or ``catalog.toml`` of the user's would change
  verdicts) point at an empty directory of the session (``XDG_CONFIG_HOME``, ``XDG_DATA_HOME``; platformdirs
  reads them on Linux), the results database at each test's own (``_isolated_db``). The built engines are found
  where ``make engines`` puts them, the user cache directory, resolved before anything is scrubbed and pinned
  as ``TOKENBENCH_TOOLS``. Engines kept elsewhere are named to the suite by ``TOKENBENCH_TEST_TOOLS``,
  ``TOKENBENCH_TEST_LLAMA_CPP_BIN`` (a CUDA build of llama.cpp's tools), ``TOKENBENCH_TEST_VLLM_ENV`` or
  ``TOKENBENCH_TEST_AIPERF_ENV``: each becomes the product's variable without ``TEST_`` for the session.
"""

from __future__ import annotations

import locale
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import platformdirs
import pytest

from tokenbench.emitter import BackgroundEmitter, EmitterConfig

#: The suite's own knobs, kept as the caller set them.
KEPT_VARIABLES = ("TOKENBENCH_TEST_CACHE", "TOKENBENCH_REQUIRE_ENGINES", "TOKENBENCH_FUZZ_EXAMPLES",
                  "TOKENBENCH_UPDATE_SNAPSHOTS")
#: Where the built engines are: ``TOKENBENCH_TEST_<name>`` gives the session its ``TOKENBENCH_<name>``.
ENGINE_LOCATIONS = ("TOOLS", "LLAMA_CPP_BIN", "VLLM_ENV", "AIPERF_ENV")
#: The caller's terminal, colour and locale: removed.
SCRUBBED = ("COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
            "CLICOLOR_FORCE", "COLORTERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "LANGUAGE", "PYTHONIOENCODING",
            "PYTHONUTF8")
PINNED = {"TERM": "dumb", "LANG": "C.UTF-8", "TZ": "UTC"}

_caller_environment: dict[str, str] = {}
_caller_ctype = ""
_session_home: Path | None = None


def hermetic_environment(environ: MutableMapping[str, str], home: Path) -> None:
    """Pin ``environ`` as the module docstring says; ``home`` is an empty directory for the user config and data."""
    tools = {name: environ.get(f"TOKENBENCH_TEST_{name}") for name in ENGINE_LOCATIONS}
    tools["TOOLS"] = tools["TOOLS"] or platformdirs.user_cache_dir("tokenbench")  # before XDG_* change
    for var in list(environ):
        if var in SCRUBBED or var.startswith("LC_") or var.startswith("TOKENBENCH_") and var not in KEPT_VARIABLES:
            del environ[var]
    environ.update(PINNED)
    environ.update({f"TOKENBENCH_{name}": value for name, value in tools.items() if value})
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        environ[var] = str(home / sub)


def pytest_configure(config: pytest.Config) -> None:
    """Before collection, so module-level reads and session fixtures see the pinned environment too."""
    global _session_home, _caller_ctype
    _caller_environment.update(os.environ)
    _session_home = Path(tempfile.mkdtemp(prefix="tokenbench-tests-"))
    hermetic_environment(os.environ, _session_home)
    if hasattr(time, "tzset"):
        time.tzset()
    # this process too: a test decodes a subprocess's output (text=True) by the locale's encoding, ASCII where the
    # caller's locale was C with Python's UTF-8 mode off, while the subprocess writes UTF-8 under the pinned one
    _caller_ctype = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, PINNED["LANG"])
    except locale.Error:  # no C.UTF-8 here: Python's UTF-8 mode gives subprocesses UTF-8 under C anyway
        pass


def pytest_unconfigure(config: pytest.Config) -> None:
    """The caller's environment back (pytest run in-process, e.g. by an IDE)."""
    if _caller_environment:
        os.environ.clear()
        os.environ.update(_caller_environment)
        if hasattr(time, "tzset"):
            time.tzset()
    if _caller_ctype:
        locale.setlocale(locale.LC_CTYPE, _caller_ctype)
    if _session_home is not None:
        shutil.rmtree(_session_home, ignore_errors=True)


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


@pytest.fixture(scope="session")
def vllm_server(model_cache: Path) -> Iterator[tuple[Any, Any]]:
    """One vLLM for every test that needs it (a start costs ~90 s on 2 cores): the small-utf8 model, whose tokens
    are often pieces of a multi-byte character that vLLM streams as chunks with empty text (the chunk rule), 4
    sequences, 2,048 tokens of context."""
    need_engine("vllm")
    from tokenbench.engines import launch, tiny

    model = tiny.ensure(model_cache, size="small-utf8")
    with launch.start("vllm", model, parallel=4, ctx=2048) as server:
        yield server, model


@pytest.fixture
def emitter() -> Iterator[BackgroundEmitter]:
    with BackgroundEmitter(EmitterConfig()) as em:
        yield em
