"""Signals and how the process ends. Ctrl-C and SIGTERM: the first asks the run to stop at the
next step boundary (before the run, it ends start-up), the second ends the process at once
(exit 130, `exit_now`): `SignalHandler`, which the run's start-up (demos.lab.runner.start)
installs once for the whole run. A command line's process ends with `leave`: its work finished,
without tearing the interpreter down."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator, Literal, NoReturn

from demos.lab.core.console import say, silence  # say: to stderr, escaped; quiet once it is gone
from demos.lab.core.results import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK


class StopRequest:
    """Set by the signal handler; training loops look at it between steps, and a long check
    between evaluations where it is given one (see demos.lab.checks.gradients.gradcheck)."""

    def __init__(self) -> None:
        self.requested: str | None = None  # the signal's name once one arrived
        self.phase: Literal["starting", "running", "finished"] = "starting"  # of the run
        self.deferred = False   # start-up: signals are only noted now (torch is importing)
        # called from Python (demos.run): Ctrl-C alone is the run's, and Ctrl-C again raises
        # KeyboardInterrupt in the caller rather than ending its process (a notebook's kernel)
        self.embedded = False

    @property
    def signals(self) -> tuple[int, ...]:
        """The signals this run answers: SIGINT alone when embedded, else STOP_SIGNALS."""
        return (signal.SIGINT,) if self.embedded else STOP_SIGNALS


class Stopped(KeyboardInterrupt):
    """The run's stop request, raised where the run is: by a long check that saw it, or by
    Ctrl-C again from a notebook; never a KeyboardInterrupt of the user's code."""


# what the process's end must see to (the drawing helper): (stop it now, let it finish)
_at_exit: list[tuple[Callable[[], None], Callable[[], None]]] = []


def on_exit(now: Callable[[], None], finish: Callable[[], None]) -> None:
    """Have `exit_now` call `now` first, and `leave` call `finish` (`now` after a run that did
    not end) before the process ends (once registered, kept; registering twice is once)."""
    if (now, finish) not in _at_exit:
        _at_exit.append((now, finish))


def exit_now(code: int) -> None:
    """End the process at once, and whatever registered with `on_exit` with it."""
    for now, _ in _at_exit:
        now()
    os._exit(code)


def leave(code: int) -> NoReturn:
    """End the command line's process with `code`, without tearing the interpreter down: by
    then torch has loaded its compiler stack, whose unloading takes most of a second and does
    nothing for a run whose files are closed. What registered with `on_exit` finishes (or, after
    a run that did not end, is stopped), logging and the streams are flushed, and the process
    ends. A signal meanwhile: the run is whole; it says so and exits 130."""
    late = StopRequest()
    late.deferred = True  # noted only: what is finishing finishes
    with signal_handler(SignalHandler(late)):
        for now, finish in _at_exit:
            (finish if code in (EXIT_OK, EXIT_FAILED) else now)()
        logging.shutdown()
    if late.requested and code != EXIT_INTERRUPTED:
        say("\ninterrupted after the run finished", err=True)
        code = EXIT_INTERRUPTED
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError) as e:  # the reader went away (| head), a full disk
            silence(stream, e)
        except AttributeError:  # no stream at all
            pass
    os._exit(code)


class SignalHandler:
    """First SIGINT/SIGTERM: while the run runs, stop at its next step boundary; before it
    (start-up) and after it, raise KeyboardInterrupt, except while `stop.deferred` (torch
    importing: a KeyboardInterrupt raised inside torch's or numpy's import can leave them
    half-imported, or be swallowed), where it is only noted and start-up stops at the next
    safe point (`stop_if_requested`). Second: end at once (exit 130)."""

    def __init__(self, stop: StopRequest, hard_exit: Callable[[int], None] = exit_now):
        self.stop, self.hard_exit = stop, hard_exit

    def __call__(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stop.requested:
            say(f"\n{name} again: stopping now", err=True)
            if self.stop.embedded:  # the caller's process goes on
                raise Stopped(name)
            self.hard_exit(EXIT_INTERRUPTED)
            return
        self.stop.requested = name
        if self.stop.phase == "running":
            say(f"\n{name}: stopping at the next step boundary and saving what was done (send "
                f"it again to stop at once)", err=True)
        elif not self.stop.deferred:
            raise KeyboardInterrupt(name)


# Ctrl-C, `kill`, and a closed terminal
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                     if hasattr(signal, name))


def stop_if_requested(stop: StopRequest) -> None:
    """At a safe point of start-up: a noted signal ends it here (KeyboardInterrupt)."""
    if stop.requested:
        raise KeyboardInterrupt(stop.requested)


@contextlib.contextmanager
def signal_handler(handler: Callable[[int, Any], None] | signal.Handlers,
                   signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """`handler` (or signal.SIG_IGN) for `signals`, the previous handlers restored afterwards;
    in the main thread only (elsewhere Python refuses to set one)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def held(signals: tuple[int, ...]) -> Iterator[None]:
    """`signals` ignored and blocked in this thread meanwhile, for starting a process that must
    not die of them before it can ignore them itself: it is born ignoring them (an ignored
    signal stays ignored across exec). Blocked too, so that one sent to this process meanwhile
    is not lost but arrives afterwards, once the previous handlers are back (Linux keeps a
    blocked signal pending even while it is ignored). Where signals cannot be blocked
    (Windows), ignored alone."""
    block = hasattr(signal, "pthread_sigmask")
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals) if block else None
    try:
        with signal_handler(signal.SIG_IGN, signals):
            yield
    finally:
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
