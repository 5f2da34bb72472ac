"""Two quality runs compared task by task, item by item: scores, the difference with its 95% interval, a
p-value and a verdict; for outputs kept for comparison only (agreement), the share of identical outputs and
where they first differ.

Items are paired by task and key (the same cell, the same prompt, the same harness document); the runs must
have used the same items (the same --seed, contexts and depths): unpaired items are counted and left out.

Agreement is judged against a noise floor: the same host run twice. The floor is another run of A's host (else
B's) found in the store: the same label, the same endpoint (or the same embedded engine on the same machine),
model, engine and version, seed, API, output length, temperature and request fields. Without one, greedy
outputs are judged against an assumed floor (every output identical), and the output says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..layout import plural
from ..results import Manifest
from ..reader import load_items
from ..store import RunRow, Store
from .agreement import Agreement, AgreementVerdict, agreement, judge
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
    agreement_verdict: AgreementVerdict | None = None  # the agreement against the noise floor

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "paired": self.paired, "only_a": self.only_a, "only_b": self.only_b,
                "scores": self.scores.to_dict() if self.scores else None,
                "agreement": self.agreement.to_dict() if self.agreement else None,
                "agreement_verdict": self.agreement_verdict.to_dict() if self.agreement_verdict else None,
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
        counted = [n for k in both if (n := a[k].output_tokens) is not None]  # the server's, where it said
        return agreement([(x, y) for x, y, _ in pairs], "tokens", counted if len(counted) == len(both) else None)
    return agreement([(a[k].response, b[k].response) for k in both], "characters")


def _pairing(task: str) -> tuple[str, str]:
    """What pairs a task's items, as the options that set it: a needle cell is its context and depth; any other
    item is its prompt, which the --seed chooses and the --api shapes (a chat cue, a chat template)."""
    if task == "niah":
        return "contexts and depths", "contexts or depths"
    return "--seed and --api", "--seed, --api or --items"


def compare_task(task: str, a: dict[str, Item], b: dict[str, Item], seed: int = 0) -> TaskComparison:
    """One task of two runs, item by item on the items both have."""
    keys = [k for k in a if k in b]
    tc = TaskComparison(task, len(keys), len(a) - len(keys), len(b) - len(keys), None, None,
                        (_count(a, "timeout"), _count(b, "timeout")), (_count(a, "error"), _count(b, "error")))
    if not keys:
        tc.notes.append(f"no item in common: were both runs made with the same {_pairing(task)[0]}?")
        return tc
    # an item neither run's server answered says nothing of either model (both "score" 0): left out
    scored = [k for k in keys if a[k].scored and b[k].scored and (_answered(a[k]) or _answered(b[k]))]
    if scored:
        tc.scores = compare_paired([a[k].value for k in scored], [b[k].value for k in scored], seed)
    tc.agreement = _agreement(a, b, keys)
    if tc.only_a or tc.only_b:
        n = tc.only_a + tc.only_b
        tc.notes.append(f"{plural(n, 'item')} {'is' if n == 1 else 'are'} in one run only (different "
                        f"{_pairing(task)[1]}, or a run that did not finish?): left out")
    return tc


def compare_items(items_a: list[Item], items_b: list[Item], seed: int = 0) -> list[TaskComparison]:
    by_a, by_b = _by_task(items_a), _by_task(items_b)
    return [compare_task(task, by_a[task], by_b[task], seed) for task in by_a if task in by_b]


# --- the noise floor: the same host twice ------------------------------------------------------------------

#: The workload settings that change what a server answers: two runs differing in one are not a repeat.
OUTPUT_SETTINGS = ("api", "max_tokens", "temperature", "request_fields")

#: Each output setting's option, and what differs between two runs made with different values of it.
SETTING_OPTIONS = {"api": ("--api", "the prompts sent differ"),
                   "max_tokens": ("--max-tokens", "the outputs were cut at different lengths"),
                   "temperature": ("--temperature", "the outputs were sampled differently"),
                   "request_fields": ("--extra-body", "the requests carried different fields"),
                   "seed": ("--seed", "their items differ (the needles, the prompts drawn)")}


def _as_option(key: str, value: Any) -> str:
    """A setting as the option that gives it: "--api chat", "--extra-body '{"top_k":1}'", "no --extra-body"."""
    opt = SETTING_OPTIONS[key][0]
    if key == "request_fields":
        return f"{opt} '{json.dumps(value, separators=(',', ':'))}'" if value else f"no {opt}"
    if value is None:  # greedy, stored as 0
        value = 0
    return f"{opt} {value:g}" if isinstance(value, float) else f"{opt} {value}"


@dataclass(frozen=True, slots=True)
class Apart:
    """The first output setting two runs were made with different values of, as the options that give each:
    their paired items were sent or generated differently, so a difference could be the setting's."""

    key: str  # one of OUTPUT_SETTINGS
    a: str  # the first run's, as its option: "--api completions"
    b: str  # the second run's: "--api chat"

    @property
    def settings(self) -> str:
        """"different settings (--api completions and --api chat): the prompts sent differ"."""
        return f"different settings ({self.a} and {self.b}): {SETTING_OPTIONS[self.key][1]}"

    def refusal(self, name_a: str, name_b: str) -> str:
        """Why ``quality compare`` compares no two servers: the setting, both values and the rerun that pairs
        them."""
        return (f"runs {name_a} and {name_b} were made with {self.settings}, so no difference could be told from "
                f"the servers' and no verdict is given; rerun {name_b} with {self.a} (or {name_a} with {self.b})")

    def no_verdict(self) -> str:
        """What a speed comparison says in place of the quality runs' verdict."""
        return f"the quality runs were made with {self.settings}, so no quality verdict is given"


