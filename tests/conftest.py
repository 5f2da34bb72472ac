"""What every test starts from.

The suite pins its own environment (with ``COLUMNS=80`` exported five CLI tests failed, their tables
drawn at the caller's width): ``pytest_configure`` below scrubs what the caller's shell may hold before anything
is collected, and ``make test`` runs the suite under a hostile environment to prove it (``HOSTILE_ENV`` in the
Makefile, ``tests/test_hermetic.py``).

- The terminal: no ``COLUMNS``/``LINES`` (output is read as a pipe gets it, 160 columns), no colour switches
  (``NO_COLOR``, ``FORCE_COLOR``, ``TTY_*``), ``TERM=dumb``. A test of a width sets its own ``COLUMNS``.
- The locale and zone: ``LANG=C.UTF-8``, no ``LC_*``/``LANGUAGE``/``PYTHONIOENCODING``/``PYTHONUTF8``, ``TZ=UTC``.
- tokenbench's own variables are the user's, not the suite's: every ``TOKENBENCH_*`` is removed but the suite's
  knobs, ``TOKENBENCH_TEST_CACHE`` (the model cache, see ``model_cache``), ``TOKENBENCH_REQUIRE_ENGINES`` (CI:
  a missing engine fails), ``TOKENBENCH_FUZZ`` and ``TOKENBENCH_FUZZ_EXAMPLES`` (how many generated inputs the
  property tests draw, see ``fuzz_examples``) and ``TOKENBENCH_UPDATE_SNAPSHOTS`` (rewrite the exporters'
  snapshots, tests/test_report_export.py).
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

import importlib.util
import io
import locale
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import platformdirs
import pytest
from hypothesis import settings

from servers import Config, ModelGuard, Servers, Serving
from tokenbench.emitter import BackgroundEmitter, EmitterConfig
from tokenbench.engines import tiny

#: The suite's own knobs, kept as the caller set them.
KEPT_VARIABLES = ("TOKENBENCH_TEST_CACHE", "TOKENBENCH_REQUIRE_ENGINES", "TOKENBENCH_FUZZ",
                  "TOKENBENCH_FUZZ_EXAMPLES", "TOKENBENCH_UPDATE_SNAPSHOTS")
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
    # what a test prints with capture off (-s, or in capsys.disabled()) reaches the process's own stdout, ASCII under
    # a C locale with Python's UTF-8 mode off: a table's rules printed there failed the test that printed them, at
    # the stream's next flush. (sys.stdout is pytest's capture here, when capture is on.)
    for stream in (sys.__stdout__, sys.__stderr__):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    fuzz = os.environ.get(FUZZ_ENV)
    if fuzz:
        if fuzz not in FUZZ_PROFILES:
            raise pytest.UsageError(f"{FUZZ_ENV}={fuzz}: use one of {', '.join(FUZZ_PROFILES)}")
        settings.load_profile(fuzz)


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


# ---- how many inputs the property tests generate -------------------------------------------------------------------

#: Hypothesis's profiles, chosen by ``TOKENBENCH_FUZZ`` (``make test-fast`` sets ``fast``; unset, Hypothesis's own
#: default of 100 examples a test, as CI runs it through ``make test``). A test that sets its own count takes it
#: through ``fuzz_examples``, so the profile scales it too.
FUZZ_ENV = "TOKENBENCH_FUZZ"
FUZZ_PROFILES = {"ci": 100, "fast": 5}
for _name, _examples in FUZZ_PROFILES.items():
    settings.register_profile(_name, max_examples=_examples)


def fuzz_examples(ci: int) -> int:
    """A property test's count of examples: ``ci`` as CI runs it, scaled by the profile loaded (a twentieth of it
    under ``TOKENBENCH_FUZZ=fast``), at least 10."""
    return max(10, ci * settings().max_examples // FUZZ_PROFILES["ci"])


# ---- the built models and the real servers the engine tests share -------------------------------------------------

#: The servers the engine tests share, by fixture name, in the order their tests run (last in the session, grouped
#: by server: see ``pytest_collection_modifyitems``; vLLM's first, as they are started ahead: ``servers_ahead``;
#: each after the one it shares a test with, which then stops at its group's first test).
#: One configuration serves every test that can agree on it; a second exists only where a test needs what the first
#: cannot give (one slot, the small model, its vocabulary).
SHARED: dict[str, Config] = {
    # contexts of 5K tokens, prefilled fast; a KV pool of 128 blocks of 128 tokens, for the cache cliff
    "vllm_tiny": Config("vllm", "tiny", parallel=4, ctx=8192, extra=("--num-gpu-blocks-override", "128")),
    "vllm_utf8": Config("vllm", "small-utf8", parallel=4, ctx=2048),  # held-back chunks, --max-num-seqs 4
    # the trajectory replays beside AIPerf: four lanes and their subagents at once, calls of up to 4K tokens
    "vllm_small_8": Config("vllm", "small", parallel=8, ctx=4096),
    "llama_tiny_4": Config("llama-server", "tiny", parallel=4),
    # no host prompt cache: a session evicted from its slot is prefilled again (the cache cliff at the slots)
    "llama_tiny_4_nohost": Config("llama-server", "tiny", parallel=4, ctx=1024, extra=("--cache-ram", "0")),
    "transformers_tiny": Config("transformers", "tiny", ctx=2048),
    "llama_tiny_1": Config("llama-server", "tiny", parallel=1),  # one stream at a time
    "llama_small_4": Config("llama-server", "small", parallel=4),  # slow enough a request that 4 slots show
}
#: The engines whose start is worth making ahead, beside a test that times nothing (``servers_ahead``): vLLM's takes
#: 26-34 s on 2 cores, Transformers' about 8 and llama-server's about a second. An idle one took 1.3% of a core
#: (vLLM) and 0.4% (Transformers) in the tests before its own.
SLOW_TO_START = {"vllm", "transformers"}

_models: ModelGuard | None = None
_servers: Servers | None = None
#: Each shared server's last test in the session's order: the server stops once it is done.
_last_user: dict[str, pytest.Item] = {}


@pytest.fixture(scope="session")
def model_cache() -> Iterator[Path]:
    """Where the built models are: ``TOKENBENCH_TEST_CACHE``, else the user cache (``~/.cache/tokenbench``), so
    they are built once per machine, not per session. Building is safe beside another session's build
    (``tiny.ensure`` builds in a directory of its own and renames it); a test must not change a built model, and
    the session fails if one did (``ModelGuard``)."""
    global _models
    env = os.environ.get("TOKENBENCH_TEST_CACHE")
    _models = ModelGuard(Path(env) if env else Path(platformdirs.user_cache_dir("tokenbench")))
    for size in tiny.SIZES:  # what is built already, as found; the rest as each is built
        if tiny.is_built(_models.cache, size):
            _models.model(size)
    yield _models.cache
    changed, _models = _models.changed(), None
    if changed:
        pytest.fail("a test changed the cached models (the user's, kept between sessions):\n" + "\n".join(changed))


@pytest.fixture(scope="session")
def serving(model_cache: Path) -> Iterator[Servers]:
    """The session's servers, one per ``Config`` (``serving.get(config)``); every one stopped at the end."""
    global _servers
    assert _models is not None
    _servers = Servers(_models)
    try:
        yield _servers
    finally:
        _servers.stop_all()
        _servers = None


