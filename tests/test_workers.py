"""Load from several processes (``--workers``): a level split exactly, merged into one, the same statistics as
one process on the deterministic emitter, and a worker killed mid-level ending the level as partial with what it
had finished kept."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import fuzz_examples
from tokenbench.cli import main
from tokenbench.emitter import BackgroundEmitter
from tokenbench.layout import plural
from tokenbench.offered_load import Level
from tokenbench.records import RequestRecord
from tokenbench.store import Store
from tokenbench.progress import QuietReporter
from tokenbench.sweep import SweepConfig, run_sweep
from tokenbench.kinds.lengths import LengthsKind
from tokenbench.workers import (SEND_QUEUE_GOAL_MS, auto_workers, cap_workers, send_weights, split_level,
                                wave_queue_p90_ms, worker_shares, workers_for_sends)


@settings(max_examples=fuzz_examples(500), deadline=None)
@given(c=st.integers(1, 600), n=st.integers(1, 16), req=st.one_of(st.none(), st.integers(1, 5000)))
def test_a_closed_loop_level_is_split_exactly(c: int, n: int, req: int | None) -> None:
    shares = split_level(Level(concurrency=c), req, n)
    conc = [s.concurrency or 0 for s, _, _ in shares]
    if req is None or req >= c:  # every worker has a share, the shares differ by one at most
        assert sum(conc) == c and len(shares) == min(c, n) and max(conc) - min(conc) <= 1
    else:  # fewer requests than slots: a worker with none to send sits out, the rest still fill the requests
        assert min(c, req) <= sum(conc) <= c
    if req is not None:
        assert sum(k or 0 for _, k, _ in shares) == req
        assert all(k and k > 0 for _, k, _ in shares)


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(rate=st.floats(0.1, 1000), n=st.integers(1, 8), req=st.integers(1, 5000),
       arrival=st.sampled_from(["poisson", "constant"]))
def test_an_open_loop_level_is_split_exactly(rate: float, n: int, req: int, arrival: Any) -> None:
    shares = split_level(Level(rate=rate, arrival=arrival), req, n)
    assert sum(k or 0 for _, k, _ in shares) == req
    assert sum(s.rate or 0 for s, _, _ in shares) == pytest.approx(rate * len(shares) / n)
    if arrival == "constant":  # interleaved: worker k starts k/rate late, so the merged arrivals stay 1/rate apart
        assert [o for _, _, o in shares] == pytest.approx([k / rate for k in range(len(shares))])


def test_auto_uses_a_worker_per_64_streams_and_at_most_the_cores() -> None:
    assert auto_workers([Level(concurrency=1), Level(concurrency=64)], cores=16) == 1
    assert auto_workers([Level(concurrency=65)], cores=16) == 2
    assert auto_workers([Level(concurrency=512)], cores=16) == 8
    assert auto_workers([Level(concurrency=512)], cores=2) == 2


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(m=st.integers(1, 3000), c=st.floats(0.5, 500))
def test_a_waves_p90_send_queue_is_the_p90_of_one_send_after_another(m: int, c: float) -> None:
    # the k-th of m sends on one loop is on its socket k sends after the wave began: c, 2c, ..., mc
    assert wave_queue_p90_ms(m, c) == pytest.approx(c * (1 + 0.9 * (m - 1)) / 1000)
    assert wave_queue_p90_ms(m + 1, c) > wave_queue_p90_ms(m, c)


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(streams=st.integers(1, 5000), c=st.floats(1, 300), cores=st.integers(1, 64))
def test_auto_picks_the_fewest_workers_whose_wave_stays_under_the_goal(streams: int, c: float, cores: int) -> None:
    n = workers_for_sends(streams, c, cores)
    assert 1 <= n <= cores
    def p90(k: int) -> float:
        return wave_queue_p90_ms(-(-streams // k), c)
    if p90(n) > SEND_QUEUE_GOAL_MS:  # not reachable: every core is used
        assert n == cores
    if n > 1:  # one fewer would miss the goal
        assert p90(n - 1) > SEND_QUEUE_GOAL_MS


def test_auto_sizes_by_the_measured_send_cost_within_the_cores() -> None:
    # 15 µs a send: 73 re-sends keep their p90 under 1 ms (987 µs), 74 do not
    assert workers_for_sends(73, 15, 16) == 1 and workers_for_sends(74, 15, 16) == 2
    assert auto_workers([Level(concurrency=512)], cores=16, send_us=15) == 8  # 64 each: 865 µs
    assert auto_workers([Level(concurrency=512)], cores=16, send_us=80) == 16  # aiohttp's cost: every core
    assert auto_workers([Level(concurrency=512)], cores=4, send_us=15) == 4
    assert auto_workers([Level(concurrency=48)], cores=16, send_us=15) == 1
    assert auto_workers([Level(concurrency=48)], cores=16, send_us=40) == 2  # 1 + 0.9 x 47 sends of 40 µs: 1.7 ms
    assert auto_workers([Level(concurrency=200)], cores=16, send_us=1) == 4  # reads: one per 64 streams still
    assert auto_workers([Level(concurrency=200)], cores=16) == 4  # nothing measured: the stream rule alone


@settings(max_examples=fuzz_examples(400), deadline=None)
@given(data=st.data(), c=st.integers(1, 600), n=st.integers(1, 12),
       req=st.one_of(st.none(), st.integers(1, 5000)))
def test_a_weighted_split_keeps_the_level_whole_and_gives_the_slower_fewer(data: Any, c: int, n: int,
                                                                           req: int | None) -> None:
    queues = data.draw(st.lists(st.floats(0.001, 50), min_size=n, max_size=n))
    weights = send_weights(queues)
    placed = worker_shares(Level(concurrency=c), req, n, weights)
    assert len(placed) == n
    shares = [s for s in placed if s is not None]
    conc = [s.concurrency or 0 for s, _, _ in shares]
    assert sum(conc) == c or (req is not None and req < c and min(c, req) <= sum(conc) <= c)
    if req is not None:
        assert sum(k or 0 for _, k, _ in shares) == req and all(k and k > 0 for _, k, _ in shares)
    if weights is None:  # even: what split_level gives unweighted
        assert [p for p in placed if p is not None] == split_level(Level(concurrency=c), req, n)
    elif (req is None or req >= c) and c >= n:  # every worker keeps a stream, a slower one never gets more
        got = [s.concurrency or 0 for s, _, _ in placed]  # type: ignore[misc]
        assert min(got) >= 1
        for a in range(n):
            for b in range(n):
                if queues[a] > queues[b]:
                    assert got[a] <= got[b] + 1  # largest remainder: one at most from the rounding


def test_send_weights_are_inverse_to_the_queues_and_even_when_nothing_is_measured() -> None:
    assert send_weights([]) is None and send_weights([None, None]) is None
    assert send_weights([0.02, 0.025]) is None  # within 1.5x: one speed, an even split
    assert send_weights([0.01, 0.03]) == pytest.approx([100, 100 / 3])
    assert send_weights([0.01, None, 0.04]) == pytest.approx([100, 1 / 0.025, 25])  # unmeasured: the median
    placed = worker_shares(Level(concurrency=20), None, 2, send_weights([0.01, 0.03]))
    assert [s.concurrency for s, _, _ in placed] == [14, 6]  # type: ignore[misc]  # 1 each, 18 as 3:1
    even = worker_shares(Level(concurrency=20), None, 2)
    assert [s.concurrency for s, _, _ in even] == [10, 10]  # type: ignore[misc]


def _sweep(url: str, store: Store, workers: int | None, reporter: Any = None, **kw: Any) -> Any:
    cfg = SweepConfig(url=url, workload=LengthsKind.fixed(16, 24), guard="off", metrics_interval_s=None, workers=workers,
                      **kw)
    return asyncio.run(run_sweep(cfg, store, reporter))


@pytest.mark.alone  # times one process against two within 8 ms: the tests beside it take from either run
def test_two_workers_give_the_statistics_one_gives(tmp_path: Path) -> None:
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.05, itl_s=0.01)
        one = _sweep(em.url, Store(tmp_path / "a.db"), 1, concurrency=[6], requests=24, seed=3)
        two = _sweep(em.url, Store(tmp_path / "b.db"), 2, concurrency=[6], requests=24, seed=3)
    a, b = one.outcomes[0].summary, two.outcomes[0].summary
    assert (one.manifest.load or {})["workers"]["workers"] == 1 and (two.manifest.load or {})["workers"]["workers"] == 2
    assert (a.completed, a.failed, b.completed, b.failed) == (24, 0, 24, 0)
    assert b.output_tokens_mean == a.output_tokens_mean == 24
    # the emitter's schedule is 50 ms to the first token, 10 ms a token: both must read it, within a few ms
    for s in (a, b):
        assert 50 <= s.ttft_ms.p50 < 65 and 9.5 <= s.tpot_ms.p50 < 11
    assert b.ttft_ms.p50 == pytest.approx(a.ttft_ms.p50, abs=8)
    assert b.tpot_ms.p50 == pytest.approx(a.tpot_ms.p50, rel=0.05)
    assert b.output_throughput_tps == pytest.approx(a.output_throughput_tps, rel=0.15)
    assert b.achieved_concurrency == pytest.approx(a.achieved_concurrency, rel=0.15)
    workers = b.client.workers or []
    assert len(workers) == 2 and sum(w["inflight_mean"] for w in workers) == pytest.approx(6, rel=0.2)
    assert all(c["same_clock"] for c in b.client.clocks or [])  # one machine: one monotonic clock, no mapping
    # every prompt unique across the workers, every request of the level stored once
    store = Store(tmp_path / "b.db")
    recs = [r for r in store.requests(two.run_id) if r.phase == "measured"]
    assert len(recs) == 24 and len({r.index for r in recs}) == 24


def test_two_workers_at_one_stream_each_keep_one_in_flight_each(tmp_path: Path) -> None:
    """Each worker starts its share at the pool's shared start time: the wait before it is no part of the level,
    and its in-flight samples, merged, read the streams the level kept (once read 0.89 of 1, and client-bound)."""
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.02, itl_s=0.005)
        res = _sweep(em.url, Store(tmp_path / "r.db"), 2, concurrency=[2], requests=4, seed=2)
    s = res.outcomes[0].summary
    workers = s.client.workers or []
    assert s.completed == 4 and len(workers) == 2 and [w["streams"] for w in workers] == [1, 1]
    for w in workers:  # a closed loop re-sends at once: a stream is in flight all through its window
        assert w["inflight_mean"] == pytest.approx(w["streams"], rel=0.05), w
    assert s.client.inflight_mean == pytest.approx(s.achieved_concurrency, rel=0.05)
    assert "client_bound" not in s.flags and not any("in flight" in w for w in s.warnings)


def test_an_open_loop_level_over_two_workers_keeps_its_rate(tmp_path: Path) -> None:
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.01, itl_s=0.001)
        res = _sweep(em.url, Store(tmp_path / "r.db"), 2, rates=[40.0], arrival="constant", requests=40, seed=1)
    s = res.outcomes[0].summary
    assert s.completed == 40 and s.request_throughput_rps == pytest.approx(40, rel=0.15)
    recs = sorted((r for r in Store(tmp_path / "r.db").requests(res.run_id) if r.phase == "measured"),
                  key=lambda r: r.scheduled_ns or 0)
    gaps = [(b.scheduled_ns - a.scheduled_ns) / 1e6 for a, b in zip(recs, recs[1:])]  # type: ignore[operator]
    assert statistics.median(gaps) == pytest.approx(25, abs=3)  # interleaved: 25 ms apart, not pairs


def _worker_pids() -> list[int]:
    return [p.pid for p in psutil.Process().children(recursive=True)
            if "child_main" in " ".join(p.cmdline())]


class _KillAfter(QuietReporter):
    def __init__(self, n: int) -> None:
        self.n, self.seen, self.killed = n, 0, 0

    def request_done(self, record: RequestRecord) -> None:
        self.seen += 1
        if self.seen == self.n and not self.killed:
            pid = _worker_pids()[0]
            os.kill(pid, signal.SIGKILL)
            self.killed = pid


def test_a_worker_killed_mid_level_leaves_a_partial_level_with_its_finished_requests(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.02, itl_s=0.005)
        rep = _KillAfter(10)
        res = _sweep(em.url, store, 2, reporter=rep, concurrency=[4], requests=60, warmup=0)
    assert rep.killed
    out = res.outcomes[0]
    assert out.status == "partial" and res.status in ("partial", "failed")
    assert "worker_lost" in out.summary.flags
    assert any("lost mid-level" in w and "are kept" in w for w in out.summary.warnings)
    kept = [r for r in store.requests(res.run_id) if r.phase == "measured"]
    assert 10 <= len(kept) < 60 and all(r.ok for r in kept)  # what was finished, not what was in flight
    assert out.summary.completed == len(kept)
    assert store.levels(res.run_id)[0][2] == "partial"


def test_the_cli_takes_workers_and_refuses_a_bad_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--url", "http://127.0.0.1:9/v1", "--workers", "zero"]) == 2
    err = capsys.readouterr().err
    assert "--workers zero" in err and "auto" in err and len(err.strip().splitlines()) == 1
    with BackgroundEmitter() as em:  # Ray would retry an address nobody answers for minutes: refused at once
        assert main(["sweep", "--url", em.url, "--ray", "127.0.0.1:1", "--guard", "off", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--ray 127.0.0.1:1" in err and len(err.strip().splitlines()) == 1
    with BackgroundEmitter() as em:
        rc = main(["sweep", "--url", em.url, "--concurrency", "4", "--requests", "8", "--workers", "2",
                   "--guard", "off", "--quiet", "--input-len", "8", "--output-len", "4",
                   "--json", str(tmp_path / "r.json")])
    assert rc == 0
    assert threading.active_count() < 20


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(asked=st.integers(1, 5000), conc=st.lists(st.integers(1, 600), min_size=1, max_size=4),
       cores=st.one_of(st.none(), st.integers(1, 64)))
def test_a_worker_count_is_held_to_the_streams_and_cores_that_can_use_it(asked: int, conc: list[int],
                                                                       cores: int | None) -> None:
    levels = [Level(concurrency=c) for c in conc]
    n, why = cap_workers(asked, levels, cores)
    most = min(asked, max(conc), cores or asked)
    assert n == most  # every worker started has a share of the busiest level
    assert all(s is not None for s in worker_shares(Level(concurrency=max(conc)), None, n))
    assert (why is None) == (n == asked)
    if why is not None:
        assert why.startswith(f"--workers {asked}: ") and str(n) in why and "\n" not in why
    # an open loop's rate splits over any number of workers: only its cap on requests in flight, and the cores, hold
    assert cap_workers(asked, [Level(rate=5.0)], cores)[0] == min(asked, cores or asked)
    assert cap_workers(asked, [Level(rate=5.0, max_concurrency=3)], None)[0] == min(asked, 3)


def test_the_cli_starts_no_more_workers_than_the_level_can_use(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from tokenbench.workers import usable_cores

    out = tmp_path / "r.json"
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.005, itl_s=0.001)
        rc = main(["sweep", "--url", em.url, "--concurrency", "1", "--requests", "4", "--workers", "999",
                   "--guard", "off", "--quiet", "--input-len", "8", "--output-len", "4", "--db", str(tmp_path / "r.db"),
                   "--json", str(out)])
        assert rc == 0
        err = " ".join(capsys.readouterr().err.split())  # one line, as wide as the terminal lets it be
        assert err.count("--workers 999: starting 1 worker, as") == 1 and "1 request in flight" in err
        assert not _worker_pids()
        load = json.loads(out.read_text())["manifest"]["load"]
        assert load["workers"]["workers"] == 1
        rc = main(["sweep", "--url", em.url, "--rate", "20", "--requests", "4", "--workers", "999", "--guard", "off",
                   "--quiet", "--input-len", "8", "--output-len", "4", "--db", str(tmp_path / "r.db"),
                   "--json", str(out)])
    assert rc == 0
    assert json.loads(out.read_text())["manifest"]["load"]["workers"]["workers"] == usable_cores()
    assert f"--workers 999: starting {plural(usable_cores(), 'worker')}, as one per core" in \
        " ".join(capsys.readouterr().err.split())


def test_the_note_of_the_workers_started_counts_them_in_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ray cluster of one node gives one worker: "load from 1 worker (ray)", never "1 workers"."""
    import tokenbench.raypool
    from tokenbench.workers.auto import start_workers

    class _Pool:
        kind = "ray"

        def __init__(self, size: int) -> None:
            self.size = size

    for size in (1, 2):
        async def one_node(address: str, spec: Any, workers: int | None, warn: Any = None, size: int = size) -> Any:
            return _Pool(size)

        monkeypatch.setattr(tokenbench.raypool, "ray_pool", one_node)
        notes: list[str] = []
        asyncio.run(start_workers(None, "http://gpu:8000/v1", None, "auto", [Level(concurrency=4)],  # type: ignore[arg-type]
                                  16, notes.append, notes.append))
        assert notes == [f"load from {plural(size, 'worker')} (ray)"]


