"""The whole autograd.Function contract (issue 34, first part): non-tensor arguments, integer
index tensors, broadcast-shaped gradients, trailing Nones, non-tensor outputs. The checker's
verdict agrees with torch's own gradcheck on the same arguments, for a right Function and its
wrong twin of each kind; from Python (check_function) and from a config. What backward returns,
case by case: tests/test_structure.py; the arguments' specs: tests/test_inputs.py."""
from __future__ import annotations

import pytest
import torch

from demos import check_function
from tests.conftest import (
    FIXTURES,
    check,
    entry,
    only_run_dir,
    run_main,
    summary,
)
from tests.fixtures import contract_fns as fns

D = torch.float64


def x_(*shape):
    return torch.randn(*shape, dtype=D, generator=torch.Generator().manual_seed(0),
                       requires_grad=True)


CORPUS = [  # (Function, its arguments, the reference, the output gradcheck looks at, and
    #         whether torch's own tests apply it to a copy: mark_dirty)
    (fns.Take, lambda: [x_(4, 3), 0, torch.tensor([2, 0, 2])], fns.take, None),
    (fns.TakeTwice, lambda: [x_(4, 3), 0, torch.tensor([2, 0, 2])], fns.take, None),
    (fns.BroadcastMul, lambda: [x_(3, 4), x_(4)], fns.mul, None),
    (fns.BroadcastMulTransposed, lambda: [x_(4, 4)[:3].detach().requires_grad_(), x_(4)],
     fns.mul, None),
    (fns.Select, lambda: [x_(4, 3)], fns.select, None),
    (fns.SelectTooMany, lambda: [x_(4, 3)], fns.select, None),
    (fns.ScaleWithCount, lambda: [x_(3), 2.5], fns.scale, 0),
    (fns.ScaleWithCountOff, lambda: [x_(3), 2.5], fns.scale, 0),
    (fns.ExpInPlace, lambda: [x_(3)], fns.exp, "copy"),
    (fns.ExpInPlaceSquared, lambda: [x_(3)], fns.exp, "copy"),
    (fns.MaxWithIndex, lambda: [x_(3, 4)], fns.max_of_rows, None),
    (fns.MaxWithIndexSpread, lambda: [x_(3, 4)], fns.max_of_rows, None),
    (fns.WithArray, lambda: [x_(3)], None, 0),
    (fns.WithArrayHalf, lambda: [x_(3)], None, 0),
    (fns.TwoOutputs, lambda: [x_(3)], fns.two_outputs, None),
    (fns.TwoOutputsOneLost, lambda: [x_(3)], fns.two_outputs, None),
    (fns.SinModern, lambda: [x_(3)], fns.sin, None),
    (fns.SinModernWrongJvp, lambda: [x_(3)], fns.sin, None),
    (fns.CubeOnce, lambda: [x_(3)], fns.cube, None),
    (fns.CubeOnceMissingFactor, lambda: [x_(3)], fns.cube, None),
    (fns.SinVmap, lambda: [x_(3)], fns.sin, None),
    (fns.SinVmapNegated, lambda: [x_(3)], fns.sin, None),
]
WRONG = ("Twice", "Transposed", "TooMany", "Off", "Squared", "Spread", "Half", "Lost",
         "WrongJvp", "MissingFactor", "Negated")


def torch_says(fn, args, output) -> bool:
    """torch.autograd.gradcheck's verdict on the same arguments (an error in it: failed)."""
    def call(*a):
        if output == "copy":  # as torch's own tests apply a mark_dirty Function
            a = tuple(x.clone() for x in a)
        out = fn.apply(*a)
        return out if output in (None, "copy") else out[output]
    forward_ad = getattr(fn, "jvp", None) is not torch.autograd.Function.jvp  # it has one
    try:
        return torch.autograd.gradcheck(call, tuple(args), raise_exception=False,
                                        check_forward_ad=forward_ad)
    except RuntimeError:  # autograd refused the backward's result
        return False


@pytest.mark.parametrize("fn, make, reference, output", CORPUS,
                         ids=[c[0].__name__ for c in CORPUS])
def test_each_verdict_agrees_with_torchs_gradcheck(fn, make, reference, output, tmp_path):
    expected = torch_says(fn, make(), output)
    assert expected == (not fn.__name__.endswith(WRONG))
    r = check_function(fn, inputs=make(), reference=reference, support=["forward_ad"],
                       output_dir=tmp_path, quiet=True)
    e = r.entries[0]
    assert e.summary.status == ("passed" if expected else "failed"), \
        [(c.name, c.detail) for c in r.failures]
    assert e.summary.error is None  # a verdict, never an entry error


