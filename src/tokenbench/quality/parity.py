"""Two quality runs compared task by task, item by item: scores, the difference with its 95% interval, a
p-value and a verdict; for outputs kept for comparison only (agreement), the share of identical outputs and
where they first differ.

Items are paired by task and key (the same cell, the same prompt, the same harness document); the runs must
have used the same items (the same --seed, contexts and depths): unpaired items are counted and left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..results import Manifest, load_items
from ..store import RunRow, Store
from .agreement import Agreement, agreement
from .items import Item
from .stats import Paired, compare_paired


@dataclass(slots=True)
class TaskComparison:
    task: str
    paired: int
    only_a: int
    only_b: int
    scores: Paired | None  # tasks with a score (niah, harness tasks)
    agreement: Agreement | None  # every task whose outputs both runs kept
    timeouts: tuple[int, int] = (0, 0)
    errors: tuple[int, int] = (0, 0)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "paired": self.paired, "only_a": self.only_a, "only_b": self.only_b,
                "scores": self.scores.to_dict() if self.scores else None,
                "agreement": self.agreement.to_dict() if self.agreement else None,
                "timeouts": list(self.timeouts), "errors": list(self.errors), "notes": self.notes}


def _outputs(a: Item, b: Item) -> tuple[list[int] | str, list[int] | str, str]:
    ta, tb = a.detail.get("tokens"), b.detail.get("tokens")
    if isinstance(ta, list) and isinstance(tb, list):
        return ta, tb, "tokens"
    return a.response, b.response, "characters"


def _by_task(items: list[Item]) -> dict[str, dict[str, Item]]:
    by: dict[str, dict[str, Item]] = {}
    for it in items:
        by.setdefault(it.task, {})[it.key] = it
    return by


def _count(items: dict[str, Item], status: str) -> int:
    return sum(i.status == status for i in items.values())


def _answered(it: Item) -> bool:
    return it.status not in ("timeout", "error")


def _agreement(a: dict[str, Item], b: dict[str, Item], keys: list[str]) -> Agreement | None:
    """How often the paired outputs agree: by token ids where both runs stored them, else by characters."""
    both = [k for k in keys if _answered(a[k]) and _answered(b[k])]
    if not both:
        return None
    pairs = [_outputs(a[k], b[k]) for k in both]
    if all(u == "tokens" for _, _, u in pairs):
        return agreement([(x, y) for x, y, _ in pairs], "tokens")
    return agreement([(a[k].response, b[k].response) for k in both], "characters")


def compare_task(task: str, a: dict[str, Item], b: dict[str, Item], seed: int = 0) -> TaskComparison:
    """One task of two runs, item by item on the items both have."""
    keys = [k for k in a if k in b]
    tc = TaskComparison(task, len(keys), len(a) - len(keys), len(b) - len(keys), None, None,
                        (_count(a, "timeout"), _count(b, "timeout")), (_count(a, "error"), _count(b, "error")))
    if not keys:
        tc.notes.append("no item in common: were both runs made with the same --seed, contexts and depths?")
        return tc
    scored = [k for k in keys if a[k].scored and b[k].scored]
    if scored:
        tc.scores = compare_paired([a[k].value for k in scored], [b[k].value for k in scored], seed)
    tc.agreement = _agreement(a, b, keys)
    if tc.only_a or tc.only_b:
        tc.notes.append(f"{tc.only_a + tc.only_b} items are in one run only (different --seed, contexts or "
                        "--items?): left out")
    return tc


def compare_items(items_a: list[Item], items_b: list[Item], seed: int = 0) -> list[TaskComparison]:
    by_a, by_b = _by_task(items_a), _by_task(items_b)
    return [compare_task(task, by_a[task], by_b[task], seed) for task in by_a if task in by_b]


def compare_runs(store: Store, ref_a: str, ref_b: str, latest: bool = False) -> tuple[RunRow, RunRow, list[TaskComparison]]:
    """(run A, run B, per task comparisons) of two stored quality runs."""
    ra = store.resolve(ref_a, latest, ("quality",), "quality compare")
    rb = store.resolve(ref_b, latest, ("quality",), "quality compare")
    if ra.id == rb.id:
        raise UsageError(f"'{ref_a}' and '{ref_b}' are the same run ({ra.id}): compare two runs")
    items_a, items_b = load_items(store, ra.id), load_items(store, rb.id)
    cmp = compare_items(items_a, items_b)
    if not cmp:
        ta, tb = sorted({i.task for i in items_a}), sorted({i.task for i in items_b})
        raise UsageError(f"runs {ra.id} ({', '.join(ta) or 'no items'}) and {rb.id} ({', '.join(tb) or 'no items'}) "
                         "have no task in common")
    ma, mb = Manifest.from_dict(ra.manifest).seed, Manifest.from_dict(rb.manifest).seed
    for tc in cmp if ma != mb else []:
        tc.notes.append(f"the runs used different seeds ({ma} and {mb}): their items differ")
    return ra, rb, cmp


@dataclass(slots=True)
class Beside:
    """The quality of two boxes, as a speed comparison shows it: their newest quality runs under the same
    labels as the speed runs, compared task by task."""

    run_a: str
    run_b: str
    tasks: list[TaskComparison]

    def lines(self, name_a: str, name_b: str) -> list[str]:
        out = []
        for tc in self.tasks:
            if tc.scores is not None:
                s = tc.scores
                out.append(f"{tc.task}: {s.verdict_for(name_a, name_b)} ({100 * s.mean_a:.1f} vs {100 * s.mean_b:.1f} points, "
                           f"p = {s.p_value:.2g}, {s.n} items)")
            elif tc.agreement is not None:
                g = tc.agreement
                out.append(f"{tc.task}: {g.identical} of {g.n} outputs identical ({g.share:.0%})")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"quality_run_a": self.run_a, "quality_run_b": self.run_b, "tasks": [t.to_dict() for t in self.tasks]}


def newest_quality_run(store: Store, label: str | None) -> RunRow | None:
    """The newest quality run with this label (a speed run and the quality run of the same box share it)."""
    if not label:
        return None
    rows = [r for r in store.runs_labelled(label) if r.kind == "quality"]
    return rows[0] if rows else None


def beside(store: Store, label_a: str | None, label_b: str | None) -> Beside | None:
    """Quality beside speed: None unless both labels have a quality run with a task in common."""
    qa, qb = newest_quality_run(store, label_a), newest_quality_run(store, label_b)
    if qa is None or qb is None or qa.id == qb.id:
        return None
    tasks = compare_items(load_items(store, qa.id), load_items(store, qb.id))
    return Beside(qa.id, qb.id, tasks) if tasks else None
