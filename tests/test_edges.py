"""The checker at the edges real code reaches (issue 43, items 2-5): sparse tensors, float32
inside, references written with a hook, complex outputs (item 1, real sizes and fast mode:
tests/test_gradients.py). Each verdict is torch's own gradcheck's on the same Function
(tests/fixtures/edge_fns.py: a right one and a wrong twin of each)."""
from __future__ import annotations

import pytest
import torch

from demos import check_function
from tests.fixtures import edge_fns as fns

D = torch.float64


def x_(*shape, seed=0):
    return torch.randn(*shape, dtype=D, generator=torch.Generator().manual_seed(seed),
                       requires_grad=True)


def checked(tmp_path, fn, inputs, reference=None, **kwargs):
    r = check_function(fn, inputs=inputs, reference=reference, output_dir=tmp_path,
                       quiet=True, **kwargs)
    e = r.entries[0]
    assert e.summary.error is None, e.summary.error  # a verdict, never an entry error
    return e, {c.name: c for c in e.checks}


# -- 2. sparse inputs, saves and outputs -----------------------------------------------------
def sparse_matrix(layout):
    d = torch.randn(4, 4, dtype=D, generator=torch.Generator().manual_seed(1))
    d[d.abs() < 0.7] = 0
    return d.to_sparse() if layout == "coo" else d.to_sparse_csr()


SPARSE = [  # (Function, its arguments, the reference)
    *[(f, lambda: [x_(4, 3)], fns.sparse_saved) for f in (fns.SparseSaved,
                                                          fns.SparseSavedUntransposed)],
    *[(f, lambda lay=lay, g=g: [sparse_matrix(lay).requires_grad_(g), x_(4, 3)], fns.spmm)
      for f in (fns.SpMM, fns.SpMMHalf) for lay in ("coo", "csr") for g in (False, True)],
    *[(f, lambda: [x_(4, 3)], None) for f in (fns.ToSparse, fns.ToSparseThrice)],
]


def torch_says(fn, args) -> bool:
    """torch's gradcheck: masked for sparse inputs, a sparse output made dense as it asks."""
    def call(*a):
        out = fn.apply(*a)
        return out.to_dense() if out.layout != torch.strided else out
    sparse = any(a.layout != torch.strided for a in args)
    try:
        return torch.autograd.gradcheck(call, tuple(args), masked=sparse,
                                        check_undefined_grad=not sparse)
    except Exception:
        return False


@pytest.mark.parametrize("fn, make, reference", SPARSE,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(SPARSE)])
def test_sparse_tensors_get_torchs_verdict_and_crash_nothing(fn, make, reference, tmp_path):
    expected = torch_says(fn, make())
    assert expected == (fn.__name__ in ("SparseSaved", "SpMM", "ToSparse"))
    e, c = checked(tmp_path, fn, make(), reference, double_backward=True)
    assert e.status == ("passed" if expected else "failed"), \
        [(k.name, k.detail) for k in e.failures]
    assert e.summary.support[fn.__name__]["backward"].status == ("ok" if expected
                                                                    else "fails")
    if expected and any(a.layout != torch.strided for a in make()):
        assert "masked: x0 sparse" in e.summary.support[fn.__name__]["backward"].detail
    assert e.backward["graphs"][0]["saved"]["error"] is None  # what backward keeps: read


def test_a_sparse_save_is_counted_by_its_values_and_indices(tmp_path):
    e, _ = checked(tmp_path, fns.SparseSaved, [x_(4, 3)], support=[])
    saved = e.backward["graphs"][0]["saved"]
    a = torch.eye(4, dtype=D) + torch.diag(torch.ones(3, dtype=D), 1)  # 7 values, (2, 7) indices
    assert [(s["name"], s["shape"], s["bytes"]) for s in saved["saves"]] == \
        [("saved_tensors[0]", list(a.shape), 7 * 8 + 2 * 7 * 8)]


# -- 3. float32 inside -----------------------------------------------------------------------
@pytest.mark.parametrize("fn, reference, what", [
    (fns.Square32, fns.square, "the output and x0's gradient are float32"),
    (fns.MaskedScale, fns.masked_scale, "x0's gradient is float32")])
def test_a_function_that_computes_in_float32_is_said_so_once_and_judged_so(
        fn, reference, what, tmp_path):
    e, c = checked(tmp_path, fn, [x_(4, 3)], reference, double_backward=True)
    assert e.status == "passed", [(k.name, k.detail) for k in e.failures]
    said = [k for k in e.checks if "float32" in k.name]
    assert [k.name for k in said] == ["the Function computes in float32"]
    assert said[0].detail.startswith(f"with float64 inputs, {what}: each check judges it at "
                                     f"float32's tolerance")
    assert "float32's step and tolerance" in c["gradcheck"].detail
    assert not any(k.diagnosis for k in e.checks)


def test_a_wrong_float32_function_fails_with_the_diagnosis_of_its_mistake(tmp_path):
    e, c = checked(tmp_path, fns.Square32Thrice, [x_(4, 3)], fns.square, support=[])
    assert e.status == "failed"
    assert c["gradcheck"].diagnosis.kind == "factor"
    assert c["parity with the reference"].diagnosis.says.startswith(
        "x0's gradient is 3/2 times the right one")


