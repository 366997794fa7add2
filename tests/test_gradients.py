"""The checks of gradients and results (demos.lab.checks.gradients): gradcheck, parity
(compare_to_reference), expect and close pass on correct Functions and fail, with a useful
detail, on wrong ones; past the full check's cost bound, torch's fast mode and the full check on
elements spread over each tensor that it can afford (a mistake in any region fails), or no check
at all where even fast mode cannot afford one."""
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
from demos.lab.checks import gradients, structure
from demos.lab.core.config import Expect, Target
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.linear_function import LinearFunction
from demos.scenarios.multiply_add import MultiplyAdd
from demos.scenarios.my_exp import MyExp
from demos.scenarios.my_relu import MyReLU
from tests.conftest import raised_in
from tests.fixtures import edge_fns as fns
from tests.fixtures.wrong_functions import (
    LinearNoBiasSum,
    MultiplyAddSwapped,
    MyExpSavesInput,
    P3MissingFactor,
    ReLUWrongMask,
)
from tests.test_edges import checked, x_

D, CPU = torch.float64, torch.device("cpu")
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
    assert gradients.gradcheck("g", good, inputs, CPU).passed is True
    assert gradients.parity("p", good, ref, inputs, CPU).passed is True
    bad_g = gradients.gradcheck("g", wrong, inputs, CPU)
    bad_p = gradients.parity("p", wrong, ref, inputs, CPU)
    assert bad_g.passed is False and "Jacobian mismatch" in bad_g.detail
    assert bad_p.passed is False and "grad" in bad_p.detail and "differs" in bad_p.detail


def test_failure_details_name_the_input():
    g = gradients.gradcheck("g", MultiplyAddSwapped.apply, WXB, CPU)
    assert "input 0 (w)" in g.detail
    p = gradients.parity("p", MultiplyAddSwapped.apply, multiply_add_reference, WXB, CPU)
    assert p.detail.startswith("grad w differs")


def test_parity_reports_a_function_that_raises_as_a_failed_check():
    def broken(x):
        raise RuntimeError("boom")
    c = gradients.parity("p", broken, legendre_p3_reference, X, CPU)
    assert c.passed is False and raised_in(c.detail, "RuntimeError: boom", "test_gradients.py",
                                           "broken")


def test_parity_catches_a_wrong_forward():
    c = gradients.parity("p", lambda x: legendre_p3_reference(x) + 1e-3, legendre_p3_reference,
                         X, CPU)
    assert c.passed is False and c.detail.startswith("value differs")


def test_close_and_check():
    assert gradients.close("eq", torch.ones(2), torch.ones(2)).passed
    assert not gradients.close("eq", torch.ones(2), torch.zeros(2)).passed
    assert not gradients.close("eq", torch.ones(2), torch.ones(3)).passed
    assert not gradients.close("eq", None, torch.ones(3)).passed
    assert gradients.check("t", True, "d").passed is True


def expect(**targets):
    return Expect(params={k: Target(**v) for k, v in targets.get("params", {}).items()},
                  metrics={k: Target(**v) for k, v in targets.get("metrics", {}).items()})


def test_expect_value_with_tolerances():
    e = expect(params={"b": {"value": -2.2085268, "rtol": 1e-5}})
    assert gradients.expect(e, {"b": -2.20852}, {})[0].passed is True
    failed = gradients.expect(e, {"b": -2.0}, {})[0]
    assert failed.passed is False and failed.name == "expect params.b"
    assert "-2; expected -2.2085268" in failed.detail


def test_expect_tolerance_defaults():
    assert Target(value=1.0).meets(1.000001)[0] is True       # rtol 1e-5
    assert Target(value=1.0).meets(1.0001)[0] is False
    assert Target(value=0.0, atol=1e-6).meets(1e-7)[0] is True  # rtol 0 with atol
    assert Target(value=0.0, atol=1e-6).meets(2e-6)[0] is False


def test_expect_min_max_and_nan():
    e = expect(metrics={"acc": {"min": 0.95}, "loss": {"max": 1e-2}})
    assert [c.passed for c in gradients.expect(e, {}, {"acc": 0.96, "loss": 1e-3})] == [True, True]
    assert [c.passed for c in gradients.expect(e, {}, {"acc": 0.90, "loss": 1.0})] == [False, False]
    assert gradients.expect(e, {}, {"acc": math.nan, "loss": 0.0})[0].passed is False


def test_expect_a_name_the_scenario_does_not_produce_fails():
    c = gradients.expect(expect(metrics={"accuracy": {"min": 0.5}}), {}, {"final_loss": 1.0})[0]
    assert c.passed is False and "produced no metric 'accuracy'" in c.detail


def test_expect_in_dry_run_is_not_evaluated_but_missing_names_still_fail():
    e = expect(metrics={"final_loss": {"max": 1e-9}, "nope": {"max": 1}})
    skipped, missing = gradients.expect(e, {}, {"final_loss": 5.0}, skip="--dry-run")
    assert skipped.passed is None and skipped.detail.startswith("not evaluated in --dry-run (5;")
    assert missing.passed is False
    diverged = gradients.expect(e, {}, {}, skip="training diverged")
    assert [c.passed for c in diverged] == [None, None]


