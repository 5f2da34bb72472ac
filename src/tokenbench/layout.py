"""How a table fits a width: column widths, headers on two lines, text wrapped where it reads on, the columns
that hold one value said once above it (a terminal of 80 columns is the width every table is held to), and the
same rows as a Markdown table, and a count written with its noun. Strings in, strings out: nothing here
prints."""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from rich.cells import cell_len


def plural(n: int | None, word: str, many: str | None = None) -> str:
    """A count and its noun: "1 agent", "8 agents", "0 slots"; ``many``: a plural that is not the noun and an s
    ("trajectories")."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def sig(v: float, figures: int = 2) -> str:
    """``v`` to ``figures`` significant figures in plain decimals, thousands separated: 0.0043, 0.43, 4.3, 43, 430,
    4,300 (two figures). A nonzero value never reads 0.0, and none reads more precisely than it is known."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    places = figures - 1 - math.floor(math.log10(abs(v)))
    r = round(v, places)
    if r != 0 and math.floor(math.log10(abs(r))) > math.floor(math.log10(abs(v))):
        places -= 1  # 9.96 rounds to 10.0: one figure more before the point, one fewer after it
        r = round(v, places)
    return f"{r:,.{max(0, places)}f}"


def apart(a: float, b: float) -> tuple[str, str]:
    """Two figures with the fewest decimals, none to two, that tell them apart: "6" and "5", but "24.2" and
    "24.0" where whole numbers would read as a tie ("needs 24 GiB of 24 GiB" for a model that does not fit)."""
    places = next((p for p in range(3) if f"{a:,.{p}f}" != f"{b:,.{p}f}"), 2)
    return f"{a:,.{places}f}", f"{b:,.{places}f}"


def figure(v: float | None, d: int = 1) -> str:
    """A figure to ``d`` decimals, thousands separated (from 1,000, as a whole number); one that would round to
    zero to two significant figures (0.043 tok/s never reads 0.0); ``d`` 0 a whole number (an error of 0.4% reads
    0, -0.4% not "-0"). None: "—"."""
    if v is None:
        return "—"
    if v != 0 and d > 0 and round(v, d) == 0:
        return sig(v, 2)
    if round(v, d) == 0:
        v = 0.0
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.{d}f}"


def md_escape(text: str) -> str:
    """Untrusted text (a model name, a label) made inert in Markdown: no HTML, no table breaks, and no line break
    (a newline in a label used to start a heading of its own); what is not markup stays as written ("TTFT p90 <= 5
    s" read "&lt;=" in the file)."""
    text = " ".join(text.splitlines())
    text = re.sub(r"&(?=#?\w+;)", "&amp;", text)  # an entity's start, shown as written
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", text).replace("|", "\\|")  # a tag's start; "<=" and "a < b" stay


def md_paragraph(text: str) -> str:
    """A line of text made a Markdown paragraph that says what it says: a leading "*" (a footnote's mark) not read
    as a bullet, and nothing read as an HTML tag; "<=" and "a < b" stay as written."""
    text = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", " ".join(text.splitlines()))
    return "\\" + text if text.startswith(("*", "+", "-", "#")) else text


def format_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


#: Spaces between two columns of a terminal table (a space of padding beside the rule's own); one more leads.
GAP = 2
#: A text column squeezed to fit wraps its cells onto lines of at least this many characters (or its own width).
WRAP_MIN = 12
#: Where a text cell may break onto its next line: after a space, a hyphen, a slash, an underscore or a comma.
_BREAKS = " -/_,"
#: A web address in a text (a catalog's source, "hardware-helden.de/radeon-rx-6700-xt-..."): never broken, as one cut
#: at its hyphens cannot be copied.
URL = re.compile(r"(?:https?://)?[\w-]+(?:\.[\w-]+)*\.[a-z]{2,}/\S*")


def _numeric(cells: list[str]) -> bool:
    """A column of numbers (with their units, "—" where there is none): right-aligned, never wrapped."""
    said = [c.strip() for c in cells if c.strip() not in ("", "—")]
    if not said:  # a figure no row has ("—" in each): placed as the numbers it stands for
        return any(c.strip() == "—" for c in cells)
    return all(c[:1].isdigit() or (c[:1] in "+-" and c[1:2].isdigit()) for c in said)