def _shared_server(name: str) -> Serving:
    assert _servers is not None
    config = SHARED[name]
    need_engine(config.engine)
    pytest.importorskip("gguf")  # the built model's GGUF half: every model is built whole
    return _servers.get(config)


@pytest.fixture
def llama_tiny_4(serving: Servers) -> Serving:
    return _shared_server("llama_tiny_4")


@pytest.fixture
def llama_tiny_4_nohost(serving: Servers) -> Serving:
    return _shared_server("llama_tiny_4_nohost")


@pytest.fixture
def llama_small_4(serving: Servers) -> Serving:
    return _shared_server("llama_small_4")


@pytest.fixture
def llama_tiny_1(serving: Servers) -> Serving:
    return _shared_server("llama_tiny_1")


@pytest.fixture
def transformers_tiny(serving: Servers) -> Serving:
    return _shared_server("transformers_tiny")


@pytest.fixture
def vllm_tiny(serving: Servers) -> Serving:
    return _shared_server("vllm_tiny")


@pytest.fixture
def vllm_utf8(serving: Servers) -> Serving:
    return _shared_server("vllm_utf8")


@pytest.fixture
def vllm_small_8(serving: Servers) -> Serving:
    return _shared_server("vllm_small_8")


def _servers_of(item: pytest.Item) -> list[str]:
    return [name for name in SHARED if name in getattr(item, "fixturenames", ())]


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests on a shared server last, grouped by server (in ``SHARED``'s order; a test on two servers with the
    later one's, first in its group, so the earlier one stops soon), each group in the order collected: a server
    is up from its group's first test to its last, and the rest of the suite runs with none of them. Right before
    them, the tests that start the servers ahead."""
    def group(pair: tuple[int, pytest.Item]) -> tuple[int, bool, int, int]:
        index, item = pair
        at = [list(SHARED).index(n) for n in _servers_of(item)]
        ahead = "servers_ahead" in getattr(item, "fixturenames", ())
        return (1 + max(at) if at else 0, ahead, min(at) if at else 0, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=group)]
    _last_user.clear()
    for item in items:
        _last_user.update(dict.fromkeys(_servers_of(item), item))


@pytest.fixture
def servers_ahead(serving: Servers, request: pytest.FixtureRequest) -> None:
    """For a test that times nothing: the slow servers (``SLOW_TO_START``) the tests after it use start beside it,
    so they find them up. Only an engine that is ready here: a start would otherwise build it."""
    from tokenbench.engines import status

    items = request.session.items
    later = dict.fromkeys(n for item in items[items.index(request.node) + 1:] for n in _servers_of(item))
    slow = [SHARED[n] for n in later if SHARED[n].engine in SLOW_TO_START]
    serving.prestart(c for c in slow if status.status(c.engine).ready)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A shared server stops after the last test of the session that uses it."""
    try:
        return (yield)
    finally:
        if _servers is not None:
            for name, last in _last_user.items():
                if last is item:
                    _servers.stop(SHARED[name])


#: Set by CI (.ci/run): a real engine that is not built fails its tests instead of skipping them.
REQUIRE_ENV = "TOKENBENCH_REQUIRE_ENGINES"


def need_modules(*names: str) -> None:
    """Skip the calling test module unless each of ``names`` is installed, found without importing it: the engine
    test modules are collected by every process of a run that deselects them, where importing torch took 1.6 s of
    a process's 4.4 s of collecting."""
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: pip install -e '.[engine]'", allow_module_level=True)


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
