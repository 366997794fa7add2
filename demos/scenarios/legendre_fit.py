"""legendre_fit: y = a + b * P3(c + d * x) fits sin(x) on [-pi, pi], P3 a custom Function.

Document 003, example 2, which quotes PyTorch's tutorial "Learning PyTorch with Examples"
(PyTorch: Defining New autograd Functions). The tutorial's code comes first, as it writes it:
its Function, then its script as `train`. The lab's hooks in the loop end in `# lab: ...`;
everything the lab adds (the config, the pictures, the checks) is below "The lab".

    python runner.py legendre_fit
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from demos.documents.functions import legendre_p3_reference as p3  # the checks' ground truth
from demos.scenario_api import (
    TRAINING_FILES,
    Capability,
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


class LegendrePolynomial3(torch.autograd.Function):
    """
    We can implement our own custom autograd Functions by subclassing
    torch.autograd.Function and implementing the forward and backward passes
    which operate on Tensors.
    """

    @staticmethod
    def forward(ctx, input):
        """
        In the forward pass we receive a Tensor containing the input and return
        a Tensor containing the output. ctx is a context object that can be used
        to stash information for backward computation. You can cache arbitrary
        objects for use in the backward pass using the ctx.save_for_backward method.
        """
        ctx.save_for_backward(input)
        return 0.5 * (5 * input ** 3 - 3 * input)

    @staticmethod
    def backward(ctx, grad_output):
        """
        In the backward pass we receive a Tensor containing the gradient of the loss
        with respect to the output, and we need to compute the gradient of the loss
        with respect to the input.
        """
        input, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * input ** 2 - 1)  # P3'(x) = 1.5 (5x^2 - 1)


def train(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """The tutorial's script, its numbers from `cfg` (2000 points, 2000 steps, lr 5e-6):
    returns the weights a, b, c, d it learned."""
    # Create Tensors to hold input and outputs.
    x = torch.linspace(-math.pi, math.pi, cfg.points, device=ctx.device)
    y = torch.sin(x)

    # Create random Tensors for weights. For this example, we need
    # 4 weights: y = a + b * P3(c + d * x), these weights need to be initialized
    # not too far from the correct result to ensure convergence.
    a, b, c, d = (torch.full((), v, device=ctx.device, requires_grad=True) for v in cfg.init)

    learning_rate = cfg.lr
    for t in ctx.steps(cfg.steps):  # lab: range(2000), counted (and stopped if it diverges)
        # To apply our Function, we use Function.apply method. We alias this as 'P3'.
        P3 = LegendrePolynomial3.apply

        # Forward pass: compute predicted y using operations; we compute
        # P3 using our custom autograd operation.
        y_pred = a + b * P3(c + d * x)

        # Compute and print loss
        loss = (y_pred - y).pow(2).sum()
        ctx.record(t, loss=loss)  # lab: the loss curve (the tutorial prints it every 100)
        record_frame(ctx, t, cfg.steps, a=a, b=b, c=c, d=d)  # lab: the animation's frames

        # Use autograd to compute the backward pass.
        loss.backward()

        # Update weights using gradient descent
        with torch.no_grad():
            a -= learning_rate * a.grad
            b -= learning_rate * b.grad
            c -= learning_rate * c.grad
            d -= learning_rate * d.grad

            # Manually zero the gradients after updating weights
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None

    return a, b, c, d


# == The lab: what the runner adds to the tutorial ===============================================


@dataclass
class Config(ScenarioConfig):
    """A custom Function for the Legendre polynomial P3 fits sin(x) on [-pi, pi] (doc 003)."""
    points: int = param(2000, "number of x points in linspace(-pi, pi); at most 10**6 (each "
                              "step makes about ten tensors of this size)", ge=2, le=10**6)
    steps: int = param(2000, "SGD steps", ge=1, le=10**9)
    lr: float = param(5e-6, "learning rate of the hand-written SGD", gt=0)
    init: list[float] = param([0.0, -1.0, 0.0, 0.3], "initial a, b, c, d")
    support: list[Capability] = support_param(forward_mode=False)

    def validate(self, where: str) -> None:
        if len(self.init) != 4:
            raise ConfigError(f"{where}.init: must list 4 numbers (a, b, c, d), "
                              f"got {len(self.init)}")


def record_frame(ctx: Context, t: int, steps: int, **weights: torch.Tensor) -> None:
    """The weights at 20 steps of the loop (every 100 of 2000, where the tutorial prints the
    loss) and its last: the frames of fit.gif."""
    if t % max(1, steps // 20) == 0 or t == steps - 1:
        ctx.record(t, always=True, **weights)


def sse(x, y, a, b, c, d, P3=p3):
    """The tutorial's loss as one function of its tensors (for the graph and parity)."""
    return (a + b * P3(c + d * x) - y).pow(2).sum()


