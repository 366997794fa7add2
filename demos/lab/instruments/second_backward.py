"""The second backward: the backward of a gradient, node by node, and its check
(demos/docs/backward.md#the-second-backward).

Its graph reuses the forward's nodes (the gradient of x*x depends on x through the forward's
saved tensors), so `made_by` says, node by node, which pass made it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from demos.lab.core.results import Check
from demos.lab.core.text import one_line
from demos.lab.core.tolerance import FLOAT64_TOL
from demos.lab.instruments.walk import nodes
from demos.lab.tensors import abs_error, fresh, in_brief, output_tensors, same

FORWARD, FIRST, ROOT = "the forward", "the first backward", "the sum that starts the second pass"


@dataclass
class FirstPass:
    """The forward and its create_graph backward, on fresh copies of the inputs."""
    inputs: dict[str, torch.Tensor]
    outputs: tuple[torch.Tensor, ...] = ()
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    root: torch.Tensor | None = None  # s: the sum of every gradient element
    # the forward graph's nodes, and the gradients' graph's: which pass made a node
    forward_nodes: set[Any] = field(default_factory=set)
    gradient_nodes: set[Any] = field(default_factory=set)
    error: str | None = None
    # with no graph (root None): whether the gradients are the same at a nearby point, so that
    # the second derivative is zero (a linear Function), not lost to a detaching backward
    constant: bool = False


def first_pass(run: Callable[..., Any], inputs: Mapping[str, torch.Tensor]) -> FirstPass:
    """Forward, then backward with create_graph=True; `root` is None when the gradients are
    in no graph (a backward autograd cannot differentiate)."""
    out = FirstPass(fresh(inputs, dtype=None))
    try:
        out.outputs, out.grads = gradients(run, out.inputs, create_graph=True)
    except Exception as e:  # a user's backward that raises under create_graph
        out.error = one_line(e, 300)
        return out
    out.forward_nodes = set(nodes(out.outputs))
    made = [g for g in out.grads.values() if g is not None and g.grad_fn is not None]
    out.gradient_nodes = set(nodes(made))
    parts = [g.sum() for g in made]
    if parts:
        out.root = torch.stack(parts).sum() if len(parts) > 1 else parts[0]
    else:
        out.constant = unchanged_nearby(run, inputs, out.grads)
    return out


def gradients(run: Callable[..., Any], xs: Mapping[str, torch.Tensor], create_graph: bool
              ) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor | None]]:
    """The outputs of `run(*xs)` that are in a graph, and the gradient of each input that
    requires grad, for gradient 1 on every output element."""
    need = {k: v for k, v in xs.items() if v.requires_grad}
    outs = tuple(r for r in output_tensors(run(*xs.values())) if r.grad_fn is not None)
    grads = torch.autograd.grad(outs, list(need.values()), [torch.ones_like(o) for o in outs],
                                create_graph=create_graph, allow_unused=True)
    return outs, dict(zip(need, grads))


def unchanged_nearby(run: Callable[..., Any], inputs: Mapping[str, torch.Tensor],
                     grads: Mapping[str, torch.Tensor | None]) -> bool:
    """Whether the gradients at a nearby point (every input that requires grad moved a
    little, at random) are the gradients at the inputs: true of a linear Function, whose
    second derivative is zero, and not of a backward that merely detaches a gradient that
    does depend on the inputs."""
    g = torch.Generator().manual_seed(2)
    there = fresh(inputs, dtype=None)
    with torch.no_grad():
        for v in there.values():
            if v.requires_grad:
                v += 1e-3 * torch.randn(v.shape, generator=g, dtype=v.dtype).to(v.device)
    try:
        again = gradients(run, there, create_graph=False)[1]
    except Exception:
        return False
    return all(same(grads.get(k), a, *FLOAT64_TOL, equal_nan=True) for k, a in again.items())


def made_by(first: FirstPass, fn: Any) -> str:
    """Which pass made the node `fn` of the second pass's graph."""
    if fn in first.forward_nodes:
        return FORWARD
    return FIRST if fn in first.gradient_nodes else ROOT


