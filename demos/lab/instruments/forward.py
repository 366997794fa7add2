"""Forward mode, step by step: a forward-mode pass recorded operation by operation, and its
check (demos/docs/backward.md#forward-mode-step-by-step).

A custom Function is one step, recorded where its output is first used (or returned), named by
its node. The inputs also require grad, so each step's output has a grad_fn: the graph drawn for
this pass is the same graph a backward would walk, and each step lights its node.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.autograd.forward_ad as fwAD
from torch.overrides import TorchFunctionMode

from demos.lab.core.results import Check
from demos.lab.core.text import one_line
from demos.lab.core.tolerance import FLOAT64_TOL
from demos.lab.instruments.trace import copied
from demos.lab.instruments.walk import node_name
from demos.lab.tensors import agree, describe, fresh, in_brief, output_tensors

COSTS = ("Forward mode pushes one tangent v through the graph beside the values: one pass gives "
         "J·v, a column of the Jacobian per input direction.",
         "Reverse mode pulls one cotangent back from the outputs: one pass gives vᵀ·J, a row per "
         "output. For n inputs and m outputs, the whole Jacobian takes n forward passes or m "
         "backward ones: forward mode for few inputs, reverse mode (backward) for a scalar loss.")


@dataclass
class Step:
    op: str                      # "mul", "MyExpModernBackward (a custom Function)"
    inputs: list[str]            # what it took: "x", "step 2", "a constant"
    primal: torch.Tensor
    tangent: torch.Tensor | None
    node: Any = None             # the grad_fn of its output: its node in the drawn graph


@dataclass
class ForwardTrace:
    title: str
    inputs: dict[str, torch.Tensor]
    tangents: dict[str, torch.Tensor]
    steps: list[Step] = field(default_factory=list)
    outputs: tuple[torch.Tensor, ...] = ()   # the primal outputs, with their graph
    jv: tuple[torch.Tensor | None, ...] = ()  # the outputs' tangents
    error: str | None = None


class Recorder(TorchFunctionMode):
    """Records the operations that take a dual tensor, with the primal and tangent they make."""

    def __init__(self, trace: ForwardTrace, known: dict[int, str]):
        super().__init__()
        self.trace, self.known = trace, known
        self.alive: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        out = func(*args, **(kwargs or {}))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not any(fwAD.unpack_dual(t).tangent is not None for t in tensors):
            return out  # a Function's own forward or jvp, on plain tensors: inside its step
        names = [self.name_of(t) for t in tensors]
        if isinstance(out, torch.Tensor):
            self.add(getattr(func, "__name__", str(func)), names, out)
        return out

    def name_of(self, t: torch.Tensor) -> str:
        if id(t) not in self.known:
            if fwAD.unpack_dual(t).tangent is None:
                return "a constant"
            # made by a Function (through its jvp): its step comes now, named by its node
            owner = "" if t.grad_fn is None else \
                f"{node_name(t.grad_fn).removesuffix('Backward')}, "
            self.add(f"{owner}a custom Function, through its jvp", [], t)
        return self.known[id(t)]

    def add(self, op: str, inputs: list[str], out: torch.Tensor) -> None:
        primal, tangent = fwAD.unpack_dual(out)
        self.trace.steps.append(Step(op, inputs, primal.detach().clone(), copied(tangent),
                                     out.grad_fn))
        self.alive.append(out)  # ids stay unique while the pass lasts
        self.known[id(out)] = f"step {len(self.trace.steps)}"


def record(run: Callable[..., Any], inputs: Mapping[str, torch.Tensor],
           title: str = "forward_mode") -> ForwardTrace:
    """One forward-mode pass of `run` over fresh copies of `inputs` (of their dtypes), tangent 1
    for every element of every floating input."""
    xs = fresh(inputs, dtype=None)
    vs = {k: torch.ones_like(x) for k, x in xs.items() if x.is_floating_point()}
    trace = ForwardTrace(title, xs, vs)
    try:
        with fwAD.dual_level():  # xs and vs kept for agrees: what a mark_dirty Function, or a
            # jvp scaling its tangent in place, changes is a copy (a leaf: autograd's refusal)
            duals = {k: fwAD.make_dual(x if x.requires_grad else x.clone(), vs[k].clone())
                     if k in vs else x for k, x in xs.items()}
            with Recorder(trace, {id(d): k for k, d in duals.items()}) as recorder:
                outs = output_tensors(run(*duals.values()))
            for o in outs:
                recorder.name_of(o)  # an output made by a Function alone is a step too
            trace.jv = tuple(copied(fwAD.unpack_dual(o).tangent) for o in outs)
            trace.outputs = outs  # after the level: plain tensors, with the pass's graph
    except Exception as e:  # a Function without jvp, or a jvp that raises
        trace.error = one_line(e, 300)
    return trace


def agrees(trace: ForwardTrace, run: Callable[..., Any]) -> Check:
    """'forward mode agrees': the traced J·v against torch.func.jvp's and reverse mode's (a
    wrong jvp shows in the second: demos/docs/backward.md)."""
    name = f"forward mode agrees: {trace.title}"
    if trace.error:
        return Check(name, False, f"the forward-mode pass failed: {trace.error}")
    primals = tuple(x.detach() for x in trace.inputs.values())
    tangents = tuple(trace.tangents.get(k, torch.zeros_like(x)) for k, x in trace.inputs.items())
    matched, refused = [], []
    for by, jvp in (("torch.func.jvp", torch.func.jvp),
                    ("reverse mode", torch.autograd.functional.jvp)):
        try:  # J·v of `run` at the traced inputs and tangents, each call on copies of its own
            _, want = jvp(lambda *a: run(*a), tuple(p.clone() for p in primals),
                          tuple(t.clone() for t in tangents))
        except Exception as e:  # torch.func refuses a classic Function; a backward that is
            refused.append(f"not {by} ({type(e).__name__})")  # not differentiable
            continue
        for i, (got, exp) in enumerate(zip(trace.jv, output_tensors(want))):
            if got is None and not trace.outputs[i].requires_grad:  # no tangent: torch.func's
                got = torch.zeros_like(exp)  # zeros (integer indices, mark_non_differentiable)
            if got is None or not agree(got, exp, *FLOAT64_TOL):
                return Check(name, False, f"output {i}: the traced J·v is {in_brief(got)}, {by} "
                                          f"gives {in_brief(exp)}")
        matched.append(by)
    if not matched:
        return Check(name, False, f"nothing to compare J·v with: {'; '.join(refused)}")
    jv = ", ".join(in_brief(t) for t in trace.jv)
    return Check(name, True, f"{len(trace.steps)} step(s); J·v {jv} equals {' and '.join(matched)}")


def to_json(trace: ForwardTrace, reverse: Mapping[str, torch.Tensor | None]) -> dict[str, Any]:
    """backward.json's entry for the pass: each step's primal and tangent, J·v, and the reverse
    pass's vᵀ·J for the same inputs (`reverse`: input name -> its gradient)."""
    steps: list[dict[str, Any]] = [
        {"step": k, "node": s.op, "inputs": s.inputs,
         "dot_node": None if s.node is None else str(id(s.node)),
         "primal": describe(s.primal), "tangent": describe(s.tangent)}
        for k, s in enumerate(trace.steps, 1)]
    result = {"jv": [in_brief(t) for t in trace.jv],
              "vjp": {k: in_brief(g) for k, g in reverse.items()}, "costs": list(COSTS)}
    if steps:  # the stepper's last step shows the result beside reverse mode's
        steps[-1]["result"] = result
    return {"graph": trace.title, "mode": "forward", "error": trace.error, "steps": steps,
            "skipped": [], **result}


def explain(trace: ForwardTrace, reverse: Mapping[str, torch.Tensor | None]) -> str:
    """explain.txt's section "Forward mode, step by step"."""
    lines = [f"Forward mode, step by step ('{trace.title}'): each operation's value and "
             f"tangent, with tangent 1 for every input element", ""]
    if trace.error:
        return "\n".join(lines + [f"the forward-mode pass failed: {trace.error}", ""])
    for k, s in enumerate(trace.steps, 1):
        took = f" of {', '.join(s.inputs)}" if s.inputs else ""
        lines.append(f"step {k}: {s.op}{took}: value {in_brief(s.primal)}, tangent "
                     f"{in_brief(s.tangent)}")
    lines += ["", "J·v (forward mode, one pass): " + "; ".join(in_brief(t) for t in trace.jv),
              "vᵀ·J (reverse mode, one backward, v = 1): " + "; ".join(
                  f"{k}: {in_brief(g)}" for k, g in reverse.items()), "", *COSTS, ""]
    return "\n".join(lines)
