"""A server tokenbench starts as its child, in a session of its own (a Ctrl-C at the terminal reaches tokenbench,
which stops the server in order), that also ends when tokenbench is killed outright.

``kill -9``, the OOM killer or a CI runner's hard cancel leave no chance to stop a child in order, and a server in
a session of its own outlives its parent: an orphaned llama-server or vLLM holding its port, its memory and its
cores, which the next run's guard finds as a server already loaded. On Linux the child asks the kernel for SIGTERM
when its parent dies (``PR_SET_PDEATHSIG``, as ``prctl(2)`` describes), and stops as it does on ``stop``.
Elsewhere it is started as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """The function a child runs between fork and exec: SIGTERM to it when its parent dies. Looked up in the
    parent, so the child only makes the call (no import, no allocation after the fork)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    sig = int(signal.SIGTERM)

    def ask() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)

    return ask


_ASK = _die_with_parent()


def spawn(argv: Sequence[str], out: IO[Any] | int | None, env: Mapping[str, str] | None = None,
          **kw: Any) -> subprocess.Popen[bytes]:
    """``argv`` started in a session of its own, its output (stdout and stderr) to ``out``, ending with this
    process. Call it from the main thread: the kernel's signal follows the thread that forked, and tokenbench's
    other threads (the emitter's loop, power samplers) end before the process does."""
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                            preexec_fn=_ASK, **kw)


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Stop ``spawn``'s child and its session's processes (vLLM's engine core beside its API server): SIGTERM,
    then SIGKILL after ``timeout`` seconds, or at once on a second Ctrl-C while it stops (vLLM compiling takes its
    time)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc, timeout)
    except KeyboardInterrupt:
        _kill(proc, timeout)
        raise


def _kill(proc: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=timeout)


def tail(log: IO[bytes], n: int = 15, most: int = 1 << 16) -> str:
    """The last ``n`` lines a child wrote to ``log`` (of its last ``most`` bytes), for an error that says why it
    stopped."""
    try:
        log.flush()
        log.seek(max(0, log.seek(0, os.SEEK_END) - most))
        return "\n".join(log.read().decode(errors="replace").splitlines()[-n:])
    except (OSError, ValueError):
        return ""
