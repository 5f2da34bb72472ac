"""One engine registry: every engine written once, every engine string read through it,
and llama-cpp-python never read as llama.cpp's server."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from tokenbench import adapters, registry
from tokenbench.adapters.base import Adapter
from tokenbench.cli import main
from tokenbench.engines import launch, status
from tokenbench.errors import EngineError, UsageError
from tokenbench.levels import DepthLevel
from tokenbench.predict.calibration import Calibration
from tokenbench.predict.priors import backend_key
from tokenbench.predict.setup import Setup
from tokenbench.predict import roofline as rf
from tokenbench.predict.measured import read_rows
from tokenbench.predict.specs import Catalog
from tokenbench.store import Store

SRC = Path(__file__).resolve().parents[1] / "src" / "tokenbench"


@pytest.mark.parametrize("spelling, name", [
    ("llama.cpp", "llama.cpp"), ("llama-server", "llama.cpp"), ("llama.cpp vulkan", "llama.cpp"),
    ("LLaMA.cpp CUDA", "llama.cpp"), ("llama-bench", "llama.cpp"), ("llamacpp-server", "llama.cpp"),
    ("llama-cpp-python", "llama-cpp-python"), ("llamacpp", "llama-cpp-python"),
    ("llama-cpp-python cuda", "llama-cpp-python"), ("vllm", "vllm"), ("vllm 0.21", "vllm"), ("vLLM", "vllm"),
    ("sglang", "sglang"), ("ollama", "ollama"), ("mlx", "mlx"), ("mlx-lm", "mlx"),
    ("transformers", "transformers"), ("transformers 5.23 cb", "transformers"),
])
def test_every_spelling_resolves_to_one_engine(spelling: str, name: str) -> None:
    assert registry.engine(spelling).name == name
    # the adapter a stored result of that engine gets (MLX has none: a plain OpenAI-compatible server)
    assert adapters.by_name(spelling).name == (name if registry.engine(spelling).adapter else "openai-compatible")


def test_no_spelling_names_two_engines() -> None:
    spellings = [n for e in registry.ENGINES for n in e.names]
    assert len(spellings) == len(set(spellings))
    assert all(n == n.lower() and " " not in n for n in spellings)  # a first word, read in lower case
    pairs = [(e, b) for e in registry.ENGINES for b in (e.backends or ("cuda",))]
    assert len({e.backend_key(b, b) for e, b in pairs}) == len(pairs)  # one backend key, one engine and GPU
    # every key reads back as the engine and GPU backend that made it
    for e in registry.ENGINES:
        for b in e.backends:
            got = registry.backend(e.backend_key(b, b))
            assert got is not None and (got.engine, got.gpu) == (e, b)


def test_llama_cpp_and_llama_cpp_python_are_two_engines_sharing_a_family_on_purpose() -> None:
    server, python = registry.engine("llama.cpp"), registry.engine("llama-cpp-python")
    assert server is not python
    assert registry.backend_key("llama.cpp", "cuda") == "llamacpp-cuda"
    assert registry.backend_key("llama-cpp-python", "cuda") == "llama-cpp-python-cuda"
    assert registry.backend_key("llamacpp vulkan", "cuda") == "llama-cpp-python-vulkan"
    assert server.family == python.family == "llamacpp"  # the prior, on purpose: ggml's kernels
    assert registry.engine("ollama").family is None  # ggml too, but never llama.cpp's prior
    cal = Calibration.packaged()
    assert "llama-cpp-python-cuda" not in cal.backends
    eff = cal.efficiency("llama-cpp-python-cuda")
    assert not eff.calibrated and "priors fitted on the other llamacpp backends" in eff.source


def _adapter_classes() -> dict[str, type[Adapter]]:
    """Every Adapter subclass defined in a module of adapters/, found by walking the package."""
    out = {}
    for info in pkgutil.iter_modules(adapters.__path__):
        mod = importlib.import_module(f"tokenbench.adapters.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Adapter) and obj is not Adapter \
                    and obj.__module__ == mod.__name__:
                out[obj.__name__] = obj
    return out


def test_every_adapter_has_a_registry_entry_and_the_reverse() -> None:
    classes = _adapter_classes()
    assert len(classes) >= 6
    by_adapter = {e.adapter: e for e in registry.ENGINES if e.adapter}
    assert set(classes) == set(by_adapter), "an adapter without a registry entry, or an entry without its adapter"
    for cls_name, cls in classes.items():
        assert cls.name == by_adapter[cls_name].name  # what a result records is the registry's name
        assert any(type(a) is cls for a in adapters.ADAPTERS)  # and discovery tries it
        assert type(adapters.by_name(cls.name)) is cls
    assert adapters.by_name("tensorrt-llm") is adapters.GENERIC


def _launch_names() -> set[str]:
    """The embedded engines engines/launch.py describes (its docstring's list) and dispatches on (``name ==``)."""
    text = (SRC / "engines" / "launch.py").read_text()
    doc = ast.get_docstring(ast.parse(text)) or ""
    listed = set(re.findall(r"^- ``([\w.-]+)``:", doc, flags=re.M))
    compared = {n.comparators[0].value for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.Compare) and isinstance(n.left, ast.Name) and n.left.id == "name"
                and isinstance(n.ops[0], ast.Eq) and isinstance(n.comparators[0], ast.Constant)}
    assert compared <= listed and len(listed) >= 4, (listed, compared)
    return listed


