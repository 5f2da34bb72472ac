"""``llama-bench -o json | jsonl | csv``: one level per test (pp / tg at a depth)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..metrics import LevelSummary
from . import FieldError, Imported, load_json, need

KEYS = ("n_prompt", "n_gen", "avg_ts")


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
                    out.append(json.loads(line))
                except ValueError as e:
                    raise UsageError(f"{path}: line {n} is not valid JSON ({e}); nothing was imported") from None
        return out
    return list(csv.DictReader(io.StringIO(t)))


def _num(rec: dict[str, Any], key: str, path: Path, i: int) -> float:
    v = need(rec, key, path, f"test[{i}]", kind=None)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise FieldError(path, f"test[{i}].{key}", f"expected a number, got {v!r}") from None


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    recs = _records(path, text)
    levels = []
    for i, r in enumerate(recs):
        n_prompt, n_gen, ts = (_num(r, k, path, i) for k in KEYS)
        depth = int(float(r.get("n_depth") or 0))
        sd = float(r.get("stddev_ts") or 0.0)
        if n_prompt and not n_gen:
            test, kw = f"pp{int(n_prompt)}", {"pp_tps": ts, "pp_tps_sd": sd}
        elif n_gen and not n_prompt:
            test, kw = f"tg{int(n_gen)}", {"tg_tps": ts, "tg_tps_sd": sd}
        else:
            test, kw = f"pp{int(n_prompt)}+tg{int(n_gen)}", {"tg_tps": ts}
        levels.append(LevelSummary.empty(concurrency=1, test=test, depth=depth, **kw))
    r0 = recs[0] if recs else {}
    backend = str(r0.get("backends") or "").lower()
    manifest = {
        "model": r0.get("model_type") or r0.get("model_filename"), "model_file": r0.get("model_filename"),
        "engine": "llama.cpp" + (f" {backend.split(',')[0]}" if backend else ""),
        "engine_version": r0.get("build_commit"), "gpu": r0.get("gpu_info"), "cpu": r0.get("cpu_info"),
        "weights": None, "kv": r0.get("type_k"), "n_gpu_layers": r0.get("n_gpu_layers"),
        "flash_attn": r0.get("flash_attn"), "started": r0.get("test_time"), "tool": "llama-bench",
    }
    return [Imported(label or path.stem, "bench", manifest, levels)]
