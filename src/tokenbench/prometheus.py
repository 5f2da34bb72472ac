"""A Prometheus text page read into numbers: the one reader of an engine's ``/metrics`` and of an exporter's page
(power/url.py)."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families


def parse(text: str, by_label: dict[str, str] | None = None) -> dict[str, float]:
    """Prometheus text -> {sample name: value}, summed over label sets (engines, GPUs); buckets and values that
    are not finite dropped. A sample named in ``by_label`` is also kept apart by that label's value, as
    ``name{label=value}`` (summed over the other labels): vLLM's cached tokens by tier. Text that is not
    Prometheus' raises ValueError, whatever the parser tripped on."""
    out: dict[str, float] = {}
    split = by_label or {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                v = float(s.value)
                if s.name.endswith(("_bucket", "_created")) or not math.isfinite(v):
                    continue
                out[s.name] = out.get(s.name, 0.0) + v
                if (label := split.get(s.name)) is not None and label in s.labels:
                    key = f"{s.name}{{{label}={s.labels[label]}}}"
                    out[key] = out.get(key, 0.0) + v
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
        raise ValueError(f"not Prometheus text: {type(e).__name__}") from None
    return out


def info_labels(text: str, name: str) -> dict[str, str]:
    """The labels of the first sample named ``name`` (an info metric, whose facts are its labels, as vLLM's
    ``cache_config_info``); empty where the page has none, or is not Prometheus text."""
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name == name:
                    return dict(s.labels)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return {}
    return {}
