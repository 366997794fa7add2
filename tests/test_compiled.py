"""Compiled transforms against eager (issue 35): torch.compile of torch.func.grad, jvp and vmap
as support rows; where torch's compiled path gives other numbers, the row says `differs` (not
the Function's failure) and a standalone script reproduces it (the script:
tests/test_repro.py)."""
from __future__ import annotations

import pytest
import torch

from demos.documents import functions as docs
from demos.lab.checks import support
from demos.scenarios.legendre_fit import LegendrePolynomial3
from demos.scenarios.linear_function import LinearFunction
from demos.scenarios.multiply_add import MultiplyAdd
from demos.scenarios.my_exp import MyExp
from demos.scenarios.my_relu import MyReLU
from tests.conftest import CONFIGS, run_captured, summary

EXAMPLES = [("reversal_ok", "GradientReversal"), ("round_ok", "RoundStraightThrough")]


def differing(example, tmp_path):
    run = run_captured(tmp_path / example, "--config", CONFIGS / "examples" / f"{example}.yaml",
                       "--set", f"scenarios.{example}.support=[compile_grad]")
    return run, summary(run.dir)["scenarios"][0]


@pytest.mark.parametrize("example, function", EXAMPLES)
def test_compiled_func_grad_differs_from_eager_for_an_intended_gradient(example, function,
                                                                        tmp_path):
    """torch 2.13.0: torch.compile(torch.func.grad(f)) differentiates the forward and ignores
    the Function's backward; eager uses it. torch's difference, so the run still passes."""
    run, e = differing(example, tmp_path)
    assert run.code == 0 and e["status"] == "passed", run.out
    row = e["support"][function]["compile_grad"]
    assert row["status"] == "differs", row
    assert row["detail"].startswith("torch differs: torch.compile(torch.func.grad) (backend "
                                    "aot_eager) gives ") and torch.__version__ in row["detail"]
    assert row["detail"].endswith(f"reproduce it alone: python repro_{example}_compile_grad.py")
    assert f"TORCH DIFFERS {function} compile_grad: torch differs" in run.out
    assert "support matrix" in {c["name"] for c in e["checks"] if c["passed"]}
    script = run.dir / example / f"repro_{example}_compile_grad.py"
    compile(script.read_text(), str(script), "exec")  # Python, whole


def test_a_right_function_is_ok_compiled(cpu):
    """...and the rows leave the caller's own compiled code compiled (issue 44: each row
    called torch._dynamo.reset(), and a notebook's next call of its own compiled model
    compiled it again)."""
    compiles = []

    def counting(graph, example_inputs):
        compiles.append(graph)
        return graph.forward

    mine = torch.compile(lambda t: t.sin() * 2, backend=counting)
    mine(torch.ones(3))
    x = torch.linspace(-1.5, 1.5, 7, dtype=torch.float64).requires_grad_()
    rows = support.matrix(docs.LegendrePolynomial3Modern.apply, {"x": x},
                          lambda x: 0.5 * (5 * x**3 - 3 * x), cpu,
                          rows=["compile", "compile_grad", "compile_jvp", "compile_vmap"])
    assert rows.pop("compile").status == "unsupported"  # its jvp: see checks.md
    assert {k: r.status for k, r in rows.items()} == dict.fromkeys(rows, "ok"), rows
    assert torch.equal(mine(torch.ones(3)), 2 * torch.ones(3).sin()) and len(compiles) == 1


