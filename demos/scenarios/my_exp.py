"""my_exp: MyExp, a custom exp that saves its output for backward, from document 003.

Document 003, example 1 (PyTorch's own `Exp` of "Extending PyTorch"): since d exp(x)/dx =
exp(x), backward needs the forward's *result*, not its input, so MyExp saves its output. The
document's code comes first, as it writes it: the Function, then its script as `compare`, whose
MyExp gradients must equal the built-in exp's. The lab's hooks end in `# lab: ...`; everything
the lab adds is below "The lab".

    python runner.py my_exp
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from demos.scenario_api import (
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


class MyExp(torch.autograd.Function):
    """y = exp(x): it saves its *output*, since exp' = exp."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        return grad_output * y  # d exp(x)/dx = exp(x) = y


def compare(cfg: Config, ctx: Context) -> tuple[torch.Tensor, ...]:
    """The document's script: MyExp's gradients, then the built-in exp's, at the same inputs."""
    inputs = torch.tensor(cfg.inputs, device=ctx.device, requires_grad=True)
    outputs = ctx.forward(lambda: MyExp.apply(inputs), {"inputs": inputs})  # lab: drawn
    outputs.backward(torch.ones(outputs.shape, device=ctx.device))
    grad1 = inputs.grad
    inputs.grad = None

    outputs_builtin = inputs.exp()
    outputs_builtin.sum().backward()
    grad2 = inputs.grad
    return inputs, outputs, grad1, grad2


# == The lab: what the runner adds to the document ===============================================


@dataclass
class Config(ScenarioConfig):
    """MyExp, a custom exp that saves its output, against the built-in exp (doc 003)."""
    inputs: list[float] = param([1.0, 2.0, 3.0], "the inputs x (|x| <= 80: exp overflows "
                                                  "float32 beyond 88)")
    support: list[Capability] = support_param()

    def validate(self, where: str) -> None:
        if not self.inputs or len(self.inputs) > 10**6 or max(map(abs, self.inputs)) > 80:
            raise ConfigError(f"{where}.inputs: must list 1 to 10**6 numbers with |x| <= 80 "
                              f"(exp overflows float32 beyond 88)")


def check_exp(cfg: Config, ctx: Context) -> Result:
    from demos.documents.functions import MyExpModern, MyExpSavesInput, exp_reference
    from demos.scenario_api import check, close, gradcheck, parity, support

    # the document's script, its forward drawn, traced, and what backward keeps counted
    inputs, outputs, grad1, grad2 = compare(cfg, ctx)
    # what MyExp saved, read off one more forward (backward freed the script's)
    probe = MyExp.apply(torch.tensor(cfg.inputs, device=ctx.device, requires_grad=True))
    saved_output = probe.grad_fn.saved_tensors[0]
    ctx.log.info("  MyExp grads %s; built-in exp grads %s", grad1.tolist(), grad2.tolist())
    # beside it, the choice the document does not make: save the input, recompute exp
    other = torch.tensor(cfg.inputs, device=ctx.device, requires_grad=True)
    kept = ctx.forward(lambda: MyExpSavesInput.apply(other), {"inputs": other},
                       name="graph_saves_input")
    saved_input = kept.grad_fn.saved_tensors[0]
    e_to_x = torch.exp(torch.tensor(cfg.inputs, dtype=torch.float64))
    twin_inputs = {"x": torch.tensor(cfg.inputs, dtype=torch.float64).requires_grad_()}
    ctx.forward_mode(MyExpModern.apply, twin_inputs)  # the twin has a jvp: forward mode, stepped
    matrix, supported = support.classic_and_twin(MyExp, MyExpModern, exp_reference, twin_inputs,
                                                 ctx.check_device, cfg.support)
    return Result(
        metrics={"max_grad_error": (grad1 - grad2).abs().max().item()}, support=matrix,
        checks=supported + [
            close("grads equal the built-in exp's", grad1, grad2),
            close("grads equal e^x", grad1, e_to_x.to(grad1), rtol=1e-6),
            check("MyExp saved its output, not its input",
                  torch.equal(saved_output, probe.detach()) and
                  torch.equal(probe.detach(), outputs.detach()),
                  "saved_tensors[0] == exp(inputs)"),
            check("the contrast saved its input, for backward to compute exp again",
                  torch.equal(saved_input, other.detach()), "saved_tensors[0] == inputs"),
            gradcheck("gradcheck", MyExp.apply, {"x": inputs}, ctx.check_device),
            parity("parity", MyExp.apply, exp_reference, {"x": inputs}, ctx.check_device),
        ])


SCENARIO = Scenario(
    name="my_exp", config=Config, run=check_exp, document="003, example 1",
    metrics=("max_grad_error",),
    files=(*graph_files("graph", "graph_saves_input"), *pass_files("forward_mode"), "explain.txt"))


if __name__ == "__main__":
    run_alone(SCENARIO)
