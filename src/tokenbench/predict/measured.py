"""Rows in the published.csv layout (src/tokenbench/data/published.csv): one measured figure per row."""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import registry
from ..errors import UsageError
from ..finding import Code
from ..guard_results import WARN
from ..levels import DepthLevel, LevelSummary, ServingLevel

#: A row's date: the year and month the measurement (or the build it ran) is from.
DATE = re.compile(r"\d{4}(-\d{2})?")

if TYPE_CHECKING:
    from ..records import RequestRecord
    from ..results import RunResult

COLUMNS = ["source", "host", "hardware", "engine", "model", "weights", "kv", "test", "depth", "concurrency",
           "input_len", "output_len", "metric", "value", "unit", "date", "version", "note"]
#: Columns a file may leave out (older files of this layout have neither date nor version).
OPTIONAL = {"date", "version", "note"}
METRICS = {"prefill_tps", "decode_tps", "output_tps", "ttft_median", "ttft_p99", "tpot_median"}


@dataclass(slots=True)
class Row:
    raw: dict[str, str]
    hardware: str
    engine: str
    model: str
    weights: str
    kv: str
    test: str
    depth: int
    concurrency: int
    input_len: int
    output_len: int
    metric: str
    value: float
    unit: str
    date: str = ""  # YYYY-MM the measurement (or the build it ran) is from; "" when the source does not say
    version: str = ""  # the engine's version as the source states it (a llama.cpp build b6123, vLLM 0.10.1)

    @property
    def era(self) -> str:
        """The year of the engine's build, which the fit keeps apart (a 2024 llama.cpp and a 2026 one are not
        one constant): the row's date's year, else its stated version's (registry.version_date), else "" (undated:
        it joins its backend's pooled fit, no era's)."""
        return self.build[:4]

    @property
    def build(self) -> str:
        """The date of the engine's build as precisely as the row says it: its date ("YYYY-MM"), else its stated
        version's (registry.version_date), else ""."""
        if DATE.fullmatch(self.date):
            return self.date
        e = registry.find(self.engine) if self.version else None
        return (registry.version_date(e, self.version) or "") if e is not None else ""

    @property
    def group(self) -> str:
        """decode / prefill / serve: which calibrated quantity the row tests."""
        if self.metric == "prefill_tps":
            return "prefill"
        if self.metric == "decode_tps" or (self.metric == "tpot_median" and self.concurrency == 1):
            return "decode"
        return "serve"


def read_rows(path: Path) -> list[Row]:
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    reader = csv.DictReader(lines)
    missing = [c for c in COLUMNS if c not in OPTIONAL and c not in (reader.fieldnames or [])]
    if missing:
        raise UsageError(f"{path}: missing {'column' if len(missing) == 1 else 'columns'} {', '.join(missing)}; expected the published.csv layout: {','.join(COLUMNS)}")
    rows = []
    for n, d in enumerate(reader, start=2):
        try:
            rows.append(Row(
                raw=dict(d), hardware=d["hardware"], engine=d["engine"], model=d["model"], weights=d["weights"],
                kv=d["kv"], test=d["test"], depth=int(d["depth"] or 0), concurrency=int(d["concurrency"] or 1),
                input_len=int(d["input_len"] or 0), output_len=int(d["output_len"] or 0), metric=d["metric"],
                value=float(d["value"]), unit=d["unit"], date=(d.get("date") or "").strip(),
                version=(d.get("version") or "").strip(),
            ))
            if rows[-1].date and not DATE.fullmatch(rows[-1].date):
                raise ValueError(f"date {rows[-1].date!r} is not YYYY-MM")
        except (TypeError, ValueError) as e:
            raise UsageError(f"{path}: data row {n - 1} is malformed ({e}): fix that row") from None
    return rows


#: Output lengths that vary by more than this (coefficient of variation) are answers of varying length: the
#: agents' prompts spread over the cycle (queue.py's "spread"), not sent back in bunches.
SPREAD_CV = 0.05


