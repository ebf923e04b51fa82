"""Ctrl-C (SIGINT) and SIGTERM for the ``bgtasks`` command's loops: a stop
flag to look at between steps, never a ``KeyboardInterrupt`` raised wherever
the program happens to be.

Python runs a signal handler in the main thread, between two bytecodes of
whatever that thread was doing. A handler that takes a lock therefore
deadlocks when the main thread was holding that lock, and ``Event.set()``
takes the event's own lock, which the main thread holds each time it waits on
or clears the event: a worker polling every 50 ms does so many times a
second, and a worker stuck that way ignores every later signal. So the
handler here only writes the signal's number to a pipe, which takes no lock,
and a thread of its own reads the pipe and sets the flag.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

# The signals that stop a loop: Ctrl-C, and what process managers send.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals(
    stop: threading.Event,
    count: list[int] | None = None,
    *,
    first: Callable[[int], None] | None = None,
    again: Callable[[int], None] | None = None,
) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM set ``stop`` (and bump
    ``count[0]``) instead of raising; with ``first``, ``first(signum)`` is
    called before. With ``again``, the second signal and any later one call
    ``again(signum)`` instead. Both are called on a thread
    of this block's, never in the signal handler, so they may take locks.
    Signals can only be caught in the main thread; elsewhere the block runs
    unchanged. Every signal received before the block ends is acted on before
    it returns."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_end, write_end = os.pipe()
    relay = threading.Thread(
        target=_relay,
        args=(read_end, stop, count, first, again),
        name="bgtasks-signals",
        daemon=True,
    )
    relay.start()

    def handler(signum: int, frame: object) -> None:
        os.write(write_end, bytes([signum]))

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        os.close(write_end)  # the relay reads what is left, then the end of the pipe
        relay.join()


def _relay(
    read_end: int,
    stop: threading.Event,
    count: list[int] | None,
    first: Callable[[int], None] | None,
    again: Callable[[int], None] | None,
) -> None:
    """Act on each signal number the handler wrote, until the pipe is closed."""
    received = 0
    try:
        while signums := os.read(read_end, 64):
            for signum in signums:
                received += 1
                if count is not None:
                    count[0] += 1
                if again is not None and received > 1:
                    again(signum)
                    continue
                if first is not None and received == 1:
                    first(signum)
                stop.set()
    finally:
        os.close(read_end)
