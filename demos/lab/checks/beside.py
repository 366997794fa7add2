"""Checks computed beside the training, in processes forked from the run.

The support matrices are the run's largest checks (their `compile` row pays torch.compile's
first use, and compiles each Function twice). Where a core is left idle (`threads: auto` leaves
one), they go to a process forked from the run at its first matrix: it has torch, the config
and the user's code loaded already, so it starts at once, and the run goes on with its next
entry while it works. Once that process has done its first job (and so has torch.compile's
first use behind it), it forks a clone of itself: the jobs that come together at the end of a
run (its last entries' matrices, while the run waits) are shared by two warm processes.

A job is a generator function (picklable by name) and its arguments; what it yields comes back
item by item (`Stream`). A job that cannot be pickled (a lambda, a class defined in a function)
gets None from `submit`, and the caller computes it itself, as it does where no process can be
forked: not on Linux, under torchrun, with a CUDA GPU (a forked child cannot use one its parent
has touched, and the `cuda` row uses it), or with every core in use.

The processes ignore Ctrl-C and SIGTERM (the run decides when to stop; it waits for what it
submitted), run below the run's priority (`threads.BESIDE_NICE`), leave when the run closes
their pipes, and are killed when the run ends at once. One that dies (a Function that crashes
the process under one transform) ends its job's stream with `died` set; a job that none could
take ends with `again` set; the caller decides what to do with the rest (support.later: the
row it died in fails, the others go to new processes, forked at the next `submit`, at most
`MAX_DEATHS` times a run, then are computed in the run's own process).
"""
from __future__ import annotations

import collections
import contextlib
import gc
import os
import pickle
import signal
import sys
import threading
import warnings
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator

import torch

from demos.lab.core.signals import on_exit_now
from demos.lab.core.threads import available_cores, lower_priority

MAX_DEATHS = 3
GROUP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP")
                      if hasattr(signal, n))


class Stream:
    """What one job yielded, as it arrives."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.ended: str | None = None  # why it stopped before its end (None: it did not)
        self.died = False  # the process that ran it died while it did
        self.again = False  # worth submitting again: it died, or no process took it
        self.done = threading.Event()

    def ready(self) -> bool:
        return self.done.is_set()

    def end(self, why: str | None, died: bool = False, again: bool = False) -> None:
        self.ended, self.died, self.again = why, died, again or died
        self.done.set()

    def wait(self) -> Stream:
        while not self.done.wait(0.1):  # in steps, so that a signal's handler runs
            pass
        return self


class Helper:
    """One checks process as the run sees it: the pipe its jobs go down, the job it runs."""

    def __init__(self, pid: int | None, jobs: Connection) -> None:
        self.pid = pid  # None for the clone until its parent says it exists
        self.jobs = jobs
        self.running: tuple[int, Stream] | None = None
        self.exit: str | None = None  # once it has ended: how


def pipes() -> tuple[int, int, int, int]:
    """(jobs read, jobs write, answers read, answers write)."""
    return (*os.pipe(), *os.pipe())  # type: ignore[return-value]


def fork() -> int:
    """os.fork, with the child's garbage collector leaving what exists now alone (it would
    write to every object, and so copy every page of memory)."""
    for stream in (sys.stdout, sys.stderr):  # or the child would write them again
        with contextlib.suppress(Exception):
            stream.flush()
    gc.freeze()
    with warnings.catch_warnings():  # Python 3.12+: forking with threads (the run's wait on
        warnings.simplefilter("ignore", DeprecationWarning)  # pipes; the child uses none)
        pid = os.fork()
    if pid != 0:
        gc.unfreeze()
    return pid


def child(fds: tuple[int, int, int, int], close: list[int], clone_fds: tuple | None) -> None:
    """In a forked process: serve (jobs read, answers write), then leave without the
    parent's exit handlers."""
    code = 0
    try:
        for fd in close:
            os.close(fd)
        serve(Connection(fds[0], writable=False), Connection(fds[3], readable=False), clone_fds)
    except BaseException:  # noqa: BLE001 (nothing of the parent's may run here)
        code = 1
    finally:
        os._exit(code)


def serve(jobs: Connection, answers: Connection, clone_fds: tuple | None = None) -> None:
    """Run each job, sending what it yields; after the first, fork the clone (on `clone_fds`:
    its jobs read and answers write, and the run's ends, to close); leave when the pipe
    closes."""
    for sig in GROUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    torch.set_num_threads(1)  # the idle core; and OpenMP's pool is not the parent's
    lower_priority()
    while True:
        try:
            data = jobs.recv_bytes()
        except (EOFError, OSError):
            return
        job, ended = -1, None
        try:
            job, fn, args = pickle.loads(data)
            for item in fn(*args):
                answers.send_bytes(pickle.dumps(("item", job, item)))
        except Exception as e:  # noqa: BLE001 (the caller computes the rest itself)
            ended = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        for stream in (sys.stdout, sys.stderr):  # what the user's code printed
            with contextlib.suppress(Exception):
                stream.flush()
        if clone_fds is not None:  # warm now: the clone starts where this one is
            fds, clone_fds = clone_fds, None
            pid = fork()
            if pid == 0:  # the clone: this one's pipes are not its own
                child(fds, [jobs.fileno(), answers.fileno()], None)
            os.close(fds[0])
            os.close(fds[3])
            answers.send_bytes(pickle.dumps(("clone", job, pid)))
        answers.send_bytes(pickle.dumps(("end", job, ended)))


