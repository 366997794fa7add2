"""What a scenario gets (`Context`) and gives back (`Result`).

A scenario writes its training loop as `for t in ctx.steps(n):` and records values with
`ctx.record(t, loss=loss)`. Recorded tensors stay on their device: nothing here forces a
host/device sync during the loop; they are copied to the host once, by `history()`.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from demos.lab import graphs, plots, walk
from demos.lab.checks import Check
from demos.lab.config import ScenarioConfig
from demos.lab.device import check_device
from demos.lab.files import save_atomic


class Diverged(Exception):
    """A recorded value (the loss) stopped being finite at `step`."""

    def __init__(self, step: int, name: str, value: float):
        super().__init__(f"{name} is {value} at step {step}")
        self.step, self.name, self.value = step, name, value


class Interrupted(Exception):
    """A stop was requested (Ctrl-C, SIGTERM); raised at the next step boundary."""

    def __init__(self, step: int):
        super().__init__(f"interrupted before step {step}")
        self.step = step


class StopRequest:
    """Set by the signal handler; training loops look at it between steps."""

    def __init__(self) -> None:
        self.requested: str | None = None  # the signal's name once one arrived


@dataclass
class Result:
    """What a scenario reports: final metrics, named scalar params, checks, and notes."""
    metrics: dict[str, float]
    params: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    inspection: dict[str, Any] = field(default_factory=dict)  # what the document prints


def snapshot(value: Any) -> Any:
    """A recordable copy of `value`: detached, and cloned if the optimizer updates it in place."""
    if not isinstance(value, torch.Tensor):
        return value
    return value.detach().clone() if value.is_leaf and value.requires_grad else value.detach()


class Context:
    """The run's services for one scenario entry: device, folder, log, steps, records, files."""

    def __init__(self, cfg: ScenarioConfig, device: torch.device, folder: Path,
                 log: logging.Logger, *, seed: int, progress: bool = False,
                 warn_once: Callable[[str], None] | None = None,
                 stop: StopRequest | None = None, finite_every: int | None = None):
        self.cfg, self.device, self.dir, self.log, self.seed = cfg, device, folder, log, seed
        self.check_device = check_device(device)
        self.progress = progress
        self.warn_once = warn_once or log.warning
        self.stop = stop or StopRequest()
        # how often recorded values are checked for NaN/inf: every step on the CPU (free), in
        # windows on an accelerator, where each check is a host/device sync
        self.finite_every = finite_every or (1 if device.type == "cpu" else 100)
        self.pending: list[tuple[int, str, torch.Tensor]] = []  # values not yet checked
        self.checked_names: set[str] = set()
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.explanations: list[str] = []  # graph walks, for explain.txt
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
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # once, so train_s covers the queued work
            self.train_s = time.perf_counter() - started
            if bar is not None:
                bar.close()

    def record(self, step: int, always: bool = False, **values: torch.Tensor | float) -> None:
        """Keep `values` for this step if it is a log step (every `log_every`, and the last).

        Tensors are detached and kept where they are; `always=True` records regardless of
        `log_every` (e.g. a once-per-epoch test accuracy). Leaves that require grad (the
        parameters, which the optimizer changes in place) are copied, so the record keeps
        the value they had at this step.
        """
        values = {k: snapshot(v) for k, v in values.items()}
        for name, v in values.items():
            if isinstance(v, torch.Tensor) and v.numel() == 1:
                self.pending.append((step, name, v))
        if not (always or step % self.cfg.log_every == 0 or step == self._last_step):
            return
        self.keep(step, values)

    def keep(self, step: int, values: dict[str, Any]) -> None:
        if self.rows and self.rows[-1][0] == step:
            self.rows[-1][1].update(values)
        else:
            self.rows.append((step, values))

    def check_finite(self) -> None:
        """Check the values recorded since the last check; Diverged at the first NaN or inf.

        One host/device sync for the whole window. The rows after the bad step are dropped and
        the bad value itself is kept, so metrics.csv and loss.png end where training broke.
        """
        if not self.pending:
            return
        window, self.pending = self.pending, []
        if len(window) == 1 and window[0][2].device.type == "cpu":
            ok = [math.isfinite(window[0][2].item())]
        else:
            ok = torch.stack([v.reshape(()).double() for _, _, v in window]).isfinite().tolist()
        self.checked_names.update(name for _, name, _ in window)
        if all(ok):
            return
        step, name, value = window[ok.index(False)]
        self.rows = [(s, vals) for s, vals in self.rows if s <= step]
        self.keep(step, {name: value})
        raise Diverged(step, name, value.item())

    def history(self) -> list[dict[str, Any]]:
        """The recorded rows as plain floats ({'step': s, name: value}); one host copy in all."""
        tensors = [v for _, vals in self.rows for v in vals.values() if isinstance(v, torch.Tensor)]
        if tensors:
            try:
                floats = iter(torch.stack([t.reshape(()).double() for t in tensors]).tolist())
            except RuntimeError:  # tensors on different devices
                floats = iter([t.item() for t in tensors])
            self.rows = [(s, {k: next(floats) if isinstance(v, torch.Tensor) else float(v)
                              for k, v in vals.items()}) for s, vals in self.rows]
        return [{"step": s, **vals} for s, vals in self.rows]

    def last(self, name: str) -> float:
        """The last recorded value of `name`."""
        for row in reversed(self.history()):
            if name in row:
                return row[name]
        raise KeyError(f"nothing recorded under '{name}'")

    # -- checkpoints -------------------------------------------------------------------------
    def save_state(self, filename: str, state: dict[str, Any]) -> None:
        """torch.save `state` into the scenario's folder, atomically."""
        save_atomic(self.dir / filename, lambda path: torch.save(state, path))

    def load_state(self, path: str) -> dict[str, Any]:
        """A state saved by save_state, loaded with weights_only=True (no code is unpickled)."""
        return torch.load(path, map_location=self.device, weights_only=True)

    # -- artifacts ---------------------------------------------------------------------------
    def graph(self, output: torch.Tensor | tuple[torch.Tensor, ...],
              names: Mapping[str, torch.Tensor], name: str = "graph") -> str:
        """Render the autograd graph behind `output` to <name>.gv/.pdf/.svg and walk it.

        `names` labels the leaves and inputs. The walk goes to explain.txt. Call this before
        `backward()`, which frees what the graph saved (see demos.lab.graphs). Returns the
        graphviz source.
        """
        self.explanations.append(walk.explain(output, names, title=name))
        source = graphs.make_graph(output, names)
        _, problem = graphs.render(source, self.dir / name)
        if problem:
            self.warn_once(problem)
        return source

    def plot(self, filename: str, x: Sequence[float], series: Mapping[str, Sequence[float]],
             **labels: Any) -> None:
        """A line plot (title=, xlabel=, ylabel=, logy=) saved in the scenario's folder."""
        plots.line_plot(self.dir / filename, x, series, **labels)

    def animate(self, filename: str, x: Sequence[float],
                frames: Sequence[tuple[str, Sequence[float]]],
                fixed: Mapping[str, Sequence[float]], **labels: Any) -> None:
        """An animated GIF: one moving curve (a frame per (caption, y)) over `fixed` curves."""
        plots.animation(self.dir / filename, x, frames, fixed, **labels)
