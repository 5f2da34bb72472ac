"""A level bounded by time ends within its duration and grace: calls a wedged server never answers are cancelled
after the grace, counted as cut by the level's end (neither failed nor measured), and the figures come from the
calls that answered."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.errors import UsageError
from tokenbench.finding import Code
from tokenbench.grace import LEVEL_END, within_grace
from tokenbench.kinds.lengths import LengthsKind
from tokenbench.loadgen import run_phase
from tokenbench.offered_load import Level
from tokenbench.records import RequestRecord
from tokenbench.slo import SLO
from tokenbench.store import Store
from tokenbench.sweep import SweepConfig, run_sweep

#: the client's own limit on a stream without a byte: what each wedged call waited for before a grace
STALL = "30s"
#: time a sweep takes around its level here (the check request, the store), with room for a busy 2-core box
MARGIN_S = 6.0


def _sweep(url: str, tmp_path: Path, **kw: Any) -> tuple[Any, float]:
    kw.setdefault("stall_timeout_s", 30.0)
    cfg = SweepConfig(url=url, workload=LengthsKind.fixed(24, 6), guard="off", metrics_interval_s=None, warmup=0,
                      requests=None, **kw)
    t0 = time.monotonic()
    res = asyncio.run(run_sweep(cfg, Store(tmp_path / "r.db")))
    return res, time.monotonic() - t0


@pytest.mark.parametrize("load", [{"concurrency": [2]}, {"rates": [40.0]}], ids=["closed", "open"])
def test_stalled_calls_are_cut_after_the_grace(emitter: BackgroundEmitter, tmp_path: Path,
                                               load: dict[str, Any]) -> None:
    """The check request and 6 calls answer, then the server wedges: every later call stalls for an hour after its
    first chunks. The level ends within its duration and grace, not at the stall limit."""
    emitter.configure(itl_s=0.01, fault="stall", fault_from=7, fault_after=2)
    res, took = _sweep(emitter.url, tmp_path, duration_s=1.0, grace_s=0.5, slo=SLO.parse("ttft_p99=10s"), **load)
    assert took < 1.0 + 0.5 + MARGIN_S, took
    (o,) = res.outcomes
    s = o.summary
    assert s.completed == 6 and s.errors == {LEVEL_END: s.failed} and s.failed >= 1
    assert s.cut == s.failed and s.ok_failed() == f"6/0, {s.failed} cut"
    # the figures are the answered calls': a cut call's first chunks are no TTFT, failed or not
    assert s.ttft_ms.n == 6 and s.e2e_ms.n == 6 and s.ttft_failed_ms.n == 0
    assert s.total_output_tokens == 6 * 6
    # the window ends at the cut: the level held the wedged calls till then (its plateau within it)
    assert 1.0 <= s.duration_s < 1.0 + 0.5 + 0.5
    assert s.plateau is None or s.plateau.share <= 1.0
    # not a failed level: no server failed these calls
    assert o.status == "complete" and "error_rate" not in s.flags and "errors" not in s.flags
    (errors,) = [c for c in s.slo_checks if c.name == "errors"]
    assert errors.met and errors.value == 0.0
    assert res.to_json()["manifest"]["load"]["grace_s"] == 0.5
    stored = Store(tmp_path / "r.db").requests(res.run_id)
    cut = [r for r in stored if r.error_kind == LEVEL_END]
    assert len(cut) == s.failed and all(r.end_ns is not None and "grace" in (r.error or "") for r in cut)


def test_grace_zero_cuts_what_is_in_flight_as_asked_not_as_a_stall(emitter: BackgroundEmitter,
                                                                    tmp_path: Path) -> None:
    """--grace 0s cancels every request in flight at the end, as asked: the finding says so in a note, where it
    told a user who chose it to look at a stalling server."""
    emitter.configure(itl_s=0.02)
    res, _ = _sweep(emitter.url, tmp_path, duration_s=0.6, grace_s=0.0, concurrency=[2])
    s = res.outcomes[0].summary
    found = s.finding(Code.UNANSWERED)
    assert s.cut == 2 and found is not None and found.severity == "note", s.findings
    assert "as --grace 0s asks" in found.message and "stall" not in found.text, found


def test_a_soak_cuts_its_wedged_turns_after_the_grace(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """A soak (sessions for a duration): the turns a wedged server never answers are cut after the grace, and so
    are their sessions; the turns that answered are its figures."""
    emitter.configure(itl_s=0.01, fault="stall", fault_from=9, fault_after=2)  # check + 2 warm-ups + 6 turns
    out = tmp_path / "run.json"
    t0 = time.monotonic()
    code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "3",
                 "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--sessions", "2", "--turns", "3",
                 "--duration", "1s", "--grace", "500ms", "--stall-timeout", STALL, "--no-baseline",
                 "--db", str(tmp_path / "r.db"), "--json", str(out)])
    took = time.monotonic() - t0
    doc = json.loads(out.read_text())
    assert code == 0, doc
    assert took < 1.0 + 0.5 + MARGIN_S, took
    [level] = doc["levels"]
    assert level["completed"] == 6 and level["errors"] == {LEVEL_END: 2} and level["failed"] == 2
    assert level["ttft_ms"]["n"] == 6 and level["status"] == "complete"
    s = level["session"]
    assert s["cut"] == 2 and s["sessions_finished"] + s["cut"] == s["sessions"]


def test_grace_inf_waits_for_the_calls_in_flight(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """No grace bound (inf): the level waits for its calls, here until the client's stall limit fails them."""
    emitter.configure(itl_s=0.01, fault="stall", fault_from=3, fault_after=2)
    res, took = _sweep(emitter.url, tmp_path, duration_s=0.5, grace_s=None, concurrency=[1],
                       stall_timeout_s=1.5)
    s = res.outcomes[0].summary
    assert took >= 1.5 and s.completed == 2 and s.errors == {"stall": 1} and s.cut == 0


