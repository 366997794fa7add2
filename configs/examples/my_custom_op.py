"""Document 003's LegendrePolynomial3 written as a custom operator (torch.library.custom_op with
register_autograd), as PyTorch now recommends for operators, beside a wrong twin.

    python runner.py --config configs/examples/p3_op.yaml         # passes, with an opcheck row
    python runner.py --config configs/examples/p3_op_mistake.yaml # fails: the backward is wrong
"""
import torch


@torch.library.custom_op("demos_examples::legendre_p3", mutates_args=())
def legendre_p3(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (5 * x**3 - 3 * x)


@legendre_p3.register_fake
def _(x):
    return torch.empty_like(x)  # the output's shape and dtype, for torch.compile and opcheck


def setup_context(ctx, inputs, output):
    x, = inputs
    ctx.save_for_backward(x)


def backward(ctx, grad_output):
    x, = ctx.saved_tensors
    return grad_output * 1.5 * (5 * x**2 - 1)  # P3'(x) = 1.5 (5x^2 - 1)


legendre_p3.register_autograd(backward, setup_context=setup_context)


@torch.library.custom_op("demos_examples::legendre_p3_mistake", mutates_args=())
def legendre_p3_mistake(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (5 * x**3 - 3 * x)


@legendre_p3_mistake.register_fake
def _(x):
    return torch.empty_like(x)


def backward_without_half(ctx, grad_output):
    x, = ctx.saved_tensors
    return grad_output * 3 * (5 * x**2 - 1)  # wrong: the 1/2 of P3 dropped


legendre_p3_mistake.register_autograd(backward_without_half, setup_context=setup_context)


def p3(x):
    """The plain-torch reference."""
    return 0.5 * (5 * x**3 - 3 * x)
