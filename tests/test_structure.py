"""Checks of a custom Function's forward and backward (demos.lab.checks.structure): what forward
changes in place without ctx.mark_dirty (each check still gives the verdict it gives alone), what
backward returns (one grad per input, trailing Nones, broadcast shapes, each grad against its
input), and the checks made before an error are kept."""
from __future__ import annotations

import pytest
import torch

from demos import check_function
from demos.lab.checks import gradients as checks
from tests.conftest import check, raised_in
from tests.fixtures import contract_fns as fns
from tests.test_contract import torch_says, x_

CPU = torch.device("cpu")


def test_a_function_that_changes_its_input_in_place_gets_each_checks_own_verdict():
    """Shift (x + 1, by adding 1 to x itself, without ctx.mark_dirty) gets from every check the
    verdict that check gives it alone, in either order: each check works on copies of its own,
    so the caller's inputs stay as they were; and backward_structure says what it does."""
    from demos.lab.checks import structure, support
    from tests.fixtures.user_fns import Shift, shift

    def inputs():
        return {"x": torch.linspace(0.5, 2.0, 6, dtype=torch.float64, requires_grad=True)}

    rows = ["backward", "double_backward", "forward_ad", "float32", "noncontiguous"]
    each = {
        "changes a leaf": lambda xs: checks.changes_a_leaf(Shift.apply, xs, {}, CPU),
        "structure": lambda xs: [(c.name, c.passed)
                                 for c in structure.backward_structure(Shift, xs, CPU)],
        "gradcheck": lambda xs: checks.gradcheck("g", Shift.apply, xs, CPU).passed,
        "gradgradcheck": lambda xs: structure.gradgradcheck("gg", Shift.apply, xs, CPU).passed,
        "parity": lambda xs: checks.parity("p", Shift.apply, shift, xs, CPU).passed,
        "matrix": lambda xs: {r: row.status for r, row in
                              support.matrix(Shift.apply, xs, shift, CPU, rows).items()},
        **{r: lambda xs, r=r: support.matrix(Shift.apply, xs, shift, CPU, [r])[r].status
           for r in rows}}
    alone = {name: verdict(inputs()) for name, verdict in each.items()}
    for order in (list(each), list(reversed(each))):
        xs = inputs()
        assert {name: each[name](xs) for name in order} == alone, order
        assert torch.equal(xs["x"], inputs()["x"])  # the caller's inputs, as they were
    assert alone["matrix"] == {r: alone[r] for r in rows}
    assert alone["parity"] is True  # its value and gradient are right
    assert ("forward changes no input without ctx.mark_dirty", False) in alone["structure"]
    [said] = [c.detail for c in structure.backward_structure(Shift, inputs(), CPU)
              if c.name == structure.UNMARKED]
    assert said.startswith("x changed in place without ctx.mark_dirty: autograd does not know")


def test_a_broadcast_gradient_and_trailing_nones_are_notes_not_failures(tmp_path):
    r = check_function(fns.BroadcastMul, inputs={"x": x_(3, 4), "w": x_(4)}, support=[],
                       output_dir=tmp_path / "mul", quiet=True)
    assert r.passed
    assert "w: grad of shape (3, 4), which autograd sums to w's (4,)" in check(
        r.entries[0].summary.to_json(), "each grad matches its input (None, shape, dtype)")[
        "detail"]
    r = check_function(fns.Select, inputs={"x": x_(4, 3)}, support=[],
                       output_dir=tmp_path / "select", quiet=True)
    assert r.passed and "the 1 after them None, which autograd ignores" in check(
        r.entries[0].summary.to_json(), "backward returns one grad per input")["detail"]


def test_an_extra_none_is_what_torch_accepts(tmp_path):
    """A backward returning (grad, None) for one input: torch's gradcheck passes it, and so
    does the checker (it used to call it a mistake)."""
    from tests.fixtures.user_fns import SquareTooManyGrads, square

    assert torch_says(SquareTooManyGrads, [x_(3)], None)
    r = check_function(SquareTooManyGrads, inputs=[x_(3)], reference=square, support=[],
                       output_dir=tmp_path, quiet=True)
    assert r.passed


