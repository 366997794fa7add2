"""The documents as notebooks: demos/notebooks/<scenario>.ipynb, one per scenario, written
from this table by `python -m tests.notebooks`; tests/test_notebooks.py fails while the files
differ from what it writes, and executes them headless.

Each notebook walks its example with the Python API (`from demos import run`): the run, its
numbers, a graph's stepper, the whole entry as the report shows it, then a change to try. The
first code cell holds the parameters (tagged `parameters`, as papermill reads them): the tests
set dry_run there.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from demos.scenarios import registry
from tests.conftest import ROOT

FOLDER = ROOT / "demos" / "notebooks"


@dataclass
class Walk:
    """What a scenario's notebook says and does besides the run."""
    intro: str    # what the example shows, after the title
    graph: str    # the graph whose stepper it shows
    look: str     # what to look for in that graph
    change: dict  # the keys of the change to try
    why: str      # what the change shows
    after: str = "r2[{name!r}].metrics"  # the cell that shows the change's effect


WALKS: dict[str, Walk] = {
    "multiply_add": Walk(
        "A custom `torch.autograd.Function` computes y = w ⊙ x + b. Its `grad_fn` is a "
        "`MultiplyAddBackward`, whose `next_functions` lead to the `AccumulateGrad` of each "
        "leaf; a short fit then finds w and b again.",
        "graph", "Each step runs one node's backward: the custom node first, then the "
        "`AccumulateGrad` nodes that write `w.grad` and `b.grad`.",
        {"lr": 0.05}, "A smaller learning rate: after the same 300 steps w and b are further "
        "from w* and b*, and the checks written for lr 0.2 say they were not evaluated."),
    "computation_graph": Walk(
        "h = w·x + b, three ways: with x requiring grad, with `requires_grad=False`, and "
        "with `x.detach()`. The graphs show which leaves reach `AccumulateGrad`.",
        "graph_detach", "A detached x is a constant: no `AccumulateGrad` node for it, so "
        "backward ends at w and b.",
        {"w": 2.0}, "Another w: h changes; the graph keeps its shape."),
    "autograd_internals": Walk(
        "e = (a + b)·d: how `e.backward()` reaches the leaves through "
        "`grad_fn.next_functions` and `AccumulateGrad.variable`, and why the non-leaf "
        "c = a + b keeps no `.grad`.",
        "graph", "The steps go from `MulBackward0` down to each leaf's `AccumulateGrad`; "
        "each step shows the gradient it received and passed on.",
        {"d": 3.0}, "Another d: de/da and de/db are d, so both change; de/dd does not."),
    "my_exp": Walk(
        "`MyExp` saves its output for backward, since d/dx exp(x) = exp(x). Its gradients "
        "are compared with the built-in exp, and its support matrix says what else it "
        "supports (forward mode, vmap, torch.compile).",
        "graph", "What backward keeps: 12 bytes, the output, released once the node has run.",
        {"inputs": [0.5, 1.5, 2.5]}, "Other inputs: the gradients are their exps again."),
    "legendre_fit": Walk(
        "A custom Function for the Legendre polynomial P3(x) = (5x³ − 3x)/2 and its "
        "derivative; y = a + b·P3(c + d·x) is fitted to sin(x) on [−π, π] by hand-written "
        "SGD.",
        "graph", "The custom `LegendrePolynomial3Backward` node between the additions and "
        "multiplications torch records for a, b, c and d.",
        {"lr": 1e-5}, "Twice the learning rate: the loss ends elsewhere (or diverges), and the "
        "targets written for lr 5e-6 say they were not evaluated."),
    "linear_function": Walk(
        "`LinearFunction` with `needs_input_grad`, checked by `gradcheck`, wrapped in a "
        "`Linear` module and trained.",
        "graph", "One custom node with three inputs; backward computes only the gradients "
        "`needs_input_grad` asks for.",
        {"lr": 0.01}, "A smaller learning rate: the fit ends further from the true weights."),
    "lenet": Walk(
        "The LeNet-style CNN as an `nn.Module`, trained on 1,797 real handwritten digits "
        "(8×8, upscaled to 32×32).",
        "graph", "The convolutions, pools and linear layers; backward walks them back to "
        "every weight's `AccumulateGrad`.",
        {"optimizer": "sgd", "lr": 0.01}, "Plain SGD instead of Adam: slower to learn in the "
        "same epochs."),
    "my_relu": Walk(
        "A custom ReLU Function inside a two-layer net, trained by hand-written SGD on "
        "random data.",
        "graph", "`MyReLUBackward` between the two matrix products: it saved its input to "
        "know where the input was positive.",
        {"H": 20}, "A narrower hidden layer: fewer weights, another final loss."),
    "custom_function": Walk(
        "Your own Function, checked: what backward returns, gradcheck, parity with a "
        "plain-torch reference, the second backward, the support matrix. This notebook runs "
        "configs/custom_function.yaml (`MyCube` of configs/examples/my_ops.py); "
        "`check_function` does the same for a class defined in a cell, as below.",
        "graph", "The one `MyCubeBackward` node, the two leaves that require grad, and what "
        "the forward saved.",
        {}, "A Function defined here, with a classic mistake: its backward forgets the 3 of "
        "d(x³)/dx = 3x². gradcheck and parity catch it.",
        "[(c.name, c.detail) for c in r2.failures]"),
}

