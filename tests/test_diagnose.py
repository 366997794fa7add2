"""Why a gradient is wrong (issues 35, 43): each kind of the catalogue, held by a deliberately
wrong Function that gets exactly that diagnosis, from finite differences and from a reference;
the right Functions get none; the diagnosis reaches the console (each WHY once), summary.json,
explain.txt, the report and check_function's result; an error in the user's code names its
file and line; one exception in several checks is one FAIL line."""
from __future__ import annotations

import json
from dataclasses import asdict

import pytest
import torch

from demos import check_function
from demos.documents import functions as docs
from demos.lab.checks.diagnose import (
    against_numbers,
    against_reference,
    forward_against_numbers,
    ratio,
    second_against_numbers,
)
from tests.conftest import cli
from tests.fixtures import diagnosed as d
from tests.fixtures import wrong_functions as w


def x_(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()


CLAMPED = torch.tensor([-1.5, -0.5, -0.2, 0.1, 0.3, 0.6, 0.8, 1.7], dtype=torch.float64)

CATALOGUE = [  # (wrong Function, its inputs, reference, kind, words the sentence says)
    (d.SinTripled, {"x": x_(6)}, d.sin, "factor", "3 times the right one"),
    (w.P3MissingFactor, {"x": x_(6)}, lambda x: 0.5 * (5 * x**3 - 3 * x), "factor",
     "multiply it by 3/2"),
    (d.SinNegated, {"x": x_(6)}, d.sin, "sign", "wrong sign"),
    (d.SinLocalOnly, {"x": x_(6)}, d.sin, "not multiplied", "not multiplied by grad_output"),
    (d.SinCos, {"x": x_(6)}, d.sin_cos, "one contribution missing",
     "output 1's gradient never reaches x"),
    (d.Mul, {"x": x_(3, 2), "w": x_(3, 2, seed=1)}, d.mul, "swapped", "x's gradient is w's"),
    (d.MatMul, {"a": x_(3, 3), "b": x_(3, 3, seed=1)}, d.matmul, "transposed", "transposed"),
    (w.LinearNoBiasSum, {"input": x_(4, 3), "weight": x_(2, 3, seed=1), "bias": x_(2, seed=2)},
     lambda i, wt, b: i @ wt.t() + b, "broadcast sum", "grad_output.sum(0)"),
    (d.AddBias, {"x": x_(4, 3), "b": x_(3, seed=1)}, d.add_bias, "factor",
     "1/4 times the right one: a constant factor is off; multiply it by 4 (1/4: or it averages "
     "grad_output over the 4 elements b is broadcast over, where it should sum them)"),
    (w.MyExpSavesInput, {"x": x_(5)}, torch.exp, "input for output",
     "by the input where the derivative needs the output"),
    (d.HalfSquareUsesOutput, {"x": x_(5)}, d.half_square, "transformed input",
     "x's gradient is the right one at the output in place of x: the formula uses the output "
     "where x is meant (save x for backward)"),
    (d.SinZero, {"x": x_(6)}, d.sin, "zero", "zero where one is needed"),
    (d.Clamp, {"x": CLAMPED.clone().requires_grad_()}, d.clamp, "some elements",
     "wrong only at 2 of 8 elements ((0,), (7,))"),
    (w.ReLUWrongMask, {"x": x_(8)}, torch.relu, "inverted condition", "inverted"),
    (d.SinNoPattern, {"x": x_(6)}, d.sin, "no simple pattern", "no simple pattern"),
    # issue 43: batch transposes, the right gradient at a transformed input, NaN and inf
    (d.BatchMatMulTransposed, {"a": x_(2, 3, 3), "b": x_(2, 3, 3, seed=1)}, d.matmul,
     "transposed", "a's gradient is the right one transposed (its last two dimensions)"),
    (d.BatchMatMulTransposed, {"a": x_(1, 3, 3), "b": x_(1, 3, 3, seed=1)}, d.matmul,
     "transposed", "a's gradient is the right one transposed"),
    (d.BatchMatMulUntransposed, {"a": x_(2, 3, 3), "b": x_(2, 3, 3, seed=1)}, d.matmul,
     "transformed input", "b's gradient is the right one with a transposed"),
    (d.BatchMatMulGradTransposed, {"a": x_(2, 3, 3), "b": x_(2, 3, 3, seed=1)}, d.matmul,
     "transposed", "b's gradient is the right one for grad_output transposed"),
    (d.SoftplusAtMinusX, {"x": x_(6)}, d.softplus, "transformed input",
     "x's gradient is the right one at -x"),
    (d.SquareTimesSwapped, {"x": x_(5), "y": x_(5, seed=1)}, d.square_times,
     "transformed input", "y's gradient is the right one with x and y swapped"),
    (d.SinAtOutput, {"x": x_(6)}, d.sin, "transformed input",
     "x's gradient is the right one at the output in place of x"),
    (d.SinNanBelowZero, {"x": x_(6)}, d.sin, "not finite",
     "x's gradient is NaN at 4 of 6 elements ((1,), (2,), (4,), ...) where the right one is "
     "finite"),
    (d.SinInfBelowZero, {"x": x_(6)}, d.sin, "not finite", "x's gradient is inf at 4 of 6"),
]


@pytest.mark.parametrize("fn, xs, reference, kind, says", CATALOGUE,
                         ids=[f"{c[3]}-{c[0].__name__}" for c in CATALOGUE])
def test_each_kind_of_mistake_gets_its_diagnosis(fn, xs, reference, kind, says):
    for found in (against_numbers(fn.apply, xs), against_reference(fn.apply, reference, xs)):
        assert found is not None and found.kind == kind, found
        assert says in found.says, found.says
        assert found.elements and all(e.got != e.expected for e in found.elements)


def test_nan_and_inf_lead_the_table_of_elements_and_reach_json_as_such():
    found = asdict(against_numbers(d.SinNanBelowZero.apply, {"x": x_(6)}))
    assert [e["got"] for e in found["elements"]][:4] == ["nan"] * 4
    assert all(isinstance(e["got"], float) for e in found["elements"][4:])
    found = asdict(against_reference(d.SinInfBelowZero.apply, d.sin, {"x": x_(6)}))
    assert {e["got"] for e in found["elements"][:4]} <= {"inf", "-inf"}


@pytest.mark.parametrize("fn, xs, reference", [
    (d.SinNoPattern, {"x": x_(6)}, d.sin),
    (d.SinNoPattern, {"x": x_(3, 3)}, d.sin),
])
def test_no_simple_pattern_names_only_the_kinds_tried_on_its_shape(fn, xs, reference):
    for found in (against_numbers(fn.apply, xs), against_reference(fn.apply, reference, xs)):
        assert found.kind == "no simple pattern", found
        tried = found.says.split("(tried: ")[1].split("): ")[0]
        assert ("a transpose" in tried) == (xs["x"].dim() == 2), tried  # square: tried
        assert "swap" not in tried and "broadcast" not in tried, tried  # one input, no batch
        assert "a factor, a sign" in tried and "-x" in tried, tried


def test_a_backward_that_is_not_reentrant_is_said_so():
    from demos.lab.checks.gradients import gradcheck

    c = gradcheck("gradcheck", d.SinCountsCalls.apply, {"x": x_(5)}, torch.device("cpu"))
    assert not c.passed and "not reentrant" in c.detail and "NOTE" not in c.detail
    assert c.diagnosis.kind == "not reentrant", c.diagnosis
    assert "gives different values when run twice on the same input" in c.diagnosis.says
    assert "Besides" not in c.diagnosis.says and not c.diagnosis.elements
    c = gradcheck("gradcheck", d.SinCountsCallsTripled.apply, {"x": x_(5)}, torch.device("cpu"))
    assert c.diagnosis.kind == "not reentrant" and c.diagnosis.says.endswith(
        "Besides, x's gradient is 3 times the right one: a constant factor is off; multiply it "
        "by 1/3"), c.diagnosis


def test_a_deliberate_gradient_checked_without_intended_gets_the_hint(tmp_path):
    r = check_function(d.Identity, inputs={"x": 3 * x_(6)}, reference=d.clipped, support=[],
                       output_dir=tmp_path, quiet=True)
    assert [c.name for c in r.failures] == ["gradcheck"]
    why = r.failures[0].diagnosis
    assert why.kind == "matches the reference" and why.input == "x", why
    assert "a deliberate gradient" in why.says and "`intended: true`" in why.says
    assert check_function(d.Identity, inputs={"x": 3 * x_(6)}, reference=d.clipped,
                          intended=True, support=[], output_dir=tmp_path, quiet=True).passed


def line_of(cls, text):
    import inspect

    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


@pytest.mark.parametrize("fn, check, text, method", [
    (d.SinNameError, "backward runs", "cos(x)", "backward"),
    (d.SinWrongShape, "forward runs", "torch.ones(7", "forward"),
])
def test_an_error_in_the_users_code_names_its_file_and_line(tmp_path, fn, check, text, method):
    r = check_function(fn, inputs={"x": x_(5)}, support=[], output_dir=tmp_path, quiet=True)
    detail = {c.name: c.detail for c in r.failures}[check]
    at = f"fixtures/diagnosed.py:{line_of(fn, text)} in {method})"  # relative under the cwd
    assert detail.endswith(at) and "\n" not in detail, detail
    log = (r.folder / "run.log").read_text()
    assert "raised in the user's code:\nTraceback" in log and f"line {line_of(fn, text)}" in log



@pytest.mark.parametrize("fn, xs", [
    (d.Sin, {"x": x_(6)}), (d.HalfSquare, {"x": x_(5)}),
    (docs.LegendrePolynomial3Modern, {"x": x_(7)}), (docs.MyReLUModern, {"x": x_(8)}),
    (docs.MyExpModern, {"x": x_(5)}),
    (docs.MultiplyAddModern, {"w": x_(2, 2), "x": x_(2, 2, seed=1), "b": x_(2, 2, seed=2)}),
    (docs.LinearFunctionModern, {"input": x_(4, 3), "weight": x_(2, 3, seed=1),
                                 "bias": x_(2, seed=2)}),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_right_function_gets_no_diagnosis(fn, xs):
    assert against_numbers(fn.apply, xs) is None
    assert forward_against_numbers(fn.apply, xs) is None
    assert second_against_numbers(fn.apply, xs) is None


def test_a_wrong_jvp_and_a_detached_backward_are_diagnosed_too():
    found = forward_against_numbers(d.SinJvpHalved.apply, {"x": x_(5)})
    assert found.kind == "factor" and found.says.startswith(
        "the tangent of the output is 1/2 times the right one"), found
    found = second_against_numbers(d.CubeDetached.apply, {"x": x_(5)})
    assert found.kind == "zero" and "the backward detaches something it depends on" in \
        found.says and found.output == "the backward's gradient of x"


def test_a_factor_is_said_as_people_say_it():
    assert [ratio(c) for c in (2, 0.5, 2 / 3, -3, 1.5, 0.70710678)] == \
        ["2", "1/2", "2/3", "-3", "3/2", "0.7071"]


def test_the_diagnosis_reaches_every_place_a_failure_is_shown(tmp_path):
    """From check_function: the result's checks carry it; the console says WHY in one line;
    summary.json, explain.txt and the report have it, the report beside the failing check."""
    r = check_function(d.SinTripled, inputs={"x": x_(6)}, reference=d.sin, support=[],
                       output_dir=tmp_path, quiet=True)
    failed = {c.name: c.diagnosis for c in r.failures}
    assert set(failed) == {"gradcheck", "parity with the reference"}
    assert all(v.kind == "factor" and v.input == "x" for v in failed.values())
    folder = r.entries[0].folder
    explain = (folder / "explain.txt").read_text()
    assert "Why 'gradcheck' and 'parity with the reference' failed (factor): the output, " \
        "w.r.t. x" in explain
    summary = json.loads((r.folder / "summary.json").read_text())
    checks = {c["name"]: c for c in summary["scenarios"][0]["checks"]}
    assert checks["gradcheck"]["diagnosis"]["says"].startswith("x's gradient is 3 times")
    assert "diagnosis" not in checks["forward runs"]  # a passing check carries none
    report = (r.folder / "report.html").read_text()
    assert report.count('<div class="why"><b>Why:</b> x&#39;s gradient is 3 times') == 2


def test_the_console_says_why_for_a_config(tmp_path, monkeypatch):
    from tests.conftest import FIXTURES

    monkeypatch.syspath_prepend(str(FIXTURES.parent.parent))
    config = tmp_path / "c.yaml"
    config.write_text("scenarios:\n- scenario: custom_function\n"
                      "  function: tests.fixtures.diagnosed:SinNegated\n"
                      "  reference: tests.fixtures.diagnosed:sin\n  support: []\n"
                      "  inputs: [{name: x, shape: [5]}]\n")
    code, out, _ = cli("--config", config, "--output-dir", tmp_path / "o", "--no-progress")
    assert code == 1
    why = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("WHY")]
    assert why == ["WHY x's gradient has the wrong sign: a minus too many or too few"]
    fails = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("FAIL ")]
    assert [f.split(":")[0] for f in fails] == ["FAIL gradcheck", "FAIL parity with the reference"]
    assert out.index(fails[1]) < out.index(why[0])  # under both checks it explains
    explain = next((tmp_path / "o").glob("*/custom_function/explain.txt")).read_text()
    assert explain.count("Why ") == 1 and \
        "Why 'gradcheck' and 'parity with the reference' failed (sign)" in explain


def test_one_exception_in_several_checks_is_one_fail_line(tmp_path):
    """A backward one gradient short: five checks stopped by one RuntimeError (one of them
    saying it after words of its own), one FAIL line."""
    r = check_function(d.MulMissingNone, inputs={"x": x_(3), "w": x_(3, seed=1)},
                       reference=d.mul, support=[], double_backward=True, output_dir=tmp_path,
                       quiet=True)
    from demos.lab.core.console import entry_lines

    lines = [ln.strip() for ln in entry_lines(r.entries[0].summary, 10)[1:]]
    assert lines == [
        "FAIL backward returns one grad per input: returned 1 for 2 inputs (x, w)",
        "FAIL autograd accepts the backward, gradcheck, gradgradcheck, parity with the "
        "reference, second backward agrees: second_backward (one error stopped them): "
        "RuntimeError: function MulMissingNoneBackward returned an incorrect number of "
        "gradients (expected 2, got 1)"], lines


def test_a_wrong_jvp_says_why_in_forward_mode_agrees(tmp_path):
    r = check_function(d.SinJvpHalved, inputs={"x": x_(5)}, reference=d.sin,
                       support=["forward_ad"], output_dir=tmp_path, quiet=True)
    why = {c.name: c.diagnosis for c in r.failures}["forward mode agrees: forward_mode"]
    assert why.kind == "factor" and why.probe == "tangent" and why.input == "x"


class Dirty(torch.autograd.Function):
    """x.mul_(2), marked dirty: right."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, g):
        return 2 * g


class DirtyTripled(Dirty):
    @staticmethod
    def backward(ctx, g):
        return 3 * g


class BigAndSquare(torch.autograd.Function):
    """(1e7 + x, x**2): right; finite differences of the first are rounded to 1e-3."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return 1e7 + x, x ** 2

    @staticmethod
    def backward(ctx, g1, g2):
        x, = ctx.saved_tensors
        return g1 + 2 * x * g2


class BigAndSquareHalved(BigAndSquare):
    @staticmethod
    def backward(ctx, g1, g2):
        x, = ctx.saved_tensors
        return g1 + x * g2


class MeanIndexAndDouble(torch.autograd.Function):
    """(x.mean() marked non-differentiable, 2 x): right."""

    @staticmethod
    def forward(ctx, x):
        m = x.detach().mean()
        ctx.mark_non_differentiable(m)
        return m, 2 * x

    @staticmethod
    def backward(ctx, g_m, g):
        return 2 * g


class MeanIndexAndDoubleNegated(MeanIndexAndDouble):
    @staticmethod
    def backward(ctx, g_m, g):
        return -2 * g


class OwnTwice(torch.autograd.Function):
    """x * y whose backward gives (g x, g x): y's is right only by chance of the formula, x's
    is not the other's swapped in."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * x, g * x


def dirty_copy(fn):
    """As the checks apply a mark_dirty Function: to copies of what requires grad."""
    from demos.lab.checks.gradients import with_fixed

    return with_fixed(fn.apply, {}, copies=True)


@pytest.mark.parametrize("fn, xs, kind, output", [
    (Dirty, None, None, None), (DirtyTripled, None, "factor", "the output"),
    (BigAndSquare, None, None, None), (BigAndSquareHalved, None, "factor", "output 1"),
    (MeanIndexAndDouble, None, None, None),
    (MeanIndexAndDoubleNegated, None, "sign", "output 1"),
], ids=lambda v: getattr(v, "__name__", None) if isinstance(v, type) else None)
def test_what_an_outside_review_found(fn, xs, kind, output):
    """In place (its finite differences on copies), an output near 1e7 (gradcheck's own
    tolerance), an output marked non-differentiable (no gradient expected there)."""
    x = x_(5)
    call = dirty_copy(fn) if issubclass(fn, Dirty) else fn.apply
    before = x.detach().clone()
    found = against_numbers(call, {"x": x})
    assert torch.equal(x.detach(), before)  # the caller's tensor untouched
    assert (found and (found.kind, found.output)) == ((kind, output) if kind else None), found


def test_only_a_true_swap_is_called_swapped():
    found = against_numbers(OwnTwice.apply, {"x": x_(4), "y": x_(4, seed=1)})
    assert found.kind != "swapped", found


def test_a_second_diagnosis_never_raises():
    class Raises(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            raise ValueError("boom")

    assert second_against_numbers(Raises.apply, {"x": x_(3)}) is None
    assert second_against_numbers(d.Sin.apply, {"x": x_(3), "n": 2}) is None


# -- issue 51, item 10: wrong verdicts a second outside corpus found ------------------------
def test_a_backward_that_changes_grad_output_in_place_is_judged_by_its_values(tmp_path):
    """`g *= 2; return g` is right in value: parity and the diagnosis each give backward a
    grad_output of its own (the reference was handed the changed one: "1/2 times"), as torch's
    gradcheck does; the check of grad_output still names the change."""
    xs = {"x": x_(6)}
    assert torch.autograd.gradcheck(d.TwiceInPlace.apply, (xs["x"],))
    assert against_reference(d.TwiceInPlace.apply, d.twice, xs) is None
    assert against_numbers(d.TwiceInPlace.apply, xs) is None
    r = check_function(d.TwiceInPlace, inputs=xs, reference=d.twice, support=[],
                       output_dir=tmp_path, quiet=True)
    assert [(c.name, c.detail) for c in r.failures] == [
        ("backward leaves grad_output unchanged",
         "backward modified grad_output [0] in place; clone it first")]


def test_a_sparse_gradient_for_a_dense_input_is_said_as_what_torch_refuses(tmp_path):
    """Its values are right; torch's gradcheck refuses its layout. Said so, not "not the
    forward's derivative ... needs `intended: true`"; with a reference, that its values are the
    reference's."""
    from torch.autograd.gradcheck import GradcheckError

    with pytest.raises(GradcheckError, match="grad is incorrect layout"):
        torch.autograd.gradcheck(d.SinSparseGrad.apply, (x_(6),))
    for reference in (d.sin, None):
        r = check_function(d.SinSparseGrad, inputs={"x": x_(6)}, reference=reference,
                           support=[], output_dir=tmp_path, quiet=True)
        [failed] = r.failures
        why = failed.diagnosis
        assert failed.name == "gradcheck" and why.kind == "layout" and why.input == "x", why
        assert why.says.startswith(
            "x's gradient is sparse (torch.sparse_coo) where x is dense (torch.strided): torch's "
            "gradcheck refuses a gradient whose layout is not its input's (\"grad is incorrect "
            "layout\")"), why.says
        assert "grad.to_dense()" in why.says and "intended" not in why.says
        assert ("Its values are right: the reference's (parity holds)" in why.says) == (
            reference is not None)


def test_an_intended_gradient_that_is_none_gets_the_zero_diagnosis(tmp_path):
    """checks.md promises `zero` for a gradient that is None where one is needed; the intended
    gradient's check (parity's comparison) gave none."""
    from demos.scenarios.custom_function import INTENDED

    r = check_function(d.ClippedNone, inputs={"x": 3 * x_(6)}, reference=d.clipped,
                       intended=True, support=[], output_dir=tmp_path, quiet=True)
    failed = {c.name: c for c in r.failures}
    assert failed[INTENDED].detail == "grad x: custom gives None, reference (6,)"
    why = failed[INTENDED].diagnosis
    assert why is not None and why.kind == "zero" and why.says.startswith(
        "x's gradient is None where one is needed"), why


@pytest.mark.parametrize("fn, reference, lost", [
    (d.SquareOfDoubleOnCtx, d.square_of_double, "ctx.doubled"),
    (d.SiLUSavesSigmoid, d.silu, "ctx.saved_tensors[1]"),
], ids=["an intermediate on ctx (pytorch#58509)", "a saved intermediate (pytorch#104040)"])
def test_a_second_derivative_through_tensors_without_a_graph_says_so_and_the_fix(
        tmp_path, fn, reference, lost):
    """gradcheck passes them and gradgradcheck fails them (torch's own verdicts); its WHY said
    "Jacobian mismatch" or "detaches something" without why: it names the tensor kept for
    backward that carries no graph of the inputs, and the two fixes."""
    x = x_(6)
    assert torch.autograd.gradcheck(fn.apply, (x,))
    assert not torch.autograd.gradgradcheck(fn.apply, (x,), raise_exception=False)
    r = check_function(fn, inputs={"x": x}, reference=reference, double_backward=True,
                       support=["double_backward"], output_dir=tmp_path, quiet=True)
    failed = {c.name: c for c in r.failures}
    why = failed["gradgradcheck"].diagnosis
    assert why.output == "the backward's gradient of x", why
    assert f"the backward computes from {lost}, which changes with the inputs but carries no " \
        "graph of them" in why.says, why.says
    assert "decorate backward with @once_differentiable (torch then refuses it: the " \
        "double_backward row is unsupported); else save the inputs with " \
        "ctx.save_for_backward and recompute it from the inputs in backward" in why.says
    assert r.entries[0].summary.support[fn.__name__]["double_backward"].status == "fails"


@pytest.mark.parametrize("fn, reference, double", [
    (d.SquareOfDoubleOnce, d.square_of_double, False),  # the row unsupported, as torch refuses
    (d.SquareOfDoubleRecomputed, d.square_of_double, True),
    (d.ExpKeepsOutput, torch.exp, True), (d.SquareKeepsInput, d.square, True),
], ids=lambda v: getattr(v, "__name__", None) if isinstance(v, type) else None)
def test_their_right_twins_pass_and_keeping_an_input_or_output_on_ctx_is_no_such_mistake(
        tmp_path, fn, reference, double):
    """The fixes pass; an input or an output kept as a ctx attribute carries its graph, and
    torch's gradgradcheck passes it (hazards of their own, memory and hooks, are not this
    diagnosis's: the check 'tensors saved with save_for_backward' fails them, alone)."""
    x = x_(6)
    assert torch.autograd.gradgradcheck(fn.apply, (x,), raise_exception=False) == double
    r = check_function(fn, inputs={"x": x}, reference=reference, double_backward=double,
                       support=["double_backward"], output_dir=tmp_path, quiet=True)
    kept = fn in (d.ExpKeepsOutput, d.SquareKeepsInput)
    assert [c.name for c in r.failures] == (["tensors saved with save_for_backward"] if kept
                                            else []), [(c.name, c.detail) for c in r.failures]
    assert not any(c.diagnosis for c in r.checks)
    row = r.entries[0].summary.support[fn.__name__]["double_backward"].status
    assert row == ("ok" if double else "unsupported")
    assert second_against_numbers(fn.apply, {"x": x}) is None or not double
