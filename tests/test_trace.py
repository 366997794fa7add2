"""Watching backward: the engine's order and every gradient, node by node
(demos.lab.instruments.trace)."""
import copy
import dataclasses
import json
import re

import pytest
import torch

from demos.lab.instruments import trace
from demos.lab.instruments.walk import node_name
from demos.lab.tensors import in_brief
from tests.conftest import raised_in
from tests.fixtures.wrong_functions import InPlaceGradOut, RaisesValueError
from tests.instruments import trace_problems


def document_002():
    """e = (a + b) * d with a = 2, b = 3, d = 4, as document 002 walks it."""
    a, b, d = (torch.tensor(v, requires_grad=True) for v in (2.0, 3.0, 4.0))
    c = a + b
    e = c * d
    return e, {"a": a, "b": b, "c": c, "d": d}


def values(described):
    return None if described is None else described["values"]


def test_the_engine_order_and_gradients_of_document_002(dry_run):
    """As the engine really runs it: Mul, d's AccumulateGrad, Add, then a's and b's."""
    graphs = json.loads((dry_run.dir / "autograd_internals" / "backward.json").read_text())
    (g,) = graphs["graphs"]
    steps = g["steps"]
    assert [s["type"] for s in steps] == ["MulBackward0", "AccumulateGrad", "AddBackward0",
                                         "AccumulateGrad", "AccumulateGrad"]
    mul, acc_d, add, acc_a, acc_b = steps
    assert values(mul["received"][0]) == [1.0]
    assert [(e["to"], values(e["grad"])) for e in mul["sent"]] == [
        ("#2 AddBackward0 (c)", [4.0]), ("#3 AccumulateGrad (d)", [5.0])]
    assert (acc_d["leaf"]["name"], values(acc_d["leaf"]["grad"])) == ("d", [5.0])
    assert values(add["received"][0]) == [4.0]
    assert [values(e["grad"]) for e in add["sent"]] == [[4.0], [4.0]]
    assert [(s["leaf"]["name"], values(s["leaf"]["grad"])) for s in (acc_a, acc_b)] == [
        ("a", [4.0]), ("b", [4.0])]
    text = (dry_run.dir / "autograd_internals" / "explain.txt").read_text()
    walk = text.split("Backward, step by step ('graph')", 1)[1].splitlines()[2:7]
    assert walk == [
        "step 1: #1 MulBackward0 (the output) receives 1 and sends 4 to #2 AddBackward0 (c) "
        "and 5 to #3 AccumulateGrad (d)",
        "step 2: #3 AccumulateGrad (d) receives 5 and adds it into d.grad (d.grad is now 5)",
        "step 3: #2 AddBackward0 (c) receives 4 and sends 4 to #4 AccumulateGrad (a) and 4 to "
        "#5 AccumulateGrad (b)",
        "step 4: #4 AccumulateGrad (a) receives 4 and adds it into a.grad (a.grad is now 4)",
        "step 5: #5 AccumulateGrad (b) receives 4 and adds it into b.grad (b.grad is now 4)"]


def test_multiply_add_returns_none_for_x_on_an_edge_that_carries_nothing(dry_run):
    graphs = json.loads((dry_run.dir / "multiply_add" / "backward.json").read_text())["graphs"]
    (g,) = [g for g in graphs if g["graph"] == "graph"]
    first = g["steps"][0]
    assert first["type"] == "MultiplyAddBackward"
    w, x, b = first["sent"]
    assert (x["to"], x["grad"], x["input_name"]) == (None, None, "input 1 (x)")
    assert x["carries"].startswith("nothing")
    assert w["to"] == "#2 AccumulateGrad (w)" and b["to"] == "#3 AccumulateGrad (b)"
    assert w["grad"]["shape"] == b["grad"]["shape"] and set(values(b["grad"])) == {1.0}
    assert g["skipped"] == [{"node": "#1 MultiplyAddBackward (the output)", "input": "1",
                             "reason": "input 1 (x) needs no gradient (its next_functions entry "
                                       "is None): nothing is sent there"}]


