"""The read commands of the store: `runs` lists the runs, `show` prints one again as the command that made it did
(a sweep's and a cold start's tables from printing.py, depth's from depth_table.py, a quality run's from quality.py,
a capacity search's answer from capacity.py)."""
from __future__ import annotations

import argparse
import sys

from rich.console import Console

from ..money import DEFAULT_CURRENCY
from ..errors import UsageError
from ..cells import level_label
from ..guard_results import GuardSnapshot
from ..levels import DepthLevel, LevelSummary, ServingLevel, serving
from ..console import print_table
from ..describe import describe_run, imported_line
from .predicting import print_band_note
from ..sweep_table import print_sweep
from ..results import Manifest, RunResult
from ..reader import load_result
from ..store import Store
from .common import check_output, emit_json, saved, write_json
from ..depth_table import depth_notes, depth_rows
from .guard import print_guard
from .printing import print_boots, print_result


def _kind(stored: str, m: Manifest) -> str:
    """The command that made a run, as a user typed it: a capacity search is stored as the sweep it ran (its
    manifest says how it searched), and read "sweep" in the list."""
    if stored == "sweep" and m.capacity:
        return "capacity"
    return stored


def cmd_runs(a: argparse.Namespace, console: Console) -> int:
    check_output(a.json, "--json")
    store = Store(a.db, readonly=True)
    rows = store.runs(a.limit)
    counts = store.level_counts([r.id for r in rows])
    manifests = {r.id: Manifest.from_dict(r.manifest) for r in rows}
    if a.json:
        # kind: as stored (a capacity search is the sweep it ran); command: the one that made it, as the table says
        emit_json(a.json, [{"run_id": r.id, "started": r.started, "kind": r.kind,
                            "command": _kind(r.kind, manifests[r.id]), "label": r.label,
                            "model": manifests[r.id].model, "engine": manifests[r.id].engine,
                            "levels": counts.get(r.id, 0), "status": r.status} for r in rows])
    if not rows:
        console.print(f"no runs in {store.path}", markup=False)
        return 0
    header = ["Run", "Started", "Kind", "Label", "Model", "Engine", "Levels", "Status"]
    cells = [[r.id, started_cell(r.started), _kind(r.kind, manifests[r.id]), r.label or "",
              model_cell(manifests[r.id].model or ""), manifests[r.id].engine or "", str(counts.get(r.id, 0)),
              r.status] for r in rows]
    # what every run shares goes above the table; a run id is never cut (show and compare take it), and where the
    # table cannot fit a narrow terminal with both, the start it holds stands for the Started column; then the
    # engine and the level count go, which show says (runs of several kinds, labels and models were one block of 8
    # lines each at 80 columns)
    said = all(cell[1] == id_started(r.id) for r, cell in zip(rows, cells))
    spare = [(1, "Started: the date and time in each run id (UTC)")] if said else []
    spare += [(k, f"{header[k]} left out at this width: show RUN and --json have it") for k in (5, 6)]
    print_table(console, header, cells, keep=(0,), spare=spare)
    return 0


#: the widest a model served from a local directory is written in the runs table
MODEL_PATH_CELL = 24


def model_cell(model: str) -> str:
    """A model as the runs table writes it: a local directory (a server that names its model by the path it
    loaded, as Transformers' does) by its last parts, "…/tiny-llama-v2/hf", so the table still fits 80 columns;
    a hub id or a served name whole (``show`` and ``--json`` keep the path)."""
    if not model.startswith(("/", "~")) or len(model) <= MODEL_PATH_CELL:
        return model
    parts = model.rstrip("/").split("/")
    tail = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + len(tail) + 3 > MODEL_PATH_CELL:
            break
        tail = f"{part}/{tail}"
    return "…/" + tail


