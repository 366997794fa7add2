"""Autograd graphs: torchviz builds the graphviz source; `dot` renders it to PDF and SVG.

Build the graph before `backward()` (or with retain_graph=True): a custom Function's
saved tensors, which torchviz draws, are freed by a backward that does not retain the graph.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from demos.lab.core.files import FILE_MODE, write_atomic

if TYPE_CHECKING:  # the drawing helper renders without importing torch
    import torch

FORMATS = ("pdf", "svg")
INSTALL_HINT = ("install graphviz for PDF/SVG graphs: apt-get install graphviz "
                "(Debian/Ubuntu), brew install graphviz (macOS)")


def torchviz_make_dot() -> Callable[..., Any]:
    """torchviz's make_dot. torchviz 0.0.3 imports distutils: up to Python 3.11 the standard
    library's, found on sys.path directly (setuptools' hook would load all of setuptools to
    stand in: see performance.md); from 3.12 setuptools installs its own on import."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if sys.version_info >= (3, 12):
            import setuptools  # noqa: F401
        elif "distutils" not in sys.modules:
            import importlib.machinery
            import importlib.util

            spec = importlib.machinery.PathFinder.find_spec("distutils")
            if spec is not None and spec.loader is not None:
                sys.modules["distutils"] = module = importlib.util.module_from_spec(spec)
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules["distutils"]
                    raise
        from torchviz import make_dot
    return make_dot


def make_graph(output: torch.Tensor | tuple[torch.Tensor, ...],
               params: Mapping[str, torch.Tensor]) -> str:
    """The graphviz (dot) source of the graph behind `output` (one tensor or a tuple), the
    tensors in `params` labelled with their names ("output" for an output without one).

    Colours (torchviz): lightblue leaves that require grad, orange tensors saved for backward,
    green the output, grey the backward nodes. On top of torchviz: a custom Function's saved
    tensors get names (walk.saved_names), and a saved leaf stays lightblue and is one node with
    its leaf (under saved_tensors_hooks it unpacks to another Python object over the same
    memory, which torchviz, naming nodes by id(), would draw twice)."""
    from demos.lab.instruments import walk
    make_dot = torchviz_make_dot()
    with warnings.catch_warnings():  # torchviz's own use of distutils' LooseVersion
        warnings.simplefilter("ignore", DeprecationWarning)
        outputs = (output,) if not isinstance(output, tuple) else output
        named = dict(params)
        known = {id(t) for t in named.values()}
        for i, out in enumerate(outputs):
            if id(out) not in known:
                named["output" if len(outputs) == 1 else f"output {i + 1}"] = out
        nodes, touches = walk.nodes(outputs), []
        with nones_left_out(nodes):
            source = cycle_free(lambda: make_dot(output, params=named).source)
    leaves = [fn.variable for fn in nodes if hasattr(fn, "variable")]
    for fn in nodes:
        if walk.is_custom(fn):  # torchviz draws its saves in order: edges "<t> -> <fn> [dir=none]"
            drawn = re.findall(rf"^\t(\d+) -> {id(fn)} \[dir=none\]$", source, re.M)
            kept = [(name, t) for name, t in zip(walk.saved_names(fn, named), fn.saved_tensors)
                    if t is not None]  # a None saved (an optional argument) is not drawn
            for tid, (name, t) in zip(drawn, kept):
                leaf = next((v for v in leaves if walk.same_view(v, t)), None)
                if leaf is not None and tid != str(id(leaf)):  # the leaf's node, drawn twice
                    source = re.sub(rf"(?m)^(\t){tid}( |$)", rf"\g<1>{id(leaf)}\g<2>", source)
                    tid = str(id(leaf))
                touches.append(f'\t{tid} [label="{quote(name)}\n {size(t)}"]')
        if hasattr(fn, "variable"):
            touches.append(f"\t{id(fn.variable)} [fillcolor=lightblue]")
    return source.rstrip().removesuffix("}") + "".join(t + "\n" for t in touches) + "}\n"


@contextlib.contextmanager
def nones_left_out(nodes: list[Any]) -> Iterator[None]:
    """While it lasts, the custom Functions' nodes among `nodes` give their saved_tensors
    without the Nones (`ctx.save_for_backward(x, h)` with h None, an optional argument):
    torchviz draws each saved tensor with its size, and None has none. Each node's class is
    the Function's own (FooBackward), made by torch for it: a property on it, taken off
    after, shadows torch's attribute for that Function's nodes alone."""
    from torch.autograd.function import BackwardCFunction

    from demos.lab.instruments import walk

    classes = {type(fn) for fn in nodes if walk.is_custom(fn)
               and "saved_tensors" not in vars(type(fn))}
    original = BackwardCFunction.saved_tensors  # torch's, for every Function's node
    for cls in classes:
        cls.saved_tensors = property(lambda fn: tuple(
            t for t in original.__get__(fn) if t is not None))
    try:
        yield
    finally:
        for cls in classes:
            del cls.saved_tensors


def cycle_free(build: Callable[[], str]) -> str:
    """`build()` with the cycle collector paused, then the young objects it left collected.
    torchviz's make_dot leaves a reference cycle that holds the graph it drew, and with it the
    traced backward's removed hooks, which a training loop over the same leaves would pay on
    every step until some later full collection; still young, a collection of the youngest
    generation frees it now."""
    import gc

    paused = gc.isenabled()
    gc.disable()
    try:
        return build()
    finally:
        if paused:
            gc.enable()
        gc.collect(0)