def test_every_graph_drawn_is_traced(dry_run):
    for e in dry_run.summary["scenarios"]:
        folder = dry_run.dir / e["id"]
        if not (folder / "graph.gv").exists() and not any(folder.glob("graph_*.gv")):
            continue
        graphs = json.loads((folder / "backward.json").read_text())["graphs"]
        drawn = sorted(p.stem for p in folder.glob("*.gv") if not p.stem.endswith("_grads"))
        assert sorted(g["graph"] for g in graphs) == drawn, e["id"]
        assert not any(c["name"].startswith(("backward trace agrees", "saved tensors agree"))
                       for c in e["checks"]), e["id"]  # the instruments' own: tests, not runs
        forward = [g for g in graphs if g.get("mode") == "forward"]
        passes = [c for c in e["checks"] if c["name"].startswith("forward mode agrees")]
        assert len(passes) == len(forward) and all(c["passed"] for c in passes)
        for g in graphs:  # each step names the graphviz node it highlights
            gv = (folder / f"{g['graph']}.gv").read_text()
            assert all(s["dot_node"] in gv for s in g["steps"]), (e["id"], g["graph"])


def test_the_instruments_hold_on_every_shipped_scenarios_graphs(tmp_path, monkeypatch):
    """all.yaml's graphs, as its runs draw them: each traced backward agrees with its graph and
    the leaves' .grad, each ledger with a pack hook's count of its forward, and the traced
    second backward with torch.autograd.grad (tests/instruments.py). Runs no longer check
    these themselves: they test torch and the lab, not a user's Function."""
    from demos.lab.instruments import saved, second_backward
    from demos.lab.runner.context import Context
    from demos.scenarios import computation_graph
    from tests.conftest import CONFIGS, NO_SUPPORT, run_main
    from tests.instruments import (
        counting_saves,
        ledger_problems,
        second_pass_problems,
    )

    traces, firsts, ledgers, counts = [], [], [], []

    def kept(real, into):
        def call(*args, **kwargs):
            into.append(real(*args, **kwargs))
            return into[-1]
        return call

    def counted(forward):  # under a pack hook; its count goes with the ledger read next
        def call(*args, **kwargs):
            with counting_saves() as count:
                counts.append(count)
                return forward(*args, **kwargs)
        return call

    def ledger(*args, **kwargs):
        found = real_ledger(*args, **kwargs)
        ledgers.append((found, dict(counts.pop()) if counts else None))
        return found

    real_ledger, real_forward = saved.ledger, Context.forward
    monkeypatch.setattr(trace, "record", kept(trace.record, traces))
    monkeypatch.setattr(second_backward, "first_pass", kept(second_backward.first_pass, firsts))
    monkeypatch.setattr(saved, "ledger", ledger)
    monkeypatch.setattr(Context, "forward", lambda self, run, names, name="graph":
                        real_forward(self, counted(run), names, name))
    # its one graph drawn with ctx.graph: the lines of its forward, counted the same way
    monkeypatch.setattr(computation_graph, "detach", counted(computation_graph.detach))
    assert run_main(tmp_path, "--config", CONFIGS / "all.yaml", "--dry-run", "--device", "cpu",
                    *NO_SUPPORT) == 0
    assert len(traces) >= 12 and len(ledgers) == len(traces) - 1  # - the second backward's
    assert [(t.title, trace_problems(t)) for t in traces if trace_problems(t)] == []
    assert [c for _, c in ledgers if c is None] == []  # each graph's forward was counted
    assert [ledger_problems(found, c) for found, c in ledgers if ledger_problems(found, c)] == []
    second = [(t, f) for t in traces for f in firsts
              if f.root is not None and t.walk and t.walk[0] is f.root.grad_fn]
    assert len(second) == 1 and second_pass_problems(*second[0]) == []


