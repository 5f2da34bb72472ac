"""One entry point for every trajectory format: ``load_trajectories`` reads a file (or a folder of Weka traces),
detects its format by its content where none is named, and returns a ``TrajectorySet``; ``detect_format`` and
``is_trajectory_file`` tell ``--trace FILE`` whether a file is a trajectory format at all or one of trace.py's
open-loop traces (Mooncake JSONL, CSV), which stay there.

Detection reads the first non-blank line as JSON (a whole pretty-printed document where that line is not JSON):

- ``{"format": "tokenbench-session-log", ...}``: ``session-log``;
- an object with ``requests`` and ``block_size``: ``weka`` (a folder: its first ``.json`` file decides);
- an object with ``session_id``, ``round_index``, ``input_tokens_total``, ``prefix_tokens``,
  ``newly_append_tokens`` and ``timing_events`` (AIPerf's TraceLab detection keys): ``tracelab``;
- an object with ``conversation_id``, ``turn`` and ``role``: ``mlcommons``;
- an object with ``input_length`` or ``timestamp`` (a Mooncake line), or a JSON list: ``mooncake``;
- text whose first line is the header ``timestamp,input_length,output_length``: ``csv``.

The suffix decides nothing: a ``.json`` Mooncake line is Mooncake, a ``.jsonl`` Weka trace is Weka.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from ..errors import UsageError
from ..jsontext import json_fault
from .boundary import first_json_line, read_text
from .figures import figures
from .mlcommons import load_mlcommons
from .model import TRACE_FORMATS, TRAJECTORY_FORMATS, Trajectory, TrajectoryFormat, TrajectorySet
from .session_log import FORMAT as SESSION_LOG
from .session_log import load_session_log
from .tracelab import load_tracelab
from .weka import load_weka

#: AIPerf's keys for a TraceLab row (aiperf/dataset/loader/tracelab_trace.py).
TRACELAB_KEYS = frozenset({"session_id", "round_index", "input_tokens_total", "prefix_tokens",
                           "newly_append_tokens", "timing_events"})
MLCOMMONS_KEYS = frozenset({"conversation_id", "turn", "role"})
CSV_HEADER = "timestamp,input_length,output_length"


def detect_text(text: str) -> str | None:
    """The format a file's text is in (one of ``TRACE_FORMATS``), or None."""
    first = first_json_line(text)
    if first is None:
        head = text.lstrip()
        if head.startswith("{"):
            try:
                first = json.loads(head)
            except (json.JSONDecodeError, RecursionError):
                return None
        elif head.startswith("["):
            return "mooncake"
        else:
            line = head.splitlines()[0] if head else ""
            return "csv" if line.replace(" ", "").lower().startswith(CSV_HEADER) else None
    if isinstance(first, list):  # records in an array; an empty one, or one of no records, tells no format
        return "mooncake" if first and isinstance(first[0], dict) else None
    if not isinstance(first, dict):
        return None
    keys = first.keys()
    if first.get("format") == SESSION_LOG:
        return "session-log"
    if "requests" in keys and "block_size" in keys:
        return "weka"
    if TRACELAB_KEYS <= keys:
        return "tracelab"
    if MLCOMMONS_KEYS <= keys:
        return "mlcommons"
    if "input_length" in keys or "timestamp" in keys:
        return "mooncake"
    return None


