"""``tokenbench coldstart``: how long a server takes from start to healthy and to its first token; its table."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .. import redact
from ..console import print_table
from ..servers import normalize_base_url
from ..store import Store
from .common import seconds, write_json
from .options import LABEL, UNIT, POSITIVE_INT, add_db


def boot_rows(boots: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """A cold start's boots: the first is the cold one (nothing cached)."""
    rows = [[str(b["n"]) + (" (cold)" if b["n"] == 1 else ""), f"{b['healthy_s']:.2f} s",
             f"{b['first_token_s']:.2f} s" if b.get("first_token_s") is not None else "—"] for b in boots]
    return ["Boot", "Start -> healthy", "Start -> first token"], rows


def cmd_coldstart(a: argparse.Namespace, argv: list[str], console: Console) -> int:
    from urllib.parse import urlparse

    from ..coldstart import ColdStartConfig, boot_summary, run_coldstart

    base = normalize_base_url(a.url)
    cfg = ColdStartConfig(cmd=a.cmd.replace("{port}", str(urlparse(base).port or "")), base_url=base,
                          health_url=a.health or base + "/models", model=a.model,
                          timeout_s=seconds(a.timeout, "--timeout") or 600.0, repeat=a.repeat, log_path=a.log,
                          label=a.label, command=redact.command(["tokenbench", *argv]))
    res = run_coldstart(cfg, Store(a.db))
    boots = res.manifest.boots or []
    print_table(console, *boot_rows(boots))
    line = boot_summary(boots)
    if line:
        console.print(line, markup=False)
    if a.json:
        write_json(a.json, res)
    console.print(f"run {res.run_id} (coldstart) saved", style="dim", markup=False)
    return 0


def add_coldstart_parser(sub: Any) -> None:
    """``tokenbench coldstart``'s options."""
    cs = sub.add_parser("coldstart", help="time a server from start to healthy and to its first token, repeatedly")
    cs.add_argument("--cmd", required=True, help="the server's command line; {port} is replaced by --url's port")
    cs.add_argument("--url", required=True, help="its OpenAI-compatible base URL")
    cs.add_argument("--health", help="the URL that answers 200 when it is up (default: URL/models)")
    cs.add_argument("--model")
    cs.add_argument("--repeat", type=POSITIVE_INT, default=3, help="boots; the first is the cold one")
    cs.add_argument("--timeout", default="600s", help="how long a boot may take (default 600s) " + UNIT)
    cs.add_argument("--label", type=LABEL)
    cs.add_argument("--json", help="write the boots to this JSON file; - for stdout")
    cs.add_argument("--log", help="append the server's output to this file")
    add_db(cs)
