"""One record per serving engine, written once: its names, how the predictor models it, its adapter, its embedded
launcher, and the calibration backend its runs and predictions use. Every question "which engine does
this string name?" is asked here; nothing else tests an engine string's prefix.

An engine string is the engine's name (any spelling in ``aliases``, any case), then optionally a version or a GPU
backend: "vllm 0.21", "llama.cpp vulkan", "transformers 5.23 cb". Its first word alone decides the engine.

llama.cpp and llama-cpp-python are two engines. llama.cpp's own server (llama-server, llama-bench) and
llama-cpp-python's server (Python bindings around a vendored llama.cpp, one request at a time) have their own
adapters, their own embedded launchers and their own calibration backends (``llamacpp-cuda`` and
``llama-cpp-python-cuda``): a llama-cpp-python run never anchors llama.cpp's fit, nor the reverse. They share the
calibration *family* ``llamacpp`` on purpose: both run ggml's kernels, so a llama-cpp-python backend no run
calibrates starts from what the llama.cpp backends' published rows say of those kernels (marked UNCALIBRATED),
and published llama-cpp-python rows, were there any, would join the family's prior fit. Ollama also runs ggml but
keeps a family of its own: its scheduler and defaults are its own, and no published row stands behind it.

"llamacpp" is llama-cpp-python, as tokenbench 0.1 stored its embedded engine; llama.cpp is "llama.cpp" or
"llama-server". (The calibration key ``llamacpp-<backend>`` is a key, not an engine name: it is llama.cpp's.)

Adding an engine: a record here, an adapter module in ``adapters/`` (named by ``adapter``), and where it has an
embedded launcher, its command in ``engines/launch.py`` (named by ``launcher``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from .errors import UsageError

#: GPU backends ggml is built for: named after a ggml engine ("llama.cpp vulkan"), else the box's default.
GGML_BACKENDS: tuple[str, ...] = ("cuda", "vulkan", "rocm", "metal", "cpu", "sycl")
#: Backends a vendor-built engine (vLLM, SGLang) runs on, chosen by the box's GPU vendor.
VENDOR_BACKENDS: tuple[str, ...] = ("cuda", "rocm")


@dataclass(frozen=True, slots=True)
class Engine:
    """A serving engine, as every part of tokenbench knows it."""

    #: Canonical name: what its adapter records in every result's manifest.
    name: str
    #: Other spellings users, older results and published data use (lower case).
    aliases: tuple[str, ...]
    #: How the predictor models concurrent requests: "batching" (continuous batching, one step serves all) or
    #: "sequential" (one sequence per slot; llama.cpp's -np slots decode together).
    kind: Literal["batching", "sequential"]
    #: Whose compute kernels it runs: "ggml" (GGUF weights, llama.cpp's cache types and -ub), "vllm", "sglang",
    #: "torch", "mlx" (MLX weights).
    kernels: str
    #: Its calibration backend key, or the stem of one (see ``key_rule``).
    key: str
    #: How the backend key follows from the engine string and the box: "named" (key-<backend>, the backend named
    #: after the engine or else the box's default: llamacpp-vulkan), "vendor" (key-cuda, or key-rocm on a box
    #: whose default backend is ROCm or Vulkan, i.e. AMD), "plain" (the key alone).
    key_rule: Literal["named", "vendor", "plain"]
    #: The calibration family: backends that share one prior fit on all their published rows. None: each of its
    #: backends is a family of its own (SGLang never borrows vLLM's fit, nor vLLM ROCm vLLM CUDA's).
    family: str | None = None
    #: The stem of the priors.LITERATURE entries that apply when its backend has none of its own: those of
    #: the engine whose kernels it runs (llama-cpp-python: llama.cpp's), or whose kernels are alike (SGLang: vLLM's).
    literature: str | None = None
    #: Its adapter's class in ``tokenbench.adapters`` (None: driven as a plain OpenAI-compatible server).
    adapter: str | None = None
    #: Its embedded engine's name in ``engines/launch.py`` (None: tokenbench cannot start it).
    launcher: str | None = None
    #: Where it runs: "any" box, "not-apple" (no Metal backend), "apple-only".
    platform: Literal["any", "not-apple", "apple-only"] = "any"
    #: Share of GPU memory it keeps free beside weights and cache (vLLM's gpu_memory_utilization 0.9).
    reserve: float = 0.0
    #: Releases of known date, (version, "YYYY-MM"), oldest first: how a stated version maps to the year of its
    #: build, which the predictor's fit keeps apart (``version_date``).
    releases: tuple[tuple[str, str], ...] = ()
    #: ggml engines: the month ("YYYY-MM") from whose builds on its CUDA backend multiplies a prompt's block-quantized
    #: weights with its int8 MMQ kernels, tile by tile, rather than dequantizing them to F16 for cuBLAS (roofline
    #: .sm_rates); "" not ggml's.
    mmq_since: str = ""
    #: It saves idle slots' KV caches to a host prompt cache before each task (llama-server's --cache-ram), and no
    #: slot runs meanwhile (predict/serving.slot_save).
    host_prompt_cache: bool = False
    #: The month ("YYYY-MM") from whose builds on its server starts AUTO_SLOTS slots sharing one unified KV cache
    #: when none are asked for (-np auto); before it, and "" for an engine that serves one stream, one slot.
    auto_slots_since: str = ""

    def mmq(self, build: str) -> bool:
        """Whether builds of ``build`` ("YYYY-MM", or "YYYY": counted from its January; "": the newest) run MMQ."""
        return bool(self.mmq_since) and (not build or build >= self.mmq_since)

    def default_slots(self, build: str) -> int:
        """The slots its server starts when none are asked for, in builds of ``build`` (as ``mmq`` reads it)."""
        return AUTO_SLOTS if self.auto_slots_since and (not build or build >= self.auto_slots_since) else 1

    @property
    def gguf(self) -> bool:
        """It runs ggml's kernels: GGUF weights, llama.cpp's KV cache types, a micro-batch (-ub)."""
        return self.kernels == "ggml"

    @property
    def backends(self) -> tuple[str, ...]:
        """The GPU backends its backend keys name."""
        return GGML_BACKENDS if self.key_rule == "named" else VENDOR_BACKENDS if self.key_rule == "vendor" else ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def backend_key(self, named: str | None, default_backend: str) -> str:
        """The calibration backend of this engine on a box whose default GPU backend is ``default_backend``,
        ``named`` the backend given after the engine's name (used by the "named" rule only)."""
        if self.key_rule == "named":
            return f"{self.key}-{named or default_backend}"
        if self.key_rule == "vendor":
            return f"{self.key}-" + ("rocm" if default_backend in ("rocm", "vulkan") else "cuda")
        return self.key

    def usage(self) -> str:
        """How a user names it, with its backends where they can be named: 'llama.cpp [cuda|vulkan|...]'."""
        return f"{self.name} [{'|'.join(GGML_BACKENDS)}]" if self.key_rule == "named" else self.name


