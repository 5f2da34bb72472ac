"""``tokenbench sweep``: its options (``grammar/sweep.py``) read into a ``SweepConfig``, the embedded engine started where no --url is
given, the run, and the tables it prints (``show`` and ``capacity`` print them too)."""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console, RenderableType
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from ..grace import INTERRUPTED, LEVEL_END
from .. import redact
from ..engines.embedded import MIN_CONTEXT, running
from ..errors import RunInterrupted, TokenbenchError, UsageError
from ..console import print_hanging
from ..kinds import WorkloadKind
from ..levels import ServingLevel
from ..slo import SLO
from ..records import RequestRecord
from ..servers import normalize_base_url
from ..store import Store
from ..sweep import SweepConfig, run_sweep
from ..workers.split import parse_workers
from . import interrupts
from .common import (check_output, embedded_spec, float_list, guard_config, guard_targets, int_list, json_object,
                     grace, notifier, run_exit, seconds, write_json)
from .power import power_plan
from .printing import print_result
from .workloads import given_flags, workload_kind

EMBEDDED_DEFAULTS: dict[str, Any] = {"concurrency": "1,2,4,8", "requests": 16, "input_len": 128, "output_len": 64}


#: Columns under which the live bar is short, says only the time left, and a finished level's figures are a line
#: of their own above it.
NARROW = 100


class _Bars(Progress):
    """The live bars, and under them what the run waits for while nothing comes back (``RichReporter.waiting``),
    a line of its own: beside a bar at 80 columns it was cut."""

    below: str | None = None

    def get_renderables(self) -> Iterable[RenderableType]:
        yield from super().get_renderables()
        if self.below:
            yield Text(self.below, overflow="fold")


class RichReporter:
    """Progress on stderr: a live bar on a terminal; piped into a file or a CI log, one line per level as it
    finishes (a bar there printed nothing until the end: 6 minutes of silence in one run), and every
    ``HEARTBEAT_S`` of a level still running a line of how far it is (a server that stalls held a level a minute a
    request, and a long ``--duration`` its whole time, without a word). On a terminal, a line under the bar says
    what the run waits for while nothing comes back (a warm-up waiting on the server, a level past its end waiting
    out its grace); a log gets no such line, only the level's, which says what was cut."""

    #: Seconds between a running level's lines in a log.
    HEARTBEAT_S = 30.0

    def __init__(self, console: Console, enabled: bool) -> None:
        self.console = console
        self.enabled = enabled
        self.live = console.is_terminal
        self.progress: _Bars | None = None
        self.task: Any = None
        self.description = ""
        self.t0 = time.monotonic()
        self.level_t0 = self.t0
        self.total: int | None = None
        self.duration_s: float | None = None
        self.done = 0
        self.measuring = False  # between a level's start and its end
        self._beating: threading.Event | None = None  # set when the level's heartbeat is to stop

    def level_start(self, description: str, total: int | None, duration_s: float | None) -> None:
        if not self.enabled:
            return
        self.description, self.level_t0 = description, time.monotonic()
        self.total, self.duration_s, self.done, self.measuring = total, duration_s, 0, True
        if not self.live:
            self._heartbeat()
            return
        self.task = self._bars().add_task(description, total=duration_s if total is None else total, info="",
                                          count=self._count(), left="left" if total or duration_s else "")

    def _bars(self) -> _Bars:
        """The live bars, started at the first level (or the first warm-up that waits)."""
        if self.progress is None:
            # a level bounded by time fills its bar with time (it read "54/?"); one bounded by a count, with
            # requests; both say how long is left
            # under 100 columns the bar is short and only the time left is said: at 80 Rich cut both times to "0:00:…"
            narrow = self.console.width < NARROW
            # "left" only where the level has an end to count to (agent sessions run whole sessions: none)
            times = (TextColumn("{task.fields[left]}"), TimeRemainingColumn()) if narrow else \
                (TimeElapsedColumn(), TextColumn("{task.fields[left]}"), TimeRemainingColumn())
            self.progress = _Bars(
                TextColumn("{task.description}"), BarColumn(bar_width=10 if narrow else 40),
                TextColumn("{task.fields[count]}"), TextColumn("{task.fields[info]}"), *times, console=self.console,
            )
            self.progress.start()
        return self.progress

    def _count(self) -> str:
        if self.total is None and self.duration_s:
            return f"{self.done} requests, {min(time.monotonic() - self.level_t0, self.duration_s):.0f}/" \
                f"{self.duration_s:g} s"
        return f"{self.done}/{self.total}" if self.total else f"{self.done} requests"

    def request_done(self, record: RequestRecord) -> None:
        self.done += 1
        if self.progress is not None and self.task is not None:
            if self.total is None and self.duration_s:
                self._timed()
            else:
                self.progress.update(self.task, advance=1, count=self._count())

    def _timed(self) -> None:
        """A level bounded by time: its bar and count to the time now."""
        if self.progress is not None and self.task is not None and self.duration_s:
            self.progress.update(self.task, completed=min(time.monotonic() - self.level_t0, self.duration_s),
                                 count=self._count())

    def waiting(self, text: str | None) -> None:
        """What the run waits for, on a line under the bar (None: nothing now). A terminal's only: a log would
        get a line for every change."""
        if not (self.enabled and self.live) or (text is None and self.progress is None):
            return
        bars = self._bars()
        if text is not None and self.measuring and self.total is None:
            self._timed()  # past a timed level's end the bar had stopped where its last request ended
        bars.below = text
        bars.refresh()

    def _heartbeat(self) -> None:
        """A line every ``HEARTBEAT_S`` until the level ends, on a thread of its own: a level that nothing
        answers calls nothing here to say it."""
        self._stop_heartbeat()
        stop = self._beating = threading.Event()

        def beat() -> None:
            while not stop.wait(self.HEARTBEAT_S):
                took = time.monotonic() - self.level_t0
                timed = self.total is None and self.duration_s
                said = self._count() if timed else f"{self._count()} answered after {took:.0f} s"
                if not stop.is_set():  # the level may have ended while this line was made
                    self.console.print(f"{self.description}: {said}", style="dim", markup=False, highlight=False)

        threading.Thread(target=beat, name="tokenbench-heartbeat", daemon=True).start()

    def _stop_heartbeat(self) -> None:
        if self._beating is not None:
            self._beating.set()
            self._beating = None

    def level_end(self, summary: ServingLevel) -> None:
        self._stop_heartbeat()
        self.measuring = False
        # a level where nothing answered (all cut at a duration's end) has no TTFT: "—", as its table row shows,
        # not a 0 ms no request had
        p50 = summary.ttft_ms.p50
        info = f"{summary.sustained_tps:,.1f} tok/s, TTFT p50 {'—' if p50 is None else f'{p50:,.0f} ms'}"
        if summary.failed - summary.cut:
            info += f", {summary.failed - summary.cut} failed"
        if summary.errors.get(INTERRUPTED):
            info += f", {summary.errors[INTERRUPTED]} cut by the interrupt"
        if summary.errors.get(LEVEL_END):
            info += f", {summary.errors[LEVEL_END]} cut by the level's end"
        if self.progress is not None and self.task is not None and self.console.width >= NARROW:
            self.progress.update(self.task, info=info)
        elif self.progress is not None and self.task is not None:
            # under NARROW columns a finished level's row, its figures beside its bar and times, was cut to
            # "62.0 tok/s, TTFT p50 19 ms  le…": its line is printed whole above the bar instead, as where piped
            self.progress.update(self.task, visible=False)
            self._level_line(summary, info)
        elif self.enabled and not self.live:
            self._level_line(summary, info)

    def _level_line(self, summary: ServingLevel, info: str) -> None:
        """A finished level in a line, wrapped to the console's width (160 where piped), what runs on indented
        under the level's name."""
        now = time.monotonic()
        flags = f" [{', '.join(summary.flags)}]" if summary.flags else ""
        print_hanging(self.console, f"{self.description}: {info}, {summary.completed} ok{flags} "
                                    f"({now - self.level_t0:.1f} s; {now - self.t0:.0f} s elapsed)")

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(text, style="dim", markup=False, highlight=False)

    def warn(self, text: str) -> None:
        self.console.print(text, style="yellow", markup=False, highlight=False)

    def close(self) -> None:
        self._stop_heartbeat()
        if self.progress is not None:
            self.progress.below = None
            self.progress.stop()
            self.progress = None


