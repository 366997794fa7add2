"""A run: its folder, its log, torch's settings around the entries, then summary.json,
report.html and the runs' index (how it starts: demos.lab.runner.start).

Exit codes: 0 all passed, 1 a check failed or a scenario raised, 130 interrupted.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from demos.lab.comparing.baseline import Comparison, describe_drift
from demos.lab.core import machine
from demos.lab.core.config import RunConfig, dump
from demos.lab.core.console import entry_lines, open_log
from demos.lab.core.files import CONFIG, write_atomic
from demos.lab.core.results import (
    DIVERGED_AT,
    EXIT_CODES,
    EntrySummary,
    RunSummary,
    escalate,
)
from demos.lab.core.scenario import Registry
from demos.lab.core.signals import StopRequest
from demos.lab.core.text import no_surrogates
from demos.lab.pages.artifacts import Artifacts
from demos.lab.pages.report import files_of
from demos.lab.runner import outputs
from demos.lab.runner import torchrun as distributed
from demos.lab.runner.context import Shared
from demos.lab.runner.device import torch_settings
from demos.lab.runner.entry import log_checks, run_entry
from demos.lab.runner.options import RunRequest
from demos.lab.runner.torchrun import SINGLE, World
from demos.lab.state import global_state, restore_global_state


@dataclass
class RunOptions:
    """What a run found out as it started, beside its config and its request."""
    device_note: str = ""  # the device, and how it was chosen, for the log and the report
    progress: bool = False  # progress bars (a terminal)
    baseline: Comparison | None = None  # --baseline's, to compare the results with
    notes: Sequence[str] = ()  # warnings from before the run folder existed
    stop: StopRequest = field(default_factory=StopRequest)  # set by the signal handler
    world: World = SINGLE  # under torchrun: this process's rank (rank 0 runs a Run)


class Run:
    """One invocation of the runner over a validated config, in its folder (start.launch made
    it); its work is `execute`."""

    def __init__(self, cfg: RunConfig, registry: Registry, device: torch.device, run_dir: Path,
                 request: RunRequest, options: RunOptions):
        self.cfg, self.registry, self.device, self.options = cfg, registry, device, options
        self.request = request  # as asked for: --dry-run, --open, --save-baseline, ...
        # the folder as given, for the console; absolute for the work, so that user code that
        # changes the working directory (os.chdir) cannot send the rest of the run elsewhere
        self.shown, self.dir = run_dir, run_dir.absolute()
        # as text that strict JSON readers take: a path's bytes that are not UTF-8 become "?"
        self.source = no_surrogates(str(request.config))
        self.command = [no_surrogates(a) for a in request.command]
        self.sets = [no_surrogates(str(a)) for a in request.overrides]  # --set KEY=VALUE, ...
        # a warning said once, however often it comes (a missing `dot`, per graph)
        self.warn_once = functools.cache(lambda message: self.log.warning(message))
        self.entries: list[EntrySummary] = []
        self.status = "passed"
        self.artifacts = Artifacts(self.warn_once)
        self.stop, self.world, self.baseline = options.stop, options.world, options.baseline
        if self.world.active:  # what starts this run again: torchrun, not one process
            nodes = self.world.size // max(self.world.local_size, 1)
            self.command = ["torchrun", f"--nproc-per-node={self.world.local_size}",
                            *([f"--nnodes={nodes}"] if nodes > 1 else []), *self.command]
        self.fingerprint: dict[str, Any] | None = None  # once torch's threads are set
        self.world_lost: str | None = None  # under torchrun: the entry after which rank 0
        #                                     gave the process group up
        self.final: RunSummary | None = None  # summary.json's, once the run has finished

    def execute(self) -> int:
        """The run, from its first line to its last; its exit code."""
        self.log, close_log = open_log(self.dir)
        self.started = time.time()
        try:
            with torch_settings(self.cfg.threads, self.cfg.deterministic,
                                self.world.local_size) as determinism:
                self.determinism = determinism
                self.fingerprint = machine.take(self.device)
                why = self.write_summary(self.summary("running"), final=False)
                if why:  # its folder could hold no result: nothing is run
                    self.status = "failed"
                    self.final = self.summary()
                    self.log.error("could not write summary.json: %s; the run stops, as "
                                   "its folder cannot hold its results", why)
                    return EXIT_CODES[self.status]
                try:
                    write_atomic(self.dir / CONFIG, f"# resolved config of run {self.dir.name} "
                                                    f"(from {self.source})\n" + dump(self.cfg))
                except OSError as e:
                    self.log.error("could not write config.yaml: %s", e)
                self.log.info("run %s: torch %s, device %s, %d CPU thread(s), seed %d%s",
                              self.dir.name, torch.__version__, self.options.device_note,
                              determinism["cpu_threads"], self.cfg.seed,
                              ", dry run" if self.request.dry_run else "")
                if self.world.active:
                    parallel = [e.id for e in self.cfg.scenarios
                                if self.registry[e.scenario].data_parallel]
                    self.log.info("torchrun: rank 0 of %d (%s); data-parallel on every rank: "
                                  "%s; the rest on rank 0 only", self.world.size,
                                  self.world.backend, ", ".join(parallel) or "none")
                for note in self.options.notes:
                    self.log.warning("%s", note)
                if self.baseline:
                    for note in self.baseline.begin(self.fingerprint, self.cfg.seed):
                        self.log.warning("baseline: %s", note)
                try:
                    with escaped_warnings():
                        self.run_entries()
                finally:
                    outputs.prepare_pages()  # while the helper finishes its last drawings
                    self.artifacts.wait()
                    self.unwritten_files()
            for e in self.entries:
                e.artifacts = files_of(self.dir / e.id)  # what it wrote, as the report lists it
            self.finish()
        finally:
            close_log()
            self.stop.phase = "finished"  # a signal from now on: "after the run finished"
        return EXIT_CODES[self.status]

    def finish(self) -> None:
        """summary.json, report.html and the index; then the closing lines, once."""
        if self.baseline and self.status != "interrupted":
            block = self.baseline.block()
            for line in describe_drift(block):
                self.log.info("%s", line)
            if block["status"] == "failed":
                self.status = escalate(self.status, "failed")
        summary = self.final = self.summary()
        unsaved = self.request.save_baseline and not outputs.write_baseline(
            self.request.save_baseline, summary, self.cfg, self.log)
        if unsaved:
            self.status = summary.status = escalate(self.status, "failed")
        if self.write_summary(summary):  # a run whose results are not on disk: exit 1
            self.status = summary.status = escalate(self.status, "failed")
        report_path = self.write_report(summary)
        if self.stop.requested and self.status != "interrupted":  # a signal while finishing
            self.status = summary.status = escalate(self.status, "interrupted")
            self.write_summary(summary)
            report_path = self.write_report(summary)  # and the index, which said "passed"
        self.log.info("%s: %d of %d scenarios passed; results in %s%s", summary.status.upper(),
                      summary.passed, len(self.cfg.scenarios), self.shown,
                      "; the baseline could not be saved" if unsaved else "")
        if report_path is not None:
            self.log.info("report: %s", self.shown / report_path.relative_to(self.dir))
            if self.request.open:
                self.log.info("%s", open_in_browser(report_path))

    def run_entries(self) -> None:
        services = Shared(self.device, self.cfg.seed, self.options.progress, self.stop,
                          self.warn_once, self.artifacts, self.world, self.cfg.stepper_gifs,
                          self.dir, self.request.dry_run)
        width = max(len(e.id) for e in self.cfg.scenarios)
        for entry in self.cfg.scenarios:
            if self.stop.requested:  # it came while the run folder was being made
                self.not_run()
                return
            summary = self.run_one(entry, services)
            if self.baseline:
                self.compare_to_baseline(summary)
            self.entries.append(summary)
            self.write_summary(self.summary("running"), final=False)
            for line in entry_lines(summary, width):
                self.log.info("%s", line)
            if summary.status in ("failed", "error"):
                self.status = escalate(self.status, "failed")
            if summary.status == "interrupted" or self.stop.requested:
                self.not_run()
                return

    def compare_to_baseline(self, e: EntrySummary) -> None:
        """The entry's values against the baseline: its checks, and its status."""
        found = self.baseline.check(e)
        log_checks(logging.getLogger(f"demos.scenario.{e.id}"), found)
        e.checks += found
        if any(c.passed is False for c in found):
            e.status = escalate(e.status, "failed")

    def run_one(self, entry, services: Shared) -> EntrySummary:
        """One entry. Under torchrun, a data-parallel one starts on every rank together; once
        one has failed on this rank (raised, diverged, interrupted), the process group is
        given up and the data-parallel entries after it do not run."""
        parallel = self.world.active and self.registry[entry.scenario].data_parallel
        if parallel and self.world_lost:
            return EntrySummary(entry.id, entry.scenario, "error", str(self.device), 0, {}, {},
                                [], [], None, f"not run: the process group was given up "
                                              f"after {self.world_lost} failed")
        if parallel:
            distributed.start_entry(entry.id)
        before = global_state()
        summary = run_entry(entry, self.registry[entry.scenario], services)
        changed = restore_global_state(before)
        if changed:
            self.log.warning("%s changed %s; set back for the entries after it",
                             entry.id, "; ".join(changed))
        if parallel and (summary.status in ("error", "interrupted") or
                         DIVERGED_AT in summary.metrics):
            self.give_up(entry.id)
        return summary

    def give_up(self, after: str) -> None:
        """Under torchrun: no more data-parallel entries (see run_one)."""
        if self.world.active and not self.world_lost:
            self.world_lost = after
            later = [e.id for e in self.cfg.scenarios[len(self.entries):]
                     if self.registry[e.scenario].data_parallel]
            distributed.give_up(self.world, later)

    def not_run(self) -> None:
        """The run was interrupted: say which entries it did not reach."""
        self.status = escalate(self.status, "interrupted")
        self.give_up("the interruption")
        skipped = [e.id for e in self.cfg.scenarios[len(self.entries):]]
        if skipped:
            self.log.info("not run (interrupted): %s", ", ".join(skipped))

    def unwritten_files(self) -> None:
        """A plot or render the helper could not write (a full disk) makes its entry an error,
        as a file the entry wrote itself would; its line was printed before it was drawn."""
        for what, message in self.artifacts.failures:
            for e in self.entries:
                if e.id == what.split("/", 1)[0] and escalate(e.status, "error") != e.status:
                    e.status, e.error = escalate(e.status, "error"), e.error or message
                    self.log.error("%s is now an error: %s", e.id, message)
                    self.status = escalate(self.status, "failed")

    def write_summary(self, summary: RunSummary, final: bool = True) -> OSError | None:
        return outputs.write_summary(self.dir, summary, self.log, final,
                                     len(self.cfg.scenarios) - len(self.entries))

    def summary(self, status: str | None = None) -> RunSummary:
        return RunSummary(
            run_id=self.dir.name, status=status or self.status, torch=torch.__version__,
            device=str(self.device), seed=self.cfg.seed, dry_run=self.request.dry_run,
            determinism=self.determinism, config=self.source, command=self.command,
            started=dt.datetime.fromtimestamp(self.started).isoformat(timespec="seconds"),
            duration_s=round(time.time() - self.started, 3), scenarios=self.entries, sets=self.sets,
            world={"size": self.world.size, "backend": self.world.backend}
            if self.world.active else None,
            baseline=self.baseline.block() if self.baseline and status is None else None,
            fingerprint=self.fingerprint)

    def write_report(self, summary: RunSummary) -> Path | None:
        return outputs.write_pages(self.dir, summary, self.cfg, self.registry, self.log,
                                   self.warn_once)


