"""Two custom autograd Functions for configs/examples: one right, one with a classic mistake.

    python runner.py --config configs/examples/cube_ok.yaml        # passes
    python runner.py --config configs/examples/cube_mistake.yaml   # fails: the mistake is found
"""
import torch


class MyCube(torch.autograd.Function):
    """y = w * x^3 + b (x (N, D), w and b (D,))."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return w * x**3 + b

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        grad_x = grad_w = grad_b = None              # only what needs_input_grad asks for
        if ctx.needs_input_grad[0]:
            grad_x = grad_output * 3 * w * x**2      # dy/dx = 3 w x^2
        if ctx.needs_input_grad[1]:
            grad_w = (grad_output * x**3).sum(0)     # dy/dw = x^3, summed over the batch
        if ctx.needs_input_grad[2]:
            grad_b = grad_output.sum(0)              # dy/db = 1, summed over the batch
        return grad_x, grad_w, grad_b


class MyCubeMissingFactor(torch.autograd.Function):
    """The same y = w * x^3 + b, whose backward forgets the 3 of d(x^3)/dx = 3 x^2."""

    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return w * x**3 + b

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_output * w * x**2          # wrong: should be 3 w x^2
        if ctx.needs_input_grad[1]:
            grad_w = (grad_output * x**3).sum(0)
        if ctx.needs_input_grad[2]:
            grad_b = grad_output.sum(0)
        return grad_x, grad_w, grad_b


def cube(x, w, b):
    """Plain torch: the ground truth for both."""
    return w * x**3 + b


# -- intended gradients: a backward that is deliberately not the derivative ----------------------
# (configs/examples/reversal_ok.yaml, reversal_mistake.yaml, round_ok.yaml, round_mistake.yaml)


class GradientReversal(torch.autograd.Function):
    """The identity forward; backward -0.5 * grad_output: the gradient reversal layer of
    domain-adversarial training (Ganin & Lempitsky, 2015), with lambda 0.5. Written with
    setup_context and generate_vmap_rule, so that torch.func's transforms take it."""
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_output):
        return -0.5 * grad_output


class GradientReversalForgetsSign(GradientReversal):
    """Wrong: scales the gradient but forgets to reverse it."""

    @staticmethod
    def backward(ctx, grad_output):
        return 0.5 * grad_output


def reversed_identity(x):
    """The intended gradient in plain torch: value x, gradient -0.5."""
    return -0.5 * x + (1.5 * x).detach()


class RoundStraightThrough(torch.autograd.Function):
    """round() forward; the gradient passed straight through (the straight-through estimator
    of quantization-aware training)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.round()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output


class RoundZeroGradient(RoundStraightThrough):
    """Wrong: the derivative of round itself, zero almost everywhere: nothing would learn."""

    @staticmethod
    def backward(ctx, grad_output):
        return torch.zeros_like(grad_output)


def straight_through_round(x):
    """The intended gradient in plain torch: value round(x), gradient 1."""
    return x + (x.round() - x).detach()
