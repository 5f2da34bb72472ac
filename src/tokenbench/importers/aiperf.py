"""AIPerf's exports (``aiperf profile --artifact-dir DIR``): the summary ``profile_export_aiperf.json`` (one level)
and the per-request ``profile_export.jsonl`` (``--export-level records``: one record a request, one level from
them by tokenbench's definitions, the requests stored beside it).

AIPerf's names and tokenbench's differ: its ``inter_token_latency`` is (request latency - TTFT) / (output tokens -
1) per request, tokenbench's TPOT; its ``inter_chunk_latency`` (the gaps between chunks) is tokenbench's ITL. The
stored run says so (``definitions``), and keeps AIPerf's version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..distribution import Distribution
from ..levels import ServingLevel
from ..records import RequestRecord
from ..results import Manifest
from .fields import FieldError, Imported, obj, json_lines, load_json, need, number, text_field
from .perrequest import Timed, chunk_times, level, ns, record, stamp

SUMMARY = "profile_export_aiperf.json"
#: nanoseconds a unit, for the times AIPerf writes
UNITS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "sec": 1e9, "s": 1e9}

DEFINITIONS = {
    "ttft_ms": "AIPerf's time_to_first_token: the request sent to the first chunk with content",
    "tpot_ms": "AIPerf's inter_token_latency: (request latency - TTFT) / (output tokens - 1) per request, which "
               "tokenbench calls TPOT",
    "itl_ms": "AIPerf's inter_chunk_latency: the gaps between chunks, which tokenbench calls ITL",
    "e2e_ms": "AIPerf's request_latency",
}


def detect(path: Path, text: str) -> bool:
    head = text.lstrip()[:400]
    if head.startswith("{\"metadata\"") or head.startswith("{ \"metadata\""):
        return '"request_start_ns"' in head or '"benchmark_phase"' in head
    return head.startswith("{") and '"aiperf_version"' in text and '"time_to_first_token"' in text


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    if text.lstrip().startswith("{\"metadata\"") or text.lstrip().startswith("{ \"metadata\""):
        return [_records_run(path, text, label)]
    d = load_json(path, text)
    return [Imported(label or _name(path), "sweep", _manifest(d, path), [_summary_level(d, path)])]


def _name(path: Path) -> str:
    """A label: the artifact directory's name, where the file keeps AIPerf's own name."""
    return path.parent.name if path.name in (SUMMARY, "profile_export.jsonl") and path.parent.name else path.stem


def _phase(d: dict[str, Any]) -> dict[str, Any]:
    """The profiling phase of the run's configuration: its concurrency or request rate."""
    cfg = d.get("input_config")
    phases = cfg.get("phases") if isinstance(cfg, dict) else None
    for ph in phases if isinstance(phases, list) else []:
        if isinstance(ph, dict) and ph.get("kind", ph.get("name")) == "profiling":
            return ph
    return {}


def _load(d: dict[str, Any], path: Path) -> tuple[int | None, float | None]:
    ph = _phase(d)
    conc, rate = ph.get("concurrency"), ph.get("request_rate")
    c = int(number(conc, path, "input_config.phases.concurrency")) if conc is not None else None
    r = number(rate, path, "input_config.phases.request_rate") if rate is not None else None
    return (c or None), (r or None)


def _metric(d: dict[str, Any], key: str, path: Path, stat: str = "avg") -> float | None:
    m = d.get(key)
    if m is None:
        return None
    v = need(m, stat, path, key)
    return float(v)


def _dist(d: dict[str, Any], key: str, path: Path, n: int) -> Distribution:
    m = d.get(key)
    if m is None:
        return Distribution(n=0)
    unit = text_field(m, "unit", path, key)
    if unit not in UNITS:
        raise FieldError(path, f"{key}.unit", f"{unit!r} is not a unit of time")
    scale = UNITS[unit] / 1e6

    def g(stat: str) -> float | None:
        return None if m.get(stat) is None else number(m[stat], path, f"{key}.{stat}") * scale

    count = m.get("count")
    return Distribution(n=int(number(count, path, f"{key}.count")) if count is not None else n, mean=g("avg"),
                        std=g("std"), min=g("min"), max=g("max"), p50=g("p50"), p90=g("p90"), p95=g("p95"),
                        p99=g("p99"))


def _summary_level(d: dict[str, Any], path: Path) -> ServingLevel:
    completed = int(need(need(d, "request_count", path, "", kind=dict), "avg", path, "request_count"))
    out_tps = _metric(d, "output_token_throughput", path)
    if out_tps is None:
        raise FieldError(path, "output_token_throughput", "missing")
    need(d, "time_to_first_token", path, "", kind=dict)
    conc, rate = _load(d, path)
    failed = _metric(d, "error_request_count", path)
    return ServingLevel(
        concurrency=conc, rate=rate, completed=completed, failed=int(failed or 0),
        duration_s=_metric(d, "benchmark_duration", path) or 0.0, output_throughput_tps=out_tps,
        request_throughput_rps=_metric(d, "request_throughput", path) or 0.0,
        input_tokens_mean=_metric(d, "input_sequence_length", path),
        output_tokens_mean=_metric(d, "output_sequence_length", path),
        output_tokens_source="usage" if "usage_completion_tokens" in d else "tokenizer",
        ttft_ms=_dist(d, "time_to_first_token", path, completed),
        tpot_ms=_dist(d, "inter_token_latency", path, completed),
        itl_ms=_dist(d, "inter_chunk_latency", path, completed),
        e2e_ms=_dist(d, "request_latency", path, completed),
        total_input_tokens=int(_metric(d, "total_isl", path) or 0),
        total_output_tokens=int(_metric(d, "total_osl", path) or 0), test="serve",
    )