def steady_state(records: list[RequestRecord], concurrency: int) -> tuple[float | None, str]:
    """A serving level's requests as the queue model reads a closed loop (predict/queue.py): the TTFT median of
    the requests sent after the first ``concurrency`` (the start's burst, which the model keeps apart), and a note
    saying so, and "arrivals spread" where the answers' lengths varied (else they came back in bunches)."""
    ok = sorted((r for r in records if r.first_token_ns is not None), key=lambda r: r.sent_ns)
    if not ok:
        return None, ""
    later = ok[concurrency:] if len(ok) >= 2 * concurrency else ok
    ttft = statistics.median((r.first_token_ns or 0) - r.sent_ns for r in later) / 1e6
    outs = [r.output_tokens for r in ok if r.output_tokens]
    spread = len(outs) > 1 and statistics.pstdev(outs) > SPREAD_CV * statistics.fmean(outs)
    kept = f"TTFT median of the {len(later)} sent after the first {concurrency}" if later is not ok else \
        "TTFT median of all"
    return ttft, f"{len(ok)} requests, {kept}" + ("; arrivals spread" if spread else "")


#: A level with one of these flags is not what the box does: calibration leaves it out.
SKIPPED = {"unstable", "dirty_bench", "host_unchecked", "context_not_warm", "client_bound", "errors",
           "exceeds_server_timings", "prompt_truncated", "slots_exceeded", "unanswered"}


def _shape(run: RunResult) -> str:
    """What llama-bench's import kept (its micro-batch and flash attention), as a row's note reads it."""
    ex = run.manifest.extra
    return (f" -ub {ex['n_ubatch']}" if isinstance(ex.get("n_ubatch"), int) else "") + \
        (" -fa 0" if ex.get("flash_attn") is False else "")


def _month(run: RunResult) -> str:
    """The run's month: the build it ran is of that era or older ("" when the run says no date)."""
    date = (run.manifest.started or "")[:7]
    return date if DATE.fullmatch(date) else ""


def _depth_row(s: DepthLevel, depth: int, note: str, add: Callable[..., None]) -> None:
    """A pp or tg test of one stream as a prefill or decode rate; a batch's total rate (llama-benchy's c2) is none."""
    if (s.concurrency or 1) > 1 or not s.test or not s.test[2:].isdigit():
        return
    if s.test.startswith("pp"):
        add(s.test, depth, 1, int(s.test[2:]), 0, "prefill_tps", s.pp_tps, "tok/s", note)
    elif s.test.startswith("tg"):
        add(s.test, depth, 1, 0, int(s.test[2:]), "decode_tps", s.tg_tps, "tok/s", note)


#: an agent session level's cache mode, in a part of a row's note ("cache warm"): published.csv has no column for it
CACHE_NOTE = re.compile(r"cache (warm|busted)")


def cache_note(mode: str) -> str:
    """The part of a row's note that says its level's cache mode (read back by ``cache_mode``)."""
    return f"cache {mode}"


def cache_mode(r: Row) -> str:
    """The cache mode a row's note names ("warm", "busted"), or "": the one thing that tells an agent count's warm
    level from its busted one where both round to the same prompt length."""
    return next((m.group(1) for part in (r.raw.get("note") or "").split(";")
                 if (m := CACHE_NOTE.fullmatch(part.strip().lower()))), "")


#: The parts of an exported row's note that say its level's state, which published.csv has no column for:
#: its guard stamp (before the shape llama-bench ran, `` -ub 512``), flags, requests and errors by kind.
GUARD_NOTE = re.compile(r"(guard clean|no guard|guard dirty: (.*?))((?: -ub \d+| -fa 0)*)")
#: the checks at severity warn that did not pass: a clean guard's (or a dirty one's) warnings
WARNED_NOTE = re.compile(r"guard warnings: (.*)")
FLAGS_NOTE = re.compile(r"flags: (.*)")
REQUESTS_NOTE = re.compile(r"requests: (\d+) completed, (\d+) failed")
ERRORS_NOTE = re.compile(r"errors: (.*)")
ERROR = re.compile(r"([\w.-]+) (\d+)")
NOT_WORD = re.compile(r"[^\w.-]+")
#: the guard stamp of a dirty level whose snapshot named no failed check
NO_CHECK = "a check failed"


