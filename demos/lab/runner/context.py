"""What a scenario gets (`Context`) and gives back (`Result`).

A scenario writes its training loop as `for t in ctx.steps(n):` and records values with
`ctx.record(t, loss=loss)`. Recorded tensors stay on their device: nothing here forces a
host/device sync during the loop; they are copied to the host once, by `history()`.
"""
from __future__ import annotations

import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from demos.lab.instruments import render as graphs

from demos.lab.pages import plots

from demos.lab.instruments import trace

from demos.lab.instruments import walk
from demos.lab.pages.drawing import Artifacts
from demos.lab.core.results import Check, Result  # noqa: F401 (scenarios may import Result here)
from demos.lab.core.scenario import ScenarioConfig
from demos.lab.runner.device import check_device
from demos.lab.runner.torchrun import SINGLE, World
from demos.lab.core.files import save_atomic
from demos.lab.core.signals import StopRequest


class Diverged(Exception):
    """A recorded value (the loss) stopped being finite at `step`."""

    def __init__(self, step: int, name: str, value: float):
        super().__init__(f"{name} is {value} at step {step}")
        self.step, self.name, self.value = step, name, value


class Interrupted(Exception):
    """A stop was requested (Ctrl-C, SIGTERM); raised at the next step boundary.

    A scenario may catch it, save what it can, set `result` to what it has found so far (the
    checks that do not need the end of training) and raise it again.
    """

    def __init__(self, step: int):
        super().__init__(f"interrupted before step {step}")
        self.step = step
        self.result: Result | None = None


