"""The second backward (demos/lab/instruments/second_backward.py): traced from the sum of the
gradients of a create_graph backward, each node marked by the pass that made it, and held to
torch.autograd.grad (tests/instruments.py); the check holds the Function's second derivatives to
a reference's, and wrong backwards fail it."""
from __future__ import annotations

import torch

from demos.lab.instruments import second_backward
from demos.lab.instruments.trace import record
from demos.lab.instruments.walk import node_name
from tests.instruments import second_pass_problems

D = torch.float64


class Cube(torch.autograd.Function):
    """x**3 with a backward written in differentiable torch operations."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * g


class CubeDetached(Cube):
    """The right first derivative, but computed off the graph: no second backward."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x.detach() ** 2 * g


class CubeHalfSecond(Cube):
    """The right first derivative, whose own derivative is half what it should be (one factor
    of x is detached): 3x rather than 6x."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x.detach() * g


def cube(x):
    return x ** 3


def trace_of(fn):
    inputs = {"x": torch.tensor([1.0, 2.0, -0.5], dtype=D, requires_grad=True)}
    first = second_backward.first_pass(fn.apply, inputs)
    traced = record(first.root, second_backward.labels(first), "second") if first.root is not None \
        else None
    return first, traced, second_backward.first_pass(cube, inputs)


def test_the_second_pass_of_a_right_backward_agrees_and_marks_its_passes():
    first, traced, ref = trace_of(Cube)
    check = second_backward.agrees(first, ref)
    assert check.passed, check.detail
    assert "equals the reference's" in check.detail
    assert second_pass_problems(traced, first) == []
    # d/dx of sum(3 x^2) = 6x, where x is
    assert torch.equal(traced.grads[id(first.inputs["x"])],
                       torch.tensor([6.0, 12.0, -3.0], dtype=D))
    passes = {node_name(s.fn): second_backward.made_by(first, s.fn) for s in traced.steps}
    assert passes["AccumulateGrad"] == second_backward.FORWARD
    assert second_backward.FIRST in passes.values()
    assert passes["SumBackward0"] == second_backward.ROOT
    assert "made by the first backward" in second_backward.explain(first, traced)


def test_a_backward_off_the_graph_has_no_second_backward():
    first, traced, ref = trace_of(CubeDetached)
    check = second_backward.agrees(first, ref)
    assert first.root is None and not check.passed
    assert check.detail.startswith("the first backward built no graph")


def test_a_wrong_second_derivative_differs_from_the_reference():
    first, traced, ref = trace_of(CubeHalfSecond)
    check = second_backward.agrees(first, ref)
    assert not check.passed
    assert check.detail.startswith("second derivatives of x differ from the reference's: "
                                   "[3, 6, -1.5] against [6, 12, -3]")
    assert second_backward.agrees(first) is None  # without a reference, nothing to hold it to
    assert second_pass_problems(traced, first) == []  # the trace is right: the Function is not


def test_a_traced_second_pass_that_differs_from_autograd_fails_the_tests_hold():
    first, traced, _ = trace_of(Cube)
    x = first.inputs["x"]
    traced.grads[id(x)] = traced.grads[id(x)] * 2
    assert second_pass_problems(traced, first) == [
        "the traced second pass put [12, 24, -6] into x.grad, torch.autograd.grad gives "
        "[6, 12, -3]"]
