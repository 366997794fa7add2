"""What a Function supports (demos.lab.checks.support): right Functions get no `fails`; mistakes
that only a transform can see are caught in their row and no other."""
import os

import pytest
import torch

from demos.documents import functions as fns
from demos.lab.checks import support
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.linear_function import LinearFunction
from demos.scenarios.multiply_add import MultiplyAdd
from demos.scenarios.my_exp import MyExp
from demos.scenarios.my_relu import MyReLU
from tests.fixtures import wrong_functions as wrong

D = torch.float64


def x43():
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=D,
                       requires_grad=True)


def statuses(rows):
    return {k: r.status for k, r in rows.items()}


MISTAKES = [  # Function, reference, the one row that fails (autocast's backward runs in float32)
    (wrong.P3JvpWrongFactor, fns.legendre_p3_reference, "forward_ad"),
    (wrong.ExpSavesOutputForForward, fns.exp_reference, "forward_ad"),
    (wrong.SquareVmapWrongValues, lambda x: x * x, "vmap"),
    (wrong.SquareVmapWrongOutDims, lambda x: x * x, "vmap"),
    (wrong.SquareReadsRawMemory, lambda x: x * x, "noncontiguous"),
    (wrong.SquareFiniteDifference, lambda x: x * x, ("float32", "autocast")),
]


@pytest.mark.parametrize("function, reference, row", MISTAKES,
                         ids=[m[0].__name__ for m in MISTAKES])
def test_each_mistake_is_caught_in_its_row_and_no_other(function, reference, row):
    rows = support.matrix(function.apply, {"x": x43()}, reference,  # compile: tested below
                          rows=[r for r in support.CAPABILITIES if r != "compile"])
    assert [k for k, r in rows.items() if r.status == "fails"] == (
        [row] if isinstance(row, str) else list(row)), statuses(rows)
    assert rows["backward"].status == "ok"  # backward is right in every one of them


def test_a_failing_row_names_the_input():
    rows = support.matrix(wrong.P3JvpWrongFactor.apply, {"x": x43()}, fns.legendre_p3_reference,
                          rows=["forward_ad"])
    assert "with respect to input 0 (x)" in rows["forward_ad"].detail


DOCUMENTS = [  # the documents' Functions, their references and inputs (as the scenarios have)
    (LegendrePolynomial3, fns.legendre_p3_reference, {"x": (5,)}, ()),
    (MyReLU, fns.relu_reference, {"x": (5,)}, ()),
    (MultiplyAdd, fns.multiply_add_reference, {"w": (5,), "x": (5,), "b": (5,)}, ("x",)),
    (MyExp, fns.exp_reference, {"x": (5,)}, ()),
    (LinearFunction, fns.linear_reference, {"input": (4, 3), "weight": (2, 3), "bias": (2,)},
     ()),
]


def inputs(shapes, no_grad):
    g = torch.Generator().manual_seed(1)
    return {k: (torch.randn(s, generator=g, dtype=D) + 0.1).requires_grad_(k not in no_grad)
            for k, s in shapes.items()}


# held in tests/test_compiled.py (their compiles cost seconds): classic unsupported, twin ok
COMPILED_TRANSFORMS = ("compile_grad", "compile_jvp", "compile_vmap", "inductor")


def test_the_documents_functions_and_their_twins():
    """Classic: backward and compile work, torch.func and forward mode refuse them. Twin: every
    transform works; torch.compile refuses a Function with a jvp (torch 2.13). No fails."""
    rows = [r for r in support.CAPABILITIES if r not in COMPILED_TRANSFORMS]
    for classic, reference, shapes, no_grad in DOCUMENTS:
        old = support.matrix(classic.apply, inputs(shapes, no_grad), reference, rows=rows)
        new = support.matrix(fns.MODERN[classic.__name__].apply, inputs(shapes, no_grad),
                             reference, rows=rows)
        name = classic.__name__
        assert statuses(old) == {
            "backward": "ok", "double_backward": "ok", "forward_ad": "unsupported",
            "func_grad": "unsupported", "vmap": "unsupported", "compile": "ok",
            "float32": "ok", "noncontiguous": "ok", "grad_layouts": "ok",
            "aliased_inputs": "ok" if name == "MultiplyAdd" else "skipped",  # w, b: (5,)
            "checkpoint": "ok", "saved_hooks": "ok", "memory": "ok",
            # the document's LinearFunction is no AMP Function: its mm needs custom_fwd there
            "autocast": "fails" if name == "LinearFunction" else "ok",
            "cuda": "ok" if torch.cuda.is_available() else "skipped"}, name
        assert "must implement the jvp function" in old["forward_ad"].detail
        assert "must override the setup_context staticmethod" in old["vmap"].detail
        assert "-> split forward(ctx, ...) into forward(...) and setup_context" \
            in old["func_grad"].detail
        assert statuses(new) == {**statuses(old), "forward_ad": "ok", "func_grad": "ok",
                                 "vmap": "ok", "compile": "unsupported",
                                 "autocast": "ok"}, name  # its bias added out of place
        assert "custom jvp" in new["compile"].detail


