"""computation_graph: h = w * x + b, drawn three ways, from document 001.

1. x requires grad: x, w, b are the graph's leaves; h is its root.
2. x with requires_grad=False: x is cut out of the graph (no AccumulateGrad reaches it).
3. x.detach() in a second expression: the original graph keeps x; the detached copy shares
   x's storage but is not in any graph.

    python runner.py --config configs/computation_graph.yaml
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from demos.api import Result, Scenario, ScenarioConfig, graph_files, param, run_alone

if TYPE_CHECKING:
    from demos.api import Context


@dataclass
class Config(ScenarioConfig):
    """h = w*x + b three ways: x requiring grad, requires_grad=False, .detach() (doc 001)."""
    x: float = param(1.0, "the input x")
    w: float = param(4.0, "the weight w")
    b: float = param(0.5, "the bias b")


def tensor(value, ctx, requires_grad=True):
    import torch

    return torch.tensor([value], dtype=torch.float32, device=ctx.device,
                        requires_grad=requires_grad)  # (1,)


def contains(graph_of, t) -> bool:
    from demos.api import leaves

    return any(leaf is t for leaf in leaves(graph_of))


def with_requires_grad(cfg, ctx) -> list:
    import torch

    from demos.api import check, close, node_name

    x, w, b = tensor(cfg.x, ctx), tensor(cfg.w, ctx), tensor(cfg.b, ctx)
    h = ctx.forward(lambda: w * x + b, {"x": x, "w": w, "b": b}, name="graph_requires_grad")
    h.backward()
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


def without_requires_grad(cfg, ctx) -> list:

    from demos.api import check, node_name

    x = tensor(cfg.x, ctx, requires_grad=False)
    w, b = tensor(cfg.w, ctx), tensor(cfg.b, ctx)
    with ctx.saving("graph_no_grad"):  # what autograd saves here is counted for the graph
        h = w * x + b
    source = ctx.graph(h, {"x": x, "w": w, "b": b}, name="graph_no_grad")
    mul = h.grad_fn.next_functions[0][0]
    h.backward()
    return [
        check("no_grad: x.grad is None", x.grad is None, f"x.grad is {x.grad}"),
        check("no_grad: x is absent from the graph source",
              "x\n" not in source and "w\n" in source and "b\n" in source,
              "the torchviz source names w and b, not x"),
        check("no_grad: MulBackward0.next_functions = (AccumulateGrad, None)",
              [node_name(nf) for nf, _ in mul.next_functions] == ["AccumulateGrad", "None"],
              ", ".join(node_name(nf) for nf, _ in mul.next_functions)),
        check("no_grad: x is a leaf that requires no grad",
              x.is_leaf and not x.requires_grad and not contains(h, x),
              f"is_leaf {x.is_leaf}, requires_grad {x.requires_grad}"),
    ]


def with_detach(cfg, ctx) -> list:

    from demos.api import check
    x, w, b = tensor(cfg.x, ctx), tensor(cfg.w, ctx), tensor(cfg.b, ctx)
    with ctx.saving("graph_detach"):
        h = w * x + b
        x_detached = x.detach()
        h2 = w * x_detached + b
    ctx.graph((h, h2), {"h": h, "h2": h2, "x": x, "x_detached": x_detached, "w": w, "b": b},
              name="graph_detach")
    in_h, in_h2 = contains(h, x), contains(h2, x) or contains(h2, x_detached)
    h2.backward()
    after_h2 = x.grad
    h.backward()
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


def run(cfg: Config, ctx: Context) -> Result:
    found, h = with_requires_grad(cfg, ctx)
    found += without_requires_grad(cfg, ctx) + with_detach(cfg, ctx)
    return Result(metrics={"h": h}, checks=found)


SCENARIO = Scenario(
    name="computation_graph", config=Config, run=run, document="001", metrics=("h",),
    files=(*graph_files("graph_requires_grad", "graph_no_grad", "graph_detach"), "explain.txt"))


if __name__ == "__main__":
    run_alone(SCENARIO)
