"""custom_function: right Functions pass; each classic mistake is caught, named, without
traceback."""
import shutil

import pytest
import yaml

from demos.cli import main
from demos.lab.core.results import CAPABILITIES
from demos.lab.core.schema import ConfigError
from tests.conftest import CONFIGS, ROOT, check, entry, only_run_dir, summary

FIXTURE = ROOT / "tests" / "fixtures" / "user_fns.py"
ONE = [{"name": "x", "shape": [4, 3]}]
THREE = [{"name": "x", "shape": [4, 3]}, {"name": "y", "shape": [4, 3], "low": 0.5, "high": 2.0},
         {"name": "z", "shape": [4, 3], "requires_grad": False}]


def run_function(tmp_path, function, inputs, reference=None, double_backward=False, **more):
    """Write a config (and the Functions' module) into tmp_path, run it; (exit code, entry)."""
    shutil.copy(FIXTURE, tmp_path / "user_fns.py")
    spec = {"scenario": "custom_function", "id": "mine", "function": f"user_fns:{function}",
            "inputs": inputs, "double_backward": double_backward,
            "support": [],  # the matrix is tested where it is the point (it costs seconds)
            **more}
    if reference:
        spec["reference"] = f"user_fns:{reference}"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"device": "cpu", "scenarios": [spec]}))
    code = main(["--config", str(path), "--no-progress", "--output-dir", str(tmp_path / "out")])
    return code, entry(summary(only_run_dir(tmp_path / "out")), "mine")


@pytest.mark.parametrize("function, inputs, reference", [
    ("Square", ONE, "square"),
    ("MulAdd", THREE, "mul_add"),
    ("MulAdd", [dict(s, requires_grad=True) for s in THREE], "mul_add"),
    ("SinCos", ONE, "sin_cos"),
])
def test_right_functions_pass(tmp_path, function, inputs, reference):
    code, e = run_function(tmp_path, function, inputs, reference, double_backward=True,
                           support=["backward", "vmap"])
    assert code == 0 and e["status"] == "passed", e["checks"]
    names = [c["name"] for c in e["checks"]]
    assert names == ["forward runs", "forward changes no input without ctx.mark_dirty",
                     "backward returns one grad per input",
                     "each grad matches its input (None, shape, dtype)",
                     "backward leaves grad_output unchanged", "autograd accepts the backward",
                     "tensors saved with save_for_backward",
                     "gradcheck", "gradgradcheck", "parity with the reference",
                     "support matrix", "second backward agrees: second_backward"]
    assert e["metrics"]["max_abs_error"] < 1e-12
    assert "explain.txt" in e["artifacts"] and "graph.svg" in e["artifacts"]


MISTAKES = [  # function, inputs, double_backward, {failing check: words its detail must hold}
    ("SquareWrongFactor", ONE, False,
     {"gradcheck": "input 0 (x)", "parity with the reference": "grad x differs"}),
    ("SquareWrongSign", ONE, False,
     {"gradcheck": "input 0 (x)", "parity with the reference": "grad x differs"}),
    ("MulAddTooFewGrads", THREE, False,
     {"backward returns one grad per input": "returned 2 for 3 inputs (x, y, z)",
      "autograd accepts the backward": "incorrect number of gradients"}),
    ("SquareWrongShape", ONE, False,
     {"each grad matches its input (None, shape, dtype)": "x: grad has shape (3,), x has (4, 3)",
      "autograd accepts the backward": "invalid gradient"}),
    ("SquareWrongDtype", ONE, False,
     {"each grad matches its input (None, shape, dtype)": "x: grad is float16, x is float64"}),
    ("MulAddNoneForRequiredInput", THREE, False,
     {"each grad matches its input (None, shape, dtype)": "y: returned None, but y requires grad",
      "parity with the reference": "grad y"}),
    ("SquareModifiesGradOutput", ONE, False,
     {"backward leaves grad_output unchanged": "modified grad_output [0] in place"}),
    ("MulAddSwapped", THREE, False,
     {"gradcheck": "input 0 (x)", "parity with the reference": "grad x differs"}),
    ("ForwardRaises", ONE, False, {"forward runs": "RuntimeError"}),
    ("ForwardReturnsNone", ONE, False, {"forward runs": "it returned NoneType, no tensor"}),
    ("BackwardRaises", ONE, False, {"backward runs": "RuntimeError"}),
    ("SquareNotTwiceDifferentiable", ONE, True,
     {"gradgradcheck": "Jacobian mismatch for output 0 with respect to input 0 (x)"}),
]


@pytest.mark.parametrize("function, inputs, double, failures", MISTAKES,
                         ids=[m[0] for m in MISTAKES])
