"""What a run says while it waits and nothing comes back: a level past its end waiting out its grace (the bar sat
at its end up to 30 s, nothing said), a warm-up waiting on a server that does not answer (60 s of silence, then
nothing said of it either). On a terminal, a line under the bar; in a log, nothing but the level's line and a
warning for a warm-up that failed at a limit."""

from __future__ import annotations

import asyncio
import io
import re
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tokenbench import warmup
from tokenbench.cli import main
from tokenbench.cli.sweep import RichReporter
from tokenbench.emitter import BackgroundEmitter
from tokenbench.grace import LEVEL_END, overtime, within_grace
from tokenbench.kinds.lengths import LengthsKind
from tokenbench.progress import QuietReporter
from tokenbench.records import RequestRecord
from tokenbench.store import Store
from tokenbench.sweep import SweepConfig, run_sweep

GRACE_LINE = re.compile(r"the level's time is up: waiting for (\d+) requests? in flight, up to (\d+) s more")


class Told(QuietReporter):
    """What a run said it waited for, and its warnings."""

    def __init__(self) -> None:
        self.said: list[str | None] = []
        self.warned: list[str] = []

    def waiting(self, text: str | None) -> None:
        self.said.append(text)

    def warn(self, text: str) -> None:
        self.warned.append(text)

    def shown(self) -> list[str]:
        return [t for t in self.said if t]


def _calls(records: list[RequestRecord], *ends_s: float) -> Any:
    """Calls in flight, each ending after its time (inf: never)."""
    async def call(end_s: float) -> None:
        rec = RequestRecord(index=len(records), sent_ns=time.perf_counter_ns())
        records.append(rec)
        await asyncio.sleep(min(end_s, 3600))
        rec.end_ns = time.perf_counter_ns()

    return asyncio.gather(*(call(s) for s in ends_s))


def test_past_the_end_the_grace_counts_down_the_requests_in_flight() -> None:
    async def go() -> tuple[bool, list[tuple[float, str | None]], list[RequestRecord]]:
        records: list[RequestRecord] = []
        told: list[tuple[float, str | None]] = []
        t0 = time.perf_counter()
        cut = await within_grace(_calls(records, 0.1, float("inf"), float("inf")), records,
                                 time.perf_counter_ns() + 200_000_000, 1.6,
                                 lambda text: told.append((time.perf_counter() - t0, text)))
        return cut, told, records

    cut, told, records = asyncio.run(go())
    assert cut and [r.error_kind for r in records].count(LEVEL_END) == 2
    shown = [(t, text) for t, text in told if text]
    assert shown and all(t >= 0.2 for t, _ in shown)  # nothing said before the level's end
    assert shown[0][1] == "the level's time is up: waiting for 2 requests in flight, up to 2 s more"
    assert shown[-1][1] == "the level's time is up: waiting for 2 requests in flight, up to 1 s more"
    assert len(shown) >= 2 and told[-1][1] is None  # told again as it goes, and cleared at the cut


def test_past_the_end_with_no_grace_bound_it_says_so_and_counts_what_is_left() -> None:
    async def go() -> tuple[bool, list[str | None]]:
        records: list[RequestRecord] = []
        told: list[str | None] = []
        cut = await within_grace(_calls(records, 0.3, 1.0), records, time.perf_counter_ns() + 50_000_000, None,
                                 told.append)
        return cut, told

    cut, told = asyncio.run(go())
    shown = [t for t in told if t]
    assert not cut and told[-1] is None
    assert shown[0] == "the level's time is up: waiting for 2 requests in flight (no bound: --grace inf)"
    assert shown[-1] == "the level's time is up: waiting for 1 request in flight (no bound: --grace inf)"


def test_an_interrupt_past_the_end_clears_the_wait() -> None:
    async def go() -> list[str | None]:
        records: list[RequestRecord] = []
        told: list[str | None] = []
        task = asyncio.ensure_future(within_grace(_calls(records, float("inf")), records, time.perf_counter_ns(),
                                                  60.0, told.append))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return told

    told = asyncio.run(go())
    assert any(told) and told[-1] is None


def _sweep(url: str, tmp_path: Path, rep: QuietReporter, **kw: Any) -> Any:
    kw.setdefault("stall_timeout_s", 30.0)
    cfg = SweepConfig(url=url, workload=LengthsKind.fixed(24, 6), guard="off", metrics_interval_s=None, **kw)
    return asyncio.run(run_sweep(cfg, Store(tmp_path / "r.db"), rep))