def _width(text: str) -> int:
    return max((cell_len(line) for line in text.split("\n")), default=0)


def _two_lines(header: str) -> str:
    """A header on two lines, split at the space that leaves it narrowest ("Aggregate\noutput tok/s")."""
    words = header.split(" ")
    if len(words) < 2:
        return header
    k = min(range(1, len(words)), key=lambda k: max(len(" ".join(words[:k])), len(" ".join(words[k:]))))
    return " ".join(words[:k]) + "\n" + " ".join(words[k:])


def _pieces(text: str) -> list[str]:
    """The text cut after each place it may break (a space, a hyphen, a slash, an underscore, a comma); a web
    address (``URL``) is one piece, with the space after it."""
    pieces: list[str] = []
    at = 0
    for m in URL.finditer(text):
        pieces += _broken(text[at:m.start()])
        end = m.end() + (text[m.end():m.end() + 1] == " ")
        stuck = pieces.pop() if pieces and pieces[-1][-1] not in _BREAKS else ""  # "(" before it goes with it
        pieces.append(stuck + text[m.start():end])
        at = end
    return pieces + _broken(text[at:])


def _broken(text: str) -> list[str]:
    pieces, word = [], ""
    for ch in text:
        word += ch
        if ch in _BREAKS:
            pieces.append(word)
            word = ""
    return pieces + ([word] if word else [])


def wrap_cell(text: str, width: int) -> list[str]:
    """A text cell on lines of at most ``width``, broken after a space, hyphen, slash, underscore or comma (a
    model name or a label breaks where it reads on), after a hyphen, an underscore or a slash only where the name
    it joins cannot move whole to the next line (a package to install, a model to copy); a piece longer than a line
    is cut (``table_layout`` gives no column less than its longest piece)."""
    lines = [""]
    for name in _names(_pieces(text)):
        joined = "".join(name)
        if lines[-1] and cell_len(lines[-1] + joined.rstrip()) > width and cell_len(joined.rstrip()) <= width:
            lines.append("")  # a name moves whole to the next line where it fits there
        for p in name:
            if lines[-1] and cell_len(lines[-1] + p.rstrip()) > width:
                lines.append("")
            while cell_len(lines[-1] + p.rstrip()) > width:
                cut = max(1, width - cell_len(lines[-1]))
                lines[-1], p = lines[-1] + p[:cut], p[cut:]
                lines.append("")
            lines[-1] += p
    return [ln.rstrip() for ln in lines if ln.strip()] or [""]


def _names(pieces: list[str]) -> list[list[str]]:
    """The pieces grouped into names joined by hyphens, underscores or slashes (``agent_tps_p90``, ``tok/s``,
    ``nvidia-ml-py``): a name breaks inside only where it is wider than its column."""
    names: list[list[str]] = []
    for p in pieces:
        if names and names[-1][-1].endswith(("_", "/", "-")):
            names[-1].append(p)
        else:
            names.append([p])
    return names


@dataclass(slots=True)
class Layout:
    """How a table fits a width: its headers (on two lines where a column is narrower than its name), each
    column's width, which columns wrap their text and which are numbers (right-aligned)."""

    header: list[str]
    widths: list[int]
    wrap: list[bool]
    right: list[bool]

    def total(self) -> int:
        return sum(self.widths) + GAP * (len(self.widths) - 1) + 1


def table_layout(header: list[str], rows: list[list[str]], width: int, numeric: bool = False) -> Layout | None:
    """The layout of the table in ``width`` columns with every number whole: headers first go onto two lines
    (the widest first), then text columns wrap (the widest first, down to ``WRAP_MIN``); None when it still does
    not fit. ``numeric``: only the last column is text that may wrap (the sweep table's flags)."""
    n = len(header)
    cells = [[r[i] if i < len(r) else "" for r in rows] for i in range(n)]
    right = [i > 0 and _numeric(cells[i]) for i in range(n)]
    wrap = [i > 0 and not right[i] and (not numeric or i == n - 1) for i in range(n)]
    body = [max((_width(c) for c in col), default=0) for col in cells]
    out = Layout(list(header), [max(body[i], _width(h)) for i, h in enumerate(header)], wrap, right)
    for i in sorted(range(n), key=lambda i: body[i] - _width(header[i])):  # the most header-bound first
        if out.total() <= width:
            return out
        two = _two_lines(header[i])
        if _width(two) < _width(header[i]) and body[i] < _width(header[i]):
            out.header[i], out.widths[i] = two, max(body[i], _width(two))
    names = [i for i in range(n) if cells[i] and all(" " not in c.strip() for c in cells[i])]
    floors = _floors(header, cells, body)
    own = _own_name(cells, names)
    if own is not None:
        floors[own] = body[own]
    return _squeeze(out, header, floors, width, names)