def _stalled(records: list[RequestRecord]) -> Any:
    async def call() -> None:
        rec = RequestRecord(index=len(records), sent_ns=time.perf_counter_ns())
        records.append(rec)
        await asyncio.sleep(3600)

    return asyncio.gather(call(), call())


def test_within_grace_cancels_at_the_end_and_marks_the_calls() -> None:
    async def go() -> tuple[bool, list[RequestRecord], float]:
        records: list[RequestRecord] = []
        t0 = time.perf_counter()
        cut = await within_grace(_stalled(records), records, time.perf_counter_ns() + 100_000_000, 0.1)
        return cut, records, time.perf_counter() - t0

    cut, records, took = asyncio.run(go())
    assert cut and 0.19 <= took < 1.0
    assert [r.error_kind for r in records] == [LEVEL_END, LEVEL_END] and all(r.end_ns for r in records)


def test_within_grace_keeps_an_interrupt_an_interrupt() -> None:
    """Ctrl-C during the level cancels the calls and propagates; the caller marks them interrupted."""
    async def go() -> list[RequestRecord]:
        records: list[RequestRecord] = []
        task = asyncio.ensure_future(within_grace(_stalled(records), records, time.perf_counter_ns(), 60.0))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return records

    records = asyncio.run(go())
    assert len(records) == 2 and all(r.error_kind is None for r in records)


