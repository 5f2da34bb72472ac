"""The Markdown tables llama-bench (``-o md``) and llama-benchy print, as owners post them: one depth level per row
(``pp512``, ``tg128 @ d4096``, llama-benchy's ``pp2048 @ d4096 (c2)``), its rate ``mean ± sd`` in the ``t/s``
column (llama-benchy's ``t/s (total)``), and llama-bench's ``build: HASH (NUMBER)`` line under the table.
``tokenbench export RUN --as llama-bench-md`` writes this shape, a ``flags`` column where a level is flagged, and
reads back to the same levels."""

from __future__ import annotations

import re
from pathlib import Path

from ..finding import Code, Finding
from ..levels import DepthLevel, LevelSummary
from ..results import Manifest
from .fields import FieldError, Imported, number
from .llamabenchy import DEFINITIONS, split_test

RATE = re.compile(r"^\s*([0-9][0-9.]*)\s*(?:±\s*([0-9][0-9.]*))?\s*$")
BUILD = re.compile(r"^\s*build:\s*([0-9a-f]+)\s*\((\d+)\)\s*$")
PROMPT_AND_GEN = re.compile(r"^pp(\d+)\+tg(\d+)(?: @ d(\d+))?$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(text: str) -> tuple[int, list[str]] | None:
    """The first pipe table whose header names a test and a t/s column: its header's line index and cells."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.lstrip().startswith("|") and set(lines[i + 1].replace("|", "").strip()) <= set("-: ") and \
                lines[i + 1].strip():
            head = _cells(line)
            if "test" in head and any(h.startswith("t/s") for h in head):
                return i, head
    return None


def detect(path: Path, text: str) -> bool:
    return not text.lstrip().startswith(("{", "[")) and _table(text) is not None


def _rate_column(head: list[str]) -> int:
    for name in ("t/s", "t/s (total)"):
        if name in head:
            return head.index(name)
    return next(i for i, h in enumerate(head) if h.startswith("t/s"))


def _level(cells: list[str], head: list[str], path: Path, where: str, tg_sizes: set[int]) -> DepthLevel | None:
    name, rate = cells[head.index("test")], cells[_rate_column(head)]
    if not rate:
        return None  # llama-benchy leaves a rate blank where it measured none
    m = RATE.match(rate)
    if m is None:
        raise FieldError(path, f"{where}: t/s", f"{rate[:40]!r} is not a rate ('4210.17 ± 33.52')")
    mean = number(m.group(1), path, f"{where}: t/s")
    sd = number(m.group(2), path, f"{where}: t/s") if m.group(2) else None
    both = PROMPT_AND_GEN.match(name)
    if both:  # llama-bench -pg: a prompt then a generation, one rate over both
        return DepthLevel(test=name.split(" @ ")[0], depth=int(both.group(3) or 0), tg_tps=mean)
    test, depth, c = split_test(name, path, f"{where}: test", tg_sizes)
    lv = DepthLevel(test=test, depth=depth, concurrency=c)
    setattr(lv, f"{test[:2]}_tps", mean)
    setattr(lv, f"{test[:2]}_tps_sd", sd)
    if "flags" in head:  # tokenbench's export: the flags its run gave the level, read back as the table says them
        for flag in filter(None, (f.strip() for f in cells[head.index("flags")].split(","))):
            try:
                code = Code(flag)
            except ValueError:
                raise FieldError(path, f"{where}: flags", f"{flag[:40]!r} is no flag tokenbench knows") from None
            lv.add(Finding(code, "marked so in the table it was imported from", severity="note"))
    return lv


def parse(path: Path, text: str, label: str | None) -> list[Imported]:
    found = _table(text)
    if found is None:
        raise FieldError(path, "top level", "no table with a test and a t/s column")
    at, head = found
    lines = text.splitlines()
    rows: list[tuple[int, list[str]]] = []
    for n in range(at + 2, len(lines)):
        if not lines[n].lstrip().startswith("|"):
            break
        cells = _cells(lines[n])
        if len(cells) != len(head):
            raise FieldError(path, f"line {n + 1}", f"{len(cells)} cells where the header has {len(head)}")
        rows.append((n + 1, cells))
    tg_sizes = {int(t[2:]) for _, c in rows if re.fullmatch(r"tg\d+", t := c[head.index("test")].split(" ")[0])}
    levels: list[LevelSummary] = [lv for n, c in rows if (lv := _level(c, head, path, f"line {n}", tg_sizes))]
    benchy = "ttfr (ms)" in head or "t/s (total)" in head or "peak t/s" in head
    build = next((m for line in lines[at:] if (m := BUILD.match(line))), None)
    first = dict(zip(head, rows[0][1])) if rows else {}
    backend = first.get("backend", "").lower().split(",")[0]
    manifest = Manifest.from_dict({  # the table's values, typed where they have the type
        "model": first.get("model") or None, "tool": "llama-benchy" if benchy else "llama-bench",
        "engine": None if benchy else "llama.cpp" + (f" {backend}" if backend else ""),
        "engine_version": f"b{build.group(2)}" if build and int(build.group(2)) > 0 else None,
        "build_commit": build.group(1) if build else None, "n_gpu_layers": first.get("ngl"),
        "definitions": DEFINITIONS if benchy else None, "workload": {},
    })
    return [Imported(label or path.stem, "depth" if benchy else "bench", manifest, levels)]