def test_a_wrong_backward_is_not_torch_differing(cpu):
    """Compiled torch.func.grad does not run a Function's backward: where that backward fails
    its own row, the compiled gradient differs from eager's because eager's is wrong. The row is
    not judged and says why, where it said 'torch differs' (from an outside review)."""
    class HalfCube(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x ** 3

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 1.5 * x ** 2 * g  # half of 3x²

    x = torch.linspace(-1.5, 1.5, 5, dtype=torch.float64).requires_grad_()
    rows = support.matrix(HalfCube.apply, {"x": x}, lambda x: x ** 3, cpu,
                          rows=["backward", "compile_grad"])
    assert rows["backward"].status == "fails", rows
    assert rows["compile_grad"].status == "skipped", rows
    assert rows["compile_grad"].detail.startswith("not judged: the backward row fails")
    assert support.matrix(HalfCube.apply, {"x": x}, None, cpu, rows=["compile_grad"])[
        "compile_grad"].status == "differs"  # asked alone, the row says what torch does


@pytest.mark.parametrize("classic", [LegendrePolynomial3, MyReLU, MultiplyAdd, MyExp,
                                     LinearFunction], ids=lambda c: c.__name__)
def test_a_classic_function_is_unsupported_compiled_not_differing(classic, cpu):
    """torch.func refuses a forward(ctx, ...) Function before anything compiles."""
    x = torch.linspace(-1.5, 1.5, 6, dtype=torch.float64).view(2, 3).requires_grad_()
    xs = {"x": x} if classic not in (MultiplyAdd, LinearFunction) else \
        {"a": x, "b": x.detach().clone().requires_grad_(),
         **({"c": x.detach().clone().requires_grad_()} if classic is MultiplyAdd else {})}
    if classic is LinearFunction:
        xs = {"input": x, "weight": x.detach().clone().requires_grad_()}
    rows = support.matrix(classic.apply, xs, None, cpu,
                          rows=["compile_grad", "compile_jvp", "compile_vmap"])
    assert {r.status for r in rows.values()} == {"unsupported"}, rows
    assert "setup_context" in rows["compile_grad"].detail


def test_the_compile_row_leaves_the_cse_pass_out_and_inductor_keeps_it(monkeypatch, cpu):
    """aot_eager without AOTAutograd's common-subexpression pass (whose first use imports
    inductor's pattern matcher, 0.6 s): the pass is not run and the setting comes back after
    the row; the inductor row compiles with it (the whole pipeline)."""
    import torch._functorch.config
    import torch._functorch.partitioners as partitioners

    def no_cse(graph):
        raise AssertionError("the CSE pass ran")

    x = torch.linspace(-1.0, 1.0, 5, dtype=torch.float64).requires_grad_()
    with monkeypatch.context() as m:
        m.setattr(partitioners, "fx_graph_cse", no_cse)
        row = support.matrix(MyExp.apply, {"x": x}, None, cpu, rows=["compile"])["compile"]
    assert row.status == "ok" and "without the CSE pass" in row.detail, row
    assert torch._functorch.config.cse is True
    seen = []

    def compile_eagerly(fn, backend, **options):  # what each backend is handed, no compiling
        seen.append((backend, torch._functorch.config.cse))
        return fn

    monkeypatch.setattr(torch, "compile", compile_eagerly)
    support.compiled(MyExp.apply, {"x": x})
    support.compiled(MyExp.apply, {"x": x}, backend="inductor")
    assert seen == [("aot_eager", False), ("inductor", True)]


def test_inductor_without_a_cpp_compiler_is_skipped_saying_why(monkeypatch, cpu):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    row = support.matrix(docs.LegendrePolynomial3Modern.apply, {"x": x}, None, cpu,
                         rows=["inductor"])["inductor"]
    assert (row.status, row.detail) == ("skipped", "no C++ compiler here (inductor builds C++ "
                                                   "on the CPU)")


def twins():
    def x(*shape, seed=0):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_()

    return [(docs.LegendrePolynomial3Modern, {"x": x(7)}),
            (docs.MyReLUModern, {"x": (x(2, 5) + 0.5).detach().requires_grad_()}),
            (docs.MultiplyAddModern, {"w": x(2, 2), "x": x(2, 2, seed=1).detach(),
                                      "b": x(2, 2, seed=2)}),
            (docs.MyExpModern, {"x": x(3)}),
            (docs.LinearFunctionModern, {"input": x(4, 3), "weight": x(2, 3, seed=1),
                                         "bias": x(2, seed=2)})]


@pytest.mark.slow
@pytest.mark.parametrize("twin, xs", twins(), ids=lambda v: getattr(v, "__name__", ""))
def test_the_documents_twins_are_ok_under_every_compiled_transform(twin, xs, cpu):
    """Their verdicts kept: the plain compile row stays unsupported (Dynamo cannot trace a
    Function with a custom jvp), and each compiled transform agrees with eager."""
    rows = support.matrix(twin.apply, xs, None, cpu,
                          rows=["compile", "compile_grad", "compile_jvp", "compile_vmap"])
    assert {k: r.status for k, r in rows.items()} == {
        "compile": "unsupported", "compile_grad": "ok", "compile_jvp": "ok",
        "compile_vmap": "ok"}, rows
    assert "Unsupported custom jvp" in rows["compile"].detail


@pytest.mark.slow
def test_inductor_when_asked_for(cpu):
    """The inductor row builds C++ (half a minute, the first time in a process): a classic
    Function compiles forward and backward (torch.func refuses it); the reversal layer
    differs under its torch.func.grad, as under aot_eager."""
    import shutil
    import sys as _sys

    if not shutil.which("g++"):
        pytest.skip("no C++ compiler here")
    x = torch.linspace(-1.5, 1.5, 6, dtype=torch.float64).requires_grad_()
    row = support.matrix(LegendrePolynomial3.apply, {"x": x}, None, cpu,
                         rows=["inductor"])["inductor"]
    assert row.status == "ok" and row.detail.startswith("fullgraph=True (inductor backend)")
    assert "not torch.func.grad" in row.detail
    _sys.path.insert(0, str(CONFIGS / "examples"))
    try:
        import my_ops
    finally:
        _sys.path.remove(str(CONFIGS / "examples"))
    row = support.matrix(my_ops.GradientReversal.apply, {"x": x}, None, cpu,
                         rows=["inductor"])["inductor"]
    assert row.status == "differs" and "(backend inductor)" in row.detail, row