def settings_apart(ra: RunRow, rb: RunRow) -> Apart | None:
    """The first output setting two runs were made with different values of, or None: the one check of every
    pair of quality runs judged together (quality compare's A and B and its --floor, quality beside speed). A
    run that did not record a setting is not held against."""
    ma, mb = Manifest.from_dict(ra.manifest), Manifest.from_dict(rb.manifest)
    if ma.seed is not None and mb.seed is not None and ma.seed != mb.seed:  # the items: none asked in both
        return Apart("seed", _as_option("seed", ma.seed), _as_option("seed", mb.seed))
    wa, wb = ma.workload or {}, mb.workload or {}
    for key in OUTPUT_SETTINGS:
        if key not in wa or key not in wb:
            continue
        va, vb = wa[key] or None, wb[key] or None  # no --extra-body: None or {}; greedy: 0 or 0.0
        if va != vb:
            return Apart(key, _as_option(key, va), _as_option(key, vb))
    return None


def _floor_apart(rf: RunRow, ref_floor: str, runs: dict[str, RunRow]) -> str | None:
    """Why a run given by --floor measures no repeat of the compared runs' host, or None: made with another
    value of an output setting than A or B (as a floor found in the store never is)."""
    given = f"--floor {ref_floor}" + (f" (run {rf.id})" if ref_floor != rf.id else "")
    for name, run in runs.items():
        apart = settings_apart(run, rf)
        if apart:
            return (f"{given} and run {name} were made with {apart.settings}, so it is no floor for them: give "
                    f"a repeat made with {apart.a}")
    if _host(rf) not in {_host(run) for run in runs.values()}:  # another label, server, model or engine
        return (f"{given} is no repeat of {' or '.join(runs)}: it was made with another label, server, model or "
                f"engine ({_where(rf)}), so it is no floor for them: give a run of A's host made again")
    return None


def _where(r: RunRow) -> str:
    """A quality run's host in a few words: "label s1, model tokenbench-tiny-llama at http://.../v1"."""
    m = Manifest.from_dict(r.manifest)
    at = f"the embedded {(m.embedded or {}).get('engine')}" if m.embedded else m.endpoint
    return f"label {r.label or 'none'}, model {m.model} at {at}"


