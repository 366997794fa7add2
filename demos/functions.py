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


class MyExp(torch.autograd.Function):
    """y = exp(x), from document 003 (example 1): it saves its *output*, since exp' = exp."""

    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        return grad_output * y  # d exp(x)/dx = exp(x) = y


def exp_reference(x):
    return torch.exp(x)


class LinearFunction(torch.autograd.Function):
    """y = input @ weight.T + bias, from document 004; computes only the grads asked for."""

    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())               # (N, out)
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_input = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_input = grad_output.mm(weight)     # dy/dinput = weight
        if ctx.needs_input_grad[1]:
            grad_weight = grad_output.t().mm(input)  # dy/dweight = input
        if bias is not None and ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(0)          # dy/dbias = 1, summed over the batch
        return grad_input, grad_weight, grad_bias


def linear_reference(input, weight, bias=None):
    return torch.nn.functional.linear(input, weight, bias)
