"""Checks computed beside the training, in a process forked from the run.

The support matrices are the run's largest checks (their `compile` row pays torch.compile's
first use, and compiles each Function twice). Where a core is left idle (`threads: auto` leaves
one), they go to a process forked from the run's main thread at its first matrix: it has torch,
the config and the user's code loaded already, so it starts at once, and the run goes on with
its next entry while it works.

A job is a generator function and its arguments, pickled by name; what it yields comes back item
by item (`Stream`). What cannot be pickled by name without importing anything (a lambda, a class
defined in a function, a module the run no longer holds) gets None from `submit`, and the caller
computes it itself, as it does where no process can be forked: not on Linux, under torchrun,
with a CUDA GPU (a forked child cannot use one its parent has touched, and the `cuda` row uses
it), with every core in use, or from a thread other than the main one.

The process ignores Ctrl-C and SIGTERM (the run decides when to stop; it waits for what it
submitted), runs at one thread (OpenMP's threads do not survive a fork) and below the run's
priority (`NICE`), leaves when the run closes its pipe, and is killed when the
run ends at once, or dies (Linux's parent-death signal). If it dies while running a job (a
Function that crashes the process under one transform), the job's stream ends with `died` set;
a job it had not started ends with `again` set. The caller decides what to do with the rest
(support.later: the row it died in fails, the others go to a new process, forked at the next
`submit`, at most `MAX_DEATHS` times a run; after that they are not run).
"""
from __future__ import annotations

import collections
import contextlib
import gc
import io
import os
import pickle
import signal
import sys
import threading
import types
import warnings
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator

import torch

from demos.lab.core.signals import on_exit_now
from demos.lab.core.threads import available_cores

MAX_DEATHS = 3
# its priority below the run's: where the two compete for a core, the run's own work goes first,
# and the checks are only needed at the run's end (measured: demos/docs/performance.md)
NICE = 10
GROUP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                      if hasattr(signal, n))