def test_a_worker_builds_the_client_the_driver_has() -> None:
    from tokenbench.client import StreamClient
    from tokenbench.workers import ClientSpec

    c = StreamClient(http=None, base_url="http://h:1/v1", model="m", api="chat", api_key="k",  # type: ignore[arg-type]
                     temperature=0.7, body_extras={"ignore_eos": True}, timeout_s=9, stall_timeout_s=3,
                     one_token_per_chunk=True, fresh_connection=True, lean=False)
    w = ClientSpec.of(c, None).build(None)  # type: ignore[arg-type]
    fields = ("base_url", "model", "api", "api_key", "temperature", "body_extras", "timeout_s", "stall_timeout_s",
              "one_token_per_chunk", "fresh_connection", "lean")
    assert [getattr(w, f) for f in fields] == [getattr(c, f) for f in fields]


class _RemoteClock:
    """A worker on another machine: its monotonic clock 1000 s ahead, its wall clock 2.5 s fast."""

    name = "remote"

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def call(self, method: str, *args: Any) -> Any:
        import time

        from tokenbench.workers import ClockSample

        await asyncio.sleep(self.delay_s)  # half the round trip before the reading, half after
        s = ClockSample(time.perf_counter_ns() + 1000 * 10**9, time.time_ns() + 2_500_000_000, "far", "other-boot",
                        1, "other-node")
        await asyncio.sleep(self.delay_s)
        return s

    async def close(self) -> None:
        pass