@contextlib.contextmanager
def escaped_warnings() -> Iterator[None]:
    """What is warned while the entries run, Python's warnings and torch's log lines of warning
    level, one line each on the console and in run.log (demos/docs/guarantees.md, "The
    environment you bring"); torch's lower levels, TORCH_LOGS's, stay torch's."""
    from torch._logging._internal import _is_torch_handler

    said = logging.getLogger("demos.warnings")
    previous = warnings.showwarning

    def show(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        said.warning("%s", " ".join(f"{category.__name__}: {message} ({filename}:{lineno})"
                                    .split()))

    class Relay(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.log(record.levelno, "torch: %s", " ".join(record.getMessage().split()))

    def below(record: logging.LogRecord) -> bool:
        return record.levelno < logging.WARNING

    relay = Relay(logging.WARNING)
    loggers = [x for name, x in list(logging.root.manager.loggerDict.items())
               if name.split(".")[0] == "torch" and isinstance(x, logging.Logger)]
    torch_own = [(x, h) for x in loggers for h in x.handlers if _is_torch_handler(h)]
    for x, h in torch_own:
        h.addFilter(below)
        x.addHandler(relay)
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous
        for x, h in torch_own:
            h.removeFilter(below)
            x.removeHandler(relay)


def open_in_browser(path: Path) -> str:
    """Open `path` in the user's browser if there is a display; say what happened."""
    import webbrowser

    uri = path.resolve().as_uri()
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY")
                                                 or os.environ.get("WAYLAND_DISPLAY")):
        return f"--open: no display here; open {uri} in a browser"
    try:
        opened = webbrowser.open(uri)
    except webbrowser.Error:
        opened = False
    return f"opened {uri}" if opened else f"--open: found no browser; open {uri} yourself"
