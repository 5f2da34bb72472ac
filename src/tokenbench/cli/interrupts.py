"""Ctrl-C over a command that stores a run (sweep, capacity, depth), and SIGTERM and SIGHUP, which tokenbench
turns into it. The first stops the run: its task is cancelled at its next wait, and the runner closes the run as
interrupted with the levels it finished. Until the run is stored, shown and its JSON written, the next one is held
(said, not obeyed), so a second press a few milliseconds after the first loses nothing; the one after that quits
at once. One that comes after the run ended is held while it is shown, then obeyed (exit 130).

asyncio.run's own handler cancels the task from inside the signal handler and raises KeyboardInterrupt on the
second press wherever the program then is: a run stored but neither shown nor written, a traceback of the task
it left behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

#: The press that quits at once, whatever is left to do.
QUIT_AT = 3


class Interrupts:
    def __init__(self) -> None:
        self.pressed = 0
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, signum: int, frame: Any) -> None:
        self.pressed += 1
        if self.pressed >= QUIT_AT:
            raise KeyboardInterrupt
        task, loop = self._task, self._loop
        if self.pressed == 1 and task is not None and loop is not None and not task.done():
            # from the loop, not from here: a task cancelled while it runs (storing its run's end) ends cancelled
            # even where it would have returned the run; cancelled at its next wait, a finished one is left be
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the run has ended
                loop.call_soon_threadsafe(lambda: None if task.done() else task.cancel())
                return
        if self.pressed == 2:  # os.write: a signal handler may run inside another write to stderr
            os.write(2, b"tokenbench: stopping: keeping what was measured (Ctrl-C again quits without it)\n")

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """asyncio.run, its task cancelled by the first press; a run cancelled before it was stored is a
        KeyboardInterrupt, as asyncio.run makes it."""
        async def main() -> T:
            self._task, self._loop = asyncio.current_task(), asyncio.get_running_loop()
            return await coro

        try:
            return asyncio.run(main())  # over a handler not Python's default, asyncio installs none of its own
        except asyncio.CancelledError:
            if self.pressed:
                raise KeyboardInterrupt from None
            raise
        finally:
            self._task = self._loop = None


@contextmanager
def held() -> Iterator[Interrupts]:
    """Ctrl-C for a run and its showing, as the module says; off the main thread (where no signal arrives) the
    run is asyncio.run's."""
    interrupts = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield interrupts
        return
    before = signal.signal(signal.SIGINT, interrupts)
    try:
        yield interrupts
    finally:
        signal.signal(signal.SIGINT, before)
    if interrupts.pressed:  # pressed once the run had ended: obeyed now that it is shown and written
        raise KeyboardInterrupt
