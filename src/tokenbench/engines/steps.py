"""One build or install step run as a subprocess (a cmake configure or build, a pip install): its output read
line by line, what matters shown as progress, and its last lines in the error when it fails."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

from ..errors import EngineError

Progress = Callable[[str], None]
#: Picks the line worth showing from a step's output (None: nothing to show for this line).
Shown = Callable[[str], str | None]

_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")


def run_step(cmd: list[str], say: Progress, failed: str, show: Shown = lambda line: None, tail: int = 20) -> None:
    """Run ``cmd``; raise EngineError("{failed} (exit N)" and its last ``tail`` lines) when it fails."""
    last: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            last = (last + [line.rstrip()])[-tail:]
            shown = show(line)
            if shown is not None:
                say(shown)
    if proc.returncode != 0:
        raise EngineError(f"{failed} (exit {proc.returncode}):\n" + "\n".join(last))


def ninja_progress(prefix: str) -> Shown:
    """Ninja's [n/N] lines, every 10%, as '{prefix}: 40% (n/N)'."""
    shown = -1

    def pick(line: str) -> str | None:
        nonlocal shown
        m = _NINJA.match(line)
        if not m:
            return None
        pct = 100 * int(m.group(1)) // int(m.group(2))
        if pct // 10 <= shown:
            return None
        shown = pct // 10
        return f"{prefix}: {pct}% ({m.group(1)}/{m.group(2)})"

    return pick


def pip_progress(line: str) -> str | None:
    """pip's Collecting and Successfully installed lines, shortened."""
    return "    " + line.strip()[:100] if line.startswith(("Collecting ", "Successfully installed")) else None
