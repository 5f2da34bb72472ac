"""What a sweep (or a capacity search) sends: the workload options, one group per kind, read into one workload kind
(``kinds/``). The kind refuses the load options it cannot run with itself (``SweepConfig``); here are refused the
options of one kind given to another."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import draws
from ..dataset import load as load_dataset
from ..draws import Draw
from ..errors import UsageError
from ..kinds import WorkloadKind
from ..kinds.dataset import DatasetKind
from ..kinds.lengths import LengthsKind
from ..kinds.replay import ReplayKind
from ..kinds.sessions import SessionsKind
from ..kinds.trace import NO_SEARCH, TraceKind
from ..replay import ReplayPlan
from ..sessions import SessionPlan
from ..tenants import Background
from ..trace import load_trace
from ..trajectories.load import detect_format, load_trajectories, refuse_unknown
from ..trajectories.model import TRAJECTORY_FORMATS
from ..workload import resolve_shape
from .common import seconds


def given_flags(argv: list[str]) -> set[str]:
    """The long options written on the command line (``--x=1`` as ``--x``)."""
    return {w.split("=", 1)[0] for w in argv if w.startswith("--")}


def parse_draw(text: str | None, what: str, unit: str = "tokens") -> Draw | None:
    try:
        return draws.parse(text, what, unit) if text is not None else None
    except draws.DrawError as e:
        raise UsageError(str(e)) from None


def _lengths(a: argparse.Namespace, d: dict[str, Any]) -> tuple[Draw, Draw]:
    """(input, output) tokens per request, each a number or a distribution drawn per request: the embedded
    defaults, a --shape, or the lengths given (one given beside a --shape replaces the shape's)."""
    given_in, given_out = parse_draw(a.input_len, "--input-len"), parse_draw(a.output_len, "--output-len")
    if a.dataset is not None and (given_in is not None or a.shape is not None or a.prefix_len):
        raise UsageError("--dataset's prompts are its own: drop --input-len, --shape and --prefix-len "
                         "(--output-len gives the items without a length theirs)")
    if a.shape is None and given_in is None and given_out is None and "input_len" in d:
        base = int(d["input_len"]), int(d["output_len"])
    else:
        base = resolve_shape(a.shape, None, None)
    ins, outs = given_in or Draw.fixed(base[0]), given_out or Draw.fixed(base[1])
    if a.prefix_len < 0 or a.prefix_len >= max(ins.minimum(), 1) and a.prefix_len:
        raise UsageError(f"--prefix-len must be between 0 and the shortest input length ({ins.minimum():g})")
    return ins, outs


#: The options that shape sessions: given without --sessions they would be ignored, so they are refused.
SESSION_OPTIONS = ("--turns", "--shared-prefix", "--tool-len", "--think-time", "--max-context", "--on-cap",
                   "--no-baseline", "--background")
#: Other kinds' workload options, which a session's turns do not send.
NOT_SESSIONS = ("--prefix-len", "--dataset", "--shape")
#: What a trace says itself (its requests' lengths and times): the options that would say it again.
TRACE_EXCLUSIVE = ("concurrency", "rate", "dataset", "sessions", "input_len", "output_len", "shape", "prefix_len")


def _sessions(a: argparse.Namespace, given: set[str], task: Draw, output: Draw) -> SessionsKind:
    if clash := [f for f in NOT_SESSIONS if f in given or (f == "--dataset" and a.dataset is not None)]:
        raise UsageError(f"--sessions runs whole sessions, closed loop over agents: drop {', '.join(clash)} "
                         "(--shared-prefix sets the shared system prompt)")
    return SessionsKind(SessionPlan(
        sessions=a.sessions, turns=a.turns, shared_prefix=a.shared_prefix, task=task,
        tool=parse_draw(a.tool_len, "--tool-len") or Draw.fixed(128), output=output,
        think=parse_draw(a.think_time, "--think-time", "s") or Draw.fixed(0, "s"), max_context=a.max_context,
        on_cap=a.on_cap, baseline=not a.no_baseline,
        background=Background.parse(a.background) if a.background else None))


#: Options that only a replay of agent trajectories reads.
REPLAY_OPTIONS = ("--trace-scale", "--max-think", "--answers")


#: The longest replay at recorded times tokenbench starts (a week).
LONGEST_REPLAY_S = 7 * 86400


def _trace(a: argparse.Namespace, given: set[str], told: bool = True) -> TraceKind:
    """--trace's file, read and checked (trace.load_trace), after refusing the options that cannot go with it;
    its first --requests N where given. ``told``: False where the file's format could not be told (an empty file,
    a first line cut short): it is read first, as Mooncake JSONL, so its fault is said, not an option that goes
    with another format (a Weka trace cut short was told to drop its --concurrency)."""
    named = a.trace_format if a.trace_format in ("mooncake", "csv") else None
    trace = None
    if not told:
        try:
            trace = load_trace(a.trace, a.trace_block, named)
        except UsageError as e:
            raise UsageError(f"{e} (read as Mooncake JSONL, as no format could be told from its start: name its "
                             "format with --trace-format)") from None
    said = [f"--{k.replace('_', '-')}" for k in TRACE_EXCLUSIVE if getattr(a, k, None)]
    if said:
        raise UsageError(f"--trace sets every request's length and send time: drop {', '.join(said)}")
    # a file it cannot read is said before what goes with it
    if trace is None:
        trace = load_trace(a.trace, a.trace_block, named)
    if stray := [f for f in REPLAY_OPTIONS if f in given]:
        raise UsageError(f"{', '.join(stray)} shape a replay of agent trajectories, and {a.trace} is a request trace: "
                         "drop them")
    _no_sessions(given, "a trace replays its own requests alone")
    if a.requests is not None and a.requests > len(trace.requests):
        # it ran the 16 it had, and said nothing of the 2,000 asked
        raise UsageError(f"--requests {a.requests}: {Path(a.trace).name} holds {len(trace.requests)} requests, "
                         "replayed once: drop --requests, or give at most that")
    head = trace.head(a.requests)
    if head.span_s / a.trace_speed > LONGEST_REPLAY_S:  # a slip of the unit, or a trace of epochs: it would wait on
        days = head.span_s / a.trace_speed / 86400
        raise UsageError(f"{Path(a.trace).name} spans {days:,.3g} days at --trace-speed {a.trace_speed:g}, more than "
                         f"a week to replay: its timestamps are milliseconds from its start; fix them, or replay it "
                         f"faster (--trace-speed {head.span_s / 3600:,.0f} replays it in an hour)")
    return TraceKind(head, a.trace_speed)


def _replay(a: argparse.Namespace, given: set[str], defaults: dict[str, Any], lanes: bool) -> ReplayKind:
    """Recorded trajectories, replayed as agents: lanes where --concurrency is given, no start times are recorded
    or a search asks for lanes (``lanes``), else open loop at the recorded times."""
    said = [f"--{k.replace('_', '-')}" for k in TRACE_EXCLUSIVE if k != "concurrency" and getattr(a, k, None)]
    if said:
        raise UsageError(f"a replay sends the recorded calls' own lengths, one lane per agent: drop {', '.join(said)}")
    block = a.trace_block if "--trace-block" in given else None
    trajectories = load_trajectories(a.trace, a.trace_format, block)
    _no_sessions(given, "a replay sends the recorded calls alone")
    timed = all(t.epoch_s is not None for t in trajectories.trajectories)
    if "--trace-speed" in given and a.concurrency:
        raise UsageError("--trace-speed replays at the recorded times and --concurrency runs lanes: give one")
    speed = a.trace_speed if "--trace-speed" in given or (timed and not a.concurrency and not lanes) else None
    plan = ReplayPlan(trajectories, _max_think(a.max_think), a.answers, speed, a.trace_scale)
    defaults.update(requests=None, concurrency="1", **({"api": "chat"} if plan.full_text else {}))
    return ReplayKind(plan)


def _no_sessions(given: set[str], alone: str | None = None) -> None:
    """Refuse the session options given without sessions (they would be ignored); ``alone``: why a trace cannot
    take them (--sessions cannot go with it), else the run could add --sessions."""
    stray = [f for f in SESSION_OPTIONS if f in given]
    shape = [f for f in stray if f != "--background"]
    said = [f"{', '.join(shape)} {'shape' if len(shape) > 1 else 'shapes'} agent sessions"] if shape else []
    if "--background" in stray:
        said.append("--background runs beside them" if shape else "--background runs beside agent sessions")
    if said:
        fix = f"{alone}: drop" if alone else "add --sessions N, or drop"
        raise UsageError(f"{' and '.join(said)}: {fix} {'them' if len(stray) > 1 else 'it'}")


def _max_think(text: str) -> float | None:
    if text.strip().lower() == "none":
        return None
    if text.strip() in ("0", "0s"):
        return 0.0
    if text.strip().startswith("-"):
        raise UsageError(f"--max-think '{text}' is negative: give the longest pause to keep (e.g. 5s), 0s for none "
                         "or none for every pause as recorded")
    return seconds(text, "--max-think", ("s", "m"))


def workload_kind(a: argparse.Namespace, argv: list[str], defaults: dict[str, Any],
                  search: bool = False) -> WorkloadKind:
    """The one workload kind the options ask for. ``defaults``: the embedded engine's lengths (empty for a URL); the
    kind's own defaults are put there (``requests`` None: its levels are not a count of requests). ``search``: a
    capacity search's, whose levels are agent counts."""
    given = given_flags(argv)
    if getattr(a, "trace", None) is not None:
        defaults["requests"] = None  # all of it, unless --requests asks for its first N
        if not Path(a.trace).exists():  # said before any option that would not go with what it holds
            raise UsageError(f"--trace {a.trace}: cannot read it (No such file or directory)")
        fmt = a.trace_format or detect_format(a.trace)
        if fmt is None:
            refuse_unknown(a.trace)
        if fmt in TRAJECTORY_FORMATS:
            return _replay(a, given, defaults, search)
        if search and fmt is not None:  # said first: no option given with it would make it searchable
            raise UsageError(NO_SEARCH)
        return _trace(a, given, told=fmt is not None)
    ins, outs = _lengths(a, defaults)
    if a.sessions is not None:
        # sessions speak chat, one agent per session unless --concurrency says otherwise, whole sessions a level
        defaults.update(api="chat", concurrency=str(a.sessions), requests=None)
        return _sessions(a, given, ins, outs)
    _no_sessions(given)
    if a.dataset is not None:
        return DatasetKind(load_dataset(a.dataset, a.api), outs)
    return LengthsKind(ins, outs, a.shape, a.prefix_len)