def test_an_in_place_function_is_checked_on_copies_and_says_so(tmp_path):
    r = check_function(fns.ExpInPlace, inputs={"x": x_(3)}, reference=fns.exp, support=[],
                       output_dir=tmp_path, quiet=True)
    assert r.passed and "applied to copies of the inputs that require grad (x.clone())" in \
        check(r.entries[0].summary.to_json(), "forward runs")["detail"]


def test_an_exception_whose_str_raises_keeps_the_checks_made_before_it(tmp_path):
    """Issue 36: reporting it raised again, and the entry lost every check it had made."""
    r = check_function(fns.BackwardRaisesUnsayable, inputs={"x": x_(3)}, support=[],
                       output_dir=tmp_path, quiet=True)
    e = r.entries[0].summary
    assert e.status == "failed" and e.error is None
    assert [(c.name, c.passed) for c in e.checks[:3]] == [
        ("forward runs", True), ("forward changes no input without ctx.mark_dirty", True),
        ("backward runs", False)]
    assert raised_in(e.checks[2].detail, "Unsayable: (its message could not be read: "
                     "RuntimeError in its __str__)", "contract_fns.py", "backward")


def grads_check(r) -> dict:
    return check(r.entries[0].summary.to_json(), "each grad matches its input (None, shape, dtype)")


def test_a_complex_gradient_for_a_real_input_is_said_as_autograds_refusal(tmp_path):
    """Issue 51, item 9: it was said "autograd casts it silently"; autograd refuses it, and the
    detail quotes torch's own words (a torch that words it otherwise fails this test)."""
    from tests.fixtures import edge_fns

    x = torch.linspace(-1, 1, 5, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError) as refused:
        torch.autograd.grad(edge_fns.PolarComplexGrad.apply(x), x,
                            torch.ones(5, dtype=torch.complex128))
    r = check_function(edge_fns.PolarComplexGrad, inputs={"x": x}, reference=edge_fns.polar,
                       support=[], output_dir=tmp_path, quiet=True)
    said = grads_check(r)
    assert said["passed"] is False and "casts" not in said["detail"], said
    assert said["detail"].startswith("x: grad is complex128, x is float64 (autograd refuses "
                                     "it: RuntimeError: Expected isFloatingType("), said
    assert str(refused.value).split("  (Could this")[0] in said["detail"]
    assert "return its .real" in said["detail"]


def test_a_grad_for_a_tensor_that_needs_none_is_a_note_and_for_a_number_a_failure(tmp_path):
    """Issue 51, item 10: autograd drops a gradient returned for a tensor input that requires
    none (torch's gradcheck passes such a Function), so it is a note in the passing check; a
    gradient for an argument that is no tensor autograd refuses, and it stays a failure."""
    from tests.fixtures import edge_fns
    from tests.fixtures.user_fns import MulAddGradForNoGradInput, mul_add

    xyz = {"x": x_(3), "y": x_(3), "z": x_(3).detach()}
    assert torch.autograd.gradcheck(MulAddGradForNoGradInput.apply, tuple(xyz.values()))
    r = check_function(MulAddGradForNoGradInput, inputs=xyz, reference=mul_add, support=[],
                       output_dir=tmp_path / "z", quiet=True)
    assert r.passed, [(c.name, c.detail) for c in r.failures]
    assert "z: a grad returned, though z requires none (autograd ignores it" in \
        grads_check(r)["detail"]
    assert not torch_says(edge_fns.ScaleGradForNumber, [x_(3), 2.0], None)
    r = check_function(edge_fns.ScaleGradForNumber, inputs=[x_(3), 2.0], support=[],
                       output_dir=tmp_path / "k", quiet=True)
    said = grads_check(r)
    assert said["passed"] is False and said["detail"] == (
        "x1: returned a grad for an argument that is not a tensor (autograd refuses it; return "
        "None)"), said
