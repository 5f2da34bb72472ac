"""``tokenbench coldstart``: how long a server takes from start to healthy and to its first token (its table in
printing.py, which `show` prints too)."""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rich.console import Console

from .. import redact
from ..errors import TokenbenchError, UsageError
from ..servers import normalize_base_url
from ..store import Store
from .common import check_output, saved, seconds, write_json
from .printing import print_boots

if TYPE_CHECKING:
    from ..coldstart import ColdStartConfig

EXAMPLE_URL = "http://127.0.0.1:8080/v1"


def server_command(cmd: str, port: int | None) -> str:
    """--cmd with ``{port}`` replaced by --url's port, refused when it cannot be run as given."""
    try:
        argv = shlex.split(cmd)
    except ValueError as e:
        raise UsageError(f"--cmd: {e}: quote the server's command line as a shell would") from None
    if not argv:
        raise UsageError("--cmd is empty: give the server's command line")
    if "{port}" in cmd and port is None:
        raise UsageError(f"--cmd has {{port}} and --url names no port to put there: give one, e.g. --url {EXAMPLE_URL}")
    if shutil.which(argv[0]) is None:
        raise UsageError(f"--cmd: no program '{argv[0]}' here (not on PATH, or not executable): give the server's "
                         "command as a shell here would run it")
    return cmd.replace("{port}", str(port))


def _url(flag: str, text: str) -> str:
    """A URL --url or --health names, refused where it holds a placeholder or names no host."""
    example = EXAMPLE_URL if flag == "--url" else EXAMPLE_URL.replace("/v1", "/health")
    if "{port}" in text:
        raise UsageError(f"{flag} {redact.url(text)}: give the port the server listens on (e.g. {example}); "
                         "{port} in --cmd is replaced by --url's")
    url = normalize_base_url(text) if flag == "--url" else text
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is no number
    except ValueError:
        raise UsageError(f"{flag} {redact.url(text)}: the port is not a number from 1 to 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{flag} '{redact.url(text)}': give a whole http:// URL with its host, e.g. {example}")
    return url


def coldstart_config(a: argparse.Namespace, argv: list[str]) -> ColdStartConfig:
    """The cold start's config, every argument checked before a server is started: a mistake found after would
    cost a boot (minutes for a large model) and leave a server's exit code to read instead of what to change."""
    from ..coldstart import ColdStartConfig

    check_output(a.json, "--json")  # before the boots: a path found unwritable after them lost them (exit 70)
    check_output(a.log, "--log")
    base = _url("--url", a.url)
    port = urlsplit(base).port
    health = base + "/models"
    if a.health:
        health = _url("--health", a.health.replace("{port}", str(port)) if port else a.health)
    if a.model is not None and not a.model.strip():
        raise UsageError("--model is empty: give the name the server serves, or leave --model out to take the first "
                         "it lists")
    return ColdStartConfig(cmd=server_command(a.cmd, port), base_url=base, health_url=health, model=a.model,
                           api_key=a.api_key or os.environ.get("OPENAI_API_KEY"),
                           timeout_s=seconds(a.timeout, "--timeout") or 600.0, repeat=a.repeat, log_path=a.log,
                           label=a.label or socket.gethostname(), command=redact.command(["tokenbench", *argv]))


def cmd_coldstart(a: argparse.Namespace, argv: list[str], console: Console) -> int:
    from ..coldstart import run_coldstart

    cfg = coldstart_config(a, argv)
    store = Store(a.db)
    try:
        res = run_coldstart(cfg, store)
    except TokenbenchError as e:  # interrupted, or a later boot failed: the boots that finished, shown and kept
        if e.result is not None:
            print_boots(console, e.result)
            if a.json:
                write_json(a.json, e.result)
            saved(console, e.result, store.path)
        raise
    print_boots(console, res)
    if a.json:
        write_json(a.json, res)
    saved(console, res, store.path)
    return 0