def test_every_embedded_engine_has_a_registry_entry() -> None:
    names = _launch_names()
    assert names == set(registry.LAUNCHERS) == set(launch.ENGINES)
    assert set(status.NEEDS) - set(status.TOOLS) == names  # what `tokenbench engines` says each needs
    for n in names:
        eng = registry.by_launcher(n)
        assert eng is not None and launch.canonical(n) == n and launch.canonical(eng.name) == n
    assert launch.canonical("llama.cpp") == "llama-server" and launch.canonical("llamacpp") == "llama-cpp-python"
    with pytest.raises(EngineError, match="unknown engine 'sglang'"):  # known, but tokenbench cannot start it
        launch.canonical("sglang")
    assert status.known("llamacpp") and status.known("aiperf") and not status.known("sglang")


#: (engine, hardware) -> backend key, as calibration.backend_key gave them before the registry (commit d130cbc).
TODAY = [
    ("vllm", "nvidia-h100-sxm", "vllm-cuda"), ("vllm 0.21", "nvidia-h100-sxm", "vllm-cuda"),
    ("vllm", "amd-mi300x", "vllm-rocm"), ("vllm", "amd-ryzen-ai-max-395", "vllm-rocm"),
    ("sglang", "nvidia-h100-sxm", "sglang-cuda"), ("sglang", "amd-mi300x", "sglang-rocm"),
    ("llama.cpp", "amd-ryzen-ai-max-395", "llamacpp-vulkan"), ("llama.cpp rocm", "amd-ryzen-ai-max-395",
                                                                "llamacpp-rocm"),
    ("llama.cpp", "apple-m3-max-40c", "llamacpp-metal"), ("llama.cpp cuda", "nvidia-rtx-4090", "llamacpp-cuda"),
    ("llama.cpp vulkan", "nvidia-rtx-4090", "llamacpp-vulkan"), ("llama.cpp", "nvidia-dgx-spark", "llamacpp-cuda"),
    ("transformers 5.23 cb", "nvidia-h100-sxm", "transformers"), ("ollama", "nvidia-rtx-4090", "ollama"),
    ("mlx", "apple-m3-max-40c", "mlx"),
]


@pytest.mark.parametrize("engine, hardware, key", TODAY)
def test_backend_keys_are_todays(engine: str, hardware: str, key: str) -> None:
    cat = Catalog.load()
    assert backend_key(engine, cat.find_hardware(hardware).default_backend) == key


def test_the_packaged_calibration_keys_are_the_ones_its_rows_make() -> None:
    """Every backend of the shipped efficiency.toml is the key of some packaged published row, read through the
    registry: no key the data depends on has moved."""
    cat = Catalog.load()
    rows = [r for f in ("published.csv", "published-more.csv", "published-current.csv", "published-2024.csv")
            for r in read_rows(SRC / "data" / f)]
    made = {backend_key(r.engine, cat.find_hardware(r.hardware).default_backend) for r in rows}
    assert set(Calibration.packaged().backends) <= made
    assert {"llamacpp-cuda", "llamacpp-metal", "llamacpp-vulkan", "vllm-cuda"} <= made


