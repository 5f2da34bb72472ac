"""Two agent-session runs side by side, turn by turn (``compare_sessions``): TTFT against context, warm and
busted, session time, and what each box's prefix cache bought; a session run beside one that is not is refused."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import session_view
from ..errors import UsageError
from ..levels import ServingLevel
from ..results import RunResult
from ..session_view import BUSTED, WARM
from .levels import band_of, band_range, fast_share, figure, times
from .sides import condition_warnings, model_warnings, run_name

#: Two sides' contexts at a turn closer than this are one context (a chat template or a marker apart).
SAME_CONTEXT = 0.05


@dataclass(slots=True)
class SessionTurn:
    """One turn at one concurrency on both sides: the context each sent and its TTFT p50, warm and busted."""

    turn: int  # as stored: 0 is the first turn
    context_a: float | None
    context_b: float | None
    a_warm_ms: float | None
    a_busted_ms: float | None
    b_warm_ms: float | None
    b_busted_ms: float | None
    #: each side's warm TTFT floor as a share of its figure, where a prediction keeps one (compare.levels._reach)
    warm_fast: tuple[float | None, float | None] = (None, None)

    @property
    def warm_ratio(self) -> float | None:
        """A's warm TTFT over B's: below 1, A's first token came sooner."""
        return self.a_warm_ms / self.b_warm_ms if self.a_warm_ms and self.b_warm_ms else None

    @property
    def busted_ratio(self) -> float | None:
        return self.a_busted_ms / self.b_busted_ms if self.a_busted_ms and self.b_busted_ms else None

    def context(self) -> str:
        """One context where both sides sent about the same, else A's and B's ("48K/51K")."""
        a, b = self.context_a, self.context_b
        if a is None or b is None or abs(a - b) <= SAME_CONTEXT * max(a, b):
            return session_view.tokens(a if a is not None else b)
        return f"{session_view.tokens(a)}/{session_view.tokens(b)}"


@dataclass(slots=True)
class SessionSide:
    """One side's session level at one concurrency and cache mode: what a finished session took."""

    cache: str
    sessions: int
    sessions_finished: int
    session_p50_s: float | None
    session_p90_s: float | None
    cached_share: float | None  # the responses' cached prompt tokens / prompt tokens
    server_hit_share: float | None  # the server's own prefix-cache hit share (/metrics)
    output_tps: float | None
    per_agent_tps: float | None
    output_fast: float | None = None  # a prediction's throughput ceiling as a share of its figure

    @classmethod
    def of(cls, s: ServingLevel) -> SessionSide:
        st = s.session
        assert st is not None
        return cls(st.cache, st.sessions, st.sessions_finished, st.session_s.p50, st.session_s.p90, st.cached_share,
                   st.server_hit_share, s.output_throughput_tps or None, s.per_agent_tps,
                   fast_share("Aggregate output", s))


@dataclass(slots=True)
class SessionBlock:
    """Both sides at one shared concurrency: the turns, each side's levels by cache mode, the cache's gain."""

    concurrency: int
    turns: list[SessionTurn]
    a: dict[str, SessionSide]
    b: dict[str, SessionSide]
    gains: list[str]  # "NAME: turn 20 at 48K context: TTFT 0.31 s cached, 9.8 s uncached (...)"
    #: each side's band (a share of its figure: 0 measured, None a prediction without one) for TTFT, throughput and
    #: the session's time (for which no prediction keeps one)
    bands: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)


@dataclass(slots=True)
class SessionComparison:
    a: str
    b: str
    blocks: list[SessionBlock]
    warnings: list[str] = field(default_factory=list)
    #: what the reader should know that is no fault: a run with no busted baseline by choice, the concurrencies
    #: only one run has (not compared)
    notes: list[str] = field(default_factory=list)

    @property
    def busted(self) -> bool:
        """Whether any block has a busted level on either side (else the tables show warm columns only)."""
        return any(_has_busted(b) for b in self.blocks)


def _has_busted(block: SessionBlock) -> bool:
    return BUSTED in block.a or BUSTED in block.b


def _session_turns(a: RunResult, b: RunResult, c: int) -> list[SessionTurn]:
    ta = {t.turn: t for t in session_view.turn_rows(a, c)}
    tb = {t.turn: t for t in session_view.turn_rows(b, c)}
    out = []
    for k in sorted(set(ta) | set(tb)):
        x, y = ta.get(k), tb.get(k)
        out.append(SessionTurn(k, x.context_tokens if x else None, y.context_tokens if y else None,
                               x.warm_ttft_ms if x else None, x.busted_ttft_ms if x else None,
                               y.warm_ttft_ms if y else None, y.busted_ttft_ms if y else None,
                               (_share(x.warm_ttft_floor_ms, x.warm_ttft_ms) if x else None,
                                _share(y.warm_ttft_floor_ms, y.warm_ttft_ms) if y else None)))
    return out