def test_a_remote_worker_is_mapped_onto_the_driver_clock_within_its_stated_uncertainty() -> None:
    import time

    from tokenbench.workers import WorkerPool

    async def go() -> tuple[Any, int, int]:
        pool = WorkerPool([_RemoteClock(0.002)], "ray")
        await pool.sync_clocks()
        remote_now = time.perf_counter_ns() + 1000 * 10**9  # what the worker's clock reads now
        return pool.members[0], remote_now + pool.members[0].offset_ns, time.perf_counter_ns()

    m, mapped, here = asyncio.run(go())
    assert not m.clock["same_clock"] and m.clock["skew_ms"] == pytest.approx(2500, abs=5)
    error_ms = abs(mapped - here) / 1e6
    assert error_ms <= m.clock["clock_uncertainty_ms"] + 1.0  # the exchange's bound holds (1 ms for scheduling)
    assert 1.5 <= m.clock["clock_uncertainty_ms"] < 10


def test_two_workers_report_their_split_and_send_queues_and_every_record(tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.01, itl_s=0.002)
        res = _sweep(em.url, store, 2, concurrency=[9], requests=45, warmup=18, seed=5)
    s = res.outcomes[0].summary
    assert (s.completed, s.failed) == (45, 0)
    workers = s.client.workers or []
    # the split of the level (weighed by the warm-up's send queues where one worker's were 1.5x the other's)
    assert len(workers) == 2 and sum(w["streams"] for w in workers) == 9 and min(w["streams"] for w in workers) >= 1
    assert all(w["send_queue_ms_p50"] is not None and w["send_queue_ms_p50"] > 0 for w in workers)
    assert "streams" not in s.client.to_dict()  # a worker's share, not the level's
    recs = [r for r in store.requests(res.run_id) if r.phase == "measured"]
    assert len(recs) == 45 and len({r.index for r in recs}) == 45
    assert s.send_queue_ms is not None and s.send_queue_ms.n == 45