#: llama.cpp build numbers of known date (from threads that name the build and its day): b1631 by 2023-12-16
#: (llama.cpp PR 4406's llama-bench table: published-2024.sources.md), b2793 2024-05-06
#: (nnance/llamacpp-ai-provider#7), b3078 2024-06-04 (janhq/cortex.llamacpp#70), b3403 2024-07-16
#: (janhq/cortex.llamacpp#147), b4007 2024-11-01 (janhq/cortex.llamacpp#278), b4409 2025-01-03
#: (janhq/cortex.llamacpp#359), b5050 2025-04-04 (janhq/cortex.llamacpp#448), b6451 2025-09-13
#: (xorbitsai/xllamacpp#81), b6918 2025-11-02 (llama.cpp benches/dgx-spark.md), b7815 2026-01-23
#: (ferranpons/Llamatik#37), b8651 2026-04-03 (gominimal/pkgs#40), b9986 2026-07-14 (containers/ramalama#2842).
LLAMACPP_BUILDS = (("b1631", "2023-12"), ("b2793", "2024-05"), ("b3078", "2024-06"), ("b3403", "2024-07"),
                   ("b4007", "2024-11"), ("b4409", "2025-01"), ("b5050", "2025-04"), ("b6451", "2025-09"),
                   ("b6918", "2025-11"), ("b7815", "2026-01"), ("b8651", "2026-04"), ("b9986", "2026-07"))
#: vLLM releases of known date: 0.6.0 2024-09-04 (vllm-project/vllm#8166), 0.7.0 2025-01 (its release notes),
#: 0.18.0 by 2026-04-02 (llm-d/llm-d#1059), 0.21.0 2026-05-16 (vllm-project/vllm-metal#377), 0.27.1 2026-08-13
#: (vllm-project/vllm-metal#603).
VLLM_RELEASES = (("0.6.0", "2024-09"), ("0.7.0", "2025-01"), ("0.18.0", "2026-04"), ("0.21.0", "2026-05"),
                 ("0.27.1", "2026-08"))

#: llama.cpp PR 8075 ("CUDA: use MMQ instead of cuBLAS by default", opened 2024-06-23 and in by 2024-06-25, PR
#: 8115): from builds of July 2024 on (b3403 of 2024-07-16 and later; a build dated by LLAMACPP_BUILDS between b3078
#: and b3403 counts as June's), a prompt's quantized matmuls run the int8 tensor-core MMQ kernels, not cuBLAS.
MMQ_SINCE = "2024-07"
#: llama-server's slots when -np is not given: 4, sharing one unified KV cache (-np auto), since ggml-org/llama.cpp
#: PR 16736 (opened 2025-10-23; b7079 of 2025-11-16 starts 4 slots, as its users reported): builds of November 2025
#: on; before it, one.
AUTO_SLOTS = 4
AUTO_SLOTS_SINCE = "2025-11"