def labels(first: FirstPass) -> dict[str, torch.Tensor]:
    """The names the second pass's graph is drawn and traced with: the inputs, the gradients
    ("grad x") and the root ("sum of the gradients")."""
    named: dict[str, torch.Tensor] = dict(first.inputs)
    named.update({f"grad {k}": g for k, g in first.grads.items() if g is not None})
    if first.root is not None:
        named["sum of the gradients"] = first.root
    return named


def second_derivatives(first: FirstPass) -> dict[str, torch.Tensor | None]:
    """d(root)/d(input) for every input that requires grad, by torch.autograd.grad."""
    need = {k: v for k, v in first.inputs.items() if v.requires_grad}
    got = torch.autograd.grad(first.root, list(need.values()), retain_graph=True,
                              allow_unused=True)
    return dict(zip(need, got))


def agrees(first: FirstPass, reference: FirstPass | None = None,
           title: str = "second backward") -> Check | None:
    """'second backward agrees' (demos/docs/backward.md#the-second-backward); None where there
    is nothing to hold the second derivatives to (no reference)."""
    name = f"second backward agrees: {title}"
    if first.error:
        return Check(name, False, f"the create_graph backward failed: {first.error}")
    if first.root is None and first.constant:
        return Check(name, True, "the gradients do not depend on the inputs (the same at a "
                                 "nearby point): the second derivative is zero, and there is "
                                 "no second backward to draw or trace")
    if first.root is None:
        return Check(name, False, "the first backward built no graph: its gradients do not "
                                  "depend on the inputs through autograd (a backward that "
                                  "detaches, goes through numpy or is @once_differentiable), "
                                  "so there is no second backward")
    if reference is None or reference.root is None:
        return None
    mine = second_derivatives(first)
    if not all(same(g, reference.grads.get(k), *FLOAT64_TOL, equal_nan=True)
               for k, g in first.grads.items()):
        # a wrong first derivative makes every second one wrong: that is parity's failure,
        # counted once there
        return Check(name, True, f"not compared with the reference's, for "
                                 f"{', '.join(mine) or 'no input'}: the first derivatives "
                                 f"already differ from it (the parity check)")
    ref = second_derivatives(reference)
    for k in mine:  # the inputs that require grad, in order
        if not same(mine[k], ref.get(k), *FLOAT64_TOL, equal_nan=True):
            worst = abs_error(mine[k], ref[k]).max().item() if mine[k] is not None and \
                ref.get(k) is not None else None
            return Check(name, False, f"second derivatives of {k} differ from the "
                                      f"reference's: {in_brief(mine[k])} against "
                                      f"{in_brief(ref.get(k))}" +
                                      (f" (max abs err {worst:.3g})" if worst else ""))
    return Check(name, True, f"d/dx of the sum of the gradients equals the reference's, for "
                             f"{', '.join(mine) or 'no input'}")


def explain(first: FirstPass, traced: Any) -> str:
    """explain.txt's section "The second backward"."""
    lines = ["The second backward: the backward of the gradients (create_graph=True)", ""]
    if first.error or first.root is None or traced is None:
        why = first.error or "the first backward built no graph: there is no second backward"
        return "\n".join(lines + [why, ""])
    ours = [s.fn for s in traced.steps]
    made = {who: sum(made_by(first, fn) == who for fn in ours) for who in (FIRST, FORWARD, ROOT)}
    lines += [f"root: the sum of every element of {', '.join(f'grad {k}' for k in first.grads)}",
              f"{len(ours)} nodes ran: {made[FIRST]} made by the first backward (it recorded "
              f"its own operations), {made[FORWARD]} by the forward (reached through what the "
              f"first backward saved), {made[ROOT]} by the sum that starts the second pass", ""]
    for k, s in enumerate(traced.steps, 1):
        lines.append(f"step {k}: {traced.label(s.fn)}, made by {made_by(first, s.fn)}")
    lines.append("")
    return "\n".join(lines)
