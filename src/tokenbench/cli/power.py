"""The power plan a measuring command's options (``grammar/power.py``) make: this machine's sources (``--power``,
``--power-url``, ``--power-cmd``), or the server host's through its agent (``--agent``, ``--agent-token``), and the
idle figure before a run (``--idle-power``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from typing import TYPE_CHECKING

from ..errors import UsageError
from .common import seconds

if TYPE_CHECKING:
    from ..serverhost import PowerPlan


def agent_token(a: argparse.Namespace) -> str:
    """The token for ``--agent``: given, in a file, or in $TOKENBENCH_AGENT_TOKEN."""
    if getattr(a, "agent_token", None):
        return str(a.agent_token).strip()
    if getattr(a, "agent_token_file", None):
        try:
            text = Path(a.agent_token_file).read_text().strip()
        except OSError as e:
            raise UsageError(f"--agent-token-file {a.agent_token_file}: {e.strerror or e}") from None
        if text:
            return text
        raise UsageError(f"--agent-token-file {a.agent_token_file} is empty")
    env = os.environ.get("TOKENBENCH_AGENT_TOKEN", "").strip()
    if env:
        return env
    raise UsageError("--agent needs the agent's token: --agent-token-file FILE, --agent-token TOKEN or "
                     "$TOKENBENCH_AGENT_TOKEN")


def agent_given(a: argparse.Namespace) -> bool:
    """Whether --agent names the server host's agent; refuses an empty one (an unset variable would measure with
    no agent, unsaid) and a token for no agent."""
    agent = getattr(a, "agent", None)
    if agent is not None and not agent.strip():
        raise UsageError("--agent is empty: give the agent's URL, e.g. http://gpu-box:8765 (a variable not set?)")
    if agent is None:
        for option in ("agent_token", "agent_token_file"):
            if getattr(a, option, None):
                raise UsageError(f"--{option.replace('_', '-')} is the token of --agent: give --agent URL too, or "
                                 "drop it")
    if agent is not None:
        from ..hostagent.client import agent_url

        agent_url(agent)  # its shape, before anything runs
    return agent is not None


def power_plan(a: argparse.Namespace, argv: list[str]) -> PowerPlan:
    """Where a run reads power and the server host's guard: its agent where --agent is given, a meter the user
    names, or this machine's sources where the server runs here (embedded, a loopback URL) or --power is given; a
    server elsewhere with none of those has no power figure (this machine's would describe the client)."""
    from ..power.choose import refuse_empty
    from ..servers import on_this_machine
    from ..serverhost import PowerPlan

    refuse_empty(a.power_url, a.power_cmd)  # a server elsewhere with no meter opens none to refuse it
    idle = idle_seconds(a)
    power_named = any(w == "--power" or w.startswith("--power=") for w in argv)  # its default is "auto"
    if agent_given(a):
        if a.power_url or a.power_cmd or power_named:
            raise UsageError("--agent reads power on the server host: give --power, --power-url or --power-cmd to "
                             "`tokenbench agent` there, not here")
        return PowerPlan(agent=a.agent, agent_token=agent_token(a), idle_s=idle)
    here = a.url is None or on_this_machine(a.url)
    if a.power_url or a.power_cmd or here or power_named:
        return PowerPlan(sources=a.power, url=a.power_url, cmd=a.power_cmd, idle_s=idle)
    if idle:
        raise UsageError("--idle-power measures the box under test: give --agent, --power-url or --power-cmd for a "
                         "server on another machine")
    return PowerPlan(sources="none")


def idle_seconds(a: argparse.Namespace) -> float | None:
    return seconds(getattr(a, "idle_power", None), "--idle-power")