def _requests(a: argparse.Namespace, d: dict[str, Any], duration: float | None) -> int | None:
    """Requests per level: as given, else the default unless a --duration bounds the level instead (or the kind's
    levels are no count of requests: ``d["requests"]`` None)."""
    requests, default = a.requests, d.get("requests", 32)
    if requests is None and duration is None and default is not None:
        requests = int(default)
    if requests is not None and requests < 1:
        raise UsageError("--requests must be at least 1")
    if a.repetitions < 1:
        raise UsageError("--repetitions must be at least 1")
    return int(requests) if requests is not None else None


def _refuse_loop_options(a: argparse.Namespace, argv: list[str], kind: WorkloadKind) -> None:
    """An option of the other loop would change nothing the run measures: refused, as --trace with --rate is."""
    given = given_flags(argv)
    requests_kind = kind.name in ("lengths", "dataset")  # independent requests, in a closed or an open loop
    if "--arrival" in given and not a.rate:
        raise UsageError("--arrival shapes the open loop of --rate: give --rate, or drop --arrival")
    if a.max_concurrency is not None and requests_kind and not a.rate:
        raise UsageError("--max-concurrency caps an open loop's requests in flight (--rate, --trace): a closed "
                         "loop's --concurrency is its cap already; drop --max-concurrency")
    if a.phase == "staggered" and (a.rate or not requests_kind):
        what = "--rate" if a.rate else f"a {kind.name} workload"
        raise UsageError(f"--phase staggered spreads a closed loop's first requests, which {what} does not send: "
                         "drop --phase")


def _grace(a: argparse.Namespace) -> float | None:
    """--grace bounds what a --duration level waits for after its end: without one it would change nothing."""
    text = getattr(a, "grace", None)
    if text is not None and getattr(a, "duration", None) is None:
        raise UsageError("--grace bounds the wait after a --duration level's end: give --duration, or drop --grace")
    return grace(text)


