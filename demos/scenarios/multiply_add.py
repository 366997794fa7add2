"""multiply_add: y = w * x + b as a custom Function; its grads, graph nodes and a short fit.

Document 000. Backward returns (g * x, None, g): x gets no gradient. The document's code comes
first, as it writes it: the Function, then its script as `document`, one forward and one
backward; the lab's hooks end in `# lab: ...`. Below "The lab": the document's walk by hand
(out.grad_fn is MultiplyAddBackward, its next_functions are (AccumulateGrad of w, None,
AccumulateGrad of b), each AccumulateGrad's .variable is the leaf itself), held as checks, and
a short fit of the layer.

    python runner.py multiply_add
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from demos.scenario_api import (
    TRAINING_FILES,
    Capability,
    Check,
    ConfigError,
    Result,
    Scenario,
    ScenarioConfig,
    graph_files,
    param,
    pass_files,
    run_alone,
    support_param,
)

if TYPE_CHECKING:
    from demos.scenario_api import Context

# == The tutorial ================================================================================


class MultiplyAdd(torch.autograd.Function):
    """y = w * x + b elementwise; x gets no gradient."""

    @staticmethod
    def forward(ctx, w, x, b):
        ctx.save_for_backward(x)
        return w * x + b

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        grad_w = grad_output * x  # dy/dw = x
        grad_b = grad_output * 1  # dy/db = 1
        return grad_w, None, grad_b


def document(ctx: Context) -> tuple[torch.Tensor, ...]:
    """The document's script: one forward, one backward, the leaves' grads."""
    w = torch.tensor([[1., 2], [3, 4]], device=ctx.device, requires_grad=True)
    x = torch.rand(2, 2, device=ctx.device)
    b = torch.tensor([[4., 3], [2, 1]], device=ctx.device, requires_grad=True)

    out = ctx.forward(lambda: MultiplyAdd.apply(w, x, b), {"w": w, "x": x, "b": b})  # lab: drawn
    out.backward(torch.ones(2, 2, device=ctx.device), retain_graph=True)
    return out, w, x, b


# == The lab: what the runner adds to the document ===============================================


@dataclass
class Config(ScenarioConfig):
    """A custom w*x + b Function: grads, grad_fn / next_functions, its graph, a short fit
    (doc 000)."""
    steps: int = param(300, "SGD steps of the fit to w*, b* (fresh random x each step)", ge=1,
                       le=10**9)
    lr: float = param(0.2, "learning rate of the fit", gt=0)
    true_w: list[list[float]] = param([[0.5, -1.0], [2.0, 1.5]], "w* the fit should find (2x2)")
    true_b: list[list[float]] = param([[0.1, 0.2], [-0.3, 0.4]], "b* the fit should find (2x2)")
    support: list[Capability] = support_param(forward_mode=False)

    def validate(self, where: str) -> None:
        for name in ("true_w", "true_b"):
            value = getattr(self, name)
            if len(value) != 2 or any(len(row) != 2 for row in value):
                raise ConfigError(f"{where}.{name}: must be a 2x2 list like [[1, 2], [3, 4]]")


def inspect(out, w, b, ctx: Context) -> tuple[dict, list[Check]]:
    """The document's walk from out.grad_fn, as recorded facts and checks."""
    from demos.scenario_api import check, node_name
    fn = out.grad_fn
    nexts = [nf for nf, _ in fn.next_functions]
    facts = {
        "out.grad_fn": node_name(fn),
        "out.grad_fn.next_functions": [node_name(nf) for nf in nexts],
        "next_functions[0][0].variable": str(nexts[0].variable.tolist()),
        "next_functions[2][0].variable": str(nexts[2].variable.tolist()),
    }
    for key, value in facts.items():
        ctx.log.info("  %s: %s", key, value)
    return facts, [
        check("grad_fn is MultiplyAddBackward", node_name(fn) == "MultiplyAddBackward",
              f"out.grad_fn is {node_name(fn)}"),
        check("next_functions = (AccumulateGrad, None, AccumulateGrad)",
              [node_name(nf) for nf in nexts] == ["AccumulateGrad", "None", "AccumulateGrad"],
              ", ".join(node_name(nf) for nf in nexts)),
        check("AccumulateGrad.variable is w and b",
              nexts[0].variable is w and nexts[2].variable is b,
              "next_functions[0][0].variable is w, next_functions[2][0].variable is b"),
    ]


def fit(cfg: Config, ctx: Context) -> Result:
    from demos.documents.functions import MultiplyAddModern, multiply_add_reference
    from demos.scenario_api import check, close, gradcheck, parity, support
    multiply_add = MultiplyAdd.apply
    dev = ctx.device

    out, w, x, b = document(ctx)  # the document's script, its forward drawn and traced
    facts, found = inspect(out, w, b, ctx)
    found += [
        close("w.grad equals x", w.grad, x),
        close("b.grad equals ones", b.grad, torch.ones(2, 2, device=dev)),
        check("x.grad is None", x.grad is None, f"x.grad is {x.grad}"),
        gradcheck("gradcheck", multiply_add, {"w": w, "x": x, "b": b}, ctx.check_device),
        parity("parity", multiply_add, multiply_add_reference, {"w": w, "x": x, "b": b},
               ctx.check_device),
    ]

    # the layer in use: learn w, b so that w * x + b matches w* * x + b* on fresh random x
    true_w = torch.tensor(cfg.true_w, device=dev)
    true_b = torch.tensor(cfg.true_b, device=dev)
    w = torch.zeros(2, 2, device=dev, requires_grad=True)
    b = torch.zeros(2, 2, device=dev, requires_grad=True)
    for t in ctx.steps(cfg.steps):
        x = torch.rand(2, 2, device=dev)
        loss = (multiply_add(w, x, b) - (true_w * x + true_b)).pow(2).sum()
        ctx.record(t, loss=loss)
        loss.backward()
        with torch.no_grad():
            w -= cfg.lr * w.grad
            b -= cfg.lr * b.grad
            w.grad = None
            b.grad = None

    params = {f"{name}[{i},{j}]": p[i, j].item() for name, p in (("w", w), ("b", b))
              for i in range(2) for j in range(2)}
    g = torch.Generator().manual_seed(ctx.seed)  # as the document has them: x needs no grad
    w0, x0, b0 = (torch.randn(2, 2, generator=g, dtype=torch.float64) for _ in range(3))
    twin_inputs = {"w": w0.requires_grad_(), "x": x0, "b": b0.requires_grad_()}
    if "forward_ad" in cfg.support:  # asked for: the twin's jvp, stepped
        ctx.forward_mode(MultiplyAddModern.apply, twin_inputs)
    matrix, supported = support.classic_and_twin(
        MultiplyAdd, MultiplyAddModern, multiply_add_reference, twin_inputs, ctx.check_device,
        cfg.support)
    return Result(
        metrics={"final_loss": ctx.last("loss"),
                 "w_error": (w - true_w).abs().max().item(),
                 "b_error": (b - true_b).abs().max().item()},
        params=params, checks=found + supported, inspection=facts, support=matrix)


SCENARIO = Scenario(
    name="multiply_add", config=Config, run=fit, document="000",
    params=tuple(f"{p}[{i},{j}]" for p in "wb" for i in range(2) for j in range(2)),
    metrics=("final_loss", "w_error", "b_error"),
    files=(*TRAINING_FILES, *graph_files("graph"), "explain.txt"),
    optional_files=pass_files("forward_mode"),  # with forward_ad among its support rows
    dry_run={"steps": 5})


if __name__ == "__main__":
    run_alone(SCENARIO)
