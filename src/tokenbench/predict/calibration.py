"""Per-backend efficiency factors, fitted on published measurements by least squares.

    tokenbench calibrate ../shared/reference/published.csv --out src/tokenbench/data/efficiency.toml

Decode rows fit  t = a_w·t_weights + a_kv·t_kv + b  (t = 1/decode rate; t_* the times at nominal bandwidth),
prefill rows fit t = a_c·t_matmul + a_att·t_attention + a_w·t_weights + b (t = tokens/prefill rate; a time to
first token at concurrency 1 is a prefill too). Attention gets its own slope: flash-attention kernels at
depth run far from the matmul peak. Coefficients are kept
physical (a ≥ 1: no backend beats its peak; b ≥ 0); with too few rows a backend keeps only its slope.
Rows of HOLDOUT_MODELS are never fitted, so their errors measure prediction on unseen models; rows that need
hybrid offload are not fitted either (they test the offload model, not the backend).
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from .published import Row
from .roofline import Efficiency

#: Models whose rows calibration never sees (chosen to span dense, sliding-window and MoE shapes).
#: Fixed per-token decode cost (launches, sampling, scheduling) for a backend with too few rows to fit one:
#: the llama.cpp CUDA and Vulkan backends fit 2.5 to 3.5 ms on the published rows; roofline.md: 0.5–3 ms.
DEFAULT_DECODE_B = 0.0025
HOLDOUT_MODELS = frozenset({"gemma-3-12b-it", "phi-4", "qwen3-30b-a3b-2507", "mistral-small-3.2-24b"})


def backend_key(engine: str, default_backend: str) -> str:
    e = engine.lower().strip()
    if e.startswith(("vllm", "sglang")):
        return "vllm-" + ("rocm" if default_backend == "rocm" else "cuda")
    if e.startswith("llama.cpp") or e.startswith("llamacpp"):
        parts = e.replace("llamacpp", "llama.cpp").split()
        return "llamacpp-" + (parts[1] if len(parts) > 1 else default_backend)
    if e.startswith("transformers"):
        return "transformers"
    return e.split()[0] if e else "unknown"


def engine_kind(engine: str) -> str:
    return "sequential" if engine.lower().startswith(("llama.cpp", "llamacpp", "ollama")) else "batching"


def _lstsq(xs: list[list[float]], ys: list[float]) -> list[float] | None:
    """Least squares by the normal equations (k ≤ 3 unknowns); None when singular."""
    k = len(xs[0])
    a = [[sum(x[i] * x[j] for x in xs) for j in range(k)] for i in range(k)]
    b = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(k)]
    m = [row[:] + [bv] for row, bv in zip(a, b)]
    for c in range(k):
        p = max(range(c, k), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-30:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(k):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [u - f * v for u, v in zip(m[r], m[c])]
    return [m[i][k] / m[i][i] for i in range(k)]


def fit_linear(features: list[list[float]], times: list[float], min_slope: float = 1.0,
               default_b: float = 0.001) -> tuple[list[float], float]:
    """Fit times ≈ Σ a_i·f_i + b with every a_i ≥ min_slope (no backend beats its peak) and b ≥ 0.

    A small active-set method: solve freely, pin any coefficient that breaks its bound at the bound, and
    solve again for the others. With fewer rows than unknowns, the slopes are tied to one value."""
    k = len(features[0])
    if k > 1 and len(times) < k + 2:
        features = [[sum(f)] for f in features]
        if len(times) < 2:
            x = features[0][0]
            return [max(min_slope, (times[0] - default_b) / x if x else min_slope)] * k, default_b
        slopes, b = fit_linear(features, times, min_slope, default_b)
        return slopes * k, b
    pinned: dict[int, float] = {}  # index (k = intercept) -> fixed value
    for _ in range(k + 2):
        free = [i for i in range(k + 1) if i not in pinned]
        xs = [[(f[i] if i < k else 1.0) for i in free] for f in features]
        ys = [t - sum(v * (f[i] if i < k else 1.0) for i, v in pinned.items()) for f, t in zip(features, times)]
        sol = _lstsq(xs, ys) if free else []
        if sol is None:  # collinear features: the data cannot tell the slopes apart
            break
        coef = dict(zip(free, sol)) | pinned
        bad = [i for i in free if coef[i] < (min_slope if i < k else 0.0)]
        if not bad:
            return [coef[i] for i in range(k)], coef[k]
        worst = min(bad, key=lambda i: coef[i])
        pinned[worst] = min_slope if worst < k else 0.0
    if k > 1:  # tie the slopes together and fit that one
        slopes, b = fit_linear([[sum(f)] for f in features], times, min_slope, default_b)
        return slopes * k, b
    return [min_slope], default_b


@dataclass(slots=True)
class Calibration:
    backends: dict[str, Efficiency]
    usual_ratio: dict[str, dict[str, float]]  # backend -> group -> median measured/ceiling of training rows
    holdout_models: frozenset[str] = HOLDOUT_MODELS
    command: str = ""

    def efficiency(self, backend: str) -> Efficiency:
        if backend in self.backends:
            return self.backends[backend]
        family = backend.split("-")[0]
        for k, v in self.backends.items():
            if k.startswith(family):
                return Efficiency(**{f.name: getattr(v, f.name) for f in fields(Efficiency) if f.name != "source"},
                                  source=f"{k} (nearest calibrated backend)")
        return Efficiency()

    def to_toml(self) -> str:
        lines = [
            "# Per-backend efficiency factors fitted on published measurements. Do not edit by hand: re-run",
            f"#   {self.command}",
            f"# Held out (never fitted): {', '.join(sorted(self.holdout_models))}.",
            "# decode:  t = decode_a_w * t_weights + decode_a_kv * t_kv + decode_b   (seconds per token)",
            "# prefill: t = prefill_a_c * t_matmul + prefill_a_att * t_attention + prefill_a_w * t_weights + prefill_b",
            "# usual_*: median measured/ceiling of the training rows, for the software-bottleneck flag.",
            "",
        ]
        for name, e in sorted(self.backends.items()):
            lines.append(f"[{name}]")
            for f in fields(Efficiency):
                v = getattr(e, f.name)
                lines.append(f'{f.name} = "{v}"' if isinstance(v, str) else f"{f.name} = {v:.6g}")
            for g, r in sorted(self.usual_ratio.get(name, {}).items()):
                lines.append(f"usual_{g} = {r:.4g}")
            lines.append("")
        return "\n".join(lines)

    @classmethod
    def from_toml(cls, text: str) -> Calibration:
        data: dict[str, Any] = tomllib.loads(text)
        backends, usual = {}, {}
        names = {f.name for f in fields(Efficiency)}
        for name, t in data.items():
            backends[name] = Efficiency(**{k: v for k, v in t.items() if k in names})
            usual[name] = {k[len("usual_"):]: v for k, v in t.items() if k.startswith("usual_")}
        return cls(backends, usual)

    @classmethod
    def packaged(cls) -> Calibration:
        return cls.from_toml(resources.files("tokenbench").joinpath("data/efficiency.toml").read_text())


def calibrate(rows: list[Row], work: Any, command: str) -> Calibration:
    """``work(row)`` gives (backend, group, features, measured_time, ceiling_time) or None (not fittable)."""
    by: dict[tuple[str, str], list[tuple[list[float], float, float]]] = {}
    for r in rows:
        if r.model in HOLDOUT_MODELS:
            continue
        w = work(r)
        if w is None:
            continue
        backend, group, feats, t_meas, t_ceil = w
        by.setdefault((backend, group), []).append((feats, t_meas, t_ceil))
    backends: dict[str, dict[str, Any]] = {}
    usual: dict[str, dict[str, float]] = {}
    for (backend, group), items in sorted(by.items()):
        feats = [f for f, _, _ in items]
        times = [t for _, t, _ in items]
        d = backends.setdefault(backend, {"rows": 0})
        d["rows"] += len(items)
        usual.setdefault(backend, {})[group] = statistics.median(c / t for _, t, c in items)
        if group == "decode":
            (a_w, a_kv), b = fit_linear(feats, times, default_b=DEFAULT_DECODE_B)
            d.update(decode_a_w=a_w, decode_a_kv=a_kv, decode_b=b)
        elif group == "prefill":
            (a_c, a_att, a_w), b = fit_linear(feats, times, default_b=0.005)
            d.update(prefill_a_c=a_c, prefill_a_att=a_att, prefill_a_w=a_w, prefill_b=b)
    effs = {k: Efficiency(**v, source=f"fitted on {v['rows']} published rows") for k, v in backends.items()}
    return Calibration(effs, usual, HOLDOUT_MODELS, command)


def write(cal: Calibration, out: Path) -> None:
    out.write_text(cal.to_toml())
