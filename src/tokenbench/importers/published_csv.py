"""The published.csv layout (src/tokenbench/data/published.csv): one figure per row, grouped into one run per
source, host, model and weights, labelled HOST/MODEL/WEIGHTS. --label replaces the host in a file of one
host (LABEL/MODEL/WEIGHTS) and prefixes it in a file of several (LABEL/HOST/MODEL/WEIGHTS): it once
relabelled every host, so a Strix Halo row read as the A30 the user named."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..distribution import Distribution
from ..levels import DepthLevel, LevelSummary, ServingLevel
from ..results import Manifest
from ..predict.measured import COLUMNS, Row, cache_mode, read_rows
from ..wire import WireError, loads
from .fields import Imported


def detect(path: Path, text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return bool(lines) and lines[0].startswith(",".join(COLUMNS[:5]))


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    try:
        rows = read_rows(path)
    except UsageError as e:
        raise UsageError(f"{e}; nothing was imported") from None
    stamps = _stamps(path, text)
    runs: dict[tuple[str, str, str, str], Imported] = {}
    levels: dict[tuple[object, ...], LevelSummary] = {}
    given: dict[tuple[object, ...], tuple[int, float]] = {}  # each level's figure: the data row that gave it
    several_hosts = len({r.raw["host"] for r in rows}) > 1
    for n, r in enumerate(rows, start=1):
        key = (r.raw["source"], r.raw["host"], r.model, r.weights)
        run = runs.get(key)
        if run is None:
            host = r.raw["host"].lower().replace(" ", "-")
            first = f"{label}/{host}" if label and several_hosts else label or host
            # a part the file leaves empty (a run exported without --weights) is left out: "mine/emitter/" was
            # a label no one types
            name = "/".join(x for x in (first, r.model, r.weights) if x)
            manifest = Manifest(model=r.model, weights=r.weights, kv=r.kv, engine=engine(r), hardware=r.hardware,
                                source=r.raw["source"], host=r.raw["host"], workload={}, tool="published",
                                engine_version=r.version or None, started=r.date or None)
            manifest.update(stamps)
            run = runs[key] = Imported(name, "bench", manifest)
        # one level per test, depth, concurrency, lengths and cache mode: an agent count's warm and busted levels
        # can round to one prompt length, and only the note tells them apart (published.csv has no column for it)
        at = (*key, r.test, r.depth, r.concurrency, r.input_len, r.output_len, cache_mode(r))
        lv = levels.get(at)
        if lv is None:
            kind: type[LevelSummary] = ServingLevel if r.test == "serve" else DepthLevel
            lv = levels[at] = kind(concurrency=r.concurrency, test=r.test, depth=r.depth,
                                   input_tokens_mean=float(r.input_len) or None,
                                   output_tokens_mean=float(r.output_len) or None)
            run.levels.append(lv)
        if (before := given.setdefault((*at, r.metric), (n, r.value)))[1] != r.value:
            where = f"test {r.test}" + (f", depth {r.depth}" if r.depth else "") + \
                f", concurrency {r.concurrency}, lengths {r.input_len}/{r.output_len}{_mode_text(at[-1])}"
            raise UsageError(f"{path}: data rows {before[0]} and {n} give one level ({where}) two {r.metric} "
                             f"figures, {before[1]!r} and {r.value!r}, and nothing in the rows tells them apart; "
                             "nothing was imported")
        if isinstance(lv, DepthLevel):
            _depth_figure(lv, r)
        else:
            assert isinstance(lv, ServingLevel)
            _serving_figure(lv, r)
    return list(runs.values())


def engine(r: Row) -> str:
    """The row's engine without the version its own column states: the shipped rows name their engine "vllm 0.21"
    beside version 0.21, and the run kept the version in both, so show said "engine vllm 0.21 0.21". The engine's
    other words stay (a llama.cpp row's backend: "llama.cpp vulkan")."""
    words, version = r.engine.split(), r.version.lower().removeprefix("v")
    if version and len(words) > 1 and words[-1].lower().removeprefix("v") == version:
        return " ".join(words[:-1])
    return r.engine


def _mode_text(mode: object) -> str:
    return f", cache {mode}" if mode else ""


#: What ``tokenbench export --as published-csv`` writes above the header, each on a ``# KEY: JSON`` line.
STAMPS = ("machine", "server_host", "guard_before_run", "guard")


def _stamps(path: Path, text: str) -> dict[str, object]:
    """The machine snapshot and guard verdict an exported file carries in its ``#`` lines."""
    out: dict[str, object] = {}
    for n, line in enumerate(text.splitlines(), 1):
        key, _, value = line[1:].strip().partition(": ") if line.startswith("#") else ("", "", "")
        if key in STAMPS:
            try:
                out[key] = loads(value, f"line {n}", max_bytes=None)
            except WireError as e:
                raise UsageError(f"{path}: {e} (its {key}); nothing was imported") from None
    return out


def _depth_figure(lv: DepthLevel, r: Row) -> None:
    """A llama-bench row's rate: pp's prompt rate or tg's generation rate."""
    test = lv.test or ""
    if r.metric == "prefill_tps" and test.startswith("pp") and "+" not in test:
        lv.pp_tps = r.value
    elif r.metric == "decode_tps" and (test.startswith("tg") or "+tg" in test):
        lv.tg_tps = r.value
    else:
        raise UsageError(f"{r.metric} is not a figure of a {lv.test} row (pp rows give prefill_tps, tg rows "
                         "decode_tps); nothing was imported")


def _serving_figure(lv: ServingLevel, r: Row) -> None:
    """A serving row's figure, in the level's own names."""
    if r.metric == "prefill_tps":
        lv.prefill_tps = r.value
    elif r.metric == "decode_tps":
        lv.given_decode_tps = r.value
    elif r.metric == "output_tps":
        lv.output_throughput_tps = r.value
    elif r.metric == "ttft_median":
        lv.ttft_ms = Distribution(n=0, p50=r.value, p99=lv.ttft_ms.p99)
    elif r.metric == "ttft_p99":
        lv.ttft_ms = Distribution(n=0, p50=lv.ttft_ms.p50, p99=r.value)
    elif r.metric == "tpot_median":
        lv.tpot_ms = Distribution(n=0, p50=r.value)