INTENDED = '''class Reversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        return 0.5 * grad_output             # wrong: the layer reverses it, -0.5


def reversed_identity(x):                   # value x, gradient -0.5: what is intended
    return -0.5 * x + (1.5 * x).detach()


r3 = check_function(Reversal, inputs={"x": torch.randn(5, 3, requires_grad=True)},
                    reference=reversed_identity, intended=True,
                    dry_run=dry_run, output_dir=output_dir)
[(c.name, c.detail) for c in r3.failures]'''

MISTAKE = '''import torch

from demos import check_function


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad_output):
        x, = ctx.saved_tensors
        return grad_output * x ** 2          # wrong: d(x^3)/dx is 3 x^2


r2 = check_function(Cube, inputs={"x": torch.randn(5, 3, requires_grad=True)},
                    reference=lambda x: x ** 3,
                    dry_run=dry_run, output_dir=output_dir)
r2.passed'''


# A scenario file that opens with its tutorial's code (issue 33): its notebook shows that code
# cell by cell, taken from the file (written once, there), with the lab's hooks left out.
TUTORIAL_START, LAB_START = "# == The tutorial", "# == The lab"
# what the notebook's instruments cell draws, after the tutorial's code ran: (loss, names)
LOOK = {
    "legendre_fit": ("(a + b * LegendrePolynomial3.apply(c + d * x) - y).pow(2).sum()",
                     '{"a": a, "b": b, "c": c, "d": d}'),
    "my_relu": ("(MyReLU.apply(x.mm(w1)).mm(w2) - y).pow(2).sum()", '{"w1": w1, "w2": w2}'),
    "my_exp": ("MyExp.apply(inputs).sum()", '{"inputs": inputs}'),
    "multiply_add": ("MultiplyAdd.apply(w, x, b).sum()", '{"w": w, "x": x, "b": b}'),
    "autograd_internals": ("(a + b) * d", '{"a": a, "b": b, "d": d}'),
    "computation_graph": ("w * x + b", '{"x": x, "w": w, "b": b}'),
    "linear_function": ("(model(x) - y).pow(2).mean()",
                        '{**dict(model.named_parameters()), "x": x}'),
    "lenet": ("F.cross_entropy(net(images[test_ids[:8]]), labels[test_ids[:8]])",
              "dict(net.named_parameters())"),
}


@dataclass
class Checked:
    """How a notebook checks its tutorial's Function, as the notebook defines it (issue 43):
    check_function's inputs and reference, and an edit it invites, which must fail there and
    in the lab's run (tests/test_notebooks.py makes it)."""
    inputs: str              # check_function's inputs, as code (the tutorial's tensors, or new)
    reference: str           # its plain-torch twin, in demos.documents.functions
    edit: tuple[str, str]    # a line of the Function: as the tutorial writes it, as edited
    says: str                # the edit, in words
    hazard: str = ""         # a real hazard of the tutorial's own Function, which check_function
    #                          finds and the lab's run (a document's rows) leaves: said here


