"""llama.cpp's own tools (``llama-server``, ``llama-bench``, ``llama-quantize``), built once from source into
the cache.

Only package registries are reachable, and the llama-cpp-python sdist on PyPI vendors the whole llama.cpp tree
(``vendor/llama.cpp``), so that is the source: downloaded with pip, built with CMake and Ninja, the compiler's
progress shown. A build takes about 10 minutes on 2 cores and is reused while the pinned version and the flags
stay the same. ``TOKENBENCH_LLAMA_CPP_BIN`` names a directory with binaries of your own (a CUDA build, say)
to use instead.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import EngineError, UsageError
from .steps import ninja_progress, run_step
from .cache import tools_dir

#: The llama-cpp-python release whose vendored llama.cpp is built (its llama.cpp is from 2026).
SDIST_VERSION = "0.3.36"
TARGETS = ("llama-server", "llama-bench", "llama-quantize")
BIN_ENV = "TOKENBENCH_LLAMA_CPP_BIN"
#: CPU build: no network features (no curl, no TLS, no web UI download), static, tuned to this machine.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
    "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=ON",
)

Progress = Callable[[str], None]


def _key() -> str:
    flags = " ".join((SDIST_VERSION, *CMAKE_FLAGS, *sorted(TARGETS)))
    return f"llama.cpp-{SDIST_VERSION}-{hashlib.sha256(flags.encode()).hexdigest()[:8]}"


def bin_dir() -> Path:
    env = os.environ.get(BIN_ENV)
    return Path(env) if env else tools_dir() / _key() / "bin"


def tool(name: str) -> Path | None:
    """The path of a built tool, or None when it is not built (yet)."""
    p = bin_dir() / name
    return p if p.is_file() and os.access(p, os.X_OK) else None


def _source(work: Path, progress: Progress) -> Path:
    sdist_dir = tools_dir() / "src"
    sdist_dir.mkdir(parents=True, exist_ok=True)
    sdist = sdist_dir / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
    if not sdist.exists():
        progress(f"downloading the llama-cpp-python {SDIST_VERSION} sdist (llama.cpp's source, ~75 MB) ...")
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
             "-d", str(sdist_dir), f"llama-cpp-python=={SDIST_VERSION}"],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0 or not sdist.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
            raise EngineError(f"could not download llama-cpp-python=={SDIST_VERSION}'s source with pip: {tail}")
    progress("unpacking llama.cpp's source ...")
    prefix = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.name.startswith(prefix)]
        tf.extractall(work, members=members, filter="data")
    return work / prefix


def ensure_tools(progress: Progress | None = None) -> Path:
    """The directory holding llama-server, llama-bench and llama-quantize, built on first use."""
    say = progress or (lambda t: print(t, file=sys.stderr, flush=True))
    d = bin_dir()
    if all(tool(t) for t in TARGETS):
        return d
    if os.environ.get(BIN_ENV):
        missing = [t for t in TARGETS if not tool(t)]
        raise EngineError(f"{BIN_ENV}={d} lacks {', '.join(missing)}: build them there or unset {BIN_ENV}")
    for exe in ("cmake", "ninja", "c++"):
        if shutil.which(exe) is None:
            raise EngineError(f"building llama.cpp needs {exe}: install cmake, ninja-build and a C++ compiler "
                              f"(Debian: apt-get install cmake ninja-build g++), or set {BIN_ENV}")
    say(f"building llama.cpp's llama-server, llama-bench and llama-quantize once into {d.parent} "
        "(about 10 minutes on 2 cores) ...")
    d.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".llama-build-", dir=d.parent) as tmp:
        src = _source(Path(tmp), say)
        build = Path(tmp) / "build"
        run_step(["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", *CMAKE_FLAGS], say,
                 "llama.cpp configure failed", ninja_progress("  llama.cpp configure"))
        jobs = str(os.cpu_count() or 2)
        run_step(["cmake", "--build", str(build), "-j", jobs, "--target", *TARGETS], say, "llama.cpp build failed",
                 ninja_progress("  llama.cpp build"))
        staged = Path(tmp) / "bin"
        staged.mkdir()
        for t in TARGETS:
            shutil.copy2(build / "bin" / t, staged / t)
        if d.exists():
            shutil.rmtree(d)
        staged.rename(d)  # atomic: a build killed half way leaves no bin/
    say(f"llama.cpp tools ready in {d}")
    return d


def quant_types(exe: Path) -> str:
    """The types ``llama-quantize --help`` lists ("  2  or  Q4_0    :  4.34G, ..."), as one line."""
    proc = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=False)
    types = re.findall(r"^\s*\d+\s+or\s+(\S+)\s*:", proc.stdout + proc.stderr, re.M)
    return ", ".join(types) if types else "those 'llama-quantize --help' lists"


def quantize(src: Path, dest: Path, qtype: str, progress: Progress | None = None) -> Path:
    """``llama-quantize src dest qtype`` (Q8_0, Q4_0, Q4_K_M, ...), once; the result is cached beside src."""
    if dest.exists():
        return dest
    exe = tool("llama-quantize") or ensure_tools(progress) / "llama-quantize"
    tmp = dest.with_suffix(".part")
    proc = subprocess.run([str(exe), str(src), str(tmp), qtype], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        said = (proc.stderr or proc.stdout).strip().splitlines()
        if any("invalid ftype" in line for line in said):  # the user's word, not a broken tool
            raise UsageError(f"--quant {qtype}: llama-quantize knows no such type; it knows {quant_types(exe)}")
        raise EngineError(f"llama-quantize {qtype} failed: {said[-1] if said else 'it printed nothing'}")
    tmp.rename(dest)
    return dest
