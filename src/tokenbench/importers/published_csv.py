"""The published.csv layout (src/tokenbench/data/published.csv): one figure per row, grouped into one run per
source, host, model and weights, and per engine, version, date, hardware and KV format (each a fact the run's
manifest states once: rows of two engines were one run, named by its first row's), labelled HOST/MODEL/WEIGHTS,
with what tells it apart added where several runs share that. --label replaces the host in a file of one
host (LABEL/MODEL/WEIGHTS) and prefixes it in a file of several (LABEL/HOST/MODEL/WEIGHTS): it once
relabelled every host, so a Strix Halo row read as the A30 the user named. A row's note may say its level's
state as export writes it (measured.level_note): its guard verdict and warnings, flags, requests and errors."""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import UsageError
from ..distribution import Distribution
from ..finding import Code, Finding
from ..findings import guard_finding
from ..guard_results import FAIL, WARN, CheckResult, GuardSnapshot
from ..levels import DepthLevel, LevelSummary, ServingLevel
from ..results import Manifest
from ..predict.measured import COLUMNS, LevelNote, Row, cache_mode, note_state, read_rows
from ..wire import WireError, loads
from .fields import Imported


def detect(path: Path, text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return bool(lines) and lines[0].startswith(",".join(COLUMNS[:5]))


#: What the rows of one run share: the write-up and host, the model and weights (its label), and the engine, its
#: version and date, the box and the KV cache format, each a fact its manifest states once.
RunKey = tuple[str, str, str, str, str, str, str, str, str]


def _run_key(r: Row) -> RunKey:
    return r.raw["source"], r.raw["host"], r.model, r.weights, engine(r), r.version, r.date, r.hardware, r.kv


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    try:
        rows = read_rows(path)
    except UsageError as e:
        raise UsageError(f"{e}; nothing was imported") from None
    stamps = _stamps(path, text)
    runs: dict[RunKey, Imported] = {}
    levels: dict[tuple[object, ...], tuple[int, LevelSummary, LevelNote]] = {}
    given: dict[tuple[object, ...], tuple[int, float]] = {}  # each level's figure: the data row that gave it
    several_hosts = len({r.raw["host"] for r in rows}) > 1
    for n, r in enumerate(rows, start=1):
        key = _run_key(r)
        run = runs.get(key)
        if run is None:
            run = runs[key] = _run(r, label, several_hosts, stamps)
        # one level per test, depth, concurrency, lengths and cache mode: an agent count's warm and busted levels
        # can round to one prompt length, and only the note tells them apart (published.csv has no column for it)
        at = (*key, r.test, r.depth, r.concurrency, r.input_len, r.output_len, cache_mode(r))
        lv = _level(path, n, r, at, levels, run)
        if (before := given.setdefault((*at, r.metric), (n, r.value)))[1] != r.value:
            raise UsageError(f"{path}: data rows {before[0]} and {n} give one level ({_where(r)}) two {r.metric} "
                             f"figures, {before[1]!r} and {r.value!r}, and nothing in the rows tells them apart; "
                             "nothing was imported")
        if isinstance(lv, DepthLevel):
            _depth_figure(lv, r)
        else:
            assert isinstance(lv, ServingLevel)
            _serving_figure(lv, r)
    _distinct_labels(runs)
    return list(runs.values())


def _run(r: Row, label: str | None, several_hosts: bool, stamps: dict[str, object]) -> Imported:
    """The run a row starts, labelled HOST/MODEL/WEIGHTS (``label`` in place of the host, or before it where the
    file has several)."""
    host = r.raw["host"].lower().replace(" ", "-")
    first = f"{label}/{host}" if label and several_hosts else label or host
    # a part the file leaves empty (a run exported without --weights) is left out: "mine/emitter/" was
    # a label no one types
    name = "/".join(x for x in (first, r.model, r.weights) if x)
    manifest = Manifest(model=r.model, weights=r.weights, kv=r.kv, engine=engine(r), hardware=r.hardware,
                        source=r.raw["source"], host=r.raw["host"], workload={}, tool="published",
                        engine_version=r.version or None, started=r.date or None)
    manifest.update(stamps)
    return Imported(name, "bench", manifest)


def _level(path: Path, n: int, r: Row, at: tuple[object, ...],
           levels: dict[tuple[object, ...], tuple[int, LevelSummary, LevelNote]], run: Imported) -> LevelSummary:
    """The level data row ``n`` gives a figure of, made at its first row with the state its note says (guard
    stamp, flags, requests, errors: an exported run's); a later row of it whose note says another is refused."""
    try:
        state = note_state(r)
    except ValueError as e:
        raise UsageError(f"{path}: data row {n}: {e}; nothing was imported") from None
    if at in levels:
        first, lv, said = levels[at]
        if state != said:
            raise UsageError(f"{path}: data rows {first} and {n} give one level ({_where(r)}) two states in their "
                             f"notes ({_said(said)}; {_said(state)}); nothing was imported")
        return lv
    kind: type[LevelSummary] = ServingLevel if r.test == "serve" else DepthLevel
    lv = kind(concurrency=r.concurrency, test=r.test, depth=r.depth, input_tokens_mean=float(r.input_len) or None,
              output_tokens_mean=float(r.output_len) or None)
    _state(lv, state)
    levels[at] = (n, lv, state)
    run.levels.append(lv)
    return lv


#: what a level's guard snapshot says of a check its exported rows name: the note keeps the name alone
KEPT = "not in the exported file: its note names the check only"


def _state(lv: LevelSummary, st: LevelNote) -> None:
    """A level's state as its exported rows' notes say it: the guard's verdict (a dirty one flagged, as a measured
    level's is) and the checks that warned, flags, requests and errors; so commands that leave a flagged or dirty level of a measured run out
    (calibrate --runs) leave its import out too."""
    warned = [CheckResult(c, WARN, KEPT) for c in st.warned]
    if st.guard == "clean":
        lv.guard = GuardSnapshot.written(clean=True, checks=warned)
    elif st.guard == "dirty":
        lv.guard = GuardSnapshot.written(clean=False, checks=[CheckResult(c, FAIL, KEPT) for c in st.checks] + warned)
    for flag in st.flags:
        lv.add(Finding(Code(flag), "marked so in the file it was imported from", severity="note"))
    if (dirty := guard_finding(lv.guard)) is not None:
        lv.add(dirty, replace=True)
    lv.completed, lv.failed, lv.errors = st.completed or 0, st.failed or 0, dict(st.errors)


def _where(r: Row) -> str:
    """A level, as a refusal names it."""
    mode = cache_mode(r)
    return f"test {r.test}" + (f", depth {r.depth}" if r.depth else "") + \
        f", concurrency {r.concurrency}, lengths {r.input_len}/{r.output_len}" + (f", cache {mode}" if mode else "")


def _said(st: LevelNote) -> str:
    """A level's state as its note says it, in a refusal's words."""
    parts = [f"guard {st.guard}" + (f": {', '.join(st.checks)}" if st.checks else "")] if st.guard else []
    parts += [f"guard warnings {', '.join(st.warned)}"] if st.warned else []
    parts += [f"flags {' '.join(st.flags)}"] if st.flags else []
    parts += [f"{st.completed} completed, {st.failed} failed"] if st.completed is not None else []
    parts += [f"errors {', '.join(f'{k} {n}' for k, n in st.errors)}"] if st.errors else []
    return ", ".join(parts) or "nothing of it"


def _distinct_labels(runs: dict[RunKey, Imported]) -> None:
    """Runs of one label (host, model and weights) that differ in engine, version, date, box or KV format (a
    write-up's two engines, a box measured twice a year apart), or in the write-up itself, are labelled apart: each
    label adds what tells its run from the others (HOST/MODEL/WEIGHTS/vllm, .../sglang), numbered where even that
    is alike."""
    by: dict[str, list[tuple[RunKey, Imported]]] = {}
    for key, run in runs.items():
        by.setdefault(run.label, []).append((key, run))
    taken: set[str] = set()
    for name, same in by.items():
        differ = [i for i in (4, 5, 6, 7, 8, 0) if len({k[i] for k, _ in same}) > 1]
        for key, run in same:
            run.label = "/".join([name, *(re.sub(r"\s+", "-", key[i]) for i in differ if key[i])])
            n, base = 1, run.label
            while run.label in taken:
                n += 1
                run.label = f"{base}-{n}"
            taken.add(run.label)


def engine(r: Row) -> str:
    """The row's engine without the version its own column states: the shipped rows name their engine "vllm 0.21"
    beside version 0.21, and the run kept the version in both, so show said "engine vllm 0.21 0.21". The engine's
    other words stay (a llama.cpp row's backend: "llama.cpp vulkan")."""
    words, version = r.engine.split(), r.version.lower().removeprefix("v")
    if version and len(words) > 1 and words[-1].lower().removeprefix("v") == version:
        return " ".join(words[:-1])
    return r.engine


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