def test_each_mistake_is_caught_and_named(tmp_path, function, inputs, double, failures):
    reference = {"Square": "square", "MulAdd": "mul_add"}.get(
        next((k for k in ("MulAdd", "Square") if function.startswith(k)), ""), "square")
    code, e = run_function(tmp_path, function, inputs, reference, double_backward=double)
    assert code == 1 and e["status"] == "failed" and e["error"] is None
    failed = {c["name"]: c["detail"] for c in e["checks"] if c["passed"] is False}
    for name, words in failures.items():
        assert name in failed, (name, failed)
        assert words in failed[name], (name, failed[name])
        assert "\n" not in failed[name] and "Traceback" not in failed[name]


def test_a_function_that_changes_its_input_in_place_is_said_and_harms_no_other_check(tmp_path):
    """Shift adds 1 to x itself without ctx.mark_dirty. The run says so, in a failed check of
    its own; parity, on copies of its own, still finds its value and gradient right."""
    code, e = run_function(tmp_path, "Shift", ONE, "shift")
    assert code == 1
    failed = {c["name"]: c["detail"] for c in e["checks"] if c["passed"] is False}
    assert failed["forward changes no input without ctx.mark_dirty"].startswith(
        "x changed in place without ctx.mark_dirty: autograd does not know")
    assert check(e, "parity with the reference")["passed"] is True


