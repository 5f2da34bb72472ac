"""The box under test, read where it is: power from its own sources, and the clean-bench guard on its own host.

Where a run reads power (``PowerPlan``): the server host's ``tokenbench agent`` (``--agent``: its sources, its
guard, its snapshot), a meter a user points at (``--power-url``, ``--power-cmd``), or this machine's own sources
(NVML, amdgpu, RAPL) where the server runs here. A server on another machine with none of those has no power
figure: this machine's would describe the client, not the box. ``ServerHost`` is one run's: it opens the meter,
measures the box idle where asked, takes the host's snapshot for the manifest, and checks the host's guard before
every level (a dirty server host refuses under ``--guard strict``, naming the host)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import redact
from .guard import refuse_if_dirty
from .levels import NO_METER_NOTES

if TYPE_CHECKING:
    from .guard_results import GuardSnapshot
    from .hostagent.client import AgentClient
    from .power.interval import Interval
    from .power.sampler import LocalMeter, PowerMeter


@dataclass(frozen=True, slots=True)
class PowerPlan:
    """Where a run reads power and the server host's guard. ``agent_token`` is used, never stored."""

    agent: str | None = None  # the server host's agent URL
    agent_token: str | None = None
    sources: str = "auto"  # this machine's (power.choose.CHOICES)
    url: str | None = None
    cmd: str | None = None
    idle_s: float | None = None

    def describe(self) -> dict[str, Any]:
        """What a run's manifest records (no token)."""
        where = "agent" if self.agent else "url" if self.url else "command" if self.cmd else \
            "none" if self.sources == "none" else "this machine"
        # a meter's URL may carry its exporter's password, and its command a key: both stored as any command line
        # this machine's sources are not read where the agent reads its own (the server host's snapshot says which)
        return {"read": where, "agent": redact.url(self.agent) if self.agent else None,
                "sources": None if self.agent else self.sources,
                "url": redact.url(self.url) if self.url else None,
                "command": redact.command_line(self.cmd) if self.cmd else None, "idle_s": self.idle_s}


class ServerHost:
    """One run's view of the box under test: its power meter, idle figure, snapshot and guard."""

    def __init__(self, plan: PowerPlan, meter: PowerMeter | None, agent: AgentClient | None) -> None:
        self.plan, self.meter, self.agent = plan, meter, agent
        self.idle: list[Interval] = []
        self.snapshot: dict[str, Any] | None = None
        #: why no figure is read, where none is: each level's telemetry says it
        self.note = f"{NO_METER_NOTES[0]}: --agent on the server host, --power-url or --power-cmd"

    @classmethod
    async def open(cls, plan: PowerPlan | None) -> ServerHost:
        """Open the meter the plan names (none for None); measure the box idle where asked; take the host's
        snapshot through its agent."""
        plan = plan or PowerPlan(sources="none")
        if plan.agent:
            from .hostagent.client import AgentClient

            agent = AgentClient(plan.agent, plan.agent_token or "")
            host = cls(plan, agent, agent)
            try:
                seen = await agent.host()
            except BaseException:
                await agent.close()
                raise
            host.snapshot = seen.to_dict()
            if not seen.power_sources:  # the agent's own reasons, not advice to run one
                why = "; ".join(str(n) for n in seen.power_notes or [])
                host.note = NO_METER_NOTES[1] + (f" ({why})" if why else "")
        elif plan.sources == "none" and not plan.url and not plan.cmd:
            return cls(plan, None, None)
        else:
            meter = _local(plan)
            host = cls(plan, meter if meter.samplers else None, None)
            if not meter.samplers:
                host.note = NO_METER_NOTES[2] + (
                    f" ({'; '.join(meter.notes)})" if meter.notes else "")
        if plan.idle_s and host.meter is not None:
            from .power.sampler import measure_idle

            host.idle = await measure_idle(host.meter, plan.idle_s)
        return host

    async def guard(self, mode: str, where: str) -> GuardSnapshot | None:
        """The server host's guard before a level (None without an agent, or with the guard off); strict mode
        refuses a dirty host here."""
        if self.agent is None or mode == "off":
            return None
        from .guard_results import AGENT_CHECK, FAIL, CheckResult, GuardSnapshot
        from .hostagent.client import AgentError

        try:
            snap = await self.agent.guard()
        except AgentError as e:
            if mode == "strict":  # strict runs only on a box it saw clean
                raise
            # an agent gone mid-run costs this level its host check, not the run: the level is flagged
            return GuardSnapshot.of([CheckResult(AGENT_CHECK, FAIL, str(e).splitlines()[0] if str(e) else
                                                 type(e).__name__)])
        refuse_if_dirty(mode, snap, f"on the server host ({self.plan.agent}) {where}")
        return snap

    def manifest(self) -> dict[str, Any]:
        out = self.plan.describe()
        if self.idle:
            out["idle"] = [{"source": i.source, "mean_w": i.mean_w, "seconds": round(i.covered_s, 3)}
                           for i in self.idle]
        return out

    async def close(self) -> None:
        if self.meter is not None:
            close = getattr(self.meter, "close", None)
            if close is not None:
                await close()


def _local(plan: PowerPlan) -> LocalMeter:
    from .power.choose import open_sources
    from .power.sampler import LocalMeter

    sources, notes = open_sources(plan.sources, plan.url, plan.cmd)
    return LocalMeter(sources, 0.5, notes).start()