def id_started(run_id: str) -> str | None:
    """The minute a run id says its run started ("20261202-103941-1a30": "2026-12-02 10:39Z"), as ``started_cell``
    writes it; None for an id that does not start with one."""
    import datetime as dt

    try:
        start = dt.datetime.strptime(run_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        return None
    return started_cell(start.isoformat())


def started_cell(started: str | None) -> str:
    """When a run started, to the minute ("2026-11-25 08:59Z": in UTC where the time says its zone; the run id
    has the seconds)."""
    import datetime as dt

    try:
        t = dt.datetime.fromisoformat(started or "")
    except ValueError:
        return started or ""
    if t.tzinfo is None:
        return t.strftime("%Y-%m-%d %H:%M")
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%MZ")


#: show prints at most this many levels unless --all: a 200,000-level import took 290 s to print.
SHOW_LEVELS = 200


def cmd_show(a: argparse.Namespace, console: Console) -> int:
    check_output(a.json, "--json")
    store = Store(a.db, readonly=True)
    row = store.resolve(a.run, a.latest)
    total = store.level_counts([row.id]).get(row.id, 0)
    res = load_result(store, row.id, None if a.all else SHOW_LEVELS)
    if a.guard is not None:
        return _show_guard(a, console, res)
    if a.trees is not None:
        return _show_trees(a, console, res, store)
    _say_imported(console, res, a.format)
    if res.kind == "quality":
        from .quality import print_quality_run

        print_quality_run(console, res, store, a.format, "from")
        if a.json:
            write_json(a.json, res)
        return 0
    if res.kind == "predict":
        from ..predict.runs import headline

        console.print(f"{headline(res.manifest)}: not measured", markup=False, highlight=False,
                      style=None if res.manifest.calibrated is not False else "yellow")
    _show_levels(a, console, res, store)
    if res.kind == "predict" and res.manifest.bands:  # how far to trust it, as predict said under its table
        print_band_note(console, res.manifest.bands, a.format, "dim")
    if len(res.outcomes) < total:
        console.print(f"showing the first {len(res.outcomes):,} of {total:,} levels: --all prints every one, "
                      "--json FILE writes them", style="yellow", markup=False, highlight=False)
    if res.error:
        console.print(f"this run ended early: {res.error}", style="yellow", markup=False, highlight=False)
    if a.json:
        whole = res if len(res.outcomes) == total else load_result(store, row.id)
        if whole.manifest.capacity:  # the search's answer too, as capacity --json wrote it
            from .capacity import capacity_json

            emit_json(a.json, capacity_json(whole))
        else:
            write_json(a.json, whole)
    return 0


def _show_levels(a: argparse.Namespace, console: Console, res: RunResult, store: Store) -> None:
    """A run's levels as its kind prints them: a cold start's boots, a depth run's pp/tg table (and a published
    run's serving levels beside it), a sweep's table with its capacity answer; or that nothing finished."""
    if res.kind == "coldstart":
        print_boots(console, res, a.format)
        saved(console, res, store.path, a.format, "from")
    elif not res.outcomes and res.status != "running":  # an empty table's headings said nothing of why
        console.print(describe_run(res.manifest), style="dim", markup=False, highlight=False)
        console.print(f"no {'depth' if res.kind == 'depth' else 'level'} finished before the run ended",
                      style="yellow", markup=False, highlight=False)
        saved(console, res, store.path, a.format, "from")
    elif any(isinstance(o.summary, DepthLevel) for o in res.outcomes):
        # pp/tg at depths (depth runs, llama-bench and published imports, predicted depths): their own table;
        # a published run that also has serving levels gets the sweep table for those as well
        from dataclasses import replace

        serve = serving(o.summary for o in res.outcomes)
        bench = replace(res, outcomes=[o for o in res.outcomes if isinstance(o.summary, DepthLevel)])
        console.print(describe_run(res.manifest), style="dim", markup=False, highlight=False)
        print_table(console, *depth_rows(bench), a.format, keep=(1, 3))  # the model said once, above
        for line in depth_notes(bench):
            console.print(line, style="yellow", markup=False, highlight=False)
        if serve:
            print_sweep(console, serve, res.manifest.currency or DEFAULT_CURRENCY,
                        f"{res.predicted_mark} (not measured)" if res.predicted_mark else "serving",
                        res.kind == "predict")
        saved(console, res, store.path, a.format, "from")
    else:
        print_result(console, res, a.format, store.path, "from")
        _show_capacity(console, res, a.format)


def _say_imported(console: Console, res: RunResult, fmt: str) -> None:
    """An imported run's first line: the file it came from and its format (its figures are another tool's). Markdown
    is the table alone, to be pasted: there the line goes to stderr, as the line saying where the run is stored."""
    if (came := imported_line(res.manifest)) is None:
        return
    if fmt == "markdown":
        print(came, file=sys.stderr)
    else:
        console.print(came, style="dim", markup=False, highlight=False)


def _show_capacity(console: Console, res: RunResult, fmt: str) -> None:
    """A capacity search's answer, as the command printed it."""
    if not res.manifest.capacity:
        return
    from ..capacity import answer
    from .capacity import print_capacity

    if (found := answer(res)) is not None:
        print_capacity(console, found, fmt)


def _show_guard(a: argparse.Namespace, console: Console, res: RunResult) -> int:
    """The guard's snapshots before each level (or level ``--guard K``): what a dirty_bench warning points at. A
    level that ran with an agent on the server host, or with Ray nodes, has a snapshot of each machine, each named."""
    levels = [(i + 1, o, _machines(o.summary)) for i, o in enumerate(res.outcomes)]
    snaps = [(k, o, m) for k, o, m in levels if m]
    if a.guard:
        if not res.outcomes:  # a cold start's boots, an import of no level: "has levels 1..0"
            raise UsageError(f"--guard {a.guard}: run {res.run_id} has no levels (a {res.kind} run): show it without "
                             "a level number")
        if not 1 <= a.guard <= len(res.outcomes):
            raise UsageError(f"--guard {a.guard}: run {res.run_id} has levels 1..{len(res.outcomes)}")
        snaps = [(k, o, m) for k, o, m in snaps if k == a.guard]
    if not snaps:
        console.print(f"run {res.run_id} stored no guard snapshot" + (f" for level {a.guard}" if a.guard else "")
                      + " (it ran with --guard off, or was imported)", markup=False, highlight=False)
        return 0
    for k, o, machines in snaps:
        level = o.level.describe() if o.summary.test in (None, "serve") else f"{o.summary.test} @ d{o.summary.depth}"
        for where, snap in machines:
            on = f", {where}" if len(machines) > 1 or where != CLIENT else ""
            state = ("UNCHECKED (its agent did not answer)" if snap.unchecked else "DIRTY") if snap.dirty else "clean"
            title = f"level {k}/{len(res.outcomes)} ({level}){on}: {state}"
            print_guard(console, snap, a.format, title=title)
    if a.json:
        emit_json(a.json, [{"level": k, "guard": o.summary.guard.to_dict() if o.summary.guard else None,
                            **({"server_guard": o.summary.client.server_guard} if o.summary.client.server_guard
                               else {}),
                            **({"node_guards": o.summary.client.node_guards} if o.summary.client.node_guards
                               else {})} for k, o, _ in snaps])
    return 0


#: Where a level's own guard snapshot was taken: the machine tokenbench ran on.
CLIENT = "this machine (the client)"


def _machines(s: LevelSummary) -> list[tuple[str, GuardSnapshot]]:
    """A level's guard snapshots, each with the machine it describes: this machine's, the server host's (through
    its agent) and each load-generating node's (Ray)."""
    out = [(CLIENT, s.guard)] if s.guard else []
    if isinstance(s.client.server_guard, dict):
        out.append(("the server host", GuardSnapshot.from_dict(s.client.server_guard)))
    for n in s.client.node_guards or []:
        if isinstance(n, dict):
            snap = GuardSnapshot.from_dict(n)
            out.append((f"node {snap.node or '?'}", snap))
    return out


def _show_trees(a: argparse.Namespace, console: Console, res: RunResult, store: Store) -> int:
    """A replay level's trees one by one (each level's, or level ``--trees K``'s): read from its stored calls."""
    from ..replay_trees import tree_notes, tree_rows, tree_table

    levels = [(k, o) for k, o in enumerate(res.outcomes, 1) if o.serving is not None and o.serving.replay is not None]
    if not levels:
        raise UsageError(f"--trees: run {res.run_id} replayed no agent trajectories (a {_kind(res.kind, res.manifest)} "
                         "run): --trees shows the trees of a sweep --trace of recorded agents")
    if a.trees:
        if a.trees not in dict(levels):
            raise UsageError(f"--trees {a.trees}: run {res.run_id} has replay levels "
                             f"{', '.join(str(k) for k, _ in levels)}")
        levels = [(k, o) for k, o in levels if k == a.trees]
    out = []
    for k, o in levels:
        reps = [s for s in [*o.repetitions] or [o.summary] if isinstance(s, ServingLevel)]
        for rep, s in enumerate(reps):
            rows = tree_rows(store.requests(res.run_id, o.idx, rep), s.replay)
            where = f"level {k}/{len(res.outcomes)} ({level_label(s)}" + (f", repetition {rep + 1})" if len(reps) > 1
                                                                          else ")")
            if rows:
                print_table(console, *tree_table(rows), a.format, numeric=True, title=f"{where}: each tree")
            else:  # an import of its figures only: no call stored
                console.print(f"{where}: no call stored", markup=False, highlight=False)
            for line in tree_notes(rows, s.replay):
                console.print(line, style="dim", markup=False, highlight=False)
            out.append({"level": k, "repetition": rep, "trees": [t.to_dict() for t in rows]})
    if a.json:
        emit_json(a.json, out)
    return 0
