"""No setting bends a verdict (issue 43, item 9): torch's compiler switched off, settings an entry
leaves behind, a custom op name two files define, a file edited between two runs of a process,
forward mode without a rule, a Function that changes its input in place, an integer output: each
judged as alone, fresh, and as torch's gradcheck judges (an input range wider than a float:
tests/test_inputs.py)."""
from __future__ import annotations

import os
import shutil
import warnings

import pytest
import torch
import yaml

from demos import check_function, run
from demos.lab.checks import support
from tests.conftest import CONFIGS, FIXTURES, cli, run_cli, summary
from tests.fixtures import settings_fns as fns

D = torch.float64
COMPILED = ["compile", "compile_grad", "compile_jvp", "compile_vmap"]


def function_entry(function, reference, **more):
    return {"scenario": "custom_function", "function": f"settings_fns.py:{function}",
            "reference": f"settings_fns.py:{reference}", "inputs": [{"name": "x", "shape": [3]}],
            **more}


def config(tmp_path, *entries, name="c.yaml"):
    shutil.copy(FIXTURES / "settings_fns.py", tmp_path / "settings_fns.py")
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"device": "cpu", "scenarios": list(entries)}))
    return path


def rows_of(result, function):
    return {k: (r.status, r.detail) for k, r in result.entries[0].support.data[
        function].items()}


# -- torch's compiler switched off -------------------------------------------------------------
def test_a_compiler_switched_off_makes_the_compiled_rows_unsupported_naming_why(tmp_path,
                                                                                monkeypatch):
    """TORCHDYNAMO_DISABLE=1 makes torch.compile run eagerly: compiled against eager said `ok`
    and the reversal layer's `differs` vanished. TORCH_COMPILE_DISABLE=1 (torch's config
    `disable`, read when torch._dynamo loads) made fullgraph fail: cube_ok exited 1."""
    import torch._dynamo.config

    monkeypatch.setenv("TORCHDYNAMO_DISABLE", "1")
    r = run(CONFIGS / "examples" / "reversal_ok.yaml", output_dir=tmp_path, quiet=True,
            set={"scenarios.reversal_ok.support": COMPILED})
    assert r.passed, r.failures
    for row, (status, detail) in rows_of(r, "GradientReversal").items():  # differs, before
        assert status == "unsupported" and detail.startswith(
            "TORCHDYNAMO_DISABLE=1 in the environment: torch.compile compiles nothing"), row
    monkeypatch.delenv("TORCHDYNAMO_DISABLE")
    monkeypatch.setenv("TORCH_COMPILE_DISABLE", "1")
    with torch._dynamo.config.patch(disable=True):  # as the variable sets it at import
        r = run(CONFIGS / "examples" / "cube_ok.yaml", output_dir=tmp_path, quiet=True,
                set={"scenarios.cube_ok.support": ["backward", *COMPILED]})
        assert r.passed and r.exit_code == 0, r.failures
        rows = rows_of(r, "MyCube")
        assert rows["backward"][0] == "ok"
        assert rows["compile"] == ("unsupported", "TORCH_COMPILE_DISABLE=1 in the environment: "
                                   "torch.compile compiles nothing in this process -> unset it "
                                   "to check this row")
        monkeypatch.delenv("TORCH_COMPILE_DISABLE")  # set in code, not by the variable
        xs = {"x": torch.ones(3, dtype=D, requires_grad=True)}
        row = support.matrix(fns.ExpInPlace.apply, xs, rows=["compile_vmap"])["compile_vmap"]
        assert row.status == "unsupported" and row.detail.startswith(
            "torch._dynamo.config.disable = True"), row


@pytest.mark.slow
def test_the_shipped_cube_passes_with_torchs_compiler_switched_off(tmp_path):
    for variable in ("TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE"):
        done = run_cli("--config", CONFIGS / "examples" / "cube_ok.yaml", "--no-progress",
                       "--dry-run", "--output-dir", tmp_path / variable, env={variable: "1"})
        assert done.returncode == 0, done.stdout + done.stderr


