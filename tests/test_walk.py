"""The graph walk on graphs built here: every node once, None entries, any depth, freed saves."""
import sys

import torch

from demos.lab.instruments.walk import explain, leaves, nodes
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.multiply_add import MultiplyAdd
from tests.fixtures.user_fns import SinCos


def test_walk_of_the_document_002_graph():
    a, b, d = (torch.tensor(v, requires_grad=True) for v in (2.0, 3.0, 4.0))
    c = a + b
    e = c * d
    text = explain(e, {"a": a, "b": b, "c": c, "d": d}, title="e")
    assert "output: tensor () float32, grad_fn -> #1 MulBackward0" in text
    assert "#1 MulBackward0\n    next_functions: (#2 AddBackward0, #3 AccumulateGrad)" in text
    assert "#2 AddBackward0\n    next_functions: (#4 AccumulateGrad, #5 AccumulateGrad)" in text
    assert "#3 AccumulateGrad\n    leaf: d: tensor () float32, requires_grad=True" in text
    assert [n for n in ("a", "b", "d") if f"    {n}: tensor ()" in text] == ["a", "b", "d"]
    assert "AddBackward0: backward of a + b" in text and "AccumulateGrad: a leaf's" in text
    assert leaves(e)[0] is d and {id(v) for v in leaves(e)} == {id(a), id(b), id(d)}


def test_shared_subgraph_is_visited_once():
    x = torch.tensor(3.0, requires_grad=True)
    y = x * x        # one MulBackward0, used twice below
    z = y + y
    assert len(nodes(z)) == 3  # AddBackward0, MulBackward0, AccumulateGrad
    text = explain(z, {"x": x})
    assert text.count("MulBackward0\n") == 1
    assert "next_functions: (#2 MulBackward0, #2 MulBackward0)" in text


def test_none_entries_and_names_not_in_the_graph():
    w = torch.ones(2, 2, requires_grad=True)
    x = torch.rand(2, 2)
    b = torch.zeros(2, 2, requires_grad=True)
    out = MultiplyAdd.apply(w, x, b)
    text = explain(out, {"w": w, "x": x, "b": b})
    assert "next_functions: (#2 AccumulateGrad, None, #3 AccumulateGrad)" in text
    assert "saved: saved_tensors[0] = x: tensor (2, 2) float32" in text
    assert "Named but not a leaf of this graph" in text and "    x: requires_grad=False" in text
    assert "the custom Function MultiplyAdd (your code)" in text


def test_deep_graphs_need_no_recursion():
    x = torch.tensor(1.0, requires_grad=True)
    y = x
    depth = sys.getrecursionlimit() + 500
    for _ in range(depth):
        y = y * 1.0001
    assert len(nodes(y)) == depth + 1
    text = explain(y, {"x": x})
    assert f"#{depth + 1} AccumulateGrad" in text and "    x: tensor () float32" in text


def test_after_backward_the_saved_tensors_are_reported_freed():
    x = torch.linspace(-1, 1, 5, requires_grad=True)
    y = LegendrePolynomial3.apply(x * 2).sum()
    y.backward()
    text = explain(y, {"x": x})
    assert "saved_tensors: freed" in text and "other: freed" in text


def test_outputs_without_grad_fn():
    text = explain((torch.ones(2), torch.ones(2, requires_grad=True)), {})
    assert "output 1: tensor (2,) float32, no grad_fn: not in any graph" in text
    assert "output 2: tensor (2,) float32, no grad_fn: a leaf" in text
    assert "Leaves reached (backward() fills their .grad):\n    none" in text


def test_outputs_of_one_function_share_one_node():
    x = torch.tensor([0.5, 1.0], requires_grad=True)
    sin, cos = SinCos.apply(x)
    assert len(nodes((sin, cos))) == 2  # SinCosBackward once, then x's AccumulateGrad
    text = explain((sin, cos), {"x": x})
    assert "output 1:" in text and "output 2:" in text
    assert text.count("\n#1 SinCosBackward\n") == 1 and "\n#3 " not in text



def test_a_modern_functions_inputs_are_named_from_its_forward_without_ctx():
    """forward(input, weight, bias) with setup_context: every argument is an input (the
    classic forward(ctx, ...) skips ctx); the forward-mode graphs of the twins draw them."""
    import torch

    from demos.documents.functions import LinearFunctionModern
    from demos.lab.instruments.walk import input_names
    from demos.scenarios.linear_function import LinearFunction
    x, w, b = (torch.randn(*s, requires_grad=True) for s in ((4, 3), (2, 3), (2,)))
    for fn in (LinearFunction, LinearFunctionModern):
        assert input_names(fn.apply(x, w, b).grad_fn) == ["input", "weight", "bias"], fn
