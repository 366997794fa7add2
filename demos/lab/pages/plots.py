"""Plots with matplotlib's object-oriented API on the Agg backend; no global pyplot state."""
from __future__ import annotations

import csv
import functools
import io
import itertools
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

from demos.lab.core.files import NotReadable, read_bytes, save_atomic

MAX_METRICS_BYTES = 64 << 20  # a metrics.csv larger than this is not read for a plot
LEGEND_MOST = 10  # labels in a legend; past that, the first ones and "and N more"
F = TypeVar("F", bound=Callable[..., Any])

def agg() -> None:
    """matplotlib for files, drawn off-screen (Agg), whatever MPLBACKEND names (even none that
    exists); the variable is put back, so a notebook's own backend stays the notebook's."""
    if "matplotlib" in sys.modules:
        return
    before = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "agg"
    try:
        import matplotlib  # noqa: F401
    finally:
        if before is None:
            del os.environ["MPLBACKEND"]
        else:
            os.environ["MPLBACKEND"] = before


def quiet(draw: F) -> F:
    """`draw` with matplotlib's warnings kept off the console (a legend or layout that does
    not fit, say): the plot is drawn as well as it can be, and the command's lines stay its
    own."""
    @functools.wraps(draw)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        agg()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return draw(*args, **kwargs)
    return wrapper  # type: ignore[return-value]


def legend_labels(labels: Sequence[str], most: int = LEGEND_MOST) -> list[str]:
    """The labels a legend shows: all of them, or the first `most` - 1 and "and N more"."""
    if len(labels) <= most:
        return list(labels)
    return [*labels[:most - 1], f"and {len(labels) - most + 1} more"]


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
    canvas.draw()  # lays the figure out once, with room for the longest caption
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


@quiet
def band_plot(path: Path, curves: Sequence[tuple[Sequence[float], Sequence[float]]], *,
              title: str, xlabel: str = "step", ylabel: str = "loss") -> None:
    """Many runs' curves as one band: min to max shaded, the mean as a line, at every x that
    any run logged (each x over the runs that logged it)."""
    from matplotlib.figure import Figure

    at: dict[float, list[float]] = {}
    for xs, ys in curves:
        for x, y in zip(xs, ys):
            if math.isfinite(y):
                at.setdefault(x, []).append(y)
    xs_all = sorted(at)
    lo, hi = [min(at[v]) for v in xs_all], [max(at[v]) for v in xs_all]
    mean = [sum(at[v]) / len(at[v]) for v in xs_all]
    fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.fill_between(xs_all, lo, hi, alpha=0.3, linewidth=0, label=f"min–max of {len(curves)} runs")
    ax.plot(xs_all, mean, label="mean")
    if wants_log_scale(lo + hi):
        ax.set_yscale("log")
    if all(float(v).is_integer() for v in xs_all):  # steps: no ticks at 0.5, 1.5
        from matplotlib.ticker import MaxNLocator
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save_atomic(path, lambda p: fig.savefig(p, format="png"))


@quiet
def groups_plot(path: Path, labels: Sequence[str], stats: Sequence[Mapping[str, float]], *,
                title: str, ylabel: str) -> None:
    """One value across a sweep's groups: each group's mean with its std as an error bar, and
    its min and max as marks."""
    from matplotlib.figure import Figure

    xs = list(range(len(labels)))
    fig = Figure(figsize=(6.4, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.errorbar(xs, [st["mean"] for st in stats], yerr=[st.get("std", 0.0) for st in stats],
                fmt="o-", capsize=4, label="mean ± std")
    ax.scatter(xs, [st["min"] for st in stats], marker="v", label="min")
    ax.scatter(xs, [st["max"] for st in stats], marker="^", label="max")
    if wants_log_scale([st["min"] for st in stats] + [st["max"] for st in stats]):
        ax.set_yscale("log")
    ax.set_xticks(xs, list(labels), rotation=20 if len(labels) > 3 else 0, ha="right"
                  if len(labels) > 3 else "center")
    ax.set(title=title, ylabel=ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    save_atomic(path, lambda p: fig.savefig(p, format="png"))


def read_losses(path: Path) -> tuple[list[float], list[float]] | None:
    """(steps, losses) from a training entry's metrics.csv; None without a readable one (a
    FIFO, a device or a file over 64 MiB is not read at all: see files.read_bytes)."""
    from demos.lab.core.scenario import LOSS  # not among the drawing helper's imports

    try:
        text = read_bytes(path, MAX_METRICS_BYTES).decode("utf-8")
        rows = [(float(r["step"]), float(r[LOSS]))
                for r in csv.DictReader(io.StringIO(text, newline="")) if r.get(LOSS)]
    except (NotReadable, ValueError, TypeError, KeyError, csv.Error):
        return None
    return ([s for s, _ in rows], [v for _, v in rows]) if rows else None


@quiet
def overlay_plot(path: Path, curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], *,
                 title: str) -> None:
    """Several runs' loss curves, {run label: (steps, losses)}, overlaid: the first thick and
    solid, the others dashed, so that identical curves stay visible one over the other. Past
    a few runs the legend goes beside the plot, with at most LEGEND_MOST labels."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6.4 if len(curves) <= 4 else 8.4, 4.0), dpi=100,
                 layout="constrained")
    ax = fig.add_subplot()
    styles = itertools.cycle(("-", "--", ":", "-."))
    widths = itertools.chain([2.5], itertools.repeat(1.5))
    lines = [ax.plot(x, y, style, linewidth=width, marker="o" if len(x) <= 30 else None,
                     markersize=3)[0]
             for (x, y), style, width in zip(curves.values(), styles, widths)]
    if wants_log_scale([v for _, y in curves.values() for v in y]):
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps: no ticks at 0.5, 1.5
    ax.set(title=title, xlabel="step", ylabel="loss")
    ax.grid(True, alpha=0.3)
    labels = legend_labels(list(curves))
    handles: list[Any] = lines[:len(labels)]
    if len(labels) < len(lines):  # "and N more": a label without a line
        handles[-1] = Line2D([], [], linestyle="none")
    if len(curves) <= 4:
        ax.legend(handles, labels)
    else:
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
    save_atomic(path, lambda p: fig.savefig(p, format="png"))
