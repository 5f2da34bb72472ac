"""The tables the published write-ups print, as rows of strings, rendered for a terminal or Markdown.
``format_*`` functions return text so what users see is testable."""

from __future__ import annotations

import codecs
import io
import textwrap
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from .metrics import ServingLevel, Telemetry

if TYPE_CHECKING:
    from .results import Manifest


#: ASCII spellings of what tokenbench prints beyond ASCII, for an output that cannot encode it: a C or POSIX locale
#: with Python's UTF-8 mode off, ``PYTHONIOENCODING=ascii``, a Latin-1 terminal. Anything else: its compatibility
#: decomposition's ASCII letters ("é" "e"), else "?".
ASCII_SPELLINGS = {"—": "-", "–": "-", "−": "-", "±": "+/-", "×": "x", "≤": "<=", "≥": ">=", "≈": "~", "…": "...",
                   "·": "-", "→": "->", "←": "<-", "µ": "u", "²": "^2", "⁶": "^6", "√": "sqrt", "“": '"', "”": '"',
                   "‘": "'", "’": "'"}
ASCII_ERRORS = "tokenbench-ascii"  # the codec error handler that writes them


def _spelt(c: str) -> str:
    """One character as ASCII: itself, its spelling, its decomposition's ASCII letters, else "?"."""
    if c.isascii() or "\udc80" <= c <= "\udcff":  # a byte the locale could not decode: the stream writes it back
        return c
    return ASCII_SPELLINGS.get(c) or unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode() or "?"


def _ascii_spelling(e: UnicodeError) -> tuple[str | bytes, int]:
    if not isinstance(e, UnicodeEncodeError):
        raise e
    c = e.object[e.start]  # one at a time: a byte the locale could not decode goes back out as it came in
    return (bytes([ord(c) - 0xDC00]) if "\udc80" <= c <= "\udcff" else _spelt(c)), e.start + 1


def readable_output(*streams: TextIO) -> None:
    """Streams that cannot encode "—", "±" or "≤" write ASCII spellings of them instead of ending the command in a
    UnicodeEncodeError (stdout) or printing ``\\u2014`` (stderr). Rich draws ASCII boxes there by itself."""
    codecs.register_error(ASCII_ERRORS, _ascii_spelling)
    for stream in streams:
        try:
            "—±≤".encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(errors=ASCII_ERRORS)


def ascii_spelled(text: str, encoding: str) -> str:
    """``text`` with what ``encoding`` cannot encode spelt in ASCII (``ASCII_SPELLINGS``)."""
    try:
        text.encode(encoding)
        return text
    except (UnicodeEncodeError, LookupError):
        return "".join(map(_spelt, text))