# -- 4. references: called as autograd calls them, in every row ------------------------------
@pytest.mark.parametrize("fn, reference, intended", [
    (fns.SinModern, fns.sin_hooked, False), (fns.Reversal, fns.reversed_by_hook, True)])
def test_a_reference_with_checks_mds_hook_recipe_works_in_every_row(
        fn, reference, intended, tmp_path):
    e, _ = checked(tmp_path, fn, [x_(4, 3)], reference, intended=intended)
    rows = e.summary.support[fn.__name__]
    assert e.status == "passed", [(k.name, k.detail) for k in e.failures]
    # every row that calls the reference ran it, hook and all
    for row in ("backward", "forward_ad", "func_grad", "float32"):
        assert rows[row].status == "ok", (row, rows[row])
    assert not any("hook" in r.detail for r in rows.values())


# -- 5. complex outputs of real inputs ------------------------------------------------------
@pytest.mark.parametrize("fn", [fns.Polar, fns.PolarConjugated])
def test_a_complex_output_gets_torchs_verdict(fn, tmp_path):
    try:
        expected = torch.autograd.gradcheck(fn.apply, (x_(4, 3),))
    except Exception:
        expected = False
    assert expected == (fn is fns.Polar)
    e, _ = checked(tmp_path, fn, [x_(4, 3)], fns.polar, double_backward=True)
    assert e.status == ("passed" if expected else "failed"), \
        [(k.name, k.detail) for k in e.failures]
    rows = e.summary.support[fn.__name__]
    assert rows["backward"].status == ("ok" if expected else "fails")
    if expected:
        assert not any(r.status == "fails" for r in rows.values()), rows


def test_a_wrong_complex_output_is_diagnosed_on_its_real_and_imaginary_parts(tmp_path):
    """The diagnosis compares a complex output as its real and imaginary parts (it cast the
    output to float64 and dropped the imaginary part, with torch's 'Casting complex values to
    real' warning)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        _, c = checked(tmp_path, fns.PolarConjugated, [x_(4, 3)], fns.polar, support=[])
    assert c["gradcheck"].diagnosis and c["parity with the reference"].diagnosis


# -- one WHY per mistake, whichever checks find it ------------------------------------------
@pytest.mark.parametrize("fn, inputs, reference, why", [
    (fns.Square32Thrice, [(4, 3)], fns.square, "x0's gradient is 3/2 times the right one"),
    (fns.SiLUHalf, [(64, 128)], fns.silu, "x0's gradient is 1/2 times the right one")])
def test_a_mistake_found_by_two_checks_in_their_own_words_is_one_why(
        fn, inputs, reference, why, tmp_path):
    """gradcheck (at float32's step, or on the block fast mode affords) and parity with the
    reference name one mistake in words of their own ('1.5 times' and '3/2 times'); the
    console, run.log and explain.txt say it once, in the reference's words."""
    from demos.lab.core.console import entry_lines

    e, c = checked(tmp_path, fn, [x_(*s) for s in inputs], reference, support=[])
    assert c["gradcheck"].diagnosis.says != c["parity with the reference"].diagnosis.says
    whys = [ln.strip() for ln in entry_lines(e.summary, 10) if ln.strip().startswith("WHY")]
    assert len(whys) == 1 and whys[0].startswith("WHY " + why), whys
    explain = (e.folder / "explain.txt").read_text()
    assert explain.count("Why ") == 1 and "'gradcheck' and 'parity with the reference'" in explain
    log = (e.folder.parent / "run.log").read_text()
    assert log.count("why gradcheck and parity with the reference: " + why) == 1


def test_not_reentrant_is_the_why_where_parity_finds_the_drift_too(tmp_path):
    """A backward that adds a growing counter: gradcheck says not reentrant; parity, run after,
    finds a drift at a few elements. The one WHY is the reentrancy (the parity's 'a kink or a
    branch' misled)."""
    from demos.lab.core.console import entry_lines
    from tests.fixtures import diagnosed as d

    e, c = checked(tmp_path, d.SinDrifts, [x_(4, 5)], d.sin, support=[])
    assert c["gradcheck"].diagnosis.kind == "not reentrant"
    assert c["parity with the reference"].diagnosis.kind == "some elements"
    whys = [ln.strip() for ln in entry_lines(e.summary, 10) if ln.strip().startswith("WHY")]
    assert len(whys) == 1 and "run twice" in whys[0], whys


def test_an_overflowing_forward_is_no_deliberate_gradient(tmp_path):
    """x² of inputs near 1e200 is inf: finite differences are NaN where the backward is
    right. The WHY says so, not that the gradient is deliberate (parity held: both inf)."""
    x = torch.tensor([1e200, -3e200, 2e200], dtype=D, requires_grad=True)
    e, c = checked(tmp_path, fns.Square, [x], fns.square,
                   support=[])
    d = c["gradcheck"].diagnosis
    assert c["gradcheck"].passed is False and d.kind == "right one not finite", d
    assert "overflows" in d.says and "intended" not in d.says
