"""What the server says about itself during a level: its Prometheus ``/metrics`` sampled as time series,
summarized per level (requests running and waiting, peak KV-cache use, prefix-cache hit rate, speculative
decoding acceptance rate and mean acceptance length), and GPU power through NVML where present (energy per
output token, tokens per watt).

Counters are reported as their change over the level, never as the server's lifetime totals.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .tasks import cancel_and_wait

#: What each engine calls the quantities we summarize (first name found wins).
GAUGES = {
    "running": ["vllm:num_requests_running", "llamacpp:requests_processing", "sglang:num_running_reqs"],
    "waiting": ["vllm:num_requests_waiting", "llamacpp:requests_deferred", "sglang:num_queue_reqs"],
    "kv_cache_usage": ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "llamacpp:kv_cache_usage_ratio",
                       "sglang:token_usage"],
}
COUNTERS = {
    "prefix_queries": ["vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"],
    "prefix_hits": ["vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"],
    "drafts": ["vllm:spec_decode_num_drafts_total"],
    "draft_tokens": ["vllm:spec_decode_num_draft_tokens_total", "llamacpp:tokens_drafted_total"],
    "accepted_tokens": ["vllm:spec_decode_num_accepted_tokens_total", "llamacpp:tokens_drafted_accepted_total"],
    "generation_tokens": ["vllm:generation_tokens_total", "llamacpp:tokens_predicted_total",
                          "sglang:generation_tokens_total"],
    "prompt_tokens": ["vllm:prompt_tokens_total", "llamacpp:prompt_tokens_total", "sglang:prompt_tokens_total"],
}


def parse(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value}, summed over label sets (engines, GPUs); buckets dropped."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith(("_bucket", "_created")):
                continue
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def _first(sample: dict[str, float], names: list[str]) -> float | None:
    for n in names:
        if n in sample:
            return sample[n]
    return None


KEPT = {n for names in (*GAUGES.values(), *COUNTERS.values()) for n in names}


def kept(sample: dict[str, float]) -> dict[str, float]:
    """The part of a sample worth storing as a time series (a vLLM /metrics page is mostly histograms)."""
    return {k: v for k, v in sample.items() if k in KEPT}


def summarize(samples: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """A level's samples (time, parsed /metrics) -> its telemetry summary."""
    if not samples:
        return {}
    out: dict[str, Any] = {"samples": len(samples)}
    for key, names in GAUGES.items():
        vals = [v for _, s in samples if (v := _first(s, names)) is not None]
        if vals:
            out[f"{key}_max"] = max(vals)
            out[f"{key}_mean"] = sum(vals) / len(vals)
    first, last = samples[0][1], samples[-1][1]
    delta = {}
    for key, names in COUNTERS.items():
        a, b = _first(first, names), _first(last, names)
        if a is not None and b is not None:
            delta[key] = b - a
    out["counters"] = delta
    if delta.get("prefix_queries"):
        out["prefix_cache_hit_rate"] = delta.get("prefix_hits", 0.0) / delta["prefix_queries"]
    if delta.get("draft_tokens"):
        out["spec_acceptance_rate"] = delta.get("accepted_tokens", 0.0) / delta["draft_tokens"]
    if delta.get("drafts"):
        out["spec_mean_acceptance_length"] = 1 + delta.get("accepted_tokens", 0.0) / delta["drafts"]
    return out


@dataclass(slots=True)
class MetricsSampler:
    """Polls ``root/metrics`` every ``interval_s`` while a level runs; gives up quietly (and says so) on a
    server without it."""

    session: aiohttp.ClientSession
    root: str
    interval_s: float = 1.0
    headers: dict[str, str] = field(default_factory=dict)
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    available: bool | None = None
    _task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        try:
            async with self.session.get(f"{self.root}/metrics", headers=self.headers,
                                        timeout=aiohttp.ClientTimeout(total=5)) as r:
                if r.status != 200:
                    self.available = False
                    return
                text = await r.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            self.available = False
            return
        try:
            parsed = parse(text)
        except ValueError:
            self.available = False
            return
        self.available = True
        now = time.perf_counter_ns()
        self.samples.append((now / 1e9, parsed))

    async def _loop(self) -> None:
        while True:
            await self.sample()
            if self.available is False:
                return
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> dict[str, Any]:
        await cancel_and_wait(self._task)
        if self.available:
            await self.sample()  # the level's end
        if not self.available:
            return {"available": False, "note": "the server exposes no Prometheus /metrics"}
        return {"available": True, **summarize(self.samples)}


class PowerSampler:
    """GPU power through NVML, integrated over a level into joules. 'not available' without NVML."""

    def __init__(self, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.handles: list[Any] = []
        self.joules = 0.0
        self.watts: list[float] = []
        self._task: asyncio.Task[None] | None = None
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no library, driver or GPU
            self.nvml = None

    @property
    def available(self) -> bool:
        return bool(self.handles)

    async def _loop(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(self.interval_s)
            now = time.perf_counter()
            w = sum(self.nvml.nvmlDeviceGetPowerUsage(h) for h in self.handles) / 1000.0
            self.watts.append(w)
            self.joules += w * (now - last)
            last = now

    def start(self) -> None:
        if self.available:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    def summary(self, output_tokens: int, seconds: float) -> dict[str, Any]:
        if not self.available or not self.watts:
            return {"gpu_power": "not available"}
        mean_w = sum(self.watts) / len(self.watts)
        out: dict[str, Any] = {"gpu_power_w_mean": mean_w, "energy_j": self.joules}
        if output_tokens:
            out["j_per_output_token"] = self.joules / output_tokens
            out["output_tokens_per_watt"] = (output_tokens / seconds) / mean_w if seconds and mean_w else None
        return out


class LevelTelemetry:
    """Everything sampled while one level runs: the server's /metrics and, where present, GPU power.
    ``stop()`` always stops both (also on Ctrl-C); ``summary()`` then combines them with the level's tokens."""

    def __init__(self, session: aiohttp.ClientSession, root: str, interval_s: float,
                 headers: dict[str, str] | None = None) -> None:
        self.metrics = MetricsSampler(session, root, interval_s, headers or {})
        self.power = PowerSampler()
        self.metrics_summary: dict[str, Any] = {}

    def start(self) -> None:
        self.metrics.start()
        self.power.start()

    async def stop(self) -> None:
        try:
            self.metrics_summary = await self.metrics.stop()
        finally:
            await self.power.stop()

    def summary(self, output_tokens: int, seconds: float) -> dict[str, Any]:
        return {**self.metrics_summary, **self.power.summary(output_tokens, seconds)}

    def series(self) -> list[tuple[int, dict[str, float]]]:
        """The samples worth storing, as (perf_counter_ns, {name: value})."""
        return [(int(t * 1e9), kept(v)) for t, v in self.metrics.samples]
