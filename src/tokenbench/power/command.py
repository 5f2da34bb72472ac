"""A user's own meter (``--power-cmd 'CMD'``): a command that prints the watts it reads now.

The command line is split as a shell would split words (``shlex``) and run directly, never through a shell: what
runs is exactly the program and arguments the user typed, with no expansion of variables, globs or ``;``. Its
standard output must be one number, optionally followed by a ``W`` unit (``312.5``, ``312.5 W``, ``312.5W``); any
other output, a non-zero exit or a run past the timeout is a one-line error for that reading. What the meter reads
is what it is wired to: a wall-plug meter reads the whole box."""

from __future__ import annotations

import re
import shlex
import subprocess

from .. import redact
from .base import PowerError, PowerSource, Scope

WATTS = re.compile(r"^\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*(?:W|w|[Ww]atts?)?\s*$")


def parse_watts(text: str) -> float:
    """``"312.5 W\\n"`` -> 312.5; anything else a ValueError quoting what was printed."""
    m = WATTS.match(text)
    if m is None:
        shown = redact.keys(text.strip().splitlines()[0])[:60] if text.strip() else "nothing"  # a meter's key
        raise ValueError(f"printed {shown!r}, not a number of watts")
    return float(m.group(1))


class CommandSource(PowerSource):
    """The watts ``cmd`` prints, each reading a run of it with ``timeout_s``."""

    name = "command"
    measures = Scope.WHOLE_BOX

    def __init__(self, cmd: str, timeout_s: float = 5.0) -> None:
        try:
            self.argv = shlex.split(cmd)
        except ValueError as e:
            raise PowerError(f"command: --power-cmd {redact.keys(cmd)!r} cannot be split into words ({e})") from None
        if not self.argv:
            raise PowerError("command: --power-cmd is empty")
        self.timeout_s = timeout_s
        # the note reaches the run's telemetry and the agent's answers: the command's secrets hidden
        self.note = (f"the watts `{redact.keys(redact.command(self.argv))}` prints (what its meter is wired to: a wall "
                     "meter reads the whole box)")
        self.sample()  # a meter that cannot be read is refused at once, in its own words

    def sample(self) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
        prog = self.argv[0]
        try:
            done = subprocess.run(self.argv, capture_output=True, text=True, timeout=self.timeout_s, check=False,
                                  stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise PowerError(f"command: {prog} not found") from None
        except PermissionError:
            raise PowerError(f"command: {prog} cannot be run (permission denied)") from None
        except subprocess.TimeoutExpired:
            raise PowerError(f"command: {prog} did not finish within {self.timeout_s:g} s") from None
        except OSError as e:
            raise PowerError(f"command: {prog} cannot be run ({e})") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise PowerError(f"command: {prog} exited {done.returncode}" + (f": {said[0][:120]}" if said else ""))
        try:
            return {"meter": parse_watts(done.stdout)}, {}, {}
        except ValueError as e:
            raise PowerError(f"command: {prog} {e}") from None
