"""The check helpers pass on correct Functions and fail, with a useful detail, on wrong ones."""
import math

import pytest
import torch

from demos.documents.functions import (
    exp_reference,
    legendre_p3_reference,
    linear_reference,
    multiply_add_reference,
    relu_reference,
)
from demos.lab.checks import gradients as checks
from demos.lab.core.config import Expect, Target
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.linear_function import LinearFunction
from demos.scenarios.multiply_add import MultiplyAdd
from demos.scenarios.my_exp import MyExp
from demos.scenarios.my_relu import MyReLU
from tests.conftest import raised_in
from tests.fixtures.wrong_functions import (
    LinearNoBiasSum,
    MultiplyAddSwapped,
    MyExpSavesInput,
    P3MissingFactor,
    ReLUWrongMask,
)

CPU = torch.device("cpu")
X = {"x": torch.linspace(-1.5, 1.5, 7, requires_grad=True)}
Z = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
AWAY = {"x": (Z + 0.5 * Z.sign()).requires_grad_()}
WXB = {"w": torch.tensor([[1., 2], [3, 4]], requires_grad=True), "x": torch.rand(2, 2),
       "b": torch.tensor([[4., 3], [2, 1]], requires_grad=True)}
G = torch.Generator().manual_seed(1)
LINEAR = {"input": torch.randn(6, 4, generator=G, requires_grad=True),
          "weight": torch.randn(3, 4, generator=G, requires_grad=True),
          "bias": torch.randn(3, generator=G, requires_grad=True)}


@pytest.mark.parametrize("good, wrong, ref, inputs", [
    (LegendrePolynomial3.apply, P3MissingFactor.apply, legendre_p3_reference, X),
    (MyReLU.apply, ReLUWrongMask.apply, relu_reference, AWAY),
    (MultiplyAdd.apply, MultiplyAddSwapped.apply, multiply_add_reference, WXB),
    (MyExp.apply, MyExpSavesInput.apply, exp_reference,
     {"x": torch.tensor([1., 2., 3.], requires_grad=True)}),
    (LinearFunction.apply, LinearNoBiasSum.apply, linear_reference, LINEAR),
])
def test_gradcheck_and_parity_pass_on_right_and_fail_on_wrong_backward(good, wrong, ref, inputs):
    assert checks.gradcheck("g", good, inputs, CPU).passed is True
    assert checks.parity("p", good, ref, inputs, CPU).passed is True
    bad_g = checks.gradcheck("g", wrong, inputs, CPU)
    bad_p = checks.parity("p", wrong, ref, inputs, CPU)
    assert bad_g.passed is False and "Jacobian mismatch" in bad_g.detail
    assert bad_p.passed is False and "grad" in bad_p.detail and "differs" in bad_p.detail


def test_failure_details_name_the_input():
    g = checks.gradcheck("g", MultiplyAddSwapped.apply, WXB, CPU)
    assert "input 0 (w)" in g.detail
    p = checks.parity("p", MultiplyAddSwapped.apply, multiply_add_reference, WXB, CPU)
    assert p.detail.startswith("grad w differs")


def test_parity_reports_a_function_that_raises_as_a_failed_check():
    def broken(x):
        raise RuntimeError("boom")
    c = checks.parity("p", broken, legendre_p3_reference, X, CPU)
    assert c.passed is False and raised_in(c.detail, "RuntimeError: boom", "test_checks.py",
                                           "broken")


def test_parity_catches_a_wrong_forward():
    c = checks.parity("p", lambda x: legendre_p3_reference(x) + 1e-3, legendre_p3_reference, X, CPU)
    assert c.passed is False and c.detail.startswith("value differs")


def test_close_and_check():
    assert checks.close("eq", torch.ones(2), torch.ones(2)).passed
    assert not checks.close("eq", torch.ones(2), torch.zeros(2)).passed
    assert not checks.close("eq", torch.ones(2), torch.ones(3)).passed
    assert not checks.close("eq", None, torch.ones(3)).passed
    assert checks.check("t", True, "d").passed is True


def expect(**targets):
    return Expect(params={k: Target(**v) for k, v in targets.get("params", {}).items()},
                  metrics={k: Target(**v) for k, v in targets.get("metrics", {}).items()})


def test_expect_value_with_tolerances():
    e = expect(params={"b": {"value": -2.2085268, "rtol": 1e-5}})
    assert checks.expect(e, {"b": -2.20852}, {})[0].passed is True
    failed = checks.expect(e, {"b": -2.0}, {})[0]
    assert failed.passed is False and failed.name == "expect params.b"
    assert "-2; expected -2.2085268" in failed.detail


def test_expect_tolerance_defaults():
    assert Target(value=1.0).meets(1.000001)[0] is True       # rtol 1e-5
    assert Target(value=1.0).meets(1.0001)[0] is False
    assert Target(value=0.0, atol=1e-6).meets(1e-7)[0] is True  # rtol 0 with atol
    assert Target(value=0.0, atol=1e-6).meets(2e-6)[0] is False


def test_expect_min_max_and_nan():
    e = expect(metrics={"acc": {"min": 0.95}, "loss": {"max": 1e-2}})
    assert [c.passed for c in checks.expect(e, {}, {"acc": 0.96, "loss": 1e-3})] == [True, True]
    assert [c.passed for c in checks.expect(e, {}, {"acc": 0.90, "loss": 1.0})] == [False, False]
    assert checks.expect(e, {}, {"acc": math.nan, "loss": 0.0})[0].passed is False


def test_expect_a_name_the_scenario_does_not_produce_fails():
    c = checks.expect(expect(metrics={"accuracy": {"min": 0.5}}), {}, {"final_loss": 1.0})[0]
    assert c.passed is False and "produced no metric 'accuracy'" in c.detail


