"""Plots and graph renders are drawn in a helper process while the run goes on.

Training and checks keep the main process; matplotlib and graphviz's `dot` work beside them
on another core. Where a training loop uses every core, what is submitted waits until the loop
is done (`hold`, `release`), so that drawing never slows the loop. `Artifacts.wait()` collects
what was submitted: a warning (no `dot`) stays a warning; a file that could not be written (a
full disk) is kept in `failures`, and the run makes its entry an error. Where no helper process
can be started, the work is done at once, in this process.
"""
from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import functools
import multiprocessing
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator

_pool: cf.ProcessPoolExecutor | None = None
_pool_failed = False
_deaths = 0


# what reaches a whole process group: Ctrl-C, `kill -- -PGID` or `timeout`, a closed terminal
GROUP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                      if hasattr(signal, n))


def _init_worker() -> None:
    """In the helper: Ctrl-C, SIGTERM and SIGHUP reach the whole process group, but the main
    process decides when to stop, so the helper ignores them and finishes what it was given.
    It leaves as soon as the main process is gone, however that went (a second Ctrl-C, a
    kill)."""
    for sig in GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # born ignoring and blocking them (see pool)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, GROUP_SIGNALS)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()
    os._exit(0)


def warm_up() -> None:
    """Import the drawing libraries (in the helper, while the main process imports torch)."""
    from demos.lab.pages.plots import agg

    agg()
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import PIL.Image  # noqa: F401


def pool() -> cf.ProcessPoolExecutor | None:
    """The helper process, started once per process and reused by every run."""
    global _pool, _pool_failed
    if _pool is None and not _pool_failed:
        # not in the helper's imports
        from demos.lab.core.signals import held, on_exit

        try:
            start_resource_tracker()
            _pool = cf.ProcessPoolExecutor(1, initializer=_init_worker,
                                           mp_context=multiprocessing.get_context("spawn"))
            # the helper starts at the first submit, while the main process holds the group's
            # signals back (held): it is born ignoring them, so a Ctrl-C to the group before
            # _init_worker runs (a notebook's interrupt soon after a run starts) cannot kill it
            # mid-start, and one meant for this process is not lost meanwhile
            with main_module_hidden(), held(GROUP_SIGNALS):
                _pool.submit(warm_up)
            # a second Ctrl-C ends the helper with the process; at the command line's end the
            # helper finishes first
            on_exit(kill, shutdown)
            # after the pool: exit handlers run last-registered first, and multiprocessing's
            # own (which joins the helper) must find it shut down
            atexit.unregister(shutdown)
            atexit.register(shutdown)
        except (OSError, ImportError, NotImplementedError):  # e.g. no semaphores here
            _pool_failed = True
    return _pool


@contextlib.contextmanager
def main_module_hidden() -> Iterator[None]:
    """While the helper process starts: no main module for spawn to run again in it. The
    helper needs none (its work is demos' own functions), and a script that calls demos.run
    without an `if __name__ == "__main__":` guard would otherwise run its top level in the
    helper too, and start helpers of its own from there."""
    main = vars(sys.modules["__main__"]) if "__main__" in sys.modules else {}
    saved: dict[str, Any] = {n: main[n] for n in ("__file__", "__spec__") if n in main}
    main.pop("__file__", None)
    main["__spec__"] = None
    try:
        yield
    finally:
        main.pop("__spec__", None)
        main.update(saved)


def start_resource_tracker() -> None:
    """multiprocessing's resource tracker (the process that tracks the helper's semaphores),
    started by us so that it ignores SIGHUP (it ignores only SIGINT and SIGTERM itself; it is
    born ignoring SIGHUP, see held) and its "leaked semaphore" warning after a hard exit (a
    second Ctrl-C) stays quiet."""
    from multiprocessing import resource_tracker
    from unittest import mock

    from demos.lab.core.signals import held

    hup = tuple(sig for sig in GROUP_SIGNALS if sig.name == "SIGHUP")  # where there is one
    # PYTHONWARNINGS, for the tracker's interpreter alone
    with mock.patch.dict(os.environ, PYTHONWARNINGS="ignore"), held(hup):
        resource_tracker.ensure_running()


def shutdown() -> None:
    """Wait for the helper to finish its work and exit (also done at interpreter exit)."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=True)
        _pool = None


def kill() -> None:
    """End the helper now, its work undone (a second Ctrl-C; a run that never started)."""
    global _pool
    if _pool is not None:
        for process in multiprocessing.active_children():  # the helper: this process's one
            process.kill()  # SIGKILL: it ignores SIGTERM (see _init_worker)
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


class Artifacts:
    """Work submitted for one run; `wait()` returns when it is all written."""

    def __init__(self, warn: Callable[[str], None]):
        self.warn = warn
        self.pending: list[tuple[str, cf.Future, Callable[[], Any]]] = []
        self.failures: list[tuple[str, str]] = []  # (what, why): files that were not written
        self.held: list[tuple[str, Callable[[], Any]]] | None = None  # see hold

    def hold(self) -> None:
        """Keep what is submitted from now on until `release` (or `wait`): a training loop is
        about to use every core, and drawing beside it would slow it down."""
        if self.held is None:
            self.held = []

    def release(self) -> None:
        """Hand the held work to the helper: the loop is done."""
        held, self.held = self.held or [], None
        for what, work in held:
            self.submit(what, work)

    def submit(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run fn(*args, **kwargs) (a module-level function; its arguments plain data)."""
        work = functools.partial(fn, *args, **kwargs)
        if self.held is not None:
            self.held.append((what, work))
            return
        executor = pool()
        if executor is not None:
            try:
                self.pending.append((what, executor.submit(work), work))
                return
            except RuntimeError:  # BrokenProcessPool, or shut down
                helper_died()
        self.done(what, work)

    def wait(self) -> None:
        self.release()
        pending, self.pending = self.pending, []
        for what, future, work in pending:
            if isinstance(future.exception(), cf.process.BrokenProcessPool):
                helper_died()  # (e.g. killed, or a main module without a __main__ guard)
                self.done(what, work)  # drawn here instead
            else:
                self.done(what, future.result)

    def done(self, what: str, result: Callable[[], Any]) -> None:
        try:
            message = result()
        except Exception as e:  # a full disk, say: the run goes on, the entry is an error
            message = f"could not write {what}: {type(e).__name__}: {e}"
            self.failures.append((what, message))
        if message:
            self.warn(message)


def helper_died() -> None:
    """The helper process died: start a new one next time; after a second death, draw here."""
    global _pool, _pool_failed, _deaths
    if _pool is not None:
        _pool.shutdown(wait=False)
        _deaths += 1
    _pool, _pool_failed = None, _deaths >= 2