class Context:
    """The run's services for one scenario entry: device, folder, log, steps, records, files."""

    def __init__(self, cfg: ScenarioConfig, device: torch.device, folder: Path,
                 log: logging.Logger, *, seed: int, progress: bool = False,
                 warn_once: Callable[[str], None] | None = None,
                 stop: StopRequest | None = None, finite_every: int | None = None,
                 forbid_sync: bool = False, artifacts: Artifacts | None = None,
                 world: World = SINGLE):
        self.cfg, self.device, self.dir, self.log, self.seed = cfg, device, folder, log, seed
        # under torchrun: which rank this is; only rank 0 (world.primary) writes files
        self.world = world
        self.check_device = check_device(device)
        self.progress = progress
        self.warn_once = warn_once or log.warning
        # plots and graph renders: drawn beside the run (see demos.lab.pages.drawing)
        self.artifacts = artifacts or Artifacts(self.warn_once)
        self.stop = stop or StopRequest()
        # how often recorded values are checked for NaN/inf: every step on the CPU (free), in
        # windows on an accelerator, where each check is a host/device sync
        self.finite_every = finite_every or (1 if device.type == "cpu" else 100)
        self.finite_now = self.finite_every == 1
        self.log_every = cfg.log_every
        # tests: make any host/device sync inside the training steps an error (CUDA only)
        self.forbid_sync = forbid_sync and device.type == "cuda"
        self.pending: list[tuple[int, str, torch.Tensor]] = []  # values not yet checked
        self.checked_names: set[str] = set()
        self.columns: dict[str, tuple[list[int], list[Any]]] = {}  # name -> (steps, values)
        self.explanations: list[str] = []  # graph walks, for explain.txt
        self.backward: list[dict[str, Any]] = []  # traced backwards, for backward.json
        self.trace_checks: list[Check] = []       # "backward trace agrees", one per graph
        self.write_errors: list[str] = []  # files save_state could not write
        self.steps_run = 0      # the step the loop reached (steps done, counting a resume's)
        self.steps_started = 0  # where the loop started: > 0 when resumed
        self.train_s: float | None = None
        self._last_step = -1

    # -- the training loop -------------------------------------------------------------------
    def steps(self, n: int, start: int = 0, desc: str | None = None) -> Iterator[int]:
        """Yield start..n-1 with a progress bar; time the loop (`train_s`) around them.

        Between steps it stops the loop for a requested interrupt (raising Interrupted), and
        it makes sure every recorded value was finite (raising Diverged at the first that was
        not).
        """
        self._last_step = n - 1
        self.steps_run = self.steps_started = start
        bar = None
        if self.progress:
            from tqdm import tqdm
            bar = tqdm(total=n, initial=start, desc=desc or self.cfg.id, leave=False,
                       unit="step", dynamic_ncols=True)
        started = time.perf_counter()
        self.guard_sync(True)
        try:
            for t in range(start, n):
                if self.stop.requested:
                    raise Interrupted(t)
                yield t
                self.steps_run = t + 1
                if len(self.pending) >= self.finite_every:
                    self.check_finite()
                if bar is not None:
                    bar.update()
            self.check_finite()
        finally:
            self.guard_sync(False)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # once, so train_s covers the queued work
            self.train_s = time.perf_counter() - started
            if bar is not None:
                bar.close()

    def record(self, step: int, always: bool = False, **values: torch.Tensor | float) -> None:
        """Keep scalar `values` for this step if it is a log step (every `log_every`, the last).

        `always=True` records regardless of `log_every` (e.g. a once-per-epoch accuracy).
        Every tensor is checked for NaN/inf: on the CPU at once (one .item(), which needs no
        sync, and the float is what is kept); elsewhere the detached tensor is kept on its
        device and checked in windows (see check_finite). Parameters, which the optimizer
        changes in place, are copied so the record holds their value at this step. This runs
        every step, so it is written for speed.
        """
        keep = always or step % self.log_every == 0 or step == self._last_step
        for name, v in values.items():
            if isinstance(v, torch.Tensor):
                if v.numel() != 1:
                    raise ValueError(f"record({name}=...) takes scalars, got shape "
                                     f"{tuple(v.shape)}")
                self.checked_names.add(name)
                if self.finite_now:
                    v = v.item()
                    if not math.isfinite(v):
                        self.diverge(step, name, v)
                else:
                    v = v.detach().clone() if v.requires_grad and v.is_leaf else v.detach()
                    self.pending.append((step, name, v))
            if keep:
                column = self.columns.get(name)
                if column is None:
                    column = self.columns[name] = ([], [])
                column[0].append(step)
                column[1].append(v)

    def guard_sync(self, on: bool) -> None:
        if self.forbid_sync:
            torch.cuda.set_sync_debug_mode("error" if on else "default")

    def check_finite(self) -> None:
        """Check the values recorded since the last check; Diverged at the first NaN or inf.

        One host/device sync for the whole window (on the CPU, record() checks at once).
        """
        if not self.pending:
            return
        window, self.pending = self.pending, []
        self.guard_sync(False)  # the one sync per window, allowed
        ok = torch.stack([v.reshape(()).double() for _, _, v in window]).isfinite().tolist()
        self.guard_sync(True)
        if not all(ok):
            step, name, value = window[ok.index(False)]
            self.diverge(step, name, value.item())

    def diverge(self, step: int, name: str, value: float) -> None:
        """Stop at `step`: drop what was recorded after it, keep the bad value, raise Diverged."""
        for steps, values in self.columns.values():
            while steps and steps[-1] >= step:
                steps.pop()
                values.pop()
        steps, values = self.columns.setdefault(name, ([], []))
        steps.append(step)
        values.append(value)
        self.steps_run = step  # the steps completed before it (a window may have run further)
        raise Diverged(step, name, value)

    def history(self) -> list[dict[str, Any]]:
        """The recorded rows ({'step': s, name: value}, by step) as floats; one host copy."""
        rows: dict[int, dict[str, Any]] = {}
        for name, (steps, values) in self.columns.items():
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            if tensors:  # kept on an accelerator: copy them to the host together, once
                floats = iter(torch.stack([t.reshape(()).double() for t in tensors]).tolist())
                values[:] = [next(floats) if isinstance(v, torch.Tensor) else v for v in values]
            for step, value in zip(steps, values):
                rows.setdefault(step, {"step": step})[name] = float(value)
        return [rows[s] for s in sorted(rows)]

    def last(self, name: str) -> float:
        """The last recorded value of `name`."""
        for row in reversed(self.history()):
            if name in row:
                return row[name]
        raise KeyError(f"nothing recorded under '{name}'")

    # -- checkpoints -------------------------------------------------------------------------
    def save_state(self, filename: str, state: dict[str, Any]) -> None:
        """torch.save `state` into the scenario's folder, atomically. A file that cannot be
        written (a full disk) does not stop the scenario: its entry ends as an error that says
        so, with everything else it found. Under torchrun, rank 0 alone writes."""
        if not self.world.primary:
            return
        try:
            save_atomic(self.dir / filename, lambda path: torch.save(state, path))
        except (OSError, RuntimeError) as e:  # torch reports a full disk as a RuntimeError
            full = shutil.disk_usage(self.dir).free < 1 << 20
            self.write_errors.append(f"could not write {filename}: " + (
                "No space left on device" if full else f"{type(e).__name__}: {e}"))

    def load_state(self, path: str) -> dict[str, Any]:
        """A state saved by save_state, loaded with weights_only=True (no code is unpickled)."""
        return torch.load(path, map_location=self.device, weights_only=True)

    # -- artifacts ---------------------------------------------------------------------------
    def graph(self, output: torch.Tensor | tuple[torch.Tensor, ...],
              names: Mapping[str, torch.Tensor], name: str = "graph") -> str:
        """Render the autograd graph behind `output` to <name>.gv/.pdf/.svg and walk it.

        `names` labels the leaves and inputs. The walk goes to explain.txt. Then one real
        backward runs over the graph with every node hooked (see demos.lab.instruments.trace): its steps go
        to backward.json and explain.txt, and a check compares them with the leaves' .grad
        (which it leaves as they were). Call this before `backward()`, which frees what the
        graph saved (see demos.lab.instruments.render). Returns the graphviz source; under torchrun, on
        the ranks but 0, nothing is drawn and it returns "".
        """
        if not self.world.primary:
            return ""
        explanation = walk.explain(output, names, title=name)
        source = graphs.make_graph(output, names)
        traced = trace.record(output, names, title=name)
        if traced is None:
            self.backward.append({"graph": name, "error": None, "steps": [], "skipped": [],
                                  "note": "no grad_fn: there is no backward to run"})
        else:
            self.backward.append(trace.to_json(traced))
            self.trace_checks.append(trace.agrees(traced))
            explanation += "\n" + trace.explain(traced)
        self.explanations.append(explanation)
        self.artifacts.submit(f"{self.cfg.id}/{name}.pdf/.svg", graphs.render_files, source,
                              self.dir / name, shutil.which("dot"))
        return source

    def plot(self, filename: str, x: Sequence[float], series: Mapping[str, Sequence[float]],
             **labels: Any) -> None:
        """A line plot (title=, xlabel=, ylabel=, logy=) saved in the scenario's folder."""
        if not self.world.primary:
            return
        self.artifacts.submit(f"{self.cfg.id}/{filename}", plots.line_plot, self.dir / filename,
                              list(x), {k: list(v) for k, v in series.items()}, **labels)

    def animate(self, filename: str, x: Sequence[float],
                frames: Sequence[tuple[str, Sequence[float]]],
                fixed: Mapping[str, Sequence[float]], **labels: Any) -> None:
        """An animated GIF: one moving curve (a frame per (caption, y)) over `fixed` curves."""
        if not self.world.primary:
            return
        self.artifacts.submit(f"{self.cfg.id}/{filename}", plots.animation, self.dir / filename,
                              list(x), [(c, list(y)) for c, y in frames],
                              {k: list(v) for k, v in fixed.items()}, **labels)
