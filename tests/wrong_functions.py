"""Deliberately wrong custom Functions: every check of gradients must catch each of them."""
import torch


class P3MissingFactor(torch.autograd.Function):
    """P3 whose backward forgets the 1.5: returns (5x^2 - 1) instead of 1.5 (5x^2 - 1)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * (5 * x**3 - 3 * x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * (5 * x**2 - 1)


class ReLUWrongMask(torch.autograd.Function):
    """ReLU whose backward zeroes the gradient where the input is positive (mask inverted)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        grad = grad_output.clone()
        grad[x > 0] = 0
        return grad


class MultiplyAddSwapped(torch.autograd.Function):
    """w * x + b whose backward swaps the grads of w and b."""

    @staticmethod
    def forward(ctx, w, x, b):
        ctx.save_for_backward(x)
        return w * x + b

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output, None, grad_output * x


class MyExpSavesInput(torch.autograd.Function):
    """exp whose backward multiplies by the saved input x instead of exp(x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * x


class LinearNoBiasSum(torch.autograd.Function):
    """input @ weight.T + bias whose bias grad takes only the first row of the batch."""

    @staticmethod
    def forward(ctx, input, weight, bias):
        ctx.save_for_backward(input, weight)
        return input.mm(weight.t()) + bias

    @staticmethod
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        return grad_output.mm(weight), grad_output.t().mm(input), grad_output[0]
