"""A run described above its table: model, engine, workload (a trace, sessions, fixed lengths), API, tokenizer,
and the lengths it drew where they vary."""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from .replay_table import replay_heading

if TYPE_CHECKING:
    from .results import Manifest


def describe_run(manifest: Manifest) -> str:
    wl = manifest.workload or {}
    parts = [
        f"model {manifest.model or 'unknown'}",
        f"engine {manifest.engine or 'unknown'}" + (f" {manifest.engine_version}" if manifest.engine_version else ""),
    ]
    # facts an imported or predicted run does not have are left out, never printed as "None"; lengths that vary
    # are stated on a line of their own (lengths_line)
    trace = wl.get("trace")
    if isinstance(trace, dict):  # a trace replay: its lengths are per request
        parts.append(trace_heading(trace))
    elif wl.get("kind") == "replay":
        parts.append(replay_heading(wl))
    elif (wl.get("input_len") is not None and wl.get("output_len") is not None and lengths_line(manifest) is None
          and wl.get("kind") != "sessions"):  # a session's prompts grow turn by turn: said with the sessions
        parts.append(f"{wl['input_len']} in / {wl['output_len']} out tokens" + (f" ({wl['shape']})" if wl.get("shape") else ""))
    if wl.get("kind") == "sessions":
        parts.append(_session_workload(wl, (manifest.load or {}).get("duration_s")))
    if wl.get("api"):
        parts.append(f"{wl['api']} API")
    if manifest.tokenizer == f"local {manifest.model}":  # a served path: said once (the embedded engine's)
        parts.append("tokenizer: the model's own")
    elif manifest.tokenizer:
        parts.append(f"tokenizer: {manifest.tokenizer}")
    power = manifest.power if isinstance(manifest.power, dict) else {}
    if power.get("read") == "agent" and power.get("agent"):  # not this machine's: said where the figures are read
        parts.append(f"power and the guard read on the server host, through its agent at {power['agent']}")
    emb = manifest.embedded
    if emb:
        parts.append(f"embedded {emb.get('engine')} engine, healthy after {emb.get('startup_s', 0):.1f} s (cold start)")
    return "; ".join(parts)


def imported_line(manifest: Manifest) -> str | None:
    """Where an imported run came from, as show says it above its table: the file's name (not its directory) and
    its format; a llama-bench run tokenbench started (depth --llama-bench) says so. None for any other run."""
    if manifest.provenance != "imported":
        return None
    name = PurePath(manifest.imported_from).name if manifest.imported_from else ""
    ran = manifest.extra.get("llama_bench")
    if isinstance(ran, dict) and ran.get("command"):
        return "llama-bench's results, run by tokenbench depth --llama-bench" + (f" on {name}" if name else "")
    return f"imported from {name or 'a file it did not record'}" + (f" ({manifest.format})" if manifest.format else "")


def _session_workload(wl: dict[str, Any], soak_s: float | None = None) -> str:
    """A session run's workload as a run's description states it (the manifest's texts, written by SessionPlan);
    ``soak_s``: a soak's duration, in which each agent starts sessions back to back (their count is not
    --sessions then)."""
    def text(key: str) -> str:
        d = wl.get(key)
        return str(d.get("text")) if isinstance(d, dict) else "?"

    # a cache search's levels run one session per agent; a prediction's sessions are per agent too
    runs = "one session per agent x " if wl.get("per_agent") else \
        f"sessions back to back for {soak_s:g} s, each of " if soak_s else \
        f"{wl.get('sessions')} sessions x " if wl.get("sessions") else "sessions of "
    out = f"{runs}{wl.get('turns')} turns, shared prompt {wl.get('shared_prefix')}, " \
          f"task {text('task')}, tool {text('tool')}, output {text('output')} tokens"
    if text("think") not in ("0 s", "?"):
        out += f", think {text('think')}"
    if wl.get("max_context"):
        out += f", cap {wl['max_context']} ({wl.get('on_cap')})"
    return out


def _text(d: object, fallback: object) -> str:
    """A recorded distribution's words (draws.Draw.to_dict's ``text``), or the fixed length."""
    text = d.get("text") if isinstance(d, dict) else None
    return str(text) if isinstance(text, str) else str(fallback)


def lengths_line(manifest: Manifest) -> str | None:
    """The lengths a run drew, as the line above its table states them, where they vary:
    ``input uniform 64-256 tokens, output normal 128 sd 32 (1-256) tokens``, or the dataset the prompts came from;
    None where every request had the same lengths."""
    wl = manifest.workload or {}
    if wl.get("kind") in ("sessions", "replay"):  # its lengths are stated with its workload (describe_run)
        return None
    ds = wl.get("dataset")
    out = f"output {_text(wl.get('output'), wl.get('output_len'))} tokens"
    if isinstance(ds, dict):
        digest = str(ds.get("sha256") or "")[:12]
        return (f"prompts from {ds.get('path')} (sha256 {digest}...): {ds.get('summary')}; output from the file "
                f"for {ds.get('output_from_file', 0):,} of them, else {out[7:]}")
    if not isinstance(wl.get("input"), dict) and not isinstance(wl.get("output"), dict):
        return None
    return f"input {_text(wl.get('input'), wl.get('input_len'))} tokens, {out}"


def trace_heading(trace: dict[str, Any]) -> str:
    """A trace replay's heading, with the rate its row is labelled: n requests over a span of s seconds from the
    first send to the last are n - 1 gaps, so (n - 1) / s a second (16 over 4.478 s: 3.35/s, not 16 / 4.478)."""
    n, span = trace.get("requests"), trace.get("replay_s")
    sent = ""
    if isinstance(n, int) and n > 1 and isinstance(span, (int, float)) and span > 0:
        sent = f", sent at {(n - 1) / span:.3g}/s ({n - 1} gaps between sends over that span)"
    return (f"trace {trace.get('path')}: {n} requests over {span} s (x{trace.get('speed')}){sent}, "
            f"ideal cached share {trace.get('ideal_cached_share', 0):.0%}")
