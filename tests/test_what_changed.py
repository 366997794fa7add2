"""The docs' "What changed since the documents" (demos/docs/checks.md), asserted on the
installed torch.

Each test runs the documents' idiom, checks what happens now, and checks that the docs quote
exactly that; when torch changes, these fail and the section gets updated.
"""
import importlib
import warnings

import pytest
import torch
import torch.nn as nn

from demos.scenarios.lenet import Net
from tests import docs

SECTION = docs.section(docs.page("checks.md"), "What changed since the documents")


def observe(fn):
    """(the exception, the warnings) of calling fn: messages' first lines."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return error, [f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught]


def quoted(text):
    """The section quotes this text (modulo the markdown table's escaped pipes)."""
    assert text in SECTION.replace("\\|", "|"), f"demos/docs/checks.md does not quote: {text}"


class OldLinear(torch.autograd.Function):
    """Document 004's LinearFunction, as written (saved_variables)."""

    @staticmethod
    def forward(ctx, input, weight):
        ctx.save_for_backward(input, weight)
        return input.mm(weight.t())

    @staticmethod
    def backward(ctx, grad_output):
        input, weight = ctx.saved_variables
        return grad_output.mm(weight), grad_output.t().mm(input)


def test_variable_returns_a_plain_tensor():
    from torch.autograd import Variable
    v = Variable(torch.ones(2), requires_grad=True)
    assert type(v) is torch.Tensor and v.requires_grad
    error, caught = observe(lambda: Variable(torch.ones(1), volatile=True))
    assert error is None
    quoted("`Variable(t, requires_grad=True)` returns a plain `torch.Tensor`")
    quoted(caught[0])


def test_data_index_on_a_0_dim_loss():
    error, _ = observe(lambda: torch.tensor(3.0).data[0])
    assert error == ("IndexError: invalid index of a 0-dim tensor. Use `tensor.item()` in Python "
                     "or `tensor.item<T>()` in C++ to convert a 0-dim tensor to a number")
    quoted(error)


def test_import_torch_autograd_function_as_a_module():
    error, _ = observe(lambda: importlib.import_module("torch.autograd.Function"))
    assert error == "ModuleNotFoundError: No module named 'torch.autograd.Function'"
    quoted(error)


def test_calling_a_function_instance():
    i = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    w = torch.randn(5, 4, dtype=torch.double, requires_grad=True)
    for call in (lambda: OldLinear()(i, w),
                 lambda: torch.autograd.gradcheck(OldLinear(), (i, w))):
        error, caught = observe(call)
        assert error.startswith("RuntimeError: Legacy autograd function with non-static forward "
                                "method is deprecated.")
        quoted(error.split(" (Example")[0])
        assert caught and "should not be instantiated" in caught[0]


def test_instance_apply_still_works_but_warns():
    i = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    w = torch.randn(5, 4, dtype=torch.double)
    error, caught = observe(lambda: OldLinear().apply(i, w))
    assert error is None and caught[0].startswith("DeprecationWarning: <class ")
    quoted("should not be instantiated. Methods on autograd functions are all static, so you "
           "should invoke them on the class itself.")


def test_saved_variables_works_with_a_deprecation_warning():
    i = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    w = torch.randn(5, 4, dtype=torch.double, requires_grad=True)
    error, caught = observe(lambda: OldLinear.apply(i, w).sum().backward())
    assert error is None and i.grad is not None
    assert caught == ["DeprecationWarning: 'saved_variables' is deprecated; use 'saved_tensors'"]
    quoted(caught[0])


def test_cuda_float_tensor_as_the_device_switch():
    error, _ = observe(lambda: torch.randn(2, 2).type(torch.cuda.FloatTensor))
    if torch.cuda.is_available():
        assert error is None
    elif torch.version.cuda is None:  # a CPU build of torch, as pinned here
        assert error.startswith("RuntimeError: Cannot initialize CUDA without ATen_cuda library.")
        quoted("RuntimeError: Cannot initialize CUDA without ATen_cuda library.")
    else:
        assert error is not None


def test_zero_grad_leaves_grads_none():
    net = nn.Linear(2, 2)
    net(torch.ones(1, 2)).sum().backward()
    assert net.weight.grad is not None
    net.zero_grad()
    assert net.weight.grad is None and net.bias.grad is None
    quoted("`zero_grad()` sets the grads to `None`")


def test_non_leaf_grad_is_none_and_warns():
    a = torch.tensor(2.0, requires_grad=True)
    c = a * 2
    c.backward()
    grad = []
    error, caught = observe(lambda: grad.append(c.grad))
    assert error is None and grad == [None]
    assert caught[0].startswith("UserWarning: The .grad attribute of a Tensor that is not a leaf "
                                "Tensor is being accessed.")
    quoted("UserWarning: The .grad attribute of a Tensor that is not a leaf Tensor is being "
           "accessed.")


def test_grad_variables_keyword():
    a = torch.tensor(2.0, requires_grad=True)
    error, caught = observe(lambda: torch.autograd.backward(
        a * 2, grad_variables=torch.tensor(1.0)))
    assert error is None
    assert caught == ["FutureWarning: `grad_variables` is deprecated. Use `grad_tensors` instead."]
    quoted(caught[0])


def test_lenet_3x3_of_the_document_against_the_5x5_of_todays_tutorial():
    class TutorialNet(nn.Module):  # pytorch.org's "Neural Networks" tutorial today
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 6, 5), nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = nn.Linear(16 * 5 * 5, 120), nn.Linear(120, 84), \
                nn.Linear(84, 10)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(Net()) == 81194 and count(TutorialNet()) == 61706
    assert Net()(torch.randn(1, 1, 32, 32)).shape == (1, 10)
    quoted("81,194 parameters")
    quoted("61,706")


