"""inference-perf's per-request report (``report.request_lifecycle.per_request: true``:
``per_request_lifecycle_metrics.json``): a list of requests, each with its ``start_time`` and ``end_time``
(time.perf_counter(), s), its token times (``info.response_metrics.chunk_times``, else the per-token
``output_token_times``, else ``computed_metrics``' TTFT and gaps) and its token counts.

The report does not say which load stage a request belongs to: stages are told apart by the pause between them
(inference-perf waits ``load.interval``, 1 s by default, between stages), and each stage's concurrency is the
most requests it had in flight. One level per stage, by tokenbench's definitions. inference-perf's own
``time_per_output_token`` is (last token - first token) / (output tokens - 1); tokenbench's TPOT runs to the
response's end, and is recomputed here from the times.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ..levels import LevelSummary
from ..records import RequestRecord
from ..results import Manifest
from .fields import FieldError, Imported, obj, load_json, need, number
from .perrequest import Timed, chunk_times, level, ns, record

#: A pause with no request in flight at least this long starts a new stage (inference-perf's default interval).
STAGE_GAP_S = 1.0

DEFINITIONS = {
    "tpot_ms": "(response end - first token) / (output tokens - 1), from the request's times; inference-perf's "
               "time_per_output_token stops at the last token",
    "output_tokens_mean": "the server's usage.completion_tokens where the response carried it, else "
                          "inference-perf's count (its tokenizer's)",
    "concurrency": "the most requests a stage had in flight (the report does not name its stages)",
}


def detect(path: Path, text: str) -> bool:
    head = text.lstrip()[:2000]
    return head.startswith("[") and '"start_time"' in head and '"end_time"' in head and (
        '"computed_metrics"' in head or '"response_metrics"' in head or '"info"' in head or '"error"' in head)


def _tokens(info: dict[str, Any], computed: dict[str, Any], path: Path, where: str) -> tuple[int | None, int | None, str]:
    """Input and output tokens, and where the output count came from."""
    rm = obj(info, "response_metrics")
    usage = obj(rm, "server_usage")
    n_in = info.get("input_tokens", computed.get("input_tokens"))
    if usage.get("completion_tokens") is not None:
        n_out, src = usage["completion_tokens"], "usage"
    else:
        n_out, src = rm.get("output_tokens", computed.get("output_tokens")), "tokenizer"
    return (int(number(n_in, path, f"{where}.input_tokens")) if n_in is not None else None,
            int(number(n_out, path, f"{where}.output_tokens")) if n_out is not None else None, src)


def _token_times(t: Timed, info: dict[str, Any], computed: dict[str, Any], path: Path, where: str) -> None:
    rm = obj(info, "response_metrics")
    for key in ("chunk_times", "output_token_times"):
        times = rm.get(key)
        if isinstance(times, list) and times:
            stamps = [ns(v, path, f"{where}.info.response_metrics.{key}[{i}]", 1e9) for i, v in enumerate(times)]
            t.chunk_ns = sorted(set(stamps)) if key == "output_token_times" else stamps
            t.first_token_ns = t.chunk_ns[0]
            return
    ttft = computed.get("time_to_first_token")
    if ttft is not None:
        t.first_token_ns = t.sent_ns + ns(ttft, path, f"{where}.computed_metrics.time_to_first_token", 1e9)
        gaps = [g for g in computed.get("inter_token_latencies") or [] if g]
        t.chunk_ns = chunk_times(t.first_token_ns, gaps, path, f"{where}.computed_metrics.inter_token_latencies",
                                 1e9)


def _timed(i: int, e: Any, path: Path) -> Timed:
    where = f"request {i}"
    t = Timed(ns(need(e, "start_time", path, where), path, f"{where}.start_time", 1e9),
              ns(need(e, "end_time", path, where), path, f"{where}.end_time", 1e9))
    err = e.get("error")
    if err is not None:
        kind = err.get("error_type") if isinstance(err, dict) else None
        t.error_kind = str(kind or "error")[:60]
        t.error = str(err.get("error_msg") if isinstance(err, dict) else err)[:200]
        return t
    info = obj(e, "info")
    computed = obj(e, "computed_metrics")
    if not info and not computed:
        raise FieldError(path, where, "neither info nor computed_metrics: the report was written without them")
    _token_times(t, info, computed, path, where)
    if t.first_token_ns is None:
        raise FieldError(path, where, "no token times (a request that was not streamed)")
    t.input_tokens, t.output_tokens, src = _tokens(info, computed, path, where)
    t.output_source = "usage" if src == "usage" else "tokenizer"
    return t


def _stages(records: list[RequestRecord]) -> list[list[RequestRecord]]:
    """The requests split where none was in flight for STAGE_GAP_S or longer, in the order sent."""
    out: list[list[RequestRecord]] = []
    last_end: int | None = None
    for r in sorted(records, key=lambda r: r.sent_ns):
        if last_end is None or r.sent_ns - last_end >= STAGE_GAP_S * 1e9:
            out.append([])
            last_end = r.end_ns or r.sent_ns
        out[-1].append(r)
        last_end = max(last_end, r.end_ns or r.sent_ns)
    return out


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    d = load_json(path, text)
    if not isinstance(d, list):
        raise FieldError(path, "top level", f"expected a list of requests, got {type(d).__name__}")
    records = [record(i, _timed(i, e, path)) for i, e in enumerate(d)]
    levels: list[LevelSummary] = []
    requests: list[list[RequestRecord]] = []
    for n, stage in enumerate(_stages(records)):
        stage = [replace(r, index=i) for i, r in enumerate(stage)]
        levels.append(level(stage, None, None, path, f"stage {n}"))
        requests.append(stage)
    manifest = Manifest.from_dict({"tool": "inference-perf", "definitions": DEFINITIONS, "workload": {}})
    return [Imported(label or (path.parent.name if path.name.startswith("per_request") else path.stem), "sweep",
                     manifest, levels, requests)]