# -- what an entry leaves behind -------------------------------------------------------------
def test_compiler_settings_an_entry_changes_are_set_back_for_the_next(tmp_path, monkeypatch):
    """A Function that sets torch._dynamo.config.recompile_limit = 1 made the next entry's
    compiled rows fail, which passed with --only: set back after it, and said."""
    import torch._dynamo.config

    monkeypatch.chdir(tmp_path)
    limit = torch._dynamo.config.recompile_limit
    path = config(tmp_path,
                  function_entry("LowersTheRecompileLimit", "double", id="lowers", support=[]),
                  {"scenario": "custom_function", "id": "cube", "support": ["compile"],
                   "function": str(CONFIGS / "examples" / "my_ops.py") + ":MyCube",
                   "reference": str(CONFIGS / "examples" / "my_ops.py") + ":cube",
                   "inputs": [{"name": "x", "shape": [5, 3]}, {"name": "w", "shape": [3]},
                              {"name": "b", "value": [0.1, 0.2, 0.3], "requires_grad": False}]})
    code, out, err = cli("--config", path, "--output-dir", "o", "--run-name", "all")
    assert code == 0, out + err
    assert "lowers changed torch's compiler settings torch._dynamo.config.recompile_limit = 1 " \
           "(the run's: the defaults); set back for the entries after it" in err
    assert torch._dynamo.config.recompile_limit == limit
    assert cli("--config", path, "--output-dir", "o", "--run-name", "alone", "--only",
               "cube")[0] == 0
    whole, alone = (summary(tmp_path / "o" / n)["scenarios"][-1] for n in ("all", "alone"))
    assert whole["support"] == alone["support"]


# -- one name, one op --------------------------------------------------------------------------
OP = '''
import torch

@torch.library.custom_op("demos_settings::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return 2 * x

@twice.register_fake
def _(x):
    return torch.empty_like(x)

twice.register_autograd(lambda ctx, g: {factor} * g)

def reference(x):
    return 2 * x
'''


def test_a_custom_op_name_two_files_define_is_refused_naming_both(tmp_path, monkeypatch):
    """torch lets a second definition replace the first: both entries ran the second file's
    backward, the right op failed and the wrong one's verdict hung on the order. One line,
    exit 2; in runs of one process after another, each file's op is its own."""
    for folder, factor in (("right", 2), ("wrong", 3)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "ops.py").write_text(OP.format(factor=factor))
    entries = [{"scenario": "custom_function", "id": folder, "function": f"{folder}/ops.py:twice",
                "reference": f"{folder}/ops.py:reference", "support": [],
                "inputs": [{"name": "x", "shape": [3]}]} for folder in ("right", "wrong")]
    path = config(tmp_path, *entries)
    code, out, err = cli("--config", path, "--output-dir", tmp_path / "o")
    assert code == 2 and not out, out + err
    assert err == (f"error: {path}: scenarios[1].function: the custom op demos_settings::twice "
                   f"is defined by both {tmp_path / 'right' / 'ops.py'} and "
                   f"{tmp_path / 'wrong' / 'ops.py'}: the process keeps the last one defined, "
                   f"and the other's checks would run its code; give them different names\n")
    alone = config(tmp_path, entries[1], name="wrong.yaml")  # the next run: its own claims
    assert cli("--config", alone, "--output-dir", tmp_path / "o")[0] == 1
    monkeypatch.chdir(tmp_path)
    verdicts = [run({"scenarios": [entries[i]]}, output_dir="o", quiet=True).passed
                for i in (0, 1, 0)]
    assert verdicts == [True, False, True]