CHECKED: dict[str, Checked] = {
    "legendre_fit": Checked('{"x": torch.linspace(-1.5, 1.5, 7, requires_grad=True)}',
                            "legendre_p3_reference", ("1.5 * (5 * input ** 2", "(5 * input ** 2"),
                            "drop P3's 1.5"),
    "my_relu": Checked('{"x": torch.tensor([[-2.0, -0.5, 0.5], [1.0, -1.5, 2.5]], '
                       'requires_grad=True)}',  # away from the kink at 0
                       "relu_reference", ("[input < 0] = 0", "[input > 0] = 0"),
                       "turn `input < 0` into `input > 0`"),
    "my_exp": Checked('{"x": inputs}', "exp_reference",
                      ("return grad_output * y", "return grad_output"),
                      "return `grad_output` alone"),
    "multiply_add": Checked('{"w": w, "x": x, "b": b}', "multiply_add_reference",
                            ("return grad_w, None, grad_b", "return grad_b, None, grad_w"),
                            "swap `grad_w` and `grad_b`"),
    "linear_function": Checked('{"input": input, "weight": weight, "bias": bias}',
                               "linear_reference", ("grad_output.sum(0)", "grad_output.mean(0)"),
                               "take `grad_bias`'s mean for its sum",
                               "Here it fails one row, `autocast`, and rightly: under "
                               "`torch.autocast` the tutorial's `output += ...` keeps the "
                               "sum in bfloat16, and backward's `mm` of grad_output then "
                               "meets float32 and raises, as a training step under autocast "
                               "would. The fix: `torch.amp.custom_fwd`/`custom_bwd`, or add out "
                               "of place. The lab's run leaves that row, as every document's "
                               "run does ([checks](../docs/checks.md#where-gradcheck-is-silent)); "
                               "every other check and row passes."),
}


def function_of(name: str) -> str | None:
    """The name of the autograd Function that scenario `name`'s tutorial defines, if any."""
    import ast

    source = (ROOT / "demos" / "scenarios" / f"{name}.py").read_text(encoding="utf-8")
    if TUTORIAL_START not in source:
        return None
    tutorial = source[source.index(TUTORIAL_START):source.index(LAB_START)]
    found = [n.name for n in ast.parse(tutorial).body if isinstance(n, ast.ClassDef)
             and any(ast.unparse(b).endswith("autograd.Function") for b in n.bases)]
    assert len(found) <= 1, found
    return found[0] if found else None


def check_cells(name: str) -> list[dict]:
    """After the tutorial's cells: its Function, as the notebook defines it, checked."""
    function, c = function_of(name), CHECKED.get(name)
    if function is None:
        return []
    return [cell("markdown", "check-intro", f"## `{function}`, checked\n\n`check_function` "
                 f"checks the class as the cell above defines it now: gradcheck, parity with "
                 f"the same formula in plain torch (`{c.reference}`), what its backward "
                 f"returns, what else it supports. The lab's run below uses it too. Try a "
                 f"mistake ({c.says}) and run the cells again: both fail, and say why."
                 + (f"\n\n{c.hazard}" if c.hazard else "")),
            cell("code", "check", f"from demos import check_function\n"
                 f"from demos.documents.functions import {c.reference}\n\n"
                 f"checked = check_function(\n    {function},\n    inputs={c.inputs},\n"
                 f"    reference={c.reference}, dry_run=dry_run, output_dir=output_dir)\n"
                 f"checked.passed")]


