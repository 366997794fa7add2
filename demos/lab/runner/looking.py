"""Looking at a graph: the instruments run over one autograd graph, as `ctx.graph` runs them in
a scenario and `demos.graph` on your own tensors; and over a forward-mode pass, as
`ctx.forward_mode` and `demos.forward_mode` run them (demos/docs/backward.md).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from demos.lab.checks import diagnose
from demos.lab.core.files import GRADS, STEPS_GIF
from demos.lab.core.results import Check
from demos.lab.instruments import forward, saved, second_backward, trace, walk
from demos.lab.instruments import render as graphs
from demos.lab.pages.artifacts import Artifacts
from demos.lab.tensors import fresh, output_tensors


@dataclass
class Look:
    """What looking at one graph found."""
    source: str                    # the graphviz source (torchviz's, with our labels)
    backward: dict[str, Any] | None  # its entry of backward.json (its steps, what it kept)
    explanation: str               # its part of explain.txt: the walk, the steps, the ledger
    checks: list[Check] = field(default_factory=list)  # a forward-mode pass's: J·v held to torch


def look(output: Any, names: Mapping[str, torch.Tensor], name: str, folder: Path,
         artifacts: Artifacts, *, stepper_gif: bool = False, what: str = "") -> Look:
    """Walk the graph behind `output` (explain.txt), draw it with torchviz into `folder`
    (<name>.gv; .pdf and .svg submitted to `artifacts`, labelled `what`/<file>), read off what
    it saved (the ledger), and run one real backward over it with every node hooked (the
    stepper's steps, backward.json), leaving the leaves' .grad as they were; then draw it with
    the gradients in its nodes (<name>_grads). Call it before your own `backward()`, which
    frees what the graph saved."""
    explanation = walk.explain(output, names, title=name)
    source = graphs.make_graph(output, names)
    found = saved.ledger(output, names)  # before the traced backward runs over the graph
    traced = trace.record(output, names, title=name)
    dot = shutil.which("dot")
    if traced is None:
        data: dict[str, Any] = {"graph": name, "error": None, "steps": [], "skipped": [],
                                "note": "no grad_fn: there is no backward to run"}
    else:
        order = [s.fn for s in traced.steps]
        data = trace.to_json(traced)
        for step, kept in zip(data["steps"], saved.per_step(found, order)):
            step.update(kept)
        data["saved"] = saved.to_json(found, order, traced.label)
        if data["steps"]:  # beside it, the same graph with the gradients in its nodes
            artifacts.submit(f"{what}/{name}{GRADS}.pdf/.svg", graphs.render_files,
                             graphs.with_gradients(source, data["steps"]),
                             folder / f"{name}{GRADS}", dot)
        if data["steps"] and stepper_gif:  # and the stepper, for slides
            artifacts.submit(f"{what}/{name}{STEPS_GIF}", graphs.stepper_gif, source,
                             data["steps"], folder / f"{name}{STEPS_GIF}", dot)
        explanation += "\n" + trace.explain(traced) + "\n" + saved.explain(
            found, order, traced.label)
    artifacts.submit(f"{what}/{name}.pdf/.svg", graphs.render_files, source, folder / name, dot)
    return Look(source, data, explanation)


def look_forward(run: Callable[..., Any], inputs: Mapping[str, torch.Tensor], name: str,
                 folder: Path, artifacts: Artifacts, *, what: str = "") -> Look:
    """A forward-mode pass of `run(*inputs)` recorded operation by operation (each value and
    tangent, ending in J·v; a custom Function one step, through its jvp), beside the reverse
    pass's vᵀ·J for the same inputs; drawn into `folder` (<name>.*) where it made a graph."""
    traced = forward.record(run, inputs, title=name)
    xs = fresh(inputs, dtype=None)
    need = {k: x for k, x in xs.items() if x.requires_grad}
    reverse: dict[str, Any] = {}
    if not traced.error and need:
        outs = output_tensors(run(*xs.values()))
        # v = 1 for every output element through a sum, not an explicit grad_outputs (whose
        # first use imports sympy, about 0.3 s: see demos.lab.instruments.trace)
        total = sum((o * torch.ones_like(o)).sum() for o in outs)
        grads = torch.autograd.grad(total, list(need.values()), allow_unused=True)
        reverse = dict(zip(need, grads))
    source = ""
    if traced.outputs and any(o.grad_fn is not None for o in traced.outputs):
        source = graphs.make_graph(traced.outputs if len(traced.outputs) > 1 else
                                   traced.outputs[0], traced.inputs)
        artifacts.submit(f"{what}/{name}.pdf/.svg", graphs.render_files, source,
                         folder / name, shutil.which("dot"))
    agrees = forward.agrees(traced, run)
    if agrees.passed is False and not traced.error:  # a wrong jvp: why
        agrees.diagnosis = diagnose.forward_against_numbers(run, fresh(inputs))
    return Look(source, forward.to_json(traced, reverse), forward.explain(traced, reverse),
                [agrees])


def look_second(run: Callable[..., Any], inputs: Mapping[str, torch.Tensor],
                reference: Callable[..., Any] | None, name: str, folder: Path,
                artifacts: Artifacts, *, what: str = "") -> Look:
    """The backward of `run(*inputs)`'s gradient, drawn into `folder` (<name>.*) and traced,
    and the check `second backward agrees` (demos/docs/backward.md#the-second-backward)."""
    first = second_backward.first_pass(run, inputs)
    ref = second_backward.first_pass(reference, inputs) if reference is not None else None
    source, traced, data = "", None, None
    if first.root is not None:
        named = second_backward.labels(first)
        source = graphs.make_graph(first.root, named)
        marks = "".join(f"\t{id(fn)} [fillcolor=plum]\n" for fn in walk.nodes(first.root)
                        if second_backward.made_by(first, fn) == second_backward.FIRST)
        source = source.rstrip().removesuffix("}") + marks + "}\n"
        traced = trace.record(first.root, named, title=name)
        if traced is not None:
            data = trace.to_json(traced)
            for step, s in zip(data["steps"], traced.steps):
                step["pass"] = second_backward.made_by(first, s.fn)
        artifacts.submit(f"{what}/{name}.pdf/.svg", graphs.render_files, source, folder / name,
                         shutil.which("dot"))
    check = second_backward.agrees(first, ref, name)
    explanation = second_backward.explain(first, traced) + (
        "\n" + trace.explain(traced) if traced is not None else "")
    return Look(source, data, explanation, [check] if check is not None else [])
