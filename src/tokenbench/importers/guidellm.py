"""GuideLLM benchmark JSON (``guidellm benchmark --output-path x.json``): one level per benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..distribution import Distribution
from ..levels import LevelSummary, ServingLevel
from ..results import Manifest
from .fields import FieldError, Imported, load_json, need, number


def detect(path: Path, text: str) -> bool:
    return text.lstrip().startswith("{") and '"benchmarks"' in text and '"time_to_first_token_ms"' in text


def _dist(m: dict[str, Any], key: str, path: Path, where: str, scale: float = 1.0) -> Distribution:
    sd = m.get(key)
    if sd is None:
        return Distribution(n=0)
    ok = need(sd, "successful", path, f"{where}.{key}", kind=dict)
    pct = ok.get("percentiles") or {}
    at = f"{where}.{key}.successful"

    def g(v: Any, name: str) -> float | None:
        return None if v is None else number(v, path, f"{at}.{name}") * scale

    n = int(number(ok.get("count") or 0, path, f"{at}.count"))
    return Distribution(n=n, mean=g(ok.get("mean"), "mean"), std=g(ok.get("std_dev"), "std_dev"),
                        min=g(ok.get("min"), "min"), max=g(ok.get("max"), "max"),
                        p50=g(ok.get("median", pct.get("p50")), "median"), p90=g(pct.get("p90"), "p90"),
                        p95=g(pct.get("p95"), "p95"), p99=g(pct.get("p99"), "p99"))


def _strategy(b: dict[str, Any]) -> dict[str, Any]:
    for holder in (b.get("config"), b.get("args"), b.get("scheduler"), b):
        if isinstance(holder, dict) and isinstance(holder.get("strategy"), dict):
            strategy: dict[str, Any] = holder["strategy"]
            return strategy
    return {}


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    d = load_json(path, text)
    benches = need(d, "benchmarks", path, "", kind=list)
    levels: list[LevelSummary] = []
    model = None
    for i, b in enumerate(benches):
        where = f"benchmarks[{i}]"
        m = need(b, "metrics", path, where, kind=dict)
        out = need(m, "output_tokens_per_second", path, f"{where}.metrics", kind=dict)
        out_ok = need(out, "successful", path, f"{where}.metrics.output_tokens_per_second", kind=dict)
        tps = need(out_ok, "mean", path, f"{where}.metrics.output_tokens_per_second.successful")
        st = _strategy(b)
        kind = str(st.get("type_") or st.get("type") or "")
        # synchronous: one at a time; concurrent: its streams; throughput: all at once, to its cap where it has one
        conc = int(st["streams"]) if st.get("streams") else (1 if kind == "synchronous" else None)
        if conc is None and kind == "throughput" and st.get("max_concurrency"):
            conc = int(st["max_concurrency"])
        rate = float(st["rate"]) if st.get("rate") and not conc else None
        totals = m.get("request_totals") or {}
        s = ServingLevel(
            concurrency=conc, rate=rate, completed=int(totals.get("successful") or 0),
            failed=int(totals.get("errored") or 0), output_throughput_tps=float(tps),
            # GuideLLM's inter-token latency is each request's (last token - first) / (tokens - 1): tokenbench's
            # TPOT. Its "time per output token" counts from the request's start (TTFT included), and it keeps no
            # gap between chunks, tokenbench's ITL
            ttft_ms=_dist(m, "time_to_first_token_ms", path, where),
            tpot_ms=_dist(m, "inter_token_latency_ms", path, where),
            e2e_ms=_dist(m, "request_latency", path, where, scale=1000.0), test="serve",
        )
        rps = m.get("requests_per_second", {}).get("successful", {}).get("mean")
        s.request_throughput_rps = float(rps or 0.0)
        pt = (m.get("prompt_token_count") or {}).get("successful", {}).get("mean")
        ot = (m.get("output_token_count") or {}).get("successful", {}).get("mean")
        s.input_tokens_mean, s.output_tokens_mean = pt, ot
        levels.append(s)
        model = model or (b.get("config") or b.get("args") or {}).get("model")
    if not levels:
        raise FieldError(path, "benchmarks", "empty")
    manifest = Manifest.from_dict({"model": model or (d.get("args") or {}).get("model"), "engine": None,
                                   "tool": "guidellm", "workload": {}})
    return [Imported(label or path.stem, "sweep", manifest, levels)]
