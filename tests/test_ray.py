"""Load from a Ray cluster (``--ray``): a head and a worker node as processes on this machine, the same workers as
``--workers`` placed one per node, the same level statistics as one process, and a worker killed mid-level ending
the level as partial with its finished requests kept."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tokenbench.emitter import BackgroundEmitter, EmitterProcess
from tokenbench.records import RequestRecord
from tokenbench.store import Store
from tokenbench.progress import QuietReporter
from tokenbench.sweep import SweepConfig, run_sweep
from tokenbench.kinds.lengths import LengthsKind

if os.environ.get("TOKENBENCH_REQUIRE_ENGINES"):  # CI installs the ray extra: missing is a failure there
    import ray
else:
    ray = pytest.importorskip("ray")

MiB = 1 << 20


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * MiB,
                                                       "include_dashboard": False})
    c.add_node(num_cpus=1, object_store_memory=80 * MiB)
    c.wait_for_nodes()
    yield c
    if ray.is_initialized():
        ray.shutdown()
    c.shutdown()


def _sweep(url: str, store: Store, reporter: Any = None, **kw: Any) -> Any:
    kw.setdefault("guard", "off")
    cfg = SweepConfig(url=url, workload=LengthsKind.fixed(16, 24), metrics_interval_s=None, **kw)
    return asyncio.run(run_sweep(cfg, store, reporter))


@pytest.mark.alone  # times two Ray nodes' processes against one: the tests beside it took from both (a request lost)
def test_a_two_node_sweep_gives_the_statistics_one_process_gives(cluster: Any, tmp_path: Path) -> None:
    # the emitter in a process of its own: on its thread of the test's process it shared the driver's interpreter,
    # and a CI run read its TTFT past 65 ms
    with EmitterProcess("--ttft", "0.05", "--itl", "0.01") as em:
        one = _sweep(em.url, Store(tmp_path / "a.db"), concurrency=[6], requests=24, seed=3, workers=1)
        two = _sweep(em.url, Store(tmp_path / "b.db"), concurrency=[6], requests=24, seed=3, ray=cluster.address,
                     workers=None)
    assert not ray.is_initialized()  # the sweep connected, and let go when it ended
    a, b = one.outcomes[0].summary, two.outcomes[0].summary
    load = (two.manifest.load or {})["workers"]
    assert load["kind"] == "ray" and load["workers"] == 2
    assert len({c["node"] for c in load["clocks"]}) == 2  # one worker on each node
    assert (b.completed, b.failed) == (24, 0) and b.output_tokens_mean == 24
    assert 50 <= b.ttft_ms.p50 < 65 and 9.5 <= b.tpot_ms.p50 < 11
    assert b.ttft_ms.p50 == pytest.approx(a.ttft_ms.p50, abs=8)
    assert b.tpot_ms.p50 == pytest.approx(a.tpot_ms.p50, rel=0.05)
    assert b.output_throughput_tps == pytest.approx(a.output_throughput_tps, rel=0.15)
    # both nodes are processes of this machine: one monotonic clock, so no skew to correct
    assert all(c["same_clock"] and c["clock_uncertainty_ms"] == 0 for c in b.client.clocks or [])
    recs = [r for r in Store(tmp_path / "b.db").requests(two.run_id) if r.phase == "measured"]
    assert len(recs) == 24 and len({r.index for r in recs}) == 24


@pytest.mark.alone  # times two Ray workers' overlap: on a CI run the tests beside it (the machine 1.7x slower) read
# an achieved concurrency of 1.09 of 2, the emitter serving their requests one at a time
def test_ray_workers_keep_their_streams_in_flight_from_the_shared_start(cluster: Any, tmp_path: Path) -> None:
    """A Ray worker starts half a second after the driver asks (the calls' latency): that wait, sampled, once read
    as requests not in flight (0.85 of 1 at concurrency 1, and client-bound)."""
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.02, itl_s=0.005)
        # 8 requests a worker, each level about a second long: a CI run on a loaded machine, 2 each, read an
        # achieved concurrency of 1.02 (its requests one wave at a time), one worker's call reaching it late
        res = _sweep(em.url, Store(tmp_path / "r.db"), concurrency=[2], requests=16, ray=cluster.address,
                     workers=None)
    s = res.outcomes[0].summary
    workers = s.client.workers or []
    assert s.completed == 16 and [w["streams"] for w in workers] == [1, 1]
    for w in workers:
        assert w["inflight_mean"] == pytest.approx(w["streams"], rel=0.05), w
    # the level's figure is the workers' sum; the achieved concurrency also counts the drain, where one worker's
    # last answer has come and the other's has not, so it can only read lower (1.83 once, on a loaded machine)
    assert s.client.inflight_mean == pytest.approx(sum(w["streams"] for w in workers), rel=0.05)
    assert 0.75 * s.client.inflight_mean <= s.achieved_concurrency <= 1.05 * s.client.inflight_mean
    # the in-flight shortfall is what the wait once read as; another reason (an event-loop stop while Ray's own
    # processes share the two cores) says nothing of the shared start
    assert not [f for f in s.findings if f.code == "client_bound" and "in flight of" in f.message], s.findings


class _KillActor(QuietReporter):
    def __init__(self, n: int) -> None:
        self.n, self.seen, self.killed = n, 0, 0

    def request_done(self, record: RequestRecord) -> None:
        self.seen += 1
        if self.seen == self.n and not self.killed:
            for p in psutil.process_iter(["pid", "cmdline"]):
                if "ray::LoadWorker" in " ".join(p.info["cmdline"] or []):
                    os.kill(p.info["pid"], signal.SIGKILL)
                    self.killed = p.info["pid"]
                    return


def test_a_ray_worker_killed_mid_level_leaves_a_partial_level(cluster: Any, tmp_path: Path) -> None:
    store = Store(tmp_path / "r.db")
    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.02, itl_s=0.005)
        rep = _KillActor(10)
        res = _sweep(em.url, store, rep, concurrency=[4], requests=60, warmup=0, ray=cluster.address, workers=None)
    assert rep.killed
    out = res.outcomes[0]
    assert out.status == "partial" and "worker_lost" in out.summary.flags
    assert any("lost mid-level" in w for w in out.summary.warnings)
    kept = [r for r in store.requests(res.run_id) if r.phase == "measured"]
    assert 10 <= len(kept) < 60 and all(r.ok for r in kept)
    assert store.levels(res.run_id)[0][2] == "partial" and res.status in ("partial", "failed")


def test_a_dirty_node_marks_the_level(cluster: Any, tmp_path: Path) -> None:
    """The guard runs on every node with workers but the driver's; a node it finds dirty marks the level."""
    from tokenbench import guard

    strict_load = guard.load_config()
    strict_load["cpu_load"].update(severity="fail", max_other_pct=-1.0)  # any load is too much: every node is dirty
    with BackgroundEmitter() as em:
        res = _sweep(em.url, Store(tmp_path / "g.db"), concurrency=[2], requests=4, ray=cluster.address,
                     workers=None, guard="warn", guard_config=strict_load)
    s = res.outcomes[0].summary
    assert "dirty_bench" in s.flags
    assert any("load-generating node" in w for w in s.warnings)
    assert s.client.node_guards and not s.client.node_guards[0]["clean"]


def test_a_ray_actor_on_uvloop_measures_on_the_lean_path(cluster: Any, tmp_path: Path) -> None:
    """Ray's async actors run uvloop where it is installed (vLLM's environment installs it), whose transports are
    no asyncio.Transport: the lean send path once asserted that class, and ``sweep --ray`` against the emitter
    measured nothing ("ray worker 0 stopped with an error (AssertionError)", 0 tokens, the level failed)."""
    pytest.importorskip("uvloop")

    @ray.remote(num_cpus=0)
    class Probe:  # defined here, so Ray carries it by value to a worker of the cluster
        async def send(self, url: str) -> tuple[str, list[tuple[Any, ...]]]:
            import aiohttp

            from tokenbench.client import PreparedRequest, StreamClient
            from tokenbench.records import RequestRecord

            loop = type(asyncio.get_running_loop()).__module__
            async with aiohttp.ClientSession() as session:
                c = StreamClient(http=session, base_url=url, model="emitter")
                try:
                    recs = [await c.send(PreparedRequest("a b c", 5), RequestRecord(index=i)) for i in range(3)]
                finally:
                    await c.close()
            return loop, [(r.ok, r.error_kind, r.output_tokens) for r in recs]

    with BackgroundEmitter() as em:
        em.configure(ttft_s=0.01, itl_s=0.002)
        ray.init(address=cluster.address)
        try:
            loop, sent = ray.get(Probe.remote().send.remote(em.url), timeout=120)
        finally:
            ray.shutdown()
        res = _sweep(em.url, Store(tmp_path / "u.db"), concurrency=[4], requests=16, ray=cluster.address,
                     workers=None)
    assert loop.startswith("uvloop")  # the actor's loop: what the sweep's workers ran on
    assert sent == [(True, None, 5)] * 3
    out = res.outcomes[0]
    assert out.status == "complete", out.summary.warnings
    assert (out.summary.completed, out.summary.failed) == (16, 0) and out.summary.output_tokens_mean == 24
