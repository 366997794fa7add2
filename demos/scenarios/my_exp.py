"""my_exp: MyExp, a custom exp that saves its output for backward, from document 003.

Since d exp(x)/dx = exp(x), backward needs the forward's *result*, not its input: MyExp saves
the output. Its gradients must equal those of the built-in torch.exp, and e^x.

    python runner.py --config configs/my_exp.yaml
"""
import torch

from demos.functions import MyExp, exp_reference
from demos.lab import checks
from demos.lab.context import Context, Result
from demos.scenarios.configs import MyExp as MyExpConfig


def run(cfg: MyExpConfig, ctx: Context) -> Result:
    inputs = torch.tensor(cfg.inputs, device=ctx.device, requires_grad=True)
    outputs = MyExp.apply(inputs)
    ctx.graph(outputs, {"inputs": inputs})
    saved_output = outputs.grad_fn.saved_tensors[0]
    outputs.backward(torch.ones(outputs.shape, device=ctx.device))
    grad1 = inputs.grad
    inputs.grad = None  # reset before the built-in exp's turn

    outputs_builtin = inputs.exp()
    outputs_builtin.sum().backward()
    grad2 = inputs.grad
    e_to_x = torch.exp(torch.tensor(cfg.inputs, dtype=torch.float64))
    ctx.log.info("  MyExp grads %s; built-in exp grads %s", grad1.tolist(), grad2.tolist())
    return Result(
        metrics={"max_grad_error": (grad1 - grad2).abs().max().item()},
        checks=[
            checks.close("grads equal the built-in exp's", grad1, grad2),
            checks.close("grads equal e^x", grad1, e_to_x.to(grad1), rtol=1e-6),
            checks.check("MyExp saved its output, not its input",
                         torch.equal(saved_output, outputs.detach()),
                         "saved_tensors[0] == exp(inputs)"),
            checks.gradcheck("gradcheck", MyExp.apply, {"x": inputs}, ctx.check_device),
            checks.parity("parity", MyExp.apply, exp_reference, {"x": inputs}, ctx.check_device),
        ])