ENGINES: tuple[Engine, ...] = (
    # the order of the embedded launchers here is the order `tokenbench engines` lists them in
    Engine("transformers", ("transformers-serve",), "batching", "torch", "transformers", "plain",
           adapter="Transformers", launcher="transformers"),
    Engine("vllm", (), "batching", "vllm", "vllm", "vendor", literature="vllm", adapter="VLLM", launcher="vllm",
           platform="not-apple", reserve=0.10, releases=VLLM_RELEASES),
    Engine("llama.cpp", ("llama-server", "llama_cpp", "llamacpp-server", "llama-bench"), "sequential", "ggml",
           "llamacpp", "named", family="llamacpp", adapter="LlamaServer", launcher="llama-server",
           releases=LLAMACPP_BUILDS, mmq_since=MMQ_SINCE, host_prompt_cache=True,
           auto_slots_since=AUTO_SLOTS_SINCE),
    Engine("llama-cpp-python", ("llamacpp", "llama_cpp_python"), "sequential", "ggml", "llama-cpp-python", "named",
           family="llamacpp", literature="llamacpp", adapter="LlamaCppPython", launcher="llama-cpp-python",
           mmq_since=MMQ_SINCE),
    Engine("sglang", (), "batching", "sglang", "sglang", "vendor", literature="vllm", adapter="SGLang",
           platform="not-apple", reserve=0.10),
    Engine("ollama", (), "sequential", "ggml", "ollama", "plain", adapter="Ollama"),
    # mlx_lm.server batches concurrent requests (its BatchGenerator: prompts prefilled in steps of
    # --prefill-step-size, 2048 tokens, decodes batched), so it is modelled as a batching engine of its own
    Engine("mlx", ("mlx-lm", "mlx_lm", "mlx_lm.server", "mlx-lm-server"), "batching", "mlx", "mlx", "plain",
           platform="apple-only"),
)

_BY_NAME: dict[str, Engine] = {}
for _e in ENGINES:
    for _n in _e.names:
        if _BY_NAME.setdefault(_n, _e) is not _e:  # one spelling, two engines: the confusion this module ends
            raise AssertionError(f"engine name {_n!r} is given to {_BY_NAME[_n].name} and {_e.name}")

#: Backend key -> (engine, the GPU backend it names, or None for a "plain" key).
_BY_KEY: dict[str, tuple[Engine, str | None]] = {
    **{e.backend_key(b, b): (e, b) for e in ENGINES for b in e.backends},
    **{e.key: (e, None) for e in ENGINES if e.key_rule == "plain"},
}

#: The embedded engines' names, as `--engine` takes them without --url and engines/launch.py starts them.
LAUNCHERS: tuple[str, ...] = tuple(e.launcher for e in ENGINES if e.launcher)


def known() -> str:
    """The engines, as an error message lists them."""
    return ", ".join(e.usage() for e in ENGINES)


def words(text: str | None) -> list[str]:
    """An engine string's words, lower case: its name, then a version or backend."""
    return (text or "").lower().split()


def find(text: str | None) -> Engine | None:
    """The engine an engine string names (its first word, any spelling or case), or None."""
    w = words(text)
    return _BY_NAME.get(w[0]) if w else None


def engine(text: str | None) -> Engine:
    """The engine an engine string names; a one-line UsageError naming the known ones otherwise."""
    e = find(text)
    if e is None:
        raise UsageError(f"unknown engine '{(text or '').strip()}': use one of {known()}")
    return e


def by_launcher(name: str) -> Engine | None:
    """The engine whose embedded launcher is ``name``."""
    return next((e for e in ENGINES if e.launcher == name), None)


def named_backend(text: str) -> str | None:
    """The GPU backend named after the engine's name ("llama.cpp vulkan": vulkan), for engines whose backend keys
    name one; None where none is named."""
    e, w = engine(text), words(text)
    return w[1] if e.key_rule == "named" and len(w) > 1 else None


def backend_key(text: str, default_backend: str) -> str:
    """The calibration backend of an engine string on a box whose default GPU backend is ``default_backend``:
    vllm-cuda, vllm-rocm, sglang-cuda, llamacpp-vulkan, llama-cpp-python-cuda, transformers, ..."""
    return engine(text).backend_key(named_backend(text), default_backend)


@dataclass(frozen=True, slots=True)
class Backend:
    """What a calibration backend key stands for."""

    key: str
    engine: Engine
    gpu: str | None  # the GPU backend (cuda, vulkan, rocm, ...); None for a plain key