def test_a_jacobian_too_big_to_hold_is_checked_in_fast_mode_never_built():
    import time
    x = torch.randn(100_000, dtype=torch.float64, requires_grad=True)  # 1e10 entries
    started = time.monotonic()
    found = gradients.gradcheck("gradcheck", lambda v: v * 2, {"x": x}, torch.device("cpu"))
    assert found.passed is True and time.monotonic() - started < 5
    assert found.detail.endswith("; fast mode: 100,000 input and 100,000 output elements make "
                                 "the full check's dense Jacobians cost 20,000,000,000, past "
                                 "10,000,000; it compares random projections of them, then the "
                                 "full check runs on x[48 of 100,000], the output[48 of 100,000] "
                                 "(pairs of neighbouring indices spread over each dim)")
    one_out = gradients.gradcheck("gradcheck", lambda v: v.sum(), {"x": x[:5000]},
                               torch.device("cpu"))  # a scalar output: still n_in squared
    assert one_out.passed is True and "cost 25,005,000," in one_out.detail
    few_in = torch.randn(5, dtype=torch.float64, requires_grad=True)  # a wide output: a
    wide = gradients.gradcheck("gradcheck", lambda v: v.repeat(100_000),  # backward per element
                            {"x": few_in}, torch.device("cpu"))
    assert wide.passed is True and "5 input and 500,000 output elements" in wide.detail
    # a wrong gradient (-1 for 2) fails as fast: torch's rerun in slow mode is left out
    wrong = gradients.gradcheck("gradcheck", lambda v: 3 * v.detach() - v, {"x": x},
                             torch.device("cpu"))
    assert wrong.passed is False and wrong.detail == (
        "GradcheckError: Jacobian mismatch for output 0 with respect to input 0 (x)")
    assert time.monotonic() - started < 10


def test_parity_names_the_relative_error_where_the_absolute_one_is_worst():
    x = torch.tensor([1000.0, 1.0], dtype=torch.float64, requires_grad=True)
    found = gradients.parity("parity", lambda v: v * torch.tensor([1.01, 1.5], dtype=v.dtype),
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
    assert gradients.gradcheck("gradcheck", lambda v: v * 2, x, CPU, stop).passed
    with pytest.raises(Stopped, match="stopped by SIGINT"):
        gradients.gradcheck("gradcheck", double, x, CPU, stop)
    assert len(calls) == 10  # of the hundred it needs


def test_parity_reports_errors_relative_to_the_reference_scale_not_near_zero_elements():
    """A rounding-size difference at an element that is zero is tiny next to the values the
    check compares; element by element it would read as infinitely large."""
    x = {"x": torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64, requires_grad=True)}
    c, errors = gradients.compare_to_reference("parity", lambda x: x * 3 + 1e-12,
                                            lambda x: x * 3, x, torch.device("cpu"))
    assert c.passed, c.detail
    assert errors["max_abs_error"] == pytest.approx(1e-12, rel=1e-3)
    assert errors["max_rel_error"] == pytest.approx(1e-12 / 6, rel=1e-3)  # scale: 3 * 2
    assert c.detail.endswith("rel 1.7e-13 of the largest reference value)")


# -- real sizes: torch's fast mode past the full check's cost bound, the full check on the
# elements spread over each tensor it can afford (issues 43, item 1; 51, item 9;
# tests/fixtures/edge_fns.py) ---------------------------------------------------------------
def test_a_right_function_at_real_size_passes_in_fast_mode(tmp_path):
    e, c = checked(tmp_path, fns.SiLU, [x_(64, 128)], fns.silu, double_backward=True,
                   support=["backward", "double_backward"])
    assert e.status == "passed", [(k.name, k.detail) for k in e.failures]
    assert "fast mode: 8,192 input and 8,192 output elements" in c["gradcheck"].detail
    assert "fast mode" in c["gradgradcheck"].detail
    assert "fast mode" in e.summary.support["SiLU"]["backward"].detail


def test_a_wrong_function_at_real_size_fails_with_a_diagnosis_on_the_elements_it_affords(
        tmp_path):
    e, c = checked(tmp_path, fns.SiLUHalf, [x_(64, 128)], fns.silu, support=[])
    found = c["gradcheck"]
    assert found.passed is False and found.diagnosis.kind == "factor"
    assert found.diagnosis.says.startswith("x0's gradient is 1/2 times the right one")
    assert found.diagnosis.says.endswith("(found on x0[16 of 64, 32 of 128], the output[16 of "
                                            "64, 32 of 128]: the elements finite differences "
                                            "can afford)")
    rows, cols = gradients.spread(64, 16), gradients.spread(128, 32)  # x0's own indices
    assert all(a in rows and b in cols for a, b in (el.at for el in found.diagnosis.elements))
    assert max(a for a, _ in (el.at for el in found.diagnosis.elements)) >= 16


