"""autograd_internals: how e.backward() reaches the leaves, from document 002.

a = 2, b = 3, c = a + b, d = 4, e = c * d. e.grad_fn (MulBackward0) points through
next_functions to c.grad_fn (AddBackward0) and to the AccumulateGrad of d; each AccumulateGrad's
.variable is the leaf object itself, whose .grad backward() fills. c, not a leaf, keeps no grad
unless asked to with c.retain_grad(). The document's code comes first, as it writes it, as
`document`; the lab's hooks end in `# lab: ...`; the walk, held as checks, is below "The lab".

    python runner.py autograd_internals
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from demos.scenario_api import Result, Scenario, ScenarioConfig, graph_files, param, run_alone

if TYPE_CHECKING:
    from demos.scenario_api import Context

# == The tutorial ================================================================================


def document(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """The document's script: e = (a + b) * d, and one backward from e."""
    a = torch.tensor(cfg.a, device=ctx.device, requires_grad=True)
    b = torch.tensor(cfg.b, device=ctx.device, requires_grad=True)
    c = a + b
    d = torch.tensor(cfg.d, device=ctx.device, requires_grad=True)
    e = ctx.forward(lambda: c * d, {"a": a, "b": b, "c": c, "d": d})  # lab: drawn and traced
    e.backward()
    return a, b, c, d, e


# == The lab: what the runner adds to the document ===============================================


@dataclass
class Config(ScenarioConfig):
    """How e.backward() reaches the leaves: grad_fn, next_functions, AccumulateGrad (doc 002)."""
    a: float = param(2.0, "the leaf a")
    b: float = param(3.0, "the leaf b")
    d: float = param(4.0, "the leaf d")


def follow_backward(cfg: Config, ctx: Context) -> Result:
    from demos.scenario_api import check, node_name

    a, b, c, d, e = document(cfg, ctx)  # the document's script, its forward drawn and traced
    # the walk: after backward the nodes are still there (only what they saved is freed)
    (add, _), (acc_d, _) = e.grad_fn.next_functions
    (acc_a, _), (acc_b, _) = add.next_functions
    walk = {
        "e.grad_fn": node_name(e.grad_fn),
        "e.grad_fn.next_functions": [node_name(add), node_name(acc_d)],
        "c.grad_fn.next_functions": [node_name(acc_a), node_name(acc_b)],
        "AccumulateGrad.variable is the leaf": [acc_a.variable is a, acc_b.variable is b,
                                                acc_d.variable is d],
    }
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c_grad = c.grad  # a non-leaf: None, and today torch warns about the access
    a2, b2, d2 = (torch.tensor(v, device=ctx.device, requires_grad=True)
                  for v in (cfg.a, cfg.b, cfg.d))
    c2 = a2 + b2
    c2.retain_grad()
    (c2 * d2).backward()
    for key, value in walk.items():
        ctx.log.info("  %s: %s", key, value)
    expected_c = cfg.a + cfg.b
    return Result(
        metrics={"e": e.item(), "a_grad": a.grad.item(), "b_grad": b.grad.item(),
                 "c_grad_retained": c2.grad.item(), "d_grad": d.grad.item()},
        inspection=walk,
        checks=[
            check("e.grad_fn is MulBackward0", node_name(e.grad_fn) == "MulBackward0",
                  node_name(e.grad_fn)),
            check("e.grad_fn.next_functions[0][0] is c.grad_fn (AddBackward0)",
                  add is c.grad_fn and node_name(add) == "AddBackward0", node_name(add)),
            check("AccumulateGrad.variable is the very leaf a, b, d",
                  all(walk["AccumulateGrad.variable is the leaf"]),
                  "acc.variable is a / b / d: "
                  f"{walk['AccumulateGrad.variable is the leaf']}"),
            check("a.grad = b.grad = d", a.grad.item() == b.grad.item() == cfg.d,
                  f"a.grad {a.grad.item()}, b.grad {b.grad.item()}"),
            check("d.grad = c = a + b", d.grad.item() == expected_c,
                  f"d.grad {d.grad.item()}"),
            check("c.grad is None: c is not a leaf", c_grad is None and not c.is_leaf,
                  f"c.grad is {c_grad}; reading it warned: "
                  f"{str(caught[0].message).split('. ')[0] if caught else 'no'}"),
            check("with c.retain_grad(), c.grad = d", c2.grad.item() == cfg.d,
                  f"c.grad {c2.grad.item()}"),
        ])


SCENARIO = Scenario(
    name="autograd_internals", config=Config, run=follow_backward, document="002",
    metrics=("e", "a_grad", "b_grad", "c_grad_retained", "d_grad"),
    files=(*graph_files("graph"), "explain.txt"))


if __name__ == "__main__":
    run_alone(SCENARIO)