def test_check_function_refuses_a_custom_op_defined_again_since(tmp_path, monkeypatch):
    from demos import ConfigError

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "first_op.py").write_text(OP.format(factor=2))
    (tmp_path / "second_op.py").write_text(OP.format(factor=3))
    import first_op
    import second_op  # noqa: F401 (defines demos_settings::twice again)

    with pytest.raises(ConfigError, match=r"^check_function: the custom op demos_settings::"
                       r"twice was defined again since this one was made \(by \S+second_op.py\)"):
        check_function(first_op.twice, [torch.ones(3)], output_dir=tmp_path, quiet=True)


# -- a file edited between two runs of one process -------------------------------------------
RIGHT = '''
import torch

class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x ** 2

def cube(x):
    return x ** 3
'''
WRONG = RIGHT.replace("g * 3 * x ** 2", "g * x ** 2  # the 3 dropped")


def edit(path, text):
    """Write `text` over `path`, its time a second later (a save within the second is seen)."""
    stat = path.stat()
    path.write_text(text)
    os.utime(path, (stat.st_atime + 1, stat.st_mtime + 1))


def test_run_and_check_function_load_a_file_edited_since_it_was_loaded(tmp_path, monkeypatch,
                                                                        capsys):
    """run() again after the Function's file was edited checked the old class and passed;
    check_function with a class whose file changed since its import, the same."""
    monkeypatch.chdir(tmp_path)
    ops = tmp_path / "edited_ops.py"
    ops.write_text(RIGHT)
    entry = {"scenario": "custom_function", "function": "edited_ops.py:Cube",
             "reference": "edited_ops.py:cube", "support": [],
             "inputs": [{"name": "x", "shape": [3]}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"scenarios": [entry]}))
    assert run("c.yaml", output_dir="o").passed
    edit(ops, WRONG)
    capsys.readouterr()
    r = run("c.yaml", output_dir="o")
    assert not r.passed and "gradcheck" in {c.name for c in r.failures}
    said = capsys.readouterr().out
    assert "edited_ops.py changed since loaded: the user's code loads anew" in said
    edit(ops, RIGHT)
    assert run("c.yaml", output_dir="o", quiet=True).passed

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "imported_ops.py").write_text(RIGHT)
    import imported_ops

    x = torch.randn(3, dtype=D, requires_grad=True)
    assert check_function(imported_ops.Cube, [x], imported_ops.cube, support=[],
                          output_dir="o", quiet=True).passed
    edit(tmp_path / "imported_ops.py", WRONG)
    with pytest.warns(UserWarning, match=r"imported_ops.py changed since it was loaded: "
                                         r"checking Cube as the file defines it now"):
        r = check_function(imported_ops.Cube, [x], imported_ops.cube, support=[],
                           output_dir="o", quiet=True)
    assert not r.passed and "gradcheck" in {c.name for c in r.failures}


# -- forward mode ------------------------------------------------------------------------------
def test_compile_jvp_is_unsupported_where_eager_forward_mode_is():
    """A custom op with no forward-mode rule: torch.func.jvp gives zeros, compiled and eager,
    and compile_jvp said ok."""
    xs = {"x": torch.linspace(-2, 2, 5, dtype=D, requires_grad=True)}
    rows = support.matrix(fns.softsign, xs, fns.softsign_reference,
                          rows=["backward", "forward_ad", "compile_jvp"])
    assert rows["backward"].status == "ok", rows
    for row in ("forward_ad", "compile_jvp"):
        assert rows[row].status == "unsupported" and "no forward-mode rule" in rows[row].detail


