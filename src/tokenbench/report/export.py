"""The report's exporters, one per format behind one interface (as hyperfine's ``export/`` has one per format
behind one trait): each writes a ``Report`` (document.py) to one path and says, in words, what it wrote. They
read nothing but the report, so what a page shows and what a JSON file holds are the same numbers.

- Markdown: BENCHMARKS.md sections, one per run between markers (a re-run rewrites its own);
- HTML: one self-contained page with the plots;
- PNG: each plot, slide-sized, into a directory;
- JSON: the runs (the result contract, docs/results.md), the plotted series and each pair compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol

from .. import __version__
from ..jsontext import json_text
from . import html, markdown
from .document import Report
from .series import Plot
from ..layout import plural


#: Where an exporter writes: one file, or a directory of files.
Target = Literal["file", "dir"]


class Exporter(Protocol):
    #: the option that names where it writes, and whether that is a file or a directory
    option: ClassVar[str]
    target: ClassVar[Target]
    #: the optional package it draws with (the ``report`` extra), checked before anything is written
    needs: ClassVar[str | None]

    def write(self, rep: Report, path: Path) -> str:
        """Write the report at ``path``; return what was written, in words."""
        ...


class MarkdownExport:
    option: ClassVar[str] = "--md"
    target: ClassVar[Target] = "file"
    needs: ClassVar[str | None] = None

    def write(self, rep: Report, path: Path) -> str:
        markdown.write(path, rep.runs)
        return f"wrote {plural(len(rep.runs), 'section')} to {path}"


class HtmlExport:
    option: ClassVar[str] = "--html"
    target: ClassVar[Target] = "file"
    needs: ClassVar[str | None] = "plotly"

    def write(self, rep: Report, path: Path) -> str:
        path.write_text(html.render(rep), encoding="utf-8")
        return f"wrote {path} ({plural(len(rep.plots), 'plot')})"


class PngExport:
    option: ClassVar[str] = "--png"
    target: ClassVar[Target] = "dir"
    needs: ClassVar[str | None] = "matplotlib"

    def write(self, rep: Report, path: Path) -> str:
        from . import plots  # matplotlib: loaded only when PNGs are asked for

        path.mkdir(exist_ok=True)
        for p in rep.plots:
            plots.png(p, path / f"{p.id}.png")
        return f"wrote {plural(len(rep.plots), 'PNG')} to {path}"


def plot_dict(p: Plot) -> dict[str, Any]:
    """A plot's data: its axes and each line's points, as (x, y) pairs."""
    return {"id": p.id, "title": p.title, "x": p.xlabel, "y": p.ylabel, "axis": p.axis, "unit": p.unit,
            "log_x": p.logx, "lines": [{"name": ln.name, "run": ln.run, "predicted": ln.predicted,
                                        "percentile": ln.pct, "cache": ln.cache,
                                        "points": [[x, y] for x, y in zip(ln.xs, ln.ys)]} for ln in p.lines]}


class JsonExport:
    option: ClassVar[str] = "--json"
    target: ClassVar[Target] = "file"
    needs: ClassVar[str | None] = None

    def write(self, rep: Report, path: Path) -> str:
        path.write_text(self.text(rep), encoding="utf-8")
        return (f"wrote {path} ({plural(len(rep.runs), 'run')}, {plural(len(rep.plots), 'plot')}, "
                f"{plural(len(rep.pairs), 'comparison')})")

    def text(self, rep: Report) -> str:
        """The report as a JSON document."""
        doc = {"tool": "tokenbench", "kind": "report", "version": __version__, "title": rep.title,
               "written": rep.written, "runs": [r.to_json() for r in rep.runs],
               "plots": [plot_dict(p) for p in rep.plots],
               "comparisons": [{"run_a": rep.runs[p.a].run_id, "run_b": rep.runs[p.b].run_id, **p.cmp.to_dict(),
                                "quality": rep.quality.get((rep.runs[p.a].run_id, rep.runs[p.b].run_id))}
                               for p in rep.pairs],
               "not_compared": rep.apart}
        return json_text(doc)


#: Every exporter, in the order a report is written.
EXPORTERS: tuple[Exporter, ...] = (MarkdownExport(), HtmlExport(), PngExport(), JsonExport())