def _phase(a: argparse.Namespace) -> str:
    if a.phase == "staggered" and (a.ray or parse_workers(a.workers) not in (None, 1)):
        raise UsageError("--phase staggered spreads one process's streams: drop --workers and --ray")
    return str(a.phase)


def _slo(text: str | None) -> SLO | None:
    try:
        return SLO.parse(text) if text else None
    except ValueError as e:
        raise UsageError(f"--slo: {e}") from None


def load_config(a: argparse.Namespace, argv: list[str], kind: WorkloadKind, d: dict[str, Any],
                levels: tuple[list[int], list[float]], requests: int | None, slo: SLO | None) -> SweepConfig:
    """The sweep's config from the options every measuring run shares, with the workload ``kind``, its levels
    (concurrency, rates), requests per level and SLO as the command decided them."""
    embedded = a.url is None
    return SweepConfig(
        url=normalize_base_url(a.url) if a.url else "",
        model=a.model,
        api=a.api if "--api" in given_flags(argv) else d.get("api", a.api),
        api_key=a.api_key or os.environ.get("OPENAI_API_KEY"),
        workload=kind,
        concurrency=levels[0],
        rates=levels[1],
        arrival=a.arrival,
        max_concurrency=a.max_concurrency,
        requests=requests,
        duration_s=seconds(getattr(a, "duration", None), "--duration", ("s", "m")),
        grace_s=_grace(a),
        warmup=None if a.warmup == "auto" else a.warmup,
        warmup_auto=a.warmup == "auto",
        phase=_phase(a),
        repetitions=getattr(a, "repetitions", 1),
        timeout_s=seconds(a.timeout, "--timeout") or 600.0,
        stall_timeout_s=seconds(a.stall_timeout, "--stall-timeout") or 60.0,
        tokenizer=a.tokenizer,
        label=a.label or (f"embedded-{a.engine}" if embedded else socket.gethostname()),
        price_per_hour=a.price_per_hour,
        currency=a.currency,
        slo=slo,
        seed=a.seed,
        guard=a.guard,
        guard_config=guard_config(a.guard_config),
        target_pids=guard_targets(a.url),
        metrics_interval_s=None if a.no_metrics else seconds(a.metrics_interval, "--metrics-interval"),
        max_error_rate=a.max_error_rate,
        workers=parse_workers(a.workers),
        ray=a.ray,
        temperature=a.temperature,
        fixed_output=not a.no_fixed_output,
        extra_body=json_object(a.extra_body, "--extra-body"),
        command=redact.command(["tokenbench", *argv]),
        power=power_plan(a, argv),
    )


def sweep_config(a: argparse.Namespace, argv: list[str]) -> SweepConfig:
    d: dict[str, Any] = dict(EMBEDDED_DEFAULTS) if a.url is None else {}
    kind = workload_kind(a, argv, d)
    if a.rate and a.concurrency:
        raise UsageError("give --concurrency or --rate, not both")
    _refuse_loop_options(a, argv, kind)
    levels = (int_list(a.concurrency or str(d.get("concurrency", "1")), "--concurrency"),
              float_list(a.rate, "--rate") if a.rate else [])
    requests = _requests(a, d, seconds(a.duration, "--duration", ("s", "m")))
    return load_config(a, argv, kind, d, levels, requests, _slo(a.slo))


def embedded_ctx(cfg: SweepConfig) -> int:
    """Each slot of the embedded engine holds one request, its prompt and output, as the workload kind needs it
    (up to what the embedded model was trained for, where the kind can be held to that); the kind as it runs
    there replaces the config's."""
    from ..engines.tiny import CONFIG

    ctx, cfg.workload = cfg.workload.for_slot(int(CONFIG["max_position_embeddings"]))
    return ctx


def cmd_sweep(a: argparse.Namespace, argv: list[str], console: Console, err: Console) -> int:
    check_output(a.json, "--json")
    cfg = sweep_config(a, argv)
    store = Store(a.db)
    reporter = RichReporter(err, enabled=not a.quiet)
    spec = embedded_spec(a)
    with running(spec, cfg, notifier(err), parallel=max(cfg.concurrency or [1]),
                 ctx=embedded_ctx(cfg) if spec else MIN_CONTEXT) as engine, interrupts.held() as ctrl_c:
        try:
            try:
                res = ctrl_c.run(run_sweep(cfg, store, reporter, alive=engine.alive if engine else None))
            finally:
                reporter.close()
        except TokenbenchError as e:  # an interrupt or an error after the run was stored: this sweep's run, never
            if e.result is not None:  # another's, as the runner closed it (an interrupted one is shown even empty)
                if e.result.outcomes or isinstance(e, RunInterrupted):
                    print_result(console, e.result, a.format, store.path)
                if a.json:
                    write_json(a.json, e.result)
            raise
        print_result(console, res, a.format, store.path)
        if a.json:
            write_json(a.json, res)  # the result in hand: what show --json reads back
    return run_exit(res)