def backend(key: str) -> Backend | None:
    """The engine and GPU backend of a calibration backend key; None for a key no engine makes (a family's name,
    or a hand-written one)."""
    hit = _BY_KEY.get(key)
    return Backend(key, *hit) if hit else None


def family(key: str) -> str:
    """The calibration family of a backend key: its engine's family, else the backend alone."""
    b = backend(key)
    return b.engine.family if b is not None and b.engine.family else key


def _version_number(v: str) -> tuple[int, ...] | None:
    """A version as numbers: llama.cpp's build "b6918" (or "6918") as (6918,), "0.10.1" as (0, 10, 1)."""
    v = v.strip().lower().removeprefix("v")
    m = re.fullmatch(r"b?(\d+)", v) or re.fullmatch(r"(\d+(?:\.\d+)*)(?:[.+-].*)?", v)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def _months(date: str) -> int:
    """A "YYYY-MM" month as a count of months."""
    return int(date[:4]) * 12 + int(date[5:7]) - 1


def _ordinal(n: tuple[int, ...]) -> float:
    """A version as one number that grows by one per release step: llama.cpp's build number, a release's minor
    (major.minor as major*100 + minor)."""
    return float(n[0]) if len(n) == 1 else n[0] * 100.0 + n[1]


def version_date(e: Engine, version: str) -> str | None:
    """The month ("YYYY-MM") an engine's version was released: that of the newest release of known date at or
    before it; past the last one, extrapolated at the pace of the known releases (the first to the last: about
    310 llama.cpp builds a month), so a version far beyond them is dated far ahead and its band widens for every
    year it reaches, rather than being taken for the last known release. None when the version cannot be read
    or is older than every known release, or of a major version newer than the last known."""
    n = _version_number(version)
    if n is None:
        return None
    known = [(num, d) for v, d in e.releases if (num := _version_number(v)) is not None]
    before = [(num, d) for num, d in known if num <= n]
    if not before:
        return None
    (first, d0), (last, d1) = known[0], known[-1]
    if n <= last or len(known) < 2 or _ordinal(last) <= _ordinal(first):
        return before[-1][1]
    if len(n) != len(last) or len(n) > 1 and n[0] != last[0]:
        # a new major version: the minor releases' pace says nothing of when it came; a lone number where the
        # engine numbers major.minor (vLLM "1999") is no version of it
        return None
    pace = (_ordinal(last) - _ordinal(first)) / max(1, _months(d1) - _months(d0))  # steps a month
    m = _months(d1) + round((_ordinal(n) - _ordinal(last)) / pace)
    return f"{m // 12:04d}-{m % 12 + 1:02d}"


def era(text: str | None, version: str) -> str:
    """The year whose builds a stated version or date stands for: "2025", "2025-06", or a version the engine's
    known releases date ("b6918", "0.21"); a one-line UsageError otherwise."""
    return build_date(text, version)[:4]


#: How many years past this one a build may be dated. Past the last known release a build's date is the releases'
#: pace, and each year beyond the fitted rows widens the band (predict/bands.py); a build decades ahead (a typo:
#: b99999999, 2099) is no build anyone runs, and its band read as billions of times the estimate.
HORIZON_YEARS = 5


_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def month_text(month: str) -> str:
    """A build month in words: "2025-11" reads "November 2025" (a bare year as it is)."""
    year, _, m = month.partition("-")
    return f"{_MONTHS[int(m) - 1]} {year}" if m else year


def build_date(text: str | None, version: str) -> str:
    """The date ("YYYY-MM", or "YYYY" where only a year is stated) of the build a version or date stands for, as
    ``era`` reads it; a one-line UsageError when it cannot, or when it is more than ``HORIZON_YEARS`` ahead."""
    v = version.strip()
    if re.fullmatch(r"20\d\d(-\d\d)?", v):
        d = v
    else:
        e = engine(text)
        got = version_date(e, v)
        if got is None:
            known = " to ".join(f"{ver} ({date})" for ver, date in e.releases[:1] + e.releases[-1:])
            raise UsageError(f"cannot date {e.name} version '{v}': give the year of the build (e.g. --engine-version "
                             "2025)" + (f", or a version it can date ({known}, and later ones of the same major "
                                        "version at their pace)" if known else ""))
        d = got
    latest = datetime.now(timezone.utc).year + HORIZON_YEARS
    if int(d[:4]) > latest:
        dated = " is" if d == v else f" dates to {d}, which is"
        raise UsageError(f"--engine-version {v}{dated} more than {HORIZON_YEARS} years ahead: give a build up to "
                         f"{latest}")
    return d


__all__ = ["ENGINES", "GGML_BACKENDS", "LAUNCHERS", "VENDOR_BACKENDS", "Backend", "Engine", "backend", "backend_key",
           "build_date", "by_launcher", "engine", "era", "family", "find", "known", "named_backend", "version_date",
           "words"]