class _Feed:
    def __init__(self) -> None:
        from tokenbench.client import PreparedRequest

        self.made = ((k, PreparedRequest(f"prompt {k}", 4)) for k in range(10**6))

    async def prepare(self, n: int) -> None:
        pass

    async def take(self, n: int) -> list[Any]:
        return [next(self.made) for _ in range(n)]


def test_a_pool_gives_a_worker_whose_sends_queue_fewer_streams_and_measures_them_again() -> None:
    from tokenbench.client import StreamClient
    from tokenbench.workers import ClientSpec, WorkerPool

    async def go(url: str) -> tuple[Any, list[float | None]]:
        spec = ClientSpec.of(StreamClient(http=None, base_url=url, model="emitter"), None)  # type: ignore[arg-type]
        pool = await WorkerPool.local(spec, 2)
        try:
            pool.members[0].send_queue_ms, pool.members[1].send_queue_ms = 0.02, 0.06  # as a last phase measured
            sink: list[RequestRecord] = []
            merged = await pool.run_phase(Level(concurrency=10), "measured", requests=30, duration_s=None, seed=1,
                                          prompts=_Feed(), sink=sink)
            return merged, [m.send_queue_ms for m in pool.members]
        finally:
            await pool.close()

    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.005, itl_s=0.001)
        merged, after = asyncio.run(go(em.url))
    workers = merged.client["workers"]
    assert [w["streams"] for w in workers] == [7, 3]  # one each, then 8 as 3:1
    assert len(merged.records) == 30 and all(r.ok for r in merged.records)
    assert len({r.index for r in merged.records}) == 30
    assert None not in after and after != [0.02, 0.06]  # this phase's own medians weigh the next split


