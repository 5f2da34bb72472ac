"""A stored run in the shapes other people read (``tokenbench export RUN --as FORMAT``), each of which ``import``
reads back to the same levels:

- ``published-csv``: the rows ``calibrate`` reads (predict/measured.py's layout), one figure a row at full
  precision, each row's engine build (``date``, ``version``) and, in its ``note``, its level's state (guard stamp,
  the checks that warned, flags, requests answered and failed, errors by kind: measured.level_note), and the run's machine snapshot and
  guard mode in ``#`` lines above the header, which ``calibrate`` skips and ``import`` keeps. The
  figures are the levels' own (a TTFT median over all of a level's requests), so the file reads back to the same
  levels; ``calibrate --runs`` reads a stored run's requests themselves;
- ``llama-bench-md``: llama-bench's Markdown table (``-o md``: model, backend, test, t/s ``mean ± sd``, the
  ``build:`` line under it), the shape llama.cpp's community posts, for depth and llama-bench runs; a ``flags``
  column after t/s where a level is flagged (``unstable``, ``dirty_bench``...), so a rate the run doubted is
  never posted as a plain figure.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import __version__
from .errors import UsageError
from .levels import DepthLevel, ServingLevel
from .predict.measured import COLUMNS, Row, cache_mode, run_rows
from .layout import plural

if TYPE_CHECKING:
    from .results import RunResult

FORMATS = ("published-csv", "llama-bench-md")
#: llama.cpp's backends as llama-bench names them in its table (tokenbench's engine names are lower case).
BACKENDS = {"cuda": "CUDA", "vulkan": "Vulkan", "rocm": "ROCm", "metal": "Metal", "cpu": "CPU", "sycl": "SYCL",
            "blas": "BLAS"}


@dataclass(slots=True)
class Placing:
    """The box, model and formats the rows say (published.csv's columns); None: what the run says of itself."""

    hardware: str | None = None
    model: str | None = None
    engine: str | None = None
    weights: str | None = None
    kv: str | None = None


def _rows(run: RunResult, place: Placing) -> list[Row]:
    m = run.manifest
    rows = run_rows(run, place.hardware or m.hardware or "", place.engine or m.engine or "",
                    place.model or m.model or "", (place.weights or m.weights or m.quant or "").upper(),
                    (place.kv or m.kv or "").upper(), p99=True, flagged=True)
    if not rows:
        if run.open_loop:
            # its columns place a serving level by its concurrency: an open loop's levels have a rate instead
            raise UsageError(f"run {run.run_id} is an open loop (--rate): published.csv places a serving level by "
                             "its concurrency, which a rate's level has none of; 'tokenbench show RUN --json FILE' "
                             "writes every level")
        raise UsageError(f"run {run.run_id} has no level published.csv holds (complete pp/tg levels at concurrency 1, "
                         "or serving levels with their lengths)")
    return rows


def unfinished(run: RunResult) -> str | None:
    """What became of a run that did not end complete, in words ("is still running", "was interrupted"); None for
    one that did. Its rows are of the levels it finished."""
    if run.status in ("complete", ""):
        return None
    return "is still running" if run.status == "running" else f"was {run.status}"


def _header(run: RunResult, rows: int, skipped: int) -> list[str]:
    m = run.manifest
    lines = [f"# tokenbench {__version__}: run {run.run_id} ({m.label or 'no label'}), {m.provenance or 'measured'}"
             + (f" ({run.status}: rows of the levels it finished)" if unfinished(run) else "")
             + f", {rows} rows" + (f"; {plural(skipped, 'level')} it cannot hold left out (unfinished, or no lengths)"
                                 if skipped else "") + "; a flagged level's rows name its flags, and calibrate --runs "
             "leaves such levels out",
             f"# engine: {m.engine or 'unknown'} {m.engine_version or ''}".rstrip()]
    for key in ("machine", "server_host", "guard_before_run"):
        value = getattr(m, key)
        if value:
            lines.append(f"# {key}: {json.dumps(value, sort_keys=True, default=str)}")
    if m.guard:
        lines.append(f"# guard: {json.dumps(m.guard)}")
    return lines


def published_csv(run: RunResult, place: Placing) -> str:
    """The run's rows in the published.csv layout, values at full precision (they read back bit for bit)."""
    rows = _rows(run, place)
    source = re.sub(r"[\s,]+", "-", str(run.manifest.source or run.manifest.label or run.run_id))
    host = str(run.manifest.host or run.manifest.label or run.run_id)
    used = _levels_in(rows, run)
    buf = io.StringIO()
    for line in _header(run, len(rows), sum(1 for o in run.outcomes if o.idx not in used)):
        buf.write(line + "\n")
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:  # each note says its level's guard stamp, flags, requests and errors (measured.level_note)
        w.writerow({**r.raw, "source": source, "host": host, "value": repr(r.value)})
    return buf.getvalue()


def _level_of(r: Row, run: RunResult) -> int:
    """The level a row came from (its test, depth, concurrency and lengths, and an agent count's cache mode:
    its warm and busted levels can round to one prompt length)."""
    for o in run.outcomes:
        s = o.summary
        if isinstance(s, DepthLevel) and s.test == r.test and (s.depth or 0) == r.depth:
            return o.idx
        if r.test == "serve" and s.concurrency == r.concurrency and (s.depth or 0) == r.depth and \
                s.input_tokens_mean and round(s.input_tokens_mean) == r.input_len and \
                (s.session.cache if isinstance(s, ServingLevel) and s.session else "") == cache_mode(r):
            return o.idx
    return -1


def _levels_in(rows: list[Row], run: RunResult) -> set[int]:
    return {_level_of(r, run) for r in rows}


def _rate(mean: float, sd: float | None) -> str:
    return f"{mean:.2f} ± {sd or 0:.2f}"


def _md_cells(run: RunResult) -> list[list[str]]:
    """Each complete pp or tg level's cells: model, backend, test, ``mean ± sd`` and its flags."""
    m = run.manifest
    engine = (m.engine or "").split(" ", 1)
    backend = BACKENDS.get(engine[1].lower(), engine[1]) if len(engine) == 2 and engine[0] == "llama.cpp" else ""
    cells = []
    for o in run.outcomes:
        s = o.summary
        if not isinstance(s, DepthLevel) or o.status != "complete":
            continue
        rate = (s.pp_tps, s.pp_tps_sd) if s.pp_tps is not None else (s.tg_tps, s.tg_tps_sd)
        if rate[0] is None:
            continue
        test = (s.test or "") + (f" @ d{s.depth}" if s.depth else "") + \
            (f" (c{s.concurrency})" if (s.concurrency or 1) > 1 else "")
        cells.append([str(m.model or m.label or ""), backend, test, _rate(rate[0], rate[1]), ", ".join(s.flags)])
    return cells


def llama_bench_md(run: RunResult) -> str:
    """llama-bench's Markdown table of the run's pp and tg levels (``pp512 @ d4096``; llama-benchy's `` (c2)``
    where a level ran at a concurrency above 1) and its ``build:`` line."""
    m = run.manifest
    cells = _md_cells(run)
    if not cells:
        raise UsageError(f"run {run.run_id} has no pp or tg level: a serving run is no llama-bench table; export it "
                         "--as published-csv")
    head = ["model", "backend", "test", "t/s", "flags"]
    if not any(c[-1] for c in cells):  # llama-bench's own columns; a flagged level's flags are never left out
        head, cells = head[:-1], [c[:-1] for c in cells]
    width = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(head)]
    right = [False, False, True, True, False]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, width, right)) + " |"

    out = [line(head), "| " + " | ".join(("-" * (w - 1) + ":") if r else "-" * w for w, r in zip(width, right)) + " |"]
    out += [line(c) for c in cells]
    build = re.fullmatch(r"b(\d+)", m.engine_version or "")
    if build:
        out += ["", f"build: {m.extra.get('build_commit') or 'unknown'} ({build.group(1)})"]
    return "\n".join(out) + "\n"


