"""Load-generating workers on a Ray cluster (``tokenbench sweep --ray ADDRESS``).

Each worker is a Ray actor running the same :class:`~tokenbench.workers.LoadWorker` as ``--workers`` runs in
local processes: Ray places the actors, carries the calls and the records, and tells when a node is gone. Ray is
an optional extra (``pip install 'tokenbench[ray]'``); nothing here is imported without ``--ray``.

Placement: one actor per alive node by default (``--workers N`` asks for N, spread round-robin over the nodes),
each pinned to its node and holding one CPU there. Every node needs tokenbench installed, and the endpoint must
be reachable from every node.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import Any

from .errors import UsageError
from .layout import plural
from .workers.handle import WorkerLost
from .workers.messages import ClientSpec
from .workers.pool import WorkerPool
from .workers.worker import LoadWorker

#: CPUs a load-generating actor reserves on its node: one event loop, one core.
ACTOR_CPUS = 1.0


class RayHandle:
    def __init__(self, actor: Any, name: str) -> None:
        self.actor = actor
        self.name = name

    async def call(self, method: str, *args: Any) -> Any:
        import ray

        try:
            return await getattr(self.actor, method).remote(*args)
        except ray.exceptions.RayError as e:  # the actor died, its node left, or a call failed in it
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise WorkerLost(f"{self.name}: {type(e).__name__}: {first}"[:300]) from None

    async def close(self) -> None:
        import ray

        try:
            ray.kill(self.actor)
        except Exception:  # already gone with its node
            pass


def _reachable(address: str) -> None:
    if address == "auto" or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray {address}: give the cluster's HOST:PORT (from 'ray start --head'), or auto")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        raise UsageError(f"--ray {address}: no Ray cluster answers there ({e.strerror or e}); start one with "
                         "'ray start --head' and pass the address it prints") from None


def _cap(workers: int | None, nodes: list[dict[str, Any]], warn: Callable[[str], None] | None) -> int:
    """One actor per node, or ``workers`` of them held to the actors the nodes' CPUs can hold: an actor Ray cannot
    place would wait for a CPU for ever."""
    room = sum(int(n.get("Resources", {}).get("CPU", 0) // ACTOR_CPUS) for n in nodes)
    if workers is None:
        return len(nodes)
    if workers > room:
        if warn is not None:
            warn(f"--workers {workers}: starting {plural(room, 'worker')}, as the cluster's nodes have "
                 f"{plural(room, 'CPU')} for them (one each)")
        return room
    return workers


async def ray_pool(address: str, spec: ClientSpec, workers: int | None,
                   warn: Callable[[str], None] | None = None) -> WorkerPool:
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise UsageError("--ray needs Ray on this machine and every node: pip install 'tokenbench[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        _reachable(address)  # Ray itself retries an unreachable address for minutes
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise UsageError(f"--ray {address}: no Ray cluster there ({str(e).splitlines()[0][:200]}); start one "
                             "with 'ray start --head' and pass its address, or 'auto' on a node of it") from None
    alive = ray.nodes()  # type: ignore[no-untyped-call]  # Ray's nodes() has no annotations
    nodes = [n for n in alive if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= ACTOR_CPUS]
    if not nodes:
        raise UsageError(f"--ray {address}: the cluster has no alive node with a free CPU for a worker")
    count = _cap(workers, nodes, warn)
    actor_cls = ray.remote(num_cpus=ACTOR_CPUS, max_restarts=0)(LoadWorker)
    handles = []
    for k in range(count):
        node = nodes[k % len(nodes)]
        actor = actor_cls.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            name=None,
        ).remote(spec, k, node["NodeID"])
        handles.append(RayHandle(actor, f"ray worker {k} on {node.get('NodeManagerAddress', '?')}"
                                        f" ({node['NodeID'][:8]})"))
    pool = WorkerPool(handles, "ray", driver_node=ray.get_runtime_context().get_node_id())
    if started_here:
        pool.closers.append(ray.shutdown)
    try:
        await pool.sync_clocks()
    except WorkerLost as e:
        await pool.close()
        raise UsageError(f"--ray {address}: a worker did not start ({e}); is tokenbench installed on every "
                         "node?") from None
    return pool
