"""Which sources to read: what the machine has (``auto``: NVML, then amdgpu, then RAPL), one named, or all of them,
and a page or a command the user gave. Each source that could not be opened leaves a one-line note, never an
exception, unless the user named it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .amd import open_amd
from .base import PowerError, PowerSource
from .command import CommandSource
from .nvml import NvmlSource
from .rapl import RaplSource

#: The machine's own sources, in the order ``auto`` prefers them: the accelerator first (what a box serving a model
#: mostly draws), then the CPU package.
LOCAL: dict[str, Callable[[Path], PowerSource]] = {
    "nvml": lambda root: NvmlSource(),
    "amd": lambda root: open_amd(root),
    "rapl": lambda root: RaplSource(root),
}
CHOICES = ("auto", "all", "none", *LOCAL)


def discover(root: Path = Path("/"), names: tuple[str, ...] = tuple(LOCAL), first_only: bool = False
             ) -> tuple[list[PowerSource], list[str]]:
    """The sources of ``names`` this machine can read, in order (only the first with ``first_only``), and a note for
    each that it cannot."""
    found: list[PowerSource] = []
    notes: list[str] = []
    for name in names:
        if name == "nvml" and root != Path("/"):
            notes.append("nvml: NVML reads the real machine only")
            continue
        try:
            found.append(LOCAL[name](root))
        except PowerError as e:
            notes.append(str(e))
            continue
        if first_only:
            break
    return found, notes


def refuse_empty(url: str | None, cmd: str | None) -> None:
    """A --power-url or --power-cmd given empty (an unset variable) would read no meter and say nothing."""
    for flag, value, what in (("--power-url", url, "URL"), ("--power-cmd", cmd, "command")):
        if value is not None and not value.strip():
            raise PowerError(f"{flag} is empty: give the meter's {what}, or leave it out")


def open_sources(power: str = "auto", url: str | None = None, cmd: str | None = None, root: Path = Path("/")
                 ) -> tuple[list[PowerSource], list[str]]:
    """The sources a run reads: ``url`` (``--power-url``) and ``cmd`` (``--power-cmd``) where given, then the
    machine's own by ``power``: ``auto`` the first it has (none where a page or command was given), ``all`` every
    one it has, ``none`` none, or one by name (a PowerError when it cannot be read). Returns the sources and the
    notes on those not found."""
    if power not in CHOICES:
        raise PowerError(f"--power {power}: use one of {', '.join(CHOICES)}")
    given: list[PowerSource] = []
    refuse_empty(url, cmd)
    if url:
        from .url import UrlSource  # urllib's and the Prometheus parser: not for --power's choices

        given.append(UrlSource(url))
    if cmd:
        given.append(CommandSource(cmd))
    if power == "none" or (power == "auto" and given):
        return given, []
    if power in LOCAL:
        found, notes = discover(root, (power,))
        if not found:
            raise PowerError(notes[0])
        return given + found, []
    found, notes = discover(root, first_only=power == "auto")
    return given + found, notes