def plain(code: str, defaults: Any, small: dict) -> str:
    """The tutorial's code without the lab's words: `cfg.<key>` is the key's default (the
    tutorial's number), or a variable of the notebook's first cell where a dry run makes it
    smaller (`small`); ctx.device the notebook's device, ctx.seed 0 (the runs' seed),
    ctx.steps(...) a plain range, ctx.forward(lambda: f, names) just f."""
    code = code.replace("ctx.device", "device").replace("ctx.seed", "0")
    code = re.sub(r"ctx\.steps\((.*?)\)", r"range(\1)", code)
    names = r"(?:\{[^}]*\}|dict\(.*?\)\)|\w+)"  # a dict, dict(...) or a name
    code = re.sub(rf"ctx\.forward\(lambda: (.*?), {names}(?:, name=[^)]*)?\)$", r"\1", code,
                  flags=re.M)  # the forward itself
    return re.sub(r"\bcfg\.(\w+)", lambda m: m[1] if m[1] in small else
                  repr(getattr(defaults, m[1])), code)


def printed(line: str) -> list[str]:
    """A line of the tutorial's code in the notebook: the lab's hooks (`# lab: ...`) left out
    but the records they keep, printed (the loss every 100 steps, as the tutorial does; the
    values of an `always` record)."""
    indent, code = line[:len(line) - len(line.lstrip())], line.split("  # lab:")[0].strip()
    if code == "ctx.record(t, loss=loss)":
        return [f"{indent}if t % 100 == 99:", f"{indent}    print(t, loss.item())"]
    if code.startswith("ctx.record(t, always=True,"):
        import ast

        keywords = ast.parse(code).body[0].value.keywords
        shown = ", ".join(f"{k.arg} {{{ast.unparse(k.value)}:.4g}}" for k in keywords
                          if k.arg != "always")
        return [f'{indent}print(f"{shown}")']
    if "# lab:" not in line or "ctx.steps" in line or "= ctx.forward" in line:
        return [line.split("  # lab:")[0]]
    return []


def lab_statements(body: list[Any], lines: list[str]) -> tuple[set[int], set[int]]:
    """The line numbers of the lab's statements of more than one line (their first line ends
    in `# lab: ...`), to leave out; and of the blocks of a `with ...:  # lab: ...` (its
    header left out), to dedent."""
    import ast

    dropped: set[int] = set()
    unwrapped: set[int] = set()
    for statement in (n for top in body for n in ast.walk(top) if isinstance(n, ast.stmt)):
        if "# lab:" not in lines[statement.lineno - 1]:
            continue
        if isinstance(statement, ast.With):
            dropped.update(range(statement.lineno, statement.body[0].lineno))
            unwrapped.update(range(statement.body[0].lineno, statement.end_lineno + 1))
        elif statement.end_lineno > statement.lineno and not isinstance(statement, ast.For):
            dropped.update(range(statement.lineno, statement.end_lineno + 1))
    return dropped, unwrapped


def imports(tree: Any, start: int, used: str) -> str:
    """The scenario file's imports above its tutorial that the notebook's code uses (the names
    it uses, of a `from` import), one per line."""
    import ast

    lines: dict[int, list[str]] = {0: [], 1: [], 2: []}  # Python's, torch's, the lab's
    for node in tree.body:
        if node.lineno > start or not isinstance(node, (ast.Import, ast.ImportFrom)) or \
                getattr(node, "module", "") in ("__future__", "demos.scenario_api", "typing"):
            continue
        names = [a for a in node.names
                 if re.search(rf"\b{re.escape(a.asname or a.name)}\b", used)]
        if names:
            node.names = names
            top = ast.unparse(node).split()[1].split(".")[0]
            group = 0 if top in sys.stdlib_module_names else 2 if top == "demos" else 1
            lines[group].append(ast.unparse(node))
    return "\n\n".join("\n".join(group) for group in lines.values() if group)


