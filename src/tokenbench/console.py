"""The terminal: Rich's console spelling in ASCII what its output cannot encode, and the printing of any table
(``print_table``), fitted to the console's width by ``layout`` or said one block per row where it cannot fit."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Collection, Mapping, Sequence
from typing import IO, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from .spelling import ascii_spelled
from .layout import Layout, format_markdown, heading_lines, md_escape, split_constant, table_layout, wrap_cell


#: Spaces that end a line: Rich pads a table's last cell to its column and keeps the space a wrapped line broke at.
_TRAILING = re.compile(r" +(?=\n)")

#: What a line of text never breaks inside: a quoted command to copy ('tokenbench show RUN --guard', `--slo
#: ttft=2s`), and a number with its unit ("0.4 s", "250 W"). A quote opens after a space or a bracket, not inside
#: a word ("the server's"), and a span wider than half a line may break as words do.
_WHOLE = re.compile(r"(?<![\w'`])(?:'[^'\s][^'\n]*?'|`[^`\s][^`\n]*?`)(?![\w])"
                    r"|\b\d[\d,.]* (?:s|ms|µs|min|h|%|W|kW|GB|GiB|MB|MiB|tok/s|TF)(?=[\s,;:.)\]]|$)")
#: Stands for a space inside a span kept whole while textwrap places the breaks.
_HELD = "\x00"


def wrap_words(text: str, width: int, subsequent_indent: str = "", cut: bool = False) -> list[str]:
    """``text`` on lines of at most ``width``, broken between words, never inside a span ``_WHOLE`` keeps; each line
    it runs onto begins with ``subsequent_indent``. A word wider than a line stays whole, or with ``cut`` is cut at
    the width (as Rich folds it: a path in a message)."""
    held = _WHOLE.sub(lambda m: m.group(0).replace(" ", _HELD) if len(m.group(0)) <= width // 2 else m.group(0),
                      text)
    lines = textwrap.wrap(held, max(20, width), subsequent_indent=subsequent_indent, break_long_words=cut,
                          break_on_hyphens=False)
    return [ln.replace(_HELD, " ") for ln in lines] or [text]


def silence(stream: IO[str]) -> None:
    """Writes to ``stream`` go nowhere from now on: its reader went away (``tokenbench runs | head -1``). Its file
    descriptor is pointed at the null device, so neither a later print nor the interpreter's flush at exit fails."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's StringIO): nothing to flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