def _own_name(cells: list[list[str]], names: list[int]) -> int | None:
    """The row's own name: its first column of names (a box, a run), a rank of digits not one. It is never cut,
    not even at its hyphens ("amd-ryzen-ai-max-" over "395" cannot be copied): where the table cannot fit with it
    whole, it is none (a block per row); the names beside it (a label, a model) may break at a hyphen or a slash."""
    return next((i for i in names if any(ch.isalpha() for c in cells[i] for ch in c)), None)


def _floors(header: list[str], cells: list[list[str]], body: list[int]) -> list[int]:
    """The least width of each column that wraps: its header on two lines, ``WRAP_MIN`` (or its own width), and
    its longest unbreakable piece, so a word or a name's part is never cut."""
    return [max(_width(_two_lines(h)), min(body[i], WRAP_MIN),
                max((cell_len(p.rstrip()) for c in cells[i] for p in _pieces(c)), default=0))
            for i, h in enumerate(header)]


def _squeeze(out: Layout, header: list[str], floor: list[int], width: int,
             names: Collection[int] = ()) -> Layout | None:
    """Narrow the widest text column by one until the table fits ``width``; None where none can give more. A
    column of ``names`` (identifiers, one word a cell: "amd-ryzen-ai-max-395") gives way only once no column of
    words can, and only down to its floor (``table_layout``'s: its longest name)."""
    while out.total() > width:
        squeeze = [i for i in range(len(header)) if out.wrap[i] and out.widths[i] > floor[i]]
        if not squeeze:
            return None
        i = max(squeeze, key=lambda i: (i not in names, out.widths[i]))
        out.widths[i] -= 1
        if _width(out.header[i]) > out.widths[i]:
            out.header[i] = _two_lines(header[i])
    return out


def split_constant(header: list[str], rows: list[list[str]], keep: Collection[int] = (0,),
                   per_row: Mapping[int, str] | None = None) -> tuple[list[int], list[str]]:
    """The columns a table keeps, and "Header: value" for each column that holds one value in every row (of
    two or more), said once above the table instead of on every row. A column empty in every row is left out, and
    one with no figure ("—") in every row of two or more; ``keep``: columns that stay whatever they hold;
    ``per_row``: columns that count something of each row, said with what they count over ("OK/failed: 8/0 a
    level": said bare, it read as the run's total)."""
    kept, said = [], []
    for i, h in enumerate(header):
        values = {r[i] if i < len(r) else "" for r in rows}
        if i in keep or len(values) != 1:
            kept.append(i)
            continue
        value = values.pop().strip()
        if not value:
            continue  # nothing in any row
        if len(rows) < 2:
            kept.append(i)  # one row: its values are the table
        elif value != "—":  # no figure in any row is nothing to share
            said.append(f"{h}: {value}" + (f" {per_row[i]}" if per_row and i in per_row else ""))
    return kept, said


def heading_lines(said: list[str], width: int) -> list[str]:
    """The columns moved out of a table ("Test: serve"), joined by "; " on as few lines as fit ``width``; one
    is broken between its words only when it alone is wider. A line ends without a separator: capacity's read
    "SLO: pass; OK/failed: 32/0;" over the next line's sentence, a ";" left hanging."""
    lines: list[str] = []
    for part in said:
        if lines and cell_len(lines[-1]) + 2 + cell_len(part) <= width:  # room for "; "
            lines[-1] += "; " + part
            continue
        lines += textwrap.wrap(part, width, break_long_words=False, break_on_hyphens=False) or [part]
    return lines
