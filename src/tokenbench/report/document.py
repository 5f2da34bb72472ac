"""``report()``: the library call behind ``tokenbench report`` (its typed config, ``ReportConfig``). It reads the
runs from the store and computes
everything a report shows (the plotted series, each pair of runs compared, quality beside speed) into one
``Report`` value, which every exporter (``export.py``) writes without reading anything else."""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations

from ..quality.parity import beside
from ..results import RunResult
from ..reader import REPORTED, load_result
from ..store import Store
from . import comparison, series


@dataclass(frozen=True, slots=True)
class ReportConfig:
    """The runs a report shows (ids, id prefixes or labels; a label several runs share is refused unless
    ``latest``), its title, the price for every cost column (None: each run's own) and the results database
    (None: $TOKENBENCH_DB or the user data dir)."""

    runs: tuple[str, ...]
    latest: bool = False
    title: str = "tokenbench report"
    price_per_hour: float | None = None
    currency: str | None = None
    db: str | None = None


@dataclass(slots=True)
class Report:
    """What one report shows: values only. ``pairs``: each pair of runs that share an operating point, compared;
    ``apart``: a line for each pair that shares none; ``quality``: per pair of run ids, lines on the two boxes'
    quality runs; ``written``: when it was made, as the page says it."""

    runs: list[RunResult]
    plots: list[series.Plot]
    pairs: list[comparison.Pair] = field(default_factory=list)
    apart: list[str] = field(default_factory=list)
    quality: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    title: str = "tokenbench report"
    price_per_hour: float | None = None
    currency: str | None = None
    written: str = ""


def report(cfg: ReportConfig, store: Store | None = None, now: datetime.datetime | None = None) -> Report:
    """The report of the runs ``cfg.runs`` name (a label a quality run shares with a sweep means the sweep), from
    ``store`` (default: the database ``cfg.db`` names, read only); ``now``: when it says it was written."""
    store = store if store is not None else Store(cfg.db, readonly=True)
    price_per_hour, currency = cfg.price_per_hour, cfg.currency
    runs = [load_result(store, r, latest=cfg.latest, kinds=REPORTED, command="report") for r in cfg.runs]
    quality = {}
    for ra, rb in combinations(runs, 2):
        q = beside(store, ra.manifest.label, rb.manifest.label)
        if q is not None:
            quality[(ra.run_id, rb.run_id)] = q.lines(ra.manifest.label or ra.run_id, rb.manifest.label or rb.run_id)
    _told_apart(runs)
    pairs, apart = comparison.pairs(runs, price_per_hour, currency, store)
    when = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d %H:%M UTC")
    return Report(runs, series.build(runs, price_per_hour, currency), pairs, apart, quality, cfg.title,
                  price_per_hour, currency, when)


def _told_apart(runs: list[RunResult]) -> None:
    """Runs of one label (two imports of one tool's output) named with their ids too, as compare names them: two
    sections "llama_benchy vs llama_benchy" and a legend of one name twice told nothing. The runs are this
    report's copies, read from the store; nothing is written back."""
    labels = Counter(r.manifest.label for r in runs if r.manifest.label)
    for r in runs:
        if r.manifest.label and labels[r.manifest.label] > 1:
            r.manifest.label = f"{r.manifest.label} {r.run_id}"