def _whole(v: Any) -> Any:
    """A length AIPerf's config writes as a float (64.0) as the whole number it is."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _manifest(d: dict[str, Any], path: Path) -> Manifest:
    cfg = obj(d, "input_config")
    models = ((cfg.get("models") or {}).get("items") or [{}]) if isinstance(cfg.get("models"), dict) else [{}]
    ep = obj(cfg, "endpoint")
    urls = ep.get("urls") or [None]
    prompts = next((ds.get("prompts") for ds in cfg.get("datasets") or [] if isinstance(ds, dict)), None) or {}
    run = obj(d, "run_info")
    return Manifest.from_dict({  # the file's values, typed where they have the type
        "model": models[0].get("name") if isinstance(models[0], dict) else None, "engine": None,
        "endpoint": urls[0] if isinstance(urls, list) else None, "started": d.get("start_time"),
        "finished": d.get("end_time"),
        # the lengths asked for (its --isl, --osl), as a sweep's manifest states them; what was sent is the level's
        "workload": {"input_len": _whole((prompts.get("isl") or {}).get("mean")),
                     "output_len": _whole((prompts.get("osl") or {}).get("mean")), "api": ep.get("type")},
        "tool": "aiperf", "tool_version": d.get("aiperf_version"), "tool_command": run.get("cli_command"),
        "definitions": DEFINITIONS,
    })


def _timed(n: int, rec: Any, path: Path) -> Timed:
    """One line of profile_export.jsonl."""
    where = f"line {n}:"
    meta = need(rec, "metadata", path, where, kind=dict)
    metrics = rec.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise FieldError(path, f"{where} metrics", f"expected an object, got {type(metrics).__name__}")
    sent = stamp(meta, "request_start_ns", path, f"{where} metadata")
    end = stamp(meta, "request_end_ns", path, f"{where} metadata") if "request_end_ns" in meta else None
    t = Timed(sent, end, warmup=meta.get("benchmark_phase", "profiling") != "profiling")
    err = rec.get("error")
    if err is not None:
        code = err.get("code") if isinstance(err, dict) else None
        t.error_kind = f"http_{code}" if isinstance(code, int) else "error"
        t.error = str(err.get("message") if isinstance(err, dict) else err)[:200]
        return t
    value = {k: need(need(metrics, k, path, f"{where} metrics", kind=dict), "value", path, f"{where} metrics.{k}")
             for k in ("time_to_first_token", "request_latency", "output_sequence_length")}
    t.first_token_ns = sent + ns(value["time_to_first_token"], path, f"{where} metrics.time_to_first_token", 1e6)
    t.end_ns = sent + ns(value["request_latency"], path, f"{where} metrics.request_latency", 1e6)
    gaps = (metrics.get("inter_chunk_latency") or {}).get("value", []) if isinstance(
        metrics.get("inter_chunk_latency"), dict) else []
    t.chunk_ns = chunk_times(t.first_token_ns, gaps, path, f"{where} metrics.inter_chunk_latency.value", 1e6)
    t.output_tokens = int(number(value["output_sequence_length"], path, f"{where} metrics.output_sequence_length"))
    t.output_source = "usage" if "usage_completion_tokens" in metrics else "tokenizer"
    isl = metrics.get("input_sequence_length")
    if isinstance(isl, dict) and isl.get("value") is not None:
        t.input_tokens = int(number(isl["value"], path, f"{where} metrics.input_sequence_length.value"))
    return t


def _records_run(path: Path, text: str, label: str | None) -> Imported:
    records: list[RequestRecord] = [record(i, _timed(n, rec, path)) for i, (n, rec) in
                                    enumerate(json_lines(path, text))]
    summary = path.parent / SUMMARY  # AIPerf writes both into the artifact directory: the load it ran at
    d: dict[str, Any] = {}
    if summary.is_file():
        try:
            d = load_json(summary, summary.read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError):
            d = {}
    conc, rate = _load(d, summary) if isinstance(d, dict) else (None, None)
    lv = level(records, conc, rate, path, "the records")
    m = _manifest(d if isinstance(d, dict) else {}, path)
    if conc is None and rate is None:
        m.extra["load_from"] = "the most requests the records had in flight (no profile_export_aiperf.json beside it)"
    return Imported(label or _name(path), "sweep", m, [lv], [records])
