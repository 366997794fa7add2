"""The rows of real use (demos.lab.checks.hazards): each hazard of tests/fixtures/hazard_fns.py,
written as the project it comes from wrote it, fails its row with the fix named; each right
twin passes every row; what a Function keeps on ctx, and what it saves, are said."""
import pytest
import torch

from demos import check_function
from demos.lab.checks import hazards, support
from demos.lab.checks.gradients import with_fixed
from tests.fixtures import hazard_fns as h
from tests.fixtures.hazard_fns import real_use as r

D = torch.float64
ROWS = list(support.HAZARDS)


def x_(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=D,
                       requires_grad=True)


def dense():
    return {"x": x_(2, 3, 4), "w": x_(4, 5, seed=1)}


def linear():
    return {"x": x_(4, 3), "w": x_(3, 3, seed=1)}


def pair():
    return {"a": x_(5), "b": x_(5, seed=1)}


# row, hazard, its right twin, inputs, reference, what the failing row's detail says
CASES = [
    ("grad_layouts", r.FusedDenseView, r.FusedDense, dense, r.matmul,
     "backward raises given grad_output transposed: RuntimeError: view size is not compatible"),
    ("grad_layouts", h.ScaleFlatKernel, h.ScaleKernel, lambda: {"x": x_(3, 4)},
     lambda x: 3 * x, "grad_output transposed gives other gradients than the same values "
                      "contiguous"),
    ("aliased_inputs", h.MulInPlaceSavesOther, h.MulInPlace, pair, lambda a, b: a * b,
     "with a and b one tensor (tied weights) its gradient is not the sum of a's and b's"),
    ("aliased_inputs", r.EmaInPlace, r.Ema, pair, None,
     "with a and b one tensor its value differs from theirs with b a copy of a"),
    ("checkpoint", r.SquareStepScaled, r.Square, lambda: {"x": x_(5)}, lambda x: x * x,
     "the forward run again gave the same values but saved others"),
    ("checkpoint", h.DropoutCountedSeed, None, lambda: {"x": x_(5)}, None,
     "the forward gives other values when run again (state outside torch's random numbers"),
    ("saved_hooks", r.GeluReadsSavedTwice, r.Gelu, lambda: {"x": x_(5)}, None,
     "backward reads ctx.saved_tensors twice (at configs/examples/real_use.py:"),
    ("saved_hooks", h.SinCosReadsPerOutput, h.SinCos, lambda: {"x": x_(5)},
     lambda x: (torch.sin(x), torch.cos(x)), "backward reads ctx.saved_tensors twice"),
    ("autocast", r.LinearNoAmp, r.LinearAmp, linear, r.matmul,
     "expected m1 and m2 to have the same dtype"),
    ("autocast", h.LogSumExpHalf, h.LogSumExp, lambda: {"x": x_(4, 16)}, h.logsumexp,
     "off the float32 reference's, where the reference's own autograd under it is 0 off"),
]
FIXES = {"grad_layouts": "contiguous()", "aliased_inputs": "out of place",
         "checkpoint": "make forward a function of its inputs",
         "saved_hooks": "read it once: x, = ctx.saved_tensors",
         "autocast": "@torch.amp.custom_fwd(device_type='cpu')"}


IN_PLACE = (h.MulInPlaceSavesOther, h.MulInPlace, r.EmaInPlace, r.Ema)


def matrix(cls, xs, reference, rows=ROWS):
    """The rows of `cls` as custom_function runs them: one that changes its input in place
    (mark_dirty) on copies."""
    return support.matrix(with_fixed(cls.apply, {}, copies=cls in IN_PLACE), xs, reference,
                          rows=rows)


@pytest.mark.parametrize("row, hazard, twin, inputs, reference, says", CASES,
                         ids=[f"{c[0]}-{c[1].__name__}" for c in CASES])
def test_each_hazard_fails_its_row_naming_the_fix(row, hazard, twin, inputs, reference, says):
    found = matrix(hazard, inputs(), reference, [row])[row]
    assert found.status == "fails" and says in found.detail, found
    if row in ("grad_layouts", "checkpoint", "saved_hooks"):
        fix = "read ctx.saved_tensors once" if "Unpack" in found.detail else FIXES[row]
        assert fix in found.detail or FIXES[row] in found.detail, found
    else:
        assert FIXES[row] in found.detail, found


