"""The reproduction script of a `differs` support row (demos.lab.checks.repro): the Function's
source with its module's context (helpers, constants, neighbours, relative imports, a factory's
closure), its inputs as literals, torch alone imported; what it cannot carry named in its third
line; run alone in an empty folder with torch alone, it shows torch's difference."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from demos.lab.checks import support
from tests.conftest import ROOT
from tests.test_compiled import differing


def write(row, folder):
    """A `differs` row's reproduction, written into `folder` as the runner writes it."""
    (folder / row.reproduction.file).write_text(row.reproduction.script)


@pytest.mark.slow
def test_the_reproduction_shows_the_same_when_run_alone(tmp_path):
    run, _ = differing("reversal_ok", tmp_path)
    script = run.dir / "reversal_ok" / "repro_reversal_ok_compile_grad.py"
    alone = tmp_path / "elsewhere"
    alone.mkdir()
    (alone / script.name).write_text(script.read_text())
    done = subprocess.run([sys.executable, script.name], cwd=alone, capture_output=True,
                          text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "AssertionError: torch.compile(torch.func.grad) differs from eager" in done.stderr
    assert f"torch {torch.__version__}" in done.stdout


OPS_WITH_HELPERS = {
    "helpers.py": "LAMBDA = 0.5\n",
    "ops_here.py": (  # a helper and a constant of its own module, a base class, a main block
        "import torch\nLAMBDA = 0.5\n\n\ndef _rev(g):\n    return -LAMBDA * g\n\n\n"
        "class Base(torch.autograd.Function):\n    @staticmethod\n    def forward(x):\n"
        "        return x.clone()\n\n    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n        pass\n\n\n"
        "class RevHere(Base):\n    @staticmethod\n    def backward(ctx, g):\n"
        "        return _rev(g)\n\n\nif __name__ == '__main__':\n    raise SystemExit(7)\n"),
    "ops_beside.py": (  # a neighbour imported by name
        "import torch\nfrom helpers import LAMBDA\n\n\n"
        "class RevBeside(torch.autograd.Function):\n    @staticmethod\n    def forward(x):\n"
        "        return x.clone()\n\n    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n        pass\n\n    @staticmethod\n"
        "    def backward(ctx, g):\n        return -LAMBDA * g\n"),
}


@pytest.mark.slow
def test_a_reproduction_runs_alone_with_the_functions_helpers(tmp_path, monkeypatch, cpu):
    """Found by an outside review: helpers and constants of the Function's module, and a
    neighbour module it imports, made the script fail with NameError / ModuleNotFoundError."""
    import importlib

    source = tmp_path / "src"
    source.mkdir()
    for name, text in OPS_WITH_HELPERS.items():
        (source / name).write_text(text)
    monkeypatch.syspath_prepend(str(source))
    x = torch.tensor([1.0, 3.0, 2.0], dtype=torch.float64).requires_grad_()
    for module, name in (("ops_here", "RevHere"), ("ops_beside", "RevBeside")):
        fn = getattr(importlib.import_module(module), name)
        rows = support.matrix(fn.apply, {"x": x}, None, cpu, rows=["compile_grad"], name=name)
        assert rows["compile_grad"].status == "differs", rows
        write(rows["compile_grad"], tmp_path)
        alone = tmp_path / f"alone_{name}"
        alone.mkdir()
        script = f"repro_{name}_compile_grad.py"
        (alone / script).write_text((tmp_path / script).read_text())
        done = subprocess.run([sys.executable, script], cwd=alone, capture_output=True,
                              text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
        assert done.returncode == 1 and "AssertionError: torch.compile(torch.func.grad) " \
            "differs from eager" in done.stderr, (name, done.stdout, done.stderr)


# -- reproduction scripts stand alone (issue 44) ----------------------------------------------


def top_checking_function():
    """checks_at_top.py's Function, its module loaded as a script of it would be, all but the
    check its last lines run."""
    import importlib.util

    from tests.fixtures import repro_fns

    path = Path(repro_fns.__file__).with_name("checks_at_top.py")
    spec = importlib.util.spec_from_file_location("checks_at_top", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["checks_at_top"] = module
    source = path.read_text()
    exec(compile(source[:source.index("result = ")], str(path), "exec"), vars(module))
    return module.RevTop


def shape(name):
    """(the Function's apply as a row calls it, its name) for each shape of issue 44."""
    from demos.lab.checks.gradients import Fixed, with_fixed
    from tests.fixtures.repro_fns import ops, shapes

    if name == "a string with nan and inf":
        return with_fixed(shapes.RevMode.apply, {1: Fixed("mode", "nan 'inf' \"nan\"")}), "RevMode"
    cls = {"a relative import": ops.RevRelative, "a factory's closure": shapes.RevFactory,
           "check_function at the top": None}[name] or top_checking_function()
    return with_fixed(cls.apply, {}), cls.__name__


SHAPES = ["a string with nan and inf", "a relative import", "a factory's closure",
          "check_function at the top"]


@pytest.mark.parametrize("name", SHAPES)
def test_a_reproduction_carries_its_functions_context(name, monkeypatch):
    """Each shape the issue found (a SyntaxError, an ImportError, a NameError, a script that
    ran the check again and imported the lab), written with a fixed case: the script imports
    torch alone and runs (torch.compile made the identity here: its difference is the slow
    tier's, run alone)."""
    import ast

    from demos.lab.checks.repro import script

    fn, function = shape(name)
    x = torch.tensor([1.0, 3.0, 2.0], dtype=torch.float64)
    text = script({"transform": "torch.func.grad", "backend": "aot_eager", "fn": fn,
                   "inputs": {"x": x}, "weights": [torch.ones(3, dtype=torch.float64)],
                   "argnums": (0,)}, function, "compile_grad")
    imported = {a.name.split(".")[0] for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.Import) for a in n.names} | {
                n.module.split(".")[0] for n in ast.walk(ast.parse(text))
                if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}
    assert imported == {"torch"} and "check_function" not in text, text
    assert "Not carried" not in text, text
    monkeypatch.setattr(torch, "compile", lambda f, **kwargs: f)
    exec(compile(text, "repro.py", "exec"), {"__name__": "__main__"})


def test_a_reproduction_says_first_what_it_could_not_carry(tmp_path, monkeypatch):
    import importlib

    from demos.lab.checks.repro import script

    (tmp_path / "carry_pkg").mkdir()
    (tmp_path / "carry_pkg" / "__init__.py").write_text("")
    (tmp_path / "carry_pkg" / "helper.py").write_text(
        "import types\nSCALE = types.SimpleNamespace(k=2.0)\n\n\ndef rev(g):\n"
        "    return -SCALE.k * g\n")
    (tmp_path / "carry_pkg" / "ops.py").write_text(
        "import torch\nfrom .helper import SCALE, rev\n\n\n"
        "class Rev(torch.autograd.Function):\n    @staticmethod\n    def forward(x):\n"
        "        return x * SCALE.k\n\n    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n        pass\n\n    @staticmethod\n"
        "    def backward(ctx, g):\n        return rev(g)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = importlib.import_module("carry_pkg.ops").Rev.apply
    text = script({"transform": "torch.func.vmap", "backend": "aot_eager", "fn": fn,
                   "inputs": {"x": torch.ones(2)}, "batched": [torch.ones(3, 2)]}, "Rev",
                  "compile_vmap")
    assert text.splitlines()[2] == ("# Not carried from the Function's code, to define here: "
                                    "SCALE (SimpleNamespace)"), text
    assert "def rev(g):" in text  # a helper function of its neighbour: carried, as source


def test_a_reproduction_names_a_definition_it_leaves_out_and_a_star_import(tmp_path,
                                                                          monkeypatch):
    """A helper that calls the lab is left out of the script, and a `*` import cannot be
    carried: both are named in its third line (the helper was dropped silently, and `*` was
    written as `* = None`, a SyntaxError; from a review)."""
    import importlib

    from demos.lab.checks.repro import script

    (tmp_path / "star_pkg").mkdir()
    (tmp_path / "star_pkg" / "__init__.py").write_text("")
    (tmp_path / "star_pkg" / "helper.py").write_text("K = 2.0\n")
    (tmp_path / "star_pkg" / "ops.py").write_text(
        "import torch\nfrom demos.lab.tensors import dense\nfrom .helper import *\n\n\n"
        "def twice(t):\n    return dense(t) * K\n\n\n"
        "class Rev(torch.autograd.Function):\n    @staticmethod\n    def forward(x):\n"
        "        return twice(x)\n\n    @staticmethod\n"
        "    def setup_context(ctx, inputs, output):\n        pass\n\n    @staticmethod\n"
        "    def backward(ctx, g):\n        return -K * g\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = importlib.import_module("star_pkg.ops").Rev.apply
    text = script({"transform": "torch.func.vmap", "backend": "aot_eager", "fn": fn,
                   "inputs": {"x": torch.ones(2)}, "batched": [torch.ones(3, 2)]}, "Rev",
                  "compile_vmap")
    line = text.splitlines()[2]
    assert line.startswith("# Not carried") and "twice" in line and "*" in line, text
    compile(text, "repro.py", "exec")  # no `* = None`


def test_literals_are_python_wherever_nan_hides():
    from demos.lab.checks.repro import literal

    value = ("nan", "'inf'", 'a "nan"', float("nan"), -math.inf, (1,), [1.5, None],
             {"k": {2}}, b"inf", True, torch.float32)
    back = eval(literal(value))
    assert back[:3] == value[:3] and math.isnan(back[3]) and back[4] == -math.inf
    assert back[5:] == value[5:]
    t = torch.tensor([[math.nan, 1.0], [math.inf, 2.0]], dtype=torch.float64)
    assert torch.equal(eval(literal(t)).nan_to_num(), t.nan_to_num())
    with pytest.raises(ValueError):
        literal(object())


def run_alone(script: Path, folder: Path) -> subprocess.CompletedProcess:
    """`script` copied into `folder`, empty, and run there with torch alone: no site packages
    but torch's folder (so not this lab, installed or not), no environment but PATH."""
    folder.mkdir()
    (folder / script.name).write_text(script.read_text())
    packages = str(Path(torch.__file__).parent.parent)
    return subprocess.run([sys.executable, "-S", script.name], cwd=folder, capture_output=True,
                          text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": packages})


@pytest.mark.slow
@pytest.mark.parametrize("name", SHAPES)
def test_a_reproduction_reproduces_alone_with_torch_alone(name, tmp_path, cpu):
    """Each shape of issue 44, its `differs` row found by torch itself, its script run in an
    empty folder with torch alone: it shows the difference (and never the lab's run)."""
    if name == "check_function at the top":  # the script itself, as its user runs it
        from tests.fixtures import repro_fns
        ran = subprocess.run([sys.executable, str(Path(repro_fns.__file__).with_name(
            "checks_at_top.py"))], cwd=tmp_path, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert "checked: False" in ran.stdout, ran.stdout + ran.stderr  # -g is no derivative
        (script,) = (tmp_path / "outputs").glob("*/RevTop/repro_RevTop_compile_grad.py")
    else:
        fn, function = shape(name)
        x = torch.tensor([1.0, 3.0, 2.0], dtype=torch.float64).requires_grad_()
        rows = support.matrix(fn, {"x": x}, None, cpu, rows=["compile_grad"], name=function)
        assert rows["compile_grad"].status == "differs", rows
        write(rows["compile_grad"], tmp_path)
        script = tmp_path / f"repro_{function}_compile_grad.py"
    done = run_alone(script, tmp_path / "alone")
    assert done.returncode == 1 and "AssertionError: torch.compile(torch.func.grad) differs " \
        "from eager" in done.stderr, (done.stdout, done.stderr)
    assert list((tmp_path / "alone").iterdir()) == [tmp_path / "alone" / script.name]
