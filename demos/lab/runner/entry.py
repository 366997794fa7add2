"""One scenario entry, from start to summary: seed, run within its time limit, and finish its
files and checks.

A scenario that fails, raises, runs past its time limit or is interrupted still gets its files
(what it recorded) and a summary; the next entry runs regardless.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import sys
import threading
import traceback
from typing import Iterator

import torch
from torch.autograd.function import BackwardCFunction

from demos.lab.checks.gradients import expect
from demos.lab.core.config import entry_dict
from demos.lab.core.console import mistakes
from demos.lab.core.files import BACKWARD, EXPLAIN, METRICS, write_atomic, write_csv, write_json
from demos.lab.core.results import DIVERGED_AT, Check, EntrySummary, Result, Timing, escalate
from demos.lab.core.scenario import Scenario, ScenarioConfig
from demos.lab.core.signals import Stopped
from demos.lab.core.text import one_line, where
from demos.lab.runner.context import Context, Diverged, Interrupted, Shared
from demos.lab.runner.looking import Look
from demos.lab.runner.recorder import Recorder


def run_entry(entry: ScenarioConfig, scenario: Scenario, s: Shared) -> EntrySummary:
    folder = (s.run_dir / entry.id).absolute()  # the drawing helper may have another cwd
    try:
        folder.mkdir()
    except OSError as e:  # a full disk, say: the entry is reported, not the run lost
        return EntrySummary(entry.id, entry.scenario, "error", str(s.device), 0, {}, {}, [], [],
                            None, f"could not create its folder: {e.strerror or e}")
    log = logging.getLogger(f"demos.scenario.{entry.id}")
    log.info("start %s (%s): %s", entry.id, entry.scenario, entry_dict(entry))
    recorder = Recorder(s.device, entry.log_every, soft_stop=not s.world.active)
    looks: list[Look] = []  # what each graph and pass drawn found
    ctx = Context(entry, folder, log, s, recorder, looks)
    torch.manual_seed(s.seed)
    result, error, status, diverged = None, None, "passed", None
    try:
        try:
            with time_limit(entry.time_limit):
                result = scenario.run(entry, ctx)
        except Exception as e:
            if recorder.diverged is None:
                raise
            if not isinstance(e, Diverged):  # what came after the loop needed a finite loss
                log.info("%s raised after its loss stopped being finite: %s", entry.id,
                         one_line(e))
        if recorder.diverged is not None:  # the loop stopped at a value that was not finite
            diverged = recorder.diverged  # its checks, support and inspection stay; not its values
            result = dataclasses.replace(result or Result({}), params={},
                                         metrics={DIVERGED_AT: float(diverged.step)})
    except Diverged as e:  # raised by the scenario itself, or under torchrun
        diverged, result = e, Result(metrics={DIVERGED_AT: float(e.step)})
    except TimeUp as e:  # said with where the user's code was, if it was there
        status, error = "error", f"did not finish in {entry.time_limit:g} s" + (
            f" (at {where(e)})" if where(e) else "")
        log.error("%s did not finish in %g s (time_limit); it was here:\n%s", entry.id,
                  entry.time_limit, traceback.format_exc(), extra={"console": False})
    except (Interrupted, KeyboardInterrupt) as e:
        status = "interrupted"
        error = f"interrupted by {s.stop.requested or 'SIGINT'}" + (
            f" before step {e.step}" if isinstance(e, Interrupted) else "")
        result = getattr(e, "result", None)  # what the scenario kept from before the stop
    except BaseException as e:  # a user's Function may call sys.exit(), or raise a
        #                          BaseException of its own (asyncio.CancelledError, ...)
        status, error = "error", one_line(e)  # from the user's code: its traceback logged
        if s.world.active and s.stop.requested:  # torchrun stopped every rank: a peer that
            status = "interrupted"              # left its collective first failed this one
            error = f"interrupted by {s.stop.requested} (the other ranks stopped: {error})"
        if not where(e):  # run.log only: the console says one line
            log.error("%s raised:\n%s", entry.id, traceback.format_exc(),
                      extra={"console": False})
        if s.device.type == "cuda":
            torch.cuda.empty_cache()  # after an out-of-memory error, for the next scenario
    try:
        write_files(ctx, looks, result)
    except OSError as e:  # what was computed is still reported below, with the failure
        log.error("could not write the files of %s: %s", entry.id, e, extra={"console": False})
        status = escalate(status, "error")
        error = error or f"could not write its files: {e.strerror or e}"
    found = finish_checks(entry, ctx, [c for seen in looks for c in seen.checks],
                          recorder.checked_names, result, diverged, s.dry_run,
                          status == "interrupted")
    log_checks(log, found)
    if any(c.passed is False for c in found):
        status = escalate(status, "failed")
    timing = None
    if ctx.train_s is not None:
        timing = Timing(round(ctx.train_s, 6),
                        round(ctx.steps_run / ctx.train_s, 3) if ctx.train_s else None)
    r = result or Result({})
    return EntrySummary(
        id=entry.id, scenario=entry.scenario, status=status, device=str(s.device),
        steps=ctx.steps_run, metrics=r.metrics, params=r.params, checks=found,
        artifacts=[],  # listed once the drawings are written (Run.execute)
        timing=timing, error=error, inspection=r.inspection, support=r.support)


class TimeUp(Stopped):
    """The entry ran past its time_limit: raised by `time_limit` where its code was. Not an
    Exception, so that a user's `except Exception` cannot swallow it; a stop of the run's
    (Stopped), so that the checks, which take anything else a Function raises for its
    failure, let it through."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """TimeUp raised in this thread once `seconds` have passed, and in the threads where the
    autograd engine runs a custom Function's backward for it (`serving`): a backward that
    recurses through autograd runs on threads the engine makes, a CUDA one on the device's,
    while this thread waits in torch's C++. Raised again each second until the block ends (a
    bare `except:` may swallow it). A watchdog thread, not SIGALRM, whose handler runs in the
    main thread alone, and only once that thread is back in Python: it never ran for a
    backward that recursed. Neither ends an op of torch's that never returns to Python."""
    caller, go, struck = threading.get_ident(), threading.Lock(), set()
    go.acquire()  # released when the block ends: the watchdog's cue to stop

    def watch() -> None:
        wait = seconds
        while not go.acquire(timeout=wait):
            for thread in (caller, *serving(caller)):
                raise_in(thread, TimeUp)
                struck.add(thread)
            wait = 1.0

    watchdog = threading.Thread(target=watch, name="demos time limit", daemon=True)
    watchdog.start()
    try:
        yield
    finally:  # the watchdog stopped, then what it raised that no thread has met yet withdrawn
        while True:
            try:
                try:
                    go.release()
                except RuntimeError:  # released already, the first time round
                    pass
                watchdog.join()
                for thread in struck:
                    raise_in(thread, None)
                break
            except TimeUp:  # met here, as the block ended: once more
                continue