def test_the_trace_leaves_the_leaves_grad_as_it_found_it():
    e, names = document_002()
    a = names["a"]
    a.grad = torch.tensor(100.0)
    t = trace.record(e, names)
    assert trace_problems(t) == []
    assert a.grad.item() == 100.0 and names["b"].grad is None
    e.backward()  # the scenario's own backward: as if no trace had run
    assert a.grad.item() == 104.0 and names["d"].grad.item() == 5.0


def test_large_gradients_are_summarized():
    w = torch.arange(20.0, requires_grad=True)
    t = trace.record((w * 2).sum(), {"w": w})
    leaf = trace.to_json(t)["steps"][-1]["leaf"]
    assert leaf["grad"] == {"shape": [20], "dtype": "float32", "min": 2.0, "max": 2.0,
                            "mean": 2.0, "norm": pytest.approx(20 ** 0.5 * 2)}


def broken(kind):
    """A real trace of document 002, then made wrong in one way."""
    e, names = document_002()
    t = trace.record(e, names)
    assert trace_problems(t) == []
    bad = copy.copy(t)
    bad.steps = list(t.steps)
    by_type = {node_name(s.fn) + str(i): i for i, s in enumerate(t.steps)}
    if kind == "leaf gradient":
        bad.grads = {**t.grads, id(names["a"]): torch.tensor(5.0)}
    elif kind == "order":  # a's AccumulateGrad before the AddBackward0 that feeds it
        add, acc_a = by_type["AddBackward02"], by_type["AccumulateGrad3"]
        bad.steps[add], bad.steps[acc_a] = bad.steps[acc_a], bad.steps[add]
    elif kind == "twice":
        bad.steps[0] = dataclasses.replace(bad.steps[0], runs=2)
    elif kind == "missing":
        del bad.steps[1]
    elif kind == "stranger":
        x = torch.tensor(1.0, requires_grad=True)
        bad.steps.append(trace.Step((x * 3).grad_fn, (torch.tensor(1.0),)))
    return bad


@pytest.mark.parametrize("kind, words", [
    ("leaf gradient", "#4 AccumulateGrad (a) received 4 but a.grad is 5"),
    ("order", "#4 AccumulateGrad (a) ran before #2 AddBackward0 (c), which feeds it"),
    ("twice", "#1 MulBackward0 (the output) ran 2 times"),
    ("missing", "in the graph walk but never ran: #3 AccumulateGrad (d)"),
    ("stranger", "ran but not in the graph walk: MulBackward0"),
])
def test_each_part_of_the_tests_hold_catches_a_broken_trace(kind, words):
    problems = trace_problems(broken(kind))
    assert any(words in p for p in problems), problems


def test_a_graph_whose_saves_are_freed_cannot_be_traced_and_says_so():
    e, names = document_002()
    e.backward()  # frees what MulBackward0 saved
    t = trace.record(e, names, title="late")
    assert t.error.startswith("RuntimeError: Trying to backward through the graph a second time")
    assert "could not run backward over it: RuntimeError: Trying to backward" in trace.explain(t)
    assert names["a"].grad.item() == 4.0  # left as it was


def test_an_output_without_a_graph_is_not_traced():
    assert trace.record(torch.tensor(1.0), {}) is None


def svg_nodes(svg_text):
    """(label lines, fill colour) of each node in a graphviz SVG."""
    import html
    import re
    out = []
    for g in re.findall(r'<g id="node\d+" class="node">(.*?)</g>', svg_text, re.S):
        fill = re.search(r'<polygon fill="([^"]+)"', g).group(1)
        out.append(([html.unescape(t) for t in re.findall(r">([^<]+)</text>", g)], fill))
    return out


