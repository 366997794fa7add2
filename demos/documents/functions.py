"""The documents' custom autograd Functions' plain-torch twins (`*_reference`, the ground truth
for the parity checks) and modern twins. The classic Functions are in their scenarios' files,
where their tutorials use them (LegendrePolynomial3 in legendre_fit.py, MyReLU in my_relu.py,
MultiplyAdd in multiply_add.py, MyExp in my_exp.py, LinearFunction in linear_function.py).
"""
import torch


def legendre_p3_reference(x):
    return 0.5 * (5 * x**3 - 3 * x)


def relu_reference(x):
    return torch.relu(x)


def multiply_add_reference(w, x, b):
    return w * x + b


class MyExpSavesInput(torch.autograd.Function):
    """MyExp's contrast (not in the documents): it saves its *input*, so backward has to
    compute exp(x) again; the ledger of what backward keeps shows x kept instead of y."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * x.exp()  # exp computed a second time


def exp_reference(x):
    return torch.exp(x)


def linear_reference(input, weight, bias=None):
    return torch.nn.functional.linear(input, weight, bias)


# -- the modern twins ---------------------------------------------------------------------------
# The same Functions in today's style. The classic ones above work with backward() and
# torch.compile; torch.func transforms and forward mode refuse them (see demos/docs/checks.md,
# "What changed since the documents"). Each twin gives the classic one's values and gradients.

class LegendrePolynomial3Modern(torch.autograd.Function):
    """P3 in today's style: forward(x) alone, setup_context, jvp, a generated vmap rule."""
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
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * 1.5 * (5 * x**2 - 1)

    @staticmethod
    def jvp(ctx, x_t):
        x, = ctx.saved_tensors
        return 1.5 * (5 * x**2 - 1) * x_t  # the same derivative, times the tangent


class MyReLUModern(torch.autograd.Function):
    """ReLU in today's style; the mask is a multiplication, which vmap can batch (an in-place
    masked assignment is data-dependent and vmap refuses it)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.clamp(min=0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * (x >= 0)  # as MyReLU: zero only where x < 0

    @staticmethod
    def jvp(ctx, x_t):
        x, = ctx.saved_tensors
        return x_t * (x >= 0)


class MultiplyAddModern(torch.autograd.Function):
    """w * x + b in today's style; each input gets its gradient when it needs one."""
    generate_vmap_rule = True

    @staticmethod
    def forward(w, x, b):
        return w * x + b

    @staticmethod
    def setup_context(ctx, inputs, output):
        w, x, b = inputs
        ctx.save_for_backward(w, x)
        ctx.save_for_forward(w, x)

    @staticmethod
    def backward(ctx, grad_output):
        w, x = ctx.saved_tensors
        need_w, need_x, need_b = ctx.needs_input_grad
        return (grad_output * x if need_w else None, grad_output * w if need_x else None,
                grad_output if need_b else None)

    @staticmethod
    def jvp(ctx, w_t, x_t, b_t):
        w, x = ctx.saved_tensors  # an input without a tangent gets zeros (materialized)
        return w_t * x + w * x_t + b_t


class MyExpModern(torch.autograd.Function):
    """exp in today's style: it still saves its output, for backward and for jvp."""
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx, grad_output):
        y, = ctx.saved_tensors
        return grad_output * y

    @staticmethod
    def jvp(ctx, x_t):
        y, = ctx.saved_tensors
        return x_t * y


class LinearFunctionModern(torch.autograd.Function):
    """input @ weight.T + bias in today's style (out of place, so vmap can batch it)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(input, weight, bias=None):
        output = input.mm(weight.t())
        return output if bias is None else output + bias.unsqueeze(0).expand_as(output)

    @staticmethod
    def setup_context(ctx, inputs, output):
        input, weight, bias = (*inputs, None)[:3]
        ctx.save_for_backward(input, weight)
        ctx.save_for_forward(input, weight)
        ctx.has_bias = bias is not None

    @staticmethod
    def backward(ctx, grad_output):
        input, weight = ctx.saved_tensors
        need_input, need_weight = ctx.needs_input_grad[:2]
        need_bias = ctx.has_bias and ctx.needs_input_grad[2]
        return (grad_output.mm(weight) if need_input else None,
                grad_output.t().mm(input) if need_weight else None,
                grad_output.sum(0) if need_bias else None)

    @staticmethod
    def jvp(ctx, input_t, weight_t, bias_t=None):
        input, weight = ctx.saved_tensors  # bias_t is None only without a bias
        output_t = input_t.mm(weight.t()) + input.mm(weight_t.t())
        return output_t if bias_t is None else output_t + bias_t.unsqueeze(0).expand_as(output_t)


MODERN = {"LegendrePolynomial3": LegendrePolynomial3Modern, "MyReLU": MyReLUModern,
          "MultiplyAdd": MultiplyAddModern, "MyExp": MyExpModern,
          "LinearFunction": LinearFunctionModern}