class Beside:
    """The run's checks processes, and the jobs waiting for one of them."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.helpers: list[Helper] = []
        self.queue: collections.deque[tuple[int, bytes, Stream]] = collections.deque()
        self.lock = threading.Lock()
        self.readers: list[threading.Thread] = []
        self.deaths, self.jobs = 0, 0

    def usable(self) -> bool:
        if self.enabled and not (sys.platform.startswith("linux") and hasattr(os, "fork")
                                 and available_cores() > torch.get_num_threads()
                                 # a forked child cannot use a GPU its parent has touched
                                 # (and the cuda row would): with a GPU, all stays here
                                 and not torch.cuda.is_available()):
            self.enabled = False
        return self.enabled and self.deaths < MAX_DEATHS

    def submit(self, fn: Callable[..., Iterator[Any]], *args: Any) -> Stream | None:
        if not self.usable():
            return None
        self.jobs += 1
        try:
            payload = pickle.dumps((self.jobs, fn, args))
        except (pickle.PicklingError, AttributeError, TypeError):  # a lambda, a local class
            return None
        with self.lock:
            alive = any(h.exit is None for h in self.helpers)
        if not alive and not self.start():
            return None
        stream = Stream()
        with self.lock:
            self.queue.append((self.jobs, payload, stream))
            self.dispatch()
        return stream

    def start(self) -> bool:
        """Fork the first process (from the run's main thread: nothing half-done is copied),
        with the pipes of its clone-to-be."""
        self.close()  # what is left of a dead pair
        try:
            first, clone = pipes(), pipes()
            pid = fork()
        except OSError:  # no processes left, say
            self.enabled = False
            return False
        if pid == 0:
            child(first, [first[1], first[2], clone[1], clone[2]], clone)
        for fd in (first[0], first[3], clone[0], clone[3]):
            os.close(fd)
        with self.lock:
            self.helpers = [Helper(pid, Connection(first[1], readable=False)),
                            Helper(None, Connection(clone[1], readable=False))]
        self.readers = [threading.Thread(target=self.read, args=(h, Connection(fd, writable=False)),
                                         name="demos-beside-reader", daemon=True)
                        for h, fd in zip(self.helpers, (first[2], clone[2]))]
        for r in self.readers:
            r.start()
        return True

    def dispatch(self) -> None:
        """Each idle process takes the next job (under the lock)."""
        for h in self.helpers:
            if self.queue and h.exit is None and h.pid is not None and h.running is None:
                job, payload, stream = self.queue.popleft()
                h.running = (job, stream)
                try:
                    h.jobs.send_bytes(payload)
                except OSError:  # it died meanwhile: its reader ends the stream
                    pass

    def read(self, h: Helper, answers: Connection) -> None:
        try:
            while True:
                kind, job, value = pickle.loads(answers.recv_bytes())
                with self.lock:
                    if kind == "item":
                        h.running[1].items.append(value)
                    elif kind == "clone":
                        self.helpers[1].pid = value
                    else:  # "end", with why it ended early (None: it did not)
                        h.running[1].end(value)
                        h.running = None
                    self.dispatch()
        except (EOFError, OSError):
            pass
        finally:
            answers.close()
            how = self.reap(h)
            with self.lock:
                h.exit = how
                if h.running is not None:
                    h.running[1].end(f"the checks process ended ({how})", died=True)
                    h.running = None
                if all(x.exit is not None for x in self.helpers):  # none left to take these
                    self.deaths += any(x.pid is not None for x in self.helpers)
                    while self.queue:
                        self.queue.popleft()[2].end("no checks process took it", again=True)
                else:
                    self.dispatch()

    @staticmethod
    def reap(h: Helper) -> str:
        """How it ended: a signal's name or an exit code, where the run is its parent."""
        if h.pid is None:
            return "never started"
        try:
            _, status = os.waitpid(h.pid, 0)
        except ChildProcessError:  # the clone is its first process's child, not the run's
            return "crashed or killed"
        if os.WIFSIGNALED(status):
            return signal.Signals(os.WTERMSIG(status)).name
        return f"exit code {os.WEXITSTATUS(status)}"

    def close(self, kill: bool = False) -> None:
        """Let them finish their jobs and leave (their pipes closed); `kill`: at once."""
        for h in self.helpers:
            if kill and h.exit is None and h.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(h.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                h.jobs.close()
        for r in self.readers:
            r.join(5 if kill else None)
        self.helpers, self.readers = [], []


_current: Beside | None = None


def submit(fn: Callable[..., Iterator[Any]], *args: Any) -> Stream | None:
    """`fn(*args)` (a generator function) in the run's checks processes; None where there
    are none (the caller computes it itself)."""
    return _current.submit(fn, *args) if _current is not None else None


@contextlib.contextmanager
def checks_process(enabled: bool) -> Iterator[None]:
    """For a run: jobs may go to processes forked at the first one, until the end, which
    waits for them."""
    global _current
    before, _current = _current, Beside(enabled)
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
    """A second Ctrl-C: the process ends now, and the checks processes with it."""
    if _current is not None:
        _current.close(kill=True)
