"""Forward mode, step by step (demos/lab/instruments/forward.py): each operation's value and
tangent, J·v against torch.func.jvp and reverse mode; a wrong jvp fails."""
from __future__ import annotations

import torch

from demos.documents.functions import LegendrePolynomial3Modern, MyExpModern
from demos.lab.instruments import forward
from demos.scenarios.legendre_fit import LegendrePolynomial3
from tests.fixtures import wrong_functions as wrong

D = torch.float64


def x3():
    return {"x": torch.tensor([1.0, 2.0, -0.5], dtype=D, requires_grad=True)}


def test_each_operation_pushes_its_tangent_and_the_function_is_one_step():
    def run(x):
        return (LegendrePolynomial3Modern.apply(x * 2 + 1) * x).sum()
    trace = forward.record(run, x3())
    assert trace.error is None
    assert [s.op for s in trace.steps] == [
        "mul", "add", "LegendrePolynomial3Modern, a custom Function, through its jvp", "mul",
        "sum"]
    assert [s.inputs for s in trace.steps] == [["x"], ["step 1"], [], ["step 3", "x"],
                                               ["step 4"]]
    assert torch.equal(trace.steps[1].tangent, torch.full((3,), 2.0, dtype=D))  # d(2x+1) = 2
    check = forward.agrees(trace, run)
    assert check.passed and check.detail.endswith("equals torch.func.jvp and reverse mode")
    text = forward.explain(trace, {})
    assert "step 3: LegendrePolynomial3Modern, a custom Function, through its jvp: value " in text
    assert "one pass gives J·v" in text and "one pass gives vᵀ·J" in text


def test_a_wrong_jvp_fails_against_reverse_mode():
    trace = forward.record(wrong.P3JvpWrongFactor.apply, x3())
    check = forward.agrees(trace, wrong.P3JvpWrongFactor.apply)
    assert not check.passed and "reverse mode gives" in check.detail, check.detail


def test_a_function_without_jvp_says_so():
    trace = forward.record(LegendrePolynomial3.apply, x3())
    check = forward.agrees(trace, LegendrePolynomial3.apply)
    assert not check.passed and "must implement the jvp function" in check.detail


def test_the_json_ends_with_jv_beside_the_reverse_pass():
    trace = forward.record(MyExpModern.apply, x3())
    data = forward.to_json(trace, {"x": torch.tensor([1.0], dtype=D)})
    assert data["mode"] == "forward" and len(data["steps"]) == 1
    last = data["steps"][-1]
    assert last["tangent"]["values"] == last["primal"]["values"]  # exp' = exp, v = 1
    assert last["result"]["vjp"] == {"x": "[1]"} and last["dot_node"] is not None


JVP_FN = '''
import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g

    @staticmethod
    def jvp(ctx, t):
        (x,) = ctx.saved_tensors
        return FACTOR * x * t


def square(x):
    return x * x
'''


def test_your_function_with_a_jvp_gets_a_forward_mode_stepper(tmp_path):
    """custom_function steps through the forward mode of a Function that has a jvp; a jvp off
    by a factor fails against reverse mode, a right one passes; both draw forward_mode.svg."""
    import json

    import yaml

    from tests.conftest import cli, entry, only_run_dir, summary
    for factor, passed in ((2, True), (3, False)):
        folder = tmp_path / str(factor)
        folder.mkdir()
        (folder / "jvp_ops.py").write_text(JVP_FN.replace("FACTOR", str(factor)))
        (folder / "c.yaml").write_text(yaml.safe_dump({"scenarios": [
            {"scenario": "custom_function", "function": "jvp_ops:Square",
             "reference": "jvp_ops:square", "support": [],
             "inputs": [{"name": "x", "shape": [3]}]}]}))
        code, out, err = cli("--config", folder / "c.yaml", "--output-dir", folder / "o")
        e = entry(summary(only_run_dir(folder / "o")), "custom_function")
        check = next(c for c in e["checks"] if c["name"] == "forward mode agrees: forward_mode")
        assert check["passed"] is passed and code == (0 if passed else 1), check
        assert "forward_mode.svg" in e["artifacts"]
        graphs = json.loads((only_run_dir(folder / "o") / "custom_function" /
                             "backward.json").read_text())["graphs"]
        assert [g["mode"] for g in graphs if g["graph"] == "forward_mode"] == ["forward"]
    assert "reverse mode gives" in check["detail"]