def tutorial_cells(name: str) -> list[dict]:
    """The tutorial's code of scenario `name`, as cells: each class, and each function that the
    rest calls, as it is; each other function's body (the script: its docstring and final
    return left out, its parameters with defaults set first), the lab's hooks taken out (lines
    ending in `# lab: ...`; its records printed instead); then the instruments on what it
    trained. [] for a scenario file that does not open with its tutorial."""
    import ast
    import textwrap

    source = (ROOT / "demos" / "scenarios" / f"{name}.py").read_text(encoding="utf-8")
    if TUTORIAL_START not in source:
        return []
    scenario = registry()[name]
    defaults = scenario.config(scenario=name, id=name)
    lines = source.splitlines()
    edit = f" ({CHECKED[name].says}, say)" if name in CHECKED else ""
    cells = [cell("markdown", "tutorial-intro", "## The tutorial's code\n\nAs the tutorial "
                  f"writes it: the same code the scenario runs (`demos/scenarios/{name}.py`), "
                  f"without the lab's hooks. Change a line{edit} and run the cells again.")]
    start = source[:source.index(TUTORIAL_START)].count("\n")
    end = source[:source.index(LAB_START)].count("\n")
    tree = ast.parse(source)
    nodes = [n for n in tree.body if start < n.lineno <= end]
    tutorial = source[source.index(TUTORIAL_START):source.index(LAB_START)]
    small = {k: v for k, v in scenario.dry_run.items() if f"cfg.{k}" in tutorial}
    called = {n.name for n in nodes if isinstance(n, ast.FunctionDef)
              and re.search(rf"(?<![.\w]){n.name}\(", tutorial.replace(f"def {n.name}(", ""))}
    scripts = [n for n in nodes if isinstance(n, ast.FunctionDef) and n.name not in called]
    texts = []
    for node in nodes:
        if isinstance(node, ast.ClassDef) or getattr(node, "name", None) in called:
            text = "\n".join(lines[node.lineno - 1:node.end_lineno])
        elif isinstance(node, ast.FunctionDef):
            body = node.body[1:] if ast.get_docstring(node) else node.body
            first = node.body[0].end_lineno if ast.get_docstring(node) else body[0].lineno - 1
            shown = ""
            if body and isinstance(body[-1], ast.Return):
                if node is scripts[-1] and body[-1].value is not None:  # the script's end
                    shown = "\n\n" + ast.unparse(body[-1].value)
                body = body[:-1]
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            kept = []
            dropped, unwrapped = lab_statements(body, lines)
            for number in range(first + 1, body[-1].end_lineno + 1):  # comments above too
                ln = lines[number - 1]
                if number in unwrapped:  # the body of a `with ...:  # lab:`, dedented
                    ln = ln[4:]
                kept += [] if number in dropped else printed(ln)
            text = plain(textwrap.dedent("\n".join(kept)), defaults, small)
            text = "".join(f"{a.arg} = {ast.unparse(d)}\n" for a, d in
                           zip(args, node.args.defaults)
                           if re.search(rf"\b{a.arg}\b", text)) + text + shown
        else:
            continue
        texts.append((node.name, text))
    used = "\n".join(text for _, text in texts)
    head = (imports(tree, start, used) + '\n\ndevice = torch.device("cpu")\n' +
            "".join(f"{k} = {v!r} if dry_run else {getattr(defaults, k)!r}\n"
                    for k, v in small.items()) + "\n\n")
    for node_name, text in texts:
        cells.append(cell("code", f"tutorial-{node_name}", head + text))
        head = ""
    loss, names = LOOK[name]
    cells += [cell("markdown", "instruments-intro", "The lab's instruments on the tutorial's "
                   "own tensors: the graph of one more forward pass with them, its backward "
                   "step by step (press **Next**), and what it saved."),
              cell("code", "instruments", f"from demos import graph\n\nloss = {loss}\n"
                   f'g = graph(loss, {names}, name="tutorial", output_dir=output_dir)\ng')]
    return cells


def cell(kind: str, cell_id: str, source: str, **extra) -> dict:
    base = {"cell_type": kind, "id": cell_id, "metadata": extra.pop("metadata", {}),
            "source": source.splitlines(keepends=True)}
    if kind == "code":
        base.update(execution_count=None, outputs=[])
    return base