def fit(cfg: Config, ctx: Context) -> Result:
    from demos.documents.functions import LegendrePolynomial3Modern
    from demos.scenario_api import gradcheck, parity, support

    x = torch.linspace(-math.pi, math.pi, cfg.points, device=ctx.device)  # (points,)
    y = torch.sin(x)
    init = {k: torch.tensor(v, device=ctx.device, requires_grad=True)
            for k, v in zip("abcd", cfg.init)}
    start = sse_fit(x, *init.values())
    P3 = LegendrePolynomial3.apply
    ctx.forward(lambda: sse(x, y, *init.values(), P3), init)  # the graph the loop builds

    a, b, c, d = train(cfg, ctx)  # the tutorial, recorded

    fit = sse_fit(x, a, b, c, d)
    coefficients = ", ".join(f"{k} = {short(v.item())}" for k, v in zip("abcd", (a, b, c, d)))
    done = ctx.steps_run  # the loop stops early where the loss stops being finite
    after = f"after {done} steps" if done == cfg.steps else \
        f"stopped after {done} of {cfg.steps} steps"
    ctx.plot("fit.png", x.tolist(), {"sin(x)": y.tolist(), "start": start.tolist(),
                                     "fit": fit.tolist()},
             title=f"a + b P3(c + d x) {after}\n{coefficients}", xlabel="x", ylabel="y")
    xs = x.cpu().double()
    frames = [(f"step {r['step']}", sse_fit(xs, r["a"], r["b"], r["c"], r["d"]).tolist())
              for r in ctx.history() if "a" in r]
    ctx.animate("fit.gif", xs.tolist(), frames, {"sin(x)": y.tolist()},
                title="a + b P3(c + d x)", xlabel="x", ylabel="y", ms_per_frame=200)
    twin_inputs = {"x": torch.linspace(-1.5, 1.5, 7, dtype=torch.float64).requires_grad_()}
    if "forward_ad" in cfg.support:  # asked for: the twin's jvp, stepped
        ctx.forward_mode(LegendrePolynomial3Modern.apply, twin_inputs)
    matrix, supported = support.classic_and_twin(  # P3 and its twin, transform by transform
        LegendrePolynomial3, LegendrePolynomial3Modern, p3, twin_inputs, ctx.check_device,
        cfg.support)
    return Result(
        metrics={"final_loss": ctx.last("loss")},
        params={"a": a.item(), "b": b.item(), "c": c.item(), "d": d.item()}, support=matrix,
        checks=supported + [
            gradcheck("gradcheck", P3, {"x": torch.linspace(-1.5, 1.5, 7).requires_grad_()},
                      ctx.check_device),
            parity("parity", lambda *v: sse(*v, P3), lambda *v: sse(*v, p3),
                   {"x": x, "y": y, **init}, ctx.check_device),
        ])


def sse_fit(x, a, b, c, d):
    """y = a + b P3(c + d x), in plain torch, detached: a curve to draw."""
    with torch.no_grad():
        return a + b * p3(c + d * x)


def short(v: float) -> str:
    """A coefficient for the plot's title: 4 decimals, or 4 digits where it is huge."""
    return f"{v:.4g}" if abs(v) >= 1e4 or not math.isfinite(v) else \
        f"{v:.4f}".replace("-0.0000", "0.0000")


SCENARIO = Scenario(
    name="legendre_fit", config=Config, run=fit, document="003, example 2",
    params=("a", "b", "c", "d"), metrics=("final_loss",),
    files=(*TRAINING_FILES, *graph_files("graph"), "explain.txt",
           "fit.png", "fit.gif"),
    optional_files=pass_files("forward_mode"),  # with forward_ad among its support rows
    dry_run={"steps": 5})


if __name__ == "__main__":
    run_alone(SCENARIO)
