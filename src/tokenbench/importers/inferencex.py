"""InferenceX's published rows, as its ``utils/process_result.py`` writes each one (``agg_NAME.json``, one JSON
object) and ``utils/collect_results.py`` gathers them (a JSON list): one row per engine, box, model, precision,
input and output length and concurrency, from a ``vllm bench serve``-style result (SemiAnalysisAI/InferenceX).

Rows become one run per runner, model, engine, precision, image and parallel layout (their GPUs), one serving level
per (input length, output length, concurrency). InferenceX states throughput per GPU and times in seconds: a level
holds the box's total (``output_tput_per_gpu`` times the GPUs that made it: tensor x pipeline x context parallel,
or a disaggregated run's decode GPUs) and milliseconds, and the run says so. Its ``intvty`` (1000 / TPOT in ms,
tokens a second a user) is not stored: it is the TPOT kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..distribution import Distribution
from ..errors import UsageError
from ..levels import LevelSummary, ServingLevel
from ..results import Manifest
from .fields import FieldError, Imported, load_json, need, number, text_field

STATS = {"mean": "mean", "median": "p50", "std": "std", "p90": "p90", "p95": "p95", "p99": "p99"}
#: Keys that say which run a row belongs to (the rest say which level, or what it measured).
RUN_KEYS = ("hw", "model", "framework", "precision", "image", "spec_decoding", "disagg", "tp", "ep", "pp",
            "dcp_size", "pcp_size", "dp_attention", "is_multinode", "num_prefill_gpu", "num_decode_gpu")

DEFINITIONS = {
    "output_throughput_tps": "InferenceX's output_tput_per_gpu times the GPUs that made the output (tensor x "
                             "pipeline x context parallel; a disaggregated run's decode GPUs)",
    "ttft_ms": "InferenceX's *_ttft in seconds, times 1000 (vllm bench serve's TTFT)",
    "tpot_ms": "InferenceX's *_tpot in seconds, times 1000; its *_intvty is 1000 / TPOT in ms",
}


def detect(path: Path, text: str) -> bool:
    head = text.lstrip()[:3000]
    return head[:1] in ("[", "{") and '"output_tput_per_gpu"' in head and '"conc"' in head


def _gpus(r: dict[str, Any], path: Path, where: str) -> int:
    """The GPUs the row's output came from (process_result.py's divisor of output_throughput)."""
    def count(key: str) -> int:
        v = r.get(key, 1)
        return int(number(v, path, f"{where}.{key}")) if v is not None else 1

    if r.get("is_multinode") is True:
        decode = count("num_decode_gpu")
        return decode or count("num_prefill_gpu")
    return max(1, count("tp") * count("pp") * count("pcp_size"))


def _dist(r: dict[str, Any], name: str, path: Path, where: str) -> Distribution:
    vals = {ours: number(r[f"{theirs}_{name}"], path, f"{where}.{theirs}_{name}") * 1000
            for theirs, ours in STATS.items() if r.get(f"{theirs}_{name}") is not None}
    return Distribution(n=0, **vals)


def _level(r: dict[str, Any], path: Path, where: str) -> ServingLevel:
    conc = int(number(need(r, "conc", path, where), path, f"{where}.conc"))
    isl, osl = (number(need(r, k, path, where), path, f"{where}.{k}") for k in ("isl", "osl"))
    per_gpu = number(need(r, "output_tput_per_gpu", path, where), path, f"{where}.output_tput_per_gpu")
    need(r, "median_ttft", path, where)
    return ServingLevel(concurrency=conc or None, output_throughput_tps=per_gpu * _gpus(r, path, where),
                        input_tokens_mean=isl or None, output_tokens_mean=osl or None, test="serve",
                        ttft_ms=_dist(r, "ttft", path, where), tpot_ms=_dist(r, "tpot", path, where),
                        itl_ms=_dist(r, "itl", path, where), e2e_ms=_dist(r, "e2el", path, where))


def _catalog_box(hw: str) -> str | None:
    """The catalog's id for an InferenceX runner (h100, h200-nb, mi300x-amd: the GPU before the first dash)."""
    from ..predict.specs import Catalog

    try:
        return Catalog.load().find_hardware(hw.split("-")[0].split("_")[0].lower()).id
    except UsageError:
        return None


def _version(image: str) -> str | None:
    """The engine's version from a container image's tag (vllm/vllm-openai:v0.10.2: 0.10.2)."""
    tag = image.rsplit(":", 1)[1] if ":" in image else ""
    return tag.lstrip("v") if tag[:1].isdigit() or tag[:2].lstrip("v")[:1].isdigit() else None


def _manifest(r: dict[str, Any], path: Path, where: str) -> Manifest:
    hw, image = text_field(r, "hw", path, where), str(r.get("image") or "")
    return Manifest.from_dict({  # the row's values, typed where they have the type
        "model": text_field(r, "model", path, where), "engine": text_field(r, "framework", path, where),
        "engine_version": _version(image), "image": image or None, "host": hw, "hardware": _catalog_box(hw),
        "weights": str(r.get("precision") or "").upper() or None, "started": r.get("date"),
        "tool": "InferenceX", "definitions": DEFINITIONS, "workload": {},
        **{k: r[k] for k in RUN_KEYS if k in r and k not in ("hw", "model", "framework", "image")},
        "gpus": _gpus(r, path, where),
    })


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    d = load_json(path, text)
    rows = d if isinstance(d, list) else [d]
    runs: dict[tuple[str, ...], Imported] = {}
    for i, r in enumerate(rows):
        where = f"row {i}" if isinstance(d, list) else "top level"
        if not isinstance(r, dict):
            raise FieldError(path, where, f"expected an object, got {type(r).__name__}")
        key = tuple(str(r.get(k)) for k in RUN_KEYS)
        if key not in runs:
            m = _manifest(r, path, where)
            name = f"{m.host}/{str(m.model).split('/')[-1]}/{m.engine}/{r.get('precision')}/tp{r.get('tp', 1)}"
            runs[key] = Imported(name, "sweep", m)
        runs[key].levels.append(_level(r, path, where))
    for run in runs.values():
        run.levels.sort(key=_order)
        if label:  # a file of one run: its label; of several: the label before each run's own name
            run.label = label if len(runs) == 1 else f"{label}/{run.label}"
    return list(runs.values())


def _order(lv: LevelSummary) -> tuple[float, float, int]:
    return (lv.input_tokens_mean or 0.0, lv.output_tokens_mean or 0.0, lv.concurrency or 0)