def test_a_check_even_fast_mode_cannot_afford_is_skipped_never_failed():
    x = torch.randn(600_000, dtype=D, requires_grad=True)  # 10 passes over 1.2e6 elements
    for found in (gradients.gradcheck("gradcheck", lambda v: v * 2, {"x": x}, CPU),
                  structure.gradgradcheck("gradgradcheck", lambda v: v * 2, {"x": x}, CPU)):
        assert found.passed is None and found.detail.startswith("not run: "), found.detail
        assert "fast mode can afford" in found.detail


@pytest.mark.parametrize("fn", [fns.SoftmaxAndLog, fns.SoftmaxAndLogOneTerm])
def test_at_real_size_what_fast_mode_lets_through_the_full_check_on_a_block_does_not(
        fn, tmp_path):
    """torch's fast mode passes a softmax whose backward leaves out its log output's term at
    [64, 128] (its tolerance grows with the sizes); the full check on the elements spread
    over each tensor after it fails it, as torch's full gradcheck does at a smaller size. A dim
    argument, two outputs: the right one passes."""
    f = lambda t: fn.apply(t, 1)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x_(64, 128),), fast_mode=True, raise_exception=False)
    small = torch.autograd.gradcheck(f, (x_(8, 16),), raise_exception=False)
    e, c = checked(tmp_path, fn, [x_(64, 128), 1], support=[])
    assert c["gradcheck"].passed is small, c["gradcheck"].detail
    assert "then the full check runs on x0[" in c["gradcheck"].detail or not small
    if not small:
        assert c["gradcheck"].diagnosis.kind == "one contribution missing"


@pytest.mark.parametrize("fn, region", [(fns.SquareFarRows, (slice(20, None),)),
                                        (fns.SquareLastBlock, (slice(48, None), slice(96, None)))],
                         ids=["rows 20 and after", "the last block"])
def test_a_mistake_anywhere_in_a_big_tensor_fails_with_its_why(fn, region, tmp_path):
    """Issue 51, item 9: at [64, 128], a gradient 3/2 times too big on rows 20 and after passed
    with no reference: torch's fast mode passes it, and the full check after it looked at the
    leading block x[:16, :32] alone. torch's full gradcheck fails it wherever it reaches those
    elements; so does the full check on elements spread over the whole tensor, and the tile
    at its worst element says what the mistake is, and where. The right x² passes."""
    assert torch.autograd.gradcheck(fn.apply, (x_(64, 128),), fast_mode=True)
    assert not torch.autograd.gradcheck(fn.apply, (x_(24, 40),), raise_exception=False)
    e, c = checked(tmp_path / "wrong", fn, [x_(64, 128)], support=[])
    found = c["gradcheck"]
    assert found.passed is False and found.diagnosis.kind == "factor", found
    assert found.diagnosis.says.startswith("x0's gradient is 3/2 times the right one: "), found
    wrong = torch.zeros(64, 128, dtype=torch.bool)
    wrong[region] = True  # the tile it was found on lies in the wrong region, and it says so
    assert found.diagnosis.elements and all(wrong[tuple(el.at)]
                                            for el in found.diagnosis.elements)
    tile = found.diagnosis.says.split("(found on x0[")[1].split("]")[0]
    (r0, r1), (c0, c1) = ((int(a or 0), int(b)) for a, b in (d.split(":")
                                                             for d in tile.split(", ")))
    assert (r1 - r0, c1 - c0) == (16, 32) and wrong[r0:r1, c0:c1].all(), tile
    right, c = checked(tmp_path / "right", fns.Square, [x_(64, 128)], support=[])
    assert right.status == "passed", [(k.name, k.detail) for k in right.failures]
    assert "then the full check runs on x0[16 of 64, 32 of 128]" in c["gradcheck"].detail


def test_the_elements_checked_at_real_size_reach_every_region_in_pairs_of_neighbours():
    rows = gradients.spread(64, 16)
    assert len(rows) == 16 and rows[:2] == [0, 1] and rows[-2:] == [62, 63]
    assert all(b - a == 1 for a, b in zip(rows[::2], rows[1::2]))  # odd and even indices
    assert max(b - a for a, b in zip(rows, rows[1:])) <= 64 // 8 + 1  # no region left out
    assert gradients.spread(5, 9) == [0, 1, 2, 3, 4] and gradients.spread(64, 2) == [0, 63]


def test_parity_says_where_the_reference_is_zero_instead_of_a_huge_relative_error():
    """Issue 51, item 10: relative to a reference of 0 an error is infinite; the detail said
    `rel 1e+299` (the error over 1e-300)."""
    x = {"x": torch.tensor([0.5, 2.0], dtype=D, requires_grad=True)}
    found = gradients.parity("parity", lambda v: v, lambda v: v * torch.tensor([1.0, 0.0]),
                             x, CPU)
    assert found.passed is False and found.detail.startswith(
        "value differs: max abs err 2 at (1,), where the reference is 0 (custom 2, reference "
        "0); "), found.detail