@dataclass(frozen=True, slots=True)
class LevelNote:
    """A level's state as its rows' note says it (``level_note`` writes it, ``note_state`` reads it back):
    ``guard`` "clean", "dirty" or "none" ("" where the note does not say), the checks a dirty guard failed, the
    flags, the requests answered and failed (None where not said), the errors by kind, and the checks that warned
    (``warned``: a guard clean or dirty)."""

    guard: str = ""
    checks: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    completed: int | None = None
    failed: int | None = None
    errors: tuple[tuple[str, int], ...] = ()
    warned: tuple[str, ...] = ()


def guard_note(s: LevelSummary) -> str:
    """A level's guard stamp, in words: clean, or the checks that failed before it, or no guard."""
    g = s.guard
    if g is None:
        return "no guard"
    if g.clean:
        return "guard clean"
    return "guard dirty: " + (", ".join(c.name for c in g.failed) or NO_CHECK)


def level_note(s: LevelSummary) -> list[str]:
    """The parts of a row's note after its guard stamp that say its level's state: the checks that warned (a
    clean guard's warnings, which its stamp does not say), its flags, the requests it answered and failed, and the
    errors by kind (a cut request is one: ``level_end``, ``interrupted``)."""
    warned = [c.name for c in s.guard.results if c.status == WARN] if s.guard is not None else []
    out = [f"guard warnings: {', '.join(warned)}"] if warned else []
    out += [f"flags: {' '.join(s.flags)}"] if s.flags else []
    if s.completed or s.failed:
        out.append(f"requests: {s.completed} completed, {s.failed} failed")
    if s.errors:  # a foreign file's error kind may hold any text: a word of the note's own characters
        out.append("errors: " + ", ".join(f"{NOT_WORD.sub('_', k) or 'error'} {n}"
                                          for k, n in sorted(s.errors.items())))
    return out


def note_state(r: Row) -> LevelNote:
    """The level state a row's note says (``level_note``'s parts and the guard stamp); a part of another shape
    is the note's own text, read as nothing. Raises ValueError for a flag tokenbench does not know."""
    guard = ""
    checks: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    counts: tuple[int | None, int | None] = (None, None)
    errors: tuple[tuple[str, int], ...] = ()
    warned: tuple[str, ...] = ()
    for part in (p.strip() for p in (r.raw.get("note") or "").split(";")):
        if m := GUARD_NOTE.fullmatch(part):
            guard = "clean" if m.group(1) == "guard clean" else "none" if m.group(1) == "no guard" else "dirty"
            checks = tuple(c for c in (m.group(2) or "").split(", ") if c and c != NO_CHECK)
        elif m := WARNED_NOTE.fullmatch(part):
            warned = tuple(c for c in m.group(1).split(", ") if c)
        elif m := FLAGS_NOTE.fullmatch(part):
            flags = tuple(m.group(1).split())
            for flag in flags:
                try:
                    Code(flag)
                except ValueError:
                    raise ValueError(f"its note's flag {flag[:40]!r} is no flag tokenbench knows") from None
        elif m := REQUESTS_NOTE.fullmatch(part):
            counts = (int(m.group(1)), int(m.group(2)))
        elif (m := ERRORS_NOTE.fullmatch(part)) and all(ERROR.fullmatch(e) for e in m.group(1).split(", ")):
            errors = tuple((k, int(n)) for k, n in (e.rsplit(" ", 1) for e in m.group(1).split(", ")))
    return LevelNote(guard, checks, flags, *counts, errors, warned)