def _host(r: RunRow) -> tuple[Any, ...]:
    """What makes two runs the same host serving the same way (see the module's docstring)."""
    m = Manifest.from_dict(r.manifest)
    work = m.workload or {}
    emb = m.embedded or {}
    where = (("embedded", emb.get("engine"), emb.get("model"), emb.get("model_size"), emb.get("quant"),
              (m.machine or {}).get("hostname")) if m.embedded else ("url", m.endpoint))
    return (r.label, where, m.model, m.engine, m.engine_version, m.seed,
            *(repr(work.get(k)) for k in OUTPUT_SETTINGS))


def repeats(store: Store, run: RunRow, exclude: tuple[str, ...]) -> list[RunRow]:
    """Other quality runs of ``run``'s host, serving the same way, newest first."""
    if not run.label:
        return []
    key = _host(run)
    return [r for r in store.runs_labelled(run.label)
            if r.kind == "quality" and r.id not in exclude and r.id != run.id and _host(r) == key]


def _sampled(r: RunRow) -> bool:
    return bool(((Manifest.from_dict(r.manifest).workload or {}).get("temperature")) or 0)


@dataclass(slots=True)
class Floor:
    """The noise floor: per task, the agreement of one host's two runs (None: no repeat was found)."""

    runs: tuple[str, str] | None
    tasks: dict[str, Agreement]
    given: bool = False  # named by --floor, not found
    one_host: bool = False  # A and B are one host run twice: what they show is that host's floor

    def describe(self, names: dict[str, str]) -> str:
        if self.runs is None and self.one_host:
            return ("A and B are one host run twice (same label, server, model and settings), so this comparison "
                    "measures its noise floor; held against the assumed floor (every greedy output identical), "
                    "as no third run of it is in the store")
        if self.runs is None:
            return ("no second run of either host in the store: the floor is assumed, as greedy decoding on one "
                    "host repeats itself (every output identical); run a host twice to measure it")
        a, b = self.runs
        how = "given by --floor" if self.given else "same label, server, model and settings"
        return f"the floor: {names.get(a, a)} run twice ({a} and {b}: {how})"


#: Repeats of a host tried for one with outputs in common (a knob check of the same host has none).
REPEATS_TRIED = 10


def _floor_tasks(store: Store, a: RunRow, b: RunRow) -> dict[str, Agreement]:
    tasks = compare_items(load_items(store, a.id), load_items(store, b.id))
    return {tc.task: tc.agreement for tc in tasks if tc.agreement is not None}


def find_floor(store: Store, ra: RunRow, rb: RunRow, floor: RunRow | None = None) -> Floor:
    """The same host twice: ``floor`` against the run it repeats (A's host unless it is only B's), or the newest
    repeat of A's host in the store that kept outputs of the same items, else of B's; no floor without one."""
    if floor is not None:
        base = rb if _host(floor) == _host(rb) and _host(floor) != _host(ra) else ra
        return Floor((base.id, floor.id), _floor_tasks(store, base, floor), True)
    for run in (ra, rb):
        for again in repeats(store, run, (ra.id, rb.id))[:REPEATS_TRIED]:
            tasks = _floor_tasks(store, run, again)
            if tasks:
                return Floor((run.id, again.id), tasks)
    return Floor(None, {}, one_host=_host(ra) == _host(rb))


def judge_tasks(tasks: list[TaskComparison], floor: Floor, sampled: bool) -> None:
    """Each task's agreement judged against the floor's agreement on the same task."""
    for tc in tasks:
        if tc.agreement is None:
            continue
        own = floor.tasks.get(tc.task)
        if floor.runs is not None and own is None:  # a repeat without this quality task: no measured floor for it
            tc.notes.append("the floor's runs did not keep the outputs of this quality task: its floor is assumed")
        tc.agreement_verdict = judge(tc.agreement, own, floor.runs if own else None, sampled)


