"""my_relu: a two-layer net y_pred = MyReLU(x @ w1) @ w2 trained by hand-written SGD.

Document 004, the official example at its end: PyTorch's tutorial "Learning PyTorch with
Examples" (PyTorch: Defining new autograd functions, the two-layer net). The tutorial's code
comes first, as it writes it: its Function, then its script as `data` and `train`. The lab's
hooks in the loop end in `# lab: ...`; everything the lab adds is below "The lab".

    python runner.py my_relu
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

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


class MyReLU(torch.autograd.Function):
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
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        """
        In the backward pass we receive a Tensor containing the gradient of the loss
        with respect to the output, and we need to compute the gradient of the loss
        with respect to the input.
        """
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0  # ReLU'(x) = 1 where x > 0, else 0
        return grad_input


def data(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """The tutorial's tensors: x, y and the weights w1, w2 it starts from."""
    # N is batch size; D_in is input dimension;
    # H is hidden dimension; D_out is output dimension.
    N, D_in, H, D_out = cfg.N, cfg.D_in, cfg.H, cfg.D_out

    # Create random Tensors to hold input and outputs.
    x = torch.randn(N, D_in, device=ctx.device)
    y = torch.randn(N, D_out, device=ctx.device)

    # Create random Tensors for weights.
    w1 = torch.randn(D_in, H, device=ctx.device, requires_grad=True)
    w2 = torch.randn(H, D_out, device=ctx.device, requires_grad=True)
    return x, y, w1, w2


def train(cfg: Config, ctx: Context, x, y, w1, w2) -> None:
    """The tutorial's loop: w1 and w2 learn in place."""
    learning_rate = cfg.lr
    for t in ctx.steps(cfg.steps):  # lab: range(500), counted (and stopped if it diverges)
        # To apply our Function, we use Function.apply method. We alias this as 'relu'.
        relu = MyReLU.apply

        # Forward pass: compute predicted y using operations; we compute
        # ReLU using our custom autograd operation.
        y_pred = relu(x.mm(w1)).mm(w2)

        # Compute and print loss
        loss = (y_pred - y).pow(2).sum()
        ctx.record(t, loss=loss)  # lab: the loss curve (the tutorial prints it)

        # Use autograd to compute the backward pass.
        loss.backward()

        # Update weights using gradient descent
        with torch.no_grad():
            w1 -= learning_rate * w1.grad
            w2 -= learning_rate * w2.grad

            # Manually zero the gradients after updating weights
            w1.grad = None
            w2.grad = None


# == The lab: what the runner adds to the tutorial ===============================================


@dataclass
class Config(ScenarioConfig):
    """A custom ReLU Function inside a two-layer net trained by hand-written SGD (doc 004)."""
    N: int = param(64, "batch size", ge=1, le=10**7)
    D_in: int = param(1000, "input dimension", ge=1, le=10**7)
    H: int = param(100, "hidden dimension", ge=1, le=10**7)
    D_out: int = param(10, "output dimension", ge=1, le=10**7)
    steps: int = param(500, "SGD steps", ge=1, le=10**9)
    lr: float = param(1e-6, "learning rate of the hand-written SGD", gt=0)
    support: list[Capability] = support_param(forward_mode=False)

    def validate(self, where: str) -> None:
        # every tensor of a step: x, w1, w2, their grads, h and relu(h) (and their grads),
        # y, y_pred and its grad
        size = (self.N * self.D_in + 2 * (self.D_in * self.H + self.H * self.D_out)
                + 4 * self.N * self.H + 3 * self.N * self.D_out)
        if size > 10**8:
            raise ConfigError(f"{where}: a training step would hold {size:,} numbers (x, y, "
                              f"the weights, the hidden layer and their gradients), more than "
                              f"100,000,000 (400 MB in float32); make N, D_in, H or D_out "
                              f"smaller")


def sse(x, y, w1, w2, relu):
    """The tutorial's loss as one function of its tensors (for the graph and parity)."""
    y_pred = relu(x.mm(w1)).mm(w2)  # (N, D_out)
    return (y_pred - y).pow(2).sum()


def train_and_check(cfg: Config, ctx: Context) -> Result:
    from demos.documents.functions import MyReLUModern, relu_reference
    from demos.scenario_api import gradcheck, parity, support

    relu = MyReLU.apply
    x, y, w1, w2 = data(cfg, ctx)
    real = {"x": x, "y": y, "w1": w1.detach().clone().requires_grad_(),
            "w2": w2.detach().clone().requires_grad_()}  # the start, for parity
    ctx.forward(lambda: sse(x, y, w1, w2, relu), {"w1": w1, "w2": w2})  # the loop's graph

    train(cfg, ctx, x, y, w1, w2)  # the tutorial, recorded

    # gradcheck away from the kink at 0, where ReLU has no derivative
    g = torch.Generator().manual_seed(0)
    z = torch.randn(8, 5, generator=g, dtype=torch.float64)
    away = (z + 0.5 * z.sign()).requires_grad_()
    if "forward_ad" in cfg.support:  # asked for: the twin's jvp, stepped
        ctx.forward_mode(MyReLUModern.apply, {"x": away[:2]})
    matrix, supported = support.classic_and_twin(MyReLU, MyReLUModern, relu_reference,
                                                 {"x": away[:2]}, ctx.check_device, cfg.support)
    return Result(
        metrics={"final_loss": ctx.last("loss"), "initial_loss": ctx.history()[0]["loss"]},
        support=matrix, checks=supported + [
            gradcheck("gradcheck", relu, {"x": away}, ctx.check_device),
            parity("parity", lambda *v: sse(*v, relu),
                   lambda *v: sse(*v, relu_reference), real, ctx.check_device),
        ])


SCENARIO = Scenario(
    name="my_relu", config=Config, run=train_and_check, document="004, last example",
    metrics=("final_loss", "initial_loss"),
    files=(*TRAINING_FILES, *graph_files("graph"), "explain.txt"),
    optional_files=pass_files("forward_mode"),  # with forward_ad among its support rows
    dry_run={"steps": 5})


if __name__ == "__main__":
    run_alone(SCENARIO)