def notebook(name: str) -> dict:
    s, w, function = registry()[name], WALKS[name], function_of(name)
    change = ", ".join(f"{k}={v!r}" for k, v in w.change.items())
    cells = [
        cell("markdown", "intro", f"# {name}: {s.about}\n\n{w.intro}\n\nRun it, step through "
             f"its graph, then change it. The same run from a shell: "
             f"`python runner.py {name}`."),
        cell("code", "parameters", 'dry_run = False        # True: a few steps only, to try '
             'the notebook in seconds\noutput_dir = "outputs"  # where the runs go: a folder '
             'per run, as the command line makes', metadata={"tags": ["parameters"]}),
        *tutorial_cells(name),
        *check_cells(name),
        *([cell("markdown", "run-intro", "## The lab's run\n\nThe scenario: the same code, "
                "run and checked by the runner, as `python runner.py " + name + "` does" +
                (f", with this notebook's `{function}` in place of the scenario file's."
                 if function else "."))] if tutorial_cells(name) else []),
        cell("code", "run", (f"import demos.scenarios.{name} as lab\n" if function else "") +
             "from demos import run\n\n" + (f"lab.{function} = {function}  # the lab runs the "
                                              f"class above, as it is now\n" if function else "")
             + f"r = run({name!r}, dry_run=dry_run, output_dir=output_dir)\nr.passed"),
        cell("markdown", "numbers-intro", "What the run found: the entry's metrics and params "
             "(its summary.json, typed)."),
        cell("code", "numbers", f"e = r[{name!r}]\ne.metrics, e.params"),
        cell("markdown", "stepper-intro", f"The autograd graph `{w.graph}`, step by step: press "
             f"**Next** (or the arrow keys) to run backward one node at a time. {w.look}"),
        cell("code", "stepper", f"e.graphs[{w.graph!r}]"),
        cell("markdown", "entry-intro", "The whole entry as the report shows it: its checks "
             "(a failed one makes the run fail), plots, every graph and the config it ran."),
        cell("code", "entry", "e"),
        cell("markdown", "change-intro", f"## Change it\n\n{w.why}"),
    ]
    if name == "custom_function":
        cells += [cell("code", "change", MISTAKE),
                  cell("markdown", "intended-intro", "## A backward that is not the derivative"
                       "\n\nA gradient reversal layer passes its input through and reverses "
                       "(and scales) the gradient: gradcheck fails it by design. "
                       "`intended=True` holds its backward to the gradient of a reference "
                       "written in plain torch instead; here one that forgets the sign, "
                       "caught."),
                  cell("code", "intended", INTENDED)]
    else:
        cells += [cell("code", "change", f"r2 = run({name!r}, {change}, dry_run=dry_run, "
                       f"output_dir=output_dir)\n{w.after.format(name=name)}")]
    return {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


def text(name: str) -> str:
    return json.dumps(notebook(name), indent=1, ensure_ascii=False) + "\n"


# -- the exercise notebooks (demos/notebooks/exercises/, issue 45) ----------------------------

EXERCISES = FOLDER / "exercises"


def exercise_notebook(name: str) -> dict:
    """A document exercise as a notebook, shipped as the student gets it: the maths, the
    Function with forward given and backward to write (`raise NotImplementedError`), and a cell
    that grades the notebook's own class with demos.grade (0 points and "not written yet" until
    backward is written; headless runs pass)."""
    from demos.exercises.make import statement
    from demos.exercises.table import DOCUMENTS

    e = DOCUMENTS[name]
    code = statement(e).split('\n"""\n', 1)[1].split('\n\nif __name__ == "__main__":')[0]
    cells = [
        cell("markdown", "statement", f"# Exercise {name}: write the backward of "
             f"`{e.function}`\n\n{e.maths}\n\nforward is given: leave it as it is. Write "
             "backward's body in the next cell, in place of `raise NotImplementedError`, run "
             "it, then run the check below: it grades your class on hidden inputs (other "
             "seeds and shapes, random grad_outputs) and gives hints where it is wrong."),
        cell("code", "function", code.strip() + "\n"),
        cell("markdown", "gradcheck-intro", "torch's gradcheck on the example inputs: "
             "finite differences against your backward (it raises until backward is written)."),
        cell("code", "gradcheck", "try:\n    print(torch.autograd.gradcheck("
             f"{e.function}.apply, example_inputs()))\nexcept NotImplementedError as e:\n"
             "    print(\"backward is not written yet:\", e)"),
        cell("markdown", "grade-intro", "## Check it\n\nThe grader's files (grading.yaml: "
             "points, hints, hidden seeds and shapes) are written to `grading/`, then "
             "`demos.grade` grades the class above: the score, and for each test that lost "
             "points what is wrong (hint 1: which input, 2: the kind of mistake, 3: the fix)."),
        cell("code", "grade", f"import demos\n\ndemos.exercise({name!r}, \"grading\")\n"
             f"r = demos.grade({e.function}, grading=\"grading/grading.yaml\")\nr"),
    ]
    return {"cells": cells, "metadata": {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


def exercise_text(name: str) -> str:
    return json.dumps(exercise_notebook(name), indent=1, ensure_ascii=False) + "\n"


def execute_exercise(name: str, folder, body: str | None = None):
    """The exercise notebook `name`, executed in `folder`; `body`: backward's body written in
    place of the raise, as a student writes it."""
    import nbclient
    import nbformat

    nb = nbformat.read(EXERCISES / f"{name}.ipynb", as_version=4)
    if body is not None:
        function = next(c for c in nb.cells if c.get("id") == "function")
        line = next(ln for ln in function.source.splitlines() if "raise NotImplementedError" in ln)
        indent = line[:len(line) - len(line.lstrip())]
        function.source = function.source.replace(
            line, "\n".join(indent + b for b in body.splitlines()))
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    return nb


# -- running them (tests/test_notebooks*.py) ------------------------------------------------

executed: dict[str, Any] = {}  # name: the executed notebook, for the browser test
# executed by test_notebooks.py; the rest by test_notebooks_in_browser.py (two test workers)
FIRST_HALF = ["multiply_add", "computation_graph", "autograd_internals", "my_exp",
              "custom_function"]
FAST = "legendre_fit"  # the one notebook `make test` runs (tutorial cells too); the rest: slow


def tiered(names: list[str]) -> list[Any]:
    """`names` as pytest parameters: FAST in the quick tier, every other one marked slow."""
    return [pytest.param(n, marks=() if n == FAST else pytest.mark.slow) for n in names]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """A `python3` kernelspec that starts this interpreter's ipykernel, first on JUPYTER_PATH
    (a user's own python3 kernel, another Python, is not the one under test)."""
    pytest.importorskip("ipykernel")
    folder = tmp_path_factory.mktemp("jupyter")
    spec = folder / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (tests)", "language": "python"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(folder))
        mp.setenv("JUPYTER_PLATFORM_DIRS", "1")
        yield


def execute(name: str, folder, edit: tuple[str, str] | None = None):
    """The notebook `name`, executed in `folder` with dry_run on (its parameters cell), after
    `edit` (old, new) of its Function's cell, as a student makes it."""
    import nbclient
    import nbformat

    nb = nbformat.read(FOLDER / f"{name}.ipynb", as_version=4)
    parameters = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and "dry_run = False" in parameters[0].source
    parameters[0].source = 'dry_run = True\noutput_dir = "outputs"'
    if edit:
        function = next(c for c in nb.cells if c.get("id") == f"tutorial-{function_of(name)}")
        assert function.source.count(edit[0]) == 1, edit
        function.source = function.source.replace(*edit)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(folder)}}).execute()
    if not edit:
        executed[name] = nb
    return nb


