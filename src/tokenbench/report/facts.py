"""What a reader needs to trust a run, as readable rows: what ran where, the machine and its state (the
clean-bench guard's snapshots), and the flags its levels carry. Never a raw dict."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..guard_results import FAIL, WARN, GuardSnapshot
from ..levels import LevelSummary, ServingLevel
from ..results import Manifest, RunResult
from .series import is_predicted, pricing
from .style import depth_label
from ..layout import plural
from ..predict.banding import one_line


@dataclass(slots=True)
class GuardState:
    """A run's machine state: how many snapshots, how many dirty, and each check that failed or warned."""

    recorded: int
    dirty: int
    mode: str | None
    #: (where first seen, check, status, what it observed, threshold, advice, in how many snapshots)
    problems: list[tuple[str, str, str, str, str, str, int]]

    def summary(self) -> str:
        if not self.recorded:
            return "guard off" if self.mode == "off" else "not recorded"
        if not self.dirty and not self.problems:
            return f"clean ({plural(self.recorded, 'snapshot')})"
        names = ", ".join(dict.fromkeys(p[1] for p in self.problems))
        if not self.dirty:
            return f"clean with warnings: {names} ({self.recorded} snapshots)"
        return f"DIRTY in {self.dirty} of {self.recorded} snapshots: {names}"


def _snapshots(r: RunResult) -> list[tuple[str, GuardSnapshot]]:
    out: list[tuple[str, GuardSnapshot]] = []
    before = r.manifest.guard_before_run
    if before is not None:
        out.append(("before the run", GuardSnapshot.from_dict(before)))
    out += [(level_name(o.summary), o.summary.guard) for o in r.outcomes if o.summary.guard is not None]
    return out


def guard_state(r: RunResult) -> GuardState:
    snaps = _snapshots(r)
    seen: dict[tuple[str, str], list[Any]] = {}
    dirty = 0
    for where, snap in snaps:
        if snap.dirty:
            dirty += 1
        for c in snap.results:
            if c.status not in (FAIL, WARN):
                continue
            key = (c.name, c.status)
            if key in seen:
                seen[key][-1] += 1
                if c.observed not in seen[key][3]:
                    seen[key][3].append(c.observed)
            else:
                seen[key] = [where, c.name, c.status, [c.observed], c.threshold, c.advice, 1]
    mode = r.manifest.guard
    problems = [(v[0], v[1], v[2], "; ".join(v[3][:3]) + (f"; … {len(v[3]) - 3} more" if len(v[3]) > 3 else ""),
                 v[4], v[5], v[6]) for v in seen.values()]
    return GuardState(len(snaps), dirty, str(mode) if mode else None, problems)


def level_name(s: LevelSummary) -> str:
    test = s.test or "serve"
    if test == "serve":
        what = f"concurrency {s.concurrency}" if s.concurrency else (f"rate {s.rate:g}/s" if s.rate else "serve")
        what += f", {s.session.cache} cache" if isinstance(s, ServingLevel) and s.session is not None else ""
        return what + (f" at depth {depth_label(s.depth)}" if s.depth else "")
    return f"{test} at depth {depth_label(s.depth or 0)}"


def flags(r: RunResult) -> str:
    levels = [o.summary for o in r.outcomes]
    n = Counter(f for s in levels for f in s.flags)
    if not n:
        return "none"
    return ", ".join(f"{f} ({k} of {plural(len(levels), 'level')})" for f, k in n.most_common())


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _machine(m: Manifest) -> str | None:
    """The machine snapshot in words; a field of the wrong type (an old or foreign store) is left out."""
    mc = m.machine
    parts: list[str] = []
    if mc is not None:
        cpu = mc.get("cpu_model")
        if cpu:
            cores = _num(mc.get("cpu_count_logical"))
            parts.append(f"{cpu}" + (f", {cores:g} threads" if cores else ""))
        total, free = _num(mc.get("mem_total_gib")), _num(mc.get("mem_available_gib"))
        if total is not None:
            parts.append(f"{total:g} GiB RAM" + (f" ({free:g} GiB free)" if free is not None else ""))
        found = mc.get("gpus")
        gpus = found if isinstance(found, list) else []
        for g in gpus:
            if isinstance(g, dict):
                parts.append(f"{g.get('name')} ({g.get('memory_total_mib')} MiB, driver {g.get('driver')})")
        if not gpus:
            parts.append("no NVIDIA GPU seen")
        load = mc.get("load_avg")
        if isinstance(load, list) and load and _num(load[0]) is not None:
            parts.append(f"load average {_num(load[0]):.1f} at the start")
        if mc.get("hostname"):
            parts.append(f"host {mc['hostname']}")
    for value, what in ((m.gpu, "GPU"), (m.cpu, "CPU")):  # imported llama-bench results
        if value:
            parts.append(f"{what}: {value}")
    return "; ".join(parts) or None


