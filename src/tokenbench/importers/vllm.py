"""``vllm bench serve --save-result`` JSON: one level per file (one concurrency or rate)."""

from __future__ import annotations

from pathlib import Path

from ..distribution import Distribution
from ..levels import ServingLevel
from ..results import Manifest
from .fields import FieldError, Imported, load_json, need


def detect(path: Path, text: str) -> bool:
    head = text.lstrip()[:1]
    return head == "{" and '"output_throughput"' in text and ('"median_ttft_ms"' in text or '"mean_ttft_ms"' in text)


def _dist(d: dict, name: str, n: int) -> Distribution:  # type: ignore[type-arg]
    return Distribution(
        n=n, mean=d.get(f"mean_{name}_ms"), std=d.get(f"std_{name}_ms"), p50=d.get(f"median_{name}_ms"),
        p90=d.get(f"p90_{name}_ms"), p95=d.get(f"p95_{name}_ms"), p99=d.get(f"p99_{name}_ms"),
    )


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    d = load_json(path, text)
    completed = int(need(d, "completed", path, ""))
    duration = float(need(d, "duration", path, ""))
    if duration <= 0:
        raise FieldError(path, "duration", f"{duration!r} s: a run takes time")
    out_tps = float(need(d, "output_throughput", path, ""))
    need(d, "median_ttft_ms", path, "")
    conc = d.get("max_concurrency")
    rate = d.get("request_rate")
    rate = None if rate in (None, "inf", float("inf")) or conc else float(rate)
    s = ServingLevel(
        concurrency=int(conc) if conc else None, rate=rate, completed=completed,
        failed=int(d.get("failed", 0) or 0), duration_s=duration, output_throughput_tps=out_tps,
        request_throughput_rps=float(d.get("request_throughput") or 0.0),
        input_tokens_mean=(d["total_input_tokens"] / completed) if completed and "total_input_tokens" in d else None,
        output_tokens_mean=(d["total_output_tokens"] / completed) if completed and "total_output_tokens" in d else None,
        output_tokens_source="usage", ttft_ms=_dist(d, "ttft", completed), tpot_ms=_dist(d, "tpot", completed),
        itl_ms=_dist(d, "itl", completed), e2e_ms=_dist(d, "e2el", completed), test="serve",
    )
    manifest = Manifest.from_dict({  # the file's values, typed where they have the type
        "model": d.get("model_id"), "engine": d.get("backend") or d.get("endpoint_type") or "vllm",
        "engine_version": None, "endpoint": d.get("base_url"), "started": d.get("date"),
        "workload": {"input_len": round(s.input_tokens_mean) if s.input_tokens_mean else None,
                     "output_len": round(s.output_tokens_mean) if s.output_tokens_mean else None,
                     "num_prompts": d.get("num_prompts")},
        "tool": "vllm bench serve",
    })
    return [Imported(label or str(d.get("label") or path.stem), "sweep", manifest, [s])]
