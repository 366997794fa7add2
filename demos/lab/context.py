"""What a scenario gets (`Context`) and gives back (`Result`).

A scenario writes its training loop as `for t in ctx.steps(n):` and records values with
`ctx.record(t, loss=loss)`. Recorded tensors stay on their device: nothing here forces a
host/device sync during the loop; they are copied to the host once, by `history()`.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from demos.lab import graphs, plots, walk
from demos.lab.checks import Check
from demos.lab.config import ScenarioConfig
from demos.lab.device import check_device


@dataclass
class Result:
    """What a scenario reports: final metrics, named scalar params, checks, and notes."""
    metrics: dict[str, float]
    params: dict[str, float] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    inspection: dict[str, Any] = field(default_factory=dict)  # what the document prints


class Context:
    """The run's services for one scenario entry: device, folder, log, steps, records, files."""

    def __init__(self, cfg: ScenarioConfig, device: torch.device, folder: Path,
                 log: logging.Logger, *, seed: int, progress: bool = False,
                 warn_once: Callable[[str], None] | None = None):
        self.cfg, self.device, self.dir, self.log, self.seed = cfg, device, folder, log, seed
        self.check_device = check_device(device)
        self.progress = progress
        self.warn_once = warn_once or log.warning
        self.rows: list[tuple[int, dict[str, Any]]] = []
        self.explanations: list[str] = []  # graph walks, for explain.txt
        self.steps_run = 0
        self.train_s: float | None = None
        self._last_step = -1

    # -- the training loop -------------------------------------------------------------------
    def steps(self, n: int, desc: str | None = None) -> Iterator[int]:
        """Yield 0..n-1, with a progress bar, and time the loop (`train_s`) around them."""
        self._last_step = n - 1
        bar = None
        if self.progress:
            from tqdm import tqdm
            bar = tqdm(total=n, desc=desc or self.cfg.id, leave=False, unit="step",
                       dynamic_ncols=True)
        start = time.perf_counter()
        try:
            for t in range(n):
                yield t
                self.steps_run = t + 1
                if bar is not None:
                    bar.update()
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # once, so train_s covers the queued work
            self.train_s = time.perf_counter() - start
            if bar is not None:
                bar.close()

    def record(self, step: int, always: bool = False, **values: torch.Tensor | float) -> None:
        """Keep `values` for this step if it is a log step (every `log_every`, and the last).

        Tensors are detached and kept where they are; `always=True` records regardless of
        `log_every` (e.g. a once-per-epoch test accuracy).
        """
        if not (always or step % self.cfg.log_every == 0 or step == self._last_step):
            return
        values = {k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in values.items()}
        if self.rows and self.rows[-1][0] == step:
            self.rows[-1][1].update(values)
        else:
            self.rows.append((step, values))

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