@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "workers"])
def test_a_level_past_its_end_says_what_it_waits_for(emitter: BackgroundEmitter, tmp_path: Path,
                                                     workers: int) -> None:
    """The check request and 6 calls answer, then the server wedges: past the level's end its 2 streams wait out
    the grace, and the run says so, counting down, whichever process holds them."""
    emitter.configure(itl_s=0.01, fault="stall", fault_from=7, fault_after=2)
    rep = Told()
    res = _sweep(emitter.url, tmp_path, rep, warmup=0, requests=None, concurrency=[2], duration_s=1.0,
                 grace_s=1.5, workers=workers)
    assert res.outcomes[0].summary.errors == {LEVEL_END: 2}
    shown = rep.shown()
    assert shown and all(GRACE_LINE.fullmatch(t) for t in shown), shown
    assert any(m.group(1) == "2" for t in shown if (m := GRACE_LINE.fullmatch(t)))
    left = [int(m.group(2)) for t in shown if (m := GRACE_LINE.fullmatch(t))]
    assert left == sorted(left, reverse=True) and left[0] <= 2 and left[-1] == 1
    assert rep.said[-1] is None


def test_a_replay_past_its_end_says_what_it_waits_for(emitter: BackgroundEmitter, tmp_path: Path) -> None:
    from test_grace import wedged_replay

    cfg = wedged_replay(emitter, tmp_path, 1.0)
    rep = Told()
    asyncio.run(run_sweep(cfg, Store(tmp_path / "r.db"), rep))
    assert rep.shown() and rep.shown()[0] == "the level's time is up: waiting for 1 request in flight, up to 1 s more"
    assert rep.said[-1] is None


def test_a_soak_past_its_end_says_what_it_waits_for(emitter: BackgroundEmitter, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str | None] = []
    monkeypatch.setattr(RichReporter, "waiting", lambda self, text: said.append(text))
    emitter.configure(itl_s=0.01, fault="stall", fault_from=9, fault_after=2)  # check + 2 warm-ups + 6 turns
    code = main(["sweep", "--url", emitter.url, "--guard", "off", "--no-metrics", "--quiet", "--seed", "3",
                 "--input-len", "20", "--output-len", "6", "--tool-len", "12", "--sessions", "2", "--turns", "3",
                 "--duration", "1s", "--grace", "1s", "--stall-timeout", "30s", "--no-baseline",
                 "--db", str(tmp_path / "r.db")])
    assert code == 0
    shown = [t for t in said if t and not t.startswith("warm-up")]
    assert shown and shown[0] == "the level's time is up: waiting for 2 requests in flight, up to 1 s more"
    assert said[-1] is None


