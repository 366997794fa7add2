"""Ctrl-C and SIGTERM: the first asks the run to stop at the next step boundary, the second
ends the process at once (exit 130)."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator

from demos.lab.results import EXIT_INTERRUPTED


class StopRequest:
    """Set by the signal handler; training loops look at it between steps."""

    def __init__(self) -> None:
        self.requested: str | None = None  # the signal's name once one arrived


def exit_now(code: int) -> None:
    """End the process at once, and the drawing helper with it."""
    from demos.lab import artifacts
    artifacts.kill()
    os._exit(code)


class SignalHandler:
    """First SIGINT/SIGTERM: stop at the next step boundary. Second: end at once (exit 130)."""

    def __init__(self, stop: StopRequest, hard_exit: Callable[[int], None] = exit_now):
        self.stop, self.hard_exit = stop, hard_exit

    def __call__(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stop.requested:
            sys.stderr.write(f"\n{name} again: stopping now\n")
            sys.stderr.flush()
            self.hard_exit(EXIT_INTERRUPTED)
            return
        self.stop.requested = name
        sys.stderr.write(f"\n{name}: stopping at the next step boundary and saving what was "
                         f"done (send it again to stop at once)\n")
        sys.stderr.flush()


@contextlib.contextmanager
def handle_signals(stop: StopRequest) -> Iterator[None]:
    """Route SIGINT and SIGTERM to a SignalHandler while the run lasts (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = SignalHandler(stop)
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