@pytest.mark.parametrize("function, reference, inputs", [
    (fns.ExpInPlace, fns.exp, [torch.linspace(-1, 1, 4, dtype=D, requires_grad=True)]),
    (fns.SortWithIndices, fns.sort, [torch.tensor([[0.3, -1.0, 2.0], [1.5, 0.2, -0.7]],
                                                  dtype=D, requires_grad=True)]),
], ids=["mark_dirty", "integer output"])
def test_forward_mode_runs_each_pass_fresh_and_takes_no_tangent_as_zeros(function, reference,
                                                                         inputs, tmp_path):
    """Right, and torch's gradcheck passes them: an in-place exp with mark_dirty and a jvp was
    run twice on the same input (the second pass at exp(x)); a sort's integer indices carry no
    tangent where torch.func.jvp gives zeros. Their wrong twins still fail forward mode."""
    assert torch.autograd.gradcheck(lambda x: function.apply(x.clone()), inputs,
                                    check_forward_ad=True)
    r = check_function(function, inputs, reference, output_dir=tmp_path, quiet=True,
                       support=["forward_ad", "vmap", "compile_jvp"])
    assert r.passed, r.failures
    wrong = {fns.ExpInPlace: fns.ExpInPlaceJvpHalved,
             fns.SortWithIndices: fns.SortWithIndicesJvpUnsorted}[function]
    r = check_function(wrong, inputs, reference, output_dir=tmp_path, quiet=True,
                       support=["forward_ad"])
    failed = {c.name: c.detail for c in r.failures}  # (tangents of 1 are sorted already:
    assert set(failed) <= {"forward mode agrees: forward_mode", "support matrix"}, failed
    assert "fails: forward_ad" in failed["support matrix"]  # the row's gradcheck sees it)


# -- torch's own test Functions ----------------------------------------------------------------
CLASSES = {  # each OpInfo of torch's autograd_function_db: its Function (the op is its apply,
    # or a lambda around it); the db is imported by the test (1.2 s: torch's test machinery)
    "NumpyCubeAutogradFunction": "NumpyCube", "NumpyExpMarkDirtyAutogradFunction": "NumpyExp_",
    "NumpyMulAutogradFunction": "NumpyMul",
    "NumpyCubeNotComposableAutogradFunction": "NumpyCubeNotComposable",
    "NumpySortAutogradFunction": "NumpySort", "NumpyTakeAutogradFunction": "NumpyTake",
    "SelectAutogradFunction": "Select", "CubeGenVmapAutogradFunction": "CubeGenVmap",
    "MulGenVmapAutogradFunction": "MulGenVmap", "SortGenVmapAutogradFunction": "SortGenVmap",
    "SelectGenVmapAutogradFunction": "SelectGenVmap",
    "ScaleGradGenVmapAutogradFunction": "ScaleGradGenVmap",
    "ZeroGradientsGenVmapAutogradFunction": "ZeroGradientsGenVmap",
    "ForwardHasDefaultArgsAutogradFunction": "ForwardHasDefaultArgs"}


@pytest.mark.parametrize("name", CLASSES)
def test_torchs_own_functions_are_judged_as_torchs_gradcheck_judges_them(name, tmp_path):
    """torch.testing's autograd_function_db (14 Functions: numpy inside, mark_dirty,
    mark_non_differentiable, integer outputs and arguments, non-tensor arguments, deliberately
    wrong gradients) on its first float64 sample: check_function, every support row but
    inductor, passes exactly where torch's gradcheck of the OpInfo's op passes, and gradcheck
    is the check that fails where it fails."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal import autograd_function_db as db
    assert [info.name for info in db.autograd_function_db] == list(CLASSES)
    info = next(info for info in db.autograd_function_db if info.name == name)
    sample = next(iter(info.sample_inputs("cpu", D, requires_grad=True)))
    args = (sample.input, *sample.args)
    try:
        theirs = torch.autograd.gradcheck(info.op, args)
    except Exception:  # ZeroGradients' too-large gradient: autograd refuses it
        theirs = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's, of the Functions themselves
        r = check_function(getattr(db, CLASSES[name]), list(args), output_dir=tmp_path,
                           quiet=True)
    assert r.passed == theirs, (theirs, r.failures)
    assert theirs == ("gradcheck" not in {c.name for c in r.failures}), r.failures
