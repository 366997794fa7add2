"""Running a validated config: one folder per run, one sub-folder per scenario entry.

Each entry is seeded, run, and turned into files (metrics.csv, loss.png, its graph and
extras) and a summary entry. A scenario that fails or raises does not stop the others.
"""
from __future__ import annotations

import datetime as dt
import importlib
import logging
import math
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from demos.lab import checks as checks_mod
from demos.lab import plots
from demos.lab.checks import Check
from demos.lab.config import RunConfig, ScenarioConfig, dump, entry_dict
from demos.lab.context import Context, Result
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


def open_log(run_dir: Path) -> tuple[logging.Logger, list[logging.Handler]]:
    root = logging.getLogger("demos")
    root.setLevel(logging.DEBUG)
    root.propagate = False
    out = logging.StreamHandler(sys.stdout)
    out.addFilter(ConsoleFilter())
    out.setLevel(logging.INFO)
    err = logging.StreamHandler(sys.stderr)
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


class Run:
    """One invocation of the runner over a validated config."""

    def __init__(self, cfg: RunConfig, device: torch.device, device_note: str, run_dir: Path,
                 *, source: str, command: list[str], progress: bool, dry_run: bool):
        self.cfg, self.device, self.dir = cfg, device, run_dir
        self.source, self.command, self.progress, self.dry_run = source, command, progress, dry_run
        self.device_note = device_note
        self.warned: set[str] = set()
        self.entries: list[dict[str, Any]] = []
        self.status = "passed"

    def warn_once(self, message: str) -> None:
        if message not in self.warned:
            self.warned.add(message)
            logging.getLogger("demos.run").warning(message)

    def execute(self) -> int:
        log, handlers = open_log(self.dir)
        started = time.time()
        try:
            write_atomic(self.dir / "config.yaml",
                         f"# resolved config of run {self.dir.name} (from {self.source})\n"
                         + dump(self.cfg))
            log.info("run %s: torch %s, device %s, seed %d%s", self.dir.name, torch.__version__,
                     self.device_note, self.cfg.seed, ", dry run" if self.dry_run else "")
            for entry in self.cfg.scenarios:
                summary = self.run_entry(entry, log)
                self.entries.append(summary)
                if summary["status"] == "interrupted":
                    self.status = "interrupted"
                    break
                if summary["status"] != "passed":
                    self.status = "failed"
            self.write_summary(started)
            log.info("%s: %d of %d scenarios passed; results in %s", self.status.upper(),
                     sum(e["status"] == "passed" for e in self.entries), len(self.cfg.scenarios),
                     self.dir)
        finally:
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
                      progress=self.progress, warn_once=self.warn_once)
        torch.manual_seed(self.cfg.seed)
        result, error, status = None, None, "passed"
        try:
            module = importlib.import_module(f"demos.scenarios.{entry.scenario}")
            result = module.run(entry, ctx)
        except KeyboardInterrupt:
            status, error = "interrupted", "interrupted by the user"
        except Exception as e:
            status, error = "error", checks_mod.one_line(e)
            slog.error("%s raised:\n%s", entry.id, traceback.format_exc())
        found = self.finish_entry(entry, ctx, result, slog)
        if status == "passed" and any(c.passed is False for c in found):
            status = "failed"
        return self.entry_summary(entry, ctx, result, found, status, error, log)

    def finish_entry(self, entry: ScenarioConfig, ctx: Context, result: Result | None,
                     slog: logging.Logger) -> list[Check]:
        """Write the generic files (metrics.csv, loss.png) and evaluate the checks."""
        if ctx.explanations:
            write_atomic(ctx.dir / "explain.txt", "\n".join(ctx.explanations))
        rows = ctx.history()
        if rows:
            write_csv(ctx.dir / "metrics.csv", rows)
            losses = [(r["step"], r["loss"]) for r in rows if "loss" in r]
            if losses:
                plots.loss_curve(ctx.dir / "loss.png", [s for s, _ in losses],
                                 [v for _, v in losses], title=f"{entry.id}: loss")
        if result is None:
            return []
        found = list(result.checks)
        found += checks_mod.expect(entry.expect, result.params, result.metrics,
                                   evaluate=not self.dry_run)
        for c in found:
            slog.info("check %s: %s: %s", {True: "PASS", False: "FAIL", None: "SKIP"}[c.passed],
                      c.name, c.detail)
        return found

    def entry_summary(self, entry: ScenarioConfig, ctx: Context, result: Result | None,
                      found: list[Check], status: str, error: str | None,
                      log: logging.Logger) -> dict[str, Any]:
        timing = None
        if ctx.train_s is not None:
            timing = {"train_s": round(ctx.train_s, 6),
                      "steps_per_s": round(ctx.steps_run / ctx.train_s, 3) if ctx.train_s else None}
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

    def write_summary(self, started: float) -> None:
        write_json(self.dir / "summary.json", finite({
            "run_id": self.dir.name, "status": self.status, "torch": torch.__version__,
            "device": str(self.device), "seed": self.cfg.seed, "dry_run": self.dry_run,
            "config": self.source, "command": self.command,
            "started": dt.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 3),
            "scenarios": self.entries,
        }))


def execute(cfg: RunConfig, device: torch.device, device_note: str, output_dir: Path, *,
            source: str, command: list[str], progress: bool, dry_run: bool) -> int:
    """Make the run folder and run every entry; return the exit code."""
    run_dir = make_run_dir(output_dir, dt.datetime.now())
    return Run(cfg, device, device_note, run_dir, source=source, command=command,
               progress=progress, dry_run=dry_run).execute()
