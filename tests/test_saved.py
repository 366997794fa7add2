"""What backward keeps (demos/lab/instruments/saved.py): the ledger read off the graph, against
an independent pack-hook count of the same forward (tests/instruments.py); the figure held as
backward runs."""
from __future__ import annotations

import torch

from demos.documents.functions import MyExpSavesInput as ExpSavesInput
from demos.lab.instruments import saved
from demos.lab.instruments.trace import record
from demos.lab.instruments.walk import node_name
from demos.scenarios.linear_function import LinearFunction
from demos.scenarios.my_exp import MyExp
from tests.instruments import counting_saves, ledger_problems


class ExpKeepsAttribute(torch.autograd.Function):
    """exp that keeps its output as a ctx attribute: autograd does not track it."""

    @staticmethod
    def forward(ctx, x):
        ctx.result = x.exp()
        return ctx.result

    @staticmethod
    def backward(ctx, g):
        return g * ctx.result


def exp_times_x(fn):
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with counting_saves() as counted:
        y = fn.apply(x)
        z = (y * x).sum()
    return x, y, z, counted


def test_myexp_saves_its_output_once():
    """Document 003: MyExp saves its output; the multiplication after it saves the same
    storage again. The ledger names both saves and counts the storage once, as the hook does."""
    x, y, z, counted = exp_times_x(MyExp)
    found = saved.ledger(z, {"x": x, "y": y})
    by_node = {node_name(s.node): [] for s in found.saves}
    for s in found.saves:
        by_node[node_name(s.node)].append((s.name, s.whose))
    assert by_node == {"MulBackward0": [("other", "x"), ("self", "y")],
                       "MyExpBackward": [("saved_tensors[0]", "y")]}
    assert found.total() == 2 * 3 * 4 == sum(counted.values())  # y and x, float32, once each
    assert ledger_problems(found, counted) == []


def test_saving_the_input_instead_keeps_another_tensor():
    """The variant that saves its input keeps x, which the caller holds anyway; MyExp keeps y.
    Either way one storage per Function, and the ledger agrees with the hook."""
    x, y, z, counted = exp_times_x(ExpSavesInput)
    found = saved.ledger(z, {"x": x, "y": y})
    mine = [s for s in found.saves if node_name(s.node) == "MyExpSavesInputBackward"]
    assert [(s.name, s.whose) for s in mine] == [("saved_tensors[0]", "x")]
    assert ledger_problems(found, counted) == []


def test_a_ledger_that_misses_a_save_fails_the_tests_hold(monkeypatch):
    x, y, z, counted = exp_times_x(MyExp)
    real = saved.saves_of

    def forgets(fn):  # a ledger blind to the multiplication's saves
        return [] if node_name(fn) == "MulBackward0" else real(fn)
    monkeypatch.setattr(saved, "saves_of", forgets)
    assert ledger_problems(saved.ledger(z), counted) == [
        "the graph shows 1 storage(s), 12 B; the pack hook counted 2, 24 B (1 not in the "
        "ledger, 0 the hook never saw)"]


def test_what_backward_holds_falls_to_zero_as_it_runs():
    x, y, z, counted = exp_times_x(MyExp)
    found = saved.ledger(z, {"x": x, "y": y})
    trace = record(z, {"x": x, "y": y})
    order = [s.fn for s in trace.steps]
    assert [node_name(fn) for fn in order] == ["SumBackward0", "MulBackward0", "MyExpBackward",
                                               "AccumulateGrad"]
    # Mul releases x (its last keeper); y is kept by MyExp until it has run
    assert saved.held(found, order) == [24, 24, 12, 0, 0]
    gone = saved.released(found, order)
    assert [[s.name for s in g] for g in gone] == [[], ["other"], ["saved_tensors[0]"], []]
    text = saved.explain(found, order)
    assert "MyExpBackward runs and releases saved_tensors[0]: 0 B held" in text
    assert "held for backward after the forward: 24 B in 2 storage(s)" in text


def test_the_documents_linear_function_saves_input_weight_and_bias():
    """Document 004: ctx.save_for_backward(input, weight, bias)."""
    g = torch.Generator().manual_seed(0)
    inp = torch.randn(4, 3, generator=g, requires_grad=True)
    weight = torch.randn(2, 3, generator=g, requires_grad=True)
    bias = torch.randn(2, generator=g, requires_grad=True)
    with counting_saves() as counted:
        out = LinearFunction.apply(inp, weight, bias)
    found = saved.ledger(out, {"input": inp, "weight": weight, "bias": bias})
    assert [(s.name, s.whose, s.shape) for s in found.saves] == [
        ("saved_tensors[0]", "input", (4, 3)), ("saved_tensors[1]", "weight", (2, 3)),
        ("saved_tensors[2]", "bias", (2,))]
    assert found.total() == (12 + 6 + 2) * 4 and ledger_problems(found, counted) == []


def test_a_ctx_attribute_is_shown_but_not_counted_as_saved():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    with counting_saves() as counted:
        y = ExpKeepsAttribute.apply(x)
    found = saved.ledger(y)
    assert [(s.name, s.tracked) for s in found.saves] == [("ctx.result (an attribute)", False)]
    assert found.total() == 0 and counted == {} and ledger_problems(found, counted) == []
    assert "not tracked by autograd" in saved.explain(found, [])


def test_a_graph_whose_saves_were_freed_says_so():
    x, y, z, counted = exp_times_x(MyExp)
    z.backward()  # frees the saved tensors
    found = saved.ledger(z)
    assert found.error and "backward through the graph a second time" in found.error
    assert "could not read the saves: RuntimeError: Trying to backward" in saved.explain(found, [])


def test_recomputation_keeps_only_the_input(dry_run):
    """lenet's graph_recomputed (activation checkpointing): backward keeps the 1x1x32x32
    input, 4 KiB, where the plain graph keeps every layer's activations."""
    import json

    graphs = {g["graph"]: g for g in json.loads(
        (dry_run.dir / "lenet" / "backward.json").read_text())["graphs"]}
    plain, recomputed = graphs["graph"]["saved"], graphs["graph_recomputed"]["saved"]
    assert recomputed["total_bytes"] == 32 * 32 * 4 and recomputed["storages"] == 1
    assert plain["total_bytes"] > 50 * recomputed["total_bytes"] and plain["storages"] > 10
    assert recomputed["held"][-1] == plain["held"][-1] == 0