@pytest.mark.parametrize("row, hazard, twin, inputs, reference, says",
                         [c for c in CASES if c[2] is not None],
                         ids=[f"{c[0]}-{c[2].__name__}" for c in CASES if c[2] is not None])
def test_each_right_twin_passes_every_row(row, hazard, twin, inputs, reference, says):
    rows = matrix(twin, inputs(), reference, ["backward", *ROWS])
    assert {k: r.status for k, r in rows.items() if r.status not in ("ok", "skipped")} == {}, \
        rows


def test_the_checkpoint_hazard_without_a_twin_has_one_that_takes_its_seed():
    """DropoutCountedSeed's twin takes the seed as an argument (a fixed one of apply)."""
    apply = with_fixed(h.DropoutSeeded.apply, {1: __import__(
        "demos.lab.checks.gradients", fromlist=["Fixed"]).Fixed("seed", 7)})
    rows = support.matrix(apply, {"x": x_(5)}, None, rows=["backward", *ROWS])
    assert {k: r.status for k, r in rows.items() if r.status not in ("ok", "skipped")} == {}


@pytest.mark.parametrize("hazard, twin, held", [
    (r.SigmoidKeepsOutput, r.Sigmoid, "ctx.result holds the output (a cycle"),
    (h.CubeKeepsInput, h.Cube, "ctx.input holds x, an input that requires grad")])
def test_a_tensor_kept_on_ctx_fails_its_check_and_save_for_backward_passes(hazard, twin, held,
                                                                         tmp_path):
    """pytorch#58509: gradcheck right, double grad silently wrong; torch asks for
    save_for_backward for inputs and outputs."""
    bad = check_function(hazard, {"x": x_(5)}, torch.sigmoid if hazard is r.SigmoidKeepsOutput
                         else lambda x: x ** 3, output_dir=tmp_path, quiet=True)
    kept = {c.name: c for c in bad.checks}[hazards.KEPT]
    assert kept.passed is False and kept.detail.startswith(held), kept.detail
    assert "save it with ctx.save_for_backward" in kept.detail
    assert [c.name for c in bad.failures] == [hazards.KEPT]  # gradcheck is right: it passes
    good = check_function(twin, {"x": x_(5)}, output_dir=tmp_path, quiet=True)
    assert good.passed and {c.name: c for c in good.checks}[hazards.KEPT].passed