def test_num_flat_features_is_torch_flatten():
    x = torch.randn(4, 16, 6, 6)
    assert torch.equal(x.view(-1, 16 * 6 * 6), torch.flatten(x, 1))
    quoted("`torch.flatten(x, 1)`")


def test_the_number_in_backward_names_is_not_a_layer_count():
    x = torch.tensor(1.0, requires_grad=True)
    y = torch.tensor(2.0, requires_grad=True)
    deep = ((x + y) + y) + y
    chain = [deep.grad_fn, deep.grad_fn.next_functions[0][0],
             deep.grad_fn.next_functions[0][0].next_functions[0][0]]
    assert [type(f).__name__ for f in chain] == ["AddBackward0"] * 3
    assert type((x ** 2).grad_fn).__name__ == "PowBackward0"
    assert type((x ** y).grad_fn).__name__ == "PowBackward1"
    quoted("three chained additions are all `AddBackward0`")
    quoted("`x ** 2` gives `PowBackward0` and `x ** y` gives `PowBackward1`")


@pytest.mark.parametrize("idiom", [
    "Variable(", "loss.data[0]", "import torch.autograd.Function as Function",
    "LinearFunction()(", "gradcheck(LinearFunction(), ...)", "ctx.saved_variables",
    "dtype = torch.cuda.FloatTensor", "zero_grad()", "MultiplyAdd()"])
def test_every_required_idiom_has_a_row(idiom):
    assert f"`{idiom}" in SECTION


def test_classic_functions_under_torch_func_and_forward_mode():
    from torch.func import vmap

    from demos.scenarios.my_exp import MyExp
    x = torch.ones(2, 3, dtype=torch.float64)
    error, _ = observe(lambda: vmap(MyExp.apply)(x))
    quoted(f"`{error}`")
    import torch.autograd.forward_ad as fwAD
    def forward_mode():
        with fwAD.dual_level():
            MyExp.apply(fwAD.make_dual(x, torch.ones_like(x)))
    error, _ = observe(forward_mode)
    quoted(f"`{error}`")
