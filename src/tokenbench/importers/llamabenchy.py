"""llama-benchy's results (``--format json`` or ``csv`` with ``--save-result``): llama-bench's tests run over an
OpenAI-compatible endpoint, at depths and concurrencies. One run of depth levels: each test's prompt rate (pp) and
generation rate (tg) at its depth and concurrency, as tokenbench's ``depth`` stores them.

llama-benchy's figures and tokenbench's differ (the run says so in ``definitions``): its pp t/s takes the
endpoint's measured latency off the time to the first response; at concurrency above 1 its t/s is the total over
the batch (t/s (total)), its per-request rate kept apart. Its ``ctx_pp``/``ctx_tg`` tests (prefix caching on)
prefill the context itself: a pp of the depth's length from an empty cache, and the tg after it.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

from ..distribution import Distribution
from ..client_report import ClientReport
from ..levels import DepthLevel, LevelSummary
from ..results import Manifest
from .fields import FieldError, Imported, load_json, need, number

#: A test as llama-benchy names it: pp2048, tg32 @ d4096, ctx_pp @ d4096 (c2)
TEST = re.compile(r"^(ctx_pp|ctx_tg|pp|tg)(\d*)(?: @ d(\d+))?(?: \(c(\d+)\))?$")
CSV_HEAD = "model,test_name,t_s_mean"

DEFINITIONS = {
    "pp_tps": "llama-benchy's pp t/s: prompt tokens over the time to the first response less the endpoint's "
              "measured latency (its est_ppt); at concurrency above 1 the batch's prompt tokens over the span "
              "to its last first token (t/s (total))",
    "tg_tps": "llama-benchy's tg t/s: tokens after the first over the span from the first token to the last; at "
              "concurrency above 1 the batch's total",
    "client.pp_ms": "llama-benchy's e2e_ttft: the request sent to its first token",
}


def detect(path: Path, text: str) -> bool:
    t = text.lstrip()
    if t.startswith("{"):
        return '"benchmarks"' in t and '"latency_mode"' in t and '"pp_throughput"' in t
    return t.startswith(CSV_HEAD)


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    if text.lstrip().startswith("{"):
        d = load_json(path, text)
        levels = _json_levels(d, path)
        meta = d
    else:
        levels, meta = _csv_levels(path, text), {}
    if not levels:
        raise FieldError(path, "benchmarks", "no test with a rate")
    model = meta.get("model") or _csv_model(text)
    manifest = Manifest.from_dict({  # the file's values, typed where they have the type
        "model": model, "engine": None, "started": meta.get("timestamp"), "tool": "llama-benchy",
        "tool_version": meta.get("version"), "latency_mode": meta.get("latency_mode"),
        "latency_ms": meta.get("latency_ms"), "prefix_caching": meta.get("prefix_caching_enabled"),
        "definitions": DEFINITIONS, "workload": {},
    })
    return [Imported(label or path.stem, "depth", manifest, levels)]


def _metric(b: dict[str, Any], key: str, path: Path, where: str) -> tuple[float, float, list[float]] | None:
    """A llama-benchy metric (mean, std, values), checked; None where the test has none."""
    m = b.get(key)
    if m is None:
        return None
    w = f"{where}.{key}"
    values = need(m, "values", path, w, kind=list)
    return (number(need(m, "mean", path, w), path, f"{w}.mean"), number(need(m, "std", path, w), path, f"{w}.std"),
            [number(v, path, f"{w}.values[{i}]") for i, v in enumerate(values)])


def _json_levels(d: Any, path: Path) -> list[LevelSummary]:
    out: list[LevelSummary] = []
    for i, b in enumerate(need(d, "benchmarks", path, "", kind=list)):
        where = f"benchmarks[{i}]"
        c, depth, pp, tg = (int(number(need(b, k, path, where), path, f"{where}.{k}"))
                            for k in ("concurrency", "context_size", "prompt_size", "response_size"))
        ctx = need(b, "is_context_prefill_phase", path, where, kind=bool)
        pp_m, tg_m = _metric(b, "pp_throughput", path, where), _metric(b, "tg_throughput", path, where)
        ttft = _metric(b, "e2e_ttft", path, where)
        if pp_m is not None:
            lv = _level(f"pp{depth if ctx else pp}", 0 if ctx else depth, c, "pp", pp_m)
            if ttft is not None:
                lv.client.put(pp_ms=[round(v, 2) for v in ttft[2]])
            out.append(lv)
        if tg_m is not None:
            out.append(_level(f"tg{tg}", depth, c, "tg", tg_m))
    return out


def _level(test: str, depth: int, c: int, kind: str, m: tuple[float, float, list[float]]) -> DepthLevel:
    mean, sd, values = m
    lv = DepthLevel(test=test, depth=depth, concurrency=c, completed=len(values))
    setattr(lv, f"{kind}_tps", mean)
    setattr(lv, f"{kind}_tps_sd", sd)
    setattr(lv, f"{kind}_tps_dist", Distribution.of(values) if values else None)
    lv.client = ClientReport.written(**{f"{kind}_tps_reps": [round(v, 2) for v in values]})
    return lv


def _csv_model(text: str) -> str | None:
    if not text.lstrip().startswith(CSV_HEAD):
        return None
    rows = list(csv.DictReader(io.StringIO(text.lstrip())))
    return rows[0].get("model") if rows else None


def split_test(name: str, path: Path, where: str, tg_sizes: set[int]) -> tuple[str, int, int]:
    """A test name as llama-benchy (and llama-bench) write it: (test, depth, concurrency)."""
    m = TEST.match(name.strip())
    if m is None:
        raise FieldError(path, where, f"{name.strip()[:60]!r} is not a test llama-benchy names (pp512, tg128 @ d4096, "
                                      "ctx_pp @ d4096 (c2))")
    kind, n, depth, c = m.group(1), m.group(2), int(m.group(3) or 0), int(m.group(4) or 1)
    if kind == "ctx_pp":
        return f"pp{depth}", 0, c
    if kind == "ctx_tg":
        if len(tg_sizes) != 1:
            raise FieldError(path, where, "a ctx_tg test whose length the file's tg tests do not say")
        return f"tg{next(iter(tg_sizes))}", depth, c
    if not n:
        raise FieldError(path, where, f"{name.strip()[:60]!r} has no length")
    return f"{kind}{n}", depth, c


def _csv_levels(path: Path, text: str) -> list[LevelSummary]:
    rows = list(csv.DictReader(io.StringIO(text.lstrip())))
    tg_sizes = {int(m.group(2)) for r in rows if (m := TEST.match((r.get("test_name") or "").strip()))
                and m.group(1) == "tg" and m.group(2)}
    out: list[LevelSummary] = []
    for n, r in enumerate(rows, start=2):
        where = f"line {n}:"
        test, depth, c = split_test(r.get("test_name") or "", path, f"{where} test_name", tg_sizes)
        kind = test[:2]
        mean = r.get("t_s_mean")
        if mean in (None, ""):
            raise FieldError(path, f"{where} t_s_mean", "missing")
        sd = r.get("t_s_std")
        lv = DepthLevel(test=test, depth=depth, concurrency=c)
        setattr(lv, f"{kind}_tps", number(mean, path, f"{where} t_s_mean"))
        setattr(lv, f"{kind}_tps_sd", number(sd, path, f"{where} t_s_std") if sd not in (None, "") else None)
        out.append(lv)
    return out