@dataclass(slots=True)
class Overall:
    """One verdict over every task: the line `quality compare` prints first."""

    same: bool  # no task differs and no output differs (the only case the line says "same")
    text: str
    judged: bool = True  # False: nothing asked in both runs was answered in either, so no verdict at all

    def to_dict(self) -> dict[str, Any]:
        return {"same": self.same, "text": self.text}


def overall(tasks: list[TaskComparison], name_a: str, name_b: str) -> Overall:
    """Differences first (scores where one run is better, outputs that differ beyond the floor); "same within
    noise" only when there is none and every paired output is identical; otherwise "no difference beyond
    noise", with the outputs that do differ counted."""
    if not any(tc.scores is not None or tc.agreement is not None for tc in tasks):
        return Overall(False, "no verdict: no item was answered in either run and asked in both (a different "
                              "--seed, --api, contexts or --items, or a server that failed them)", judged=False)
    found = _differences(tasks, name_a, name_b)
    if found:
        return Overall(False, f"{name_b} differs from {name_a}: " + "; ".join(found))
    differing = [f"{tc.task} {100 * tc.scores.mean_a:.1f} vs {100 * tc.scores.mean_b:.1f} points (p = "
                 f"{tc.scores.p_value:.2g})" for tc in tasks if tc.scores is not None and tc.scores.diff_points]
    differing += [f"{tc.task}: {_agree_text(tc.agreement, tc.agreement_verdict)}" for tc in tasks
                  if tc.agreement is not None and tc.agreement_verdict is not None and tc.agreement.differ]
    unjudged = [tc.task for tc in tasks if tc.agreement_verdict is not None and tc.agreement_verdict.p_value is None]
    tail = (f"; no verdict on the outputs of {', '.join(unjudged)}: sampled (temperature > 0) with no repeat to "
            "measure the floor" if unjudged else "")
    if differing:
        return Overall(False, "no difference beyond noise: " + "; ".join(differing) + tail)
    if unjudged:
        return Overall(False, "no difference shown" + tail)
    return Overall(True, "same within noise on every task" + (", every paired output identical"
                                                               if any(tc.agreement for tc in tasks) else ""))


def _differences(tasks: list[TaskComparison], name_a: str, name_b: str) -> list[str]:
    """What differs beyond noise: a task's scores, or its outputs beyond the floor."""
    found: list[str] = []
    for tc in tasks:
        s, g, v = tc.scores, tc.agreement, tc.agreement_verdict
        if s is not None and s.verdict != "same within noise":
            found.append(f"{s.verdict_for(name_a, name_b)} on {tc.task} ({100 * s.mean_a:.1f} vs "
                         f"{100 * s.mean_b:.1f} points, p = {s.p_value:.2g})")
        if g is not None and v is not None and v.verdict == "different":
            found.append(f"{tc.task}: {_agree_text(g, v)}")
    return found


def _agree_text(g: Agreement | None, v: AgreementVerdict | None) -> str:
    """"8 of 16 outputs identical (8 differ, 8 from the first token) against 16 of 16 for a host run twice
    (p = 0.0024)"."""
    if g is None:
        return ""
    first = f" ({g.differ} differ, {g.differ_first} from the first {g.unit[:-1]})" if g.differ_first else ""
    text = f"{g.identical} of {g.n} outputs identical{first}"
    if v is None or v.p_value is None:
        return text
    floor = "assumed for a host run twice" if v.assumed else "for a host run twice"
    return text + f" against {v.floor_n - v.floor_differ} of {v.floor_n} {floor} (p = {v.p_value:.2g})"