def test_the_readme_table_is_what_the_matrices_say():
    """The docs' table of the documents' Functions (demos/docs/checks.md), against the statuses
    asserted above."""
    import re

    from tests import docs
    head = "| capability | classic (`forward(ctx, ...)`) | modern twin |"
    table = docs.page("checks.md").split(head, 1)[1]
    rows = re.findall(r"^\| (\w+) \| ([\w ()]+?) \| ([\w ()]+?) \|$", table.split("\n\n")[0],
                      re.M)
    classic = {"backward": "ok", "double_backward": "ok", "forward_ad": "unsupported",
               "func_grad": "unsupported", "vmap": "unsupported", "compile": "ok",
               "float32": "ok", "noncontiguous": "ok", "grad_layouts": "ok",
               "aliased_inputs": "ok (MultiplyAdd) or skipped", "checkpoint": "ok",
               "saved_hooks": "ok", "autocast": "fails (LinearFunction) or ok", "memory": "ok",
               "cuda": "skipped (no GPU)"}
    classic.update(dict.fromkeys(("compile_grad", "compile_jvp", "compile_vmap"),
                                 "unsupported"))
    twin = {**classic, "forward_ad": "ok", "func_grad": "ok", "vmap": "ok",
            "compile": "unsupported", "compile_grad": "ok", "compile_jvp": "ok",
            "compile_vmap": "ok", "autocast": "ok"}
    assert rows == [(k, classic[k], twin[k]) for k in support.DEFAULT_ROWS]


