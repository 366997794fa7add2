"""No setting bends a verdict (issue 43, item 9): torch's compiler switched off, settings an entry
leaves behind, a custom op name two files define, a file edited between two runs of a process,
forward mode without a rule, a Function that changes its input in place, an integer output, an
input range wider than a float: each judged as alone, fresh, and as torch's gradcheck judges."""
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
    return {k: (r["status"], r["detail"]) for k, r in result.entries[0].support.data[
        function].items()}


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