def _share(limit: float | None, value: float | None) -> float | None:
    """A limit as a share of its figure (None where either is missing)."""
    return limit / value if limit and value else None


#: What shapes a session, as both a measured run's manifest and a prediction's record it: compared where either
#: side has it. Other keys are compared where both sides record them: a prediction also keeps the lengths it used
#: (``input_len``, ``draws``), a measured run how it ran (``on_cap``, ``baseline``), neither a difference of shape.
SESSION_SHAPE = ("turns", "shared_prefix", "task", "tool", "output", "think", "max_context", "background")


def _session_workload_warnings(a: RunResult, b: RunResult) -> list[str]:
    """The session parameters the two runs' manifests give differently (turns, shared prefix, distributions). The
    seed is not one: it picks the words, not the shape, and two runs without --seed always differ in it. Nor are
    the sessions where one side does not say (a prediction's one session per agent)."""
    wa, wb = a.manifest.workload or {}, b.manifest.workload or {}
    keys = [k for k in dict.fromkeys([*wa, *wb]) if k in SESSION_SHAPE or k in wa and k in wb]
    said = [f"{k.replace('_', ' ')} {x} vs {y}" for k in keys
            if k != "seed" and not (k == "sessions" and None in (wa.get(k), wb.get(k)))
            and (x := _said(wa.get(k))) != (y := _said(wb.get(k)))]
    return [f"the session workloads differ ({'; '.join(said)})"] if said else []


def _said(v: Any) -> str:
    """A workload parameter as its table heading states it: a drawn length by its text ("uniform 64-256"), not
    the dict the manifest keeps."""
    if v is None:
        return "(not given)"
    if isinstance(v, bool):  # a switch ("baseline True vs False" read as Python)
        return "on" if v else "off"
    if isinstance(v, dict):
        return str(v["text"]) if "text" in v else ", ".join(f"{k} {_said(x)}" for k, x in v.items())
    return str(v)


def compare_sessions(a: RunResult, b: RunResult) -> SessionComparison:
    """Two agent-session runs side by side at each concurrency both ran: per turn, the context and the TTFT p50
    on each side, warm and busted; per level, the session time; per side, what the cache bought. Refuses
    (``UsageError``) a session run beside one that is not, and two session runs that share no concurrency."""
    why = session_view.mismatch(a, b)
    if why is None and not session_view.is_session_run(a):
        why = f"{run_name(a)} and {run_name(b)} are no agent-session runs: compare them as sweeps"
    if why is None and not set(session_view.concurrencies(a)) & set(session_view.concurrencies(b)):
        why = (f"{run_name(a)} and {run_name(b)} share no session concurrency: the first ran "
               f"{', '.join(map(str, session_view.concurrencies(a))) or 'none'}; the second "
               f"{', '.join(map(str, session_view.concurrencies(b))) or 'none'}")
    if why is not None:
        raise UsageError(why)
    la, lb = session_view.levels(a), session_view.levels(b)
    ca, cb = set(session_view.concurrencies(a)), set(session_view.concurrencies(b))
    blocks = []
    for c in sorted(ca & cb):
        gains = [f"{run_name(r)}: {g}" for r in (a, b) if (g := session_view.gain_line(r, c))]
        blocks.append(SessionBlock(
            c, _session_turns(a, b, c),
            {k: SessionSide.of(s) for (cc, k), s in la.items() if cc == c},
            {k: SessionSide.of(s) for (cc, k), s in lb.items() if cc == c}, gains,
            {m: (band_of(a, name), band_of(b, name)) for m, name in (("ttft", "Median TTFT"),
                                                                     ("throughput", "Aggregate output"),
                                                                     ("session", "Session time"))}))
    warnings = model_warnings(a.manifest, b.manifest) + condition_warnings(a, b) + _session_workload_warnings(a, b)
    warnings += session_view.warnings(a) + session_view.warnings(b)
    warnings += [f"{run_name(r)} is {r.predicted_mark}, not measured" for r in (a, b) if r.predicted_mark]
    if a.predicted_mark or b.predicted_mark:
        warnings.append("Warm A/B (x–y): where the ratio lies when each PREDICTED side measures within its band (80% "
                        "of held-out rows of its kind do)")
    return SessionComparison(run_name(a), run_name(b), blocks, warnings, _notes(a, b, ca, cb))