#: A session workload's draws (sessions.SessionPlan.to_dict: each with the text it states), in words.
_SESSION_DRAWS = (("task", "task"), ("tool", "tool results"), ("output", "answers"), ("think", "think"))
#: Keys said in their own words, or a prediction's means of those draws (predict.session.SessionShape.workload),
#: which the draws' text already states; any other parameter is named as given.
_SESSION_KEYS = ("kind", "turns", "shared_prefix", "sessions", "max_context", "on_cap", "baseline", "input_len",
                 "tool_len", "output_len", "think_time_s", *(k for k, _ in _SESSION_DRAWS))


def _session_workload(wl: dict[str, Any]) -> str:
    """An agent-session workload: sessions and turns, the shared prefix, each draw as its text, the context cap,
    and any other parameter as given."""
    turns, prefix, n = _num(wl.get("turns")), _num(wl.get("shared_prefix")), _num(wl.get("sessions"))
    out = (f"{n:g} agent sessions" if n else "agent sessions") + (f" of {turns:g} turns" if turns else "")
    if prefix:
        out += f", {prefix:,.0f}-token shared prefix"
    for key, word in _SESSION_DRAWS:
        d = wl.get(key)
        if isinstance(d, dict) and isinstance(d.get("text"), str) and d["text"]:
            out += f", {word} {d['text']}"
    if cap := _num(wl.get("max_context")):
        out += f", context capped at {cap:,.0f}" + (f" ({wl['on_cap']})" if isinstance(wl.get("on_cap"), str) else "")
    if isinstance(bg := wl.get("background"), dict) and _num(bg.get("rate")):  # a batch load beside them
        out += (f", beside {_num(bg.get('rate')):g} req/s of unique {_num(bg.get('input_len')) or 0:,.0f}-token "
                f"prompts ({_num(bg.get('output_len')) or 0:,.0f} out)")
    rest = [f"{str(k).replace('_', ' ')} {v}" for k, v in wl.items()
            if k not in _SESSION_KEYS and isinstance(v, (str, int, float)) and not isinstance(v, bool) and v != ""]
    return out + "".join(f", {x}" for x in rest)


def _trace_workload(trace: dict[str, Any]) -> str:
    """A trace replay's workload: the trace, its requests, and their mean lengths (the manifest's input_len and
    output_len are the trace's longest, which no request need have sent together)."""
    n = _num(trace.get("requests"))
    out = f"trace {trace.get('path')}"
    speed = _num(trace.get("speed"))
    if speed and speed != 1:
        out += f" at x{speed:g} its recorded times"
    if not n:
        return out
    out += f": {plural(int(n), 'request')}"
    ins, outs = _num(trace.get("input_tokens")), _num(trace.get("output_tokens"))
    if ins is not None and outs is not None:
        out += f", mean {ins / n:,.0f} in / {outs / n:,.0f} out tokens per request"
    return out


def _dataset_workload(ds: dict[str, Any], wl: dict[str, Any]) -> str:
    """A dataset's workload: the file, the items it sent, and where their output lengths came from."""
    out = f"dataset {ds.get('path')}"
    used = _num(ds.get("used"))
    if used:
        out += f": {plural(int(used), 'prompt')}"
    given, limit = _num(ds.get("output_from_file")), _length(wl.get("output"), wl.get("output_len"))
    if given and used and given >= used:
        return out + ", each with its own output length"
    return out + (f", {limit} tokens out" + (" where an item gives none" if given else ""))