def test_other_tensors_on_ctx_are_a_note():
    class KeepsMask(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mask = x > 0  # an intermediate, not an input or output: fine
            return x.clamp(min=0)

        @staticmethod
        def backward(ctx, g):
            return g * ctx.mask

    found = hazards.kept_on_ctx(KeepsMask.apply, {"x": x_(5)})
    assert found.passed and "also on ctx: ctx.mask (bool (5,))" in found.detail


def test_memory_says_what_is_saved_and_what_backward_never_reads():
    note = matrix(h.ExpSavesInputToo, {"x": x_(64, 128)}, torch.exp, ["memory"])["memory"]
    assert note.status == "ok"
    assert note.detail == ("saves x and the output (2 x 64 KiB); backward never reads x; the "
                           "reference's autograd saves 1 tensor(s), 64 KiB")
    kept = matrix(r.SigmoidKeepsOutput, {"x": x_(5)}, torch.sigmoid, ["memory"])["memory"]
    assert kept.detail.startswith("saves nothing;")  # a ctx attribute escapes the hooks


def test_a_sparse_tensor_taken_saved_or_returned_makes_the_rows_unsupported():
    from tests.fixtures import edge_fns
    rows = support.matrix(edge_fns.SparseSaved.apply, {"x0": x_(4, 3)}, None, rows=ROWS)
    assert {r.status for r in rows.values()} == {"unsupported"}
    assert rows["autocast"].detail.startswith("a sparse tensor taken, saved or returned")


def test_a_random_forward_with_torchs_random_numbers_passes_checkpoint():
    """checkpoint restores torch's RNG for the forward it runs again: a dropout is no hazard."""
    class Dropout(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            mask = (torch.rand(x.shape, dtype=x.dtype) > 0.5).to(x.dtype) * 2
            ctx.save_for_backward(mask)
            return x * mask

        @staticmethod
        def backward(ctx, g):
            mask, = ctx.saved_tensors
            return g * mask

    rows = support.matrix(Dropout.apply, {"x": x_(5)}, None, rows=ROWS)
    assert {k: r.status for k, r in rows.items() if r.status not in ("ok", "skipped")} == {}


def test_torch_compile_crashing_inside_torch_is_torchs_not_a_failing_row():
    """Found by an outside corpus: `AssertionError: Expected fwd_out to be a
    BaseListVariable`, raised in Dynamo, made a compiled row `fails` (the docs keep that for
    wrong values); one raised in the user's code still fails."""
    from functools import partial

    inside = support.attempt(partial(torch._assert, False, "Expected fwd_out to be a "
                                     "BaseListVariable"), compiling=True)
    assert inside.status == "unsupported" and inside.detail.endswith(
        "-> torch.compile crashed inside torch: torch's failure, not your Function's")

    def users():
        raise AssertionError("mine")
    assert support.attempt(users, compiling=True).status == "fails"
    assert support.attempt(partial(torch._assert, False, "x")).status == "fails"  # eager


def test_a_crash_in_the_code_torchs_compiler_generated_is_torchs(tmp_path, monkeypatch):
    """Under ATEN_CPU_CAPABILITY=default after a run at avx512, inductor reused its cached
    vectorised kernel and g++ failed on it ("'at::vec' has not been declared"), raised from
    the module inductor wrote in its cache: the inductor row said `fails`. That folder is
    torch's, as its package is."""
    import torch._inductor.runtime.cache_dir_utils  # noqa: F401  # torch's compiler, loaded

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    made = tmp_path / "cache" / "tx" / "ctx4ov64.py"
    made.parent.mkdir(parents=True)
    made.write_text("def load():\n    raise RuntimeError('C++ compile error')\n")
    scope: dict = {}
    exec(compile(made.read_text(), str(made), "exec"), scope)
    found = support.attempt(scope["load"], compiling=True)
    assert found.status == "unsupported" and "torch.compile crashed inside torch" in \
        found.detail, found


def test_the_shipped_examples_of_real_use(tmp_path):
    """configs/examples/real_use_*.yaml: each hazard's entry fails, its row (or check) saying
    the fix; each twin passes every row."""
    from tests.conftest import CONFIGS, only_run_dir, run_main, summary

    assert run_main(tmp_path / "bad", "--config", CONFIGS / "examples" /
                    "real_use_mistake.yaml") == 1
    for e in summary(only_run_dir(tmp_path / "bad"))["scenarios"]:
        row = e["id"].removesuffix("_mistake")
        failed = {c["name"]: c["detail"] for c in e["checks"] if c["passed"] is False}
        name = hazards.KEPT if row == "save_for_backward" else "support matrix"
        assert e["status"] == "failed" and list(failed) == [name], (row, failed)
        if name == "support matrix":
            function = next(iter(e["support"]))
            assert e["support"][function][row]["status"] == "fails", (row, e["support"])
            assert " -> " in e["support"][function][row]["detail"]  # its fix
    assert run_main(tmp_path / "good", "--config", CONFIGS / "examples" /
                    "real_use_ok.yaml") == 0


# -- a callable argument that reaches its tensors itself (issue 51, item 10) --------------------
TIED = "its callable arguments compute with the checks' tensors"


def block_inputs(block, run=None):
    return {"run_function": block._forward if run is None else run, "length": 1,
            "x": torch.randn(5, 4, generator=torch.Generator().manual_seed(0),
                             requires_grad=True),
            "weight": block.lin.weight, "bias": block.lin.bias}


def torch_says(check, fn, block):
    """torch's own gradcheck (or gradgradcheck) on a float64 copy of the block, perturbing
    its parameters themselves."""
    import copy
    b = copy.deepcopy(block).double()
    xs = block_inputs(b)
    x = xs["x"].detach().double().requires_grad_()
    return check(lambda x, w, bias: fn.apply(b._forward, 1, x, w, bias),
                 (x, b.lin.weight, b.lin.bias), raise_exception=False)


def test_a_checkpoint_function_is_checked_with_the_tensors_its_callable_reaches(tmp_path):
    """guided-diffusion's CheckpointFunction was failed 'returned None, but weight requires
    grad', the checks' copies of the parameters being what run_function never sees; torch's
    gradcheck passes it. Now each call binds the block's parameters to its own tensors: what
    fails is what torch agrees is wrong in it (its inputs kept on ctx; a second derivative
    that torch's gradgradcheck fails too), and the block is left as it was."""
    torch.manual_seed(0)
    block = h.Block()  # float32, as a model holds it; the checks bind float64 copies
    params, values = dict(block.lin._parameters), [p.detach().clone() for p in
                                                   block.parameters()]
    assert torch_says(torch.autograd.gradcheck, h.CheckpointFunction, block)
    assert not torch_says(torch.autograd.gradgradcheck, h.CheckpointFunction, block)
    found = check_function(h.CheckpointFunction, block_inputs(block), output_dir=tmp_path,
                           quiet=True)
    by = {c.name: c for c in found.checks}
    assert by[TIED].passed is None and by[TIED].detail.startswith(
        "run_function computes with weight (run_function.__self__.lin.weight), bias "
        "(run_function.__self__.lin.bias) by itself"), by[TIED].detail
    assert by["each grad matches its input (None, shape, dtype)"].passed
    assert by["gradcheck"].passed and "x, weight, bias" in by["gradcheck"].detail
    assert [c.name for c in found.failures] == [hazards.KEPT, "support matrix"]
    assert "ctx.input_params[0] holds weight" in by[hazards.KEPT].detail
    rows = found.entries[0].summary.support["CheckpointFunction"]
    assert [k for k, r in rows.items() if r.status == "fails"] == ["double_backward"]
    assert block.lin._parameters == params and all(
        torch.equal(p, v) and p.grad is None for p, v in zip(block.parameters(), values))


def test_its_right_twin_passes_and_a_wrong_parameter_gradient_fails(tmp_path):
    """The twin (save_for_backward, @once_differentiable) passes every check and row, a whole
    module given as run_function too; doubling weight's gradient fails gradcheck naming weight,
    as torch's gradcheck fails it."""
    torch.manual_seed(0)
    block = h.Block()
    assert torch_says(torch.autograd.gradcheck, h.CheckpointSaved, block)
    for run in (None, block.lin):
        good = check_function(h.CheckpointSaved, block_inputs(block, run), output_dir=tmp_path,
                              quiet=True)
        assert good.passed, [(c.name, c.detail) for c in good.failures]
    assert not torch_says(torch.autograd.gradcheck, h.CheckpointWeightTwice, block)
    bad = check_function(h.CheckpointWeightTwice, block_inputs(block), output_dir=tmp_path,
                         quiet=True)
    failed = {c.name: c.detail for c in bad.failures}
    assert "gradcheck" in failed and "weight" in failed["gradcheck"], failed


def test_a_closure_variable_is_bound_and_a_tuple_cannot_be(tmp_path):
    """A tensor in a closure cell is bound as a module's parameter is; one in a tuple cannot be
    pointed elsewhere: the entry says so, and why, rather than judge copies it never sees."""
    w = x_(4, 3, seed=2)

    def made(w):
        return lambda x: x @ w
    x = x_(5, 4)
    good = check_function(h.CheckpointSaved, {"run": made(w), "length": 1, "x": x, "w": w},
                          output_dir=tmp_path, quiet=True)
    assert good.passed and "run computes with w (run → w)" in {
        c.name: c.detail for c in good.checks}[TIED]
    held = (w,)
    bad = check_function(h.CheckpointSaved, {"run": lambda x: x @ held[0], "length": 1, "x": x,
                                             "w": w}, output_dir=tmp_path, quiet=True)
    assert [(c.name, c.detail) for c in bad.failures] == [(TIED, (
        "run reaches w through run → held[0], which cannot be pointed at the checks' copies: "
        "its gradient cannot be checked on copies; hold it in a list, a module or a closure "
        "variable"))]


def test_inductor_differing_from_eager_is_a_differs_row_without_a_reproduction():
    """inductor's row raised torch's disagreement with its detail alone, and the matrix then
    crashed unpacking a reproduction it did not have (seen when inductor's cache from another
    ATEN_CPU_CAPABILITY gave other numbers): the row is `differs`, said."""
    def differs():
        raise support.TorchDiffers("torch differs: inductor's compiled forward and backward "
                                   "against eager: compiled value differs")
    found = support.attempt(differs, repro=("Square", "inductor"), compiling=True)
    assert found.status == "differs" and found.detail.startswith("torch differs: inductor")