def compare_runs(store: Store, ref_a: str, ref_b: str, latest: bool = False,
                 ref_floor: str | None = None) -> tuple[RunRow, RunRow, list[TaskComparison], Floor]:
    """(run A, run B, per task comparisons, the noise floor) of two stored quality runs; ``ref_floor`` names a
    repeat of A's (or B's) host as the floor, else one is looked for."""
    ra = store.resolve(ref_a, latest, ("quality",), "quality compare")
    rb = store.resolve(ref_b, latest, ("quality",), "quality compare")
    if ra.id == rb.id:
        raise UsageError(f"'{ref_a}' and '{ref_b}' are the same run ({ra.id}): compare two runs")
    rf = store.resolve(ref_floor, latest, ("quality",), "quality compare --floor") if ref_floor else None
    if rf is not None and rf.id in (ra.id, rb.id):
        raise UsageError(f"--floor {ref_floor} is run {rf.id}, one of the two compared: give a third run, of A's "
                         "host run again")
    la, lb = ra.label or ra.id, rb.label or rb.id
    if la == lb:
        la, lb = ra.id, rb.id
    apart = settings_apart(ra, rb)
    if apart:
        raise UsageError(apart.refusal(la, lb))
    why = _floor_apart(rf, ref_floor or "", {la: ra, lb: rb}) if rf is not None else None
    if why:
        raise UsageError(why)
    items_a, items_b = load_items(store, ra.id), load_items(store, rb.id)
    cmp = compare_items(items_a, items_b)
    if not cmp:
        ta, tb = sorted({i.task for i in items_a}), sorted({i.task for i in items_b})
        raise UsageError(f"runs {ra.id} ({', '.join(ta) or 'no items'}) and {rb.id} ({', '.join(tb) or 'no items'}) "
                         "have no task in common")
    floor = find_floor(store, ra, rb, rf)
    judge_tasks(cmp, floor, _sampled(ra) or _sampled(rb))
    return ra, rb, cmp, floor


@dataclass(slots=True)
class Beside:
    """The quality of two boxes, as a speed comparison shows it: their newest quality runs under the same
    labels as the speed runs, compared task by task; or, made with different request settings, not compared
    (``apart``: no task, and one line that says why)."""

    run_a: str
    run_b: str
    tasks: list[TaskComparison]
    apart: Apart | None = None

    def lines(self, name_a: str, name_b: str) -> list[str]:
        if self.apart is not None:
            return [self.apart.no_verdict()]
        out = []
        for tc in self.tasks:
            # a task's score and its outputs each have a verdict: both said, as quality compare says them (a
            # line of the score alone read "same within noise" where the outputs differed beyond the floor)
            said = []
            if tc.scores is not None:
                s = tc.scores
                said.append(f"{s.verdict_for(name_a, name_b)} ({100 * s.mean_a:.1f} vs {100 * s.mean_b:.1f} "
                            f"points, p = {s.p_value:.2g}, {s.n} items)")
            if tc.agreement is not None:
                v = tc.agreement_verdict
                what = "different" if v and v.verdict == "different" else \
                    "within noise" if v and v.verdict == "within noise" else "no floor (sampled, no repeat)"
                said.append(f"outputs {what}: {_agree_text(tc.agreement, v)}")
            if said:
                out.append(f"{tc.task}: " + "; ".join(said))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"quality_run_a": self.run_a, "quality_run_b": self.run_b, "tasks": [t.to_dict() for t in self.tasks],
                "no_verdict": self.apart.no_verdict() if self.apart is not None else None}


def newest_quality_run(store: Store, label: str | None) -> RunRow | None:
    """The newest quality run with this label (a speed run and the quality run of the same box share it)."""
    if not label:
        return None
    rows = [r for r in store.runs_labelled(label) if r.kind == "quality"]
    return rows[0] if rows else None


def beside(store: Store, label_a: str | None, label_b: str | None) -> Beside | None:
    """Quality beside speed: None unless both labels have a quality run with a task in common; two made with
    different request settings are not compared (no task, ``apart`` says why)."""
    qa, qb = newest_quality_run(store, label_a), newest_quality_run(store, label_b)
    if qa is None or qb is None or qa.id == qb.id:
        return None
    tasks = compare_items(load_items(store, qa.id), load_items(store, qb.id))
    if not tasks:
        return None
    apart = settings_apart(qa, qb)
    if apart is not None:
        return Beside(qa.id, qb.id, [], apart)
    judge_tasks(tasks, find_floor(store, qa, qb), _sampled(qa) or _sampled(qb))
    return Beside(qa.id, qb.id, tasks)