class Stream:
    """What one job yielded, as it arrives."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.started = False  # the process has taken it (unpickled, running)
        self.ended: str | None = None  # why it stopped before its end (None: it did not)
        self.died = False  # the process died while running it
        self.again = False  # worth submitting again: it died, or it never started
        self.done = threading.Event()

    def ready(self) -> bool:
        return self.done.is_set()

    def end(self, why: str | None) -> None:
        """The end of the job; with `why`, an early one (died if it had started)."""
        self.ended = why
        if why is not None and why.startswith(ENDED):
            self.died, self.again = self.started, True
        self.done.set()

    def wait(self) -> Stream:
        while not self.done.wait(0.1):  # in steps, so that a signal's handler runs
            pass
        return self


ENDED = "the checks process ended"


class ByName(pickle.Pickler):
    """Classes and functions by name, as pickle does, but only where the name already leads
    to them: pickle would import a module that is not loaded (a user's file, run again)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)):
            found: Any = sys.modules.get(getattr(obj, "__module__", "") or "")
            for part in getattr(obj, "__qualname__", "").split("."):
                found = getattr(found, part, None)
            if found is not obj:
                raise pickle.PicklingError(f"{obj!r} cannot be found by its name")
        return NotImplemented


def pickled(obj: Any) -> bytes:
    buffer = io.BytesIO()
    ByName(buffer).dump(obj)
    return buffer.getvalue()


def serve(jobs: Connection, answers: Connection, parent: int) -> None:
    """In the child: run each job, sending what it yields; leave when the pipe closes, and
    end with the run (even in a job that never ends)."""
    for sig in GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(Exception):  # Linux's prctl(PR_SET_PDEATHSIG, SIGKILL)
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != parent:  # the run ended before that took effect
        return
    torch.set_num_threads(1)  # the idle core; and OpenMP's pool is not the parent's
    with contextlib.suppress(OSError):
        os.nice(NICE)
    while True:
        try:
            data = jobs.recv_bytes()
        except (EOFError, OSError):
            return
        ended = None
        try:
            fn, args = pickle.loads(data)
            answers.send_bytes(pickle.dumps(("start", None)))
            for item in fn(*args):
                answers.send_bytes(pickle.dumps(("item", item)))
        except Exception as e:  # noqa: BLE001 (the caller computes the rest itself)
            ended = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        for stream in (sys.stdout, sys.stderr):  # what the user's code printed
            with contextlib.suppress(Exception):
                stream.flush()
        answers.send_bytes(pickle.dumps(("end", ended)))


class Beside:
    """The run's checks process, and the jobs waiting for it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.pid: int | None = None
        self.jobs: Connection | None = None
        self.running: Stream | None = None
        self.queue: collections.deque[tuple[bytes, Stream]] = collections.deque()
        self.lock = threading.Lock()
        self.reader: threading.Thread | None = None
        self.deaths = 0

    def usable(self) -> bool:
        if self.enabled and not (sys.platform.startswith("linux") and hasattr(os, "fork")
                                 and available_cores() > torch.get_num_threads()
                                 # a forked child cannot use a GPU its parent has touched
                                 # (and the cuda row would): with a GPU, all stays here
                                 and not torch.cuda.is_available()):
            self.enabled = False
        return (self.enabled and self.deaths < MAX_DEATHS
                # fork from the main thread only: another may be in the middle of anything
                and threading.current_thread() is threading.main_thread())

    def submit(self, fn: Callable[..., Iterator[Any]], *args: Any) -> Stream | None:
        if not self.usable():
            return None
        try:
            payload = pickled((fn, args))
        except (pickle.PicklingError, AttributeError, TypeError):  # a lambda, a local class
            return None
        with self.lock:
            alive = self.reader is not None
        if not alive and not self.start():
            return None
        stream = Stream()
        with self.lock:
            if self.reader is None:  # it died meanwhile; its reader has ended
                stream.end(f"{ENDED} before it took this")
            else:
                self.queue.append((payload, stream))
                self.dispatch()
        return stream

    def start(self) -> bool:
        """Fork the process, with the garbage collector leaving what exists now alone in it
        (its collections would write to every object, and so copy every page)."""
        self.close()  # what is left of one that died
        for stream in (sys.stdout, sys.stderr):  # or the child would write them again
            with contextlib.suppress(Exception):
                stream.flush()
        jobs_r, jobs_w = os.pipe()
        answers_r, answers_w = os.pipe()
        gc.freeze()
        parent = os.getpid()
        try:
            with warnings.catch_warnings():  # Python 3.12+: forking with threads (the run's
                warnings.simplefilter("ignore", DeprecationWarning)  # wait; the child's none)
                pid = os.fork()
        except OSError:  # no processes left, say
            for fd in (jobs_r, jobs_w, answers_r, answers_w):
                os.close(fd)
            self.enabled = False
            return False
        finally:
            gc.unfreeze()
        if pid == 0:  # the child: serve, then leave without the parent's exit handlers
            code = 0
            try:
                os.close(jobs_w)
                os.close(answers_r)
                serve(Connection(jobs_r, writable=False), Connection(answers_w, readable=False),
                      parent)
            except BaseException:  # noqa: BLE001 (nothing of the parent's may run here)
                code = 1
            finally:
                os._exit(code)
        os.close(jobs_r)
        os.close(answers_w)
        self.pid, self.jobs = pid, Connection(jobs_w, readable=False)
        self.reader = threading.Thread(target=self.read, args=(
            Connection(answers_r, writable=False), pid), name="demos-beside-reader", daemon=True)
        self.reader.start()
        return True

    def dispatch(self) -> None:
        """The process, when idle, takes the next job (under the lock)."""
        if self.queue and self.running is None and self.jobs is not None:
            payload, self.running = self.queue.popleft()
            try:
                self.jobs.send_bytes(payload)
            except OSError:  # it died meanwhile: the reader ends the stream
                pass

    def read(self, answers: Connection, pid: int) -> None:
        try:
            while True:
                kind, value = pickle.loads(answers.recv_bytes())
                with self.lock:
                    stream = self.running
                    if stream is None:
                        continue
                    if kind == "start":
                        stream.started = True
                    elif kind == "item":
                        stream.items.append(value)
                    else:  # "end", with why it ended early (None: it did not)
                        stream.end(value)
                        self.running = None
                        self.dispatch()
        except Exception:  # noqa: BLE001 (EOF: it ended; anything else: the same to the run)
            pass
        finally:
            answers.close()
            how = f"{ENDED} ({reap(pid)})"
            with self.lock:
                self.deaths += 1  # counted by `usable`; a run's end counts one, unused then
                for stream in [self.running, *(s for _, s in self.queue)]:
                    if stream is not None:
                        stream.end(how)
                self.running, self.reader = None, None
                self.queue.clear()

    def close(self, kill: bool = False) -> None:
        """Let it finish its jobs and leave (its pipe closed); `kill`: at once."""
        reader = self.reader
        if kill and reader is not None and self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        if self.jobs is not None:
            with contextlib.suppress(OSError):
                self.jobs.close()
        if reader is not None:
            reader.join(5 if kill else None)
        self.pid, self.jobs = None, None


def reap(pid: int) -> str:
    """How the process `pid`, a child of this one, ended: a signal's name or an exit code."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "gone"
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return signal.Signals(number).name
        except ValueError:  # a real-time signal
            return f"signal {number}"
    return f"exit code {os.WEXITSTATUS(status)}"


_current: Beside | None = None
_first = True  # no run yet in this process


def submit(fn: Callable[..., Iterator[Any]], *args: Any) -> Stream | None:
    """`fn(*args)` (a generator function) in the run's checks process; None where there is
    none (the caller computes it itself, unless `gave_up()`)."""
    return _current.submit(fn, *args) if _current is not None else None


def gave_up() -> bool:
    """Whether the run's checks process died MAX_DEATHS times: what crashed it would crash
    the run's own process too."""
    return _current is not None and _current.deaths >= MAX_DEATHS


@contextlib.contextmanager
def checks_process(enabled: bool) -> Iterator[None]:
    """For a run: jobs may go to a process forked at the first one, until the end, which
    waits for them. Only for the first run of a process: one that runs again (tests calling
    the command line's main, say) has torch.compile's first use behind it after its next run
    here, which a process forked per run would pay each time."""
    global _current, _first
    before, _current = _current, Beside(enabled and _first)
    _first = False
    mine = _current
    on_exit_now(_kill_current)
    try:
        yield
    except BaseException:
        mine.close(kill=True)
        raise
    finally:
        mine.close()
        _current = before


def _kill_current() -> None:
    """A second Ctrl-C: the process ends now, and the checks process with it."""
    if _current is not None:
        _current.close(kill=True)