def _length(drawn: object, fixed: object) -> str:
    """A length as the run drew it ("uniform 32-128"), or the fixed length."""
    text = drawn.get("text") if isinstance(drawn, dict) else None
    if isinstance(text, str) and text:
        return text
    v = _num(fixed)
    return f"{v:,.0f}" if v else "?"


def workload(r: RunResult) -> str | None:
    wl = r.manifest.workload or {}
    if wl.get("kind") == "sessions":
        return _session_workload(wl)
    if isinstance(wl.get("trace"), dict):
        return _trace_workload(wl["trace"])
    if isinstance(wl.get("dataset"), dict):
        return _dataset_workload(wl["dataset"], wl)
    if not _num(wl.get("input_len")):
        return None
    # drawn lengths as drawn: input_len and output_len are then the draws' expected values
    out = f"{_length(wl.get('input'), wl['input_len'])} in / {_length(wl.get('output'), wl.get('output_len'))} out " \
          "tokens per request"
    if wl.get("shape"):
        out += f" ({wl['shape']})"
    if _num(wl.get("prefix_len")):
        out += f", {wl['prefix_len']:,}-token shared prefix"
    return out


def source(r: RunResult) -> str:
    if r.predicted_mark:
        return r.predicted_mark
    prov = r.manifest.provenance or "measured"
    tool = r.manifest.tool
    return f"{prov} ({tool})" if prov == "imported" and tool else prov


#: The rows of the side-by-side table, in order.
ROWS = ("Source", "Bands", "Model", "Weights", "Engine", "Hardware", "Machine", "Machine state", "Flags", "Workload",
        "Levels", "Endpoint", "Price", "Started", "Run id")


def facts(r: RunResult, price_per_hour: float | None = None, currency: str | None = None) -> dict[str, str]:
    """The side-by-side table's cells for one run; a fact not known is absent."""
    m = r.manifest
    engine = " ".join(str(x) for x in (m.engine, m.engine_version) if x)
    if m.backend:
        engine += f" ({m.backend})"
    engine += "".join(f", {part}" for part in m.shape_parts)
    hw = m.box or m.host
    p = pricing(r, price_per_hour, currency)
    levels = [o.summary for o in r.outcomes]
    out = {
        "Source": source(r),
        "Bands": one_line(m.bands) if m.bands else m.bands,  # a prediction's, as predict printed them
        "Model": m.model,
        "Weights": " / ".join(x for x in (m.weights, f"kv {str(m.kv).lower()}" if m.kv else None) if x),
        "Engine": engine,
        "Hardware": hw,
        "Machine": _machine(m),
        "Machine state": None if is_predicted(r) else guard_state(r).summary(),
        "Flags": flags(r),
        "Workload": workload(r),
        "Levels": f"{len(levels)}: " + ", ".join(level_name(s) for s in levels[:6])
                  + (f", … {len(levels) - 6} more" if len(levels) > 6 else "") if levels else "none",
        "Endpoint": m.endpoint,
        "Price": p.describe() if p else None,
        "Started": m.started,
        "Run id": r.run_id,
    }
    return {k: str(v) for k, v in out.items() if v}


@dataclass(frozen=True, slots=True)
class CapacityWords:
    """A capacity search's answer as the command printed it: its sentences, the lines under them, its levels'
    verdicts (a table) and what "Sure" means."""

    sentences: list[str]
    details: list[str]
    header: list[str]
    rows: list[list[str]]
    legend: str


def capacity_answer(r: RunResult) -> CapacityWords | None:
    """A capacity search's answer in words; None for other runs."""
    if not r.manifest.capacity:
        return None
    from ..capacity import SURE_LEGEND, answer
    from ..capacity_text import answer_lines, verdict_table

    found = answer(r)
    if found is None:
        return None
    return CapacityWords(*answer_lines(found), *verdict_table(found), SURE_LEGEND)