def test_an_unknown_engine_is_one_line_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UsageError) as e:
        registry.engine("tensorrt-llm 0.9")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("unknown engine 'tensorrt-llm 0.9'")
    assert all(eng.name in msg for eng in registry.ENGINES)
    with pytest.raises(UsageError, match="unknown engine"):
        registry.engine("")
    assert main(["predict", "--hardware", "nvidia-h100-sxm", "--model", "llama-3.1-8b", "--engine", "vllmx"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown engine 'vllmx'" in err and len(err.splitlines()) == 1


def test_the_predictor_reads_engines_through_the_registry() -> None:
    cat, cal = Catalog.load(), Calibration.packaged()
    # llama-cpp-python: ggml's rules (GGUF weights, llama.cpp cache types), sequential, its own backend
    s = Setup.make(cat, cal, "nvidia-rtx-4090", "llama-3.1-8b", "Q4_K_M", "q8_0", "llama-cpp-python")
    assert (s.backend, s.kind, s.calibrated) == ("llama-cpp-python-cuda", "sequential", False)
    with pytest.raises(UsageError, match="GGUF weights"):
        Setup.make(cat, cal, "nvidia-rtx-4090", "llama-3.1-8b", "AWQ", "f16", "llama-cpp-python")
    # the same kernels on the same GPU reach the same peak: ggml CUDA's FP16 accumulate, llama.cpp's or not
    hw = cat.find_hardware("nvidia-rtx-4090")
    assert rf.fp16_peak(hw) != hw.bf16_tflops  # GeForce: FP16 accumulate runs at twice the rate
    assert rf.peak_tflops(hw, s.quant, "llama-cpp-python-cuda") == rf.peak_tflops(hw, s.quant, "llamacpp-cuda") \
        == rf.fp16_peak(hw)
    assert rf.attention_peak(hw, "llama-cpp-python-cuda") == rf.fp16_peak(hw)
    assert rf.peak_tflops(hw, s.quant, "llamacpp-vulkan") == rf.peak_tflops(hw, s.quant, "vllm-cuda") == hw.bf16_tflops
    # an engine's name in any case: 'VLLM' keeps vLLM's 10% of memory free and refuses GGUF quants
    up = Setup.make(cat, cal, "nvidia-h100-sxm", "llama-3.1-8b", "BF16", "auto", "VLLM")
    low = Setup.make(cat, cal, "nvidia-h100-sxm", "llama-3.1-8b", "BF16", "auto", "vllm")
    assert up.backend == "vllm-cuda" and up.fit(4096) == low.fit(4096)
    with pytest.raises(UsageError, match="does not serve GGUF"):
        Setup.make(cat, cal, "nvidia-h100-sxm", "llama-3.1-8b", "Q4_K_M", "auto", "VLLM")


# --- calibrate --runs: a llama-cpp-python run anchors its own backend, never llama.cpp's ------------------------

BOX, MODEL, WEIGHTS, KV = "amd-ryzen-ai-max-395", "gpt-oss-20b", "Q4_K_M", "Q8_0"


def _run(store: Store, engine: str, scale: float = 1.3) -> None:
    """A depth run of ``engine`` on the box, ``scale`` times the packaged llama.cpp Vulkan estimate."""
    cat, packaged = Catalog.load(), Calibration.packaged()
    s = Setup.make(cat, packaged, BOX, MODEL, WEIGHTS, KV, "llama.cpp vulkan")
    levels = []
    for d in (0, 8192):
        levels.append(DepthLevel(concurrency=1, test="pp512", depth=d,
                                         pp_tps=scale * s.prefill(512, d).rate(512)[1]))
        levels.append(DepthLevel(concurrency=1, test="tg128", depth=d, tg_tps=scale * s.decode(d + 64).rate()[1]))
    store.save_run("py-run", "depth", "mine", {"label": "mine", "model": "gpt-oss-20b-Q4_K_M.gguf", "engine": engine,
                                               "weights": WEIGHTS, "kv": KV}, "measured", levels, "0",
                   "2026-01-01T00:00:00", "2026-01-01T00:10:00")


# a full calibration fit with its cross-validation (about a minute alone on 2 cores, several beside
# other tests): make test runs it, make test-fast leaves it out
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_llama_cpp_python_run_never_anchors_llama_cpps_fit(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    db, out = str(tmp_path / "r.db"), tmp_path / "mine.toml"
    _run(Store(db), "llama-cpp-python")
    base = ["calibrate", "--runs", "mine", "--hardware", BOX, "--model", MODEL, "--out", str(out), "--db", db]
    # read as llama.cpp's server on purpose: refused, with the engine it ran
    assert main(base + ["--engine", "llama.cpp vulkan"]) == 2
    assert "ran on llama-cpp-python, not llama.cpp vulkan" in capsys.readouterr().err and not out.exists()
    assert main(base) == 0
    capsys.readouterr()
    packaged, mine = Calibration.packaged(), Calibration.from_toml(out.read_text(), origin=str(out))
    assert "anchored on 4 measurements of your own" in mine.efficiency("llama-cpp-python-vulkan").source
    server = mine.efficiency("llamacpp-vulkan")
    assert "your own" not in server.source
    assert server.eta_w == pytest.approx(packaged.efficiency("llamacpp-vulkan").eta_w, rel=1e-6)
    assert server.t_layer == pytest.approx(packaged.efficiency("llamacpp-vulkan").t_layer, rel=1e-6)


def test_a_llama_cpp_run_is_never_read_as_llama_cpp_python(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    db, out = str(tmp_path / "r.db"), str(tmp_path / "o.toml")
    _run(Store(db), "llama.cpp")
    for given in ("llama-cpp-python", "llamacpp vulkan"):
        assert main(["calibrate", "--runs", "mine", "--hardware", BOX, "--model", MODEL, "--engine", given,
                     "--out", out, "--db", db]) == 2
        assert f"ran on llama.cpp, not {given}" in capsys.readouterr().err
    assert not Path(out).exists()


# --- no engine string is tested by its prefix ---------------------------------------------------------------------

def _spellings() -> set[str]:
    return {n for e in registry.ENGINES for n in (*e.names, e.key)}


def _prefix_tests(text: str) -> list[int]:
    """Lines of ``text`` that test an engine or backend string by prefix, suffix or substring: a ``startswith`` or
    ``endswith`` on an expression that names an engine, backend or family, or whose argument is the start of an
    engine's spelling ("llama", "vllm", ...); a constant ``in`` an engine string ("llama" in engine)."""
    spellings = _spellings()

    def engine_like(c: object) -> bool:
        return isinstance(c, str) and len(c) >= 3 and any(s.startswith(c) or c.startswith(s) for s in spellings)

    def consts(node: ast.expr) -> list[object]:
        elts = node.elts if isinstance(node, ast.Tuple) else [node]
        return [e.value for e in elts if isinstance(e, ast.Constant)]

    bad = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith"):
            said = ast.unparse(node.func.value).lower()
            if re.search(r"engine|backend|family", said) or any(engine_like(c) for a in node.args for c in consts(a)):
                bad.append(node.lineno)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and engine_like(node.left.value) \
                and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                and re.search(r"engine|backend", ast.unparse(node.comparators[0]).lower()):
            bad.append(node.lineno)
    return bad


def test_the_prefix_check_finds_what_the_registry_replaced() -> None:
    """The check below can fail: each way engine strings were tested before the registry is found."""
    for old in ['e.startswith(("vllm", "sglang"))', 'engine.lower().startswith("llama")',
                'backend.startswith("llamacpp") and backend.endswith("cuda")', '"llama" not in engine',
                'x.lower().startswith(("llama.cpp", "ollama", "mlx"))', 'backend_name.endswith("rocm")']:
        assert _prefix_tests(old), old
    for fine in ['q.weights.startswith("MLX")', 'k.startswith("band_")', 'line.startswith(("Collecting ", "S"))',
                 'm.name.startswith(prefix)', 'it.source.startswith(RUN_SOURCE)']:
        assert not _prefix_tests(fine), fine


def test_no_engine_string_is_tested_by_its_prefix() -> None:
    bad = [f"{p.relative_to(SRC.parent)}:{line}" for p in sorted(SRC.rglob("*.py")) if p.name != "registry.py"
           for line in _prefix_tests(p.read_text())]
    assert not bad, "ask tokenbench.registry which engine a string names:\n" + "\n".join(bad)


def test_a_port_a_stopped_server_left_in_time_wait_is_free_and_a_listened_one_taken() -> None:
    """`engines serve` restarted on its port right after Ctrl-C: the connections of the stopped server wait out
    TIME-WAIT, and the engines bind with SO_REUSEADDR, so the port is free; it once read as taken."""
    import socket
    import time

    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    assert launch.port_taken(port)  # a server listens there
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    conn.close()  # the server closes first: its side of the connection waits out TIME-WAIT
    time.sleep(0.05)
    client.close()
    srv.close()
    assert not launch.port_taken(port)
    anywhere = socket.socket()
    anywhere.bind(("0.0.0.0", 0))
    anywhere.listen()
    try:
        assert launch.port_taken(anywhere.getsockname()[1])  # one listening on every address holds it too
    finally:
        anywhere.close()


def test_a_free_port_is_drawn_below_the_range_the_kernel_hands_out() -> None:
    """A port the kernel chose for a bind to port 0, closed and given to a server that binds it seconds later, was
    taken in between by another program's port-0 bind in one CI run: coldstart's health check then found that
    program's server, and its first request found nothing. free_port draws below the kernel's ephemeral range."""
    import socket

    low = launch._ephemeral_low()
    ports = {launch.free_port() for _ in range(20)}
    assert all(launch.PORTS.start <= p < min(low, launch.PORTS.stop) for p in ports), (low, ports)
    assert len(ports) > 1  # drawn, not one port every time
    held = socket.socket()
    held.bind(("127.0.0.1", min(ports)))
    held.listen()
    try:
        assert launch.port_taken(min(ports)) and min(ports) not in {launch.free_port() for _ in range(50)}
    finally:
        held.close()