def test_auto_measures_a_send_and_keeps_its_choice_in_the_manifest(tmp_path: Path) -> None:
    from tokenbench.workers import usable_cores

    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.005, itl_s=0.001)
        res = _sweep(em.url, Store(tmp_path / "r.db"), None, concurrency=[4], requests=8)
    auto = (res.manifest.load or {})["workers"]["auto"]
    # the emitter is on this machine (a loopback URL): the client takes half the cores, the server the rest
    assert auto["streams"] == 4 and auto["server_here"] and auto["shares_cores"]
    assert auto["cores"] == max(1, usable_cores() // 2)
    if auto["cores"] > 1:  # a send measured on the run's own client
        assert auto["send_us"] > 0
        assert auto["workers"] == auto_workers([Level(concurrency=4)], auto["cores"], auto["send_us"])
    assert (res.manifest.load or {})["workers"]["workers"] == auto["workers"]


def test_auto_measures_no_send_for_one_stream_and_the_docs_say_send_us_is_null_then(tmp_path: Path) -> None:
    """One stream needs one worker whatever a send costs: nothing is measured, ``send_us`` is null, and the docs
    that describe ``load.workers.auto`` say when it is."""
    import re

    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.005, itl_s=0.001)
        res = _sweep(em.url, Store(tmp_path / "r.db"), None, concurrency=[1], requests=2)
    auto = (res.manifest.load or {})["workers"]["auto"]
    assert auto["streams"] == 1 and auto["workers"] == 1 and auto["send_us"] is None
    assert "µs a send" not in auto["why"]
    docs = Path(__file__).parent.parent / "docs"
    for name in ("workers.md", "results.md"):
        text = " ".join((docs / name).read_text().split())
        assert re.search(r"`send_us`[^|]*measured cost of one send[^|]*`null` where[^|]*one stream", text), name