class ReadableConsole(Console):
    """Rich's console, its strings spelt in ASCII where its output cannot encode them before they are measured, so
    a table's columns stay aligned ("77.5 +/-4%" is three cells wider than "77.5 ±4%"); and no line of what it
    writes ends in spaces, which a file or a diff of two runs would keep. Where its reader goes away, it prints
    nothing more and the command goes on to its own end and exit code."""

    def on_broken_pipe(self) -> None:
        # Rich's own exits 1 from inside the print: a sweep piped into ``head`` exited 1 for a run that had
        # completed, and a read-only command failed for a reader that had seen what it wanted
        self.quiet = True
        silence(self.file)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """A line of plain text (markup off) wrapped as ``wrap_words`` does, between words but never inside a
        quoted command or between a number and its unit; anything else as Rich prints it."""
        laid_out = ("soft_wrap", "overflow", "no_wrap", "crop", "width", "justify", "end", "sep")
        if objects and all(isinstance(o, str) for o in objects) and not kwargs.get("markup", self._markup) and \
                not any(kwargs.get(k) for k in laid_out):
            lines = [w for line in " ".join(objects).split("\n")
                     for w in (wrap_words(line, self.width, cut=True) if line.strip() else [line])]
            kwargs["soft_wrap"] = True
            objects = ("\n".join(lines),)
        super().print(*objects, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(ascii_spelled(text, self.encoding), **kwargs)

    def _render_buffer(self, buffer: Any) -> str:
        # Rich's one place where a print becomes the text written (a styled line ends in its reset code instead,
        # and keeps its spaces: a terminal shows none of them)
        return _TRAILING.sub("", super()._render_buffer(buffer))


def print_hanging(console: Console, line: str, hang: int = 2, style: str | None = None) -> None:
    """A line of text wrapped between its words to the console's width, each line it runs onto indented ``hang``
    past its own indent (a soak's ten figures under their label), never back at the margin as a terminal wraps;
    ``style``: Rich's, e.g. yellow for a warning."""
    lead = line[:len(line) - len(line.lstrip(" "))]
    lines = wrap_words(line, console.width, subsequent_indent=lead + " " * hang)
    console.print("\n".join(lines), style=style, markup=False, highlight=False, soft_wrap=True)


def print_vertical(console: Console, header: list[str], rows: list[list[str]], title: str | None = None) -> None:
    """A table too wide for the terminal, one block per row, every value whole: never a cut number or flag. A long
    value (a flag's sentence) wraps between words under its own column."""
    if title:
        console.print(title, markup=False, highlight=False)
    width = max(len(h) for h in header[1:]) if len(header) > 1 else 0
    beside = width + 4 <= console.width // 2  # else (a long run label names a column) each value goes under it
    indent = " " * (width + 4 if beside else 4)
    for r in rows:
        console.print(f"{header[0]} {r[0]}", style="bold", markup=False, highlight=False)
        for h, v in zip(header[1:], r[1:]):
            if v:
                lines = wrap_words(v, console.width - len(indent))
                body = _indented(lines, indent, console.width)
                if beside and body[0].startswith(indent):  # else (an address wider than the room) under its label
                    body[0] = f"  {h:<{width}}  " + body[0][len(indent):]
                else:
                    body.insert(0, f"  {h}")
                console.print("\n".join(body), markup=False, highlight=False, soft_wrap=True)


def _indented(lines: list[str], indent: str, width: int) -> list[str]:
    """A value's wrapped lines under their indent; a word wider than the room beside it (a source's web address)
    alone on its line, indented as a value under its label is (4), or less where it needs to end within
    ``width``, never cut."""
    return [indent + ln if len(indent) + cell_len(ln) <= width else " " * max(0, min(4, width - cell_len(ln))) + ln
            for ln in lines]


def _grouped(head: list[str], body: list[list[str]], g: int) -> tuple[list[str], list[list[str]], set[int]]:
    """The table with column ``g`` taken out: a row of its own ("Concurrency 4") before each run of rows that
    share its value, and where those rows are."""
    rows: list[list[str]] = []
    marks: set[int] = set()
    for i, r in enumerate(body):
        if i == 0 or r[g] != body[i - 1][g]:
            marks.add(len(rows))
            rows.append([f"{head[g]} {r[g]}"] + [""] * (len(head) - 2))
        rows.append(r[:g] + r[g + 1:])
    return head[:g] + head[g + 1:], rows, marks


def _aside(head: list[str], body: list[list[str]], k: int) -> tuple[list[str], list[list[str]], list[str]]:
    """The table without column ``k``, and its values as lines under it ("Concurrency 4 flags: client_bound"). A
    row named in words says them alone ("Open loop flags: client_bound", not "Agents open loop flags: ...")."""
    under = [f"{_row_name(head[0], r[0])} {head[k].lower()}: {r[k]}" for r in body if r[k].strip()]
    return head[:k] + head[k + 1:], [r[:k] + r[k + 1:] for r in body], under


def _row_name(heading: str, cell: str) -> str:
    """A row as a line under its table names it: a figure after its column's heading ("Concurrency 4", "Rate
    0.5/s", "Rank 1"), a name in words on its own ("Open loop", "Trace")."""
    cell = cell.strip()
    return f"{heading} {cell}" if cell[:1].isdigit() or not cell else cell[:1].upper() + cell[1:]


def _drawn(layout: Layout, body: list[list[str]], marks: set[int]) -> Table:
    """The rows as Rich draws them in ``layout``: text wrapped between words, the group rows (``marks``) bold."""
    t = Table(box=box.SIMPLE_HEAVY, show_edge=False, padding=(0, 0, 0, 1))
    for h, w, right in zip(layout.header, layout.widths, layout.right):
        t.add_column(h, width=w, justify="right" if right else "left", no_wrap=True, overflow="fold")
    for i, r in enumerate(body):
        t.add_row(*("\n".join(wrap_cell(c, w)) if wrap else c for c, w, wrap in zip(r, layout.widths, layout.wrap)),
                  style="bold" if i in marks else None)
    return t


def _narrower(head: list[str], body: list[list[str]], marks: set[int], spare: Sequence[tuple[str, str]], width: int,
              numeric: bool) -> tuple[Layout | None, list[str], list[list[str]], bool, list[str]]:
    """A table that does not fit as it is: its group rows (``marks``) on lines of their own, where one is wider
    than the first column; else without its spare columns (named as in ``head``), one at a time in their order
    until it fits, the line given for each left out said above it. Returns the layout (None: still none fits), the
    head and body, whether the group rows go apart, and the lines to say above the table."""
    if marks:
        layout = table_layout(head, [r for i, r in enumerate(body) if i not in marks], width, numeric)
        return layout, head, body, layout is not None, []
    says = []
    for name, line in spare:
        if len(head) <= 2:
            break
        k = head.index(name)
        head, body = head[:k] + head[k + 1:], [r[:k] + r[k + 1:] for r in body]
        says.append(line)
        if (layout := table_layout(head, body, width, numeric)) is not None:
            return layout, head, body, False, says
    return None, head, body, False, []


def _print_apart(console: Console, layout: Layout, body: list[list[str]], marks: set[int]) -> None:
    """A grouped table whose group rows ("Host M2 Ultra 76-Core GPU 192GB") are wider than its first column: the
    header, then each group's row on a line of its own, bold, above its rows, the columns as ``layout`` places
    them in every group."""
    console.print(_drawn(layout, [], set()))  # the header and its rule, over no rows
    starts = sorted(marks) + [len(body)]
    for at, end in zip(starts, starts[1:]):
        console.print(" " + body[at][0], style="bold", markup=False, highlight=False)
        if end > at + 1:
            t = _drawn(layout, body[at + 1:end], set())
            t.show_header = False
            console.print(t)


def _print_markdown(console: Console, header: list[str], rows: list[list[str]], title: str | None) -> None:
    """A Markdown table, its title a line of its own above it (show --guard's verdicts were lost)."""
    console.print((f"{md_escape(title)}\n\n" if title else "") + format_markdown(header, rows), markup=False,
                  highlight=False, soft_wrap=True)


def print_table(console: Console, header: list[str], rows: list[list[str]], fmt: str = "table",
                title: str | None = None, numeric: bool = False, keep: Collection[int] | None = None,
                aside: int | None = None, group: int | None = None, spare: Sequence[tuple[int, str]] = (),
                per_row: Mapping[int, str] | None = None) -> None:
    """Any (header, rows) table, for a terminal or as Markdown (every column, as given). On a terminal, headers
    go onto two lines and text wraps to fit the width; ``keep`` given, the columns that hold one value in every
    row are said once in a heading line above it (``keep``: columns that stay whatever they hold; a column empty
    in every row is left out); ``group``: a column that, where it varies, heads each run of rows on a row of its
    own instead of taking a column ("Concurrency 4", the rows sorted by it); ``aside``: a text column (notes,
    flags) said under the table, row by row, where the table does not fit with it; ``spare``: columns another
    already says (a run id holds its start) or another command shows, each with its line, left out in their order
    where the table does not fit with them, and each one's line said above the table instead; ``per_row``: columns
    that count something of each row, said above it with what they count over (``layout.split_constant``). One
    block per row only when a row still cannot fit. ``numeric``: only the last column is text that may wrap."""
    if fmt == "markdown":
        _print_markdown(console, header, rows, title)
        return
    # spelt as the output will show them before they are measured ("±" is "+/-" on an ASCII terminal)
    header = [ascii_spelled(h, console.encoding) for h in header]
    rows = [[ascii_spelled(c, console.encoding) for c in r] for r in rows]
    kept, said = split_constant(header, rows, keep, per_row) if keep is not None else (list(range(len(header))), [])
    head = [header[i] for i in kept]
    body = [[r[i] if i < len(r) else "" for i in kept] for r in rows]
    plain = head, body  # for one block per row, where it comes to that
    marks: set[int] = set()
    if group in kept and len(kept) > 2:
        head, body, marks = _grouped(head, body, kept.index(group))
    layout = table_layout(head, body, console.width, numeric)
    under: list[str] = []
    if layout is None and aside is not None and header[aside] in head and len(head) > 2 and not marks:
        head, body, under = _aside(head, body, head.index(header[aside]))
        layout = table_layout(head, body, console.width, numeric)
    apart = False
    if layout is None:
        spared = [(header[k], line) for k, line in spare if header[k] in head]
        layout, head, body, apart, says = _narrower(head, body, marks, spared, console.width, numeric)
        said = [*said, *says]
    if title:
        console.print(title, markup=False, highlight=False)
    for line in heading_lines(said, console.width):
        console.print(line, markup=False, highlight=False)
    if layout is None:
        print_vertical(console, *plain)
        return
    if apart:
        _print_apart(console, layout, body, marks)
    else:
        console.print(_drawn(layout, body, marks))
    for line in under:
        console.print(line, markup=False, highlight=False)


def print_noted(console: Console, header: list[str], rows: list[list[str]], note: int, fmt: str = "table",
                title: str | None = None) -> None:
    """A table whose column ``note`` holds sentences (a guard check's advice): beside the rest where every column
    fits whole; else each row's note on lines of their own under it, across the width ("advice: stop the other
    servers: ..."), not down a column of two words a line. Markdown, or a row that cannot fit: ``print_table``."""
    spelt = [[ascii_spelled(c, console.encoding) for c in r] for r in rows]
    whole = table_layout(header, spelt, 10 ** 6)
    rest = [h for i, h in enumerate(header) if i != note]
    body = [[c for i, c in enumerate(r) if i != note] for r in spelt]
    layout = table_layout(rest, body, console.width)
    if fmt == "markdown" or (whole is not None and whole.total() <= console.width) or layout is None:
        print_table(console, header, rows, fmt, title=title)
        return
    if title:
        console.print(title, markup=False, highlight=False)
    console.print(_drawn(layout, [], set()))  # the header and its rule, over no rows
    label = f"{ascii_spelled(header[note], console.encoding).lower()}: "
    for r, row in zip(spelt, body):
        t = _drawn(layout, [row], set())
        t.show_header = False
        console.print(t)
        if r[note].strip():
            print_hanging(console, "   " + label + r[note], hang=len(label))