@pytest.mark.parametrize("workers", [1, 2], ids=["in-process", "workers"])
def test_a_stalled_warmup_says_it_waits_on_the_server_and_that_it_stalled(
        emitter: BackgroundEmitter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """The check request answers; every later request stalls before its first byte. The warm-up says it waits on
    the server, against the stall limit, and once the limit fails its requests, that the warm-up stalled and after
    how long. The level then runs as before: its requests meet the stalled server and fail at the limit."""
    monkeypatch.setattr(warmup, "WARMUP_QUIET_S", 0.3)
    emitter.configure(itl_s=0.01, fault="stall", fault_from=1, fault_after=0)
    rep = Told()
    res = _sweep(emitter.url, tmp_path, rep, warmup=2, requests=2, concurrency=[2], stall_timeout_s=1.5,
                 workers=workers)
    line = re.compile(r"warm-up: waiting on the server for \d+ s \(([12]) requests?; --stall-timeout 1\.5s\)")
    shown = rep.shown()
    # both out till the limit, the one whose limit fires first may leave the other alone a moment
    assert shown and all(line.fullmatch(t) for t in shown), shown
    assert any(m.group(1) == "2" for t in shown if (m := line.fullmatch(t))), shown
    assert rep.said[-1] is None
    [warned] = [w for w in rep.warned if "warm-up" in w]
    assert re.fullmatch(r"concurrency 2: the warm-up stalled: 2 of 2 warm-up requests failed after up to \d+\.\d s, "
                        r"no bytes for 1\.5 s \(--stall-timeout\); the level goes on", warned), warned
    s = res.outcomes[0].summary
    assert s.errors == {"stall": 2} and s.completed == 0


def test_a_warmup_that_answers_says_nothing(emitter: BackgroundEmitter, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "WARMUP_QUIET_S", 0.3)
    emitter.configure(itl_s=0.01)
    rep = Told()
    _sweep(emitter.url, tmp_path, rep, warmup=2, requests=2, concurrency=[2])
    assert not rep.shown() and not rep.warned


def _warm(kind: str | None, error: str | None, took_s: float) -> RequestRecord:
    return RequestRecord(index=-1, phase="warmup", sent_ns=0, end_ns=int(took_s * 1e9), error_kind=kind,
                         error=error)


def test_a_failed_warmup_is_named_with_its_wait_or_its_error() -> None:
    assert warmup.failures([_warm(None, None, 2.0), _warm("interrupted", "interrupted", 0.1)]) is None
    # an error the server answered, once silent: the level then met a server that had failed its warm-up
    assert warmup.failures([_warm(None, None, 2.0), _warm("http_500", "boom", 0.1)]) == (
        "the warm-up failed: 1 of 2 warm-up requests failed, http_500: boom; the level goes on")
    assert warmup.failures([_warm("stall", "no bytes for 60 s", 60.02), _warm(None, None, 3.0)]) == (
        "the warm-up stalled: 1 of 2 warm-up requests failed after 60.0 s, no bytes for 60 s (--stall-timeout); "
        "the level goes on")
    assert warmup.failures([_warm("timeout", "request exceeded 600 s", 600.0)]) == (
        "the warm-up ran out of time: 1 of 1 warm-up request failed after 600.0 s, request exceeded 600 s "
        "(--timeout); the level goes on")
    both = warmup.failures([_warm("timeout", "request exceeded 90 s", 90.0),
                                     _warm("stall", "no bytes for 60 s", 75.5)])
    assert both == ("the warm-up failed: 2 of 2 warm-up requests failed after up to 90.0 s, no bytes for 60 s "
                    "(--stall-timeout); request exceeded 90 s (--timeout); the level goes on")
    # a measured request's stall is the level's to count, not the warm-up's
    measured = _warm("stall", "no bytes for 60 s", 60.0)
    measured.phase = "measured"
    assert warmup.failures([measured]) is None
    mixed = warmup.failures([_warm("stall", "no bytes for 60 s", 60.0), _warm("http_503", "loading model", 0.2),
                             _warm(None, None, 1.0)])
    assert mixed == ("the warm-up failed: 1 of 3 warm-up requests failed after 60.0 s, no bytes for 60 s "
                     "(--stall-timeout); 1 with an error, http_503: loading model; the level goes on")


def _rendered(rep: RichReporter, width: int) -> list[str]:
    assert rep.progress is not None
    shown = Console(file=io.StringIO(), width=width, color_system=None)
    with shown.capture() as cap:
        shown.print(rep.progress.get_renderable())
    return [ln.rstrip() for ln in cap.get().splitlines() if ln.strip()]


@pytest.mark.parametrize("width", [80, 160])
def test_the_wait_is_a_whole_line_under_the_bar(width: int) -> None:
    """Past a timed level's end the bar is at its end (it stopped where the last request had ended) and a line
    under it says what the level waits for, whole at 80 columns; once the wait ends the line goes."""
    rep = RichReporter(Console(file=io.StringIO(), force_terminal=True, width=width, color_system=None),
                       enabled=True)
    rep.level_start("level 2/4 concurrency 16 (rep 1/3)", None, 20.0)
    rep.request_done(RequestRecord(index=0, phase="measured"))
    rep.level_t0 -= 23.0  # the level's 20 s are up
    rep.waiting(overtime(16, 27.0))
    lines = _rendered(rep, width)
    assert rep.progress is not None and rep.progress.tasks[0].completed == 20.0
    assert len(lines) == 2 and "1 requests, 20/20 s" in lines[0], lines
    assert lines[1] == "the level's time is up: waiting for 16 requests in flight, up to 27 s more"
    assert all(len(ln) <= width and "…" not in ln for ln in lines)
    rep.waiting(None)
    lines = _rendered(rep, width)
    rep.close()
    assert len(lines) == 1 and "waiting" not in lines[0]


def test_a_warmup_before_the_first_level_has_its_line_alone() -> None:
    rep = RichReporter(Console(file=io.StringIO(), force_terminal=True, width=80, color_system=None), enabled=True)
    text = warmup.waiting_on_server(4, 12.3, 60.0)
    rep.waiting(text)
    assert _rendered(rep, 80) == ["warm-up: waiting on the server for 12 s (4 requests; --stall-timeout 60s)"]
    rep.waiting(None)
    assert _rendered(rep, 80) == []
    rep.close()


@pytest.mark.parametrize("quiet", [False, True])
def test_a_log_or_a_quiet_run_gets_no_waiting_line(quiet: bool) -> None:
    out = io.StringIO()
    rep = RichReporter(Console(file=out, width=80), enabled=not quiet)  # piped: not a terminal
    rep.level_start("level 1/1 concurrency 4", None, 5.0)
    rep.waiting(overtime(4, 10.0))
    rep.waiting(warmup.waiting_on_server(1, 8.0, 60.0))
    rep.waiting(None)
    rep.close()
    assert rep.progress is None and out.getvalue() == ""