# -- found by an outside probe -------------------------------------------------------------
class OnceSquare(torch.autograd.Function):
    """Right, and honest about second derivatives: @once_differentiable."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return 2 * x * g


def test_once_differentiable_is_unsupported_not_failing():
    rows = support.matrix(OnceSquare.apply, {"x": x43()}, lambda x: x * x)
    assert rows["double_backward"].status == "unsupported"
    assert "once_differentiable" in rows["double_backward"].detail
    assert "fails" not in statuses(rows).values()


def test_gradients_are_also_taken_at_non_contiguous_inputs():
    rows = support.matrix(wrong.SquareBackwardRawMemory.apply, {"x": x43()}, lambda x: x * x,
                          rows=["backward", "noncontiguous"])
    assert statuses(rows) == {"backward": "ok", "noncontiguous": "fails"}
    assert rows["noncontiguous"].detail.startswith("non-contiguous grad of x differs")


def test_vmap_tries_an_unbatched_input_and_the_batch_elsewhere():
    g = torch.Generator().manual_seed(0)
    inputs = {"a": torch.randn(3, 3, generator=g, dtype=D, requires_grad=True),
              "v": torch.randn(3, generator=g, dtype=D, requires_grad=True)}
    rows = support.matrix(wrong.MatVecSharedATransposed.apply, inputs, lambda a, v: a @ v,
                          rows=["vmap"])
    assert rows["vmap"].status == "fails"
    assert "first input unbatched, in_dims None" in rows["vmap"].detail


def test_float32_measures_the_functions_own_error_not_its_inputs_rounding():
    g = torch.Generator().manual_seed(0)
    big = {k: (10_000 + torch.rand(4, 3, generator=g, dtype=D)).requires_grad_()
           for k in ("x", "y")}
    assert support.matrix(torch.sub, big, lambda x, y: x - y,
                          rows=["float32"])["float32"].status == "ok"


def test_the_callers_tensors_are_left_alone_and_no_grad_rows_are_skipped():
    buf = torch.zeros(3, dtype=D)
    rows = support.matrix(wrong.AddToBuffer.apply,
                          {"x": torch.ones(3, dtype=D, requires_grad=True), "buf": buf})
    assert torch.equal(buf, torch.zeros(3, dtype=D)) and rows["backward"].status == "fails"
    none = support.matrix(fns.MyExpModern.apply, {"x": torch.ones(3, dtype=D)})
    assert {k: none[k].status for k in ("backward", "double_backward", "forward_ad",
                                        "func_grad")} == dict.fromkeys(
        ("backward", "double_backward", "forward_ad", "func_grad"), "skipped")
    # the rows that hold values too compare the values alone (they failed on torch's
    # "inputs argument to grad() cannot be empty"), and a wrong value still fails them
    for row in ("float32", "noncontiguous"):
        assert (none[row].status, none[row].detail.split(" ")[0]) == ("ok", "values"), none[row]
    halved = support.matrix(lambda x: fns.MyExpModern.apply(x) / 2, {"x": torch.ones(3, dtype=D)},
                            lambda x: x.exp(), rows=["float32"])["float32"]
    assert halved.status == "fails" and "float32 value" in halved.detail, halved


def test_one_wrong_backward_reads_as_one_cause():
    """A backward off by a factor fails the backward row and, through it, every row that takes
    a gradient; the matrix is one failed check that names the backward row as the cause; when a
    check above already ran the backward row's test (gradcheck), the matrix does not count it
    again; a required row is judged by its own check alone."""
    rows = support.matrix(wrong.P3MissingFactor.apply, {"x": x43()}, fns.legendre_p3_reference,
                          torch.device("cpu"), ["backward", "float32", "noncontiguous"])
    assert statuses(rows) == {"backward": "fails", "float32": "fails", "noncontiguous": "ok"}
    failed = {c.name: c.detail for c in support.checks(rows) if c.passed is False}
    assert list(failed) == ["support matrix"]
    assert failed["support matrix"].startswith("fails: backward (GradcheckError: Jacobian")
    assert "float32 (follows from the backward row)" in failed["support matrix"]
    found = support.checks(rows, done={"backward": "gradcheck"})
    assert [(c.name, c.passed) for c in found] == [("support matrix", True)]
    assert found[0].detail.startswith("fails, counted by the checks above: backward (as the "
                                      "gradcheck check found), float32 (follows from")
    found = support.checks(rows, require=["backward"])
    assert [(c.name, c.passed) for c in found] == [("support: backward (required)", False),
                                                   ("support matrix", True)]
    alone = {k: rows[k] for k in ("float32", "noncontiguous")}  # no backward row: its own
    assert [(c.name, c.passed) for c in support.checks(alone, done={"backward": "gradcheck"})] \
        == [("support matrix", False)]


def test_a_function_that_calls_sys_exit_fails_its_row_and_the_others_still_run():
    rows = support.matrix(wrong.SquareExitsOnGaps.apply, {"x": x43()}, None,
                          rows=["backward", "noncontiguous", "float32"])
    assert rows["noncontiguous"] == support.Row(
        "fails", "SystemExit: the Function called sys.exit(3)")
    assert rows["backward"].status == rows["float32"].status == "ok"


def test_a_matrix_takes_no_draws_from_the_callers_generator():
    torch.manual_seed(5)
    untouched = torch.rand(3)
    torch.manual_seed(5)
    rows = support.matrix(wrong.SquarePlusNoise.apply, {"x": x43()}, None,
                          rows=["backward", "float32"])
    assert rows["backward"].status == "fails"  # a random forward is no function of x
    assert torch.equal(torch.rand(3), untouched)


def test_the_rows_follow_torchs_settings_and_set_them_back(tmp_path, monkeypatch):
    fn, rows = wrong.SquarePlusOnesInDefaultDtype.apply, ["backward", "float32"]
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            got = support.matrix(fn, {"x": x43()}, rows=rows)
            assert not torch.is_grad_enabled()  # as the caller had it
    finally:
        torch.set_default_dtype(before)
    assert got["float32"].status == "fails" and "float64" in got["float32"].detail
    assert torch.get_default_dtype() == before and torch.is_grad_enabled()


def test_what_a_function_changes_is_set_back_after_its_matrix(tmp_path, monkeypatch):
    from tests.fixtures.user_fns import SquareModern

    class Meddles(SquareModern):
        @staticmethod
        def forward(x):
            os.chdir(tmp_path)
            os.environ["MEDDLED"] = "1"
            torch.set_default_dtype(torch.float64)
            return x * x

    monkeypatch.delenv("MEDDLED", raising=False)
    cwd, dtype = os.getcwd(), torch.get_default_dtype()
    try:
        rows = support.matrix(Meddles.apply, {"x": x43()}, rows=["backward"])
    finally:
        changed = (os.getcwd(), torch.get_default_dtype())
        os.chdir(cwd)
        torch.set_default_dtype(dtype)
    assert rows["backward"].status == "ok"
    assert changed == (cwd, dtype) and "MEDDLED" not in os.environ


class SortWithIndices(torch.autograd.Function):
    """torch.sort as a modern Function with a jvp: the values, and the indices (long, marked
    non-differentiable), as torch's own sort returns them. Right in every row it runs."""

    @staticmethod
    def forward(x):
        return torch.sort(x, dim=-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, idx = output
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        ctx.save_for_forward(idx)

    @staticmethod
    def backward(ctx, g, _):
        idx, = ctx.saved_tensors
        return torch.zeros_like(g).scatter(-1, idx, g)

    @staticmethod
    def jvp(ctx, t):
        idx, = ctx.saved_tensors
        return t.gather(-1, idx), None


def sort_reference(x):
    return torch.sort(x, dim=-1)


def test_the_forward_ad_row_takes_a_reference_with_outputs_that_have_no_gradient():
    """The reference's J·v by reverse mode (support.jvp_by_reverse) for outputs that are
    integer indices, constants or made in place: what torch.func.jvp gives them, no failure."""
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0), dtype=D)
    v = torch.randn(3, 4, generator=torch.Generator().manual_seed(1), dtype=D)
    for f in (sort_reference, lambda a: (a * a, torch.ones(2, dtype=D)),
              lambda a: a.mul_(3), lambda a: (2 * a).detach() + a):
        got = support.jvp_by_reverse(f, (x,), (v,))
        want = torch.func.jvp(f, (x.clone(),), (v,))[1]
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert torch.allclose(g.double(), w.double()), (f, g, w)
    rows = support.matrix(SortWithIndices.apply, {"x": x.requires_grad_()}, sort_reference,
                          rows=["backward", "forward_ad"])
    assert rows["forward_ad"].status == "ok", rows["forward_ad"]
