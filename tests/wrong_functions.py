"""Deliberately wrong custom Functions: every check of gradients must catch each of them."""
import torch

from demos.documents.functions import MyReLU


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


# -- mistakes only a transform can see (demos.lab.checks.support): backward is right in each -------
class P3JvpWrongFactor(torch.autograd.Function):
    """jvp with 1.4 where the derivative has 1.5; backward right."""
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return 0.5 * (5 * x**3 - 3 * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 1.5 * (5 * x**2 - 1)

    @staticmethod
    def jvp(ctx, x_t):
        x, = ctx.saved_tensors
        return 1.4 * (5 * x**2 - 1) * x_t


class ExpSavesOutputForForward(torch.autograd.Function):
    """setup_context saves exp(x) for backward (right) but x for forward mode, which jvp
    then uses as if it were exp(x)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(output)
        ctx.save_for_forward(x)  # should be output

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return g * y

    @staticmethod
    def jvp(ctx, x_t):
        y, = ctx.saved_tensors
        return x_t * y


class _SquareBase(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


class SquareVmapWrongValues(_SquareBase):
    """A hand-written vmap rule that cubes."""
    @staticmethod
    def vmap(info, in_dims, x):
        return x * x * x, in_dims[0]


class SquareVmapWrongOutDims(_SquareBase):
    """A hand-written vmap rule that moves the batch to the end and says it is still first."""
    @staticmethod
    def vmap(info, in_dims, x):
        y = (x * x).movedim(in_dims[0], -1)
        return y, 0


class SquareReadsRawMemory(_SquareBase):
    """Reads its input's storage as if contiguous: right only for contiguous inputs."""
    generate_vmap_rule = False

    @staticmethod
    def forward(x):
        flat = torch.as_strided(x, (x.numel(),), (1,))
        return (flat * flat).reshape(x.shape)


class SquareFiniteDifference(_SquareBase):
    """A backward by central differences with h = 1e-6: fine in float64, but in float32 the
    difference of two nearly equal squares loses most of its digits."""
    generate_vmap_rule = True

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        h = 1e-6
        return g * ((x + h) ** 2 - (x - h) ** 2) / (2 * h)


class ReLUScaledBackward(MyReLU):
    """MyReLU whose backward is 10 % too large: the right mask, a constant factor off."""

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * (x > 0) * 1.1
