"""Runs read back from the store: ``load_result`` resolves a run (an id, an id prefix or a label) and builds its
``RunResult`` as the command that made it returned it (repetitions combined, the cost at the run's price), and
``load_items`` a quality run's items."""

from __future__ import annotations

from .pricing import run_price
from .offered_load import Level
from .levels import LevelSummary
from .quality.items import Item
from .results import LevelOutcome, RunResult, as_read, combine_repetitions
from .store import Store


#: Every kind of run with levels: what a report draws and compare aligns (test, depth, concurrency).
REPORTED = ("sweep", "predict", "depth", "bench")
#: Runs measured (or predicted) at load levels: what recommend ranks (cost prices any run with a rate: REPORTED).
LOADED = ("sweep", "predict")


def load_result(store: Store, ref: str, first: int | None = None, latest: bool = False,
                kinds: tuple[str, ...] | None = None, command: str = "") -> RunResult:
    """A stored run, as the sweep returned it (finished levels only if it was cut short); ``first``: only the
    first levels (a 200,000-level import loads in seconds, not a second)."""
    row = store.resolve(ref, latest, kinds, command)
    manifest = as_read(row.manifest, row.provenance, row.label)
    by_idx: dict[int, list[tuple[str, LevelSummary]]] = {}
    for idx, _rep, status, summary in store.levels(row.id, first):
        by_idx.setdefault(idx, []).append((status, summary))
    outcomes = []
    for idx, items in sorted(by_idx.items()):
        reps = [s for _, s in items]
        status = next((st for st, _ in items if st != "complete"), "complete")
        level = Level(concurrency=reps[0].concurrency, rate=reps[0].rate)
        combined = combine_repetitions(reps, run_price(manifest), manifest.currency)
        outcomes.append(LevelOutcome(idx, level, combined, status, reps))
    quality_items = load_items(store, row.id) if row.kind == "quality" else []
    result = RunResult(row.id, manifest, outcomes, row.status, row.error, kind=row.kind, items=quality_items)
    if manifest.capacity:  # a search's levels in the order of their value, as capacity printed them (``idx``: run)
        result.sort_by_value()
    if manifest.capacity:
        from .capacity import mark_levels  # a search's verdicts on each level (a cliff's cached share too)

        mark_levels(result)
    return result


def load_items(store: Store, run_id: str) -> list[Item]:
    """A quality run's evaluated items, as stored."""
    return [Item.from_row(r) for r in store.quality_items(run_id)]
