"""``tokenbench record``: its typed config (``record.RecordConfig``), the recording (``record.record``,
until Ctrl-C) and the lines it prints: where to point the agent, then what was recorded and what failed."""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from .. import redact
from ..console import print_hanging
from ..errors import UsageError
from .common import check_output
from .grammar.record import DEFAULT_BLOCK

def upstream_root(text: str) -> str:
    """The upstream's root URL (``http://host:port``, any path before ``/v1`` kept) from what the user typed."""
    url = text.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    scheme = url.split("://", 1)[0].lower()
    if scheme not in ("http", "https"):
        raise UsageError(f"--upstream {redact.url(text)}: only http:// and https:// servers can be recorded")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise UsageError(f"--upstream {redact.url(text)}: the port is not a number from 1 to 65535") from None
    if redact.has_userinfo(url):
        raise UsageError(f"--upstream {redact.url(text)} carries credentials: the agent's own key is forwarded, "
                         "so give the URL without them")
    if not parts.hostname or parts.query or parts.fragment:
        raise UsageError(f"--upstream {redact.url(text)}: give the server's base URL, e.g. http://gpu-box:8000")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def record_config(a: argparse.Namespace) -> Any:
    from ..record.run import RecordConfig

    if not a.lengths_only:
        for flag, value in (("--block-size", a.block_size), ("--tokenizer", a.tokenizer)):
            if value is not None:
                raise UsageError(f"{flag} goes with --lengths-only (a full log keeps the text, not token ids)")
    root = upstream_root(a.upstream)
    check_output(a.out, "--out")
    out = Path(a.out)
    if out.exists():
        raise UsageError(f"--out {a.out} already exists: name a new file (a log holds one recording)")
    if a.tokenizer is not None and not Path(a.tokenizer).exists():
        raise UsageError(f"--tokenizer {a.tokenizer}: no such file or folder")
    return RecordConfig(root, out, a.host, a.port, a.lengths_only, a.block_size or DEFAULT_BLOCK, a.tokenizer)


def unreachable(root: str, timeout_s: float = 2.0) -> str | None:
    """Why nothing takes a connection at the upstream now (refused, no such host, a timeout), or None where
    something does. The proxy starts either way (the server may be on its way up); the user hears it at once,
    not from a count of failures at Ctrl-C."""
    import socket

    u = urlsplit(root)
    try:
        with socket.create_connection((u.hostname or "", u.port or (443 if u.scheme == "https" else 80)),
                                      timeout=timeout_s):
            return None
    except OSError as e:
        return e.strerror or type(e).__name__


def fast_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (a dependency off Windows), else asyncio's: the proxy stands
    between an agent and its server, and on uvloop its tail under many streams is shorter (16 cores, a core
    each, 32 streams of 1 KB: +0.13 ms at p99 against +0.52 ms; one stream: +0.36 against +0.43 ms;
    benchmarks/record_overhead.py measures both side by side)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def cmd_record(a: argparse.Namespace, console: Console) -> int:
    from ..record.run import Summary, record

    config = record_config(a)
    holder: list[Summary] = []

    def ready(root: str) -> None:
        # each address on a line of its own, whole, to copy (the three lines fit 80 columns but for a long --out)
        console.print(f"recording to {config.out} until Ctrl-C; point the agents at\n"
                      f"  OPENAI_BASE_URL={root}/v1\n  ANTHROPIC_BASE_URL={root}", soft_wrap=True, markup=False,
                      highlight=False)
        if (why := unreachable(config.upstream)) is not None:
            print_hanging(console, f"warning: nothing answers at {redact.url(config.upstream)} now ({why}): the "
                                   "agent's requests fail until it does")
        console.file.flush()

    try:
        with asyncio.Runner(loop_factory=fast_loop()) as runner:
            runner.run(record(config, ready, holder))
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM, SIGHUP) is how a recording ends
        if not holder:  # before the proxy served: its writer (a lengths-only log's tokenizer) was still loading
            print_hanging(console, f"interrupted before the proxy was ready: nothing recorded, no {config.out} left")
    for line in holder[0].lines() if holder else []:
        print_hanging(console, line)
    # a recording that holds nothing, or lost what its writer was handed, did not do its job
    return 0 if holder and holder[0].ok else 1
