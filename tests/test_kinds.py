"""Workload kinds are plug-ins: the sweep runs any value that speaks the contract of kinds/base.py, without a
line of sweep.py knowing it (a kind it has never seen runs here, end to end, against the emitter)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tokenbench.client import PreparedRequest
from tokenbench.emitter import BackgroundEmitter
from tokenbench.errors import UsageError
from tokenbench.kinds.base import Binding, LevelWork, OnDone, RequestLevel, SweepOptions
from tokenbench.offered_load import Level
from tokenbench.records import RequestRecord
from tokenbench.store import Store
from tokenbench.sweep import SweepConfig, run_sweep


class EchoPrompts:
    """Request i sends "echo i" a few times; nothing is built ahead."""

    longest = 0

    def __init__(self, output: int) -> None:
        self.output, self.i = output, 0

    async def prepare(self, n: int) -> None:
        pass

    async def next(self) -> tuple[int, PreparedRequest]:
        self.i += 1
        return self.i - 1, PreparedRequest(f"echo {self.i - 1} " * 3, self.output, 6, {"max_tokens": self.output})

    async def take(self, n: int) -> list[tuple[int, PreparedRequest]]:
        return [await self.next() for _ in range(n)]


class BoundEcho:
    def __init__(self, kind: EchoKind, b: Binding) -> None:
        self.kind, self.b = kind, b
        self.body_extras: dict[str, Any] = {}
        self.recorded_fields: dict[str, Any] = {"max_tokens": "per request"}

    def workload_entry(self) -> dict[str, Any]:
        return {"kind": "echo", "output": self.kind.output, "seed": self.b.seed}

    def prompts(self) -> EchoPrompts:
        return EchoPrompts(self.kind.output)

    def level(self, level: Level, repetition: int, records: list[RequestRecord], on_done: OnDone) -> LevelWork:
        return RequestLevel(self.b.opts.requests, level)


@dataclass(frozen=True, slots=True)
class EchoKind:
    output: int = 3

    name = "echo"
    splits = False
    outgrows_slots = False

    def refuse(self, opts: SweepOptions) -> None:
        if opts.rates:
            raise UsageError("echo runs closed loop: drop --rate")

    def levels(self, opts: SweepOptions) -> list[Level]:
        return [Level(concurrency=c) for c in opts.concurrency]

    def longest_request(self) -> int:
        return 64

    def typical_input(self) -> int:
        return 6

    def for_search(self) -> EchoKind:
        return self

    def for_slot(self, limit: int) -> tuple[int, EchoKind]:
        return 2048, self

    def bind(self, b: Binding) -> BoundEcho:
        return BoundEcho(self, b)


def test_a_kind_the_sweep_never_saw_runs_through_it(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    cfg = SweepConfig(url=emitter.url, workload=EchoKind(), concurrency=[1, 2], requests=4, warmup=1,  # type: ignore[arg-type]
                      guard="off", metrics_interval_s=None, seed=5)
    res = asyncio.run(run_sweep(cfg, Store(tmp_path / "r.db")))
    assert res.status == "complete" and [o.level.concurrency for o in res.outcomes] == [1, 2]
    assert [o.summary.completed for o in res.outcomes] == [4, 4]
    assert all(o.summary.total_output_tokens == 12 for o in res.outcomes)
    manifest = res.manifest.to_dict()
    assert manifest["workload"] == {"kind": "echo", "output": 3, "seed": 5}
    assert manifest["request_fields"] == {"max_tokens": "per request"}
    sent = [b["prompt"] for b in emitter.emitter.requests_seen if b.get("prompt", "").startswith("echo")]
    assert len(sent) == 2 * (4 + 1) and sent[0] == "echo 0 " * 3


def test_a_kind_refuses_its_options_when_the_config_is_made() -> None:
    with pytest.raises(UsageError, match="drop --rate"):
        SweepConfig(url="http://127.0.0.1:9/v1", workload=EchoKind(), rates=[1.0])  # type: ignore[arg-type]


def test_a_level_that_may_end_at_its_duration_builds_few_prompts_ahead() -> None:
    """``--duration 2s --requests 1000000`` ends at whichever comes first: it built all million prompts before its
    two seconds (minutes of silence, 650 MB). A level held for a duration builds a bounded few ahead and the rest
    as it goes; one of a count alone builds them all, so that building never delays a send."""
    from tokenbench.kinds.base import PREBUILT_TIMED

    level = Level(concurrency=4)
    assert RequestLevel(1_000_000, level, timed=True).prepare(2) == 2 + PREBUILT_TIMED
    assert RequestLevel(100, level, timed=True).prepare(2) == 102
    assert RequestLevel(1_000_000, level).prepare(2) == 1_000_002
    assert RequestLevel(None, level).prepare(2) == 2 + 8
