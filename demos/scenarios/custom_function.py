"""custom_function: your own torch.autograd.Function, run, drawn and checked like the others.

The config names the Function (module:Class), optionally a plain-torch reference with the
same inputs, and the inputs. The checks: what backward returns (one grad per input, None
exactly where an input needs none, shapes, dtypes, grad_output untouched, autograd accepts it),
gradcheck (and gradgradcheck with double_backward: true), and parity with the reference for
the value and every input's gradient.

    python runner.py --config configs/examples/cube_ok.yaml
"""
import torch

from demos.lab import checks
from demos.lab.context import Context, Result
from demos.lab.function_checks import backward_structure, gradgradcheck
from demos.scenarios.configs import CustomFunction


def make_inputs(cfg: CustomFunction, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    """The inputs as float64 tensors: random under the seed, or the given values."""
    g = torch.Generator().manual_seed(seed)
    inputs = {}
    for i, spec in enumerate(cfg.inputs):
        if spec.value is not None:
            x = torch.tensor(spec.value, dtype=torch.float64)
        elif spec.low is not None:
            x = spec.low + (spec.high - spec.low) * torch.rand(spec.shape, generator=g,
                                                               dtype=torch.float64)
        else:
            x = torch.randn(spec.shape, generator=g, dtype=torch.float64)
        inputs[spec.name or f"x{i}"] = x.to(device).requires_grad_(spec.requires_grad)
    return inputs


def run(cfg: CustomFunction, ctx: Context) -> Result:
    fn, reference = cfg.function_object, cfg.reference_object
    inputs = make_inputs(cfg, ctx.seed, ctx.check_device)
    ctx.log.info("  %s with inputs %s", cfg.function,
                 ", ".join(f"{k} {tuple(v.shape)}" for k, v in inputs.items()))
    found = backward_structure(fn, inputs, ctx.check_device)
    if not found[0].passed:  # the forward itself fails: nothing else can run
        return Result(metrics={}, checks=found)
    out = checks.tensors(fn.apply(*inputs.values()))
    ctx.graph(out if len(out) > 1 else out[0], inputs)  # before any backward frees its saves
    found.append(checks.gradcheck("gradcheck", fn.apply, inputs, ctx.check_device))
    if cfg.double_backward:
        found.append(gradgradcheck("gradgradcheck", fn.apply, inputs, ctx.check_device))
    metrics = {}
    if reference is not None:
        check, metrics = checks.compare_to_reference(
            "parity with the reference", fn.apply, reference, inputs, ctx.check_device,
            rtol=cfg.rtol, atol=cfg.atol)
        found.append(check)
    return Result(metrics=metrics, checks=found)
