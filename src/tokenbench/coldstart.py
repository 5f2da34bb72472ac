"""Cold start: start a server, time it to its first healthy answer and to its first generated token, stop it.
Repeated, the first boot (nothing cached: weights from disk, kernels compiled) is told apart from later ones
(page cache warm, compile caches filled)."""

from __future__ import annotations

import asyncio
import shlex
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from .client import PreparedRequest
from .engines.child import spawn, stop, tail
from .endpoint import stream_client
from .errors import EndpointError, RunInterrupted, UsageError
from .records import RequestRecord
from .results import Manifest, RunResult, new_run_id, now_iso
from .servers import check_model, discover, http_status, key_refused
from .store import Store


@dataclass(slots=True)
class Boot:
    n: int
    healthy_s: float
    first_token_s: float | None
    model: str | None
    error: str | None = None
    #: the engine and its version as the server says (servers.discover): the run's, in its manifest, not a boot's
    engine: tuple[str | None, str | None] = (None, None)
    #: a failed boot's last lines of the server's output, for the error (not stored: the log file keeps it whole)
    said: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("engine", "said")}


async def _first_token(base_url: str, model: str | None,
                       api_key: str | None) -> tuple[float, str, tuple[str | None, str | None]]:
    """When the first token came (perf_counter_ns), of which model, from which engine (its name and version)."""
    async with aiohttp.ClientSession() as http:
        info = await discover(http, base_url, api_key, model=model)
        name = check_model(info, model, base_url)  # a name it does not serve: said so, not a failed request
        client = stream_client(http, base_url, name, info.adapter, api_key=api_key, timeout_s=600)
        rec = RequestRecord(index=0)
        try:
            await client.send(PreparedRequest("Hello", 4), rec)
        finally:
            await client.close()
        if not rec.ok:
            raise EndpointError(f"the first request failed ({rec.error_kind}: {rec.error})")
        return rec.first_token_ns or 0, name, (info.engine, info.engine_version)


def boot(n: int, cmd: str, base_url: str, health_url: str, model: str | None, timeout_s: float,
         log_path: str | None = None, api_key: str | None = None) -> Boot:
    argv = shlex.split(cmd)
    if not argv:
        raise UsageError("--cmd is empty: give the server's command line")
    # without --log its output is kept in a temporary file until the boot ends, for the error's tail
    log = open(log_path, "a+b") if log_path else tempfile.TemporaryFile()
    t0_ns = time.perf_counter_ns()
    try:
        proc = spawn(argv, log)  # its own session, and it ends with tokenbench
    except OSError as e:
        log.close()
        raise UsageError(f"cannot start '{argv[0]}': {e}") from None
    try:
        while True:
            if proc.poll() is not None:
                return Boot(n, (time.perf_counter_ns() - t0_ns) / 1e9, None, model, said=tail(log),
                            error=f"the server exited with code {proc.returncode} before it was healthy")
            status = http_status(health_url, api_key)
            if status == 200:
                break
            if status in (401, 403):  # up, and refusing: waiting out --timeout would not change its answer
                raise EndpointError(key_refused(health_url, status, api_key))
            if (time.perf_counter_ns() - t0_ns) / 1e9 > timeout_s:
                return Boot(n, timeout_s, None, model, error=f"not healthy within {timeout_s:g} s", said=tail(log))
            time.sleep(0.05)
        healthy = (time.perf_counter_ns() - t0_ns) / 1e9
        first_ns, name, engine = asyncio.run(_first_token(base_url, model, api_key))
        return Boot(n, healthy, (first_ns - t0_ns) / 1e9, name, engine=engine)
    finally:
        stop(proc, 15)
        log.close()


def answers(url: str) -> bool:
    """Whether any server answers at ``url`` now (any HTTP status counts: the port is taken)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False


@dataclass(slots=True)
class ColdStartConfig:
    cmd: str  # the server's command line, its port filled in
    base_url: str
    health_url: str
    model: str | None = None
    api_key: str | None = None  # sent, never stored
    timeout_s: float = 600.0
    repeat: int = 1
    log_path: str | None = None
    label: str | None = None
    command: str = ""  # tokenbench's own command line, redacted


def boot_summary(boots: list[dict[str, Any]]) -> str | None:
    """The first boot against the later ones (cached weights and compiled kernels), when there are later: their
    range, or their one value where the range is one as printed."""
    if len(boots) < 2:
        return None
    later = [float(b["healthy_s"]) for b in boots[1:]]
    low, high = f"{min(later):.2f}", f"{max(later):.2f}"
    which = "later boot" if len(later) == 1 else "later boots"
    # the later boots' edge is what the first left behind (weights in the page cache, compiled kernels): said only
    # where they were faster ("0.07..0.89 s (cached ...)" after a cold boot of 0.06 s read as a reason for nothing)
    why = " (cached weights and compiled kernels)" if max(later) < float(boots[0]["healthy_s"]) else ""
    return (f"first boot {float(boots[0]['healthy_s']):.2f} s to healthy; {which} "
            f"{low if low == high else f'{low}..{high}'} s{why}")


def run_coldstart(cfg: ColdStartConfig, store: Store) -> RunResult:
    """Boot the server ``cfg.repeat`` times and store the boots as one run of kind coldstart (its manifest holds
    the boots; it has no levels). Refuses when something already answers at the health URL (it would be timed
    instead). The result is the run as stored, read back as ``show`` reads it: ``coldstart --json`` and
    ``show --json`` write one document."""
    from . import __version__, redact
    from .reader import load_result

    if cfg.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    if answers(cfg.health_url):
        raise UsageError(f"something already answers at {cfg.health_url}: stop it first, or give the server another "
                         "port (--cmd '... --port {port}' with a free port in --url); it would be timed instead")
    boots: list[Boot] = []
    started = now_iso()

    def stored(status: str, error: str | None = None) -> RunResult:
        engine, version = boots[0].engine
        manifest = Manifest(command=cfg.command, endpoint=cfg.base_url, model=boots[0].model, engine=engine,
                            engine_version=version, boots=[b.to_dict() for b in boots], label=cfg.label,
                            key_order=("label",), extra={"server_command": redact.command(shlex.split(cfg.cmd))})
        rid = new_run_id()
        store.save_run(rid, "coldstart", cfg.label, manifest.to_dict(), "measured", [], __version__, started, now_iso())
        if status != "complete":
            store.finish_run(rid, status, now_iso(), error)
        return load_result(store, rid)

    try:
        for n in range(cfg.repeat):
            b = boot(n + 1, cfg.cmd, cfg.base_url, cfg.health_url, cfg.model, cfg.timeout_s, cfg.log_path,
                     cfg.api_key)
            if b.error:  # the server died or never came up: the endpoint cannot be used (exit 3), as a sweep says
                where = f"its output: {cfg.log_path}" if cfg.log_path else "--log FILE keeps its output"
                raise EndpointError(f"boot {n + 1}: {b.error} ({where})" +
                                    (f"; it said last:\n{b.said}" if b.said else ""))
            boots.append(b)
    except KeyboardInterrupt:  # the boots that finished are kept, as a sweep keeps its levels
        if not boots:
            raise
        cut = RunInterrupted(f"interrupted after {len(boots)} of {cfg.repeat} boots: the run keeps them")
        cut.result = stored("interrupted", "interrupted")
        cut.run_id = cut.result.run_id
        raise cut from None
    except EndpointError as e:
        if boots:
            e.result = stored("failed", str(e).splitlines()[0])
            e.run_id = e.result.run_id
        raise
    return stored("complete")
