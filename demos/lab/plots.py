"""Plots with matplotlib's object-oriented API on the Agg backend; no global pyplot state."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping, Sequence

from demos.lab.files import save_atomic


def wants_log_scale(values: Sequence[float]) -> bool:
    """Log-scale y when the positive, finite values span more than two decades."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite or min(finite) <= 0:
        return False
    return max(finite) / min(finite) > 100


def line_plot(path: Path, x: Sequence[float], series: Mapping[str, Sequence[float]], *,
              title: str, xlabel: str, ylabel: str, logy: bool | None = None,
              markers: bool = False) -> None:
    """One figure with a line per series (legend when more than one); saved as PNG."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for label, y in series.items():
        ax.plot(x, y, label=label, marker="o" if markers else None, markersize=3)
    if logy if logy is not None else wants_log_scale([v for y in series.values() for v in y]):
        ax.set_yscale("log")
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    if len(series) > 1:
        ax.legend()
    save_atomic(path, lambda p: fig.savefig(p, format="png"))


def loss_curve(path: Path, steps: Sequence[int], losses: Sequence[float], title: str) -> None:
    """The loss at each logged step."""
    every = f" (logged at {len(steps)} steps)" if len(steps) < (steps[-1] + 1 if steps else 0) else ""
    line_plot(path, steps, {"loss": losses}, title=title, xlabel=f"step{every}", ylabel="loss",
              markers=len(steps) <= 30)