def test_auto_says_an_open_loop_has_no_streams(tmp_path: Path) -> None:
    """An uncapped --rate 40 read "1 stream on 1 core", where 13 requests were in flight on average: an open loop
    sends each request as it arrives, and its reason says so."""
    with BackgroundEmitter() as em:
        res = _sweep(em.url, Store(tmp_path / "r.db"), None, rates=[20.0, 40.0], requests=8)
    auto = (res.manifest.load or {})["workers"]["auto"]
    assert auto["workers"] == 1 and "stream" not in auto["why"].split(":")[0], auto["why"]
    assert auto["why"].startswith("an open loop of up to 40 requests/s with no cap on requests in flight")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores: one for the server, one for the client")
def test_auto_leaves_the_server_its_own_cores_and_takes_the_rest(tmp_path: Path) -> None:
    """A server on this machine pinned to cores of its own (taskset, a cpuset) does not share the client's: --workers
    auto takes every core the server's processes may not run on, where it would take half of them for a server
    that may run anywhere. On the 16-core machine, 8 emitters pinned to 8 cores had auto start 4 workers on the
    other 8, and at 2,048 streams they ran at 92% of a core with a loop lag of 27 ms."""
    from tokenbench.emitter import EmitterProcess
    from tokenbench.servers import server_cores

    mine = sorted(os.sched_getaffinity(0))
    with EmitterProcess("--ttft", "0.005", "--itl", "0.001") as em:
        os.sched_setaffinity(em.proc.pid, {mine[0]})
        assert server_cores(em.url) == {mine[0]}
        res = _sweep(em.url, Store(tmp_path / "r.db"), None, concurrency=[4], requests=8)
    auto = (res.manifest.load or {})["workers"]["auto"]
    assert auto["server_here"] and not auto["shares_cores"] and auto["cores"] == len(mine) - 1, auto
    assert "the server's processes keep to 1 core of their own" in auto["why"], auto["why"]
    assert server_cores("http://127.0.0.1:9/v1") is None  # nothing listens there


