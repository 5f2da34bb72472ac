"""The power options a measuring command shares (``--power``, ``--agent``, ``--idle-power``...): grammar only.
The meter they make is in ``cli/power.py``, imported only when a command runs."""
from __future__ import annotations

import argparse

from ...power.choose import CHOICES
from ..options import UNIT


def add_power_sources(p: argparse._ActionsContainer, default: str = "auto") -> None:
    """Which sources this machine reads: ``tokenbench agent`` and a run without ``--agent``."""
    p.add_argument("--power", choices=CHOICES, default=default,
                   help="this machine's power sources: auto, the first it has (NVML, amdgpu, RAPL; none where "
                        "--power-url or --power-cmd is given); all, every one; one by name; none")
    p.add_argument("--power-url", metavar="URL",
                   help="a DCGM exporter's or node exporter's Prometheus page to read power from")
    p.add_argument("--power-cmd", metavar="CMD",
                   help="a command that prints the watts a meter reads now, e.g. 312.5 W (run without a shell)")


def add_power_options(p: argparse._ActionsContainer) -> None:
    """A measuring command's power options (``sweep``, ``capacity``)."""
    add_power_sources(p)
    p.add_argument("--agent", metavar="URL",
                   help="the server host's `tokenbench agent` (e.g. http://gpu-box:8765): power and the guard are "
                        "read there instead of here")
    p.add_argument("--agent-token", metavar="TOKEN", help="the agent's token (default: $TOKENBENCH_AGENT_TOKEN)")
    p.add_argument("--agent-token-file", metavar="FILE", help="read the agent's token from this file")
    p.add_argument("--idle-power", metavar="DURATION",
                   help="measure the box idle this long before the run (e.g. 30s); each level then says its share "
                        "above idle " + UNIT)
