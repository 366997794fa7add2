"""The documents' custom autograd Functions, in today's API (`ctx.saved_tensors`, `.apply`).

Each one saves only what its backward needs and states its derivative next to the code.
Their plain-torch twins (`*_reference`) are the ground truth for the parity checks.
"""
import torch


class LegendrePolynomial3(torch.autograd.Function):
    """P3(x) = 0.5 (5x^3 - 3x), from document 003."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * (5 * x**3 - 3 * x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * x**2 - 1)  # P3'(x) = 1.5 (5x^2 - 1)


def legendre_p3_reference(x):
    return 0.5 * (5 * x**3 - 3 * x)


class MyReLU(torch.autograd.Function):
    """ReLU(x) = max(x, 0), from the official two-layer-net example (document 004)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        grad_x = grad_output.clone()
        grad_x[x < 0] = 0  # ReLU'(x) = 1 where x > 0, else 0
        return grad_x


def relu_reference(x):
    return torch.relu(x)


class MultiplyAdd(torch.autograd.Function):
    """y = w * x + b elementwise, from document 000; x gets no gradient."""

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


def multiply_add_reference(w, x, b):
    return w * x + b