def test_a_server_on_this_machine_is_told_by_its_address() -> None:
    from tokenbench.servers import on_this_machine

    for url in ("http://127.0.0.1:8000/v1", "http://localhost:8080/v1", "http://[::1]:8000/v1", "http://127.0.1.1/v1",
                "http://0.0.0.0:8000/v1", "127.0.0.1:8000"):
        assert on_this_machine(url), url
    for url in ("http://gpu-box:8000/v1", "https://api.example.com/v1", "http://10.0.0.5:8000/v1"):
        assert not on_this_machine(url), url


def test_the_send_cost_is_measured_on_the_path_the_run_sends_by() -> None:
    from tokenbench.client import StreamClient
    from tokenbench.workers import ClientSpec
    from tokenbench.workers.send_cost import sink_spec

    def spec(url: str, lean: bool = True) -> ClientSpec:
        return ClientSpec.of(StreamClient(http=None, base_url=url, model="m", api_key="k",  # type: ignore[arg-type]
                                          lean=lean, fresh_connection=True), "tok")

    sink = "http://127.0.0.1:1/v1"
    assert sink_spec(spec("http://gpu:8000/v1"), sink).lean
    assert not sink_spec(spec("https://api.example/v1"), sink).lean  # aiohttp's path, as the run's
    assert not sink_spec(spec("http://gpu:8000/v1", lean=False), sink).lean
    s = sink_spec(spec("https://api.example/v1"), sink)
    assert (s.base_url, s.counter_path, s.api_key, s.fresh_connection) == (sink, None, "k", True)