def detect_format(path: str | Path) -> str | None:
    """The format of a file or folder (one of ``TRACE_FORMATS``), or None where it is none of them."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix.lower() == ".json" and f.is_file())
        return "weka" if files and detect_format(files[0]) == "weka" else None
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    return detect_text(text)


#: The formats ``--trace`` reads, as a refusal names them.
FORMATS_READ = ("Mooncake JSONL, CSV (timestamp,input_length,output_length), Weka/AgentX traces, MLCommons "
                "agentic JSONL, TraceLab rows, a tokenbench session log")


def refuse_unknown(path: str | Path) -> None:
    """Refuse a JSON file whose first record is an object no format's keys match, naming the formats read (it
    would otherwise be read as Mooncake and refused for its missing ``timestamp``). A file that is not JSON, or
    whose first line is broken, is left to its loader, which names the line."""
    p = Path(path)
    if p.is_dir():
        found = sorted(f.name for f in p.iterdir() if f.is_file())
        has = f"none of its files ({', '.join(found[:3])}{', ...' if len(found) > 3 else ''}) is one" if found \
            else "it is empty"
        broken = [f"{f.name} {why}" for f in sorted(p.glob("*.json")) if (why := _broken_json(f))][:1]
        raise UsageError(f"--trace {p}: a folder is read as Weka/AgentX traces, a .json file each, and {has}"
                         + (f"; {broken[0]}" if broken else "") + ": give one file (a session log, a trace) instead")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return
    first = first_json_line(text)
    if first is None and (why := _broken_json(p, text)):
        raise UsageError(f"{p} {why}; --trace reads {FORMATS_READ}: name one with --trace-format")
    if isinstance(first, dict) and {"session", "sent", "first_byte", "end"} <= first.keys():
        raise UsageError(f"{p}: its first record is a session log's call, with no header line before it: a session "
                         "log starts with the line `tokenbench record` writes first, naming its format; restore it")
    if isinstance(first, dict):
        keys = ", ".join(list(first)[:6]) + (", ..." if len(first) > 6 else "") or "none"
        raise UsageError(f"{p}: not a trace tokenbench reads: its first record's keys ({keys}) are no format's. "
                         f"--trace reads {FORMATS_READ}; name one with --trace-format, or give prompts with --dataset")


def _broken_json(p: Path, text: str | None = None) -> str | None:
    """Why a file that opens as JSON ("{" or "[") is not JSON, as a whole or as JSONL (a Weka trace cut short):
    "is not JSON (Expecting value at line 1, column 3001, at its end: cut short?)"; None where it is JSON or opens as none."""
    try:
        text = text if text is not None else p.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    if not text.lstrip().startswith(("{", "[")) or first_json_line(text) is not None:
        return None
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        end = ", at its end: cut short?" if e.pos >= len(text.rstrip()) else ""
        return f"is not JSON ({json_fault(e)}{end})"
    except RecursionError:
        return "is not JSON (nested too deep)"
    return None


def is_trajectory_file(path: str | Path) -> bool:
    """Whether ``path`` holds agent trajectories (this package's formats) rather than an open-loop trace."""
    return detect_format(path) in TRAJECTORY_FORMATS


def load_trajectories(path: str | Path, fmt: str | None = None, block: int | None = None) -> TrajectorySet:
    """Read and check a trajectory file (or a folder of Weka traces): ``fmt`` one of ``TRAJECTORY_FORMATS`` or None
    to detect it; ``block`` the tokens per hash id (TraceLab's; Weka and lengths-only session logs declare their
    own, and a different one is refused). A malformed file is refused in one line naming the file, the line or
    record, and the field."""
    p = Path(path)
    if block is not None and block < 1:
        raise UsageError(f"--trace-block must be at least 1 token, not {block}")
    if fmt is not None and fmt not in TRACE_FORMATS:
        raise UsageError(f"--trace-format {fmt!r}: not one of {', '.join(TRACE_FORMATS)}")
    if p.is_dir():
        if fmt not in (None, "weka"):
            raise UsageError(f"{p}: a folder is a set of Weka traces, not {fmt}")
        digest, folder, common = load_weka(p, block)
        return _set(p, digest, "weka", folder, common)
    raw, text = read_text(p)
    kind = fmt or detect_text(text)
    if kind is None:
        raise UsageError(f"{p}: not a format tokenbench reads (--trace-format names one of "
                         f"{', '.join(TRACE_FORMATS)})")
    if kind not in TRAJECTORY_FORMATS:
        raise UsageError(f"{p}: a {kind} trace, not agent trajectories (it replays as a trace: --trace-format {kind})")
    sha = hashlib.sha256(raw).hexdigest()
    skipped: Counter[str] = Counter()
    size: int | None = None
    if kind == "weka":
        sha, trees, size = load_weka(p, block, (raw, text))
    elif kind == "mlcommons":
        trees = load_mlcommons(p, text)
    elif kind == "tracelab":
        trees, skipped = load_tracelab(p, text, block)
        size = trees[0].calls[0].blocks.size if trees and trees[0].calls[0].blocks else block
    else:
        trees, size, skipped = load_session_log(p, text, block)
    if not trees:
        raise UsageError(f"{p}: no trajectory in it" + (f" ({_skips(skipped)})" if skipped else ""))
    # a session log's hash ids are keyed once for the whole recording: two sessions' same system prompt has the
    # same ids (a Weka trace's and TraceLab's are each trajectory's own)
    return _set(p, sha, kind, trees, size, skipped, shared=kind == "session-log")


def _skips(skipped: Counter[str]) -> str:
    return ", ".join(f"{n} rows {why} skipped" for why, n in skipped.items())


def _set(path: Path, sha: str, kind: TrajectoryFormat, trees: tuple[Trajectory, ...], size: int | None,
         skipped: Counter[str] | None = None, shared: bool = False) -> TrajectorySet:
    return TrajectorySet(path, sha, kind, trees, figures(trees, shared), size,
                         tuple(sorted((skipped or {}).items())), shared_blocks=shared)