def test_the_graphs_name_what_functions_saved_and_keep_leaves_blue(dry_run):
    """Saved tensors are named (the scenario's name, the forward argument, 'result'), a leaf
    that is also saved stays lightblue, and graph_detach's two outputs read h and h2."""
    def nodes(entry, stem="graph"):
        return svg_nodes((dry_run.dir / entry / f"{stem}.svg").read_text())

    def fill(entry, name, stem="graph"):
        return [f for lines, f in nodes(entry, stem) if lines and lines[0] == name]

    # P3's input, by forward's argument, owned by the Function: it is c + d*x, not the x of
    # the document's loop (which is no node of this graph)
    assert fill("legendre_fit", "LegendrePolynomial3's input") == ["orange"]  # the tutorial's
    assert fill("legendre_fit", "x") == []
    assert fill("my_exp", "result") == ["orange"]        # MyExp saves its output
    assert fill("multiply_add", "x") == ["orange"]       # named by the scenario
    assert fill("linear_function", "weight") == ["lightblue"]  # a leaf, saved too
    assert fill("linear_function", "x") == ["orange"]
    assert fill("computation_graph", "h", "graph_detach") == ["#caff70"]  # darkolivegreen1
    assert fill("computation_graph", "h2", "graph_detach") == ["#caff70"]  # darkolivegreen1
    assert fill("multiply_add", "output") == ["#caff70"]  # darkolivegreen1
    unnamed = [(e, lines) for e in ("legendre_fit", "my_relu", "my_exp", "multiply_add",
                                    "linear_function", "custom_function")
               for lines, f in nodes(e) if f == "orange" and not lines[0].strip(" ()0123456789,")]
    assert unnamed == []


# -- what users' Functions do to a trace ------------------------------------------------------
class TwoOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin(), x.cos()

    @staticmethod
    def backward(ctx, gs, gc):
        x, = ctx.saved_tensors
        return gs * x.cos() - gc * x.sin()


