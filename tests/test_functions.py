"""Each custom Function against plain-torch autograd of the same formula (float64), and
gradcheck."""
import torch
from torch.autograd import gradcheck

from demos.documents.functions import (
    exp_reference,
    legendre_p3_reference,
    linear_reference,
    multiply_add_reference,
    relu_reference,
)
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.linear_function import LinearFunction
from demos.scenarios.multiply_add import MultiplyAdd
from demos.scenarios.my_exp import MyExp
from demos.scenarios.my_relu import MyReLU


def grads(fn, *inputs):
    """Value and input grads of fn(*inputs) for a fixed random output gradient."""
    xs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    out = fn(*xs)
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(1),
                             dtype=out.dtype))
    return out.detach(), [x.grad for x in xs]


def assert_same(fn, ref, *inputs):
    out, g = grads(fn, *inputs)
    out_ref, g_ref = grads(ref, *inputs)
    torch.testing.assert_close(out, out_ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(g, g_ref):
        if b is None:
            assert a is None
        else:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_legendre_p3_matches_reference_and_gradcheck():
    x = torch.linspace(-2, 2, 41, dtype=torch.float64, requires_grad=True)
    assert_same(LegendrePolynomial3.apply, legendre_p3_reference, x)
    assert gradcheck(LegendrePolynomial3.apply, (x,))
    # P3(1) = 1 and P3'(1) = 6: the textbook values
    one = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    y = LegendrePolynomial3.apply(one)
    y.backward()
    assert y.item() == 1.0 and one.grad.item() == 6.0


def test_my_relu_matches_torch_relu_away_from_zero():
    z = torch.randn(6, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = (z + 0.3 * z.sign()).requires_grad_()
    assert_same(MyReLU.apply, relu_reference, x)
    assert gradcheck(MyReLU.apply, (x,))


def test_multiply_add_matches_reference_and_x_gets_no_grad():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(2, 2, dtype=torch.float64, generator=g, requires_grad=True)
    x = torch.rand(2, 2, dtype=torch.float64, generator=g)
    b = torch.randn(2, 2, dtype=torch.float64, generator=g, requires_grad=True)
    assert_same(MultiplyAdd.apply, multiply_add_reference, w, x, b)
    assert gradcheck(MultiplyAdd.apply, (w, x, b))
    out = MultiplyAdd.apply(w, x, b)
    out.backward(torch.ones(2, 2, dtype=torch.float64))
    assert x.grad is None
    torch.testing.assert_close(w.grad, x)


def test_my_exp_matches_exp_and_saves_its_output():
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    assert_same(MyExp.apply, exp_reference, x)
    assert gradcheck(MyExp.apply, (x,))
    y = MyExp.apply(x)
    assert torch.equal(y.grad_fn.saved_tensors[0], y.detach())


def test_linear_function_matches_f_linear_and_computes_only_needed_grads():
    g = torch.Generator().manual_seed(0)
    inp = torch.randn(20, 20, dtype=torch.float64, generator=g, requires_grad=True)
    weight = torch.randn(30, 20, dtype=torch.float64, generator=g, requires_grad=True)
    bias = torch.randn(30, dtype=torch.float64, generator=g, requires_grad=True)
    assert_same(LinearFunction.apply, linear_reference, inp, weight, bias)
    assert gradcheck(LinearFunction.apply, (inp, weight, bias), eps=1e-6, atol=1e-4)
    assert_same(LinearFunction.apply, linear_reference, inp, weight)  # no bias
    out = LinearFunction.apply(inp, weight.detach(), None)
    grads = LinearFunction.backward(out.grad_fn, torch.ones_like(out))
    assert grads[0] is not None and grads[1] is None and grads[2] is None


# -- the modern twins: same numbers as the classic Functions, and every transform works ---------
import pytest  # noqa: E402
from torch.func import grad as func_grad  # noqa: E402
from torch.func import jvp, vmap  # noqa: E402

from demos.documents import functions as fns  # noqa: E402

D = torch.float64
TWINS = [  # classic, reference, inputs (requires_grad as the documents have them)
    (LegendrePolynomial3, fns.legendre_p3_reference, [(5,)], [True]),
    (MyReLU, fns.relu_reference, [(5,)], [True]),
    (MultiplyAdd, fns.multiply_add_reference, [(5,), (5,), (5,)], [True, False, True]),
    (MyExp, fns.exp_reference, [(5,)], [True]),
    (LinearFunction, fns.linear_reference, [(4, 3), (2, 3), (2,)], [True, True, True]),
]


def inputs_of(shapes, needs, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(s, generator=g, dtype=D) for s in shapes]
    return [x + 0.1 * torch.sign(x) for x in xs], needs  # away from ReLU's kink at 0


@pytest.mark.parametrize("classic, reference, shapes, needs", TWINS,
                         ids=[t[0].__name__ for t in TWINS])
def test_the_modern_twin_gives_the_classic_values_and_gradients(classic, reference, shapes,
                                                                needs):
    xs, needs = inputs_of(shapes, needs)
    twin = fns.MODERN[classic.__name__]
    a = [x.clone().requires_grad_(n) for x, n in zip(xs, needs)]
    b = [x.clone().requires_grad_(n) for x, n in zip(xs, needs)]
    ya, yb = classic.apply(*a), twin.apply(*b)
    assert torch.equal(ya, yb)
    ya.sum().backward()
    yb.sum().backward()
    assert all((p.grad is None and q.grad is None) or torch.allclose(p.grad, q.grad)
               for p, q in zip(a, b))


@pytest.mark.parametrize("classic, reference, shapes, needs", TWINS,
                         ids=[t[0].__name__ for t in TWINS])
def test_the_modern_twin_works_under_every_transform(classic, reference, shapes, needs):
    xs, _ = inputs_of(shapes, needs)
    twin = fns.MODERN[classic.__name__]
    grads_needed = [x.clone().requires_grad_() for x in xs]
    assert gradcheck(twin.apply, grads_needed, check_forward_ad=True, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(twin.apply, grads_needed)
    tangents = tuple(torch.randn_like(x) for x in xs)
    assert all(torch.allclose(p, q) for p, q in zip(jvp(twin.apply, tuple(xs), tangents),
                                                    jvp(reference, tuple(xs), tangents)))
    for i in range(len(xs)):  # torch.func.grad with respect to each input
        def f(*a, fn=None):
            return fn(*a).sum()
        got = func_grad(lambda *a: f(*a, fn=twin.apply), argnums=i)(*xs)
        assert torch.allclose(got, func_grad(lambda *a: f(*a, fn=reference), argnums=i)(*xs))
    batch = [torch.stack([x, 2 * x, -x]) for x in xs]
    looped = torch.stack([twin.apply(*[b[k] for b in batch]) for k in range(3)])
    assert torch.allclose(vmap(twin.apply)(*batch), looped)


@pytest.mark.parametrize("classic", [t[0] for t in TWINS], ids=[t[0].__name__ for t in TWINS])
def test_the_classic_functions_are_refused_by_torch_func(classic):
    """Why the twins exist: torch.func wants setup_context, forward mode wants jvp."""
    x = torch.randn(2, 3, dtype=D) if classic is LinearFunction else torch.randn(3, dtype=D)
    args = {MultiplyAdd: (x, x, x), LinearFunction: (x, x)}.get(classic, (x,))
    with pytest.raises(RuntimeError, match="must override the setup_context staticmethod"):
        vmap(classic.apply)(*[a.unsqueeze(0) for a in args])
