"""my_relu: a two-layer net y_pred = MyReLU(x @ w1) @ w2 trained by hand-written SGD.

Document 004, the official example at its end. MyReLU's backward zeroes the incoming
gradient where its input was negative; w1 and w2 learn by plain gradient descent.

    python runner.py --config configs/my_relu.yaml
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from demos.api import (
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
    from demos.api import Context


@dataclass
class Config(ScenarioConfig):
    """A custom ReLU Function inside a two-layer net trained by hand-written SGD (doc 004)."""
    N: int = param(64, "batch size", ge=1, le=10**7)
    D_in: int = param(1000, "input dimension", ge=1, le=10**7)
    H: int = param(100, "hidden dimension", ge=1, le=10**7)
    D_out: int = param(10, "output dimension", ge=1, le=10**7)
    steps: int = param(500, "SGD steps", ge=1, le=10**9)
    lr: float = param(1e-6, "learning rate of the hand-written SGD", gt=0)
    compile: bool = param(False, "run the loss (forward and backward) through torch.compile")
    support: list[Capability] = support_param()

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
    y_pred = relu(x.mm(w1)).mm(w2)  # (N, D_out)
    return (y_pred - y).pow(2).sum()


def run(cfg: Config, ctx: Context) -> Result:
    import torch

    from demos.api import gradcheck, parity, support
    from demos.documents.functions import MyReLU, MyReLUModern, relu_reference
    relu = MyReLU.apply
    N, D_in, H, D_out = cfg.N, cfg.D_in, cfg.H, cfg.D_out
    x = torch.randn(N, D_in).to(ctx.device)                     # (N, D_in)
    y = torch.randn(N, D_out).to(ctx.device)                    # (N, D_out)
    w1 = torch.randn(D_in, H).to(ctx.device).requires_grad_()   # (D_in, H)
    w2 = torch.randn(H, D_out).to(ctx.device).requires_grad_()  # (H, D_out)
    real = {"x": x, "y": y, "w1": w1.detach().clone().requires_grad_(),
            "w2": w2.detach().clone().requires_grad_()}

    ctx.forward(lambda: sse(x, y, w1, w2, relu), {"w1": w1, "w2": w2})
    loss_fn = torch.compile(sse) if cfg.compile else sse
    for t in ctx.steps(cfg.steps):
        loss = loss_fn(x, y, w1, w2, relu)  # sum of (MyReLU(x @ w1) @ w2 - y)^2
        ctx.record(t, loss=loss)
        loss.backward()
        with torch.no_grad():
            w1 -= cfg.lr * w1.grad
            w2 -= cfg.lr * w2.grad
            w1.grad = None
            w2.grad = None

    # gradcheck away from the kink at 0, where ReLU has no derivative
    g = torch.Generator().manual_seed(0)
    z = torch.randn(8, 5, generator=g, dtype=torch.float64)
    away = (z + 0.5 * z.sign()).requires_grad_()
    ctx.forward_mode(MyReLUModern.apply, {"x": away[:2]})  # the twin's jvp, stepped
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
    name="my_relu", config=Config, run=run, document="004, last example",
    metrics=("final_loss", "initial_loss"),
    files=(*TRAINING_FILES, *graph_files("graph"), *pass_files("forward_mode"), "explain.txt"),
    dry_run={"steps": 5})


if __name__ == "__main__":
    run_alone(SCENARIO)