def test_expect_in_dry_run_is_not_evaluated_but_missing_names_still_fail():
    e = expect(metrics={"final_loss": {"max": 1e-9}, "nope": {"max": 1}})
    skipped, missing = checks.expect(e, {}, {"final_loss": 5.0}, skip="--dry-run")
    assert skipped.passed is None and skipped.detail.startswith("not evaluated in --dry-run (5;")
    assert missing.passed is False
    diverged = checks.expect(e, {}, {}, skip="training diverged")
    assert [c.passed for c in diverged] == [None, None]


def test_a_jacobian_too_big_to_hold_is_checked_in_fast_mode_never_built():
    import time
    x = torch.randn(100_000, dtype=torch.float64, requires_grad=True)  # 1e10 entries
    started = time.monotonic()
    found = checks.gradcheck("gradcheck", lambda v: v * 2, {"x": x}, torch.device("cpu"))
    assert found.passed is True and time.monotonic() - started < 5
    assert found.detail.endswith("; fast mode: 100,000 input and 100,000 output elements make "
                                 "the full check's dense Jacobians cost 20,000,000,000, past "
                                 "10,000,000; it compares random projections of them, then the "
                                 "full check runs on x[:49], the output[:49]")
    one_out = checks.gradcheck("gradcheck", lambda v: v.sum(), {"x": x[:5000]},
                               torch.device("cpu"))  # a scalar output: still n_in squared
    assert one_out.passed is True and "cost 25,005,000," in one_out.detail
    few_in = torch.randn(5, dtype=torch.float64, requires_grad=True)  # a wide output: a
    wide = checks.gradcheck("gradcheck", lambda v: v.repeat(100_000),  # backward per element
                            {"x": few_in}, torch.device("cpu"))
    assert wide.passed is True and "5 input and 500,000 output elements" in wide.detail
    # a wrong gradient (-1 for 2) fails as fast: torch's rerun in slow mode is left out
    wrong = checks.gradcheck("gradcheck", lambda v: 3 * v.detach() - v, {"x": x},
                             torch.device("cpu"))
    assert wrong.passed is False and wrong.detail == (
        "GradcheckError: Jacobian mismatch for output 0 with respect to input 0 (x)")
    assert time.monotonic() - started < 10


def test_parity_names_the_relative_error_where_the_absolute_one_is_worst():
    x = torch.tensor([1000.0, 1.0], dtype=torch.float64, requires_grad=True)
    found = checks.parity("parity", lambda v: v * torch.tensor([1.01, 1.5], dtype=v.dtype),
                          lambda v: v, {"x": x}, torch.device("cpu"))
    assert found.passed is False
    assert found.detail.startswith("value differs: max abs err 10, rel 0.01 at (0,)"), found.detail
    # and the metric's relative error, said as what it is: one error, two measures, each named
    assert found.detail.endswith("; 0.01 of the largest reference value (max_rel_error)")


def test_a_failed_paritys_page_gives_the_metrics_relative_error_with_its_measure(tmp_path):
    """The mistake's page shows parity's element-wise relative error and the metric
    max_rel_error; both are named, and the metric's value is in the check's detail."""
    from tests.conftest import CONFIGS, run_captured

    r = run_captured(tmp_path, "--config", CONFIGS / "examples" / "cube_mistake.yaml",
                     "--set", "scenarios[0].support=[]")
    [e] = r.summary["scenarios"]
    parity = next(c for c in e["checks"] if c["name"] == "parity with the reference")
    rel = e["metrics"]["max_rel_error"]
    assert "rel 0.667 at (0, 0)" in parity["detail"]
    assert f"{rel:.3g} of the largest reference value (max_rel_error)" in parity["detail"]


def test_a_long_check_stops_at_its_next_evaluation_once_a_stop_is_requested():
    from demos.lab.core.signals import Stopped, StopRequest

    x = {"x": torch.randn(50, dtype=torch.float64, requires_grad=True)}
    stop, calls = StopRequest(), []

    def double(v):
        calls.append(1)
        if len(calls) == 10:
            stop.requested = "SIGINT"  # Ctrl-C during the check
        return v * 2
    assert checks.gradcheck("gradcheck", lambda v: v * 2, x, CPU, stop).passed
    with pytest.raises(Stopped, match="stopped by SIGINT"):
        checks.gradcheck("gradcheck", double, x, CPU, stop)
    assert len(calls) == 10  # of the hundred it needs


def test_parity_reports_errors_relative_to_the_reference_scale_not_near_zero_elements():
    """A rounding-size difference at an element that is zero is tiny next to the values the
    check compares; element by element it would read as infinitely large."""
    x = {"x": torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64, requires_grad=True)}
    c, errors = checks.compare_to_reference("parity", lambda x: x * 3 + 1e-12,
                                            lambda x: x * 3, x, torch.device("cpu"))
    assert c.passed, c.detail
    assert errors["max_abs_error"] == pytest.approx(1e-12, rel=1e-3)
    assert errors["max_rel_error"] == pytest.approx(1e-12 / 6, rel=1e-3)  # scale: 3 * 2
    assert c.detail.endswith("rel 1.7e-13 of the largest reference value)")


def test_an_exception_is_one_line_with_its_type_cut_at_the_limit():
    from demos.lab.core.text import one_line

    class Unsayable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    assert one_line(ValueError("first line\n\n   second  line\n")) == \
        "ValueError: first line second line"
    assert one_line(KeyboardInterrupt()) == "KeyboardInterrupt"
    assert one_line(ValueError("x" * 500), 20) == "ValueError: xxxxx..."
    assert one_line(Unsayable()) == ("Unsayable: (its message could not be read: RuntimeError "
                                     "in its __str__)")


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