def _notes(a: RunResult, b: RunResult, ca: set[int], cb: set[int]) -> list[str]:
    """A run with no busted baseline by choice (``--no-baseline``, a capacity search's warm levels), said once;
    and the concurrencies only one run has, which are not compared."""
    off = [run_name(r) for r in (a, b) if not session_view.with_baseline(r)]
    out = [f"{' and '.join(off)} ran without a busted baseline (--no-baseline, or a capacity search): what the "
           "cache bought is not measured there"] if off else []
    for side, only in (("A", ca - cb), ("B", cb - ca)):
        if only:
            out.append(f"not compared: only {side} has concurrency {', '.join(map(str, sorted(only)))}")
    return out


def _ratio(x: float | None, y: float | None, bands: tuple[float | None, float | None] | None = None,
           higher_better: bool = True, fast: tuple[float | None, float | None] = (None, None)) -> str:
    """A/B, and where a side is PREDICTED the range the bands allow it ("0.18× (0.12–0.27)"), each side's fast end
    held at its physical limit (``fast``, a share of its figure); "no band" where a predicted side kept none for
    the row, so no range can be given (``bands``' None)."""
    if not (x and y):
        return "—"
    r = x / y
    said = f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"
    if bands is None:
        return said
    if None in bands:
        return said + " (no band)"
    span = band_range(r, *bands, higher_better, fast)
    if span and span[1] == float("inf"):  # B's band reaches no rate at all: A/B has no upper end
        return said + f" ({times(span[0])} or more)"
    return said + (f" ({times(span[0])}–{times(span[1])})" if span else "")


def session_turn_table(block: SessionBlock, every: bool = False) -> tuple[list[str], list[list[str]]]:
    """TTFT p50 in seconds at each turn shown (turns counted from 1; ``every``: all of them, else a sample of a
    long session), both sides, warm and busted: seven columns that fit 80 (the sides' names go in the heading
    above the table, never in a column)."""
    head = ["Turn", "Context", "A warm", "A busted", "B warm", "B busted", "Warm A/B"]
    turns = [t.turn for t in block.turns]
    shown = set(turns if every else session_view.shown_turns(turns))
    s = session_view.seconds
    rows = [[str(t.turn + 1), t.context(), s(t.a_warm_ms), s(t.a_busted_ms), s(t.b_warm_ms), s(t.b_busted_ms),
             _ratio(t.a_warm_ms, t.b_warm_ms, block.bands.get("ttft"), False, t.warm_fast)]
            for t in block.turns if t.turn in shown]
    return _warm_only(block, head, rows, (3, 5))


def _warm_only(block: SessionBlock, head: list[str], rows: list[list[str]],
               busted: tuple[int, ...]) -> tuple[list[str], list[list[str]]]:
    """The table without its busted columns where neither side has a busted level (two columns of dashes)."""
    if _has_busted(block):
        return head, rows
    return [h for i, h in enumerate(head) if i not in busted], [[c for i, c in enumerate(r) if i not in busted]
                                                                for r in rows]


#: The session table's rows: (label, the figure of one side's level, how it is written, a ratio makes sense).
_SESSION_ROWS: list[tuple[str, Callable[[SessionSide], float | None], Callable[[float | None], str], bool]] = [
    ("Session p50 (s)", lambda x: x.session_p50_s, lambda v: session_view.seconds(v * 1000 if v is not None else None),
     True),
    ("Session p90 (s)", lambda x: x.session_p90_s, lambda v: session_view.seconds(v * 1000 if v is not None else None),
     True),
    ("Cached share", lambda x: x.cached_share, session_view.share, False),
    ("Server hits", lambda x: x.server_hit_share, session_view.share, False),
    ("Output tok/s", lambda x: x.output_tps, lambda v: "—" if v is None else figure(v), True),
    ("Per-agent tok/s", lambda x: x.per_agent_tps, lambda v: "—" if v is None else figure(v), True),
]


def session_level_table(block: SessionBlock) -> tuple[list[str], list[list[str]]]:
    """Each side's levels at the block's concurrency, warm and busted: sessions finished, session time, what
    the cache served, throughput. A row no level has a figure for is left out."""
    sides = [block.a.get(WARM), block.a.get(BUSTED), block.b.get(WARM), block.b.get(BUSTED)]
    head = ["Per level", "A warm", "A busted", "B warm", "B busted", "Warm A/B"]
    rows = [["Sessions done", *(f"{x.sessions_finished}/{x.sessions}" if x else "—" for x in sides), ""]]
    for label, get, fmt, ratio in _SESSION_ROWS:
        values = [get(x) if x else None for x in sides]
        if any(v is not None for v in values):
            band = block.bands.get("throughput" if "tok/s" in label else "session")
            fast = (sides[0].output_fast if sides[0] else None, sides[2].output_fast if sides[2] else None)
            rows.append([label, *map(fmt, values), _ratio(values[0], values[2], band, True, fast) if ratio else ""])
    return _warm_only(block, head, rows, (2, 4))
