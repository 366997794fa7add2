"""Functions right in gradcheck's eyes that go wrong where a model uses them, each beside its
right twin: one pair for each row of real use (checks.md, "Where gradcheck is silent").

    python runner.py --config configs/examples/real_use_mistake.yaml   # fails: each hazard said
    python runner.py --config configs/examples/real_use_ok.yaml        # passes: the twins
"""
import torch
from torch.autograd import Function

STEP = [0]  # a step counter, as a schedule or a loss scale keeps one


# their references, plain torch
def matmul(x, w):
    return x @ w


def ema(avg, x):
    return 0.9 * avg + 0.1 * x


def square(x):
    return x * x


def gelu(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def sigmoid(x):
    return torch.sigmoid(x)


# -- grad_layouts -----------------------------------------------------------------------------
class FusedDenseView(Function):
    """A fused dense layer whose backward flattens grad_output with .view, as apex's and
    Megatron-LM's did (apex PR #1601, Megatron-LM #251, pytorch#64529): a transposed or
    expanded grad_output has no such view."""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        g = grad_output.view(-1, grad_output.size(-1))
        return (g @ w.t()).view(x.shape), x.reshape(-1, x.size(-1)).t() @ g


class FusedDense(FusedDenseView):
    """Its right twin: .reshape (and, as the fused layers do, custom_fwd/custom_bwd)."""
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        g = grad_output.reshape(-1, grad_output.size(-1))
        return (g @ w.t()).reshape(x.shape), x.reshape(-1, x.size(-1)).t() @ g


# -- aliased_inputs ---------------------------------------------------------------------------
class EmaInPlace(Function):
    """An exponential moving average updated in place, avg.mul_(beta).add_(x, alpha=1 - beta),
    as fused optimizers and EMA helpers do: with avg and x one tensor, the add reads x already
    scaled."""
    @staticmethod
    def forward(ctx, avg, x):
        avg.mul_(0.9).add_(x, alpha=0.1)
        ctx.mark_dirty(avg)
        return avg

    @staticmethod
    def backward(ctx, grad_output):
        return 0.9 * grad_output, 0.1 * grad_output


class Ema(EmaInPlace):
    """Its right twin: torch.lerp, which reads both before it writes."""
    @staticmethod
    def forward(ctx, avg, x):
        avg.lerp_(x.clone(), 0.1)
        ctx.mark_dirty(avg)
        return avg


# -- checkpoint -------------------------------------------------------------------------------
class SquareStepScaled(Function):
    """x², its saved input scaled by a step counter kept on ctx (a loss scale, a schedule read
    from a global): checkpoint runs forward again in backward, the counter moves, and the saved
    tensor no longer matches ctx's scale (pytorch#84864: checkpoint re-runs the function; its
    state is not restored)."""
    @staticmethod
    def forward(ctx, x):
        STEP[0] += 1
        ctx.scale = 1.0 + 0.25 * STEP[0]
        ctx.save_for_backward(x * ctx.scale)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        scaled, = ctx.saved_tensors
        return 2 * grad_output * scaled / ctx.scale


class Square(SquareStepScaled):
    """Its right twin: forward a function of its inputs alone."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return 2 * grad_output * x



# -- saved_hooks ------------------------------------------------------------------------------
class GeluReadsSavedTwice(Function):
    """A tanh-GELU whose backward reads ctx.saved_tensors twice (TransformerEngine PR #1807:
    CPU offloading frees a saved tensor once it is read)."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        t = torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3))
        x, = ctx.saved_tensors  # read again for the second term
        dt = 0.7978845608 * (1 + 3 * 0.044715 * x ** 2) * (1 - t ** 2)
        return grad_output * (0.5 * (1 + t) + 0.5 * x * dt)


class Gelu(GeluReadsSavedTwice):
    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        t = torch.tanh(0.7978845608 * (x + 0.044715 * x ** 3))
        dt = 0.7978845608 * (1 + 3 * 0.044715 * x ** 2) * (1 - t ** 2)
        return grad_output * (0.5 * (1 + t) + 0.5 * x * dt)


# -- autocast ---------------------------------------------------------------------------------
class LinearNoAmp(Function):
    """A linear layer without custom_fwd/custom_bwd: under autocast its forward's matmul is
    bfloat16, its backward (after autocast) mixes that with float32 (pytorch#87979: "expected m1
    and m2 to have the same dtype")."""
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output @ w.t(), x.t() @ grad_output


class LinearAmp(Function):
    """Its right twin, as torch's AMP examples write it."""
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return grad_output @ w.t(), x.t() @ grad_output


# -- tensors saved with save_for_backward -----------------------------------------------------
class SigmoidKeepsOutput(Function):
    """The output kept as a ctx attribute, `ctx.result = result` (pytorch#58509: gradcheck is
    right, the double backward silently wrong; an output on ctx is a cycle)."""
    @staticmethod
    def forward(ctx, x):
        result = torch.sigmoid(x)
        ctx.result = result
        return result

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.result * (1 - ctx.result)


class Sigmoid(SigmoidKeepsOutput):
    """Its right twin: save_for_backward."""
    @staticmethod
    def forward(ctx, x):
        result = torch.sigmoid(x)
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, grad_output):
        result, = ctx.saved_tensors
        return grad_output * result * (1 - result)
