"""Running a validated config: one folder per run, one sub-folder per scenario entry.

Each entry is seeded, run, and turned into files (metrics.csv, loss.png, its graph and
extras) and a summary entry. A scenario that fails or raises does not stop the others.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import logging
import math
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import torch

from demos.lab import checks as checks_mod
from demos.lab import plots, report
from demos.lab.checks import Check
from demos.lab.config import RunConfig, ScenarioConfig, dump, entry_dict
from demos.lab.context import Context, Diverged, Interrupted, Result, StopRequest
from demos.lab.files import write_atomic, write_csv, write_json
from demos.lab.schema import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def make_run_dir(output_dir: Path, now: dt.datetime) -> Path:
    """A new folder named after the start time; never an existing one (-1, -2, ... if taken)."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        base = now.strftime("%Y-%m-%d_%H-%M-%S")
        for i in range(10_000):
            path = output_dir / (base if i == 0 else f"{base}-{i}")
            try:
                path.mkdir()
                return path
            except FileExistsError:
                continue
    except OSError as e:
        raise ConfigError(f"--output-dir {output_dir}: cannot create the run folder: "
                          f"{e.strerror or e}") from None
    raise ConfigError(f"--output-dir {output_dir}: too many runs started at {base}")


class ConsoleFilter(logging.Filter):
    """The console shows the runner's own lines; scenarios' detail goes to run.log only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "demos.run" and record.levelno < logging.WARNING


class ConsoleHandler(logging.StreamHandler):
    """A console stream whose reader may go away (`| head`): the run goes on, quietly."""

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            return
        super().handleError(record)


def open_log(run_dir: Path) -> tuple[logging.Logger, list[logging.Handler]]:
    root = logging.getLogger("demos")
    root.setLevel(logging.DEBUG)
    root.propagate = False
    out = ConsoleHandler(sys.stdout)
    out.addFilter(ConsoleFilter())
    out.setLevel(logging.INFO)
    err = ConsoleHandler(sys.stderr)
    err.setLevel(logging.WARNING)
    err.setFormatter(logging.Formatter("warning: %(message)s"))
    log_file = logging.FileHandler(run_dir / "run.log", encoding="utf-8")
    log_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handlers = [out, err, log_file]
    for h in handlers:
        root.addHandler(h)
    return logging.getLogger("demos.run"), handlers


def finite(value: Any) -> Any:
    """JSON has no NaN or infinity: those become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


class SignalHandler:
    """First SIGINT/SIGTERM: stop at the next step boundary. Second: end at once (exit 130)."""

    def __init__(self, stop: StopRequest, hard_exit: Callable[[int], None] = os._exit):
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
def handle_signals(stop: StopRequest):
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