class ReadableConsole(Console):
    """Rich's console, its strings spelt in ASCII where its output cannot encode them before they are measured, so
    a table's columns stay aligned ("77.5 +/-4%" is three cells wider than "77.5 ±4%")."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(ascii_spelled(text, self.encoding), **kwargs)


def _num(v: float | None, digits: int = 1) -> str:
    if v is None:
        return "—"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _ms(v: float | None) -> str:
    if v is None:
        return "—"
    if v >= 10_000:
        return f"{v / 1000:.1f} s"
    if v >= 100:
        return f"{v:.0f} ms"
    return f"{v:.1f} ms"


def level_label(s: ServingLevel) -> str:
    """A level in a table's first column: its rate or concurrency, and an agent session's cache mode ("4 warm":
    a session run measures each concurrency twice)."""
    cache = f" {s.session.cache}" if s.session is not None else ""
    if s.rate is not None:
        return f"{s.rate:g}/s{cache}"
    return f"{s.concurrency}{cache}" if s.concurrency is not None else "trace"  # a trace sent all at once


Column = tuple[str, Callable[[ServingLevel], str]]


def _p99_ttft(s: ServingLevel) -> str:
    return _ms(s.ttft_ms.p99) + ("*" if s.ttft_ms.n and s.ttft_ms.n < 100 else "")


def _aggregate(s: ServingLevel) -> str:
    # an imported or predicted row without this figure has 0.0 stored: not a measured zero
    return _num(s.output_throughput_tps) if s.output_throughput_tps or s.completed or s.failed else "—"


def _sweep_columns(levels: list[ServingLevel], currency: str) -> list[Column]:
    """The sweep table's columns: the fixed ones, and those only some runs have a figure for."""
    # imported rows at one concurrency can differ by prompt length only: say which is which
    keys = [(level_label(s), s.input_tokens_mean) for s in levels]
    first = "Rate" if any(s.rate is not None for s in levels) else \
        "Agents" if any(s.session is not None for s in levels) else "Concurrency"
    cols: list[Column] = [(first, level_label)]
    if len(set(keys)) > len({k for k, _ in keys}):
        cols.append(("Prompt tokens", lambda s: f"{s.input_tokens_mean:,.0f}" if s.input_tokens_mean else "—"))
    cols += [("Aggregate output tok/s", _aggregate), ("Per-agent tok/s", lambda s: _num(s.per_agent_tps)),
             ("Median TTFT", lambda s: _ms(s.ttft_ms.p50)), ("P99 TTFT", _p99_ttft),
             ("Median TPOT", lambda s: _ms(s.tpot_ms.p50))]
    if any(s.cost_per_mtok is not None for s in levels):
        cols.append((f"{currency}/M output", lambda s: _num(s.cost_per_mtok, 2) if s.cost_per_mtok is not None else "—"))
    if any(s.slo for s in levels):  # --slo given: its verdict and goodput per level, before the counts
        cols += [("SLO", slo_verdict), ("Goodput req/s", lambda s: _num(s.goodput_rps, 2))]
    # published rows that give only a prefill or a decode rate: those columns, or the row would be blank
    if any((s.prefill_tps or s.decode_tps) and not (s.completed or s.failed) for s in levels):
        cols += [("Prefill tok/s", lambda s: _num(s.prefill_tps)), ("Decode tok/s", lambda s: _num(s.decode_tps))]
    cols += [("OK/failed", lambda s: f"{s.completed}/{s.failed}" if s.completed or s.failed else "—"),
             ("Flags", lambda s: ",".join(f for f in s.flags if f != "p99_estimate") or "")]
    return cols


def sweep_rows(levels: list[ServingLevel], currency: str = "USD") -> tuple[list[str], list[list[str]]]:
    cols = _sweep_columns(levels, currency)
    return [h for h, _ in cols], [[cell(s) for _, cell in cols] for s in levels]


def slo_verdict(s: ServingLevel) -> str:
    if s.slo_met is None:
        return "—"
    return "pass" if s.slo_met else "FAIL"


def single_stream_lines(levels: list[ServingLevel]) -> list[str]:
    out = []
    for s in levels:
        if s.session is not None and s.session.cache == "warm":
            continue  # its prompts were mostly served from the cache: input / TTFT is no prefill rate
        if s.concurrency == 1 and (s.prefill_tps or s.decode_tps):
            parts = ([f"prefill {_num(s.prefill_tps)} tok/s (input tokens / TTFT, median)"] if s.prefill_tps else []) \
                + ([f"single-stream decode {_num(s.decode_tps)} tok/s (1 / median TPOT)"] if s.decode_tps else [])
            out.append("Concurrency 1: " + ", ".join(parts))
            break
    return out


#: Time to first text this far past the median TTFT is worth a note: tokens were streamed before their text.
HELD_BACK_NOTE_MS = 1.0


def notes(levels: list[ServingLevel]) -> list[str]:
    out = []
    slos = {s.slo for s in levels if s.slo}
    if slos:
        out.append(f"SLO {', '.join(sorted(slos))}: pass when every level objective holds (no request failed, "
                   "unless errors= allows some); goodput counts the requests within every per-request limit")
    if any(s.ttft_ms.n and s.ttft_ms.n < 100 for s in levels):
        out.append("* p99 over fewer than 100 requests: an estimate from few tail samples")
    by_text: dict[str, list[str]] = {}
    for s in levels:
        for w in s.warnings:
            by_text.setdefault(w, []).append(level_label(s))
        if s.errors:
            kinds = ", ".join(f"{k}: {v}" for k, v in sorted(s.errors.items()))
            by_text.setdefault(f"failed requests: {kinds}", []).append(level_label(s))
    out += [f"[{','.join(keys)}] {text}" for text, keys in by_text.items()]
    for s in levels:
        if s.reasoning_share is not None and s.answer_throughput_tps is not None:
            out.append(f"[{level_label(s)}] reasoning took {s.reasoning_share:.0%} of the output tokens: answers "
                       f"came at {_num(s.answer_throughput_tps)} of {_num(s.output_throughput_tps)} tok/s")
    for s in levels:
        text = s.time_to_first_text_ms
        if text is not None and text.p50 is not None and s.ttft_ms.p50 is not None \
                and text.p50 - s.ttft_ms.p50 >= HELD_BACK_NOTE_MS:
            out.append(f"[{level_label(s)}] first visible text at a median {_ms(text.p50)}, "
                       f"{_ms(text.p50 - s.ttft_ms.p50)} after the first token: the server held its text back "
                       "(a piece of a character); tools that wait for text (AIPerf, GuideLLM) call that TTFT")
    for s in levels:
        parts = _server_parts(s)
        if parts:
            out.append(f"[{level_label(s)}] server: " + ", ".join(parts))
    return out


