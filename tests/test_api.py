"""demos.scenario_api, the one surface a scenario file imports: cheap to import, every name
there, the scenarios use nothing else of the machinery; and `python -m demos.scenarios.<name>`."""
import ast
import os
import subprocess
import sys

import pytest
import yaml

import demos.scenario_api as api
from demos.scenarios import registry
from tests.conftest import ROOT, only_run_dir, summary

SCENARIOS = sorted((ROOT / "demos" / "scenarios").glob("*.py"))


def test_importing_the_api_and_every_scenario_imports_no_torch():
    code = ("import sys, demos.scenario_api, demos.scenarios as s; s.registry(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'numpy', 'matplotlib')))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr


def test_every_name_resolves_and_is_written_once():
    """Each name the surface offers is written once, in its import (the TYPE_CHECKING block's
    load on first use), and resolves."""
    assert all(getattr(api, name) is not None for name in api.__all__)
    tree = ast.parse((ROOT / "demos" / "scenario_api.py").read_text())
    written = [a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               for a in n.names] + [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert sorted(n for n in written if n in api.__all__) == sorted(set(api.__all__))
    assert {"support", "gradcheck", "Context"} <= set(api.__all__) and "_lazily" not in api.__all__


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_a_scenario_imports_the_machinery_from_demos_api_only(path):
    modules = [n.module for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.ImportFrom) and n.module]
    modules += [a.name for n in ast.walk(ast.parse(path.read_text()))
                if isinstance(n, ast.Import) for a in n.names]
    assert [m for m in modules if m.startswith("demos.") and  # (or another scenario's code)
            not m.startswith(("demos.scenario_api", "demos.documents", "demos.scenarios"))] == []


def test_a_scenario_file_runs_alone_on_its_defaults(tmp_path):
    """The options pass through to the runner; nothing is written outside the run folder."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = subprocess.run([sys.executable, "-m", "demos.scenarios.my_exp", "--output-dir",
                           str(tmp_path / "out"), "--set", "scenarios.my_exp.support=[]"],
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    run_dir = only_run_dir(tmp_path / "out")
    assert "PASSED      my_exp  checks" in proc.stdout and str(run_dir) in proc.stdout
    assert summary(run_dir)["status"] == "passed"
    entry = yaml.safe_load((run_dir / "config.yaml").read_text())["scenarios"]
    assert [(e["scenario"], e["inputs"], e["support"]) for e in entry] == [
        ("my_exp", [1.0, 2.0, 3.0], [])]  # Config()'s inputs; the --set
    assert list(cwd.iterdir()) == []


@pytest.mark.parametrize("given, name", [
    (["--config", "x"], "--config"), (["--ens", "x"], "--ensemble"),
    (["--conf", "x"], "--config"), (["--watch"], "--watch"),
    (["--jobs", "2"], "--jobs")])  # prefixes too
def test_running_alone_refuses_what_needs_a_config_file(capsys, given, name):
    with pytest.raises(SystemExit) as stop:
        api.run_alone(registry()["my_exp"], given)
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        f"error: {name}: python -m demos.scenarios.my_exp runs its scenario once, with its "
        f"shipped config; for {name}, use runner.py with a config\n")


def test_running_alone_has_its_own_help(capsys):
    with pytest.raises(SystemExit) as stop:
        api.run_alone(registry()["my_exp"], ["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m demos.scenarios.my_exp [options]")
    assert "less --config, --ensemble" in out
