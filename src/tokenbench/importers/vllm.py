"""``vllm bench serve --save-result`` JSON: one level per file (one concurrency or rate). With ``--save-detailed``
the file keeps every request (``start_times``, ``ttfts``, ``itls``, ``latencies``, ``input_lens``,
``output_lens``, ``errors``): the level is then made from them by tokenbench's definitions and the requests are
stored beside it, as a measured run's are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..distribution import Distribution
from ..levels import ServingLevel
from ..records import RequestRecord
from ..results import Manifest
from .fields import FieldError, Imported, load_json, need, number
from .perrequest import Timed, chunk_times, level, ns, record

#: The per-request lists --save-detailed keeps, one entry a request in the order sent.
DETAILED = ("start_times", "ttfts", "itls", "latencies", "input_lens", "output_lens", "errors")

DEFINITIONS = {
    "output_throughput_tps": "output tokens over the span from the first request sent to the last one's end "
                             "(vllm bench serve divides by its own benchmark duration, kept as tool_duration_s)",
}


def detect(path: Path, text: str) -> bool:
    """vllm bench serve's result: its TTFT statistics beside one of its run figures at least (the others may be
    missing, which the import then names)."""
    head = text.lstrip()[:1]
    figures = any(f'"{k}"' in text for k in ("output_throughput", "total_output_tokens", "request_throughput"))
    return head == "{" and figures and ('"median_ttft_ms"' in text or '"mean_ttft_ms"' in text)


def _dist(d: dict, name: str, n: int) -> Distribution:  # type: ignore[type-arg]
    return Distribution(
        n=n, mean=d.get(f"mean_{name}_ms"), std=d.get(f"std_{name}_ms"), p50=d.get(f"median_{name}_ms"),
        p90=d.get(f"p90_{name}_ms"), p95=d.get(f"p95_{name}_ms"), p99=d.get(f"p99_{name}_ms"),
    )


def _load(d: dict[str, Any], path: Path) -> tuple[int | None, float | None]:
    """The level's load: its --max-concurrency, else its --request-rate ("inf", its default: every request sent
    at once, so all of --num-prompts in flight, as a closed loop of that many: it was shown as a trace)."""
    conc = d.get("max_concurrency")
    conc = int(number(conc, path, "max_concurrency")) if conc is not None else None
    rate = d.get("request_rate")
    rate = None if rate in (None, "inf") or conc else number(rate, path, "request_rate")
    if conc is None and rate is None and isinstance(d.get("num_prompts"), int) and d["num_prompts"] > 0:
        conc = d["num_prompts"]
    return conc or None, rate


def _requests(d: dict[str, Any], path: Path) -> list[RequestRecord]:
    """Every request --save-detailed kept: sent at its start time (time.perf_counter(), s), first token after its
    TTFT, each later chunk after its gap (``itls``), the last byte after its latency."""
    lists = [need(d, k, path, "", kind=list) for k in DETAILED]
    n = len(lists[0])
    for k, v in zip(DETAILED, lists):
        if len(v) != n:
            raise FieldError(path, k, f"{len(v)} entries where start_times has {n}")
    out = []
    for i, (start, ttft, itls, lat, n_in, n_out, err) in enumerate(zip(*lists)):
        where = f"request {i}"
        t = Timed(ns(start, path, f"start_times[{i}]", 1e9), None)
        if err or not ttft:  # a failure: its reason, or an HTTP status with none (no TTFT either)
            t.error_kind, t.error = "error", str(err or "failed")[:200]
            out.append(record(i, t))
            continue
        t.first_token_ns = t.sent_ns + ns(ttft, path, f"ttfts[{i}]", 1e9)
        t.end_ns = t.sent_ns + ns(lat, path, f"latencies[{i}]", 1e9)
        t.chunk_ns = chunk_times(t.first_token_ns, itls, path, f"itls[{i}]", 1e9)
        t.input_tokens = int(number(n_in, path, f"input_lens[{i}]"))
        t.output_tokens, t.output_source = int(number(n_out, path, f"output_lens[{i}]")), "usage"
        if t.end_ns < t.first_token_ns:
            raise FieldError(path, where, "it ended before its first token")
        out.append(record(i, t))
    return out


def _summary(d: dict[str, Any], path: Path) -> ServingLevel:
    completed = int(need(d, "completed", path, ""))
    duration = float(need(d, "duration", path, ""))
    if duration <= 0:
        raise FieldError(path, "duration", f"{duration!r} s: a run takes time")
    out_tps = float(need(d, "output_throughput", path, ""))
    if completed == 0 and out_tps > 0:
        raise FieldError(path, "completed", f"0 requests finished, yet output_throughput {out_tps:g} tok/s")
    if d.get("total_output_tokens") is not None:  # vllm bench serve's own definition: the one over the other
        implied = number(d["total_output_tokens"], path, "total_output_tokens") / duration
        if abs(implied - out_tps) > 0.01 * out_tps + 0.01:
            raise FieldError(path, "output_throughput", f"{out_tps:g} tok/s, where total_output_tokens over "
                             f"duration is {implied:.4g}: the file contradicts itself")
    need(d, "median_ttft_ms", path, "")
    conc, rate = _load(d, path)
    return ServingLevel(
        concurrency=conc, rate=rate, completed=completed,
        failed=int(d.get("failed", 0) or 0), duration_s=duration, output_throughput_tps=out_tps,
        request_throughput_rps=float(d.get("request_throughput") or 0.0),
        input_tokens_mean=(d["total_input_tokens"] / completed) if completed and "total_input_tokens" in d else None,
        output_tokens_mean=(d["total_output_tokens"] / completed) if completed and "total_output_tokens" in d else None,
        output_tokens_source="usage", ttft_ms=_dist(d, "ttft", completed), tpot_ms=_dist(d, "tpot", completed),
        itl_ms=_dist(d, "itl", completed), e2e_ms=_dist(d, "e2el", completed), test="serve",
    )


def _iso(date: object) -> object:
    """vllm bench serve's date (20261201-185619) as ISO-8601; any other value as it is."""
    m = re.fullmatch(r"(\d{4})(\d{2})(\d{2})-(\d{2})(\d{2})(\d{2})", date) if isinstance(date, str) else None
    return f"{m[1]}-{m[2]}-{m[3]}T{m[4]}:{m[5]}:{m[6]}" if m else date


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    d = load_json(path, text)
    s = _summary(d, path)  # checked whole, even where the requests make the level
    detailed = all(k in d for k in DETAILED)
    records = _requests(d, path) if detailed else []
    if detailed:
        s = level(records, s.concurrency, s.rate, path, "the requests")
    manifest = Manifest.from_dict({  # the file's values, typed where they have the type
        "model": d.get("model_id"), "engine": d.get("backend") or d.get("endpoint_type") or "vllm",
        "engine_version": None, "endpoint": d.get("base_url"), "started": _iso(d.get("date")),
        "workload": {"input_len": round(s.input_tokens_mean) if s.input_tokens_mean else None,
                     "output_len": round(s.output_tokens_mean) if s.output_tokens_mean else None,
                     "num_prompts": d.get("num_prompts")},
        "tool": "vllm bench serve",
        **({"definitions": DEFINITIONS, "tool_duration_s": d.get("duration")} if detailed else {}),
    })
    return [Imported(label or str(d.get("label") or path.stem), "sweep", manifest, [s],
                     [records] if detailed else [])]
