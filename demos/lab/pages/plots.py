"""Plots with matplotlib's object-oriented API on the Agg backend; no global pyplot state."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from demos.lab.core.files import save_atomic


def agg() -> None:
    """matplotlib for files, drawn off-screen (Agg), whatever MPLBACKEND names (even none that
    exists); the variable is put back, so a notebook's own backend stays the notebook's."""
    from unittest import mock

    if "matplotlib" not in sys.modules:
        with mock.patch.dict(os.environ, MPLBACKEND="agg"):
            import matplotlib  # noqa: F401


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
    fig = line_figure(x, series, title=title, xlabel=xlabel, ylabel=ylabel, logy=logy,
                      markers=markers)
    save_atomic(path, lambda p: fig.savefig(p, format="png"))


def line_figure(x: Sequence[float], series: Mapping[str, Sequence[float]], *, title: str,
                xlabel: str, ylabel: str, logy: bool | None = None,
                markers: bool = False) -> Any:
    """line_plot's figure. A series with no finite value has nothing to draw: its legend
    entry says so, rather than showing a line that is not there. The title is wrapped to the
    figure's width."""
    agg()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for label, y in series.items():
        drawn = any(math.isfinite(v) for v in y)
        ax.plot(x, y, label=label if drawn else f"{label} (not finite: not drawn)",
                marker="o" if markers else None, markersize=3)
    if logy if logy is not None else wants_log_scale([v for y in series.values() for v in y]):
        ax.set_yscale("log")
    if all(float(v).is_integer() for v in x):  # steps, epochs: no ticks at 1.2, 1.4, ...
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=wrapped(title, TITLE_CHARS), xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    if len(series) > 1 or any(not any(math.isfinite(v) for v in y) for y in series.values()):
        ax.legend()  # one series that is not drawn says so too
    return fig


TITLE_CHARS = 64  # a title line's most characters at line_plot's width and font size


def wrapped(text: str, width: int) -> str:
    """Each line of `text` broken at spaces into lines of at most `width` characters."""
    import textwrap

    return "\n".join(textwrap.fill(line, width) or line for line in text.split("\n"))


def loss_curve(path: Path, steps: Sequence[int], losses: Sequence[float], title: str,
               log_every: int = 1) -> None:
    """The loss at each logged step; the x label says how often that was."""
    every = f" (loss logged every {log_every} steps and at the last)" if log_every > 1 else ""
    line_plot(path, steps, {"loss": losses}, title=title, xlabel=f"step{every}", ylabel="loss",
              markers=len(steps) <= 30)


def animation(path: Path, x: Sequence[float], frames: Sequence[tuple[str, Sequence[float]]],
              fixed: Mapping[str, Sequence[float]], *, title: str, xlabel: str, ylabel: str,
              ms_per_frame: int = 120) -> None:
    """A GIF: the `fixed` curves, and one curve that moves through `frames` (caption, y)."""
    import numpy as np
    agg()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    fig = Figure(figsize=(5.6, 3.5), dpi=80, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, y in fixed.items():
        ax.plot(x, y, label=label, linewidth=2.5)
    every = [v for _, y in frames for v in y if math.isfinite(v)]
    (moving,) = ax.plot(x, frames[0][1], label="fit", color="tab:green")
    low = min(every + [v for y in fixed.values() for v in y])
    high = max(every + [v for y in fixed.values() for v in y])
    margin = 0.05 * (high - low)
    ax.set(xlabel=xlabel, ylabel=ylabel, ylim=(low - margin, high + margin))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left")
    caption = ax.set_title(f"{title}: {max((c for c, _ in frames), key=len)}")
    layout = fig.get_layout_engine()  # constrained: laid out once, with room for the longest
    assert layout is not None         # caption (a layout alone, not a whole draw)
    layout.execute(fig)
    fig.set_layout_engine("none")
    moving.set_animated(True)  # blitting: the static rest is drawn once, then reused
    caption.set_animated(True)
    canvas.draw()
    background = canvas.copy_from_bbox(fig.bbox)
    images = []
    for text, y in frames:
        canvas.restore_region(background)
        moving.set_ydata(y)
        caption.set_text(f"{title}: {text}")
        ax.draw_artist(moving)
        ax.draw_artist(caption)
        rgb = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")
        # an octree palette: a fifth of median cut's time (which was half the GIF's), and
        # within about 1/255 of the frame's colors on average
        images.append(rgb.quantize(colors=64, method=Image.Quantize.FASTOCTREE))
    durations = [ms_per_frame] * (len(images) - 1) + [ms_per_frame * 12]  # rest on the result
    save_atomic(path, lambda p: images[0].save(p, format="GIF", save_all=True,
                                               append_images=images[1:], duration=durations,
                                               loop=0, optimize=True))