def test_grace_is_given_with_a_duration(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--quiet", "--grace", "10s"])
    assert code == 2 and "--grace bounds the wait after a --duration level's end" in capsys.readouterr().err
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--quiet", "--duration", "5s", "--grace", "10"])
    assert code == 2 and "--grace '10' has no unit" in capsys.readouterr().err


def test_grace_reads_a_duration_zero_or_inf() -> None:
    from tokenbench.cli.common import grace

    assert grace(None) == 30.0 and grace("0s") == 0.0 and grace("2m") == 120.0 and grace("inf") is None


def wedged_replay(emitter: BackgroundEmitter, tmp_path: Path, grace_s: float) -> SweepConfig:
    """A one-second replay level of one trace of ten calls, on an emitter that answers the check request and
    three calls, then wedges the fourth (its first bytes sent, then nothing)."""
    from tokenbench.kinds.replay import ReplayKind
    from tokenbench.replay import ReplayPlan
    from tokenbench.trajectories.load import load_trajectories

    folder = tmp_path / "weka"
    folder.mkdir()
    calls = [{"t": float(k), "type": "n", "in": 16 + 8 * k, "out": 4, "hash_ids": list(range(4 + 2 * k)),
              "think_time": 0.0, "api_time": 0.1} for k in range(10)]
    (folder / "t0.json").write_text(json.dumps({"id": "t0", "block_size": 4, "requests": calls}))
    emitter.configure(itl_s=0.01, fault="stall", fault_from=4, fault_after=2)  # the check request and 3 calls
    return SweepConfig(url=emitter.url, workload=ReplayKind(ReplayPlan(load_trajectories(folder), max_think_s=0.0)),
                       requests=None, guard="off", seed=7, metrics_interval_s=None, warmup=0, concurrency=[1],
                       duration_s=1.0, grace_s=grace_s, stall_timeout_s=30.0)


def test_a_replay_cuts_its_wedged_call_and_its_tree_after_the_grace(emitter: BackgroundEmitter,
                                                                   tmp_path: Path) -> None:
    """A replay level with a duration: the call a wedged server never answers is cut after the grace, and its tree
    with it; the calls that answered are the level's figures."""
    cfg = wedged_replay(emitter, tmp_path, 0.5)
    t0 = time.monotonic()
    res = asyncio.run(run_sweep(cfg, Store(tmp_path / "r.db")))
    assert time.monotonic() - t0 < 1.0 + 0.5 + MARGIN_S
    s = res.outcomes[0].summary
    assert s.completed == 3 and s.errors == {LEVEL_END: 1} and s.ttft_ms.n == 3
    assert s.session is not None and s.session.cut == 1 and s.session.sessions_finished == 0


def test_workers_cut_their_wedged_calls_after_the_grace(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """Over load-generating workers, each cancels its own calls after the grace, and the driver counts them."""
    emitter.configure(itl_s=0.01, fault="stall", fault_from=7, fault_after=2)
    res, took = _sweep(emitter.url, tmp_path, duration_s=1.0, grace_s=0.5, concurrency=[2], workers=2)
    assert took < 1.0 + 0.5 + MARGIN_S + 5.0, took  # and the workers' start
    s = res.outcomes[0].summary
    assert s.completed == 6 and s.errors == {LEVEL_END: s.failed} and s.failed >= 1 and s.ttft_ms.n == 6


def test_a_soak_ends_at_its_end_while_its_agents_think(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """An agent thinking at a soak's end sends no further turn: the level does not wait out its pause."""
    out = tmp_path / "run.json"
    t0 = time.monotonic()
    code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "3",
                 "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--sessions", "2", "--turns", "3",
                 "--think-time", "20s", "--duration", "1s", "--no-baseline",
                 "--db", str(tmp_path / "r.db"), "--json", str(out)])
    took = time.monotonic() - t0
    doc = json.loads(out.read_text())
    assert code == 0, doc
    assert took < 1.0 + MARGIN_S, took
    [level] = doc["levels"]
    assert level["completed"] == 2 and level["failed"] == 0 and level["session"]["cut"] == 2
    # its window is the soak's second, in which its agents thought: it ended at the last answer (0.15 s), and its
    # rate read 13 times what the server gave
    assert 0.9 <= level["duration_s"] <= 1.5, level["duration_s"]


class _Wedged:
    """A server that admits every request and never answers it."""

    async def send(self, req: Any, record: RequestRecord, on_done: Any = None) -> RequestRecord:
        record.sent_ns = time.perf_counter_ns()
        await asyncio.sleep(3600)
        return record

    def flush(self) -> None:
        pass


class _Prompts:
    def __init__(self) -> None:
        self.n = 0

    async def next(self) -> tuple[int, Any]:
        self.n += 1
        return self.n - 1, None


@pytest.mark.parametrize("level", [Level(concurrency=3), Level(rate=50.0)], ids=["closed", "open"])
def test_no_request_outlives_a_level_cut_at_its_end(level: Level) -> None:
    """--grace 0s cancels at the end itself, an open loop then perhaps still waiting for its next arrival: every
    request it sent stops with it, none is left running into the next level."""
    async def go() -> tuple[list[RequestRecord], list[asyncio.Task[Any]]]:
        res = await run_phase(_Wedged(), _Prompts(), level, "measured", requests=None, duration_s=0.3, grace_s=0.0)
        return res.records, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    records, running = asyncio.run(go())
    assert records and all(r.error_kind == LEVEL_END for r in records) and running == []


def test_calls_cut_waiting_past_a_limit_fail_it_and_are_said(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """A server that wedges before the first token: its calls are cut, not answered, and an SLO over the answered
    ones passed it (TTFT p99 53 ms, exit 0). A cut call that had already waited past a TTFT limit is over it, and
    the level says its figures are the answered requests'."""
    emitter.configure(itl_s=0.01, fault="stall", fault_from=7, fault_after=0)
    res, _ = _sweep(emitter.url, tmp_path, duration_s=1.0, grace_s=1.5, slo=SLO.parse("ttft_p99=1s"),
                    concurrency=[2])
    (o,) = res.outcomes
    s = o.summary
    assert s.completed == 6 and s.errors.get(LEVEL_END, 0) >= 1 and s.ttft_ms.p99 < 1000
    (ttft,) = [c for c in s.slo_checks if c.name == "ttft_p99"]
    assert not ttft.met and ttft.over == s.failed and ttft.n == 6 + s.failed and ttft.value >= 1500
    assert s.slo_met is False and "unanswered" in s.flags
    assert any("still unanswered at the level's end" in w for w in s.warnings), s.warnings


def test_a_level_that_answered_nothing_failed(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    """Every call wedged: the level read '0/0, 2 cut', 0.0 tok/s, complete, exit 0. It measured nothing."""
    emitter.configure(itl_s=0.01, fault="stall", fault_from=1, fault_after=0)
    res, _ = _sweep(emitter.url, tmp_path, duration_s=0.5, grace_s=0.5, concurrency=[2])
    (o,) = res.outcomes
    assert o.summary.completed == 0 and o.summary.cut >= 1 and o.status == "failed"
    assert res.status != "complete"


@pytest.mark.parametrize("option,text", [("--grace", "nan"), ("--grace", "nans"), ("--grace", "infs"),
                                         ("--duration", "inf"), ("--duration", "infs"), ("--duration", "nan")])
def test_a_non_finite_duration_is_refused_without_suggesting_a_spelling(capsys: pytest.CaptureFixture[str],
                                                                          option: str, text: str) -> None:
    """--grace nan said "write nanms or nans", and nans was then refused; --duration inf said "write infms or
    infs", then "infs is not a duration". Each is refused in one line that says what to write instead."""
    args = {"--grace": ["--duration", "5s", "--grace", text], "--duration": ["--duration", text]}[option]
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--quiet", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{option} '{text}' is not a finite duration: write a number with a unit, e.g. 2s" in err, err
    assert "infs" not in err.replace(f"'{text}'", "") and "nans" not in err.replace(f"'{text}'", ""), err


def test_a_grace_past_a_week_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """A level runs a week at most (--duration's bound): a longer grace is a slip of the unit too; inf, waiting
    for every request, stays."""
    code = main(["sweep", "--url", "http://127.0.0.1:9/v1", "--quiet", "--duration", "5s", "--grace", "200h"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "--grace of 8.3 days: a level waits a week (168h) at most" in err and "or inf" in err, err
    with pytest.raises(UsageError):
        SweepConfig(url="http://127.0.0.1:9/v1", duration_s=5.0, grace_s=7 * 86400 + 1)
    assert SweepConfig(url="http://127.0.0.1:9/v1", duration_s=5.0, grace_s=None).grace_s is None
    assert SweepConfig(url="http://127.0.0.1:9/v1", duration_s=5.0, grace_s=7 * 86400).grace_s == 7 * 86400
