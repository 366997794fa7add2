"""linear_function: LinearFunction (input @ weight.T + bias) and a Linear nn.Module on it.

Document 004. The backward computes only the gradients ctx.needs_input_grad asks for; gradcheck
checks it as the document does (double inputs, eps 1e-6, atol 1e-4); then a small regression
trains the custom Linear layer to recover a known weight and bias.

    python runner.py --config configs/linear_function.yaml
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from demos.api import (
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
    from demos.api import Context


@dataclass
class Config(ScenarioConfig):
    """LinearFunction with needs_input_grad and gradcheck; a Linear module trained on it
    (doc 004)."""
    N: int = param(256, "samples in the regression y = x W*^T + b* + noise (W*, b*, x drawn "
                        "under the seed)", ge=1, le=10**7)
    in_features: int = param(5, "input features", ge=1, le=10**5)
    out_features: int = param(3, "output features", ge=1, le=10**5)
    noise: float = param(0.01, "std of the noise added to the targets", ge=0)
    steps: int = param(300, "SGD steps", ge=1, le=10**9)
    lr: float = param(0.1, "learning rate", gt=0)
    support: list[Capability] = support_param()

    def validate(self, where: str) -> None:
        # x, y and the prediction, the true and the trained weights (and its gradient)
        size = self.N * self.in_features + 3 * self.N * self.out_features \
            + 3 * self.in_features * self.out_features
        if size > 10**8:
            raise ConfigError(f"{where}: a training step would hold {size:,} numbers (x, y, "
                              f"the weights and their gradients), more than 100,000,000 "
                              f"(400 MB in float32); make N, in_features or out_features "
                              f"smaller")


def only_input_grad(ctx: Context) -> Check:
    """With only the input requiring grad, backward computes no weight or bias grad."""
    import torch

    from demos.api import check
    from demos.documents.functions import LinearFunction
    input = torch.randn(4, 3, device=ctx.device, requires_grad=True)
    weight, bias = torch.randn(2, 3, device=ctx.device), torch.randn(2, device=ctx.device)
    out = LinearFunction.apply(input, weight, bias)
    # autograd calls backward with the graph node as ctx; so can we, to see what it returns
    grads = LinearFunction.backward(out.grad_fn, torch.ones_like(out))
    shapes = [None if g is None else tuple(g.shape) for g in grads]
    return check("only the input requires grad: backward returns (grad, None, None)",
                 shapes == [(4, 3), None, None] and out.grad_fn.needs_input_grad
                 == (True, False, False), f"needs_input_grad "
                 f"{out.grad_fn.needs_input_grad}, backward returned shapes {shapes}")


def run(cfg: Config, ctx: Context) -> Result:
    import torch

    from demos.api import check, gradcheck, parity, support
    from demos.documents.functions import LinearFunction, LinearFunctionModern, linear_reference
    from demos.documents.models import Linear

    g = torch.Generator().manual_seed(ctx.seed)
    doc = {"input": torch.randn(20, 20, generator=g, dtype=torch.float64, requires_grad=True),
           "weight": torch.randn(30, 20, generator=g, dtype=torch.float64, requires_grad=True),
           "bias": torch.randn(30, generator=g, dtype=torch.float64, requires_grad=True)}
    found = [
        gradcheck("gradcheck", LinearFunction.apply, doc, ctx.check_device,
                  eps=1e-6, atol=1e-4),
        parity("parity vs F.linear", LinearFunction.apply, linear_reference, doc,
               ctx.check_device),
        only_input_grad(ctx),
    ]

    true_w = torch.randn(cfg.out_features, cfg.in_features, generator=g).to(ctx.device)
    true_b = torch.randn(cfg.out_features, generator=g).to(ctx.device)
    x = torch.randn(cfg.N, cfg.in_features, generator=g).to(ctx.device)       # (N, in)
    noise = cfg.noise * torch.randn(cfg.N, cfg.out_features, generator=g)
    y = x @ true_w.T + true_b + noise.to(ctx.device)                           # (N, out)
    model = Linear(cfg.in_features, cfg.out_features).to(ctx.device)
    found.append(check("Linear registers weight and bias as parameters",
                       [n for n, _ in model.named_parameters()] == ["weight", "bias"],
                       str([n for n, _ in model.named_parameters()])))
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    ctx.forward(lambda: (model(x) - y).pow(2).mean(), {**dict(model.named_parameters()), "x": x})
    for t in ctx.steps(cfg.steps):
        loss = (model(x) - y).pow(2).mean()
        ctx.record(t, loss=loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
    g = torch.Generator().manual_seed(ctx.seed)
    twin_inputs = {k: torch.randn(s, generator=g, dtype=torch.float64).requires_grad_()
                   for k, s in (("input", (4, 3)), ("weight", (2, 3)), ("bias", (2,)))}
    ctx.forward_mode(LinearFunctionModern.apply, twin_inputs)  # the twin's jvp, stepped
    matrix, supported = support.classic_and_twin(
        LinearFunction, LinearFunctionModern, linear_reference, twin_inputs,
        ctx.check_device, cfg.support)
    return Result(
        metrics={"final_loss": ctx.last("loss"),
                 "weight_error": (model.weight - true_w).abs().max().item(),
                 "bias_error": (model.bias - true_b).abs().max().item()},
        checks=found + supported, support=matrix)


SCENARIO = Scenario(
    name="linear_function", config=Config, run=run, document="004",
    metrics=("final_loss", "weight_error", "bias_error"),
    files=(*TRAINING_FILES, *graph_files("graph"), *pass_files("forward_mode"), "explain.txt"),
    dry_run={"steps": 5})


if __name__ == "__main__":
    run_alone(SCENARIO)