def html_of(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o["data"]["text/html"] for o in cell.outputs
                   if o.output_type == "execute_result" and "text/html" in o["data"])


def result_of(nb, cell_id: str) -> str:
    cell = next(c for c in nb.cells if c.get("id") == cell_id)
    return "".join(o["data"]["text/plain"] for o in cell.outputs
                   if o.output_type == "execute_result")


def walks_its_example(name: str, folder) -> None:
    """Execute the notebook `name` in `folder` and check what its cells show."""
    from demos.lab.core.overrides import yaml_text

    nb = execute(name, folder)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert errors == []
    assert result_of(nb, "run") == "True"  # the run passed
    if tutorial_cells(name):  # the tutorial's own code ran in the kernel, then the instruments
        ran = [c for c in nb.cells if c.get("id", "").startswith("tutorial-")
               and c.cell_type == "code"]
        assert ran and all(c.execution_count for c in ran)  # each ran, without an error
        assert 'class="backward" data-graph="tutorial"' in html_of(nb, "instruments")
    runs = sorted(p for p in (folder / "outputs").iterdir() if re.fullmatch(r"\d{4}-.*", p.name))
    if function_of(name):  # its Function, as the notebook defines it, checked first: passed
        checked = json.loads((runs.pop(0) / "summary.json").read_text())
        failed = [(c["name"], c["detail"]) for e in checked["scenarios"]
                  for c in e["checks"] if c["passed"] is False]
        if CHECKED[name].hazard:  # but for a real hazard of its own, which the notebook says
            assert [n for n, _ in failed] == ["support matrix"], failed
            assert failed[0][1].startswith("fails: autocast ("), failed
        else:
            assert result_of(nb, "check") == "True", failed
        assert checked["command"][0].startswith("demos.check_function(")
        assert [e["id"] for e in checked["scenarios"]] == [function_of(name)]
    first = json.loads((runs[0] / "summary.json").read_text())
    assert first["status"] == "passed" and first["dry_run"] is True
    assert first["command"][0].startswith(f"demos.run({name!r}")  # the call that made it
    graph = WALKS[name].graph
    stepper = html_of(nb, "stepper")
    assert f'class="backward" data-graph="{graph}"' in stepper and "<script>" in stepper
    entry = html_of(nb, "entry")
    assert f'<section class="scenario" id="{name}">' in entry and "The checks" in entry
    if name == "custom_function":  # the mistake of a class defined in a cell, caught
        assert result_of(nb, "change") == "False"
        second = json.loads((runs[1] / "summary.json").read_text())
        assert {c["name"] for c in second["scenarios"][0]["checks"] if not c["passed"]} == {
            "gradcheck", "parity with the reference"}
        assert second["scenarios"][0]["id"] == "Cube"
        third = json.loads((runs[2] / "summary.json").read_text())["scenarios"][0]
        assert third["id"] == "Reversal" and third["status"] == "failed"
        assert [c["name"] for c in third["checks"] if not c["passed"]] == [
            "backward gives the intended gradient (the reference's)"]
    else:
        assert len(runs) == 2
        second = json.loads((runs[1] / "summary.json").read_text())
        assert second["sets"] == [f"scenarios[0].{k}={yaml_text(v)}"
                                  for k, v in WALKS[name].change.items()]