@pytest.mark.parametrize("function, message", [
    ("no_such_module:Square", "scenarios[0].function: cannot import module 'no_such_module' "
                              "(no such file beside the config, and not on sys.path)"),
    ("user_fns:Sqare", "scenarios[0].function: module 'user_fns.py' has no attribute 'Sqare' "
                       "(did you mean 'Square'?)"),
    ("user_fns.py:Sqare", "scenarios[0].function: module 'user_fns.py' has no attribute 'Sqare' "
                          "(did you mean 'Square'?)"),
    ("user_fns:square", "scenarios[0].function: {dir}/user_fns.py:square is not a "
                        "torch.autograd.Function subclass or a torch.library.custom_op (got "
                        "function)"),
    ("nowhere.py:F", "scenarios[0].function: {dir}/nowhere.py: no such file"),
    ("user_fns.Square", "scenarios[0].function: expected module:attribute (e.g. my_ops:MyCube), "
                        "got 'user_fns.Square'"),
    ("broken_syntax:F", "scenarios[0].function: importing module 'broken_syntax.py' raised "
                        "SyntaxError: invalid syntax (broken_syntax.py, line 1)"),
    ("raises_on_import:F", "scenarios[0].function: importing module 'raises_on_import.py' "
                           "raised RuntimeError: no GPU here (at {dir}/raises_on_import.py:1 in "
                           "<module>)"),
    ("exits:F", "scenarios[0].function: importing module 'exits.py' raised SystemExit: 3 (at "
                "{dir}/exits.py:2 in <module>)"),
    ("folder.py:F", "scenarios[0].function: {dir}/folder.py: is a folder, not a .py file"),
    ("notes.txt:F", "scenarios[0].function: {dir}/notes.txt: not a .py file"),
    ("user_fns.py:", "scenarios[0].function: expected module:attribute (e.g. my_ops:MyCube), "
                     "got 'user_fns.py:'"),
])
def test_a_function_that_cannot_be_imported_is_a_config_error(tmp_path, capsys, function, message):
    shutil.copy(FIXTURE, tmp_path / "user_fns.py")
    (tmp_path / "broken_syntax.py").write_text("def oops(:\n")
    (tmp_path / "raises_on_import.py").write_text("raise RuntimeError('no GPU here')\n")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "folder.py").mkdir()
    (tmp_path / "notes.txt").write_text("not code\n")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{"scenario": "custom_function",
                                                   "function": function, "inputs": ONE}]}))
    assert main(["--config", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: {message.format(dir=tmp_path)}\n"
    assert not (tmp_path / "out").exists()  # nothing ran


def test_the_shipped_examples(tmp_path):
    assert main(["--config", str(CONFIGS / "examples" / "cube_ok.yaml"), "--no-progress",
                 "--output-dir", str(tmp_path / "ok")]) == 0
    assert main(["--config", str(CONFIGS / "examples" / "cube_mistake.yaml"), "--no-progress",
                 "--output-dir", str(tmp_path / "mistake")]) == 1
    e = entry(summary(only_run_dir(tmp_path / "mistake")), "cube_mistake")
    assert check(e, "gradcheck")["detail"] == \
        "GradcheckError: Jacobian mismatch for output 0 with respect to input 0 (x)"
    assert check(e, "parity with the reference")["detail"].startswith(
        "grad x differs: max abs err")
    assert check(e, "gradgradcheck")["passed"] is True  # its own second derivatives agree
    # one wrong backward, counted by gradcheck and parity alone: the matrix names it, once
    assert [c["name"] for c in e["checks"] if c["passed"] is False] == [
        "gradcheck", "parity with the reference"]
    assert "backward (as the gradcheck check found), float32 (follows from the backward row)" \
        in check(e, "support matrix")["detail"]


def write_ops(folder, factor):
    """A folder with its own my_ops.py: a Function computing factor * x."""
    folder.mkdir()
    (folder / "my_ops.py").write_text(
        "import torch\n\n\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        f"        return {factor} * x\n\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        f"        return {factor} * g\n\n\n"
        f"def scale(x):\n    return {factor} * x\n")
    return folder


def test_two_folders_with_the_same_module_name_never_collide(tmp_path):
    configs = []
    for factor in (2, 3):
        folder = write_ops(tmp_path / f"f{factor}", factor)
        path = folder / "c.yaml"
        path.write_text(yaml.safe_dump({"scenarios": [{
            "scenario": "custom_function", "id": f"scale{factor}", "function": "my_ops:Scale",
            "reference": "my_ops:scale", "inputs": [{"name": "x", "value": [1.0, 2.0]}]}]}))
        configs.append(path)
    for factor, path in zip((2, 3), configs):  # one process, both folders: each its own my_ops
        out = tmp_path / f"out{factor}"
        assert main(["--config", str(path), "--no-progress", "--output-dir", str(out)]) == 0
        e = entry(summary(only_run_dir(out)), f"scale{factor}")
        assert check(e, "parity with the reference")["passed"] is True


def test_loading_user_code_writes_nothing_beside_it(tmp_path):
    folder = write_ops(tmp_path / "ops", 2)
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{
        "scenario": "custom_function", "function": "my_ops:Scale",
        "inputs": [{"name": "x", "value": [1.0, 2.0]}]}]}))
    assert main(["--config", str(path), "--no-progress", "--output-dir",
                 str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in folder.iterdir()) == ["c.yaml", "my_ops.py"]  # no __pycache__


def test_loading_a_config_imports_no_user_code(tmp_path, capsys):
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "my_ops.py").write_text("raise RuntimeError('imported while loading')\n")
    path = folder / "c.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{
        "scenario": "custom_function", "function": "my_ops:F", "inputs": ONE}]}))
    assert main(["--config", str(path), "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["scenarios"][0]["function"] == f"{folder / 'my_ops.py'}:F"  # resolved, absolute


def test_a_runs_saved_config_runs_again_from_anywhere(tmp_path, monkeypatch):
    assert main(["--config", str(CONFIGS / "custom_function.yaml"), "--no-progress",
                 "--output-dir", str(tmp_path / "first")]) == 0
    saved = only_run_dir(tmp_path / "first") / "config.yaml"
    monkeypatch.chdir(tmp_path)
    assert main(["--config", str(saved.relative_to(tmp_path)), "--no-progress",
                 "--output-dir", "again"]) == 0
    first = summary(only_run_dir(tmp_path / "first"))["scenarios"][0]
    again = summary(only_run_dir(tmp_path / "again"))["scenarios"][0]
    assert again["status"] == "passed" and again["metrics"] == first["metrics"]
    assert again["artifacts"] == first["artifacts"]  # graph.pdf too: drawn where it belongs


def test_user_code_problems_found_when_the_run_starts(tmp_path, capsys):
    """A reference that is not callable; a module that raises Ctrl-C (which stays Ctrl-C)."""
    from demos.lab.core.user_code import load_object
    (tmp_path / "consts.py").write_text("import torch\n\nNOT_CALLABLE = 3\n")
    shutil.copy(FIXTURE, tmp_path / "user_fns.py")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{
        "scenario": "custom_function", "function": "user_fns:Square",
        "reference": "consts:NOT_CALLABLE", "inputs": ONE}]}))
    assert main(["--config", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (f"error: {path}: scenarios[0].reference: "
                                       f"{tmp_path / 'consts.py'}:NOT_CALLABLE is not callable\n")
    (tmp_path / "stops.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        load_object(f"{tmp_path / 'stops.py'}:F", "function")
    with pytest.raises(ConfigError, match="expected module:attribute"):
        load_object("no_colon", "function")


def test_neighbours_and_relative_imports_stay_with_their_folder(tmp_path):
    """Each folder's ops.py imports its own helper.py; a package's module imports relatively."""
    for factor in (2, 3):
        folder = tmp_path / f"f{factor}"
        folder.mkdir()
        (folder / "helper.py").write_text(f"FACTOR = {factor}\n")
        (folder / "ops.py").write_text(
            "import torch\nimport helper\n\n\n"
            "class Scale(torch.autograd.Function):\n"
            "    @staticmethod\n"
            "    def forward(ctx, x):\n"
            "        return helper.FACTOR * x\n\n"
            "    @staticmethod\n"
            "    def backward(ctx, g):\n"
            "        return helper.FACTOR * g\n")
        (folder / "ref.py").write_text(f"def scale(x):\n    return {factor} * x\n")
    pkg = tmp_path / "f4" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text((tmp_path / "f2" / "ops.py").read_text()
                                 .replace("import helper\n", "").replace("helper.FACTOR", "4"))
    (pkg / "sub.py").write_text("from .base import Scale\n")
    (tmp_path / "f4" / "ref.py").write_text("def scale(x):\n    return 4 * x\n")
    for factor, function in ((2, "ops:Scale"), (3, "ops:Scale"), (4, "pkg.sub:Scale")):
        path = tmp_path / f"f{factor}" / "c.yaml"
        path.write_text(yaml.safe_dump({"scenarios": [{
            "scenario": "custom_function", "id": f"scale{factor}", "function": function,
            "reference": "ref:scale", "inputs": [{"name": "x", "value": [1.0, 2.0]}]}]}))
        out = tmp_path / f"out{factor}"
        assert main(["--config", str(path), "--no-progress", "--output-dir", str(out)]) == 0, factor
        e = entry(summary(only_run_dir(out)), f"scale{factor}")
        assert check(e, "parity with the reference")["passed"] is True


def test_a_function_with_nan_gradients_still_gets_its_report_and_stepper(tmp_path):
    """sqrt at -1 and 0: NaN and inf gradients. backward.json stays strict JSON, with every
    step, and the report (with its stepper) is written."""
    import json
    run_function(tmp_path, "Sqrt", [{"name": "x", "value": [-1.0, 0.0, 4.0]}], None)
    run_dir = only_run_dir(tmp_path / "out")
    text = (run_dir / "mine" / "backward.json").read_text()
    graphs = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert graphs["graphs"][0]["error"] is None and graphs["graphs"][0]["steps"]
    assert 'class="backward"' in (run_dir / "report.html").read_text()


def test_the_support_matrix_of_your_function_and_what_you_require(tmp_path):
    """unsupported is information until required; fails is always a failure, counted once."""
    for sub in "abc":
        (tmp_path / sub).mkdir()
    code, e = run_function(tmp_path / "a", "Square", ONE, "square",
                           support=list(CAPABILITIES))  # every row, as by default
    assert code == 0 and e["support"]["Square"]["vmap"]["status"] == "unsupported"
    assert "must override the setup_context staticmethod" in \
        e["support"]["Square"]["vmap"]["detail"]
    code, e = run_function(tmp_path / "b", "Square", ONE, "square", require=["vmap", "backward"],
                           support=["backward", "vmap"])
    failed = {c["name"]: c["detail"] for c in e["checks"] if c["passed"] is False}
    assert code == 1 and set(failed) == {"support: vmap (required)"}  # counted once
    assert failed["support: vmap (required)"].startswith("unsupported: RuntimeError: In order "
                                                         "to use an autograd.Function")
    assert {c["name"]: c["passed"] for c in e["checks"]}["support: backward (required)"]
    code, e = run_function(tmp_path / "c", "SquareVmapWrong", ONE, "square",
                           support=["backward", "vmap"])
    failed = {c["name"]: c["detail"] for c in e["checks"] if c["passed"] is False}
    assert code == 1 and set(failed) == {"support matrix"}
    assert failed["support matrix"].startswith("fails: vmap (vmap value differs: max abs err")


@pytest.mark.parametrize("more, message", [
    ({"support": ["vmapp"]}, "scenarios[0].support[0]: must be one of backward, "
                             "double_backward, forward_ad, func_grad, vmap, compile, "
                             "compile_grad, compile_jvp, compile_vmap, inductor, float32, "
                             "noncontiguous, grad_layouts, aliased_inputs, checkpoint, "
                             "saved_hooks, autocast, memory, cuda, got 'vmapp' (did you mean "
                             "'vmap'?)"),
    ({"support": ["backward"], "require": ["vmap"]},
     "scenarios[0].require[0]: vmap is required but not in support, so it would not run"),
])
def test_support_config_errors(tmp_path, capsys, more, message):
    shutil.copy(FIXTURE, tmp_path / "user_fns.py")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{
        "scenario": "custom_function", "function": "user_fns:Square", "inputs": ONE, **more}]}))
    assert main(["--config", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"error: {path}: {message}\n"