def with_gradients(source: str, steps: list[dict]) -> str:
    """The graph `source` with the gradients of its traced backward printed in the nodes, as
    micrograd's draw_dot shows them: each backward node the gradient it received, each leaf
    the gradient added into its .grad. `steps`: backward.json's steps of that graph."""
    touches = []
    for s in steps:
        got = ", ".join(short(g) for g in s.get("received") or [])
        touches.append(f'\t{s["dot_node"]} [label="{quote(s["type"])}\\ngrad in: '
                       f'{quote(got)}"]')
        leaf = s.get("leaf")
        if leaf:
            touches.append(f'\t{leaf["dot_node"]} [label="{quote(str(leaf["name"]))}\\n'
                           f'grad: {quote(short(leaf["grad"]))}" fillcolor=lightblue]')
    return source.rstrip().removesuffix("}") + "".join(t + "\n" for t in touches) + "}\n"


def short(g: dict | None) -> str:
    """A gradient as backward.json describes it, in a few characters for a node's label."""
    if g is None:
        return "None"
    if "values" in g:
        values = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in g["values"][:4]]
        more = ", ..." if len(g["values"]) > 4 else ""
        return values[0] if not g["shape"] else "[" + ", ".join(values) + more + "]"
    norm = g.get("norm")
    return f"{tuple(g['shape'])}, norm {norm:.4g}" if isinstance(norm, float) else \
        f"{tuple(g['shape'])}"


def quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def size(t: torch.Tensor | None) -> str:
    return "None" if t is None else "(" + ", ".join(str(v) for v in t.shape) + ")"


def render(source: str, stem: Path, dot: str | None = "") -> tuple[list[Path], str | None]:
    """Write `<stem>.gv`, and `<stem>.pdf` / `.svg` when `dot` (the program's path; None: not
    installed; "": look it up on PATH) is there. Returns the files written and a warning (None
    when all went well); never raises for a missing or failing `dot`."""
    gv = stem.with_suffix(".gv")
    write_atomic(gv, source)
    written = [gv]
    dot = shutil.which("dot") if dot == "" else dot
    if dot is None:
        return written, f"graphviz 'dot' not found: kept the .gv sources only; {INSTALL_HINT}"
    outs = [stem.with_suffix(f".{fmt}") for fmt in FORMATS]
    tag = os.urandom(4).hex()  # named as save_atomic's are: remove_temps knows them
    temps = [out.with_name(f".{out.name}.{tag}.tmp") for out in outs]
    try:  # one layout, both formats: a single dot run (half the time of one per format)
        try:
            proc = subprocess.run([dot, *[a for fmt, tmp in zip(FORMATS, temps)
                                          for a in (f"-T{fmt}", f"-o{tmp}")], str(gv)],
                                  capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return written, f"graphviz 'dot' failed on {gv.name}: {e}"
        if proc.returncode != 0 or not all(tmp.exists() for tmp in temps):
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            why = err[0] if err else (f"killed by {signal.Signals(-proc.returncode).name}"
                                      if proc.returncode < 0 else f"exit {proc.returncode}")
            return written, f"graphviz 'dot' failed on {gv.name}: {why}"
        for tmp, out in zip(temps, outs):
            os.chmod(tmp, FILE_MODE)
            os.replace(tmp, out)
            written.append(out)
    finally:
        for tmp in temps:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return written, None


def render_files(source: str, stem: Path, dot: str | None) -> str | None:
    """`render`, for the artifacts helper: only the warning (None when all went well)."""
    return render(source, stem, dot)[1]


def stepper_gif(source: str, steps: list[dict], path: Path, dot: str | None) -> str | None:
    """The stepper as an animated GIF, for slides: the graph, then one frame per step of its
    traced backward with the step's node lit and what it received and sent written under it.
    `steps`: backward.json's steps. Returns a warning, None when all went well."""
    import io

    from PIL import Image

    from demos.lab.core.files import save_atomic

    if dot is None:
        return f"graphviz 'dot' not found: no {path.name}; {INSTALL_HINT}"
    base = source.rstrip().removesuffix("}")
    captions = [f"backward, step by step: {len(steps)} steps"] + [caption(k, st) for k, st in
                                                                   enumerate(steps, 1)]
    frames = []
    for k, text in enumerate(captions):
        lit = (f'\t{steps[k - 1]["dot_node"]} [fillcolor="#ffd54f" color="#d32f2f" '
               f'penwidth=3]\n') if k else ""
        frame = (f'{base}{lit}\tgraph [label="{quote(text)}" labelloc=b fontsize=12 '
                 f'fontname=monospace]\n}}\n')
        try:
            proc = subprocess.run([dot, "-Tpng"], input=frame.encode(), capture_output=True,
                                  timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"graphviz 'dot' failed on {path.name}: {e}"
        if proc.returncode != 0:
            return f"graphviz 'dot' failed on {path.name}"
        frames.append(Image.open(io.BytesIO(proc.stdout)).convert("RGB"))
    width, height = max(f.width for f in frames), max(f.height for f in frames)
    sized = []
    for f in frames:  # one size for all: each frame on a white page of the largest
        page = Image.new("RGB", (width, height), "white")
        page.paste(f, ((width - f.width) // 2, 0))
        sized.append(page.convert("P", palette=Image.Palette.ADAPTIVE))
    save_atomic(path, lambda out: sized[0].save(out, format="GIF", save_all=True,
                                                append_images=sized[1:], duration=1200, loop=0))
    return None


def caption(k: int, step: dict) -> str:
    """A step, in a line or two: what the node received and what it did with it."""
    got = ", ".join(short(g) for g in step.get("received") or [])
    if step.get("leaf"):
        return (f"step {k}: {step['node']} receives {got}\nand adds it into "
                f"{step['leaf']['name']}.grad (now {short(step['leaf']['grad'])})")
    sent = "; ".join(f"{short(e['grad'])} to {e['to']}" for e in step.get("sent") or []
                     if e.get("to"))
    return f"step {k}: {step['node']} receives {got}\nand sends {sent or 'nothing'}"
