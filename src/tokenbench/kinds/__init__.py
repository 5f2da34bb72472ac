"""The workload kinds a sweep sends: a closed set, one module each (``base.py`` says what a kind gives a sweep).

- ``lengths``: independent requests of fixed or drawn lengths (the default);
- ``dataset``: independent requests, each the next prompt of a user's file;
- ``trace``: a timestamped request trace (Mooncake, CSV), replayed once in open loop;
- ``sessions``: agent sessions, each turn re-sending the conversation, the prefix cache warm and busted;
- ``replay``: recorded agent trajectories, replayed as agents behave (subagents, tools, pauses).

Adding a kind: its module here, its entry below, and its option group in the CLI (``cli/sweep.py``).
"""

from __future__ import annotations

from .dataset import DatasetKind
from .lengths import LengthsKind
from .replay import ReplayKind
from .sessions import SessionsKind
from .trace import TraceKind

#: Every kind a sweep's config may hold.
WorkloadKind = LengthsKind | DatasetKind | TraceKind | SessionsKind | ReplayKind
#: The kinds by the name a manifest's workload records.
KINDS: dict[str, type[WorkloadKind]] = {k.name: k for k in (LengthsKind, DatasetKind, TraceKind, SessionsKind,
                                                            ReplayKind)}