def _server_parts(s: ServingLevel) -> list[str]:
    """What the server said of a level: its /metrics (and power), and what its responses said of its cache."""
    t = s.telemetry or Telemetry()
    parts: list[str] = []
    if t.kv_cache_usage_max is not None:
        parts.append(f"peak KV cache {t.kv_cache_usage_max:.0%}")
    if t.waiting_max:
        parts.append(f"up to {t.waiting_max:.0f} requests waiting")
    if t.spec_acceptance_rate is not None:
        mal = t.spec_mean_acceptance_length
        parts.append(f"speculative acceptance {t.spec_acceptance_rate:.2f}"
                     + (f" (mean acceptance length {mal:.2f})" if mal else ""))
    if t.prefix_cache_hit_rate is not None:
        parts.append(f"prefix-cache hits {t.prefix_cache_hit_rate:.0%}")
    if s.cached_share:  # the responses' own count (usage or timings), beside the server's /metrics
        parts.append(f"{s.cached_share:.0%} of prompt tokens served from its cache ({s.cached_source})")
    if t.j_per_output_token is not None:
        parts.append(f"{t.j_per_output_token:.2f} J/token, {t.output_tokens_per_watt or 0:.2f} tok/s per W")
    return parts


def md_escape(text: str) -> str:
    """Untrusted text (a model name, a label) made inert in Markdown: no HTML, no table breaks, and no line break
    (a newline in a label used to start a heading of its own)."""
    text = " ".join(text.splitlines())
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def format_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(md_escape(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def format_sweep_markdown(levels: list[ServingLevel], currency: str = "USD") -> str:
    header, rows = sweep_rows(levels, currency)
    parts = [format_markdown(header, rows)]
    extra = single_stream_lines(levels) + notes(levels)
    if extra:
        parts += ["", *extra]
    return "\n".join(parts)


#: Spaces between two columns of a terminal table (a space of padding beside the rule's own); one more leads.
GAP = 2
#: A text column squeezed to fit wraps its cells onto lines of at least this many characters (or its own width).
WRAP_MIN = 12
#: Where a text cell may break onto its next line: after a space, a hyphen, a slash, an underscore or a comma.
_BREAKS = " -/_,"


def _numeric(cells: list[str]) -> bool:
    """A column of numbers (with their units, "—" where there is none): right-aligned, never wrapped."""
    said = [c.strip() for c in cells if c.strip() not in ("", "—")]
    return bool(said) and all(c[:1].isdigit() or (c[:1] in "+-" and c[1:2].isdigit()) for c in said)


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
    """The text cut after each place it may break (a space, a hyphen, a slash, an underscore, a comma)."""
    pieces, word = [], ""
    for ch in text:
        word += ch
        if ch in _BREAKS:
            pieces.append(word)
            word = ""
    return pieces + ([word] if word else [])


def wrap_cell(text: str, width: int) -> list[str]:
    """A text cell on lines of at most ``width``, broken after a space, hyphen, slash, underscore or comma (a
    model name or a label breaks where it reads on); a piece longer than a line is cut (``table_layout`` gives no
    column less than its longest piece)."""
    pieces = _pieces(text)
    lines = [""]
    for p in pieces:
        if lines[-1] and cell_len(lines[-1] + p.rstrip()) > width:
            lines.append("")
        while cell_len(lines[-1] + p.rstrip()) > width:
            cut = max(1, width - cell_len(lines[-1]))
            lines[-1], p = lines[-1] + p[:cut], p[cut:]
            lines.append("")
        lines[-1] += p
    return [ln.rstrip() for ln in lines if ln.strip()] or [""]


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
    return _squeeze(out, header, _floors(header, cells, body), width)


def _floors(header: list[str], cells: list[list[str]], body: list[int]) -> list[int]:
    """The least width of each column that wraps: its header on two lines, ``WRAP_MIN`` (or its own width), and
    its longest unbreakable piece, so a word or a name's part is never cut."""
    return [max(_width(_two_lines(h)), min(body[i], WRAP_MIN),
                max((cell_len(p.rstrip()) for c in cells[i] for p in _pieces(c)), default=0))
            for i, h in enumerate(header)]


def _squeeze(out: Layout, header: list[str], floor: list[int], width: int) -> Layout | None:
    """Narrow the widest text column by one until the table fits ``width``; None where none can give more."""
    while out.total() > width:
        squeeze = [i for i in range(len(header)) if out.wrap[i] and out.widths[i] > floor[i]]
        if not squeeze:
            return None
        i = max(squeeze, key=lambda i: out.widths[i])
        out.widths[i] -= 1
        if _width(out.header[i]) > out.widths[i]:
            out.header[i] = _two_lines(header[i])
    return out


def split_constant(header: list[str], rows: list[list[str]],
                   keep: Collection[int] = (0,)) -> tuple[list[int], list[str]]:
    """The columns a table keeps, and "Header: value" for each column that holds one value in every row (of
    two or more), said once above the table instead of on every row. A column empty in every row is left out, and
    one with no figure ("—") in every row of two or more; ``keep``: columns that stay whatever they hold."""
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
            said.append(f"{h}: {value}")
    return kept, said


def heading_lines(said: list[str], width: int) -> list[str]:
    """The columns moved out of a table ("Test: serve"), joined by "; " on as few lines as fit ``width``; one
    is broken between its words only when it alone is wider."""
    lines: list[str] = []
    for part in said:
        if lines and cell_len(lines[-1]) + 3 + cell_len(part) <= width:  # room for "; " and a ";" after it
            lines[-1] += "; " + part
            continue
        if lines:
            lines[-1] += ";"
        lines += textwrap.wrap(part, width, break_long_words=False, break_on_hyphens=False) or [part]
    return lines


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
                lines = textwrap.wrap(v, max(20, console.width - len(indent)), break_long_words=False,
                                      break_on_hyphens=False) or [v]
                head = f"  {h:<{width}}  " if beside else f"  {h}\n{indent}"
                console.print(head + f"\n{indent}".join(lines), markup=False, highlight=False, soft_wrap=True)


#: A session table shows every turn up to this many, then a readable subset (the first turns, every k-th, the last).
SESSION_TURNS_SHOWN = 12


def _shown_turns(turns: list[int]) -> list[int]:
    if len(turns) <= SESSION_TURNS_SHOWN:
        return turns
    step = -(-len(turns) // (SESSION_TURNS_SHOWN - 3))
    keep = set(turns[:3]) | set(turns[step - 1::step]) | {turns[-1]}
    return [t for t in turns if t in keep]


def _share(part: float | None, whole: float | None) -> str:
    return f"{100 * part / whole:.0f}%" if part is not None and whole else "—"


def session_rows(warm: ServingLevel, busted: ServingLevel | None) -> tuple[list[str], list[list[str]]]:
    """One agent count's turns: the context each turn sent, the share the server served from its cache, TTFT with
    the cache warm and busted (p50 over the sessions), what the cache bought, and the decode rate at that turn."""
    assert warm.session is not None
    cold = {t.turn: t for t in busted.session.turns} if busted is not None and busted.session is not None else {}
    by_turn = {t.turn: t for t in warm.session.turns}
    header = ["Turn", "Context", "Cached", "TTFT warm", "TTFT busted", "Gain", "Decode tok/s"]
    rows = []
    for k in _shown_turns(sorted(by_turn)):
        t, b = by_turn[k], cold.get(k)
        gain = b.ttft_ms.p50 / t.ttft_ms.p50 if b is not None and b.ttft_ms.p50 and t.ttft_ms.p50 else None
        rows.append([str(k + 1), _num(t.context_tokens_mean, 0), _share(t.cached_tokens_mean, t.context_tokens_mean),
                     _ms(t.ttft_ms.p50), _ms(b.ttft_ms.p50) if b is not None else "—",
                     f"{gain:.1f}x" if gain else "—", _num(t.decode_tps)])
    return header, rows


def session_lines(s: ServingLevel) -> list[str]:
    """A session level's totals: sessions finished and their time, what the cache served by the responses' count
    and by the server's own counters."""
    st = s.session
    if st is None:
        return []
    done = []
    if st.sessions:
        done.append(f"{st.sessions_finished}/{st.sessions} sessions finished")
    if st.session_s.p50 is not None:
        done.append(f"session time p50 {st.session_s.p50:.1f} s" +
                    (f" (p90 {st.session_s.p90:.1f} s)" if st.session_s.p90 is not None and st.session_s.n > 1 else ""))
    cache = [f"cached {100 * st.cached_share:.0f}% of prompt tokens ({st.cached_source})"
             if st.cached_share is not None else "the server reported no cached tokens"]
    if st.server_hit_share is not None:
        cache.append(f"server prefix-cache hits {100 * st.server_hit_share:.0f}% (/metrics)")
    parts = [", ".join(done), ", ".join(cache)]
    if st.capped or st.compactions:
        parts.append(f"at the context cap {st.capped} ended, {st.compactions} compacted")
    return [f"{level_label(s)}: " + "; ".join(p for p in parts if p)]


def agents_text(n: int | None) -> str:
    """"1 agent", "8 agents"."""
    return f"{n} agent{'' if n == 1 else 's'}"


def session_headline(warm: ServingLevel, busted: ServingLevel | None) -> str | None:
    """What the cache bought at the last turn both modes reached: 'turn 20 at 4,810 tokens: TTFT 0.08 s cached,
    1.12 s uncached (14x)'."""
    if warm.session is None or busted is None or busted.session is None:
        return None
    cold = {t.turn: t for t in busted.session.turns}
    both = [t for t in warm.session.turns if t.turn in cold and t.ttft_ms.p50 and cold[t.turn].ttft_ms.p50]
    if not both:
        return None
    t = both[-1]
    b = cold[t.turn]
    assert t.ttft_ms.p50 is not None and b.ttft_ms.p50 is not None
    head = f"{agents_text(warm.concurrency)}, turn {t.turn + 1} at {_num(t.context_tokens_mean, 0)} tokens of context: "
    if not warm.session.cached_share:  # nothing said to be cached: the two are not the cache's doing
        return head + (f"TTFT {t.ttft_ms.p50 / 1000:.2f} s warm, {b.ttft_ms.p50 / 1000:.2f} s busted, and the "
                       "server reported no cached tokens: not a measure of its cache")
    return head + (f"TTFT {t.ttft_ms.p50 / 1000:.2f} s cached, {b.ttft_ms.p50 / 1000:.2f} s uncached "
                   f"({b.ttft_ms.p50 / t.ttft_ms.p50:.1f}x)")


def session_pairs(levels: list[ServingLevel]) -> list[tuple[ServingLevel, ServingLevel | None]]:
    """Each agent count's warm level and its busted baseline (None where it was not run)."""
    busted = {s.concurrency: s for s in levels if s.session is not None and s.session.cache == "busted"}
    return [(s, busted.get(s.concurrency)) for s in levels if s.session is not None and s.session.cache == "warm"]


def print_sessions(console: Console, levels: list[ServingLevel], fmt: str = "table") -> None:
    """The session view of a run: per agent count, TTFT against the turn and its context, warm and busted."""
    for warm, busted in session_pairs(levels):
        print_table(console, *session_rows(warm, busted), fmt,
                    title=f"{agents_text(warm.concurrency)}: each turn, p50 over the sessions", numeric=True)
        headline = session_headline(warm, busted)
        if headline:
            console.print(headline, markup=False, highlight=False)
    for s in levels:
        for line in session_lines(s):
            console.print(line, markup=False, highlight=False)


def print_sweep(console: Console, levels: list[ServingLevel], currency: str, title: str | None = None) -> None:
    header, rows = sweep_rows(levels, currency)
    # what every level shares said once above the table; the flags under it where they do not fit in it
    print_table(console, header, rows, title=title, numeric=True, keep=(0,), aside=len(header) - 1)
    if any(s.session is not None for s in levels):
        print_sessions(console, levels)
    for line in single_stream_lines(levels):
        console.print(line)
    for line in notes(levels):
        console.print(line, style="yellow", markup=False, highlight=False)


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
        parts.append(f"trace {trace.get('path')}: {trace.get('requests')} requests over {trace.get('replay_s')} s "
                     f"(x{trace.get('speed')}), ideal cached share {trace.get('ideal_cached_share', 0):.0%}")
    elif (wl.get("input_len") is not None and wl.get("output_len") is not None and lengths_line(manifest) is None
          and wl.get("kind") != "sessions"):  # a session's prompts grow turn by turn: said with the sessions
        parts.append(f"{wl['input_len']} in / {wl['output_len']} out tokens" + (f" ({wl['shape']})" if wl.get("shape") else ""))
    if wl.get("kind") == "sessions":
        parts.append(_session_workload(wl))
    if wl.get("api"):
        parts.append(f"{wl['api']} API")
    if manifest.tokenizer:
        parts.append(f"tokenizer: {manifest.tokenizer}")
    emb = manifest.embedded
    if emb:
        parts.append(f"embedded {emb.get('engine')} engine, healthy after {emb.get('startup_s', 0):.1f} s (cold start)")
    return "; ".join(parts)


def _session_workload(wl: dict[str, Any]) -> str:
    """A session run's workload as a run's description states it (the manifest's texts, written by SessionPlan)."""
    def text(key: str) -> str:
        d = wl.get(key)
        return str(d.get("text")) if isinstance(d, dict) else "?"

    runs = f"{wl.get('sessions')} sessions x " if wl.get("sessions") else "sessions of "  # a prediction: per agent
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
    if wl.get("kind") == "sessions":  # its lengths are stated with the sessions (describe_run)
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
    """The table without column ``k``, and its values as lines under it ("Concurrency 4 flags: client_bound")."""
    under = [f"{head[0]} {r[0]} {head[k].lower()}: {r[k]}" for r in body if r[k].strip()]
    return head[:k] + head[k + 1:], [r[:k] + r[k + 1:] for r in body], under


def _drawn(layout: Layout, body: list[list[str]], marks: set[int]) -> Table:
    """The rows as Rich draws them in ``layout``: text wrapped between words, the group rows (``marks``) bold."""
    t = Table(box=box.SIMPLE_HEAVY, show_edge=False, padding=(0, 0, 0, 1))
    for h, w, right in zip(layout.header, layout.widths, layout.right):
        t.add_column(h, width=w, justify="right" if right else "left", no_wrap=True, overflow="fold")
    for i, r in enumerate(body):
        t.add_row(*("\n".join(wrap_cell(c, w)) if wrap else c for c, w, wrap in zip(r, layout.widths, layout.wrap)),
                  style="bold" if i in marks else None)
    return t


def print_table(console: Console, header: list[str], rows: list[list[str]], fmt: str = "table",
                title: str | None = None, numeric: bool = False, keep: Collection[int] | None = None,
                aside: int | None = None, group: int | None = None) -> None:
    """Any (header, rows) table, for a terminal or as Markdown (every column, as given). On a terminal, headers
    go onto two lines and text wraps to fit the width; ``keep`` given, the columns that hold one value in every
    row are said once in a heading line above it (``keep``: columns that stay whatever they hold; a column empty
    in every row is left out); ``group``: a column that, where it varies, heads each run of rows on a row of its
    own instead of taking a column ("Concurrency 4", the rows sorted by it); ``aside``: a text column (notes,
    flags) said under the table, row by row, where the table does not fit with it. One block per row only when a
    row still cannot fit. ``numeric``: only the last column is text that may wrap."""
    if fmt == "markdown":
        console.print(format_markdown(header, rows), markup=False, highlight=False, soft_wrap=True)
        return
    # spelt as the output will show them before they are measured ("±" is "+/-" on an ASCII terminal)
    header = [ascii_spelled(h, console.encoding) for h in header]
    rows = [[ascii_spelled(c, console.encoding) for c in r] for r in rows]
    kept, said = split_constant(header, rows, keep) if keep is not None else (list(range(len(header))), [])
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
    if title:
        console.print(title, markup=False, highlight=False)
    for line in heading_lines(said, console.width):
        console.print(line, markup=False, highlight=False)
    if layout is None:
        print_vertical(console, *plain)
        return
    console.print(_drawn(layout, body, marks))
    for line in under:
        console.print(line, markup=False, highlight=False)
