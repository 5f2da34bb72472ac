"""``llama-bench -o json | jsonl | csv``: one level per test (pp / tg at a depth)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..levels import DepthLevel, LevelSummary
from ..results import Manifest
from ..wire import WireError, loads
from .fields import FieldError, Imported, load_json, need, number

KEYS = ("n_prompt", "n_gen", "avg_ts")


def _build(r0: dict[str, object]) -> str | None:
    """The build as llama.cpp names it and --engine-version dates it: b6123 (llama-bench's build_number; its
    build_commit is a hash, kept beside it). A build made outside git says 0: no build."""
    n = r0.get("build_number")  # a number in JSON, its text in CSV
    n = int(n) if isinstance(n, str) and n.strip().isdigit() else n
    return f"b{n}" if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None


def detect(path: Path, text: str) -> bool:
    t = text.lstrip()
    if t.startswith("[") or t.startswith("{"):
        return '"avg_ts"' in t and '"n_prompt"' in t
    first = t.splitlines()[0] if t else ""
    return "avg_ts" in first and "n_prompt" in first


def _records(path: Path, text: str) -> list[dict[str, Any]]:
    t = text.lstrip()
    if t.startswith("["):
        data = load_json(path, t)
        if not isinstance(data, list):
            raise FieldError(path, "top level", "expected a list of tests")
        return data
    if t.startswith("{"):
        out = []
        for n, line in enumerate(t.splitlines(), 1):
            if line.strip():
                try:
                    out.append(loads(line, f"line {n}"))
                except WireError as e:
                    raise UsageError(f"{path}: {e}; nothing was imported") from None
        return out
    return list(csv.DictReader(io.StringIO(t)))


def _num(rec: dict[str, Any], key: str, path: Path, i: int, default: float | None = None) -> float:
    if default is not None and not (isinstance(rec, dict) and rec.get(key) not in (None, "")):
        return default
    return number(need(rec, key, path, f"test[{i}]", kind=None), path, f"test[{i}].{key}")


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    recs = _records(path, text)
    levels: list[LevelSummary] = []
    for i, r in enumerate(recs):
        n_prompt, n_gen, ts = (_num(r, k, path, i) for k in KEYS)
        depth = int(_num(r, "n_depth", path, i, default=0))
        sd: float | None = _num(r, "stddev_ts", path, i, default=0.0)
        if isinstance(r.get("samples_ts"), list) and len(r["samples_ts"]) == 1:
            sd = None  # one repetition has no spread: llama-bench writes 0
        if n_prompt and not n_gen:
            lv = DepthLevel(test=f"pp{int(n_prompt)}", depth=depth, pp_tps=ts, pp_tps_sd=sd)
        elif n_gen and not n_prompt:
            lv = DepthLevel(test=f"tg{int(n_gen)}", depth=depth, tg_tps=ts, tg_tps_sd=sd)
        else:
            lv = DepthLevel(test=f"pp{int(n_prompt)}+tg{int(n_gen)}", depth=depth, tg_tps=ts)
        levels.append(lv)
    r0 = recs[0] if recs else {}
    backend = str(r0.get("backends") or "").lower()
    manifest = Manifest.from_dict({  # the file's values, typed where they have the type
        "model": r0.get("model_type") or r0.get("model_filename"), "model_file": r0.get("model_filename"),
        "engine": "llama.cpp" + (f" {backend.split(',')[0]}" if backend else ""),
        "engine_version": _build(r0), "build_commit": r0.get("build_commit"),
        "gpu": r0.get("gpu_info"), "cpu": r0.get("cpu_info"),
        "weights": None, "kv": r0.get("type_k"), "n_gpu_layers": r0.get("n_gpu_layers"),
        "flash_attn": r0.get("flash_attn"), "started": r0.get("test_time"), "tool": "llama-bench",
        "threads": r0.get("n_threads"), "n_batch": r0.get("n_batch"), "n_ubatch": r0.get("n_ubatch"),
        "type_k": r0.get("type_k"), "type_v": r0.get("type_v"),
    })
    return [Imported(label or path.stem, "bench", manifest, levels)]