class Run:
    """One invocation of the runner over a validated config."""

    def __init__(self, cfg: RunConfig, device: torch.device, device_note: str, run_dir: Path,
                 *, source: str, command: list[str], progress: bool, dry_run: bool,
                 descriptions: dict[str, str] | None = None, open_report: bool = False):
        self.cfg, self.device, self.dir = cfg, device, run_dir
        self.descriptions, self.open_report = descriptions or {}, open_report
        self.source, self.command, self.progress, self.dry_run = source, command, progress, dry_run
        self.device_note = device_note
        self.warned: set[str] = set()
        self.entries: list[dict[str, Any]] = []
        self.status = "passed"
        self.stop = StopRequest()

    def warn_once(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            logging.getLogger("demos.run").warning(message)

    def execute(self) -> int:
        log, handlers = open_log(self.dir)
        started = time.time()
        before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
        if self.cfg.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.benchmark = False
        try:
            write_atomic(self.dir / "config.yaml",
                         f"# resolved config of run {self.dir.name} (from {self.source})\n"
                         + dump(self.cfg))
            log.info("run %s: torch %s, device %s, seed %d%s", self.dir.name, torch.__version__,
                     self.device_note, self.cfg.seed, ", dry run" if self.dry_run else "")
            with handle_signals(self.stop):
                for entry in self.cfg.scenarios:
                    summary = self.run_entry(entry, log)
                    self.entries.append(summary)
                    if summary["status"] not in ("passed", "interrupted"):
                        self.status = "failed"
                    if summary["status"] == "interrupted" or self.stop.requested:
                        self.status = "interrupted"
                        skipped = [e.id for e in self.cfg.scenarios[len(self.entries):]]
                        if skipped:
                            log.info("not run (interrupted): %s", ", ".join(skipped))
                        break
            summary = self.write_summary(started)
            report_path = self.write_report(summary, log)
            log.info("%s: %d of %d scenarios passed; results in %s", self.status.upper(),
                     sum(e["status"] == "passed" for e in self.entries), len(self.cfg.scenarios),
                     self.dir)
            if report_path is not None:
                log.info("report: %s", report_path)
                if self.open_report:
                    log.info("%s", open_in_browser(report_path))
        finally:
            torch.use_deterministic_algorithms(before[0])
            torch.backends.cudnn.benchmark = before[1]
            for h in handlers:
                logging.getLogger("demos").removeHandler(h)
                h.close()
        return {"passed": EXIT_OK, "failed": EXIT_FAILED,
                "interrupted": EXIT_INTERRUPTED}[self.status]

    def run_entry(self, entry: ScenarioConfig, log: logging.Logger) -> dict[str, Any]:
        folder = self.dir / entry.id
        folder.mkdir()
        slog = logging.getLogger(f"demos.scenario.{entry.id}")
        slog.info("start %s (%s): %s", entry.id, entry.scenario, entry_dict(entry))
        ctx = Context(entry, self.device, folder, slog, seed=self.cfg.seed,
                      progress=self.progress, warn_once=self.warn_once, stop=self.stop)
        torch.manual_seed(self.cfg.seed)
        result, error, status, diverged = None, None, "passed", None
        try:
            module = importlib.import_module(f"demos.scenarios.{entry.scenario}")
            result = module.run(entry, ctx)
        except Diverged as e:
            diverged, result = e, Result(metrics={"diverged_at_step": float(e.step)})
        except (Interrupted, KeyboardInterrupt) as e:
            status = "interrupted"
            error = f"interrupted by {self.stop.requested or 'SIGINT'}" + (
                f" before step {e.step}" if isinstance(e, Interrupted) else "")
        except Exception as e:
            status, error = "error", checks_mod.one_line(e)
            slog.error("%s raised:\n%s", entry.id, traceback.format_exc())
            if self.device.type == "cuda":
                torch.cuda.empty_cache()  # after an out-of-memory error, for the next scenario
        finite = []
        if diverged is not None:
            finite = [Check("loss stays finite", False, f"{diverged.name} is {diverged.value} at "
                                                        f"step {diverged.step}; training stopped "
                                                        f"there")]
        elif result is not None and ctx.checked_names:
            finite = [Check("loss stays finite", True, f"{', '.join(sorted(ctx.checked_names))} "
                                                       f"finite at all {ctx.steps_run} steps")]
        found = self.finish_entry(entry, ctx, result, slog, finite,
                                  skip="training diverged" if diverged is not None else None)
        if status == "passed" and any(c.passed is False for c in found):
            status = "failed"
        return self.entry_summary(entry, ctx, result, found, status, error, log)

    def finish_entry(self, entry: ScenarioConfig, ctx: Context, result: Result | None,
                     slog: logging.Logger, found: list[Check],
                     skip: str | None = None) -> list[Check]:
        """Write the generic files (metrics.csv, loss.png) and evaluate the checks."""
        if ctx.explanations:
            write_atomic(ctx.dir / "explain.txt", "\n".join(ctx.explanations))
        rows = ctx.history()
        if rows:
            write_csv(ctx.dir / "metrics.csv", rows)
            losses = [(r["step"], r["loss"]) for r in rows if "loss" in r]
            if losses:
                plots.loss_curve(ctx.dir / "loss.png", [s for s, _ in losses],
                                 [v for _, v in losses], title=f"{entry.id}: loss",
                                 log_every=entry.log_every)
        if result is None:
            return found
        found = found + list(result.checks)
        found += checks_mod.expect(entry.expect, result.params, result.metrics,
                                   skip=skip or ("--dry-run" if self.dry_run else None))
        for c in found:
            slog.info("check %s: %s: %s", {True: "PASS", False: "FAIL", None: "SKIP"}[c.passed],
                      c.name, c.detail)
        return found

    def entry_summary(self, entry: ScenarioConfig, ctx: Context, result: Result | None,
                      found: list[Check], status: str, error: str | None,
                      log: logging.Logger) -> dict[str, Any]:
        timing = None
        if ctx.train_s is not None:
            done = ctx.steps_run - ctx.steps_started
            timing = {"train_s": round(ctx.train_s, 6),
                      "steps_per_s": round(done / ctx.train_s, 3) if ctx.train_s else None}
        summary = {
            "id": entry.id, "scenario": entry.scenario, "status": status,
            "device": str(self.device), "steps": ctx.steps_run,
            "metrics": result.metrics if result else {},
            "params": result.params if result else {},
            "checks": [asdict(c) for c in found],
            "artifacts": sorted(p.name for p in ctx.dir.iterdir() if not p.name.startswith(".")),
            "timing": timing, "error": error,
        }
        if result and result.inspection:
            summary["inspection"] = result.inspection
        self.log_result(summary, log)
        return summary

    def log_result(self, s: dict[str, Any], log: logging.Logger) -> None:
        counted = [c for c in s["checks"] if c["passed"] is not None]
        passed = sum(c["passed"] for c in counted)
        steps = f"{s['steps']} steps in {s['timing']['train_s']:.2f} s" if s["timing"] else ""
        loss = s["metrics"].get("final_loss")
        width = max(len(e.id) for e in self.cfg.scenarios)
        log.info("%-11s %-*s  checks %d/%d  %s%s", s["status"].upper(), width, s["id"], passed,
                 len(counted), steps, f"  final_loss {loss:.6g}" if loss is not None else "")
        for c in counted:
            if not c["passed"]:
                log.info("            FAIL %s: %s", c["name"], c["detail"])
        if s["status"] == "error":
            log.info("            ERROR %s (traceback in run.log)", s["error"])

    def write_report(self, summary: dict[str, Any], log: logging.Logger) -> Path | None:
        """report.html in the run folder, and the runs' index.html beside the run folders."""
        import yaml

        configs = {e.id: yaml.safe_dump(entry_dict(e), sort_keys=False) for e in self.cfg.scenarios}
        try:
            path = report.write_report(self.dir, summary, self.descriptions, configs)
            report.write_index(self.dir.parent)
        except OSError as e:
            self.warn_once(f"could not write the report: {e}")
            return None
        return path

    def write_summary(self, started: float) -> dict[str, Any]:
        summary = finite({
            "run_id": self.dir.name, "status": self.status, "torch": torch.__version__,
            "device": str(self.device), "seed": self.cfg.seed, "dry_run": self.dry_run,
            "determinism": {
                "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                "cudnn_deterministic": torch.backends.cudnn.deterministic,
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "cpu_threads": torch.get_num_threads(),
                "seeded": "torch.manual_seed(seed) before each scenario; lenet's split and "
                          "shuffles use their own generator seeded the same"},
            "config": self.source, "command": self.command,
            "started": dt.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 3),
            "scenarios": self.entries,
        })
        write_json(self.dir / "summary.json", summary)
        return summary


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


def execute(cfg: RunConfig, device: torch.device, device_note: str, output_dir: Path, *,
            source: str, command: list[str], progress: bool, dry_run: bool,
            descriptions: dict[str, str] | None = None, open_report: bool = False) -> int:
    """Make the run folder and run every entry; return the exit code."""
    run_dir = make_run_dir(output_dir, dt.datetime.now())
    return Run(cfg, device, device_note, run_dir, source=source, command=command,
               progress=progress, dry_run=dry_run, descriptions=descriptions,
               open_report=open_report).execute()
