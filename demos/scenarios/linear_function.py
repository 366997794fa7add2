"""linear_function: LinearFunction (input @ weight.T + bias) and a Linear nn.Module on it.

Document 004, which quotes PyTorch's "Extending PyTorch" page. Its code comes first, as the
page writes it: LinearFunction, whose backward computes only the gradients ctx.needs_input_grad
asks for, and the Linear module built on it; then the lab's use of them (`data`, `train`): a
small regression trains the custom Linear layer to recover a known weight and bias. The lab's
hooks end in `# lab: ...`; below "The lab", gradcheck checks LinearFunction as the document does
(double inputs, eps 1e-6, atol 1e-4), with parity and the support matrix.

    python runner.py --config configs/linear_function.yaml
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

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


# Inherit from Function
class LinearFunction(torch.autograd.Function):

    # Note that forward and backward are @staticmethods
    @staticmethod
    # bias is an optional argument
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())               # (N, out)
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    # This function has only a single output, so it gets only one gradient
    @staticmethod
    def backward(ctx, grad_output):
        # This is a pattern that is very convenient - at the top of backward
        # unpack saved_tensors and initialize all gradients w.r.t. inputs to
        # None. Thanks to the fact that additional trailing Nones are
        # ignored, the return statement is simple even when the function has
        # optional inputs.
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None

        # These needs_input_grad checks are optional and there only to
        # improve efficiency. If you want to make your code simpler, you can
        # skip them. Returning gradients for inputs that don't require it is
        # not an error.
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)     # dy/dinput = weight
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)  # dy/dweight = input
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)          # dy/dbias = 1, summed over the batch

        return grad_input, grad_weight, grad_bias


class Linear(nn.Module):
    def __init__(self, input_features, output_features, bias=True):
        super().__init__()
        self.input_features = input_features
        self.output_features = output_features

        # nn.Parameter is a special kind of Tensor, that will get
        # automatically registered as Module's parameter once it's assigned
        # as an attribute. Parameters and buffers need to be registered, or
        # they won't appear in .parameters() (doesn't apply to buffers), and
        # won't be converted when e.g. .cuda() is called. You can use
        # .register_buffer() to register buffers.
        # nn.Parameters require gradients by default.
        self.weight = nn.Parameter(torch.empty(output_features, input_features))
        if bias:
            self.bias = nn.Parameter(torch.empty(output_features))
        else:
            # You should always register all possible parameters, but the
            # optional ones can be None if you want.
            self.register_parameter("bias", None)

        # Not a very smart way to initialize weights
        nn.init.uniform_(self.weight, -0.1, 0.1)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -0.1, 0.1)

    def forward(self, input):
        # See the autograd section for explanation of what happens here.
        return LinearFunction.apply(input, self.weight, self.bias)


def data(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """The document's gradcheck inputs (double, as gradcheck needs; with a bias), then a
    regression for the Linear layer to learn: y = x W*^T + b* + noise, drawn under the seed."""
    g = torch.Generator().manual_seed(ctx.seed)
    input = torch.randn(20, 20, generator=g, dtype=torch.double, requires_grad=True)
    weight = torch.randn(30, 20, generator=g, dtype=torch.double, requires_grad=True)
    bias = torch.randn(30, generator=g, dtype=torch.double, requires_grad=True)

    true_w = torch.randn(cfg.out_features, cfg.in_features, generator=g).to(ctx.device)
    true_b = torch.randn(cfg.out_features, generator=g).to(ctx.device)
    x = torch.randn(cfg.N, cfg.in_features, generator=g).to(ctx.device)       # (N, in)
    noise = cfg.noise * torch.randn(cfg.N, cfg.out_features, generator=g)
    y = x @ true_w.T + true_b + noise.to(ctx.device)                           # (N, out)
    return input, weight, bias, true_w, true_b, x, y


def train(cfg: Config, ctx: Context, x: torch.Tensor, y: torch.Tensor) -> Linear:
    """A Linear layer on LinearFunction, fitted to (x, y) by SGD on the mean squared error."""
    model = Linear(cfg.in_features, cfg.out_features).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    names = {**dict(model.named_parameters()), "x": x}  # lab: the graph's labels
    ctx.forward(lambda: (model(x) - y).pow(2).mean(), names)  # lab: the graph, drawn, traced
    for t in ctx.steps(cfg.steps):
        loss = (model(x) - y).pow(2).mean()
        ctx.record(t, loss=loss)  # lab: the loss curve
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


# == The lab: what the runner adds to the document ===============================================


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
    from demos.scenario_api import check

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


def fit(cfg: Config, ctx: Context) -> Result:
    from demos.documents.functions import LinearFunctionModern, linear_reference
    from demos.scenario_api import check, gradcheck, parity, support

    input, weight, bias, true_w, true_b, x, y = data(cfg, ctx)
    doc = {"input": input, "weight": weight, "bias": bias}
    found = [
        gradcheck("gradcheck", LinearFunction.apply, doc, ctx.check_device,
                  eps=1e-6, atol=1e-4),
        parity("parity vs F.linear", LinearFunction.apply, linear_reference, doc,
               ctx.check_device),
        only_input_grad(ctx),
    ]
    model = train(cfg, ctx, x, y)  # the document's Linear, trained
    found.append(check("Linear registers weight and bias as parameters",
                       [n for n, _ in model.named_parameters()] == ["weight", "bias"],
                       str([n for n, _ in model.named_parameters()])))
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
    name="linear_function", config=Config, run=fit, document="004",
    metrics=("final_loss", "weight_error", "bias_error"),
    files=(*TRAINING_FILES, *graph_files("graph"), *pass_files("forward_mode"), "explain.txt"),
    dry_run={"steps": 5})


if __name__ == "__main__":
    run_alone(SCENARIO)
