"""``tokenbench agent``: serve this host's guard checks, power and snapshot, read-only, to a bench run elsewhere."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console

from ..errors import UsageError
from .common import guard_config


#: The shortest token the agent takes: it guards a box's processes and power on whatever network reaches it.
MIN_TOKEN = 16


def _long_enough(token: str, where: str) -> str:
    if len(token) < MIN_TOKEN:
        raise UsageError(f"{where}: a token of {len(token)} characters is guessed in moments; give one of "
                         f"{MIN_TOKEN} or more, or a new --token-file FILE to have one made")
    return token


def agent_token(token: str | None, path: str | None, console: Console) -> str:
    """The token every request must carry: given, read from a file, or made into a new file (0600) and printed."""
    if token is not None:
        if not token.strip():
            raise UsageError("--token is empty: give a token, or --token-file FILE to have one made")
        return _long_enough(token.strip(), "--token")
    if path is None:
        raise UsageError("tokenbench agent needs a token: --token-file FILE (a new one is made there and printed "
                         "when FILE does not exist) or --token TOKEN")
    p = Path(path)
    if p.exists():
        try:
            text = p.read_text().strip()
        except OSError as e:
            raise UsageError(f"--token-file {p}: {e.strerror or e}") from None
        if not text:
            raise UsageError(f"--token-file {p} is empty: put a token in it, or remove it to have one made")
        return _long_enough(text, f"--token-file {p}")
    new = secrets.token_urlsafe(24)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise UsageError(f"--token-file {p} cannot be made: {e.strerror or e}") from None
    with os.fdopen(fd, "w") as f:
        f.write(new + "\n")
    console.print(f"tokenbench agent: a new token, kept in {p} (readable by you only): {new}", markup=False)
    return new


def _refuse_missing_pids(pids: Iterable[int]) -> None:
    """A --pid no process has: the server it meant would count as other work, and a server started later gets
    another pid."""
    import psutil

    for pid in pids:
        if not psutil.pid_exists(pid):
            raise UsageError(f"--pid {pid}: no such process on this host: give the model server's pid (pgrep -f "
                             "llama-server), or --port-of-server PORT to find it at each request")


def cmd_agent(a: argparse.Namespace, console: Console) -> int:
    from ..hostagent.server import AgentConfig, serve  # aiohttp's server: only for this command
    from ..power.choose import open_sources
    from ..power.sampler import LocalMeter

    _refuse_missing_pids(a.pid or ())
    token = agent_token(a.token, a.token_file, console)
    sources, notes = open_sources(a.power, a.power_url, a.power_cmd)
    cfg = AgentConfig(token, a.host, a.port, set(a.pid or ()), a.port_of_server, guard_config(a.guard_config))
    meter = LocalMeter(sources, a.interval, notes)
    for s in meter.sources:
        console.print(f"power: {s.name}, {s.measures}: {s.note}", markup=False)
    for n in notes:
        console.print(f"power: not read: {n}", markup=False)
    if a.host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"listening on {a.host}: anyone who reaches port {a.port} and holds the token reads this "
                      "host's state (read-only)", markup=False)

    def ready(url: str) -> None:
        console.print(f"tokenbench agent: serving {url} (GET /v1/guard, /v1/power, /v1/host); Ctrl-C stops it",
                      markup=False)

    try:
        asyncio.run(serve(cfg, meter, ready))
    except KeyboardInterrupt:
        console.print("tokenbench agent: stopped", markup=False)
    except OSError as e:
        raise UsageError(f"cannot listen on {a.host}:{a.port} ({e.strerror or e}): pick another --port or "
                         "--host") from None
    return 0