def unkept(run: RunResult, fmt: str) -> str | None:
    """What ``fmt`` cannot carry of the run, in a line (None: nothing): published.csv has no column for an agent
    session level's cache mode, so its rows' note says it and ``import`` reads them back as plain serving levels."""
    from .session_view import is_replay_run

    modes = list(dict.fromkeys(o.summary.session.cache for o in run.outcomes
                               if isinstance(o.summary, ServingLevel) and o.summary.session is not None))
    if fmt != "published-csv" or not modes:
        return None
    if is_replay_run(run):
        return (f"run {run.manifest.label or run.run_id} replayed recorded agents: published.csv has no column for "
                "a replay's trees and calls, so import reads the rows back as plain serving levels")
    return (f"run {run.manifest.label or run.run_id} measured agent sessions with the cache {' and '.join(modes)}: "
            "published.csv has no column for the cache mode, so each row's note says it, and import reads the "
            "rows back as plain serving levels")


def export(run: RunResult, fmt: str, place: Placing) -> str:
    """The run in ``fmt``. A prediction is refused: neither format can say a row was predicted (llama-bench's table
    has no such column, and published.csv's rows are what ``calibrate`` and ``import`` read as measured), so an
    exported prediction came back from ``import`` as a measured run that compare, cost and calibrate trusted."""
    if run.manifest.predicted_mark:
        raise UsageError(f"run {run.manifest.label or run.run_id} is a prediction, and --as {fmt} would read as a "
                         "measurement: export writes measured runs; 'tokenbench show RUN --json FILE' keeps a "
                         "prediction marked as one")
    if fmt == "published-csv":
        return published_csv(run, place)
    if fmt == "llama-bench-md":
        return llama_bench_md(run)
    raise UsageError(f"--as {fmt}: give one of {', '.join(FORMATS)}")
