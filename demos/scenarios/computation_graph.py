"""computation_graph: h = w * x + b, drawn three ways, from document 001.

1. x requires grad: x, w, b are the graph's leaves; h is its root.
2. x with requires_grad=False: x is cut out of the graph (no AccumulateGrad reaches it).
3. x.detach() in a second expression: the original graph keeps x; the detached copy shares
   x's storage but is not in any graph.

The document's code comes first, one function per way; the lab's hooks end in `# lab: ...`
(a graph drawn before backward runs, what autograd saved counted); the checks of what each way
shows are below "The lab".

    python runner.py --config configs/computation_graph.yaml
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from demos.scenario_api import Result, Scenario, ScenarioConfig, graph_files, param, run_alone

if TYPE_CHECKING:
    from demos.scenario_api import Check, Context

# == The tutorial ================================================================================


def requires_grad(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """x, w and b require grad: they are the graph's leaves, h = w * x + b its root."""
    x = torch.tensor([cfg.x], device=ctx.device, requires_grad=True)
    w = torch.tensor([cfg.w], device=ctx.device, requires_grad=True)
    b = torch.tensor([cfg.b], device=ctx.device, requires_grad=True)
    h = ctx.forward(lambda: w * x + b, {"x": x, "w": w, "b": b}, name="graph_requires_grad")
    h.backward()  # w.grad = x, b.grad = 1, x.grad = w
    return x, w, b, h


def no_grad(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """x with requires_grad=False: h's graph does not reach it, and x.grad stays None."""
    x = torch.tensor([cfg.x], device=ctx.device, requires_grad=False)
    w = torch.tensor([cfg.w], device=ctx.device, requires_grad=True)
    b = torch.tensor([cfg.b], device=ctx.device, requires_grad=True)
    h = ctx.forward(lambda: w * x + b, {"x": x, "w": w, "b": b}, name="graph_no_grad")
    h.backward()  # w.grad = x, b.grad = 1; x.grad is None
    return x, w, b, h


def detach(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """x.detach() in a second expression: h's graph keeps x; the detached copy shares its
    storage but is in no graph, so h2.backward() leaves x.grad alone."""
    x = torch.tensor([cfg.x], device=ctx.device, requires_grad=True)
    w = torch.tensor([cfg.w], device=ctx.device, requires_grad=True)
    b = torch.tensor([cfg.b], device=ctx.device, requires_grad=True)
    h = w * x + b
    x_detached = x.detach()
    h2 = w * x_detached + b
    ctx.graph((h, h2), {"h": h, "h2": h2, "x": x, "x_detached": x_detached, "w": w,  # lab: drawn
                        "b": b}, name="graph_detach")
    h2.backward()
    x_grad_after_h2 = x.grad  # None: h2's graph does not reach x
    h.backward()  # x.grad = w
    return x, x_detached, w, b, h, h2, x_grad_after_h2


# == The lab: what the runner adds to the document ===============================================


@dataclass
class Config(ScenarioConfig):
    """h = w*x + b three ways: x requiring grad, requires_grad=False, .detach() (doc 001)."""
    x: float = param(1.0, "the input x")
    w: float = param(4.0, "the weight w")
    b: float = param(0.5, "the bias b")


def contains(graph_of, t) -> bool:
    """Whether backward from `graph_of` reaches the tensor `t` (as a leaf it accumulates)."""
    from demos.scenario_api import leaves

    return any(leaf is t for leaf in leaves(graph_of))


def with_requires_grad(cfg: Config, ctx: Context) -> tuple[list[Check], float]:
    from demos.scenario_api import check, close, node_name

    x, w, b, h = requires_grad(cfg, ctx)
    return [
        check("requires_grad: x, w, b are leaves, h is not",
              x.is_leaf and w.is_leaf and b.is_leaf and not h.is_leaf,
              f"is_leaf: x {x.is_leaf}, w {w.is_leaf}, b {b.is_leaf}, h {h.is_leaf}"),
        check("requires_grad: h.grad_fn is AddBackward0, leaves have none",
              node_name(h.grad_fn) == "AddBackward0" and x.grad_fn is None,
              f"h.grad_fn {node_name(h.grad_fn)}, x.grad_fn {x.grad_fn}"),
        close("requires_grad: w.grad = x", w.grad, x.detach()),
        close("requires_grad: b.grad = 1", b.grad, torch.ones_like(b)),
        close("requires_grad: x.grad = w", x.grad, w.detach()),
    ], h.item()


def with_no_grad(cfg: Config, ctx: Context) -> list[Check]:
    from demos.scenario_api import check, node_name

    x, w, b, h = no_grad(cfg, ctx)
    mul = h.grad_fn.next_functions[0][0]  # the nodes stay after backward (their saves go)
    reached = [name for name, t in (("x", x), ("w", w), ("b", b)) if contains(h, t)]
    return [
        check("no_grad: x.grad is None", x.grad is None, f"x.grad is {x.grad}"),
        check("no_grad: the graph reaches w and b, not x", reached == ["w", "b"],
              f"leaves reached from h: {', '.join(reached)}"),
        check("no_grad: MulBackward0.next_functions = (AccumulateGrad, None)",
              [node_name(nf) for nf, _ in mul.next_functions] == ["AccumulateGrad", "None"],
              ", ".join(node_name(nf) for nf, _ in mul.next_functions)),
        check("no_grad: x is a leaf that requires no grad",
              x.is_leaf and not x.requires_grad,
              f"is_leaf {x.is_leaf}, requires_grad {x.requires_grad}"),
    ]


def with_detach(cfg: Config, ctx: Context) -> list[Check]:
    from demos.scenario_api import check

    x, x_detached, w, b, h, h2, after_h2 = detach(cfg, ctx)
    in_h, in_h2 = contains(h, x), contains(h2, x) or contains(h2, x_detached)
    return [
        check("detach: the original graph keeps x; the copy is in no graph",
              in_h and not in_h2, f"x is a leaf of h: {in_h}; of h2: {in_h2}"),
        check("detach: the copy shares x's storage",
              x_detached.data_ptr() == x.data_ptr(),
              f"data_ptr equal: {x_detached.data_ptr() == x.data_ptr()}"),
        check("detach: the copy has no grad_fn and requires no grad",
              x_detached.grad_fn is None and not x_detached.requires_grad,
              f"grad_fn {x_detached.grad_fn}, requires_grad {x_detached.requires_grad}"),
        check("detach: h2.backward() leaves x.grad alone; h.backward() fills it",
              after_h2 is None and x.grad is not None and x.grad.item() == cfg.w,
              f"x.grad after h2.backward(): {after_h2}; after h.backward(): "
              f"{None if x.grad is None else x.grad.item()}"),
    ]


def build_graphs(cfg: Config, ctx: Context) -> Result:
    found, h = with_requires_grad(cfg, ctx)
    found += with_no_grad(cfg, ctx) + with_detach(cfg, ctx)
    return Result(metrics={"h": h}, checks=found)


SCENARIO = Scenario(
    name="computation_graph", config=Config, run=build_graphs, document="001", metrics=("h",),
    files=(*graph_files("graph_requires_grad", "graph_no_grad", "graph_detach"), "explain.txt"))


if __name__ == "__main__":
    run_alone(SCENARIO)