class NoneForY(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(y)
        return x * y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return g * y, None


def test_what_arrived_is_recorded_before_a_backward_changes_it_in_place():
    x = torch.ones(3, requires_grad=True)
    t = trace.record(InPlaceGradOut.apply(x) * 1, {"x": x})  # the seed is contiguous, too
    assert trace_problems(t) == []
    steps = trace.to_json(t)["steps"]
    assert [values(s["received"][0]) for s in steps] == [[1.0] * 3, [1.0] * 3, [2.0] * 3]


def test_a_multi_output_node_is_named_for_both_outputs():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    t = trace.record(TwoOut.apply(x), {"x": x})
    assert t.label(t.steps[0].fn) == "#1 TwoOutBackward (outputs 1 and 2)"
    assert trace_problems(t) == []


def test_none_into_a_leaf_adds_nothing_and_says_so():
    x, y = torch.ones(2, requires_grad=True), torch.full((2,), 3.0, requires_grad=True)
    t = trace.record(NoneForY.apply(x, y), {"x": x, "y": y})
    assert trace_problems(t) == []
    assert "#3 AccumulateGrad (y) receives nothing (None): y.grad stays as it was (None)" \
        in trace.explain(t)


def test_a_none_saved_beside_a_tensor_is_walked_drawn_traced_and_kept(tmp_path):
    """ctx.save_for_backward(x, h) with h None (an optional argument, as a parallel scan or a
    flow passes it; an outside corpus, issue 51): torchviz alone raises on it ('NoneType' has no
    size), which made the whole entry an error. The walk shows it as None, the drawing and the
    ledger leave it out, the trace runs, and check_function runs every check."""
    import demos
    from demos.lab.instruments import render, saved, walk
    from tests.fixtures.user_fns import ScanStep, scan_step

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = ScanStep.apply(x, None)
    assert "saved: saved_tensors[0] = x: tensor (2,) float32\n    saved: saved_tensors[1] = " \
           "None" in walk.explain(y, {"x": x})
    source = render.make_graph(y, {"x": x})
    assert re.findall(r"(?m)^\t(\d+) -> (\d+) \[dir=none\]$", source) == [
        (str(id(x)), str(id(y.grad_fn)))]  # x alone is drawn as saved: the leaf's node
    assert "saved_tensors" not in vars(type(y.grad_fn))  # the Function's node as torch made it
    assert y.grad_fn.saved_tensors[1] is None
    found = saved.ledger(y, {"x": x})
    assert found.error is None and [(s.name, s.whose) for s in found.saves] == [
        ("saved_tensors[0]", "x")]
    t = trace.record(y, {"x": x})
    assert t.error is None and trace_problems(t) == []
    assert x.grad is None and t.grads[id(x)].tolist() == [2.0, 2.0]

    r = demos.check_function(ScanStep, {"x": torch.randn(3, dtype=torch.float64,
                                                          requires_grad=True), "h": None},
                             scan_step, support=["backward"], quiet=True,
                             output_dir=tmp_path)
    (e,) = r.summary.scenarios
    assert (e.status, e.error) == ("passed", None)
    assert [c.name for c in e.checks if not c.passed] == []
    assert {"backward returns one grad per input", "autograd accepts the backward",
            "gradcheck", "parity with the reference", "support matrix"} <= {
        c.name for c in e.checks}
    assert (r.folder / e.id / "graph.gv").is_file()


def test_nan_and_inf_gradients_are_strict_json_and_agree():
    x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
    t = trace.record(x.sqrt(), {"x": x})
    assert trace_problems(t) == []  # NaN equals NaN here
    text = json.dumps(trace.to_json(t), allow_nan=False)  # raises on a bare NaN or inf
    assert '"nan"' in text and '"inf"' in text


def test_a_backward_that_raises_anything_is_a_trace_that_says_so():
    x = torch.ones(2, requires_grad=True)
    t = trace.record(RaisesValueError.apply(x), {"x": x})
    assert raised_in(t.error, "ValueError: my backward is broken", "wrong_functions.py",
                     "backward")
    assert x.grad is None


def test_small_gradients_keep_their_significant_digits():
    assert in_brief(torch.tensor(4.76837e-7)) == "4.76837e-07"
    assert in_brief(torch.tensor([1.0, 0.5])) == "[1, 0.5]"


def test_each_traced_graph_is_also_drawn_with_its_gradients(dry_run):
    """<graph>_grads.gv: document 002's graph with the traced gradients in its nodes, as
    micrograd's draw_dot shows them (a.grad = b.grad = 4, d.grad = 5), linked from the report."""
    gv = (dry_run.dir / "autograd_internals" / "graph_grads.gv").read_text()
    for leaf, grad in (("a", 4), ("b", 4), ("d", 5)):
        assert f'[label="{leaf}\\ngrad: {grad}" fillcolor=lightblue]' in gv
    assert 'label="MulBackward0\\ngrad in: 1"' in gv and 'label="AddBackward0\\ngrad in: 4"' in gv
    report = (dry_run.dir / "report.html").read_text()
    assert 'href="autograd_internals/graph_grads.pdf"' in report
    assert "Autograd graph: graph_grads" not in report  # a link, not a section of its own


def test_the_stepper_as_an_animated_gif_for_slides(tmp_path):
    """stepper_gifs: true: <graph>_steps.gif, the graph and then one frame per step, each the
    same size; off by default."""
    from PIL import Image

    from tests.conftest import CONFIGS, cli, only_run_dir
    assert cli("--config", CONFIGS / "autograd_internals.yaml", "--set", "stepper_gifs=true",
               "--output-dir", tmp_path / "on")[0] == 0
    folder = only_run_dir(tmp_path / "on") / "autograd_internals"
    steps = json.loads((folder / "backward.json").read_text())["graphs"][0]["steps"]
    with Image.open(folder / "graph_steps.gif") as gif:
        assert gif.n_frames == len(steps) + 1 == 6
        sizes = set()
        for k in range(gif.n_frames):
            gif.seek(k)
            sizes.add(gif.size)
        assert len(sizes) == 1
    assert cli("--config", CONFIGS / "autograd_internals.yaml", "--output-dir",
               tmp_path / "off")[0] == 0
    assert not list(only_run_dir(tmp_path / "off").glob("*/*.gif"))