@pytest.mark.parametrize("fn, passes", [(fns.Triple, True), (fns.SquareDetached, False)])
def test_a_zero_second_derivative_passes_a_detached_one_does_not(fn, passes, tmp_path):
    """y = 3x builds no graph in its backward because its second derivative is zero; x² with
    a detaching backward builds none because it lost it. torch's gradgradcheck tells them
    apart, and so does the check."""
    assert torch.autograd.gradgradcheck(fn.apply, (x_(3),), raise_exception=False) == passes
    r = check_function(fn, inputs={"x": x_(3)}, reference=fns.triple if passes else fns.square,
                       double_backward=True, support=[], output_dir=tmp_path, quiet=True)
    second = check(r.entries[0].summary.to_json(), "second backward agrees: second_backward")
    assert second["passed"] == passes and r.passed == passes
    assert ("the second derivative is zero" if passes else "built no graph") in second["detail"]


def test_the_contract_from_a_config(tmp_path):
    """Every row of the support matrix too; the run passes."""
    assert run_main(tmp_path, "--config", FIXTURES / "contract.yaml") == 0
    data = summary(only_run_dir(tmp_path))
    assert [e["status"] for e in data["scenarios"]] == ["passed"] * 7
    scale = entry(data, "scale")
    assert check(scale, "forward runs")["passed"] and scale["error"] is None


@pytest.mark.parametrize("example, code", [("reversal_ok", 0), ("reversal_mistake", 1),
                                           ("round_ok", 0), ("round_mistake", 1)])
def test_an_intended_gradient_is_checked_against_its_reference(example, code, tmp_path):
    """A gradient reversal layer and a straight-through round: gradcheck fails them by design,
    so with intended: true the backward is held to the reference's autograd gradient; each
    wrong twin fails that check, naming the gradient."""
    from tests.conftest import CONFIGS

    assert run_main(tmp_path, "--config", CONFIGS / "examples" / f"{example}.yaml",
                    "--set", f"scenarios.{example}.support=[backward, float32]") == code
    e = summary(only_run_dir(tmp_path))["scenarios"][0]
    names = [c["name"] for c in e["checks"]]
    assert "gradcheck" not in names
    intended = check(e, "backward gives the intended gradient (the reference's)")
    assert intended["passed"] == (code == 0)
    if code:
        assert intended["detail"].startswith("grad x differs")


def test_the_intended_gradients_are_what_gradcheck_refuses(monkeypatch):
    """Why the key exists: torch's gradcheck fails the right ones."""
    from tests.conftest import CONFIGS

    monkeypatch.syspath_prepend(str(CONFIGS / "examples"))
    import my_ops

    for fn in (my_ops.GradientReversal, my_ops.RoundStraightThrough):
        x = x_(5, 3).detach().add(0.25).requires_grad_()  # away from round's jumps
        assert not torch.autograd.gradcheck(fn.apply, (x,), raise_exception=False)


@pytest.mark.parametrize("fn, passes", [(fns.ClipGrad, True), (fns.ClipGradOneSide, False)])
def test_an_intended_gradient_that_is_no_derivative_has_a_hook_for_reference(fn, passes,
                                                                            tmp_path):
    """Clipping is not linear in grad_output, so no function's autograd gives it; a tensor
    hook in the reference does, and the checks hold the backward to it."""
    r = check_function(fn, inputs={"x": x_(4, 3)}, reference=fns.clipped, intended=True,
                       support=["backward", "double_backward", "float32", "noncontiguous"],
                       output_dir=tmp_path, quiet=True)
    assert r.passed == passes, [(c.name, c.detail) for c in r.failures]
    if not passes:
        assert check(r.entries[0].summary.to_json(),
                     "backward gives the intended gradient (the reference's)")["detail"].\
            startswith("grad x differs")


