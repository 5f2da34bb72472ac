"""What tokenbench prints beyond ASCII, spelt in ASCII for an output that cannot encode it; set on the streams
before anything is printed, ``--help`` included, so it imports nothing of Rich's (``console.py`` prints with it)."""
from __future__ import annotations

import codecs
import io
import unicodedata
from typing import TextIO


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