def judges_an_edit(name: str, folder) -> None:
    """Execute the notebook `name` in `folder` after the edit of its Function that it invites:
    the check of its class and the lab's run fail, the check saying why."""
    nb = execute(name, folder, CHECKED[name].edit)
    assert [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"] == []
    assert result_of(nb, "check") == "False" and result_of(nb, "run") == "False"
    runs = sorted(p for p in (folder / "outputs").iterdir() if re.fullmatch(r"\d{4}-.*", p.name))
    checked, lab = (json.loads((p / "summary.json").read_text())["scenarios"][0]
                    for p in runs[:2])
    failed = {c["name"]: c for c in checked["checks"] if c["passed"] is False}
    assert "gradcheck" in failed and failed["gradcheck"]["diagnosis"]["says"], failed
    assert lab["id"] == name and lab["status"] == "failed"
    assert "gradcheck" in {c["name"] for c in lab["checks"] if c["passed"] is False}


def main() -> None:
    FOLDER.mkdir(exist_ok=True)
    for name in WALKS:
        (FOLDER / f"{name}.ipynb").write_text(text(name), encoding="utf-8")
    print(f"wrote {len(WALKS)} notebooks in {FOLDER}", file=sys.stderr)
    from demos.exercises.table import DOCUMENTS
    EXERCISES.mkdir(exist_ok=True)
    for name in DOCUMENTS:
        (EXERCISES / f"{name}.ipynb").write_text(exercise_text(name), encoding="utf-8")
    print(f"wrote {len(DOCUMENTS)} exercise notebooks in {EXERCISES}", file=sys.stderr)


if __name__ == "__main__":
    main()