def test_intended_needs_a_reference(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("scenarios:\n- scenario: custom_function\n  function: m:F\n"
                      "  intended: true\n  inputs: [{shape: [2]}]\n")
    assert run_main(tmp_path / "o", "--config", config) == 2
    assert "intended: needs a reference whose autograd gives the intended gradient" in \
        capsys.readouterr().err


@pytest.mark.parametrize("example, code", [("p3_op", 0), ("p3_op_mistake", 1), ("p3_op", 0)])
def test_a_custom_op_is_checked_like_a_function_with_opcheck(example, code, tmp_path):
    """Document 003's P3 as a torch.library.custom_op: the same checks (its backward is
    autograd's to call, so the structure checks are forward runs and autograd accepts it), and
    opcheck; its wrong twin fails gradcheck naming x. Run twice in a process: the op's module
    loads again, registering nothing twice."""
    from tests.conftest import CONFIGS

    assert run_main(tmp_path, "--config", CONFIGS / "examples" / f"{example}.yaml", "--set",
                    f"scenarios.{example}.support=[backward, forward_ad]") == code
    e = summary(only_run_dir(tmp_path))["scenarios"][0]
    assert check(e, "opcheck")["passed"] and e["error"] is None
    assert check(e, "gradcheck")["passed"] == (code == 0)
    if code:
        assert "input 0 (x)" in check(e, "gradcheck")["detail"]
    op = "demos_examples::legendre_p3" + ("_mistake" if code else "")  # the op's own name
    assert e["support"][op]["forward_ad"]["status"] == "unsupported"  # no forward-mode rule:
    #                                                torch gives no tangent, and says nothing


def test_check_function_takes_a_custom_op(tmp_path):
    @torch.library.custom_op("demos_tests::scaled", mutates_args=())
    def scaled(x: torch.Tensor, k: float) -> torch.Tensor:
        return x * k

    @scaled.register_fake
    def _(x, k):
        return torch.empty_like(x)

    def setup(ctx, inputs, output):
        ctx.k = inputs[1]

    scaled.register_autograd(lambda ctx, g: (g * ctx.k, None), setup_context=setup)
    r = check_function(scaled, inputs={"x": x_(4), "k": 2.5}, reference=lambda x, k: x * k,
                       support=["backward"], output_dir=tmp_path, quiet=True)
    assert r.passed and r.entries[0].summary.id == "scaled"
    assert check(r.entries[0].summary.to_json(), "opcheck")["passed"]


@pytest.mark.parametrize("fn, row, status", [
    (fns.CubeOnce, "double_backward", "unsupported"),  # torch refuses to differentiate twice
    (fns.SinVmap, "vmap", "ok"), (fns.SinVmap, "func_grad", "ok"),
    (fns.SinVmapNegated, "func_grad", "fails"),  # against the reference's gradient
])
def test_each_rows_verdict_is_what_torch_does(fn, row, status, tmp_path):
    reference = fns.cube if fn is fns.CubeOnce else fns.sin
    r = check_function(fn, inputs={"x": x_(3)}, reference=reference, support=[row],
                       output_dir=tmp_path, quiet=True)
    assert r.entries[0].summary.support[fn.__name__][row].status == status


def test_a_base_exception_from_a_function_is_an_error_entry_and_the_run_goes_on(tmp_path):
    """asyncio.CancelledError is no Exception: it used to escape everything below the command
    line (a traceback, summary.json left "running", the entries after it never run)."""
    config = tmp_path / "c.yaml"
    config.write_text(f"scenarios:\n"
                      f"- {{scenario: custom_function, id: cancelled, function: "
                      f"{FIXTURES / 'contract_fns.py'}:Cancelled, inputs: [{{shape: [3]}}], "
                      f"support: [backward]}}\n"
                      f"- {{scenario: custom_function, id: later, function: "
                      f"{FIXTURES / 'contract_fns.py'}:CancelledLater, inputs: [{{shape: [3]}}], "
                      f"support: []}}\n"
                      f"- {{scenario: custom_function, id: after, function: "
                      f"{FIXTURES / 'contract_fns.py'}:Triple, inputs: [{{shape: [3]}}], "
                      f"support: []}}\n")
    assert run_main(tmp_path / "o", "--config", config) == 1
    data = summary(only_run_dir(tmp_path / "o"))
    assert data["status"] == "failed"
    assert entry(data, "after")["status"] == "passed"
    cancelled = entry(data, "cancelled")
    assert cancelled["status"] == "failed" and cancelled["error"] is None
    assert check(cancelled, "forward runs")["passed"]  # kept: the checks made before it
    detail = check(cancelled, "backward runs")["detail"]  # where, in the user's file
    assert detail.startswith("CancelledError: cancelled in backward (at ") and \
        detail.endswith("fixtures/contract_fns.py:368 in backward)"), detail
    later = entry(data, "later")  # raised past the checks: the entry is an error that says so
    assert later["status"] == "error"
    assert later["error"].startswith("CancelledError: cancelled at the third call (at ") and \
        later["error"].endswith("fixtures/contract_fns.py:381 in forward)")


