"""A Function's inputs (demos.lab.checks.inputs): a config's input specs refused, each in one
exact line, where a shape, a value, a dtype or a name cannot be what it says, and numbers as YAML
1.1 writes them taken; the arguments reaching apply as given, an int staying an int and an index
an int64 tensor; a literal value held to what a shape may be."""
from __future__ import annotations

import shutil

import pytest
import torch
import yaml

from demos import ConfigError, check_function
from demos.cli import main
from tests.conftest import cli, run_main
from tests.fixtures import contract_fns as fns
from tests.test_contract import x_
from tests.test_custom_function import FIXTURE
from tests.test_python_api import Doubled
from tests.test_settings import config, function_entry


@pytest.mark.parametrize("inputs, message", [
    ([], "scenarios[0].inputs: must list at least one input, e.g. [{shape: [5, 3]}]"),
    ([{"shape": [2], "value": [1.0, 2.0]}],
     "scenarios[0].inputs[0]: give either shape (random) or value, not both"),
    ([{"shape": [2], "low": 1.0}], "scenarios[0].inputs[0]: give both low and high, or neither"),
    ([{"value": [[1.0, 2.0], [3.0]]}], "scenarios[0].inputs[0].value: rows of different lengths"),
    ([{"name": "x", "shape": [2]}, {"name": "x", "shape": [2]}],
     "scenarios[0].inputs[1].name: duplicate name 'x'"),
    ([{"shape": [1000, 1000]}], "scenarios[0].inputs[0].shape: dimensions must be >= 1 and at "
                                "most 100,000 elements in all (gradcheck's cost grows with them), "
                                "got [1000, 1000]"),
])
def test_input_spec_errors(tmp_path, capsys, inputs, message):
    shutil.copy(FIXTURE, tmp_path / "user_fns.py")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{"scenario": "custom_function",
                                                   "function": "user_fns:Square",
                                                   "inputs": inputs}]}))
    assert main(["--config", str(path)]) == 2
    assert capsys.readouterr().err == f"error: {path}: {message}\n"


@pytest.mark.parametrize("spec, message", [
    ({"value": [1, 2], "dtype": "int46"}, "dtype: 'int46' is not a dtype an input may have "
                                          "(did you mean 'int64'?)"),
    ({"shape": [3], "dtype": "int64"}, "an int64 tensor needs its value"),
    ({"value": [1.5], "dtype": "int64"}, "value[0]: 1.5 in an int64 tensor; give whole numbers"),
    ({"value": [1000, 1, 2], "dtype": "int8"}, "inputs[1].value[0]: 1000 in an int8 tensor; "
                                               "give whole numbers from -128 to 127"),
    ({"value": [[0], [-1]], "dtype": "uint8"}, "inputs[1].value[1][0]: -1 in a uint8 tensor; "
                                               "give whole numbers from 0 to 255"),
    ({"value": [1.0e+39], "dtype": "float32"}, "inputs[1].value[0]: 1e+39 in a float32 tensor; "
                                               "give numbers from -3.40282e+38 to 3.40282e+38"),
    ({"shape": [3], "tensor": False}, "tensor: false passes `value` as it is; shape is for a "
                                      "tensor"),
])
def test_a_wrong_argument_spec_is_one_line(tmp_path, spec, message, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("scenarios:\n- scenario: custom_function\n  function: m:F\n  inputs:\n"
                    f"  - {{shape: [2]}}\n  - {spec}\n".replace("'", '"').replace(
                        "False", "false"))
    assert run_main(tmp_path / "o", "--config", path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_an_input_name_with_a_newline_is_refused(tmp_path, capsys):
    shutil.copy(FIXTURE, tmp_path / "user_fns.py")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{
        "scenario": "custom_function", "function": "user_fns:Square",
        "inputs": [{"name": "a\nstep 9: fake", "shape": [2]}]}]}))
    assert main(["--config", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"error: {path}: scenarios[0].inputs[0].name: a label of 1 to 40 printable characters "
        f"(no newline or control character), got 'a\\nstep 9: fake'\n")


def test_an_input_range_wider_than_a_float_is_a_config_error(tmp_path):
    path = config(tmp_path, {**function_entry("ExpInPlace", "exp"), "inputs": [
        {"name": "x", "shape": [3], "low": -1e308, "high": 1e308}]})
    code, out, err = cli("--config", path, "--print-config")
    assert code == 2 and not out
    assert err == (f"error: {path}: scenarios[0].inputs[0].high: [low, high] = [-1e+308, "
                   f"1e+308] is wider than a float64 holds (high - low overflows: every input "
                   f"would be inf or nan); narrow it\n")


@pytest.mark.slow
def test_a_literal_value_holds_what_a_shape_may(tmp_path):
    """100,000 numbers at most, as for a random input's shape (2 s: the config is read)."""
    with pytest.raises(ConfigError, match=r"scenarios\[0\]\.inputs\[0\]\.value: at most 100,000 "
                                          r"numbers, as for shape .*, got 100,001; pass"):
        check_function(Doubled, inputs=[{"value": [0.5] * 100_001}, (), ()],
                       output_dir=tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_value_lists_take_numbers_as_yaml_1_1_writes_them(tmp_path):
    shutil.copy(FIXTURE, tmp_path / "user_fns.py")
    path = tmp_path / "c.yaml"
    path.write_text("scenarios:\n- scenario: custom_function\n  function: user_fns:Square\n"
                    "  reference: user_fns:square\n  inputs:\n  - {name: x, value: [5e-1, 2]}\n")
    assert main(["--config", str(path), "--no-progress", "--output-dir",
                 str(tmp_path / "out")]) == 0


def test_the_arguments_reach_apply_as_given(tmp_path):
    """dim stays an int, index an int64 tensor; the wrong twin fails gradcheck and parity,
    naming x, not `forward runs`."""
    r = check_function(fns.TakeTwice, inputs={"x": x_(4, 3), "dim": 0,
                                                "index": torch.tensor([2, 0, 2])},
                       reference=fns.take, support=[], output_dir=tmp_path, quiet=True)
    failed = {c.name: c.detail for c in r.failures}
    assert set(failed) == {"gradcheck", "parity with the reference"}
    assert "input 0 (x)" in failed["gradcheck"] and "grad x differs" in failed[
        "parity with the reference"]
    written = (r.folder / "config.yaml").read_text()
    assert "dtype: int64" in written and "tensor: false" in written