def rows_measured_clean(rows: list[Row]) -> tuple[list[Row], int]:
    """The rows whose note does not say their level was flagged (``SKIPPED``) or measured on a dirty machine, as
    an export writes it (``level_note``), and how many were left out. A note that names an unknown flag is read as
    saying nothing (a foreign file's words)."""
    kept = []
    for r in rows:
        try:
            state = note_state(r)
        except ValueError:
            kept.append(r)
            continue
        if state.guard != "dirty" and not SKIPPED & set(state.flags):
            kept.append(r)
    return kept, len(rows) - len(kept)


def run_rows(run: RunResult, hardware: str, engine: str, model: str, weights: str, kv: str,
             requests: dict[int, list[RequestRecord]] | None = None, p99: bool = False,
             flagged: bool = False) -> list[Row]:
    """A stored run's measurements as rows of this layout, so the user's own runs calibrate like published ones:
    pp/tg levels (depth runs, llama-bench imports) as prefill and decode rates at their depth; sweep levels as
    output throughput, median TTFT (``p99``: and its p99) and median TPOT at their concurrency and lengths. Flagged
    levels (unstable, dirty, cold context, client-bound, failed requests) are left out: they are not what the box
    does (``flagged``: kept, for an export, each row's note then saying its level's state in place of the run:
    its guard stamp, flags, requests and errors, which ``note_state`` reads back). Where a level's ``requests`` are
    given (a measured run's, or a tool's per-request export), its TTFT median is the steady state's
    (``steady_state``) and its note says how the answers' lengths varied."""
    label = str(run.manifest.label or run.run_id)
    shape, date = _shape(run), _month(run)
    version = run.manifest.engine_version or ""
    out: list[Row] = []

    def add(test: str, depth: int, conc: int, inp: int, outp: int, metric: str, value: float | None, unit: str,
            note: str) -> None:
        if value is None or not value > 0:
            return
        raw = {"source": f"run:{label}", "host": label, "hardware": hardware, "engine": engine, "model": model,
               "weights": weights, "kv": kv, "test": test, "depth": str(depth), "concurrency": str(conc),
               "input_len": str(inp), "output_len": str(outp), "metric": metric, "value": f"{value:g}",
               "unit": unit, "date": date, "version": version, "note": note}
        out.append(Row(raw, hardware, engine, model, weights, kv, test, depth, conc, inp, outp, metric, value, unit,
                       date, version))

    for o in run.outcomes:
        s = o.summary
        if o.status != "complete" or (SKIPPED & set(s.flags) and not flagged):
            continue
        depth = s.depth or 0
        head = (guard_note(s) if flagged else f"run {run.run_id}") + shape
        state = level_note(s) if flagged else []
        if isinstance(s, DepthLevel):
            _depth_row(s, depth, "; ".join([head, *state]), add)
        elif isinstance(s, ServingLevel) and s.concurrency and s.input_tokens_mean and s.output_tokens_mean:
            inp, outp, c = round(s.input_tokens_mean), round(s.output_tokens_mean), s.concurrency
            # an agent-session level's cache mode has no column: its note says it (warm and busted share the rest)
            mode = cache_note(s.session.cache) if s.session is not None else ""
            ttft, steady = s.ttft_ms.p50, ""
            if requests and requests.get(o.idx):
                ttft, steady = steady_state(requests[o.idx], c)
            note = "; ".join(x for x in (head, mode, steady, *state) if x)
            # the rate the tables show and cost prices: over the level's plateau where it had one, not ramp and drain
            add("serve", depth, c, inp, outp, "output_tps", s.sustained_tps, "tok/s", note)
            add("serve", depth, c, inp, outp, "ttft_median", ttft, "ms", note)
            if p99:
                add("serve", depth, c, inp, outp, "ttft_p99", s.ttft_ms.p99, "ms", note)
            add("serve", depth, c, inp, outp, "tpot_median", s.tpot_ms.p50, "ms", note)
    return out
