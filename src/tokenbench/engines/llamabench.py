"""llama-bench run here, its JSON imported as a run: depth's --llama-bench mode, llama.cpp's own numbers beside
tokenbench's over HTTP. The JSON is kept whole in the run's manifest, with the command that made it."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import redact
from ..errors import EngineError, UsageError
from ..guard_results import GuardSnapshot
from ..store import Store
from .launch import llama_repack_crashes


@dataclass(slots=True)
class LlamaBenchConfig:
    exe: str  # a llama-bench binary, or "built": the one tokenbench builds
    model_file: str | None  # a GGUF; None: the embedded model's
    depths: list[int]
    pp: int = 512
    tg: int = 128
    repetitions: int = 3
    options: list[str] = field(default_factory=list)  # llama.cpp flags as llama-bench spells them
    model_size: str = "tiny"
    quant: str | None = None
    label: str | None = None
    #: the guard's snapshot taken before llama-bench ran (None: --guard off): kept with each level, a dirty one flagged
    guard: GuardSnapshot | None = None


def command(cfg: LlamaBenchConfig, exe: str, model_file: str) -> list[str]:
    """llama-bench's command line; the embedded build's repacking off where it crashes (launch.py), unless the
    options say otherwise (another build is left as it is: it may crash on no core, or take no --repack)."""
    off = cfg.exe == "built" and llama_repack_crashes() and "--repack" not in cfg.options
    repack = ["--repack", "0"] if off else []
    return [exe, "-m", model_file, "-p", str(cfg.pp), "-n", str(cfg.tg), "-d", ",".join(map(str, cfg.depths)),
            "-r", str(cfg.repetitions), *repack, *cfg.options, "-o", "json"]


def past_context(cfg: LlamaBenchConfig, model_file: Path) -> str | None:
    """A warning where a depth with its prompt and generation passes the context the model was trained on (its
    GGUF header's): llama-bench sizes its context to fit and runs it, on positions the model never saw. The speed
    is measured, but no server of that model would be run so; the HTTP path skips such depths, as the server
    refuses them."""
    from ..predict.specs import model_from_gguf

    try:
        trained = model_from_gguf(model_file).context
    except (UsageError, OSError, ValueError):
        return None  # llama-bench says what it makes of a file that is not a GGUF
    past = [d for d in cfg.depths if trained and d + cfg.pp + cfg.tg > trained]
    if not past:
        return None
    said = [f"{d:,}" for d in past]
    which = (f"depth {said[0]}" if len(said) == 1 else f"depths {', '.join(said[:-1])} and {said[-1]}")
    return (f"{which} with pp {cfg.pp} and tg {cfg.tg} pass{'es' if len(said) == 1 else ''} the {trained:,} tokens "
            f"the model was trained on (its GGUF header): llama-bench runs {'it' if len(said) == 1 else 'them'} on "
            "positions the model never saw")


def run_llama_bench(cfg: LlamaBenchConfig, store: Store, note: Callable[[str], None]) -> str:
    """Run llama-bench and import what it printed; returns the stored run's id."""
    from ..importers import import_records

    exe = cfg.exe
    if exe == "built":
        from .llamacpp_build import ensure_tools

        exe = str(ensure_tools(note) / "llama-bench")
    model_file = cfg.model_file
    if not model_file:
        from . import tiny

        model_file = str(tiny.ensure(size=cfg.model_size).gguf(cfg.quant))
    past = past_context(cfg, Path(model_file))
    if past:
        note(past)
    cmd = command(cfg, exe, model_file)
    note("running " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise UsageError(f"cannot run {exe}: {e}") from None
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["it printed nothing"])[-1]
        if proc.returncode < 0:  # killed by a signal: the tool crashed (a SIGSEGV on a model it cannot run), which
            # no argument of the user's explains; exit 4, as an engine that cannot start
            name = signal.Signals(-proc.returncode).name if -proc.returncode in signal.valid_signals() else \
                f"signal {-proc.returncode}"
            raise EngineError(f"llama-bench crashed ({name}) on {model_file}: {said}")
        raise UsageError(f"llama-bench exited with {proc.returncode}: {said}")
    extra = {"llama_bench": {"command": redact.command(cmd), "options": cfg.options, "raw": proc.stdout}}
    ids = import_records(store, "llama-bench", proc.stdout, Path(model_file), cfg.label or Path(model_file).stem,
                         extra, cfg.guard)
    return ids[0]