def serving(caller: int) -> list[int]:
    """The threads, other than `caller`, that torch made (not Python) and that are running a
    custom Function's backward for the autograd engine."""
    python_made = {t.ident for t in threading.enumerate()
                   if not isinstance(t, threading._DummyThread)}
    found = []
    for thread, frame in sys._current_frames().items():
        if thread == caller or thread in python_made:
            continue
        f = frame
        while f is not None and f.f_code is not BackwardCFunction.apply.__code__:
            f = f.f_back
        if f is not None:
            found.append(thread)
    return found


def raise_in(thread: int, exception: type[BaseException] | None) -> None:
    """Have `thread` raise `exception` at its next Python instruction (None: withdraw one it
    has not raised yet)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread), None if exception is None else ctypes.py_object(exception))


def why_sections(checks: list[Check]) -> list[str]:
    """The failed gradient checks' diagnoses, for explain.txt, each once with the checks it
    explains: what is wrong, and the elements that differ most (NaN, inf as 'nan', 'inf')."""
    sections = []
    for cs, d in mistakes(checks).values():
        rows = [f"  {str(tuple(e.at)):<16}" + "".join(
            f" {v:>14.6g}" if isinstance(v, float) else f" {v:>14}"
            for v in (e.expected, e.got)) for e in d.elements]
        sections.append("\n".join([
            f"Why {' and '.join(repr(c.name) for c in cs)} failed ({d.kind}): "
            f"{d.output}, w.r.t. {d.input}", f"  {d.says}",
            *([f"  where they differ most, for one random {d.probe}:",
               f"  {'element':<16} {'expected':>14} {'got':>14}"] if rows else []), *rows, ""]))
    return sections


def log_checks(log: logging.Logger, found: list[Check]) -> None:
    """Each check, one line, into run.log; each diagnosis (`mistakes`) once."""
    for c in found:
        log.info("check %s: %s: %s", {True: "PASS", False: "FAIL", None: "SKIP"}[c.passed],
                 c.name, c.detail)
    for cs, d in mistakes(found).values():
        log.info("why %s: %s", " and ".join(c.name for c in cs), d.says)


def write_files(ctx: Context, looks: list[Look], result: Result | None) -> None:
    """The generic files: explain.txt (the walks, each failed gradient check's why, what the
    Functions save), backward.json, metrics.csv and loss.png, and the support rows'
    reproductions."""
    explanations = [seen.explanation for seen in looks] + (
        why_sections(result.checks) + saved_section(result) if result is not None else [])
    if explanations:
        write_atomic(ctx.dir / EXPLAIN, "\n".join(explanations))
    backward = [seen.backward for seen in looks if seen.backward is not None]
    if backward:
        write_json(ctx.dir / BACKWARD, {"graphs": backward})
    rows = ctx.history()
    if rows:
        write_csv(ctx.dir / METRICS, rows)
        ctx.draw_loss()  # where the loop's end did not draw it all
    for matrix in (result.support if result else {}).values():
        for made in (r.reproduction for r in matrix.values() if r.reproduction):
            write_atomic(ctx.dir / made.file, made.script)


def saved_section(result: Result) -> list[str]:
    """explain.txt's "What each Function saves for backward": its support matrix's memory
    notes."""
    notes = [f"  {name}: {rows['memory'].detail}" for name, rows in result.support.items()
             if "memory" in rows and rows["memory"].status == "ok"]
    return ["\n".join(["What each Function saves for backward (the support matrix's memory "
                       "row):", *notes, ""])] if notes else []


def finish_checks(entry: ScenarioConfig, ctx: Context, pass_checks: list[Check],
                  checked_names: set[str], result: Result | None,
                  diverged: Diverged | None, dry_run: bool,
                  interrupted: bool = False) -> list[Check]:
    """'loss stays finite', the scenario's own checks, and the config's expectations."""
    found = []
    if diverged is not None:
        found.append(Check("loss stays finite", False, f"{diverged.name} is {diverged.value} at "
                                                       f"step {diverged.step}; training stopped "
                                                       f"there"))
    elif result is not None and checked_names:
        checked = ", ".join(sorted(checked_names))
        found.append(Check("loss stays finite", True,
                           f"{checked} finite at all {ctx.steps_run} steps"))
    if result is None:  # the passes' checks (forward mode, second backward) still count
        return found + pass_checks
    skip = ("training diverged" if diverged else "an interrupted run" if interrupted
            else "--dry-run" if dry_run else entry.expect.unlike(entry, ctx.seed))
    return found + list(result.checks) + pass_checks + expect(
        entry.expect, result.params, result.metrics, skip=skip)
